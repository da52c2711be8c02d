package rules

import (
	"strings"
	"testing"
)

// TestSelfTriggering checks that expressions reading a value that changes
// with every write are rejected wherever they appear, and that reading other
// metadata is not.
func TestSelfTriggering(t *testing.T) {
	const loop = "changes with every write, so kgen would write in a loop"
	tests := []struct {
		expr string
		want string // a part of the error; "" when the expression is fine
	}{
		{expr: "parent.metadata.resourceVersion", want: "reads parent.metadata.resourceVersion, which " + loop},
		{expr: "parent.metadata.managedFields", want: "reads parent.metadata.managedFields, which " + loop},
		{expr: `parent.metadata["resourceVersion"]`, want: "reads parent.metadata.resourceVersion, which " + loop},
		{expr: `parent["metadata"]["resourceVersion"]`, want: "reads parent.metadata.resourceVersion, which " + loop},
		{expr: "parent.?metadata.?resourceVersion.orValue('')", want: "reads parent.metadata.resourceVersion, which " + loop},
		{expr: `parent.metadata[?"resourceVersion"].orValue("")`, want: "reads parent.metadata.resourceVersion, which " + loop},
		{expr: "size(parent.metadata.managedFields)", want: "reads parent.metadata.managedFields, which " + loop},
		{expr: "parent.metadata.managedFields[0].manager", want: "reads parent.metadata.managedFields, which " + loop},
		{expr: "string(parent.metadata)", want: "uses all of parent.metadata as a value, including resourceVersion, which " + loop},
		{expr: "parent", want: "uses all of parent as a value, including metadata.resourceVersion, which " + loop},
		{expr: "parent.?metadata.orValue({})", want: "uses all of parent.metadata as a value"},
		{expr: `parent.metadata[parent.spec.key]`, want: "reads parent.metadata with a computed key"},
		{expr: `parent[parent.spec.key]`, want: "reads parent with a computed key"},
		{expr: "children.b.metadata.resourceVersion", want: "reads children.b.metadata.resourceVersion, which " + loop},
		{expr: `children["b"].metadata`, want: "uses all of children.b.metadata as a value"},
		{expr: "children.?b", want: "uses all of children.b as a value"},
		{expr: "[parent.metadata.name].map(x, parent)", want: "uses all of parent as a value"},
		// The objects of a forEach child, in a list.
		{expr: "children.b.map(c, c.metadata.resourceVersion)", want: "reads c.metadata.resourceVersion, which " + loop},
		{expr: "children.b.map(c, c)", want: "uses all of children.b[i] as a value, including metadata.resourceVersion"},
		{expr: "children.b.filter(c, true)", want: "uses all of children.b[i] as a value, including metadata.resourceVersion"},
		{expr: "children.b.filter(c, true).map(x, x.metadata.resourceVersion)", want: "reads x.metadata.resourceVersion, which " + loop},
		{expr: "children.b.exists(i, c, c.metadata.managedFields != null)", want: "reads c.metadata.managedFields, which " + loop},
		{expr: "children.b[0].metadata.resourceVersion", want: "reads children.b[i].metadata.resourceVersion, which " + loop},
		{expr: "children.b[0]", want: "uses all of children.b[i] as a value"},
		{expr: "children.b.map(c, c.metadata.name)"},
		{expr: "children.b.filter(c, has(c.status)).map(c, c.metadata.name)"},
		{expr: "size(children.b)"},
		{expr: "children.b.size()"},
		{expr: "children.b[0].metadata.name"},
		// Fine: fields deeper than metadata that do not change with writes.
		{expr: "parent.metadata.name"},
		{expr: "parent.metadata.labels"},
		{expr: `parent.metadata.annotations["a"]`},
		{expr: "parent.metadata.generation"},
		{expr: "parent.metadata.uid"},
		{expr: "parent.metadata.namespace"},
		{expr: "parent.spec"},
		{expr: "children.b.metadata.name"},
		{expr: "has(parent.metadata.resourceVersion)"},
		{expr: "has(parent.metadata)"},
		{expr: "has(parent.spec)"},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			quoted := strings.ReplaceAll("${"+tt.expr+"}", "'", "''")
			places := map[string]string{
				"template": header + "  - id: a\n    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {name: x}\n      data: {v: '" + quoted + "'}\n" +
					"  - id: b\n" + cm("b"),
				"status": header + "  - id: b\n" + cm("b") + "  status: {v: '" + quoted + "'}\n",
				"includeWhen": header + "  - id: a\n    includeWhen: ['${size([" + strings.ReplaceAll(tt.expr, "'", "''") + "]) > 0}']\n" + cm("a") +
					"  - id: b\n" + cm("b"),
				"readyWhen": header + "  - id: a\n    readyWhen: ['${size([" + strings.ReplaceAll(tt.expr, "'", "''") + "]) > 0}']\n" + cm("a") +
					"  - id: b\n" + cm("b"),
			}
			for place, doc := range places {
				_, err := Parse("rules.yaml", []byte(doc), Options{})
				switch {
				case tt.want == "" && err != nil:
					t.Errorf("%s: Parse() error: %v", place, err)
				case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
					t.Errorf("%s: Parse() error = %v, want one containing %q", place, err, tt.want)
				}
			}
		})
	}
	// The error names the file, line, rule, child, field and expression.
	_, err := Parse("rules.yaml", []byte(header+"  - id: a\n    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {name: x}\n      data: {v: '${string(parent.metadata)}'}\n"), Options{})
	want := `rules.yaml:12:18: rule "r": child "a": template.data.v: ${string(parent.metadata)}: uses all of parent.metadata as a value, including resourceVersion, which ` + loop + `: select the fields you need, such as parent.metadata.name`
	if err == nil || err.Error() != want {
		t.Errorf("Parse() error:\n%v\nwant:\n%s", err, want)
	}
}
