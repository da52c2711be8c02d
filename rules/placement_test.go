package rules

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"kgen.dev/kgen/pkg/kinds"
)

// placementScoper knows the built-in kinds, the namespaced App, the
// cluster-scoped Team and Vague, whose scope is not known.
func placementScoper(t *testing.T) *kinds.Static {
	t.Helper()
	s := kinds.NewStatic()
	for kind, scope := range map[string]string{"App": "Namespaced", "Team": "Cluster"} {
		crd := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
			"metadata": map[string]any{"name": strings.ToLower(kind) + "s.example.com"},
			"spec": map[string]any{"group": "example.com", "scope": scope,
				"names":    map[string]any{"kind": kind, "plural": strings.ToLower(kind) + "s"},
				"versions": []any{map[string]any{"name": "v1"}}},
		}}
		if err := s.AddCRD(crd); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AddResource("Vague.example.com=vagues"); err != nil {
		t.Fatal(err)
	}
	return s
}

// describePlacement writes a placement one line per part: "parent SCOPE
// [namespaces] events [namespaces]", then "ID SCOPE [namespaces] OWNERSHIP"
// per child ("*" for nil: anywhere), then "watch KIND [namespaces]".
func describePlacement(p *Placement) []string {
	scope := map[kinds.Scope]string{kinds.ScopeUnknown: "unknown", kinds.Namespaced: "namespaced", kinds.Cluster: "cluster"}
	owner := map[Ownership]string{OwnerReference: "owner", Finalizer: "finalizer", OwnerReferenceInParentNamespace: "owner-in-parent-namespace"}
	list := func(ns []string) string {
		if ns == nil {
			return "*"
		}
		return "[" + strings.Join(ns, ",") + "]"
	}
	out := []string{fmt.Sprintf("parent %s %s events %s", scope[p.ParentScope], list(p.ParentNamespaces), list(p.EventNamespaces))}
	for _, c := range p.Children {
		out = append(out, fmt.Sprintf("%s %s %s %s", c.ID, scope[c.Scope], list(c.Namespaces), owner[c.Ownership]))
	}
	watches := p.ChildWatchNamespaces()
	for _, gvk := range slices.SortedFunc(maps.Keys(watches), func(a, b schema.GroupVersionKind) int { return strings.Compare(a.Kind, b.Kind) }) {
		out = append(out, fmt.Sprintf("watch %s %q", gvk.Kind, watches[gvk]))
	}
	return out
}

// placementRule writes a rule for a parent kind, with extra parent and spec
// lines, and children "id Kind[@namespace]".
func placementRule(kind, parentExtra, specExtra string, children ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: kgen.dev/v1alpha1\nkind: Rule\nmetadata: {name: r}\nspec:\n%s  parent:\n    apiVersion: example.com/v1\n    kind: %s\n%s  children:\n", specExtra, kind, parentExtra)
	for _, c := range children {
		id, k, _ := strings.Cut(c, " ")
		k, ns, _ := strings.Cut(k, "@")
		meta := "{name: " + id + "}" // a name of its own: two children may not render one object
		if ns != "" {
			meta = "{name: " + id + ", namespace: '" + ns + "'}"
		}
		fmt.Fprintf(&b, "  - id: %s\n    template: {apiVersion: v1, kind: %s, metadata: %s}\n", id, k, meta)
	}
	return b.String()
}

