package watch

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// stripCases are what the cache keeps of an object's metadata: both ways
// in, stripMetadata on a watch event's JSON and Compact on a write's
// answer, must agree on them.
var stripCases = []struct{ name, in, want string }{
	{"nothing to cut", `{"kind":"A","metadata":{"name":"x"}}`, `{"kind":"A","metadata":{"name":"x"}}`},
	{"managed fields in the middle", `{"metadata":{"name":"x","managedFields":[{"a":"}{"}],"uid":"u"}}`, `{"metadata":{"name":"x","uid":"u"}}`},
	{"managed fields last", `{"metadata":{"name":"x", "managedFields" : [{}] },"spec":{}}`, `{"metadata":{"name":"x" },"spec":{}}`},
	{"managed fields alone", `{"metadata":{"managedFields":[]}}`, `{"metadata":{}}`},
	{"last-applied and managed fields", `{"metadata":{"annotations":{"a":"1","kubectl.kubernetes.io/last-applied-configuration":"{\"x\":\"}\"}"},"managedFields":[{"f":{"\\\"":1}}]}}`,
		`{"metadata":{"annotations":{"a":"1"}}}`},
	{"only last-applied", `{"metadata":{"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{}"}}}`, `{"metadata":{"annotations":{}}}`},
	{"managedFields outside metadata stays", `{"spec":{"managedFields":1},"metadata":{}}`, `{"spec":{"managedFields":1},"metadata":{}}`},
	{"an older kgen's Update entry stays", `{"metadata":{"managedFields":[{"manager":"x","operation":"Update","fieldsV1":{}},{"manager":"kgen","operation":"Update","apiVersion":"v1","fieldsV1":{"f:data":{}}},{"manager":"kgen","operation":"Apply","fieldsV1":{}},{"manager":"kgen","operation":"Update","apiVersion":"v1","subresource":"status"}],"name":"x"}}`,
		`{"metadata":{"managedFields":[{"manager":"kgen","operation":"Update","apiVersion":"v1","fieldsV1":{"f:data":{}}},{"manager":"kgen","operation":"Update","apiVersion":"v1","subresource":"status"}],"name":"x"}}`},
	{"a custom resource's entries, their members sorted by name", `{"metadata":{"managedFields":[{"apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{"f:status":{"f:url":{}}},"manager":"kgen","operation":"Update","subresource":"status","time":"t"},{"apiVersion":"v1","manager":"kgen","operation":"Apply"},{"apiVersion":"v1","manager":"kgen","operation":"Apply","subresource":"status"},{"apiVersion":"v1","manager":"kgen-finalizer","operation":"Update"}],"name":"x"}}`,
		`{"metadata":{"managedFields":[{"apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{"f:status":{"f:url":{}}},"manager":"kgen","operation":"Update","subresource":"status","time":"t"},{"apiVersion":"v1","manager":"kgen","operation":"Apply","subresource":"status"}],"name":"x"}}`},
	{"only kgen's Update entries of the object and its status stay", `{"metadata":{"managedFields":[{"manager":"kgen","operation":"Update","apiVersion":"v1","subresource":"scale"},{"manager":"kgen","operation":"Update","apiVersion":"v1","fieldsV1":{"f:status":{"f:url":{}}},"subresource":"status"}],"name":"x"}}`,
		`{"metadata":{"managedFields":[{"manager":"kgen","operation":"Update","apiVersion":"v1","fieldsV1":{"f:status":{"f:url":{}}},"subresource":"status"}],"name":"x"}}`},
}

