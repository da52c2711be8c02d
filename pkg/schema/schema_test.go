package schema

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/openapi"
)

// doc is a small OpenAPI v3 document in the shape the API server publishes:
// a kind with a keyed list (by x-kubernetes-list-map-keys and by patch merge
// key), a set, an atomic list, quantities reached through allOf, a map, a
// recursive type, and a second kind that refers to nothing of interest.
const doc = `{
  "openapi": "3.0.0",
  "components": {"schemas": {
    "example.v1.Widget": {
      "type": "object",
      "x-kubernetes-group-version-kind": [{"group": "example.com", "version": "v1", "kind": "Widget"}],
      "properties": {
        "apiVersion": {"type": "string"},
        "spec": {"allOf": [{"$ref": "#/components/schemas/example.v1.WidgetSpec"}], "description": "spec"}
      }
    },
    "example.v1.WidgetSpec": {
      "type": "object",
      "properties": {
        "ports": {"type": "array", "items": {"$ref": "#/components/schemas/example.v1.Port"},
                  "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["port", "protocol"]},
        "containers": {"type": "array", "items": {"$ref": "#/components/schemas/example.v1.Container"},
                       "x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": "name"},
        "finalizers": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
        "args": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "atomic"},
        "limits": {"type": "object", "additionalProperties": {"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.api.resource.Quantity"}]}},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "tree": {"$ref": "#/components/schemas/example.v1.Node"}
      }
    },
    "example.v1.Port": {"type": "object", "properties": {"port": {"type": "integer"}, "protocol": {"type": "string"}}},
    "example.v1.Container": {"type": "object", "properties": {
      "name": {"type": "string"},
      "cpu": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.api.resource.Quantity"}
    }},
    "example.v1.Node": {"type": "object", "properties": {
      "children": {"type": "array", "items": {"$ref": "#/components/schemas/example.v1.Node"},
                   "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}
    }},
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {"type": "string"},
    "example.v1.Plain": {
      "type": "object",
      "x-kubernetes-group-version-kind": [{"group": "example.com", "version": "v1", "kind": "Plain"}],
      "properties": {"data": {"type": "object", "additionalProperties": {"type": "string"}}}
    },
    "example.v1.Broken": "not a schema"
  }}
}`

var (
	widget = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}
	plain  = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Plain"}
)

func wantWidget() *Field {
	node := &Field{Properties: map[string]*Field{}}
	// Below its first level a recursive type is compared literally.
	node.Properties["children"] = &Field{ListType: ListMap, ListMapKeys: []string{"name"}}
	return &Field{Properties: map[string]*Field{
		"spec": {Properties: map[string]*Field{
			"ports":      {ListType: ListMap, ListMapKeys: []string{"port", "protocol"}},
			"containers": {ListType: ListMap, ListMapKeys: []string{"name"}, Items: &Field{Properties: map[string]*Field{"cpu": {Quantity: true}}}},
			"finalizers": {ListType: ListSet},
			"limits":     {AdditionalProperties: &Field{Quantity: true}},
			"tree":       node,
		}},
	}}
}

func TestCondense(t *testing.T) {
	for _, tc := range []struct {
		name   string
		wanted []schema.GroupVersionKind
		want   map[schema.GroupVersionKind]*Field
	}{
		{name: "every kind", want: map[schema.GroupVersionKind]*Field{widget: wantWidget(), plain: nil}},
		{name: "one kind", wanted: []schema.GroupVersionKind{widget}, want: map[schema.GroupVersionKind]*Field{widget: wantWidget()}},
		{name: "a kind with nothing of interest", wanted: []schema.GroupVersionKind{plain}, want: map[schema.GroupVersionKind]*Field{plain: nil}},
		{name: "a kind the document lacks", wanted: []schema.GroupVersionKind{{Group: "example.com", Version: "v1", Kind: "Other"}}, want: map[schema.GroupVersionKind]*Field{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Condense([]byte(doc), tc.wanted...)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				g, _ := json.MarshalIndent(got, "", " ")
				w, _ := json.MarshalIndent(tc.want, "", " ")
				t.Errorf("got\n%s\nwant\n%s", g, w)
			}
		})
	}
}

func TestCondenseRejectsNonJSON(t *testing.T) {
	if _, err := Condense([]byte("openapi: 3.0.0")); err == nil {
		t.Fatal("no error for a document that is not JSON")
	}
}

// fakeClient serves documents by path and counts reads.
type fakeClient struct {
	docs  map[string]string
	reads map[string]int
	err   error
}

type fakeGV struct {
	c    *fakeClient
	path string
}

func (g fakeGV) Schema(contentType string) ([]byte, error) {
	if contentType != "application/json" {
		return nil, errors.New("unexpected content type " + contentType)
	}
	g.c.reads[g.path]++
	return []byte(g.c.docs[g.path]), nil
}

func (g fakeGV) ServerRelativeURL() string { return "/openapi/v3/" + g.path }

func (c *fakeClient) Paths() (map[string]openapi.GroupVersion, error) {
	if c.err != nil {
		return nil, c.err
	}
	out := map[string]openapi.GroupVersion{}
	for p := range c.docs {
		out[p] = fakeGV{c: c, path: p}
	}
	return out, nil
}

func TestSource(t *testing.T) {
	client := &fakeClient{docs: map[string]string{"apis/example.com/v1": doc}, reads: map[string]int{}}
	s := New(client)
	if err := s.Prefetch(widget, plain); err != nil {
		t.Fatal(err)
	}
	if n := client.reads["apis/example.com/v1"]; n != 1 {
		t.Errorf("Prefetch of two kinds of one group version read its document %d times, want 1", n)
	}
	f, err := s.Kind(widget)
	if err != nil || !reflect.DeepEqual(f, wantWidget()) {
		t.Errorf("Kind(Widget) = %v, %v", f, err)
	}
	if f, err := s.Kind(plain); f != nil || err != nil {
		t.Errorf("Kind(Plain) = %v, %v; want nil, nil", f, err)
	}
	if n := client.reads["apis/example.com/v1"]; n != 1 {
		t.Errorf("known kinds read the document again: %d reads", n)
	}

	// A group version the server does not publish fails, once, until Forget.
	missing := schema.GroupVersionKind{Group: "other.com", Version: "v1", Kind: "Thing"}
	if _, err := s.Kind(missing); err == nil {
		t.Error("no error for a group version without a document")
	}
	client.docs["apis/other.com/v1"] = doc
	if _, err := s.Kind(missing); err == nil {
		t.Error("a failed group version was read again before Forget")
	}
	s.Forget(missing.GroupVersion())
	if f, err := s.Kind(missing); f != nil || err != nil {
		t.Errorf("after Forget: Kind = %v, %v; want nil, nil (the document lacks the kind)", f, err)
	}

	// Forget drops the kinds of a group version: they are read again.
	s.Forget(widget.GroupVersion())
	if _, err := s.Kind(widget); err != nil {
		t.Fatal(err)
	}
	if n := client.reads["apis/example.com/v1"]; n != 2 {
		t.Errorf("after Forget the document was read %d times in all, want 2", n)
	}

	// The core group's document is at api/v1.
	client.docs["api/v1"] = `{"components": {"schemas": {"v1.ConfigMap": {"x-kubernetes-group-version-kind": [{"group": "", "version": "v1", "kind": "ConfigMap"}], "properties": {"finalizers": {"type": "array", "x-kubernetes-list-type": "set"}}}}}}`
	f, err = s.Kind(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"})
	if err != nil || f.Property("finalizers").ListType != ListSet {
		t.Errorf("Kind(ConfigMap) = %v, %v", f, err)
	}
}
