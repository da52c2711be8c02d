package watch

import (
	"slices"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Writes remembers the objects a client wrote until the informer caches
// show them, so that work that runs before the cache has caught up with a
// write sees the write (read your own writes) and does not make it again.
//
// A Manager owns one (Manager.Writes) and feeds it from every informer's
// events; nothing else tells it what the caches hold. Writers call Wrote
// and Deleted; readers call Latest and Created.
//
// Under load the caches can trail the writes by thousands of objects, so
// remembered objects are kept compact (an *Object, its JSON without managed
// fields) and decoded only when read.
type Writes struct {
	mu      sync.Mutex
	objects map[types.UID]written
	// byName finds a freshly created object that no cache holds yet.
	byName map[nameKey]types.UID
	// cached returns the resource version a cache holds of an object, or
	// "" (the Manager's cachedResourceVersion; nil for a Writes of its own).
	cached func(gvr schema.GroupVersionResource, namespace, name string) string
	now    func() time.Time
	// echoes are the versions the writes made, until their watch events
	// come back (see Echo).
	echoes map[types.UID]echo
	// sweepAt is how many echoes there may be before the next sweep of
	// those whose event never came.
	sweepAt int
}

// echo holds the versions of an object the writes made whose events have
// not come yet, oldest first: a reconcile writes a parent more than once
// (its finalizer, then its status) before the first event arrives.
type echo struct {
	versions []string
	at       time.Time
}

// maxEchoes bounds the versions remembered of one object.
const maxEchoes = 4

// written is one remembered write.
type written struct {
	obj *Object
	gvr schema.GroupVersionResource
	at  time.Time
}

// WritesTTL bounds how long a write is trusted over the cache: a write the
// cache never shows (the object was deleted while the watch was down) must
// not stand in for the object forever.
const WritesTTL = 2 * time.Minute

type nameKey struct {
	gvr             schema.GroupVersionResource
	namespace, name string
}

// NewWrites returns a Writes that no cache feeds: the Manager's is fed by
// its informers. A standalone one serves tests.
func NewWrites() *Writes {
	return &Writes{objects: map[types.UID]written{}, byName: map[nameKey]types.UID{}, echoes: map[types.UID]echo{}, sweepAt: echoSweepAt, now: time.Now}
}

// Wrote records an object of resource gvr as the server returned it after a
// write. It drops the object's managed fields, as the caches do.
func (w *Writes) Wrote(gvr schema.GroupVersionResource, obj *unstructured.Unstructured) {
	o, err := compactWritten(obj)
	if err != nil {
		return // then the cache alone tells; at worst the write is made once more
	}
	key := nameKey{gvr, o.Namespace, o.Name}
	w.mu.Lock()
	w.objects[o.UID] = written{obj: o, gvr: gvr, at: w.now()}
	w.byName[key] = o.UID
	e := w.echoes[o.UID]
	if len(e.versions) == maxEchoes {
		e.versions = e.versions[1:]
	}
	w.echoes[o.UID] = echo{versions: append(e.versions, o.ResourceVersion), at: w.now()}
	if len(w.echoes) > w.sweepAt {
		// Amortized: a sweep that leaves most echoes waits until their
		// number has doubled, not one sweep per write.
		w.sweepEchoesLocked()
		w.sweepAt = max(echoSweepAt, 2*len(w.echoes))
	}
	w.mu.Unlock()
	if w.cached == nil {
		return
	}
	// The watch event of the write may have come before the response, and
	// been observed before this entry existed: then nothing would drop it
	// until it expires. A cache is updated before its event is delivered,
	// so looking at it after storing the entry misses nothing. The echo
	// stays: whoever held that event back until the write's answer came
	// (pkg/controller does, for the parent being reconciled) asks Echo
	// about it then.
	if rv := w.cached(gvr, o.Namespace, o.Name); rv != "" {
		w.observed(o.UID, rv)
	}
}

// Echo reports whether a watch event shows exactly the version of an
// object that a write recorded with Wrote returned, and forgets it: the
// event of the client's own write, which tells the writer nothing new, so
// that work it would queue can be skipped. A later version, someone else's
// write, is not an echo.
func (w *Writes) Echo(obj metav1.Object) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.echoes[obj.GetUID()]
	if !ok {
		return false
	}
	i := slices.Index(e.versions, obj.GetResourceVersion())
	if i < 0 {
		return false
	}
	// Events come in order: the versions before this one will not.
	if e.versions = e.versions[i+1:]; len(e.versions) == 0 {
		delete(w.echoes, obj.GetUID())
	} else {
		w.echoes[obj.GetUID()] = e
	}
	return true
}

