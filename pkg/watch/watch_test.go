package watch

import (
	"sync"
	"testing"
	"time"

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
		return func(obj *unstructured.Unstructured) {
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
	got, ok := r1.Informer().Get("a", "one")
	if !ok {
		t.Fatal("Get(a/one) found nothing")
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
	all, err := m.Acquire(Key{GVR: cmGVR}, func(*unstructured.Unstructured) {})
	if err != nil {
		t.Fatal(err)
	}
	onlyA, err := m.Acquire(Key{GVR: cmGVR, Namespace: "a"}, func(*unstructured.Unstructured) {})
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

func TestStripForCache(t *testing.T) {
	u := configMap("a", "x")
	out, err := StripForCache(u)
	if err != nil {
		t.Fatal(err)
	}
	if ann := out.(*unstructured.Unstructured).GetAnnotations(); len(ann) != 1 || ann["keep"] != "me" {
		t.Errorf("annotations after strip = %v", ann)
	}
	if v, err := StripForCache("not an object"); err != nil || v != "not an object" {
		t.Errorf("non-objects pass through: %v, %v", v, err)
	}
}
