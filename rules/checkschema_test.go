package rules

import (
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// CheckSchema finds, once the schema is known, what a load with the schema
// would have found, naming the file, line and field; and only the rule's own
// errors, in a file of several rules.
func TestCheckSchema(t *testing.T) {
	appProps, _ := schemas(t)(schema.GroupVersionKind{Kind: "App"})
	// Another rule of the file, on App objects of another namespace.
	other := strings.NewReplacer("name: r}", "name: other}", "kind: App}", "kind: App, namespaces: [other]}").Replace(header) + "  - id: b\n" +
		"    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {name: y}\n      data: {v: \"${parent.spec.nothere}\"}\n"
	tests := []struct {
		name   string
		expr   string
		props  *apiextensionsv1.JSONSchemaProps
		object bool   // read from a Rule object rather than a file
		want   string // the error; "" for none
	}{
		{name: "right", expr: "parent.spec.image", props: appProps},
		{name: "typo", expr: "parent.spec.imgae", props: appProps,
			want: `rules.yaml:12:31: rule "r": child "a": template.data.v: ${parent.spec.imgae}: parent.spec has no field "imgae" in the schema of example.com/v1 App: did you mean "image"? (its fields: env, image, port, ratio, replicas, tags, values, when)`},
		{name: "type error", expr: "parent.spec.replicas + 'x'", props: appProps,
			want: "found no matching overload for '_+_' applied to '(int, string)'"},
		{name: "no schema", expr: "parent.spec.imgae"},
		{name: "any object", expr: "parent.spec.imgae", props: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: new(true)}},
		{name: "rule object", expr: "parent.spec.imgae", props: appProps, object: true,
			want: `Rule/r:11:25: rule "r": child "a": template.data.v: ${parent.spec.imgae}: parent.spec has no field "imgae"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := strings.Replace(header, "kind: App}", "kind: App, namespaces: [mine]}", 1) + "  - id: a\n    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {name: x}\n      data: {v: \"${" + tt.expr + "}\"}\n---\n" + other
			rs, err := Parse("rules.yaml", []byte(doc), Options{})
			if err != nil {
				t.Fatal(err)
			}
			r := rs[0]
			if tt.object {
				obj := map[string]any{}
				if err := yaml.Unmarshal([]byte(doc[:strings.Index(doc, "---")]), &obj); err != nil {
					t.Fatal(err)
				}
				if r, err = FromObject(obj, Options{}); err != nil {
					t.Fatal(err)
				}
			}
			err = r.CheckSchema(tt.props, nil)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("CheckSchema() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("CheckSchema() = %v, want an error containing\n%s", err, tt.want)
			case tt.want != "" && strings.Contains(err.Error(), "nothere"):
				t.Errorf("CheckSchema() = %v: it reports another rule's error", err)
			}
			if _, ok := err.(ErrorList); err != nil && !ok {
				t.Errorf("CheckSchema() = %T, want an ErrorList", err)
			}
		})
	}
}

// A rule made without a source cannot be checked again, and says so.
func TestCheckSchemaWithoutSource(t *testing.T) {
	r := &Rule{Name: "r"}
	if err := r.CheckSchema(&apiextensionsv1.JSONSchemaProps{Type: "object"}, nil); err == nil || !strings.Contains(err.Error(), "source") {
		t.Errorf("CheckSchema() = %v", err)
	}
}