func TestStripMetadata(t *testing.T) {
	for _, tc := range stripCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := stripMetadata([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
	for _, bad := range []string{``, `[]`, `{"a"}`, `{"a":}`, `{"a":"x`, `{"a":{"b":1}`, `{"a":1,}`} {
		if _, err := stripMetadata([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestDecodeObject(t *testing.T) {
	data := []byte(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"a","uid":"u1",
		"resourceVersion":"7","generation":3,"labels":{"kgen.dev/rule":"r","team":"blue"},
		"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{}","kgen.dev/parent":"a/p"},
		"deletionTimestamp":"2026-01-02T03:04:05Z","managedFields":[{"manager":"m"}]},"spec":{"replicas":2}}`)
	o, err := decodeObject(data, schema.GroupVersionKind{})
	if err != nil {
		t.Fatal(err)
	}
	if o.APIVersion != "apps/v1" || o.Kind != "Deployment" || o.Name != "web" || o.Namespace != "a" || o.UID != "u1" ||
		o.ResourceVersion != "7" || o.Generation != 3 || o.DeletionTimestamp == nil {
		t.Errorf("metadata: %+v %+v", o.TypeMeta, o.ObjectMeta)
	}
	if o.Label("team") != "blue" || o.Annotation("kgen.dev/parent") != "a/p" || o.Annotation(lastApplied) != "" {
		t.Errorf("labels %v annotations %v", o.GetLabels(), o.GetAnnotations())
	}
	if o.ObjectMeta.Labels != nil || o.ManagedFields != nil {
		t.Errorf("labels belong in the pairs and managed fields nowhere: %+v", o.ObjectMeta)
	}
	u, err := o.Unstructured()
	if err != nil {
		t.Fatal(err)
	}
	if u.GetManagedFields() != nil || u.GetAnnotations()[lastApplied] != "" || u.GetLabels()["team"] != "blue" {
		t.Errorf("cached JSON: %v", u.Object)
	}
	if r, _, _ := unstructuredInt(u.Object, "spec", "replicas"); r != 2 {
		t.Errorf("spec lost: %v", u.Object)
	}

	// A list item does not name its kind: it gets the list's.
	item, err := decodeObject([]byte(`{"metadata":{"name":"c"},"data":{}}`), schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"})
	if err != nil {
		t.Fatal(err)
	}
	u, err = item.Unstructured()
	if err != nil {
		t.Fatal(err)
	}
	if u.GetAPIVersion() != "v1" || u.GetKind() != "ConfigMap" || u.GetName() != "c" || item.Kind != "ConfigMap" {
		t.Errorf("list item: %v", u.Object)
	}
	empty, err := decodeObject([]byte(`{}`), schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"})
	if err != nil {
		t.Fatal(err)
	}
	if data, err := empty.JSON(); err != nil || string(data) != `{"kind":"ConfigMap","apiVersion":"v1"}` {
		t.Errorf("empty item: %s %v", data, err)
	}
}

func unstructuredInt(obj map[string]any, fields ...string) (int64, bool, error) {
	var v any = obj
	for _, f := range fields {
		m, ok := v.(map[string]any)
		if !ok {
			return 0, false, nil
		}
		v = m[f]
	}
	n, ok := v.(int64)
	return n, ok, nil
}

// FuzzStripMetadata checks the byte surgery against decoding, deleting and
// comparing: for any JSON object it must give the same object without the
// managed fields and the last-applied annotation, or fail on invalid input.
func FuzzStripMetadata(f *testing.F) {
	for _, seed := range []string{
		`{"metadata":{"name":"x","managedFields":[{"a":"}{"}],"uid":"u"}}`,
		`{"metadata":{"annotations":{"a":"1","kubectl.kubernetes.io/last-applied-configuration":"{\"x\":\"}\"}"},"managedFields":[]}}`,
		`{"metadata":{"managedFields":null},"spec":[1,2.5e3,true,null,"\u00e9"]}`,
		` { "metadata" : { "annotations" : { "kubectl.kubernetes.io/last-applied-configuration" : "" } } } `,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want map[string]any
		if err := json.Unmarshal(data, &want); err != nil {
			return // not an object: nothing to compare
		}
		got, err := stripMetadata(data)
		if err != nil {
			t.Fatalf("valid object %q: %v", data, err)
		}
		var back map[string]any
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("%q became invalid: %q: %v", data, got, err)
		}
		if meta, ok := want["metadata"].(map[string]any); ok {
			// Names are matched as written; the API server never
			// escapes these, so inputs that do are not compared.
			if _, ok := meta["managedFields"]; ok && !bytes.Contains(data, []byte(`"managedFields"`)) {
				return
			}
			if bytes.Contains(data, legacyManager) {
				return // kept entries are checked by TestStripMetadata
			}
			if ann, ok := meta["annotations"].(map[string]any); ok {
				if _, ok := ann[lastApplied]; ok && !bytes.Contains(data, []byte(`"`+lastApplied+`"`)) {
					return
				}
			}
			delete(meta, "managedFields")
			if ann, ok := meta["annotations"].(map[string]any); ok {
				delete(ann, lastApplied)
			}
		}
		if !reflect.DeepEqual(back, want) {
			t.Fatalf("%q: got %q", data, got)
		}
	})
}

func TestCompactAgreesWithStripMetadata(t *testing.T) {
	for _, tc := range stripCases {
		t.Run(tc.name, func(t *testing.T) {
			u := &unstructured.Unstructured{}
			if err := json.Unmarshal([]byte(tc.in), &u.Object); err != nil {
				t.Fatal(err)
			}
			c, err := Compact(u)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := c.(*Object).JSON()
			if err != nil {
				t.Fatal(err)
			}
			var got, want any
			if err := json.Unmarshal(raw, &got); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got  %s\nwant %s", raw, tc.want)
			}
		})
	}
}
