package rules

import (
	"slices"

	"go.yaml.in/yaml/v3"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"kgen.dev/kgen/pkg/kinds"
	kschema "kgen.dev/kgen/pkg/schema"
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
	// RandomString generates the value of randomString(n): n characters of
	// [a-zA-Z0-9]. Nil means crypto/rand; PlaceholderRandomString gives
	// the same string every time, for showing rules.
	RandomString func(n int) (string, error)
	// Schemas returns the OpenAPI v3 schema of a kind's objects, as a
	// CustomResourceDefinition version declares it, or false when it is
	// not known. With the parent's schema, every parent.… path in the
	// rule's expressions is type-checked when the rules load. Nil knows no
	// schema; a rule's spec.parent.schema is used then.
	//
	// A child's template is checked against its kind's schema the same
	// way (see Types).
	Schemas func(gvk schema.GroupVersionKind) (*apiextensionsv1.JSONSchemaProps, bool)
	// Types returns the shape of a kind's objects as the API server
	// publishes it in OpenAPI v3 (pkg/schema.Source.Type), or false when
	// it is not known. It is asked about the kinds Schemas does not know:
	// a built-in parent kind's, whose expressions are then type-checked
	// as a CRD parent's, and the children's kinds. A child's template is
	// checked against its kind's schema: a key that is not a field of it
	// (unless the schema keeps unknown fields), and a value whose type
	// cannot fit the field (an expression's static CEL type, an
	// interpolated string, a literal mapping or list), is an error. Nil
	// knows no kind.
	Types func(gvk schema.GroupVersionKind) (*kschema.Type, bool)
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
	// ServiceAccount, when set, is spec.serviceAccount: every write of the
	// rule's children is made as this ServiceAccount (impersonation), so
	// the rule can do no more than it may.
	ServiceAccount *ServiceAccount
	// Inputs are the objects the rule reads besides its parent and
	// children (spec.inputs), in the order of the file.
	Inputs []*Input
	// Children are the templated children, in the order of the file.
	Children []*Child
	// Status are the fields written under the parent's .status, in the
	// order of the file; empty when the rule has none.
	Status []*StatusField

	order []*Child
	byID  map[string]*Child
	// source is what the rule was compiled from, for CheckSchema.
	source *source
}

// source is the file a rule was read from, and how it was compiled.
type source struct {
	file string
	data []byte
	opts Options
	// digest identifies the rule's document (see documentDigest), and
	// version what it says (see versionDigest).
	digest  [32]byte
	version string
	// document is the version as a Rule object's JSON (see Document).
	document []byte
	// object is set for a Rule object's YAML (see parse).
	object bool
}

// SameDocument reports whether two rules were compiled from the same
// document at the same place of the same file: the same rule, read again
// because another rule of its file changed. Whoever keeps rules by
// identity (the controller does) can keep the one it has. Rules made in
// memory, with no file, are never the same.
func (r *Rule) SameDocument(o *Rule) bool {
	if r == o {
		return true
	}
	if r == nil || o == nil || r.source == nil || o.source == nil {
		return false
	}
	return r.source.file == o.source.file && r.source.digest == o.source.digest
}

// Version identifies what the rule's document says, its name and its spec,
// as "sha256:HEX": the same for the same rule wherever it is in its file
// and however it is laid out, and different for any change of the spec.
// kgen records the version of each rule that runs, to know after a restart
// whether a rule ran before. It is "" for a rule made in memory.
func (r *Rule) Version() string {
	if r.source == nil {
		return ""
	}
	return r.source.version
}

// Document returns the rule's name and spec as a Rule object's JSON, from
// which FromObject compiles the same version (the same Version): kgen
// records it with the version of each rule that runs, so that a restart
// can run it again in place of a new version that does not start. It is
// nil for a rule made in memory, and for a Rule object's (its status
// keeps the version that runs). The caller must not change it.
func (r *Rule) Document() []byte {
	if r.source == nil {
		return nil
	}
	return r.source.document
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
	return obj.GroupVersionKind() == r.Parent.GroupVersionKind && r.selectsObject(obj)
}

// SelectsInAnyVersion is Selects for an object of the rule's parent kind
// read in any version (a version served beside, or instead of, the rule's):
// it compares only the group and kind.
func (r *Rule) SelectsInAnyVersion(obj *unstructured.Unstructured) bool {
	return obj.GroupVersionKind().GroupKind() == r.Parent.GroupVersionKind.GroupKind() && r.selectsObject(obj)
}

