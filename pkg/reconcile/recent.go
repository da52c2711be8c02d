package reconcile

import (
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// recentWrites remembers the objects kgen wrote until the informer cache has
// caught up with them, so that a reconcile that runs before the cache sees a
// write does not write again (read your own writes).
type recentWrites struct {
	mu      sync.Mutex
	objects map[types.UID]*unstructured.Unstructured
	// byName finds a freshly created object the cache has not seen at all.
	byName map[nameKey]types.UID
}

type nameKey struct {
	apiVersion, kind, namespace, name string
}

func keyOf(obj *unstructured.Unstructured) nameKey {
	return nameKey{obj.GetAPIVersion(), obj.GetKind(), obj.GetNamespace(), obj.GetName()}
}

func newRecentWrites() *recentWrites {
	return &recentWrites{objects: map[types.UID]*unstructured.Unstructured{}, byName: map[nameKey]types.UID{}}
}

// remember records an object as the server returned it after a write.
func (r *recentWrites) remember(obj *unstructured.Unstructured) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.objects[obj.GetUID()] = obj
	r.byName[keyOf(obj)] = obj.GetUID()
}

// forget drops what is remembered of a deleted object.
func (r *recentWrites) forget(obj *unstructured.Unstructured) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.objects, obj.GetUID())
	if r.byName[keyOf(obj)] == obj.GetUID() {
		delete(r.byName, keyOf(obj))
	}
}

// seen drops what is remembered of an object once the cache holds that
// version or a later one, so nothing stays remembered for objects no
// reconcile reads again.
func (r *recentWrites) seen(uid types.UID, resourceVersion string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	written, ok := r.objects[uid]
	if !ok {
		return
	}
	cached := &unstructured.Unstructured{}
	cached.SetResourceVersion(resourceVersion)
	if newer(written, cached) {
		return
	}
	delete(r.objects, uid)
	if r.byName[keyOf(written)] == uid {
		delete(r.byName, keyOf(written))
	}
}

// freshest returns the newer of the cached object and what kgen last wrote
// to it. cached may be nil; desired names the object when it is.
func (r *recentWrites) freshest(cached, desired *unstructured.Unstructured) *unstructured.Unstructured {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cached == nil {
		uid, ok := r.byName[keyOf(desired)]
		if !ok {
			return nil
		}
		return r.objects[uid]
	}
	written, ok := r.objects[cached.GetUID()]
	if !ok {
		return cached
	}
	if newer(written, cached) {
		return written
	}
	// The cache has caught up: nothing more to remember.
	delete(r.objects, cached.GetUID())
	if r.byName[keyOf(cached)] == cached.GetUID() {
		delete(r.byName, keyOf(cached))
	}
	return cached
}

// newer reports whether a's resourceVersion is later than b's. Resource
// versions are opaque by contract; etcd-backed servers use increasing
// integers, and anything else is treated as not newer, so the cache wins.
func newer(a, b *unstructured.Unstructured) bool {
	ra, errA := strconv.ParseUint(a.GetResourceVersion(), 10, 64)
	rb, errB := strconv.ParseUint(b.GetResourceVersion(), 10, 64)
	return errA == nil && errB == nil && ra > rb
}
