package rules

import (
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// statusSchema is the schema of the App parents of the status tests: a
// typed status, with a part that keeps unknown fields and a map.
const statusAppSchema = `
type: object
properties:
  spec:
    type: object
    properties:
      image: {type: string}
      replicas: {type: integer}
      values: {type: object, x-kubernetes-preserve-unknown-fields: true}
  status:
    type: object
    properties:
      observedGeneration: {type: integer}
      conditions: {type: array, items: {type: object, x-kubernetes-preserve-unknown-fields: true}}
      availableReplicas: {type: integer}
      url: {type: string}
      ratio: {type: number}
      ready: {type: boolean}
      port: {x-kubernetes-int-or-string: true}
      endpoint:
        type: object
        properties:
          host: {type: string}
          port: {type: integer}
      extra: {type: object, x-kubernetes-preserve-unknown-fields: true}
      labels: {type: object, additionalProperties: {type: string}}
`

// statusSchemas answers Options.Schemas for App with a schema: yaml is
// the CRD version's openAPIV3Schema.
func statusSchemas(t *testing.T, doc string) func(schema.GroupVersionKind) (*apiextensionsv1.JSONSchemaProps, bool) {
	t.Helper()
	props := &apiextensionsv1.JSONSchemaProps{}
	if err := yaml.UnmarshalStrict([]byte(doc), props); err != nil {
		t.Fatal(err)
	}
	return func(gvk schema.GroupVersionKind) (*apiextensionsv1.JSONSchemaProps, bool) {
		return props, gvk.Kind == "App"
	}
}

// A rule's status fields are checked against the parent's status schema
// where it is known: a field it has no place for, or a value of another
// type, is an error naming the file, line, rule and spec.status field.
func TestStatusSchema(t *testing.T) {
	const fieldList = "(its fields: availableReplicas, conditions, endpoint, extra, labels, observedGeneration, port, ratio, ready, url)"
	open := `
type: object
properties:
  spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
  status: {type: object, x-kubernetes-preserve-unknown-fields: true}
`
	tests := []struct {
		name   string
		status string // the status fields, at the indentation of spec.status's
		schema string // the parent's schema; statusAppSchema when empty
		want   string // the error; "" for none
	}{
		// Accepted.
		{name: "fields of their types", status: "    url: ${parent.spec.image}\n    availableReplicas: ${parent.spec.replicas}\n    ready: true\n    ratio: 0.5\n"},
		{name: "literals of their types", status: "    availableReplicas: 3\n    url: x\n    ratio: 1\n    endpoint: {host: h, port: 80}\n"},
		{name: "int-or-string takes both", status: "    port: \"${parent.spec.image}\"\n"},
		{name: "an expression of dyn type", status: "    availableReplicas: ${parent.spec.values.count}\n    url: ${parent.spec.values.url}\n"},
		{name: "preserve-unknown-fields below", status: "    extra: {anything: {at: all}, n: \"${parent.spec.replicas}\"}\n"},
		{name: "a map's keys", status: "    labels: {a: \"${parent.spec.image}\", b: c}\n"},
		{name: "a status that keeps unknown fields", schema: open, status: "    mode: api\n    availableReplicas: not-an-int\n"},
		{name: "null", status: "    availableReplicas: null\n"},

		// Rejected.
		{name: "an unknown field", status: "    mode: api\n",
			want: `rules.yaml:13:5: rule "r": spec.status.mode: the status schema of example.com/v1 App has no field "mode" here ` + fieldList},
		{name: "a typo", status: "    availableReplica: ${parent.spec.replicas}\n",
			want: `rules.yaml:13:5: rule "r": spec.status.availableReplica: the status schema of example.com/v1 App has no field "availableReplica" here: did you mean "availableReplicas"? ` + fieldList},
		{name: "a typo below", status: "    endpoint: {hots: x}\n",
			want: `rules.yaml:13:16: rule "r": spec.status.endpoint.hots: the status schema of example.com/v1 App has no field "hots" here: did you mean "host"? (its fields: host, port)`},
		{name: "a string literal into an integer", status: "    availableReplicas: \"not-an-int\"\n",
			want: `rules.yaml:13:24: rule "r": spec.status.availableReplicas: the status schema of example.com/v1 App wants an integer here, not a string "not-an-int"`},
		{name: "a whole number written as a float into an integer", status: "    availableReplicas: 3.0\n"},
		{name: "a boolean literal into a string", status: "    url: true\n",
			want: `spec.status.url: the status schema of example.com/v1 App wants a string here, not a boolean true`},
		{name: "an integer literal into a boolean", status: "    ready: 1\n",
			want: `spec.status.ready: the status schema of example.com/v1 App wants a boolean here, not an integer 1`},
		{name: "an expression of another type", status: "    availableReplicas: ${parent.spec.image}\n",
			want: `rules.yaml:13:24: rule "r": spec.status.availableReplicas: ${parent.spec.image}: the status schema of example.com/v1 App wants an integer here, but the expression's type is string`},
		{name: "text into an integer", status: "    availableReplicas: \"n-${parent.spec.image}\"\n",
			want: `spec.status.availableReplicas: the status schema of example.com/v1 App wants an integer here, but text with ${...} in it is a string`},
		{name: "a mapping into a string", status: "    url: {a: b}\n",
			want: `spec.status.url: the status schema of example.com/v1 App wants a string here, not a mapping`},
		{name: "a parent without a status", schema: "type: object\nproperties:\n  spec: {type: object}\n", status: "    url: x\n",
			want: `rules.yaml:12:3: rule "r": spec.status: the schema of example.com/v1 App has no field "status" here (its fields: spec)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			schemaDoc := tt.schema
			if schemaDoc == "" {
				schemaDoc = statusAppSchema
			}
			doc := header + "  - id: a\n" + cm("x") + "  status:\n" + tt.status
			_, err := Parse("rules.yaml", []byte(doc), Options{Schemas: statusSchemas(t, schemaDoc)})
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Parse() error: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Parse() error:\n%v\nwant one containing:\n%s", err, tt.want)
			}
			// Without the parent's schema, every rule loads.
			if _, err := Parse("rules.yaml", []byte(doc), Options{}); err != nil {
				t.Errorf("Parse() without a schema: %v", err)
			}
		})
	}
}

// A rule with spec.parent.schema makes its parent's status from its status
// fields: without another schema (--crd, the cluster's) they are not
// checked, since they are what the status schema will say.
func TestStatusSchemaFromParentSchema(t *testing.T) {
	doc := strings.Replace(header, "kind: App}", "kind: App, schema: {image: string}}", 1) + "  - id: a\n" + cm("x") +
		"  status:\n    mode: api\n    image: ${parent.spec.image}\n"
	if _, err := Parse("rules.yaml", []byte(doc), Options{}); err != nil {
		t.Errorf("Parse() error: %v", err)
	}
}

// CheckSchema, as kgenctl run uses it once the parent's CRD is known, and
// for Rule objects, checks the status fields too.
func TestCheckSchemaStatus(t *testing.T) {
	props, _ := statusSchemas(t, statusAppSchema)(schema.GroupVersionKind{Kind: "App"})
	doc := header + "  - id: a\n" + cm("x") + "  status:\n    mode: api\n"
	rs, err := Parse("rules.yaml", []byte(doc), Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := `rules.yaml:13:5: rule "r": spec.status.mode: the status schema of example.com/v1 App has no field "mode" here`
	if err := rs[0].CheckSchema(props, nil); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("CheckSchema() = %v, want an error containing\n%s", err, want)
	}
	obj := map[string]any{}
	if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
		t.Fatal(err)
	}
	r, err := FromObject(obj, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CheckSchema(props, nil); err == nil || !strings.Contains(err.Error(), `rule "r": spec.status.mode: the status schema of example.com/v1 App has no field "mode"`) {
		t.Errorf("CheckSchema() of a Rule object = %v", err)
	}
}
