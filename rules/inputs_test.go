package rules

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// inputRule is a rule with the given spec.inputs lines and a child reading
// expr.
func inputRule(inputs, expr string) string {
	return strings.Replace(header, "  children:\n", "  inputs:\n"+inputs+"  children:\n", 1) +
		"  - id: a\n    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {name: x}\n      data: {v: '" + expr + "'}\n"
}

func TestInputErrors(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{
			name: "neither name nor selector",
			yaml: inputRule("  - {id: cfg, apiVersion: v1, kind: ConfigMap}\n", "x"),
			want: []string{`rules.yaml:7:5: rule "r": spec.inputs[0]: name or selector is required`},
		},
		{
			name: "both name and selector",
			yaml: inputRule("  - {id: cfg, apiVersion: v1, kind: ConfigMap, name: a, selector: {matchLabels: {a: b}}}\n", "x"),
			want: []string{`rules.yaml:7:5: rule "r": spec.inputs[0]: name and selector exclude each other: name one object, or select a list of them`},
		},
		{
			name: "a duplicate id and a bad one",
			yaml: inputRule("  - {id: cfg, apiVersion: v1, kind: ConfigMap, name: a}\n  - {id: cfg, apiVersion: v1, kind: ConfigMap, name: b}\n  - {id: Cfg, apiVersion: v1, kind: ConfigMap, name: c}\n", "x"),
			want: []string{
				`rules.yaml:8:10: rule "r": spec.inputs[1].id: duplicate input id "cfg"`,
				`rules.yaml:9:10: rule "r": spec.inputs[2].id: input id "Cfg" must match [a-z][a-z0-9_]*`,
			},
		},
		{
			name: "a name reading a child",
			yaml: inputRule("  - {id: cfg, apiVersion: v1, kind: ConfigMap, name: '${children.a.metadata.name}'}\n", "x"),
			want: []string{`rules.yaml:7:55: rule "r": spec.inputs[0].name: ${children.a.metadata.name}: an input's name and namespace may read only parent`},
		},
		{
			name: "an unknown input",
			yaml: inputRule("  - {id: cfg, apiVersion: v1, kind: ConfigMap, name: shared}\n", "${inputs.config.data.x}"),
			want: []string{`rules.yaml:14:18: rule "r": child "a": template.data.v: ${inputs.config.data.x}: unknown input id "config" in inputs.config (the rule's inputs are: cfg)`},
		},
		{
			name: "inputs without an id",
			yaml: inputRule("  - {id: cfg, apiVersion: v1, kind: ConfigMap, name: shared}\n", "${inputs[parent.spec.x]}"),
			want: []string{`rules.yaml:14:18: rule "r": child "a": template.data.v: ${inputs[parent.spec.x]}: inputs must be followed by an input id, as in inputs.config or inputs["config"]`},
		},
		{
			name: "fine",
			yaml: inputRule("  - {id: cfg, apiVersion: v1, kind: ConfigMap, name: '${parent.metadata.name}-cfg', namespace: shared}\n  - {id: all, apiVersion: v1, kind: Secret, selector: {matchLabels: {team: a}}}\n", "${inputs.cfg.data.x + string(size(inputs.all))}"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("rules.yaml", []byte(tt.yaml), Options{})
			var got []string
			if list, ok := err.(ErrorList); ok {
				for _, e := range list {
					got = append(got, e.Error())
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("Parse() errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// scopes is a kinds.Scoper for tests: ConfigMap and Secret are namespaced,
// Node is not.
type scopes map[string]bool

func (s scopes) Namespaced(gvk schema.GroupVersionKind) (bool, error) { return s[gvk.Kind], nil }

func TestInputRefs(t *testing.T) {
	ns := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "web", "namespace": "team-a"}}}
	cluster := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "web"}}}
	tests := []struct {
		name    string
		inputs  string
		parent  *unstructured.Unstructured
		want    []string // "id kind namespace/name" or "id kind namespace/selector"
		wantErr string
	}{
		{
			name:   "names and namespaces from the parent, the namespace defaulting to the parent's",
			inputs: "  - {id: a, apiVersion: v1, kind: ConfigMap, name: '${parent.metadata.name}-cfg'}\n  - {id: b, apiVersion: v1, kind: ConfigMap, name: shared, namespace: 'common'}\n  - {id: n, apiVersion: v1, kind: Node, name: node-1}\n",
			parent: ns,
			want:   []string{"a ConfigMap team-a/web-cfg", "b ConfigMap common/shared", "n Node /node-1"},
		},
		{
			name:   "selectors",
			inputs: "  - {id: s, apiVersion: v1, kind: Secret, selector: {matchLabels: {team: a}}}\n",
			parent: cluster,
			want:   []string{"s Secret /team=a"},
		},
		{
			name:    "a named namespaced input of a cluster-scoped parent needs a namespace",
			inputs:  "  - {id: a, apiVersion: v1, kind: ConfigMap, name: x}\n",
			parent:  cluster,
			wantErr: `rules.yaml:7:5: rule "r": spec.inputs[0]: the parent is cluster-scoped, so an input of namespaced ConfigMap must name its namespace`,
		},
		{
			name:    "a cluster-scoped input has no namespace",
			inputs:  "  - {id: n, apiVersion: v1, kind: Node, name: x, namespace: y}\n",
			parent:  ns,
			wantErr: `rules.yaml:7:5: rule "r": spec.inputs[0].namespace: Node is cluster-scoped: its objects have no namespace`,
		},
		{
			name:    "a name that is not one",
			inputs:  "  - {id: a, apiVersion: v1, kind: ConfigMap, name: '${parent.metadata.name}/x'}\n",
			parent:  ns,
			wantErr: `rules.yaml:7:5: rule "r": spec.inputs[0].name: "web/x" is not a valid name: may not contain '/'`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := Parse("rules.yaml", []byte(inputRule(tt.inputs, "x")), Options{})
			if err != nil {
				t.Fatal(err)
			}
			refs, err := rs[0].InputRefs(tt.parent, scopes{"ConfigMap": true, "Secret": true})
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("InputRefs() error = %v, want %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range refs {
				what := r.Name
				if r.Selector != nil {
					what = r.Selector.String()
				}
				got = append(got, r.ID+" "+r.GroupVersionKind.Kind+" "+r.Namespace+"/"+what)
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("InputRefs() =\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}
