package rules

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"kgen.dev/kgen/internal/golden"
)

// TestCRD builds the CRD of a rule's spec.parent.schema, checks that the API
// server would accept it, and compares it with its golden file.
func TestCRD(t *testing.T) {
	rs, err := Load([]string{"testdata/schema/rules.yaml"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	crd, err := rs[0].CRD()
	if err != nil {
		t.Fatal(err)
	}
	typed := &apiextensionsv1.CustomResourceDefinition{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(crd.Object, typed); err != nil {
		t.Fatal(err)
	}
	checkCRD(t, typed)
	out, err := yaml.Marshal(crd.Object)
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, filepath.Join("testdata", "schema", "crd.golden.yaml"), string(out))
	if !rs[0].Parent.TypeChecked {
		t.Error("the rule's expressions were not checked against spec.parent.schema")
	}
}

// checkCRD validates a CRD as the API server does.
func checkCRD(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition) {
	t.Helper()
	crd = crd.DeepCopy()
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(crd)
	internal := &apiextensions.CustomResourceDefinition{}
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(crd, internal, nil); err != nil {
		t.Fatal(err)
	}
	for _, e := range validation.ValidateCustomResourceDefinition(context.Background(), internal) {
		t.Errorf("invalid CRD: %v", e)
	}
}

func TestSimpleSchemaErrors(t *testing.T) {
	tests := []struct {
		schema string
		want   string
	}{
		{"{image: strin}", `rules.yaml:5:67: rule "r": spec.parent.schema.image: unknown type "strin": use string, integer, number, boolean, object, []TYPE or map[string]TYPE`},
		{"{replicas: 'integer | default=one'}", `rules.yaml:5:70: rule "r": spec.parent.schema.replicas: marker default=one: "one" is not a value of type integer`},
		{"{replicas: 'integer | minimal=1'}", `rules.yaml:5:70: rule "r": spec.parent.schema.replicas: marker minimal=1: unknown marker: use required, default, description, minimum, maximum, enum, pattern, minLength, maxLength, minItems or maxItems`},
		{"{replicas: 'integer | 1'}", `rules.yaml:5:70: rule "r": spec.parent.schema.replicas: marker "1": want KEY=VALUE`},
		{"{name: 'string | description=\"open'}", `rules.yaml:5:66: rule "r": spec.parent.schema.name: marker description: unterminated quoted value`},
		{"{ports: [string]}", `rules.yaml:5:67: rule "r": spec.parent.schema.ports: a list must hold one mapping, the fields of its items; write "[]TYPE" for a list of scalars`},
		{"{n: 5}", `rules.yaml:5:63: rule "r": spec.parent.schema.n: must be a type ("string", "integer | default=1"), a mapping of fields, or a list of one mapping`},
		{"[a]", `rules.yaml:5:59: rule "r": spec.parent.schema: must be a mapping of field names to types, as in {image: string, replicas: "integer | default=1"}`},
	}
	for _, tt := range tests {
		t.Run(tt.schema, func(t *testing.T) {
			doc := strings.Replace(header, "kind: App}", "kind: App, schema: "+tt.schema+"}", 1) + "  - id: a\n" + cm("a")
			_, err := Parse("rules.yaml", []byte(doc), Options{})
			if err == nil || err.Error() != tt.want {
				t.Errorf("Parse() error:\n%v\nwant:\n%s", err, tt.want)
			}
		})
	}
	// Typed expressions against the short form.
	doc := strings.Replace(header, "kind: App}", "kind: App, schema: {image: string}}", 1) + "  - id: a\n" + cm("${parent.spec.imgae}")
	_, err := Parse("rules.yaml", []byte(doc), Options{})
	if want := `parent.spec has no field "imgae" in spec.parent.schema: did you mean "image"? (its fields: image)`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Parse() error = %v, want one containing %s", err, want)
	}
}

func TestPlural(t *testing.T) {
	for in, want := range map[string]string{"webapp": "webapps", "policy": "policies", "class": "classes", "box": "boxes", "gateway": "gateways", "mesh": "meshes"} {
		if got := Plural(in); got != want {
			t.Errorf("Plural(%q) = %q, want %q", in, got, want)
		}
	}
}

// With --manage-crds, two rules of one parent kind must describe it alike:
// one CRD serves it. The order of required fields does not matter, and a
// rule that does not describe the kind is no conflict.
func TestCheckCRDs(t *testing.T) {
	described := func(name, namespace, schema string) string {
		return strings.Replace(strings.Replace(header, "name: r}", "name: "+name+"}", 1), "kind: App}", "kind: App, namespaces: ["+namespace+"], schema: "+schema+"}", 1) + "  - id: a\n" + cm("a")
	}
	tests := []struct {
		name string
		docs []string
		want []string
	}{{
		name: "another schema",
		docs: []string{described("r", "a", "{f1: string}"), described("s", "b", "{f2: string}")},
		want: []string{`rules.yaml:13:1: rule "s": spec.parent.schema: rule "r" (rules.yaml:1:1) describes App.example.com too, with another CustomResourceDefinition (its schema, version, scope or status fields differ): one CRD serves the kind, so describe it alike in both rules, or in one only`},
	}, {
		name: "alike, and one that does not describe it",
		docs: []string{described("r", "a", "{f1: string}"), described("s", "b", "{f1: string}"),
			strings.Replace(strings.Replace(header, "name: r}", "name: t}", 1), "kind: App}", "kind: App, namespaces: [c]}", 1) + "  - id: a\n" + cm("a")},
	}, {
		name: "required fields in another order",
		docs: []string{described("r", "a", `{x: "string | required=true", y: "string | required=true"}`),
			described("s", "b", `{y: "string | required=true", x: "string | required=true"}`)},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			loaded, err := Parse("rules.yaml", []byte(strings.Join(tt.docs, "---\n")), Options{})
			if err != nil {
				t.Fatalf("Parse: %v (the rules are valid without --manage-crds)", err)
			}
			var got []string
			for _, e := range CheckCRDs(loaded) {
				got = append(got, e.Error())
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("CheckCRDs:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}
