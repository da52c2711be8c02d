package reconcile

import (
	"strconv"
	"sync"
	"time"

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
	objects map[types.UID]written
	// byName finds a freshly created object the cache has not seen at all.
	byName map[nameKey]types.UID
	// cached, if set, returns the resource version the informer cache
	// holds of an object, or "".
	cached func(apiVersion, kind, namespace, name string) string
}

// written is one remembered write.
type written struct {
	obj *watch.Object
	at  time.Time
}

// recentTTL bounds how long a write is trusted over the cache: a write the
// cache never shows (the object was deleted while the watch was down) must
// not stand in for the object forever.
const recentTTL = 2 * time.Minute

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
	return &recentWrites{objects: map[types.UID]written{}, byName: map[nameKey]types.UID{}}
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
	r.objects[o.UID] = written{obj: o, at: time.Now()}
	r.byName[keyOfWritten(o)] = o.UID
	r.mu.Unlock()
	if r.cached == nil {
		return
	}
	// The watch event of the write may have come before the response,
	// and its seen call before this remember: then nothing would drop the
	// entry until it expires. The cache is updated before handlers run, so
	// looking at it after storing the entry misses nothing.
	if rv := r.cached(o.APIVersion, o.Kind, o.Namespace, o.Name); rv != "" {
		r.seen(o.UID, rv)
	}
}

// forget drops what is remembered of a deleted object.
func (r *recentWrites) forget(obj *unstructured.Unstructured) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dropLocked(obj.GetUID())
}

func (r *recentWrites) dropLocked(uid types.UID) {
	if w, ok := r.objects[uid]; ok {
		delete(r.objects, uid)
		if r.byName[keyOfWritten(w.obj)] == uid {
			delete(r.byName, keyOfWritten(w.obj))
		}
	}
}

// seen drops what is remembered of an object once the cache holds that
// version or a later one, so nothing stays remembered for objects no
// reconcile reads again.
func (r *recentWrites) seen(uid types.UID, resourceVersion string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w, ok := r.objects[uid]; ok && !newer(w.obj.ResourceVersion, resourceVersion) {
		r.dropLocked(uid)
	}
}

// freshest returns the newer of the cached object and what kgen last wrote
// to it. cached may be nil; desired names the object then, and a remembered
// object is used only if it carries the same kgen marks (rule, parent, child)
// as desired, so one parent never mistakes another's fresh child for its own.
func (r *recentWrites) freshest(cached, desired *unstructured.Unstructured) *unstructured.Unstructured {
	r.mu.Lock()
	var found *watch.Object
	uid := types.UID("")
	if cached != nil {
		uid = cached.GetUID()
	} else if id, ok := r.byName[keyOf(desired)]; ok {
		uid = id
	}
	if w, ok := r.objects[uid]; ok {
		switch {
		case time.Since(w.at) > recentTTL:
			r.dropLocked(uid)
		case cached != nil && !newer(w.obj.ResourceVersion, cached.GetResourceVersion()):
			// The cache has caught up: nothing more to remember.
			r.dropLocked(uid)
		case cached == nil && !sameMarks(w.obj, desired.GetLabels()):
		default:
			found = w.obj
		}
	}
	r.mu.Unlock()
	if found == nil {
		return cached
	}
	u, err := found.Unstructured()
	if err != nil {
		return cached
	}
	return u
}

// sameMarks reports whether a remembered object and a label set name the
// same rule, parent and child.
func sameMarks(o *watch.Object, labels map[string]string) bool {
	for _, k := range []string{LabelRule, LabelParentUID, LabelChild} {
		if o.Label(k) != labels[k] {
			return false
		}
	}
	return true
}

// newer reports whether resource version a is later than b. Resource
// versions are opaque by contract; etcd-backed servers use increasing
// integers, and anything else is treated as not newer, so the cache wins.
func newer(a, b string) bool {
	ra, errA := strconv.ParseUint(a, 10, 64)
	rb, errB := strconv.ParseUint(b, 10, 64)
	return errA == nil && errB == nil && ra > rb
}
