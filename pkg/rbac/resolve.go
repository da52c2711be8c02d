package rbac

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"kgen.dev/kgen/pkg/kinds"
	"kgen.dev/kgen/pkg/mapper"
)

// Discovery resolves kinds through a cluster's discovery documents.
type Discovery struct {
	Mapper *mapper.Mapper
}

var _ Resolver = Discovery{}

// Resolve returns the resource discovery serves for the kind.
func (d Discovery) Resolve(gvk schema.GroupVersionKind) (Resource, error) {
	m, err := d.Mapper.ResourceFor(gvk)
	if err != nil {
		return Resource{}, err
	}
	scope := Cluster
	if m.Namespaced {
		scope = Namespaced
	}
	return Resource{Group: m.Group, Resource: m.Resource, Scope: scope, Status: m.HasSubresource("status")}, nil
}

// ErrUnknownKind is matched by the error Static returns for a kind that is
// neither built in nor given to it.
var ErrUnknownKind = errors.New("unknown kind")

// Static resolves kinds without a cluster: Kubernetes' built-in kinds, the
// custom resources of CustomResourceDefinitions added with AddCRD, and
// resources added with AddResource. It never guesses a plural.
type Static struct {
	crds   map[schema.GroupKind]crdResource
	named  map[schema.GroupKind]Resource
	byKind map[string]Resource
}

type crdResource struct {
	Resource
	status map[string]bool // by version: whether it has a status subresource
}

var _ Resolver = (*Static)(nil)

// NewStatic returns a Static that knows the built-in kinds.
func NewStatic() *Static {
	return &Static{crds: map[schema.GroupKind]crdResource{}, named: map[schema.GroupKind]Resource{}, byKind: map[string]Resource{}}
}

// Resolve returns the kind's resource. A CustomResourceDefinition or a
// resource added for the kind's group and kind comes first, then the
// built-in kinds, then a resource added for the kind in any group.
func (s *Static) Resolve(gvk schema.GroupVersionKind) (Resource, error) {
	gk := gvk.GroupKind()
	if c, ok := s.crds[gk]; ok {
		status, served := c.status[gvk.Version]
		if !served {
			return Resource{}, fmt.Errorf("%w: %s: its CustomResourceDefinition declares versions %s, not %s",
				ErrUnknownKind, gk, strings.Join(slices.Sorted(maps.Keys(c.status)), ", "), gvk.Version)
		}
		r := c.Resource
		r.Status = status
		return r, nil
	}
	if r, ok := s.named[gk]; ok {
		return r, nil
	}
	if b, ok := kinds.Builtin(gk); ok {
		scope := Cluster
		if b.Namespaced {
			scope = Namespaced
		}
		return Resource{Group: gk.Group, Resource: b.Resource, Scope: scope, Status: b.Status}, nil
	}
	if r, ok := s.byKind[gk.Kind]; ok {
		r.Group = gk.Group
		return r, nil
	}
	return Resource{}, fmt.Errorf("%w: %s (apiVersion %s) is not a built-in kind, and neither its CustomResourceDefinition nor its resource name was given",
		ErrUnknownKind, gk.Kind, gvk.GroupVersion())
}

// AddCRD learns a custom resource from its apiextensions.k8s.io/v1
// CustomResourceDefinition: plural, scope, and which versions have a status
// subresource.
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
	c := crdResource{Resource: Resource{Group: group, Resource: plural}, status: map[string]bool{}}
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
	r := Resource{Status: true}
	plural, scope, hasScope := strings.Cut(plural, ":")
	switch {
	case !hasScope:
	case scope == "Namespaced":
		r.Scope = Namespaced
	case scope == "Cluster":
		r.Scope = Cluster
	default:
		return fmt.Errorf("resource %q: the scope must be Namespaced or Cluster, not %q", spec, scope)
	}
	if plural != strings.ToLower(plural) || strings.ContainsAny(plural, "./ ") {
		return fmt.Errorf("resource %q: %q is not a resource name: lower-case, without dots", spec, plural)
	}
	r.Resource = plural
	kind, group, hasGroup := strings.Cut(ref, ".")
	if kind == "" {
		return fmt.Errorf("resource %q: no kind", spec)
	}
	if !hasGroup {
		s.byKind[kind] = r
		return nil
	}
	r.Group = group
	s.named[schema.GroupKind{Group: group, Kind: kind}] = r
	return nil
}
