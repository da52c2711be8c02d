package rules

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"kgen.dev/kgen/pkg/kinds"
)

// APIVersion and Kind are what every rules document must declare.
const (
	APIVersion = "kgen.dev/v1alpha1"
	Kind       = "Rule"
)

// Defaults for the zero values of Options.
const (
	// DefaultCostLimit is Kubernetes' own per-expression limit for CEL in
	// validation rules, roughly a tenth of a second of evaluation.
	DefaultCostLimit = 1_000_000
	// DefaultMaxOutputBytes is etcd's default request size limit (1.5 MiB):
	// a larger object could not be stored anyway.
	DefaultMaxOutputBytes = 3 << 19
)

// Options tune how rules are compiled. The zero value selects the defaults.
type Options struct {
	// CostLimit bounds the runtime cost of evaluating one expression, in CEL
	// cost units (see cel.CostLimit). An evaluation over it stops at once
	// with an error matching ErrLimitExceeded. Zero means DefaultCostLimit.
	CostLimit uint64
	// MaxOutputBytes bounds the size of one evaluated template (a child
	// object, a status field), counted as its JSON encoding. Zero means
	// DefaultMaxOutputBytes.
	MaxOutputBytes int
}

func (o Options) withDefaults() Options {
	if o.CostLimit == 0 {
		o.CostLimit = DefaultCostLimit
	}
	if o.MaxOutputBytes <= 0 {
		o.MaxOutputBytes = DefaultMaxOutputBytes
	}
	return o
}

// Rule is one loaded, validated and compiled rule. Rules are immutable once
// loaded and safe for concurrent use.
type Rule struct {
	// Name is the rule's metadata.name, unique among the loaded rules and a
	// valid label value (children carry it in the kgen.dev/rule label).
	Name string
	// Pos is where the rule's document starts.
	Pos Position
	// Parent says which objects the rule applies to.
	Parent Parent
	// AllowCrossNamespace are the namespaces, other than the parent's, that
	// the rule's children may be in (spec.allowCrossNamespace); empty for
	// none. A rule of a cluster-scoped parent without the list may put its
	// children in any namespace.
	AllowCrossNamespace []string
	// AllowBindRoles are the roles that RoleBinding and ClusterRoleBinding
	// templates may name by an expression in roleRef.name
	// (spec.allowBindRoles); empty when none may.
	AllowBindRoles []string
	// Children are the templated children, in the order of the file.
	Children []*Child
	// Status are the fields written under the parent's .status, in the
	// order of the file; empty when the rule has none.
	Status []*StatusField

	order []*Child
	byID  map[string]*Child
}

// Child returns the child with the given id, or nil.
func (r *Rule) Child(id string) *Child { return r.byID[id] }

// Order returns the children in dependency order: every child comes after the
// children it reads. Among independent children the file's order is kept.
func (r *Rule) Order() []*Child { return r.order }

// AllowsNamespace tells whether a child of a parent in parentNamespace ("" for
// a cluster-scoped parent) may be in namespace: the parent's own, one of
// AllowCrossNamespace, or, for a cluster-scoped parent of a rule without
// that list, any.
func (r *Rule) AllowsNamespace(parentNamespace, namespace string) bool {
	switch {
	case parentNamespace != "" && namespace == parentNamespace:
		return true
	case len(r.AllowCrossNamespace) > 0:
		return slices.Contains(r.AllowCrossNamespace, namespace)
	}
	return parentNamespace == ""
}

// Selects tells whether obj is a parent of this rule: its apiVersion and kind
// are the rule's, it is in one of the rule's namespaces (when the rule names
// some) and its labels match the rule's selector.
func (r *Rule) Selects(obj *unstructured.Unstructured) bool {
	if obj.GroupVersionKind() != r.Parent.GroupVersionKind {
		return false
	}
	if len(r.Parent.Namespaces) > 0 {
		found := false
		for _, ns := range r.Parent.Namespaces {
			if ns == obj.GetNamespace() {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return r.Parent.Selector.Matches(labels.Set(obj.GetLabels()))
}

// Parent is the kind of object a rule applies to, and which of them.
type Parent struct {
	// GroupVersionKind is parsed from spec.parent.apiVersion and kind.
	GroupVersionKind schema.GroupVersionKind
	// LabelSelector is spec.parent.selector as written; nil when absent.
	LabelSelector *metav1.LabelSelector
	// Selector is LabelSelector compiled; labels.Everything() when absent.
	Selector labels.Selector
	// Namespaces limits the rule to parents in these namespaces; empty means
	// every namespace.
	Namespaces []string
	// Scope is the parent kind's scope when it is known at load time: a
	// built-in kind's, or spec.parent.scope; kinds.ScopeUnknown otherwise.
	Scope kinds.Scope
}

// Child is one templated child of a rule.
type Child struct {
	// ID is unique within the rule, matches [a-z][a-z0-9_]*, and is a valid
	// label value (children carry it in the kgen.dev/child label).
	ID string
	// Pos is where the child's entry starts.
	Pos Position
	// GroupVersionKind is the template's literal apiVersion and kind.
	GroupVersionKind schema.GroupVersionKind
	// Template is the compiled template: a full Kubernetes object.
	Template *Template
	// IncludeWhen are conditions that must all be true for the child to
	// exist; empty means always.
	IncludeWhen []*Expression
	// ReadyWhen are conditions on the observed child (self) that must all be
	// true for it to count as ready; empty means ready once it exists.
	ReadyWhen []*Expression
	// DependsOn are the ids of the children that the template and
	// includeWhen read through children.<id>, in the rule's order. The child
	// is rendered only once they all exist.
	DependsOn []string

	// namespace is what the template's metadata.namespace is, and
	// namespaceLiteral its value when it is a literal.
	namespace        namespaceForm
	namespaceLiteral string
	templatedRoleRef bool
}

// TemplatedRoleRef tells whether the child is a RoleBinding or
// ClusterRoleBinding whose template computes roleRef.name with an
// expression, so that the role it binds must be one of the rule's
// AllowBindRoles.
func (c *Child) TemplatedRoleRef() bool { return c.templatedRoleRef }

// namespaceForm is the form of a template's metadata.namespace.
type namespaceForm int

const (
	nsAbsent     namespaceForm = iota // not set: the parent's namespace
	nsParent                          // exactly ${parent.metadata.namespace}
	nsLiteral                         // a literal namespace
	nsExpression                      // any other expression
)

// StatusField is one field the rule writes under the parent's .status.
type StatusField struct {
	// Name is the field's key under .status.
	Name string
	// Value is the field's compiled value.
	Value *Template
}
