package rules

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// Children that may render one object only for some parents are left to
// the controller, which refuses them for those parents: they load.
func TestParseChildrenThatMayDiffer(t *testing.T) {
	other := func(id, fields, name string) string {
		return "  - id: " + id + "\n" + fields + cm(name)
	}
	tests := []struct {
		name, children string
	}{
		{"includeWhen on one", other("a", "", "x") + other("b", "    includeWhen: [\"${parent.spec.b}\"]\n", "x")},
		{"includeWhen on both", other("a", "    includeWhen: [\"${parent.spec.a}\"]\n", "x") + other("b", "    includeWhen: [\"${!parent.spec.a}\"]\n", "x")},
		{"forEach", other("a", "", "x-a") + other("b", "    forEach: [{r: \"${parent.spec.rs}\"}]\n", "x-${r}")},
		{"names that differ as written", other("a", "", "${parent.metadata.name}-x") + other("b", "", "${parent.metadata.name + '-x'}")},
		{"other kinds", other("a", "", "x") + "  - id: b\n    template: {apiVersion: v1, kind: Secret, metadata: {name: x}}\n"},
		{"other namespaces", other("a", "", "x") + "  - id: b\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x, namespace: shared}}\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := strings.Replace(header, "  children:\n", "  allowCrossNamespace: [shared]\n  children:\n", 1) + tt.children
			if _, err := Parse("rules.yaml", []byte(doc), Options{}); err != nil {
				t.Errorf("Parse() error: %v", err)
			}
		})
	}
}

// A rule's Version is what it says: the same wherever the rule is in its
// file, however it is laid out, and as a Rule object; any change of its
// spec or name is another version.
func TestVersion(t *testing.T) {
	version := func(t *testing.T, doc string) string {
		t.Helper()
		rs, err := Parse("rules.yaml", []byte(doc), Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.Name == "r" {
				if r.Version() == "" {
					t.Fatal("no version")
				}
				return r.Version()
			}
		}
		t.Fatalf("no rule r in %s", doc)
		return ""
	}
	base := version(t, header+"  - id: a\n"+cm("x"))
	same := map[string]string{
		"after another rule": strings.NewReplacer("{name: r}", "{name: q}", "kind: App}", "kind: Other}").Replace(header) + "  - id: a\n" + cm("x") + "---\n" + header + "  - id: a\n" + cm("x"),
		"with comments and flow style": "# a comment\n" + strings.Replace(header, "  children:\n", "  children: # the children\n", 1) +
			"  - {id: a, template: {apiVersion: v1, kind: ConfigMap, metadata: {name: \"x\"}}}\n",
		"with labels": strings.Replace(header, "{name: r}", "{name: r, labels: {team: a}}", 1) + "  - id: a\n" + cm("x"),
	}
	for name, doc := range same {
		if got := version(t, doc); got != base {
			t.Errorf("%s: version %s, want %s", name, got, base)
		}
	}
	obj := map[string]any{"apiVersion": "kgen.dev/v1alpha1", "kind": "Rule",
		"metadata": map[string]any{"name": "r", "generation": int64(3), "resourceVersion": "12"},
		"spec": map[string]any{
			"parent":   map[string]any{"apiVersion": "example.com/v1", "kind": "App"},
			"children": []any{map[string]any{"id": "a", "template": map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "x"}}}},
		},
		"status": map[string]any{"observedGeneration": int64(3)},
	}
	r, err := FromObject(obj, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Version() != base {
		t.Errorf("as a Rule object: version %s, want %s", r.Version(), base)
	}
	other := map[string]string{
		"another child name": header + "  - id: a\n" + cm("y"),
		"another child id":   header + "  - id: b\n" + cm("x"),
		"another rule name":  strings.Replace(header, "{name: r}", "{name: r2}", 1) + "  - id: a\n" + cm("x"),
	}
	for name, doc := range other {
		r := "r"
		if name == "another rule name" {
			r = "r2"
		}
		rs, err := Parse("rules.yaml", []byte(doc), Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, got := range rs {
			if got.Name == r && got.Version() == base {
				t.Errorf("%s: the same version %s", name, base)
			}
		}
	}
}

// A rule's Document compiles, as a Rule object, to the same version: kgen
// records it with the version that runs, to run it again after a restart
// in place of a new version that does not start.
func TestDocumentCompilesTheSameVersion(t *testing.T) {
	files, err := filepath.Glob("../examples/*/rules.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example rules: %v", err)
	}
	for _, f := range files {
		rs, err := Load([]string{f}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			var obj map[string]any
			if err := json.Unmarshal(r.Document(), &obj); err != nil {
				t.Fatalf("%s: rule %s: document %s: %v", f, r.Name, r.Document(), err)
			}
			again, err := FromObject(obj, Options{})
			if err != nil {
				t.Fatalf("%s: rule %s: the document does not compile: %v", f, r.Name, err)
			}
			if again.Version() != r.Version() || again.Name != r.Name {
				t.Errorf("%s: rule %s: the document compiles to %s %s, want %s", f, r.Name, again.Name, again.Version(), r.Version())
			}
		}
	}
}
