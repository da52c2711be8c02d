package rules

import (
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
