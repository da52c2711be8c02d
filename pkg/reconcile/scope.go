package reconcile

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"kgen.dev/kgen/pkg/kinds"
	"kgen.dev/kgen/rules"
)

// Scoper tells whether a kind is namespaced. It is kinds.Scoper, kept under
// this name for the Reconciler's discovery-backed scoper.
type Scoper = kinds.Scoper

// AssumeScopes makes s answer, for the parent's kind and its rules'
// children's kinds that s does not know, what kgenctl render assumes
// without their CustomResourceDefinitions (contract section 4):
//
//   - the parent's kind has the scope a rule declares (spec.parent.scope),
//     or else is namespaced when the parent has metadata.namespace, and
//     cluster-scoped otherwise;
//   - a child's kind is namespaced when its template sets
//     metadata.namespace, and otherwise has the parent's scope.
//
// The first child of a kind decides for that kind. AssumeScopes returns one
// sentence for each assumption it made, for the user to check.
func AssumeScopes(s *kinds.Static, parent *unstructured.Unstructured, rs []*rules.Rule) []string {
	var notes []string
	scopeName := map[bool]string{true: "namespaced", false: "cluster-scoped"}
	unknown := func(gvk schema.GroupVersionKind) bool {
		_, err := s.Namespaced(gvk)
		return err != nil && !s.HasCRD(gvk.GroupKind())
	}
	pgvk := parent.GroupVersionKind()
	if unknown(pgvk) {
		namespaced := parent.GetNamespace() != ""
		why := "the parent has no metadata.namespace"
		if namespaced {
			why = "the parent has metadata.namespace"
		}
		for _, r := range rs {
			if r.Parent.Scope != kinds.ScopeUnknown {
				namespaced = r.Parent.Scope == kinds.Namespaced
				why = fmt.Sprintf("rule %s says so in spec.parent.scope", r.Name)
				break
			}
		}
		s.Assume(pgvk.GroupKind(), namespaced)
		notes = append(notes, fmt.Sprintf("%s is taken as %s: %s and no CustomResourceDefinition for it was given", describeGVK(pgvk), scopeName[namespaced], why))
	}
	parentNamespaced, err := s.Namespaced(pgvk)
	if err != nil {
		return notes // a version its CRD does not declare: Render says so
	}
	for _, r := range rs {
		for _, c := range r.Children {
			if !unknown(c.GroupVersionKind) {
				continue
			}
			namespaced := parentNamespaced
			why := "like its parent"
			if c.Template.Sets("metadata", "namespace") {
				namespaced, why = true, "since its template sets metadata.namespace"
			}
			s.Assume(c.GroupVersionKind.GroupKind(), namespaced)
			notes = append(notes, fmt.Sprintf("%s (rule %s, child %s) is taken as %s, %s: no CustomResourceDefinition for it was given",
				describeGVK(c.GroupVersionKind), r.Name, c.ID, scopeName[namespaced], why))
		}
	}
	return notes
}

func describeGVK(gvk schema.GroupVersionKind) string {
	return fmt.Sprintf("kind %s (apiVersion %s)", gvk.Kind, gvk.GroupVersion())
}
