package rbac

import (
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
func (d Discovery) Resolve(gvk schema.GroupVersionKind) (kinds.Mapping, error) {
	m, err := d.Mapper.ResourceFor(gvk)
	if err != nil {
		return kinds.Mapping{}, err
	}
	scope := kinds.Cluster
	if m.Namespaced {
		scope = kinds.Namespaced
	}
	return kinds.Mapping{Group: m.Group, Resource: m.Resource, Scope: scope, Status: m.HasSubresource("status")}, nil
}

// kinds.Static resolves kinds offline.
var _ Resolver = (*kinds.Static)(nil)