func TestPlacement(t *testing.T) {
	const cross = "  allowCrossNamespace: [shared, other]\n"
	tests := []struct {
		name string
		rule string
		want []string
	}{
		{
			name: "a namespaced parent in every namespace",
			rule: placementRule("App", "", "", "cm ConfigMap", "ns Namespace"),
			want: []string{
				"parent namespaced * events *",
				"cm namespaced * owner",
				"ns cluster * finalizer",
				`watch ConfigMap [""]`,
				`watch Namespace [""]`,
			},
		},
		{
			name: "a namespaced parent limited to namespaces",
			rule: placementRule("App", "    namespaces: [a, b]\n", "", "cm ConfigMap", "same ConfigMap@${parent.metadata.namespace}", "ns Namespace"),
			want: []string{
				"parent namespaced [a,b] events [a,b]",
				"cm namespaced [a,b] owner",
				"same namespaced [a,b] owner",
				"ns cluster * finalizer",
				`watch ConfigMap ["a" "b"]`,
				`watch Namespace [""]`,
			},
		},
		{
			name: "children in other namespaces",
			rule: placementRule("App", "    namespaces: [a]\n", cross, "cm ConfigMap", "lit ConfigMap@shared", "expr Secret@${parent.spec.target}"),
			want: []string{
				"parent namespaced [a] events [a]",
				"cm namespaced [a] owner",
				"lit namespaced [shared] owner-in-parent-namespace",
				"expr namespaced [a,shared,other] owner-in-parent-namespace",
				`watch ConfigMap ["a" "shared"]`,
				`watch Secret ["a" "shared" "other"]`,
			},
		},
		{
			name: "children in other namespaces, of a parent in any namespace",
			rule: placementRule("App", "", cross, "expr Secret@${parent.spec.target}"),
			want: []string{
				"parent namespaced * events *",
				"expr namespaced * owner-in-parent-namespace",
				`watch Secret [""]`,
			},
		},
		{
			name: "a cluster-scoped parent owns every child; its events go to default",
			rule: placementRule("Team", "    scope: Cluster\n    namespaces: [ignored]\n", "", "ns Namespace", "cm ConfigMap@team", "expr ConfigMap@${parent.metadata.name}"),
			want: []string{
				"parent cluster * events [default]",
				"ns cluster * owner",
				"cm namespaced [team] owner",
				"expr namespaced * owner",
				`watch ConfigMap [""]`,
				`watch Namespace [""]`,
			},
		},
		{
			name: "a cluster-scoped parent limiting its children's namespaces",
			rule: placementRule("Team", "    scope: Cluster\n", cross, "expr ConfigMap@${parent.metadata.name}"),
			want: []string{
				"parent cluster * events [default]",
				"expr namespaced [shared,other] owner",
				`watch ConfigMap ["shared" "other"]`,
			},
		},
		{
			name: "an orphaned child is never owned",
			rule: strings.Replace(placementRule("App", "", "", "cm ConfigMap"), "  - id: cm\n", "  - id: cm\n    deletionPolicy: Orphan\n", 1),
			want: []string{
				"parent namespaced * events *",
				"cm namespaced * finalizer",
				`watch ConfigMap [""]`,
			},
		},
		{
			name: "a parent of unknown scope",
			rule: placementRule("Vague", "    namespaces: [a]\n", "", "cm ConfigMap", "ns Namespace"),
			want: []string{
				"parent unknown * events *",
				"cm namespaced * owner",
				"ns cluster * owner-in-parent-namespace",
				`watch ConfigMap [""]`,
				`watch Namespace [""]`,
			},
		},
		{
			name: "a child of unknown scope",
			rule: strings.Replace(placementRule("App", "", "", "v ConfigMap"), "apiVersion: v1, kind: ConfigMap", "apiVersion: example.com/v1, kind: Vague", 1),
			want: []string{
				"parent namespaced * events *",
				"v unknown * owner-in-parent-namespace",
				`watch Vague [""]`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := Parse("rules.yaml", []byte(tt.rule), Options{})
			if err != nil {
				t.Fatalf("%v\n%s", err, tt.rule)
			}
			p, err := rs[0].Placement(placementScoper(t))
			if err != nil {
				t.Fatal(err)
			}
			if got := describePlacement(p); !slices.Equal(got, tt.want) {
				t.Errorf("Placement() =\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestPlacementErrors(t *testing.T) {
	for _, tt := range []struct{ rule, want string }{
		{
			rule: placementRule("App", "    scope: Cluster\n", "", "cm ConfigMap@x"),
			want: `rules.yaml:1:1: rule "r": spec.parent.scope: the rule takes App.example.com as cluster-scoped, but it is namespaced`,
		},
		{
			rule: placementRule("Nope", "", "", "cm ConfigMap"),
			want: "scope of the parent: unknown kind: kind Nope (apiVersion example.com/v1) is not a built-in kind, and neither its CustomResourceDefinition nor its resource name was given",
		},
		{
			rule: strings.Replace(placementRule("App", "", "", "w ConfigMap"), "apiVersion: v1, kind: ConfigMap", "apiVersion: example.com/v1, kind: Widget", 1),
			want: `child "w": unknown kind: kind Widget (apiVersion example.com/v1) is not a built-in kind, and neither its CustomResourceDefinition nor its resource name was given`,
		},
	} {
		rs, err := Parse("rules.yaml", []byte(tt.rule), Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rs[0].Placement(placementScoper(t)); err == nil || err.Error() != tt.want {
			t.Errorf("Placement() error = %v, want %s", err, tt.want)
		}
	}
}

func TestOwnerReference(t *testing.T) {
	for _, tt := range []struct {
		ownership         Ownership
		parentNS, childNS string
		want              bool
	}{
		{OwnerReference, "a", "b", true},
		{Finalizer, "", "", false},
		{OwnerReferenceInParentNamespace, "a", "a", true},
		{OwnerReferenceInParentNamespace, "a", "b", false},
		{OwnerReferenceInParentNamespace, "a", "", false},
		{OwnerReferenceInParentNamespace, "", "b", true},
	} {
		if got := (ChildPlacement{Ownership: tt.ownership}).OwnerReference(tt.parentNS, tt.childNS); got != tt.want {
			t.Errorf("OwnerReference(%q, %q) with ownership %d = %t, want %t", tt.parentNS, tt.childNS, tt.ownership, got, tt.want)
		}
	}
}

// An input whose namespace is exactly ${parent.metadata.namespace} is
// where an input without one is: in the parent's namespaces, so kgen
// watches, and kgenctl rbac grants, only those. Any other expression may
// name any namespace.
func TestInputPlacementInParentNamespace(t *testing.T) {
	doc := placementRule("App", "    namespaces: [team-e]\n", `  inputs:
  - {id: same, apiVersion: v1, kind: ConfigMap, name: x, namespace: '${parent.metadata.namespace}'}
  - {id: absent, apiVersion: v1, kind: Secret, name: x}
  - {id: other, apiVersion: v1, kind: ServiceAccount, name: x, namespace: '${parent.spec.ns}'}
`, "a ConfigMap")
	rs, err := Parse("rules.yaml", []byte(doc), Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := rs[0].Placement(placementScoper(t))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for gvk, ns := range p.InputWatchNamespaces() {
		got[gvk.Kind] = ns
	}
	want := map[string][]string{"ConfigMap": {"team-e"}, "Secret": {"team-e"}, "ServiceAccount": nil}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("InputWatchNamespaces() = %v, want %v", got, want)
	}
}
