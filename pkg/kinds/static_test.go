package kinds

import (
	"errors"
	"maps"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func crd(group, kind, plural, scope string, versions map[string]bool) *unstructured.Unstructured {
	var vs []any
	for _, v := range slices.Sorted(maps.Keys(versions)) {
		m := map[string]any{"name": v, "served": true, "storage": true}
		if versions[v] {
			m["subresources"] = map[string]any{"status": map[string]any{}}
		}
		vs = append(vs, m)
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": plural + "." + group},
		"spec": map[string]any{
			"group": group, "scope": scope, "versions": vs,
			"names": map[string]any{"kind": kind, "plural": plural},
		},
	}}
}

func TestStaticResolve(t *testing.T) {
	s := NewStatic()
	if err := s.AddCRD(crd("example.com", "Octopus", "octopodes", "Namespaced", map[string]bool{"v1": true, "v1beta1": false})); err != nil {
		t.Fatal(err)
	}
	for _, spec := range []string{"Tenant.example.com=tenants:Cluster", "Widget=widgets", "Deployment.apps=overridden:Namespaced"} {
		if err := s.AddResource(spec); err != nil {
			t.Fatal(err)
		}
	}
	gvk := func(group, version, kind string) schema.GroupVersionKind {
		return schema.GroupVersionKind{Group: group, Version: version, Kind: kind}
	}
	tests := []struct {
		gvk     schema.GroupVersionKind
		want    Mapping
		wantErr string
	}{
		{gvk: gvk("", "v1", "ConfigMap"), want: Mapping{Resource: "configmaps", Scope: Namespaced}},
		{gvk: gvk("", "v1", "Namespace"), want: Mapping{Resource: "namespaces", Scope: Cluster, Status: true}},
		{gvk: gvk("networking.k8s.io", "v1", "Ingress"), want: Mapping{Group: "networking.k8s.io", Resource: "ingresses", Scope: Namespaced, Status: true}},
		{gvk: gvk("example.com", "v1", "Octopus"), want: Mapping{Group: "example.com", Resource: "octopodes", Scope: Namespaced, Status: true}},
		{gvk: gvk("example.com", "v1beta1", "Octopus"), want: Mapping{Group: "example.com", Resource: "octopodes", Scope: Namespaced}},
		{gvk: gvk("example.com", "v2", "Octopus"), wantErr: "unknown kind: Octopus.example.com: its CustomResourceDefinition declares versions v1, v1beta1, not v2"},
		{gvk: gvk("example.com", "v1", "Tenant"), want: Mapping{Group: "example.com", Resource: "tenants", Scope: Cluster, Status: true}},
		{gvk: gvk("other.io", "v1", "Widget"), want: Mapping{Group: "other.io", Resource: "widgets", Status: true}},
		{gvk: gvk("apps", "v1", "Deployment"), want: Mapping{Group: "apps", Resource: "overridden", Scope: Namespaced, Status: true}},
		{gvk: gvk("", "v1", "Deployment"), wantErr: "unknown kind: kind Deployment (apiVersion v1) is not a built-in kind, and neither its CustomResourceDefinition nor its resource name was given"},
	}
	for _, tt := range tests {
		t.Run(tt.gvk.String(), func(t *testing.T) {
			got, err := s.Resolve(tt.gvk)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr || !errors.Is(err, ErrUnknownKind) {
					t.Fatalf("Resolve() error = %v, want %s", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("Resolve() = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestAddResourceErrors(t *testing.T) {
	for spec, want := range map[string]string{
		"WebApp":                     `resource "WebApp": want KIND[.GROUP]=PLURAL[:Namespaced|Cluster]`,
		"WebApp=":                    `resource "WebApp=": want KIND[.GROUP]=PLURAL[:Namespaced|Cluster]`,
		"WebApp=WebApps":             `resource "WebApp=WebApps": "WebApps" is not a resource name: lower-case, without dots`,
		"WebApp=webapps.example.com": `resource "WebApp=webapps.example.com": "webapps.example.com" is not a resource name: lower-case, without dots`,
		"WebApp=webapps:Global":      `resource "WebApp=webapps:Global": the scope must be Namespaced or Cluster, not "Global"`,
		".example.com=webapps":       `resource ".example.com=webapps": no kind`,
	} {
		if err := NewStatic().AddResource(spec); err == nil || err.Error() != want {
			t.Errorf("AddResource(%q) = %v, want %s", spec, err, want)
		}
	}
}

func TestAddCRDErrors(t *testing.T) {
	notCRD := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "x"}}}
	noPlural := crd("example.com", "Thing", "", "Namespaced", map[string]bool{"v1": true})
	badScope := crd("example.com", "Thing", "things", "Galaxy", map[string]bool{"v1": true})
	noVersions := crd("example.com", "Thing", "things", "Namespaced", nil)
	for _, tt := range []struct {
		crd  *unstructured.Unstructured
		want string
	}{
		{notCRD, `ConfigMap "x" is not a CustomResourceDefinition`},
		{noPlural, `CustomResourceDefinition ".example.com": spec.group, spec.names.kind and spec.names.plural are required`},
		{badScope, `CustomResourceDefinition "things.example.com": spec.scope must be Namespaced or Cluster, not "Galaxy"`},
		{noVersions, `CustomResourceDefinition "things.example.com": spec.versions names no version`},
	} {
		if err := NewStatic().AddCRD(tt.crd); err == nil || err.Error() != tt.want {
			t.Errorf("AddCRD() = %v, want %s", err, tt.want)
		}
	}
}

func TestStaticNamespaced(t *testing.T) {
	s := NewStatic()
	if err := s.AddCRD(crd("example.com", "Thing", "things", "Namespaced", map[string]bool{"v1": false, "v2": false})); err != nil {
		t.Fatal(err)
	}
	if err := s.AddCRD(crd("example.com", "Global", "globals", "Cluster", map[string]bool{"v1": false})); err != nil {
		t.Fatal(err)
	}
	if err := s.AddResource("Vague.example.com=vagues"); err != nil {
		t.Fatal(err)
	}
	s.Assume(schema.GroupKind{Group: "example.com", Kind: "Guessed"}, true)
	s.Assume(schema.GroupKind{Group: "example.com", Kind: "Thing"}, false)
	tests := []struct {
		gvk     schema.GroupVersionKind
		want    bool
		wantErr string
	}{
		{gvk: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, want: true},
		{gvk: schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, want: false},
		{gvk: schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, want: true},
		{gvk: schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRoleBinding"}, want: false},
		{gvk: schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "RoleBinding"}, want: true},
		{gvk: schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}, want: false},
		{gvk: schema.GroupVersionKind{Group: "example.com", Version: "v2", Kind: "Thing"}, want: true},
		{gvk: schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Global"}, want: false},
		// An assumption answers for a kind known in no other way, in any version.
		{gvk: schema.GroupVersionKind{Group: "example.com", Version: "v9", Kind: "Guessed"}, want: true},
		{
			gvk:     schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Vague"},
			wantErr: "unknown scope: Vague.example.com was named without its scope: give its CustomResourceDefinition, or its resource with the scope",
		},
		{
			gvk:     schema.GroupVersionKind{Group: "example.com", Version: "v3", Kind: "Thing"},
			wantErr: "unknown kind: Thing.example.com: its CustomResourceDefinition declares versions v1, v2, not v3",
		},
		{
			gvk:     schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Other"},
			wantErr: "unknown kind: kind Other (apiVersion example.com/v1) is not a built-in kind, and neither its CustomResourceDefinition nor its resource name was given",
		},
		{
			gvk:     schema.GroupVersionKind{Version: "v1", Kind: "Deployment"},
			wantErr: "unknown kind: kind Deployment (apiVersion v1) is not a built-in kind, and neither its CustomResourceDefinition nor its resource name was given",
		},
	}
	for _, tt := range tests {
		t.Run(tt.gvk.String(), func(t *testing.T) {
			got, err := s.Namespaced(tt.gvk)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("Namespaced() error = %v, want %q", err, tt.wantErr)
				}
				if !errors.Is(err, ErrUnknownKind) && !errors.Is(err, ErrUnknownScope) {
					t.Errorf("Namespaced() error matches neither ErrUnknownKind nor ErrUnknownScope")
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("Namespaced() = %t, %v; want %t", got, err, tt.want)
			}
		})
	}
}
