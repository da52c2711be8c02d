package rules

import (
	"errors"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"kgen.dev/kgen/pkg/kinds"
)

// Placement is where a rule's objects live and how kgen cleans up its
// children: the one answer that the renderer, pkg/rbac and the controller's
// watches share. It is computed from the rule and the scope of its kinds by
// Rule.Placement.
type Placement struct {
	// ParentScope is the scope of the parent's kind; kinds.ScopeUnknown when
	// the Scoper did not know it (kgenctl rbac with a resource named
	// without its scope).
	ParentScope kinds.Scope
	// ParentNamespaces are the namespaces the rule's parents can be in: the
	// rule's spec.parent.namespaces for a namespaced parent kind; nil for
	// every namespace, and for a cluster-scoped parent kind.
	ParentNamespaces []string
	// EventNamespaces are the namespaces of the Events kgen records about
	// the parents: the parents' own for a namespaced kind (nil: every
	// namespace), "default" for a cluster-scoped kind, where Kubernetes
	// records Events about cluster-scoped objects.
	EventNamespaces []string
	// Children are the children's placements, in the rule's order.
	Children []ChildPlacement
	// Inputs are the inputs' placements, in the rule's order.
	Inputs []InputPlacement
}

// ChildPlacement is where one child of a rule can live.
type ChildPlacement struct {
	// ID is the child's id.
	ID string
	// GroupVersionKind is the child's kind.
	GroupVersionKind schema.GroupVersionKind
	// Scope is the scope of the child's kind; kinds.ScopeUnknown when the
	// Scoper did not know it.
	Scope kinds.Scope
	// Namespaces are the namespaces the child can live in; nil means any
	// namespace, and is what a cluster-scoped child has.
	Namespaces []string
	// Ownership says whether the child gets an ownerReference to its
	// parent, or needs the parent's finalizer.
	Ownership Ownership
}

// Ownership is how a child is cleaned up when its parent goes.
type Ownership int

const (
	// OwnerReference: the child always gets a controller ownerReference to
	// its parent, and Kubernetes' garbage collector deletes it: the parent
	// is cluster-scoped, or both live in one namespace.
	OwnerReference Ownership = iota
	// Finalizer: the child never gets an ownerReference (a cluster-scoped
	// child of a namespaced parent, or a child with deletionPolicy Orphan),
	// so the parent's finalizer lets kgen delete it, or let it go.
	Finalizer
	// OwnerReferenceInParentNamespace: the child gets an ownerReference
	// when it is in its parent's namespace, and needs the parent's
	// finalizer otherwise (a namespaced parent whose child may live in
	// another namespace, or a kind of unknown scope).
	OwnerReferenceInParentNamespace
)

// OwnerReference tells whether a child in namespace gets an ownerReference
// to a parent in parentNamespace ("" for cluster-scoped objects).
func (c ChildPlacement) OwnerReference(parentNamespace, namespace string) bool {
	switch c.Ownership {
	case OwnerReference:
		return true
	case Finalizer:
		return false
	}
	return parentNamespace == "" || parentNamespace == namespace
}

// Placement says where the rule's objects live, given the scope of its
// parent's and children's kinds. A scope the Scoper does not know (an error
// matching kinds.ErrUnknownScope) is kinds.ScopeUnknown in the answer,
// which then covers both scopes; any other error of the Scoper is returned,
// naming the parent or the child.
//
// A child's namespaces are those of its template's metadata.namespace: the
// parent's (absent, or exactly ${parent.metadata.namespace}), the literal
// it names, or, for an expression, the parent's and those the rule allows
// in spec.allowCrossNamespace (any, for a cluster-scoped parent of a rule
// without that list).
//
// When the rule declares its parent's scope (spec.parent.scope) and the
// Scoper disagrees, the error is a *Error naming that field.
func (r *Rule) Placement(scope kinds.Scoper) (*Placement, error) {
	ps, err := scopeOf(scope, r.Parent.GroupVersionKind)
	if err != nil {
		return nil, fmt.Errorf("scope of the parent: %w", err)
	}
	if r.Parent.Scope != kinds.ScopeUnknown && ps != kinds.ScopeUnknown && ps != r.Parent.Scope {
		names := map[kinds.Scope]string{kinds.Namespaced: "namespaced", kinds.Cluster: "cluster-scoped"}
		return nil, &Error{Pos: r.Pos, Rule: r.Name, Field: "spec.parent.scope",
			Err: fmt.Errorf("the rule takes %s as %s, but it is %s", r.Parent.GroupVersionKind.GroupKind(), names[r.Parent.Scope], names[ps])}
	}
	p := &Placement{ParentScope: ps}
	switch ps {
	case kinds.Namespaced:
		if len(r.Parent.Namespaces) > 0 {
			p.ParentNamespaces = slices.Clone(r.Parent.Namespaces)
		}
		p.EventNamespaces = p.ParentNamespaces
	case kinds.Cluster:
		p.EventNamespaces = []string{metav1.NamespaceDefault}
	}
	for _, c := range r.Children {
		cs, err := scopeOf(scope, c.GroupVersionKind)
		if err != nil {
			return nil, fmt.Errorf("child %q: %w", c.ID, err)
		}
		cp := ChildPlacement{ID: c.ID, GroupVersionKind: c.GroupVersionKind, Scope: cs}
		switch {
		case cs == kinds.Cluster:
			switch ps {
			case kinds.Cluster:
				cp.Ownership = OwnerReference
			case kinds.Namespaced:
				cp.Ownership = Finalizer
			default:
				cp.Ownership = OwnerReferenceInParentNamespace
			}
		case ps == kinds.Cluster:
			// A namespaced child of a cluster-scoped parent names its
			// namespace; the parent can own it wherever it is.
			cp.Namespaces = r.childNamespaces(c, p.ParentNamespaces, ps)
			cp.Ownership = OwnerReference
		case c.namespace == nsAbsent || c.namespace == nsParent:
			// In the parent's namespace, whatever its scope turns out to
			// be: a cluster-scoped parent cannot have such a child.
			cp.Namespaces = p.ParentNamespaces
			if ps == kinds.ScopeUnknown {
				cp.Namespaces = nil
			}
			cp.Ownership = OwnerReference
			if cs == kinds.ScopeUnknown {
				cp.Ownership = OwnerReferenceInParentNamespace
			}
		default:
			// Another namespace than the parent's, maybe.
			cp.Namespaces = r.childNamespaces(c, p.ParentNamespaces, ps)
			cp.Ownership = OwnerReferenceInParentNamespace
		}
		if cs == kinds.ScopeUnknown {
			cp.Namespaces = nil
		}
		if c.DeletionPolicy == DeletionOrphan {
			// An ownerReference would let the garbage collector delete the
			// child with its parent (foreground deletion deletes it even
			// before kgen could act): the finalizer lets kgen let it go.
			cp.Ownership = Finalizer
		}
		p.Children = append(p.Children, cp)
	}
	inputs, err := r.inputPlacements(scope, p)
	if err != nil {
		return nil, err
	}
	p.Inputs = inputs
	return p, nil
}

