package kinds

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The e2e test TestBuiltinKindsMatchDiscovery checks the table against a
// live API server; these are the checks that need none.
func TestBuiltins(t *testing.T) {
	table := Builtins()
	byResource := map[schema.GroupResource]string{}
	for gk, r := range table {
		if r.Resource == "" || r.Resource != strings.ToLower(r.Resource) || strings.ContainsAny(r.Resource, "/.") {
			t.Errorf("%s: %q is not a resource name", gk, r.Resource)
		}
		gr := schema.GroupResource{Group: gk.Group, Resource: r.Resource}
		if other, dup := byResource[gr]; dup {
			t.Errorf("%s and %s share the resource %s", gk.Kind, other, gr)
		}
		byResource[gr] = gk.Kind
	}
	for _, tt := range []struct {
		gk   schema.GroupKind
		want Resource
	}{
		{schema.GroupKind{Kind: "Endpoints"}, Resource{Resource: "endpoints", Namespaced: true}},
		{schema.GroupKind{Group: "networking.k8s.io", Kind: "Ingress"}, Resource{Resource: "ingresses", Namespaced: true, Status: true}},
		{schema.GroupKind{Group: "storage.k8s.io", Kind: "StorageClass"}, Resource{Resource: "storageclasses"}},
	} {
		if got, ok := Builtin(tt.gk); !ok || got != tt.want {
			t.Errorf("Builtin(%s) = %+v, %t; want %+v", tt.gk, got, ok, tt.want)
		}
	}
	if _, ok := Builtin(schema.GroupKind{Group: "example.com", Kind: "WebApp"}); ok {
		t.Error("Builtin knows a custom resource")
	}
	delete(table, schema.GroupKind{Kind: "Pod"})
	if _, ok := Builtin(schema.GroupKind{Kind: "Pod"}); !ok {
		t.Error("changing what Builtins returned changed the table")
	}
}
