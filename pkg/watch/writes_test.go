package watch

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var cmRes = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

func cm(uid, rv string, labels map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{
		"name": "c", "namespace": "n", "uid": uid, "resourceVersion": rv}}}
	u.SetLabels(labels)
	return u
}

func anyObject(*Object) bool { return true }

func TestWrites(t *testing.T) {
	w := NewWrites()
	if got := w.Created(cmRes, "n", "c", anyObject); got != nil {
		t.Fatalf("nothing written yet: got %v", got)
	}
	w.Wrote(cmRes, cm("u1", "10", nil))
	if got := w.Created(cmRes, "n", "c", anyObject); got == nil || got.GetResourceVersion() != "10" {
		t.Fatalf("a created object the cache has not seen: got %v", got)
	}
	if got := w.Latest(cm("u1", "9", nil)); got.GetResourceVersion() != "10" {
		t.Errorf("stale cache: got rv %s, want 10", got.GetResourceVersion())
	}
	if got := w.Latest(cm("u1", "10", nil)); got.GetResourceVersion() != "10" {
		t.Errorf("caught-up cache: got rv %s", got.GetResourceVersion())
	}
	if got := w.Created(cmRes, "n", "c", anyObject); got != nil {
		t.Errorf("once the cache caught up nothing is remembered, got %v", got)
	}
	w.Wrote(cmRes, cm("u3", "30", nil))
	w.observe(cm("u3", "29", nil), false)
	if got := w.Created(cmRes, "n", "c", anyObject); got == nil {
		t.Error("an older version in the cache must not drop a newer write")
	}
	w.observe(cm("u3", "30", nil), false)
	if got := w.Created(cmRes, "n", "c", anyObject); got != nil {
		t.Errorf("once the cache has seen the write it is dropped, got %v", got)
	}
	w.Wrote(cmRes, cm("u2", "20", nil))
	w.Deleted("u2")
	if got := w.Created(cmRes, "n", "c", anyObject); got != nil {
		t.Errorf("a deleted object was returned: %v", got)
	}
	w.Wrote(cmRes, cm("u5", "50", nil))
	w.observe(cm("u5", "49", nil), true)
	if w.Len() != 0 {
		t.Error("an object that left the cache is still remembered")
	}

	// The caller decides whether a fresh object is the one it means.
	w.Wrote(cmRes, cm("u4", "40", map[string]string{"owner": "a"}))
	if got := w.Created(cmRes, "n", "c", func(o *Object) bool { return o.Label("owner") == "b" }); got != nil {
		t.Errorf("an object the caller did not accept was returned: %v", got.GetLabels())
	}
	if got := w.Created(cmRes, "n", "c", func(o *Object) bool { return o.Label("owner") == "a" }); got == nil {
		t.Error("the accepted object was not returned")
	}
}

// A write the cache never shows is trusted only for WritesTTL.
func TestWritesExpire(t *testing.T) {
	now := time.Now()
	w := NewWrites()
	w.now = func() time.Time { return now }
	w.Wrote(cmRes, cm("u1", "10", nil))
	now = now.Add(WritesTTL + time.Second)
	if got := w.Latest(cm("u1", "9", nil)); got.GetResourceVersion() != "9" {
		t.Errorf("an expired write was trusted over the cache: rv %s", got.GetResourceVersion())
	}
}

