package kinds

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Scoper tells whether a kind is namespaced (true) or cluster-scoped.
//
// The controller answers from discovery (a RESTMapper); offline commands
// use a Static.
type Scoper interface {
	Namespaced(gvk schema.GroupVersionKind) (bool, error)
}

// ErrUnknownKind is matched by the errors a Static returns for a kind it
// does not know, or whose scope it does not know.
var ErrUnknownKind = errors.New("unknown kind")

// ErrUnknownScope is matched by the error of a Scoper that knows a kind but
// not whether it is namespaced (a resource named without its scope).
var ErrUnknownScope = errors.New("unknown scope")

// Scope is whether a kind's objects live in namespaces.
type Scope int

// The scopes of a kind. ScopeUnknown is for a kind named by the user
// without its scope (Static.AddResource).
const (
	ScopeUnknown Scope = iota
	Namespaced
	Cluster
)

// Mapping is what Static knows of a kind's API resource.
type Mapping struct {
	// Group is the API group; "" for the core group.
	Group string
	// Resource is the resource name, the lower-case plural.
	Resource string
	// Scope says whether the kind is namespaced.
	Scope Scope
	// Status is true when the resource has a status subresource, or when
	// that is not known.
	Status bool
}

// Static resolves kinds without a cluster: Kubernetes' built-in kinds, the
// custom resources of CustomResourceDefinitions added with AddCRD, resources
// the user names with AddResource, and kinds whose scope a caller assumes
// with Assume. It never guesses a plural: any other kind is an error
// matching ErrUnknownKind.
//
// Built-in kinds are known by group and kind, whatever the version; custom
// resources by group, kind and the versions their CRD declares.
type Static struct {
	crds    map[schema.GroupKind]crdMapping
	named   map[schema.GroupKind]Mapping
	byKind  map[string]Mapping
	assumed map[schema.GroupKind]bool
}

type crdMapping struct {
	Mapping
	status  map[string]bool                             // by version: whether it has a status subresource
	schemas map[string]*apiextensionsv1.JSONSchemaProps // by version, when it declares one
}

var _ Scoper = (*Static)(nil)

// NewStatic returns a Static that knows the built-in kinds.
func NewStatic() *Static {
	return &Static{
		crds:    map[schema.GroupKind]crdMapping{},
		named:   map[schema.GroupKind]Mapping{},
		byKind:  map[string]Mapping{},
		assumed: map[schema.GroupKind]bool{},
	}
}

// Resolve returns the kind's resource. A CustomResourceDefinition or a
// resource added for the kind's group and kind comes first, then the
// built-in kinds, then a resource added for the kind in any group. Kinds
// whose scope was only assumed have no known resource.
func (s *Static) Resolve(gvk schema.GroupVersionKind) (Mapping, error) {
	gk := gvk.GroupKind()
	if c, ok := s.crds[gk]; ok {
		status, served := c.status[gvk.Version]
		if !served {
			return Mapping{}, fmt.Errorf("%w: %s: its CustomResourceDefinition declares versions %s, not %s",
				ErrUnknownKind, gk, strings.Join(slices.Sorted(maps.Keys(c.status)), ", "), gvk.Version)
		}
		m := c.Mapping
		m.Status = status
		return m, nil
	}
	if m, ok := s.named[gk]; ok {
		return m, nil
	}
	if b, ok := Builtin(gk); ok {
		scope := Cluster
		if b.Namespaced {
			scope = Namespaced
		}
		return Mapping{Group: gk.Group, Resource: b.Resource, Scope: scope, Status: b.Status}, nil
	}
	if m, ok := s.byKind[gk.Kind]; ok {
		m.Group = gk.Group
		return m, nil
	}
	return Mapping{}, fmt.Errorf("%w: kind %s (apiVersion %s) is not a built-in kind, and neither its CustomResourceDefinition nor its resource name was given",
		ErrUnknownKind, gk.Kind, gvk.GroupVersion())
}

// Namespaced tells whether the kind is namespaced: as Resolve knows it, or
// else as assumed with Assume. A kind of unknown scope is an error matching
// ErrUnknownScope.
func (s *Static) Namespaced(gvk schema.GroupVersionKind) (bool, error) {
	m, err := s.Resolve(gvk)
	if errors.Is(err, ErrUnknownKind) {
		if _, isCRD := s.crds[gvk.GroupKind()]; !isCRD {
			if namespaced, ok := s.assumed[gvk.GroupKind()]; ok {
				return namespaced, nil
			}
		}
	}
	if err != nil {
		return false, err
	}
	if m.Scope == ScopeUnknown {
		return false, fmt.Errorf("%w: %s was named without its scope: give its CustomResourceDefinition, or its resource with the scope", ErrUnknownScope, gvk.GroupKind())
	}
	return m.Scope == Namespaced, nil
}