// echoSweepAt is how many echoes may wait for their event before those
// older than WritesTTL are dropped (a write whose event never came, or
// came before the write's answer and was not held back).
const echoSweepAt = 4096

func (w *Writes) sweepEchoesLocked() {
	now := w.now()
	for uid, e := range w.echoes {
		if now.Sub(e.at) > WritesTTL {
			delete(w.echoes, uid)
		}
	}
}

// Deleted drops what is remembered of an object that was deleted.
func (w *Writes) Deleted(uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.dropLocked(uid)
	delete(w.echoes, uid)
}

// Latest returns the newer of a cached object and what was last written to
// it (the same object, by UID), decoded; the cached object itself when
// nothing newer is remembered.
func (w *Writes) Latest(cached *unstructured.Unstructured) *unstructured.Unstructured {
	if cached == nil {
		return nil
	}
	w.mu.Lock()
	found := w.lookupLocked(cached.GetUID(), cached.GetResourceVersion())
	w.mu.Unlock()
	return decodeOr(found, cached)
}

// Created returns an object of resource gvr with that namespace and name
// that was written and that no cache shows yet, if accept takes it (the
// caller checks it is the object it means, by its labels); otherwise nil.
func (w *Writes) Created(gvr schema.GroupVersionResource, namespace, name string, accept func(*Object) bool) *unstructured.Unstructured {
	w.mu.Lock()
	var found *Object
	if uid, ok := w.byName[nameKey{gvr, namespace, name}]; ok {
		if o := w.lookupLocked(uid, ""); o != nil && accept(o) {
			found = o
		}
	}
	w.mu.Unlock()
	return decodeOr(found, nil)
}

// lookupLocked returns the remembered object of a UID if it is newer than
// the cached resource version (any, when cachedRV is empty), dropping it
// when it is stale or expired.
func (w *Writes) lookupLocked(uid types.UID, cachedRV string) *Object {
	e, ok := w.objects[uid]
	switch {
	case !ok:
		return nil
	case w.now().Sub(e.at) > WritesTTL:
		w.dropLocked(uid)
		return nil
	case cachedRV != "" && !newer(e.obj.ResourceVersion, cachedRV):
		// The cache has caught up: nothing more to remember.
		w.dropLocked(uid)
		return nil
	}
	return e.obj
}

func decodeOr(o *Object, fallback *unstructured.Unstructured) *unstructured.Unstructured {
	if o == nil {
		return fallback
	}
	u, err := o.Unstructured()
	if err != nil {
		return fallback
	}
	return u
}

// observe is told by the informers of every object they cache, and forgets
// writes the cache now shows.
func (w *Writes) observe(obj metav1.Object, deleted bool) {
	if deleted {
		w.Deleted(obj.GetUID())
		return
	}
	w.observed(obj.GetUID(), obj.GetResourceVersion())
}

func (w *Writes) observed(uid types.UID, resourceVersion string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e, ok := w.objects[uid]; ok && !newer(e.obj.ResourceVersion, resourceVersion) {
		w.dropLocked(uid)
	}
}

func (w *Writes) dropLocked(uid types.UID) {
	if e, ok := w.objects[uid]; ok {
		delete(w.objects, uid)
		key := nameKey{e.gvr, e.obj.Namespace, e.obj.Name}
		if w.byName[key] == uid {
			delete(w.byName, key)
		}
	}
}

// Len returns how many writes are remembered.
func (w *Writes) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.objects)
}

// newer reports whether resource version a is later than b. Resource
// versions are opaque by contract; etcd-backed servers use increasing
// integers, and anything else is treated as not newer, so the cache wins.
func newer(a, b string) bool {
	ra, errA := strconv.ParseUint(a, 10, 64)
	rb, errB := strconv.ParseUint(b, 10, 64)
	return errA == nil && errB == nil && ra > rb
}