// childNamespaces are the namespaces a template that names its namespace
// can put its child in, given the namespaces its parent can be in (nil for
// any, or a cluster-scoped parent): the literal; for an expression, the
// parent's and those of spec.allowCrossNamespace, or any (nil) when the
// parent may be in any namespace or the rule has no such list.
func (r *Rule) childNamespaces(c *Child, parentNamespaces []string, parentScope kinds.Scope) []string {
	switch {
	case c.namespace == nsLiteral:
		return []string{c.namespaceLiteral}
	case len(r.AllowCrossNamespace) == 0:
		return nil
	case parentScope == kinds.Cluster:
		return slices.Clone(r.AllowCrossNamespace)
	case parentScope == kinds.Namespaced && parentNamespaces != nil:
		return union(parentNamespaces, r.AllowCrossNamespace)
	}
	return nil
}

// Child returns the placement of the child with the given id, or nil.
func (p *Placement) Child(id string) *ChildPlacement {
	for i := range p.Children {
		if p.Children[i].ID == id {
			return &p.Children[i]
		}
	}
	return nil
}

// MayNeedFinalizer tells whether some child may live where its parent
// cannot own it, so that the parent may need kgen's cleanup finalizer.
func (p *Placement) MayNeedFinalizer() bool {
	for _, c := range p.Children {
		if c.Ownership != OwnerReference {
			return true
		}
	}
	return false
}

// MayOwn tells whether some child may get an ownerReference to its parent.
func (p *Placement) MayOwn() bool {
	for _, c := range p.Children {
		if c.Ownership != Finalizer {
			return true
		}
	}
	return false
}

// ParentWatchNamespaces are the namespaces in which the controller watches
// the rule's parents: metav1.NamespaceAll ("") alone for every namespace.
func (p *Placement) ParentWatchNamespaces() []string {
	if p.ParentNamespaces == nil {
		return []string{metav1.NamespaceAll}
	}
	return slices.Clone(p.ParentNamespaces)
}

// ChildWatchNamespaces returns, for each child kind of the rule, the
// namespaces in which the controller watches it, in the rule's order of
// first use: metav1.NamespaceAll ("") alone for every namespace, which is
// also what a cluster-scoped kind gets. Watching only these is enough to
// see every child the rule can make, and is what pkg/rbac grants.
func (p *Placement) ChildWatchNamespaces() map[schema.GroupVersionKind][]string {
	return watchNamespaces(func(yield func(schema.GroupVersionKind, []string)) {
		for _, c := range p.Children {
			yield(c.GroupVersionKind, c.Namespaces)
		}
	})
}

// watchNamespaces merges the namespaces of kinds: NamespaceAll alone once a
// kind may be anywhere (nil).
func watchNamespaces(each func(yield func(schema.GroupVersionKind, []string))) map[schema.GroupVersionKind][]string {
	out := map[schema.GroupVersionKind][]string{}
	all := map[schema.GroupVersionKind]bool{}
	each(func(gvk schema.GroupVersionKind, namespaces []string) {
		switch {
		case all[gvk]:
		case namespaces == nil:
			all[gvk] = true
			out[gvk] = []string{metav1.NamespaceAll}
		default:
			out[gvk] = union(out[gvk], namespaces)
		}
	})
	return out
}

// InputWatchNamespaces returns, for each input kind of the rule, the
// namespaces in which the controller watches it, as ChildWatchNamespaces
// does for children.
func (p *Placement) InputWatchNamespaces() map[schema.GroupVersionKind][]string {
	return watchNamespaces(func(yield func(schema.GroupVersionKind, []string)) {
		for _, in := range p.Inputs {
			yield(in.GroupVersionKind, in.Namespaces)
		}
	})
}

// scopeOf asks a Scoper for a kind's scope.
func scopeOf(s kinds.Scoper, gvk schema.GroupVersionKind) (kinds.Scope, error) {
	namespaced, err := s.Namespaced(gvk)
	switch {
	case errors.Is(err, kinds.ErrUnknownScope):
		return kinds.ScopeUnknown, nil
	case err != nil:
		return kinds.ScopeUnknown, err
	case namespaced:
		return kinds.Namespaced, nil
	}
	return kinds.Cluster, nil
}

// union returns a's items followed by those of b that a lacks.
func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, s := range b {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
