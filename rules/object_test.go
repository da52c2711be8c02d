package rules

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// A rules document is a valid Rule object and the reverse (contract §7): a
// Rule read back from the cluster loads as a rules file, its server-set
// metadata and status ignored, while what a rule means is checked as
// strictly as ever.
func TestLoadObjectsReadBack(t *testing.T) {
	tests := []struct {
		name string
		file string // under testdata/object
		want []string
	}{
		{name: "kubectl get rule NAME -o yaml", file: "rule.yaml", want: []string{"webapp"}},
		{name: "kubectl get rules -o yaml", file: "list.yaml", want: []string{"first", "second"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			loaded, err := Load([]string{filepath.Join("testdata/object", tt.file)}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range loaded {
				got = append(got, r.Name)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("rules = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestParseObjectsReadBack(t *testing.T) {
	item := func(name, extra string) string {
		return "- apiVersion: kgen.dev/v1alpha1\n  kind: Rule\n  metadata: {name: " + name + ", uid: x, resourceVersion: \"1\"}\n" +
			"  spec:\n    parent: {apiVersion: example.com/v1, kind: " + name + extra + "}\n" +
			"    children: [{id: a, template: {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}}]\n"
	}
	tests := []struct {
		name    string
		yaml    string
		want    []string // rule names
		wantErr []string
	}{
		{
			name: "the API server's list",
			yaml: "apiVersion: kgen.dev/v1alpha1\nkind: RuleList\nmetadata: {resourceVersion: \"7\", continue: \"\"}\nitems:\n" + item("a", "") + item("b", ""),
			want: []string{"a", "b"},
		},
		{
			name: "an empty list",
			yaml: "apiVersion: v1\nkind: List\nitems: []\nmetadata: {resourceVersion: \"\"}\n",
		},
		{
			name: "a list and a rule",
			yaml: "apiVersion: v1\nkind: List\nitems:\n" + item("a", "") + "---\n" + header + "  - id: a\n" + cm("a"),
			want: []string{"a", "r"},
		},
		{
			name:    "an unknown field in a listed rule's spec",
			yaml:    "apiVersion: v1\nkind: List\nitems:\n" + item("a", "") + item("b", ", nmespaces: [x]"),
			wantErr: []string{`rules.yaml:14:51: rule "b": spec.parent: unknown field "nmespaces"`},
		},
		{
			name:    "an unknown field in metadata",
			yaml:    strings.Replace(header, "metadata: {name: r}", "metadata: {name: r, nmae: s}", 1) + "  - id: a\n" + cm("a"),
			wantErr: []string{`rules.yaml:3:21: metadata: unknown field "nmae"`},
		},
		{
			name:    "an unknown field in a list",
			yaml:    "apiVersion: v1\nkind: List\nitem: []\n",
			wantErr: []string{`rules.yaml:3:1: unknown field "item"`},
		},
		{
			name:    "items not a list",
			yaml:    "apiVersion: v1\nkind: List\nitems: {a: b}\n",
			wantErr: []string{`rules.yaml:3:8: items: must be a list of rules`},
		},
		{
			name:    "a list of another kind",
			yaml:    "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}\n",
			wantErr: []string{`rules.yaml:4:16: not a rule: apiVersion v1, kind ConfigMap; every document must be a kgen.dev/v1alpha1 Rule`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			loaded, err := Parse("rules.yaml", []byte(tt.yaml), Options{})
			var gotErr []string
			if err != nil {
				gotErr = strings.Split(err.Error(), "\n")
			}
			if !reflect.DeepEqual(gotErr, tt.wantErr) {
				t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(gotErr, "\n"), strings.Join(tt.wantErr, "\n"))
			}
			var got []string
			for _, r := range loaded {
				got = append(got, r.Name)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("rules = %v, want %v", got, tt.want)
			}
		})
	}
}

// A Rule object's errors name other places of it by field path: the lines
// of the YAML kgen makes of an object are no one's to look up.
func TestObjectErrorsNameNoLines(t *testing.T) {
	cm := func(name string) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": name}}
	}
	obj := func(children ...any) map[string]any {
		return map[string]any{"apiVersion": APIVersion, "kind": Kind, "metadata": map[string]any{"name": "bad"},
			"spec": map[string]any{"parent": map[string]any{"apiVersion": "example.com/v1", "kind": "App"}, "children": children}}
	}
	for _, tt := range []struct {
		name     string
		children []any
		want     string
	}{
		{"duplicate child id", []any{
			map[string]any{"id": "one", "template": cm("a")},
			map[string]any{"id": "two", "template": cm("b")},
			map[string]any{"id": "two", "template": cm("c")},
		}, `duplicate child id "two" (first at spec.children[1])`},
		{"two children, one object", []any{
			map[string]any{"id": "one", "template": cm("x")},
			map[string]any{"id": "two", "template": cm("x")},
		}, `renders the same ConfigMap as child "one": give each child`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromObject(obj(tt.children...), Options{})
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "line ") {
				t.Errorf("error %v, want one saying %q and naming no line", err, tt.want)
			}
		})
	}
}
