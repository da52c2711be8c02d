package watch

import (
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/tools/cache"
)

var cmGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

func configMap(ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("ConfigMap")
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetAnnotations(map[string]string{lastApplied: "{...}", "keep": "me"})
	u.SetManagedFields(nil)
	return u
}

func newManager(t *testing.T, objs ...runtime.Object) *Manager {
	t.Helper()
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{cmGVR: "ConfigMapList"}, objs...)
	m := New(Config{Client: client, Indexers: cache.Indexers{"ns": cache.MetaNamespaceIndexFunc}})
	t.Cleanup(m.Shutdown)
	return m
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestAcquireSharesAndReleases(t *testing.T) {
	m := newManager(t, configMap("a", "one"), configMap("b", "two"))
	var mu sync.Mutex
	seen := map[string]int{}
	handler := func(who string) Handler {
		return func(obj metav1.Object, _ bool) {
			mu.Lock()
			defer mu.Unlock()
			seen[who+":"+obj.GetName()]++
		}
	}
	key := Key{GVR: cmGVR}
	r1, err := m.Acquire(key, handler("first"))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := m.Acquire(key, handler("second"))
	if err != nil {
		t.Fatal(err)
	}
	if r1.Informer() != r2.Informer() {
		t.Fatal("two users of one key should share one informer")
	}
	waitUntil(t, "both handlers to sync", func() bool { return r1.HasSynced() && r2.HasSynced() })
	mu.Lock()
	for _, k := range []string{"first:one", "first:two", "second:one", "second:two"} {
		if seen[k] != 1 {
			t.Errorf("handler calls %s = %d, want 1", k, seen[k])
		}
	}
	mu.Unlock()
	if stats := m.Stats(); len(stats) != 1 || stats[0].Objects != 2 || stats[0].Users != 2 || !stats[0].Synced {
		t.Errorf("Stats = %+v, want one synced informer with 2 objects and 2 users", stats)
	}
	got, err := r1.Informer().Get("a", "one")
	if err != nil || got == nil {
		t.Fatalf("Get(a/one) = %v, %v", got, err)
	}
	if got.GetKind() != "ConfigMap" || got.GetNamespace() != "a" {
		t.Errorf("Get(a/one) decoded %v", got.Object)
	}
	if missing, err := r1.Informer().Get("a", "nothing"); missing != nil || err != nil {
		t.Errorf("Get of a missing object = %v, %v; want nil, nil", missing, err)
	}
	if _, kept := got.GetAnnotations()[lastApplied]; kept || got.GetAnnotations()["keep"] != "me" {
		t.Errorf("the cache should drop only the last-applied annotation: %v", got.GetAnnotations())
	}
	if byNS, err := r1.Informer().Indexer().ByIndex("ns", "b"); err != nil || len(byNS) != 1 {
		t.Errorf("the Manager's indexers should be on every informer: %v, %v", byNS, err)
	}
	r1.Release()
	r1.Release() // a second release is harmless
	if stats := m.Stats(); len(stats) != 1 || stats[0].Users != 1 {
		t.Errorf("after one release Stats = %+v, want one user left", stats)
	}
	r2.Release()
	if stats := m.Stats(); len(stats) != 0 {
		t.Errorf("after the last release Stats = %+v, want no informer", stats)
	}
}

func TestKeysAreSeparate(t *testing.T) {
	m := newManager(t, configMap("a", "one"), configMap("b", "two"))
	all, err := m.Acquire(Key{GVR: cmGVR}, func(metav1.Object, bool) {})
	if err != nil {
		t.Fatal(err)
	}
	onlyA, err := m.Acquire(Key{GVR: cmGVR, Namespace: "a"}, func(metav1.Object, bool) {})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "sync", func() bool { return all.HasSynced() && onlyA.HasSynced() })
	if n := len(onlyA.Informer().Indexer().ListKeys()); n != 1 {
		t.Errorf("namespace a informer holds %d objects, want 1", n)
	}
	if n := len(all.Informer().Indexer().ListKeys()); n != 2 {
		t.Errorf("all-namespaces informer holds %d objects, want 2", n)
	}
}

func TestCompactKeeping(t *testing.T) {
	u := configMap("a", "x")
	u.SetLabels(map[string]string{"kgen.dev/rule": "r", "team": "blue"})
	out, err := CompactKeeping(func(k string) bool { return k == "kgen.dev/rule" })(u)
	if err != nil {
		t.Fatal(err)
	}
	o := out.(*Object)
	if l := o.GetLabels(); len(l) != 1 || l["kgen.dev/rule"] != "r" || o.Label("kgen.dev/rule") != "r" || o.GetAnnotations() != nil {
		t.Errorf("typed metadata kept labels %v annotations %v; want only kgen.dev/rule", l, o.GetAnnotations())
	}
	back, err := o.Unstructured()
	if err != nil || back.GetLabels()["team"] != "blue" || back.GetAnnotations()["keep"] != "me" {
		t.Errorf("the JSON must keep every label and annotation: %v, %v", back, err)
	}
}

func TestCompact(t *testing.T) {
	u := configMap("a", "x")
	u.SetLabels(map[string]string{"l": "v"})
	u.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "m"}})
	_ = unstructured.SetNestedField(u.Object, "value", "data", "key")
	out, err := Compact(u)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := out.(*Object)
	if !ok {
		t.Fatalf("Compact returned %T", out)
	}
	if o.Name != "x" || o.Namespace != "a" || o.GetLabels()["l"] != "v" || len(o.GetAnnotations()) != 1 || o.Annotation("keep") != "me" {
		t.Errorf("metadata = %+v", o.ObjectMeta)
	}
	back, err := Decode(o)
	if err != nil {
		t.Fatal(err)
	}
	if v, _, _ := unstructured.NestedString(back.Object, "data", "key"); v != "value" {
		t.Errorf("decoded data.key = %q", v)
	}
	if back.GetManagedFields() != nil || back.GetAnnotations()[lastApplied] != "" {
		t.Errorf("managed fields or last-applied survived: %v", back.Object["metadata"])
	}
	if v, err := Compact("not an object"); err != nil || v != "not an object" {
		t.Errorf("non-objects pass through: %v, %v", v, err)
	}
	if _, err := Decode("not an object"); err == nil {
		t.Error("Decode of a non-object should fail")
	}
}
