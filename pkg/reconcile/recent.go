package reconcile

import (
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"kgen.dev/kgen/pkg/watch"
)

// recentWrites remembers the objects kgen wrote until the informer cache has
// caught up with them, so that a reconcile that runs before the cache sees a
// write does not write again (read your own writes).
//
// Under load the cache can trail kgen's writes by thousands of objects, so
// they are kept compact (watch.Object: metadata and JSON) and decoded only
// when a reconcile needs one.
type recentWrites struct {
	mu      sync.Mutex
	objects map[types.UID]*watch.Object
	// byName finds a freshly created object the cache has not seen at all.
	byName map[nameKey]types.UID
}

type nameKey struct {
	apiVersion, kind, namespace, name string
}

func keyOf(obj *unstructured.Unstructured) nameKey {
	return nameKey{obj.GetAPIVersion(), obj.GetKind(), obj.GetNamespace(), obj.GetName()}
}

func keyOfWritten(o *watch.Object) nameKey {
	return nameKey{o.APIVersion, o.Kind, o.Namespace, o.Name}
}

func newRecentWrites() *recentWrites {
	return &recentWrites{objects: map[types.UID]*watch.Object{}, byName: map[nameKey]types.UID{}}
}

// remember records an object as the server returned it after a write. It
// drops the object's managed fields, as the cache does.
func (r *recentWrites) remember(obj *unstructured.Unstructured) {
	c, err := watch.Compact(obj)
	if err != nil {
		return // then the cache alone tells; at worst kgen writes once more
	}
	o := c.(*watch.Object)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.objects[o.UID] = o
	r.byName[keyOfWritten(o)] = o.UID
}

// forget drops what is remembered of a deleted object.
func (r *recentWrites) forget(obj *unstructured.Unstructured) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dropLocked(obj.GetUID())
}

func (r *recentWrites) dropLocked(uid types.UID) {
	if o, ok := r.objects[uid]; ok {
		delete(r.objects, uid)
		if r.byName[keyOfWritten(o)] == uid {
			delete(r.byName, keyOfWritten(o))
		}
	}
}

// seen drops what is remembered of an object once the cache holds that
// version or a later one, so nothing stays remembered for objects no
// reconcile reads again.
func (r *recentWrites) seen(uid types.UID, resourceVersion string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if o, ok := r.objects[uid]; ok && !newer(o.ResourceVersion, resourceVersion) {
		r.dropLocked(uid)
	}
}

// freshest returns the newer of the cached object and what kgen last wrote
// to it. cached may be nil; desired names the object when it is.
func (r *recentWrites) freshest(cached, desired *unstructured.Unstructured) *unstructured.Unstructured {
	r.mu.Lock()
	var written *watch.Object
	if cached == nil {
		if uid, ok := r.byName[keyOf(desired)]; ok {
			written = r.objects[uid]
		}
	} else if o, ok := r.objects[cached.GetUID()]; ok {
		if newer(o.ResourceVersion, cached.GetResourceVersion()) {
			written = o
		} else {
			// The cache has caught up: nothing more to remember.
			r.dropLocked(cached.GetUID())
		}
	}
	r.mu.Unlock()
	if written == nil {
		return cached
	}
	u, err := written.Unstructured()
	if err != nil {
		return cached
	}
	return u
}

// newer reports whether resource version a is later than b. Resource
// versions are opaque by contract; etcd-backed servers use increasing
// integers, and anything else is treated as not newer, so the cache wins.
func newer(a, b string) bool {
	ra, errA := strconv.ParseUint(a, 10, 64)
	rb, errB := strconv.ParseUint(b, 10, 64)
	return errA == nil && errB == nil && ra > rb
}
