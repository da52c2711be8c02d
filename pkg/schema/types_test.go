package schema

import (
	"reflect"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/openapi/openapitest"
	"sigs.k8s.io/yaml"
)

// A Type keeps every field with its JSON types: through $ref and allOf, a
// Quantity (string or number), maps, and a recursive type that refers to
// itself.
func TestCondenseTypes(t *testing.T) {
	got, err := CondenseTypes([]byte(doc), widget)
	if err != nil {
		t.Fatal(err)
	}
	w := got[widget]
	if w == nil || !w.Is("object") || w.Open() {
		t.Fatalf("Widget = %+v, want a closed object", w)
	}
	spec := w.Properties["spec"]
	for _, tc := range []struct {
		name string
		got  *Type
		want []string
	}{
		{"apiVersion", w.Properties["apiVersion"], []string{"string"}},
		{"spec (allOf)", spec, []string{"object"}},
		{"a port", spec.Properties["ports"].Items.Properties["port"], []string{"integer"}},
		{"a quantity", spec.Properties["containers"].Items.Properties["cpu"], []string{"string"}},
		{"a map's value", spec.Properties["labels"].AdditionalProperties, []string{"string"}},
		{"a map of quantities", spec.Properties["limits"].AdditionalProperties, []string{"string"}},
	} {
		if tc.got == nil || !reflect.DeepEqual(tc.got.Types, tc.want) {
			t.Errorf("%s: %+v, want types %v", tc.name, tc.got, tc.want)
		}
	}
	tree := spec.Properties["tree"]
	if tree.Properties["children"].Items != tree {
		t.Error("a recursive type does not refer to itself")
	}
	if _, ok := got[plain]; ok {
		t.Error("a kind not asked for was condensed")
	}
}

// Real documents: a Deployment's IntOrString and Quantity fields take
// several types, its ObjectMeta is known, and a RawExtension is open.
func TestTypesOfRealDocuments(t *testing.T) {
	s := New(openapitest.NewEmbeddedFileClient())
	d, err := s.Type(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"})
	if err != nil || d == nil {
		t.Fatalf("Type(Deployment) = %v, %v", d, err)
	}
	spec := d.Properties["spec"]
	container := spec.Properties["template"].Properties["spec"].Properties["containers"].Items
	for _, tc := range []struct {
		name string
		got  *Type
		want []string
	}{
		{"replicas", spec.Properties["replicas"], []string{"integer"}},
		{"maxSurge", spec.Properties["strategy"].Properties["rollingUpdate"].Properties["maxSurge"], []string{"integer", "string"}},
		{"a limit", container.Properties["resources"].Properties["limits"].AdditionalProperties, []string{"string", "number"}},
		{"labels", d.Properties["metadata"].Properties["labels"].AdditionalProperties, []string{"string"}},
	} {
		if tc.got == nil || !reflect.DeepEqual(tc.got.Types, tc.want) {
			t.Errorf("%s: %+v, want types %v", tc.name, tc.got, tc.want)
		}
	}
	rev, err := s.Type(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "ControllerRevision"})
	if err != nil || !rev.Properties["data"].Open() {
		t.Errorf("ControllerRevision data = %+v, %v; want an open object", rev.Properties["data"], err)
	}
	if rev.Open() {
		t.Error("ControllerRevision is open")
	}
}

// Kind and Type come from one read of a document.
func TestSourceReadsOnceForBoth(t *testing.T) {
	client := &fakeClient{docs: map[string]string{"apis/example.com/v1": doc}, reads: map[string]int{}}
	s := New(client)
	if tp, err := s.Type(widget); err != nil || tp == nil {
		t.Fatalf("Type(Widget) = %v, %v", tp, err)
	}
	if f, err := s.Kind(widget); err != nil || !reflect.DeepEqual(f, wantWidget()) {
		t.Errorf("Kind(Widget) = %v, %v", f, err)
	}
	if n := client.reads["apis/example.com/v1"]; n != 1 {
		t.Errorf("Type then Kind read the document %d times, want 1", n)
	}
	s.Forget(widget.GroupVersion())
	if _, err := s.Type(widget); err != nil {
		t.Fatal(err)
	}
	if n := client.reads["apis/example.com/v1"]; n != 2 {
		t.Errorf("after Forget the document was read %d times in all, want 2", n)
	}
	if tp, err := s.Type(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Other"}); tp != nil || err != nil {
		t.Errorf("Type of a kind the document lacks = %v, %v; want nil, nil", tp, err)
	}
}

// TypeOf reads a CRD's schema the same way.
func TestTypeOf(t *testing.T) {
	props := &apiextensionsv1.JSONSchemaProps{}
	if err := yaml.Unmarshal([]byte(`
type: object
properties:
  spec:
    type: object
    properties:
      port: {x-kubernetes-int-or-string: true}
      env: {type: object, additionalProperties: {type: string}}
      tags: {type: array, items: {type: string}}
      values: {type: object, x-kubernetes-preserve-unknown-fields: true}
`), props); err != nil {
		t.Fatal(err)
	}
	spec := TypeOf(props).Properties["spec"]
	if spec.Open() || !reflect.DeepEqual(spec.Properties["port"].Types, []string{"integer", "string"}) ||
		!spec.Properties["env"].AdditionalProperties.Is("string") || !spec.Properties["tags"].Items.Is("string") ||
		!spec.Properties["values"].PreserveUnknownFields || !spec.Properties["values"].Open() {
		t.Errorf("TypeOf() spec = %+v", spec)
	}
	if TypeOf(nil) != nil {
		t.Error("TypeOf(nil) is not nil")
	}
}
