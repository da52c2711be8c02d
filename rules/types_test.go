package rules

import (
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// appSchema is the schema of the App parents of the tests.
const appSchema = `
type: object
properties:
  spec:
    type: object
    properties:
      image: {type: string}
      replicas: {type: integer}
      ratio: {type: number}
      when: {type: string, format: date-time}
      tags: {type: array, items: {type: string}}
      env: {type: object, additionalProperties: {type: string}}
      values: {type: object, x-kubernetes-preserve-unknown-fields: true}
      port: {x-kubernetes-int-or-string: true}
  status:
    type: object
    properties:
      ready: {type: boolean}
`

func schemas(t *testing.T) func(schema.GroupVersionKind) (*apiextensionsv1.JSONSchemaProps, bool) {
	return statusSchemas(t, appSchema)
}

func TestTypedExpressions(t *testing.T) {
	tests := []struct {
		expr string
		want string // the error's cause; "" when the expression is fine
	}{
		{expr: "parent.spec.imgae", want: `parent.spec has no field "imgae" in the schema of example.com/v1 App: did you mean "image"? (its fields: env, image, port, ratio, replicas, tags, values, when)`},
		{expr: "parent.spce.image", want: `parent has no field "spce" in the schema of example.com/v1 App: did you mean "spec"? (its fields: apiVersion, kind, metadata, spec, status)`},
		{expr: "parent.?spec.?imgae.orValue('')", want: `parent.spec has no field "imgae" in the schema of example.com/v1 App: did you mean "image"?`},
		{expr: "has(parent.status.redy)", want: `parent.status has no field "redy" in the schema of example.com/v1 App: did you mean "ready"? (its fields: ready)`},
		{expr: "parent.spec.image + 1", want: "found no matching overload for '_+_' applied to '(string, int)'"},
		{expr: "parent.spec.replicas + 'x'", want: "found no matching overload for '_+_' applied to '(int, string)'"},
		{expr: "parent.metadata.nmae", want: `parent.metadata has no field "nmae" in the schema of example.com/v1 App: did you mean "name"?`},
		{expr: "parent.spec.image + string(parent.spec.replicas)"},
		{expr: "parent.spec.values.anything.below[0]"},
		{expr: "parent.spec.port"},
		{expr: "parent.spec.ratio"},
		{expr: "parent.spec.when + 'Z'"},
		{expr: "parent.spec.tags.join(',')"},
		{expr: "parent.spec.env['A']"},
		{expr: "[parent.spec.image, 'x']"},
		{expr: "parent.metadata.labels.app + parent.metadata.namespace + parent.metadata.uid + string(parent.metadata.generation)"},
		{expr: "parent.status.ready"},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			doc := header + "  - id: a\n    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {name: x}\n      data: {v: \"${" + strings.ReplaceAll(tt.expr, `"`, `\"`) + "}\"}\n"
			rs, err := Parse("rules.yaml", []byte(doc), Options{Schemas: schemas(t)})
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Parse() error: %v", err)
			case tt.want == "":
				if !rs[0].Parent.TypeChecked {
					t.Error("the rule was not type-checked")
				}
			case err == nil || !strings.Contains(err.Error(), tt.want):
				t.Fatalf("Parse() error:\n%v\nwant one containing:\n%s", err, tt.want)
			}
		})
	}
	// The error names the file, line, column, rule, child, field and
	// expression.
	doc := header + "  - id: a\n    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {name: x}\n      data: {v: \"${parent.spec.imgae}\"}\n"
	_, err := Parse("rules.yaml", []byte(doc), Options{Schemas: schemas(t)})
	want := `rules.yaml:12:31: rule "r": child "a": template.data.v: ${parent.spec.imgae}: parent.spec has no field "imgae" in the schema of example.com/v1 App: did you mean "image"? (its fields: env, image, port, ratio, replicas, tags, values, when)`
	if err == nil || err.Error() != want {
		t.Errorf("Parse() error:\n%v\nwant:\n%s", err, want)
	}
	// Untyped, the same expressions load and fail at run time.
	if _, err := Parse("rules.yaml", []byte(doc), Options{}); err != nil {
		t.Errorf("Parse() without a schema: %v", err)
	}
}

// An expression that is right for the schema evaluates on objects as the API
// server returns them.
func TestTypedEvaluation(t *testing.T) {
	doc := header + "  - id: a\n" + cm("a") + "      data:\n        v: '${parent.spec.image + \":\" + string(parent.spec.replicas) + \" \" + parent.spec.tags.join(\",\") + \" \" + string(parent.spec.?values.?x.orValue(0))}'\n"
	rs, err := Parse("rules.yaml", []byte(doc), Options{Schemas: schemas(t)})
	if err != nil {
		t.Fatal(err)
	}
	parent := map[string]any{"metadata": map[string]any{"name": "a"}, "spec": map[string]any{
		"image": "nginx", "replicas": int64(2), "tags": []any{"a", "b"}, "values": map[string]any{"x": int64(7)},
	}}
	obj, _, err := rs[0].Children[0].Template.Evaluate(NewVars(parent, nil, nil))
	var got any
	if m, ok := obj.(map[string]any); ok {
		got = m["data"].(map[string]any)["v"]
	}
	if err != nil || got != "nginx:2 a,b 7" {
		t.Errorf("Evaluate() = %v, %v", got, err)
	}
}
