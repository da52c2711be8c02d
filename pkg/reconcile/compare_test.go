package reconcile

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func obj(m map[string]any) *unstructured.Unstructured { return &unstructured.Unstructured{Object: m} }

func TestUpToDate(t *testing.T) {
	desired := withHash(obj(map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "c", "labels": map[string]any{"a": "b"},
			"ownerReferences": []any{map[string]any{"uid": "u1", "kind": "WebApp"}}},
		"data": map[string]any{"k": "v", "n": int64(3)},
		"spec": map[string]any{"list": []any{map[string]any{"name": "x"}}, "empty": map[string]any{}},
	}))
	hash := desired.GetAnnotations()[AnnotationTemplateHash]
	live := func(mutate func(m map[string]any)) *unstructured.Unstructured {
		m := desired.DeepCopy().Object
		mutate(m)
		return obj(m)
	}
	tests := []struct {
		name string
		live *unstructured.Unstructured
		want bool
	}{
		{"identical", live(func(map[string]any) {}), true},
		{"extra fields of other managers", live(func(m map[string]any) {
			m["status"] = map[string]any{"x": int64(1)}
			m["data"].(map[string]any)["other"] = "o"
			m["metadata"].(map[string]any)["labels"].(map[string]any)["team"] = "blue"
		}), true},
		{"defaults inside list elements", live(func(m map[string]any) {
			m["spec"].(map[string]any)["list"] = []any{map[string]any{"name": "x", "policy": "Always"}}
		}), true},
		{"number decoded as float", live(func(m map[string]any) { m["data"].(map[string]any)["n"] = float64(3) }), true},
		{"empty map dropped by the server", live(func(m map[string]any) { delete(m["spec"].(map[string]any), "empty") }), true},
		{"extra owner reference", live(func(m map[string]any) {
			md := m["metadata"].(map[string]any)
			md["ownerReferences"] = append(md["ownerReferences"].([]any), map[string]any{"uid": "u2"})
		}), true},
		{"changed value", live(func(m map[string]any) { m["data"].(map[string]any)["k"] = "w" }), false},
		{"missing field", live(func(m map[string]any) { delete(m["data"].(map[string]any), "k") }), false},
		{"list element added", live(func(m map[string]any) {
			m["spec"].(map[string]any)["list"] = []any{map[string]any{"name": "x"}, map[string]any{"name": "y"}}
		}), false},
		{"other template hash", live(func(m map[string]any) {
			m["metadata"].(map[string]any)["annotations"] = map[string]any{AnnotationTemplateHash: "old"}
		}), false},
		{"no owner reference", live(func(m map[string]any) { delete(m["metadata"].(map[string]any), "ownerReferences") }), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := UpToDate(desired, tt.live); got != tt.want {
				t.Errorf("UpToDate = %t, want %t", got, tt.want)
			}
		})
	}
	if UpToDate(desired, nil) {
		t.Error("UpToDate(nil live) = true")
	}
	if hash == "" || withHash(desired).GetAnnotations()[AnnotationTemplateHash] != hash {
		t.Error("the template hash must not depend on a previous hash annotation")
	}
}

func TestRecentWrites(t *testing.T) {
	mk := func(uid, rv string) *unstructured.Unstructured {
		u := obj(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{
			"name": "c", "namespace": "n", "uid": uid, "resourceVersion": rv}})
		return u
	}
	r := newRecentWrites()
	if got := r.freshest(nil, mk("", "")); got != nil {
		t.Fatalf("nothing written yet: got %v", got)
	}
	r.remember(mk("u1", "10"))
	if got := r.freshest(nil, mk("", "")); got == nil || got.GetResourceVersion() != "10" {
		t.Fatalf("a created object the cache has not seen: got %v", got)
	}
	if got := r.freshest(mk("u1", "9"), nil); got.GetResourceVersion() != "10" {
		t.Errorf("stale cache: got rv %s, want 10", got.GetResourceVersion())
	}
	if got := r.freshest(mk("u1", "10"), nil); got.GetResourceVersion() != "10" {
		t.Errorf("caught-up cache: got rv %s", got.GetResourceVersion())
	}
	if got := r.freshest(nil, mk("", "")); got != nil {
		t.Errorf("once the cache caught up nothing is remembered, got %v", got)
	}
	r.remember(mk("u3", "30"))
	r.seen("u3", "29")
	if got := r.freshest(nil, mk("", "")); got == nil {
		t.Error("an older version in the cache must not drop a newer write")
	}
	r.seen("u3", "30")
	if got := r.freshest(nil, mk("", "")); got != nil {
		t.Errorf("once the cache has seen the write it is dropped, got %v", got)
	}
	r.remember(mk("u2", "20"))
	r.forget(mk("u2", "20"))
	if got := r.freshest(nil, mk("", "")); got != nil {
		t.Errorf("forgotten object returned: %v", got)
	}

	// A fresh child of another parent with the same name is not this one's.
	other := mk("u4", "40")
	other.SetLabels(map[string]string{LabelRule: "r", LabelParentUID: "a", LabelChild: "c"})
	r.remember(other)
	mine := mk("", "")
	mine.SetLabels(map[string]string{LabelRule: "r", LabelParentUID: "b", LabelChild: "c"})
	if got := r.freshest(nil, mine); got != nil {
		t.Errorf("another parent's child was taken for this parent's: %v", got.GetLabels())
	}
	mine.SetLabels(other.GetLabels())
	if got := r.freshest(nil, mine); got == nil {
		t.Error("the parent's own fresh child was not found")
	}
}

// A write whose watch event the cache processed before the write's response
// came back is not remembered: no later event would drop it.
func TestRecentWritesAlreadyCached(t *testing.T) {
	mk := func(uid, rv string) *unstructured.Unstructured {
		return obj(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{
			"name": "c", "namespace": "n", "uid": uid, "resourceVersion": rv}})
	}
	cachedRV := ""
	r := newRecentWrites()
	r.cached = func(apiVersion, kind, namespace, name string) string {
		if apiVersion != "v1" || kind != "ConfigMap" || namespace != "n" || name != "c" {
			t.Errorf("asked the cache for %s %s %s/%s", apiVersion, kind, namespace, name)
		}
		return cachedRV
	}
	cachedRV = "10"
	r.remember(mk("u1", "10"))
	if n := len(r.objects); n != 0 {
		t.Errorf("a write the cache holds was remembered (%d entries)", n)
	}
	cachedRV = "9"
	r.remember(mk("u1", "11"))
	if got := r.freshest(mk("u1", "9"), nil); got.GetResourceVersion() != "11" {
		t.Errorf("a write the cache does not show yet was not remembered: got rv %s", got.GetResourceVersion())
	}
	cachedRV = ""
	r.remember(mk("u2", "20"))
	if got := r.freshest(nil, mk("", "")); got == nil || got.GetResourceVersion() != "20" {
		t.Errorf("a created object the cache has not seen was not remembered: got %v", got)
	}
}
