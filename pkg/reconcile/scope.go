package reconcile

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"kgen.dev/kgen/pkg/kinds"
	"kgen.dev/kgen/rules"
)

// Scoper tells whether a kind is namespaced (true) or cluster-scoped.
//
// The controller answers from discovery (a RESTMapper); kgenctl render,
// which works without a cluster, uses a StaticScoper.
type Scoper interface {
	Namespaced(gvk schema.GroupVersionKind) (bool, error)
}

// ErrUnknownKind is matched by the error a StaticScoper returns for a kind it
// does not know.
var ErrUnknownKind = errors.New("unknown kind")

// StaticScoper knows the scope of Kubernetes' built-in kinds (from package
// kinds) and of the custom resources whose CustomResourceDefinitions were
// added to it. It never guesses: any other kind is an error matching
// ErrUnknownKind.
//
// Built-in kinds are known by group and kind, whatever the version; custom
// resources by group, kind and the versions their CRD declares.
type StaticScoper struct {
	crds    map[schema.GroupKind]crdScope
	assumed map[schema.GroupKind]bool
}

type crdScope struct {
	namespaced bool
	versions   []string
}

var _ Scoper = (*StaticScoper)(nil)

// NewStaticScoper returns a StaticScoper that knows the built-in kinds.
func NewStaticScoper() *StaticScoper {
	return &StaticScoper{crds: map[schema.GroupKind]crdScope{}, assumed: map[schema.GroupKind]bool{}}
}

// Namespaced tells whether the kind is namespaced.
func (s *StaticScoper) Namespaced(gvk schema.GroupVersionKind) (bool, error) {
	gk := gvk.GroupKind()
	if c, ok := s.crds[gk]; ok {
		if !slices.Contains(c.versions, gvk.Version) {
			return false, fmt.Errorf("%w: %s: its CustomResourceDefinition declares versions %s, not %s",
				ErrUnknownKind, gk, strings.Join(c.versions, ", "), gvk.Version)
		}
		return c.namespaced, nil
	}
	if r, ok := kinds.Builtin(gk); ok {
		return r.Namespaced, nil
	}
	if namespaced, ok := s.assumed[gk]; ok {
		return namespaced, nil
	}
	return false, fmt.Errorf("%w: %s is not a built-in kind and no CustomResourceDefinition for it was given", ErrUnknownKind, describeGVK(gvk))
}

// AddCRD learns the scope of a custom resource from its
// apiextensions.k8s.io/v1 CustomResourceDefinition.
func (s *StaticScoper) AddCRD(crd *unstructured.Unstructured) error {
	if gvk := crd.GroupVersionKind(); gvk.Group != "apiextensions.k8s.io" || gvk.Kind != "CustomResourceDefinition" {
		return fmt.Errorf("%s %q is not a CustomResourceDefinition", gvk.Kind, crd.GetName())
	}
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind")
	scope, _, _ := unstructured.NestedString(crd.Object, "spec", "scope")
	if group == "" || kind == "" {
		return fmt.Errorf("CustomResourceDefinition %q: spec.group and spec.names.kind are required", crd.GetName())
	}
	var c crdScope
	switch scope {
	case "Namespaced":
		c.namespaced = true
	case "Cluster":
	default:
		return fmt.Errorf("CustomResourceDefinition %q: spec.scope must be Namespaced or Cluster, not %q", crd.GetName(), scope)
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		if m, ok := v.(map[string]any); ok {
			if name, ok := m["name"].(string); ok && name != "" {
				c.versions = append(c.versions, name)
			}
		}
	}
	if len(c.versions) == 0 {
		return fmt.Errorf("CustomResourceDefinition %q: spec.versions names no version", crd.GetName())
	}
	s.crds[schema.GroupKind{Group: group, Kind: kind}] = c
	return nil
}

// Assume makes the scoper answer for a kind it does not otherwise know, in
// any version. It does not change the answer for a built-in kind or a kind
// whose CustomResourceDefinition was added.
func (s *StaticScoper) Assume(gk schema.GroupKind, namespaced bool) {
	s.assumed[gk] = namespaced
}

// AssumeScopes makes s answer, for the parent's kind and its rules'
// children's kinds that s does not know, what kgenctl render assumes
// without their CustomResourceDefinitions (contract section 4):
//
//   - the parent's kind is namespaced when the parent has
//     metadata.namespace, and cluster-scoped otherwise;
//   - a child's kind is namespaced when its template sets
//     metadata.namespace, and otherwise has the parent's scope.
//
// The first child of a kind decides for that kind. AssumeScopes returns one
// sentence for each assumption it made, for the user to check.
func AssumeScopes(s *StaticScoper, parent *unstructured.Unstructured, rs []*rules.Rule) []string {
	var notes []string
	unknown := func(gvk schema.GroupVersionKind) bool {
		_, err := s.Namespaced(gvk)
		return errors.Is(err, ErrUnknownKind) && s.crds[gvk.GroupKind()].versions == nil
	}
	scopeName := map[bool]string{true: "namespaced", false: "cluster-scoped"}
	pgvk := parent.GroupVersionKind()
	if unknown(pgvk) {
		namespaced := parent.GetNamespace() != ""
		s.Assume(pgvk.GroupKind(), namespaced)
		why := "the parent has no metadata.namespace"
		if namespaced {
			why = "the parent has metadata.namespace"
		}
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
