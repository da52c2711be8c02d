package reconcile

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"kgen.dev/kgen/pkg/kinds"
	"kgen.dev/kgen/rules"
)

func crd(group, kind, scope string, versions ...string) *unstructured.Unstructured {
	var vs []any
	for _, v := range versions {
		vs = append(vs, map[string]any{"name": v, "served": true, "storage": true})
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": "things." + group},
		"spec": map[string]any{
			"group":    group,
			"scope":    scope,
			"names":    map[string]any{"kind": kind, "plural": "things"},
			"versions": vs,
		},
	}}
}

func TestAssumeScopes(t *testing.T) {
	const children = `  - id: ns
    template: {apiVersion: example.com/v1, kind: Widget, metadata: {name: x, namespace: '${parent.metadata.namespace}'}}
  - id: plain
    template: {apiVersion: example.com/v1, kind: Gadget, metadata: {name: x}}
  - id: cm
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}
`
	tests := []struct {
		name      string
		parent    string
		scope     string // spec.parent lines
		crds      []*unstructured.Unstructured
		want      map[string]bool // kind: namespaced
		wantNotes []string
	}{
		{
			name:   "a parent with a namespace",
			parent: "apiVersion: example.com/v1\nkind: Thing\nmetadata: {name: a, namespace: team-a, uid: u}\n",
			want:   map[string]bool{"Thing": true, "Widget": true, "Gadget": true},
			wantNotes: []string{
				"kind Thing (apiVersion example.com/v1) is taken as namespaced: the parent has metadata.namespace and no CustomResourceDefinition for it was given",
				"kind Widget (apiVersion example.com/v1) (rule r, child ns) is taken as namespaced, since its template sets metadata.namespace: no CustomResourceDefinition for it was given",
				"kind Gadget (apiVersion example.com/v1) (rule r, child plain) is taken as namespaced, like its parent: no CustomResourceDefinition for it was given",
			},
		},
		{
			name:   "a parent without a namespace",
			parent: "apiVersion: example.com/v1\nkind: Thing\nmetadata: {name: a, uid: u}\n",
			want:   map[string]bool{"Thing": false, "Widget": true, "Gadget": false},
			wantNotes: []string{
				"kind Thing (apiVersion example.com/v1) is taken as cluster-scoped: the parent has no metadata.namespace and no CustomResourceDefinition for it was given",
				"kind Widget (apiVersion example.com/v1) (rule r, child ns) is taken as namespaced, since its template sets metadata.namespace: no CustomResourceDefinition for it was given",
				"kind Gadget (apiVersion example.com/v1) (rule r, child plain) is taken as cluster-scoped, like its parent: no CustomResourceDefinition for it was given",
			},
		},
		{
			name:   "the rule's declared scope",
			parent: "apiVersion: example.com/v1\nkind: Thing\nmetadata: {name: a, uid: u}\n",
			scope:  "    scope: Namespaced\n",
			want:   map[string]bool{"Thing": true, "Widget": true, "Gadget": true},
			wantNotes: []string{
				"kind Thing (apiVersion example.com/v1) is taken as namespaced: rule r says so in spec.parent.scope and no CustomResourceDefinition for it was given",
				"kind Widget (apiVersion example.com/v1) (rule r, child ns) is taken as namespaced, since its template sets metadata.namespace: no CustomResourceDefinition for it was given",
				"kind Gadget (apiVersion example.com/v1) (rule r, child plain) is taken as namespaced, like its parent: no CustomResourceDefinition for it was given",
			},
		},
		{
			name:   "CRDs are not overridden",
			parent: "apiVersion: example.com/v1\nkind: Thing\nmetadata: {name: a, uid: u}\n",
			crds:   []*unstructured.Unstructured{crd("example.com", "Thing", "Namespaced", "v1"), crd("example.com", "Gadget", "Cluster", "v1")},
			want:   map[string]bool{"Thing": true, "Widget": true, "Gadget": false},
			wantNotes: []string{
				"kind Widget (apiVersion example.com/v1) (rule r, child ns) is taken as namespaced, since its template sets metadata.namespace: no CustomResourceDefinition for it was given",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := kinds.NewStatic()
			for _, c := range tt.crds {
				if err := s.AddCRD(c); err != nil {
					t.Fatal(err)
				}
			}
			rule := parseRule(t, "apiVersion: kgen.dev/v1alpha1\nkind: Rule\nmetadata: {name: r}\nspec:\n  parent:\n    apiVersion: example.com/v1\n    kind: Thing\n"+tt.scope+"  children:\n"+children)
			notes := AssumeScopes(s, object(t, tt.parent), []*rules.Rule{rule})
			if strings.Join(notes, "\n") != strings.Join(tt.wantNotes, "\n") {
				t.Errorf("notes:\n%s\nwant:\n%s", strings.Join(notes, "\n"), strings.Join(tt.wantNotes, "\n"))
			}
			for kind, want := range tt.want {
				got, err := s.Namespaced(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: kind})
				if err != nil || got != want {
					t.Errorf("Namespaced(%s) = %t, %v; want %t", kind, got, err, want)
				}
			}
		})
	}
}