// A write whose watch event the cache processed before the write's response
// came back is not remembered: no later event would drop it.
func TestWritesAlreadyCached(t *testing.T) {
	cachedRV := ""
	w := NewWrites()
	w.cached = func(gvr schema.GroupVersionResource, namespace, name string) string {
		if gvr != cmRes || namespace != "n" || name != "c" {
			t.Errorf("asked the cache for %s %s/%s", gvr, namespace, name)
		}
		return cachedRV
	}
	cachedRV = "10"
	w.Wrote(cmRes, cm("u1", "10", nil))
	if n := w.Len(); n != 0 {
		t.Errorf("a write the cache holds was remembered (%d entries)", n)
	}
	cachedRV = "9"
	w.Wrote(cmRes, cm("u1", "11", nil))
	if got := w.Latest(cm("u1", "9", nil)); got.GetResourceVersion() != "11" {
		t.Errorf("a write the cache does not show yet was not remembered: got rv %s", got.GetResourceVersion())
	}
	cachedRV = ""
	w.Wrote(cmRes, cm("u2", "20", nil))
	if got := w.Created(cmRes, "n", "c", anyObject); got == nil || got.GetResourceVersion() != "20" {
		t.Errorf("a created object the cache has not seen was not remembered: got %v", got)
	}
}

// The event of the client's own write is an echo, once; a later version is
// someone else's write.
func TestWritesEcho(t *testing.T) {
	w := NewWrites()
	w.Wrote(cmRes, cm("u1", "10", nil))
	if w.Echo(cm("u1", "9", nil)) || w.Echo(cm("u1", "11", nil)) {
		t.Error("another version was taken for the write's echo")
	}
	if !w.Echo(cm("u1", "10", nil)) {
		t.Error("the write's own version is not its echo")
	}
	if w.Echo(cm("u1", "10", nil)) {
		t.Error("an echo was reported twice")
	}
	w.Wrote(cmRes, cm("u2", "20", nil))
	w.Deleted("u2")
	if w.Echo(cm("u2", "20", nil)) {
		t.Error("a deleted object's write is still an echo")
	}
	// Two writes before the first event: both events are echoes, and
	// someone else's version between them is not.
	w.Wrote(cmRes, cm("u4", "40", nil))
	w.Wrote(cmRes, cm("u4", "42", nil))
	if !w.Echo(cm("u4", "40", nil)) || w.Echo(cm("u4", "41", nil)) || !w.Echo(cm("u4", "42", nil)) || w.Echo(cm("u4", "42", nil)) {
		t.Error("the events of two writes of one object are not each an echo, once")
	}
	// An event that skips a write's version (the watch was re-listed)
	// drops the earlier versions with it.
	w.Wrote(cmRes, cm("u5", "50", nil))
	w.Wrote(cmRes, cm("u5", "52", nil))
	if !w.Echo(cm("u5", "52", nil)) || w.Echo(cm("u5", "50", nil)) {
		t.Error("an earlier version is still an echo after a later one came")
	}
	// Its event came before the write's answer, and was held back: asked
	// about after the answer, it is the echo, once.
	w.cached = func(schema.GroupVersionResource, string, string) string { return "30" }
	w.Wrote(cmRes, cm("u3", "30", nil))
	if !w.Echo(cm("u3", "30", nil)) || w.Echo(cm("u3", "30", nil)) {
		t.Error("a write whose event came before its answer is not its echo, once")
	}
}

func TestWritesEchoSweep(t *testing.T) {
	w := NewWrites()
	now := time.Unix(1000, 0)
	w.now = func() time.Time { return now }
	// Echoes whose events never come: a sweep drops the expired ones.
	for i := range echoSweepAt {
		w.Wrote(cmRes, cm(fmt.Sprintf("old-%d", i), "1", nil))
	}
	now = now.Add(WritesTTL + time.Second)
	w.Wrote(cmRes, cm("new-0", "1", nil))
	if got := len(w.echoes); got != 1 {
		t.Fatalf("after the sweep %d echoes wait, want 1 (the fresh one)", got)
	}
	// Fresh echoes are not swept one write at a time: the next sweep
	// waits until they have doubled.
	for i := 1; i <= echoSweepAt; i++ {
		w.Wrote(cmRes, cm(fmt.Sprintf("new-%d", i), "1", nil))
	}
	if w.sweepAt < 2*echoSweepAt {
		t.Errorf("next sweep at %d echoes after a sweep that kept %d, want at least %d", w.sweepAt, len(w.echoes), 2*echoSweepAt)
	}
}