// Schema returns the OpenAPI v3 schema that the CustomResourceDefinition
// of a custom resource declares for its version; false when no CRD of the
// kind was added, or it declares no schema for the version. It fits
// rules.Options.Schemas.
func (s *Static) Schema(gvk schema.GroupVersionKind) (*apiextensionsv1.JSONSchemaProps, bool) {
	c, ok := s.crds[gvk.GroupKind()]
	if !ok {
		return nil, false
	}
	props, ok := c.schemas[gvk.Version]
	return props, ok
}

// HasCRD tells whether a CustomResourceDefinition of the kind was added.
func (s *Static) HasCRD(gk schema.GroupKind) bool {
	_, ok := s.crds[gk]
	return ok
}

// Assume makes Namespaced answer for a kind it does not otherwise know, in
// any version. It changes nothing for a kind Resolve knows, nor for a
// custom resource whose CustomResourceDefinition lacks the version asked.
func (s *Static) Assume(gk schema.GroupKind, namespaced bool) {
	s.assumed[gk] = namespaced
}

// AddCRD learns a custom resource from its apiextensions.k8s.io/v1
// CustomResourceDefinition: plural, scope, and which versions it declares
// and which of them have a status subresource.
func (s *Static) AddCRD(crd *unstructured.Unstructured) error {
	if gvk := crd.GroupVersionKind(); gvk.Group != "apiextensions.k8s.io" || gvk.Kind != "CustomResourceDefinition" {
		return fmt.Errorf("%s %q is not a CustomResourceDefinition", gvk.Kind, crd.GetName())
	}
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind")
	plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
	scope, _, _ := unstructured.NestedString(crd.Object, "spec", "scope")
	if group == "" || kind == "" || plural == "" {
		return fmt.Errorf("CustomResourceDefinition %q: spec.group, spec.names.kind and spec.names.plural are required", crd.GetName())
	}
	c := crdMapping{Mapping: Mapping{Group: group, Resource: plural}, status: map[string]bool{}, schemas: map[string]*apiextensionsv1.JSONSchemaProps{}}
	switch scope {
	case "Namespaced":
		c.Scope = Namespaced
	case "Cluster":
		c.Scope = Cluster
	default:
		return fmt.Errorf("CustomResourceDefinition %q: spec.scope must be Namespaced or Cluster, not %q", crd.GetName(), scope)
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		m, ok := v.(map[string]any)
		if !ok {
			continue
		}
		name, _ := m["name"].(string)
		if name == "" {
			continue
		}
		_, status, _ := unstructured.NestedFieldNoCopy(m, "subresources", "status")
		c.status[name] = status
		if raw, ok, _ := unstructured.NestedMap(m, "schema", "openAPIV3Schema"); ok {
			props := &apiextensionsv1.JSONSchemaProps{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, props); err != nil {
				return fmt.Errorf("CustomResourceDefinition %q: version %s: openAPIV3Schema: %w", crd.GetName(), name, err)
			}
			c.schemas[name] = props
		}
	}
	if len(c.status) == 0 {
		return fmt.Errorf("CustomResourceDefinition %q: spec.versions names no version", crd.GetName())
	}
	s.crds[schema.GroupKind{Group: group, Kind: kind}] = c
	return nil
}

// AddResource learns a resource from a spec KIND[.GROUP]=PLURAL[:SCOPE], as
// in "WebApp.example.com=webapps:Namespaced". Without a group it stands for
// the kind in any group that has no better source; without a scope
// (Namespaced or Cluster) the scope is unknown. Its status subresource is
// taken to exist.
func (s *Static) AddResource(spec string) error {
	ref, plural, ok := strings.Cut(spec, "=")
	if !ok || ref == "" || plural == "" {
		return fmt.Errorf("resource %q: want KIND[.GROUP]=PLURAL[:Namespaced|Cluster]", spec)
	}
	m := Mapping{Status: true}
	plural, scope, hasScope := strings.Cut(plural, ":")
	switch {
	case !hasScope:
	case scope == "Namespaced":
		m.Scope = Namespaced
	case scope == "Cluster":
		m.Scope = Cluster
	default:
		return fmt.Errorf("resource %q: the scope must be Namespaced or Cluster, not %q", spec, scope)
	}
	if plural != strings.ToLower(plural) || strings.ContainsAny(plural, "./ ") {
		return fmt.Errorf("resource %q: %q is not a resource name: lower-case, without dots", spec, plural)
	}
	m.Resource = plural
	kind, group, hasGroup := strings.Cut(ref, ".")
	if kind == "" {
		return fmt.Errorf("resource %q: no kind", spec)
	}
	if !hasGroup {
		s.byKind[kind] = m
		return nil
	}
	m.Group = group
	s.named[schema.GroupKind{Group: group, Kind: kind}] = m
	return nil
}