// selectsObject tells whether obj is in one of the rule's namespaces (when
// the rule names some) and its labels match the rule's selector.
func (r *Rule) selectsObject(obj *unstructured.Unstructured) bool {
	if len(r.Parent.Namespaces) > 0 && !slices.Contains(r.Parent.Namespaces, obj.GetNamespace()) {
		return false
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
	// Schema is the OpenAPI v3 schema of the parent's spec, from
	// spec.parent.schema; nil when the rule has none. See Rule.CRD.
	Schema *apiextensionsv1.JSONSchemaProps
	// TypeChecked tells whether the rule's expressions were checked against
	// the parent's schema (Options.Schemas, or Schema) when they loaded.
	TypeChecked bool
}

// Input is an object a rule reads that is neither its parent nor a child:
// inputs.<id> in expressions.
type Input struct {
	// ID is unique among the rule's inputs and matches [a-z][a-z0-9_]*.
	ID string
	// Pos is where the input's entry starts.
	Pos Position
	// GroupVersionKind is the input's literal apiVersion and kind.
	GroupVersionKind schema.GroupVersionKind
	// Name is the input's name: a string template of parent; nil for a
	// selector input.
	Name *Template
	// Namespace is the input's namespace: a string template of parent; nil
	// for the parent's namespace (for a namespaced kind).
	Namespace *Template
	// inParentNamespace is set when Namespace is exactly
	// ${parent.metadata.namespace}: placed (watched, granted) as if it
	// were absent.
	inParentNamespace bool
	// LabelSelector selects the input's objects instead of Name; nil for a
	// named input. Selector is it compiled.
	LabelSelector *metav1.LabelSelector
	Selector      labels.Selector
}

// ForEach is one entry of a child's forEach: Name is bound, in turn, to each
// element of the list (or each {key, value} of the map) Expr returns.
type ForEach struct {
	Name string
	Expr *Expression

	maxBytes int
}

// DeletionPolicy says what happens to a child that is pruned, or whose
// parent goes.
type DeletionPolicy string

// The deletion policies.
const (
	// DeletionDelete deletes the child (the default).
	DeletionDelete DeletionPolicy = "Delete"
	// DeletionOrphan leaves the child, without kgen's ownerReference and
	// labels.
	DeletionOrphan DeletionPolicy = "Orphan"
)

// UpdatePolicy says whether kgen keeps a child equal to its template.
type UpdatePolicy string

// The update policies.
const (
	// UpdateApply applies the template whenever the child differs (the
	// default).
	UpdateApply UpdatePolicy = "Apply"
	// UpdateCreateOnly creates the child once and never writes it again:
	// for generated passwords (randomString).
	UpdateCreateOnly UpdatePolicy = "CreateOnly"
)

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
	// ForEach, when set, makes the child one object per element of the
	// cartesian product of its entries, in the order written. Empty for an
	// ordinary child.
	ForEach []*ForEach
	// DeletionPolicy is spec.children[].deletionPolicy; DeletionDelete by
	// default.
	DeletionPolicy DeletionPolicy
	// UpdatePolicy is spec.children[].updatePolicy; UpdateApply by default.
	UpdatePolicy UpdatePolicy
	// DependsOn are the ids of the children that the template, includeWhen
	// and forEach read through children.<id>, in the rule's order. The
	// child is rendered only once they all exist.
	DependsOn []string
	// Inputs are the ids of the inputs that the template, includeWhen and
	// forEach read, in the rule's order. The child waits while a named one
	// is missing.
	Inputs []string

	// namespace is what the template's metadata.namespace is,
	// namespaceLiteral its value when it is a literal, and namespaceSource
	// its text as written.
	namespace        namespaceForm
	namespaceLiteral string
	namespaceSource  string
	templatedRoleRef bool
	// nameNode is the template's metadata.name, where the rules file
	// says it; nil if the template has none.
	nameNode *yaml.Node
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

// ServiceAccount names a ServiceAccount.
type ServiceAccount struct {
	Namespace, Name string
}

// UserName is the name the API server knows the ServiceAccount by, which
// kgen impersonates: system:serviceaccount:NAMESPACE:NAME.
func (s ServiceAccount) UserName() string {
	return "system:serviceaccount:" + s.Namespace + ":" + s.Name
}
