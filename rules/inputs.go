package rules

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/validation/path"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	"kgen.dev/kgen/pkg/kinds"
)

// InputRef is what one input of a rule reads for one parent: one object by
// name, or the objects a selector matches.
type InputRef struct {
	// ID is the input's id: inputs.<id> in expressions.
	ID string
	// GroupVersionKind is the input's kind.
	GroupVersionKind schema.GroupVersionKind
	// Namespace is where the input is read: "" for a cluster-scoped kind,
	// and for a selector input of a cluster-scoped parent that names no
	// namespace, every namespace.
	Namespace string
	// Name is the object's name; "" for a selector input.
	Name string
	// Selector selects the objects of a selector input; nil for a named
	// input.
	Selector labels.Selector
}

// Matches tells whether obj is the input's object, or one of them.
func (in InputRef) Matches(obj *unstructured.Unstructured) bool {
	if obj.GroupVersionKind() != in.GroupVersionKind {
		return false
	}
	if in.Namespace != "" && obj.GetNamespace() != in.Namespace {
		return false
	}
	if in.Selector == nil {
		return obj.GetName() == in.Name
	}
	return in.Selector.Matches(labels.Set(obj.GetLabels()))
}

// InputRefs resolves the rule's inputs for a parent: their name and
// namespace templates evaluated with the parent, the namespace defaulting
// to the parent's for a namespaced kind. The controller reads (and
// watches, and indexes) these objects; Render takes what it found in
// Observed.Inputs. An error is an *Error naming the input's field.
func (r *Rule) InputRefs(parent *unstructured.Unstructured, scope kinds.Scoper) ([]InputRef, error) {
	vars := NewVars(parent.Object, nil, nil)
	var out []InputRef
	for i, in := range r.Inputs {
		fail := func(field string, format string, args ...any) error {
			return &Error{Pos: in.Pos, Rule: r.Name, Field: fmt.Sprintf("spec.inputs[%d]%s", i, field), Err: fmt.Errorf(format, args...)}
		}
		ref := InputRef{ID: in.ID, GroupVersionKind: in.GroupVersionKind, Selector: in.Selector}
		namespaced, err := scope.Namespaced(in.GroupVersionKind)
		if err != nil {
			return nil, fail("", "input %s: %w", in.ID, err)
		}
		if in.Name != nil {
			name, err := evalString(in.Name, vars)
			if err != nil {
				return nil, err
			}
			if msgs := path.IsValidPathSegmentName(name); name == "" || len(msgs) > 0 {
				return nil, fail(".name", "%q is not a valid name: %s", name, strings.Join(msgs, "; "))
			}
			ref.Name = name
		}
		switch {
		case !namespaced && in.Namespace != nil:
			return nil, fail(".namespace", "%s is cluster-scoped: its objects have no namespace", in.GroupVersionKind.Kind)
		case !namespaced:
		case in.Namespace != nil:
			ns, err := evalString(in.Namespace, vars)
			if err != nil {
				return nil, err
			}
			if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
				return nil, fail(".namespace", "%q is not a valid namespace name: %s", ns, strings.Join(msgs, "; "))
			}
			ref.Namespace = ns
		case parent.GetNamespace() != "":
			ref.Namespace = parent.GetNamespace()
		case in.Name != nil:
			return nil, fail("", "the parent is cluster-scoped, so an input of namespaced %s must name its namespace", in.GroupVersionKind.Kind)
		}
		out = append(out, ref)
	}
	return out, nil
}

// evalString evaluates a template that must be a string.
func evalString(t *Template, vars *Vars) (string, error) {
	v, _, err := t.Evaluate(vars)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", &Error{Rule: t.rule, Field: t.field, Err: fmt.Errorf("must be a string, not %T", v)}
	}
	return s, nil
}

// InputPlacement is where one input of a rule can be read.
type InputPlacement struct {
	// ID is the input's id.
	ID string
	// GroupVersionKind is the input's kind.
	GroupVersionKind schema.GroupVersionKind
	// Scope is the scope of the input's kind; kinds.ScopeUnknown when the
	// Scoper did not know it.
	Scope kinds.Scope
	// Namespaces are the namespaces the input can be in; nil means any,
	// and is what a cluster-scoped kind has.
	Namespaces []string
}

// inputPlacements places the rule's inputs, given the parents' placement.
func (r *Rule) inputPlacements(scope kinds.Scoper, p *Placement) ([]InputPlacement, error) {
	var out []InputPlacement
	for _, in := range r.Inputs {
		s, err := scopeOf(scope, in.GroupVersionKind)
		if err != nil {
			return nil, fmt.Errorf("input %q: %w", in.ID, err)
		}
		ip := InputPlacement{ID: in.ID, GroupVersionKind: in.GroupVersionKind, Scope: s}
		if s == kinds.Namespaced {
			switch {
			case in.Namespace != nil && !in.inParentNamespace:
				if ns, ok := in.Namespace.Literal(); ok {
					ip.Namespaces = []string{ns.(string)}
				}
			case p.ParentScope == kinds.Namespaced:
				ip.Namespaces = p.ParentNamespaces
			}
		}
		out = append(out, ip)
	}
	return out, nil
}
