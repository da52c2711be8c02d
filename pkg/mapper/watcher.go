package mapper

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// The objects that decide which kinds a cluster serves.
var (
	crdGVR        = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
)

// allGroups is the pending key of a change of any group; not a valid
// group name.
const allGroups = "*"

// Change says that the kinds of an API group may have changed: one of its
// CustomResourceDefinitions or APIServices was added, changed or removed.
type Change struct {
	// Group is the API group, unless All.
	Group string
	// Resource is the resource of the CustomResourceDefinition that
	// changed (its plural); empty when the change may be of any kind of
	// the group (an APIService of the group changed) or All.
	Resource string
	// All is true when it is not known which groups changed: the watch
	// could not list at first, and anything may have changed before it
	// did, or it is not watching (see Watcher).
	All bool
	// Spec is true when the definition itself changed (it was added or
	// removed, or its spec changed), so its schemas may differ, rather
	// than only its status (such as a CRD becoming established).
	Spec bool
}

// Covers reports whether the change may be of the group and resource.
func (c Change) Covers(gr schema.GroupResource) bool {
	return c.All || gr.Group == c.Group && (c.Resource == "" || gr.Resource == c.Resource)
}

// changeKey is what the Watcher announces a change of: a group, and the
// resource of a CustomResourceDefinition or "" for the whole group.
type changeKey struct{ group, resource string }

// Watcher follows the CustomResourceDefinitions and APIServices of a
// cluster, with metadata-only informers, and keeps a Mapper's cache true
// through them: a change resets the cache, and while the watch holds, a
// kind that is not served costs no discovery request (the Mapper stops
// resetting its cache on every miss). It tells subscribers which groups
// changed, after the changes settle.
//
// Without the rights to list and watch both kinds, or while the watch is
// broken, the Mapper behaves as without a Watcher: every miss asks
// discovery again; and every minute the subscribers are told that any
// group may have changed.
type Watcher struct {
	mapper *Mapper
	client metadata.Interface
	// settle is how long the Watcher waits after a change for more before
	// it resets the cache and tells the subscribers: a CRD being created
	// is added, then accepted, then established, within a second.
	settle time.Duration

	mu        sync.Mutex
	subs      []func(Change)
	pending   map[changeKey]bool // spec changed, not yet announced
	timer     *time.Timer
	informers []cache.SharedIndexInformer
	// broken holds, for each informer whose watch failed, its last synced
	// resource version then: it is watching again once that moved.
	broken map[cache.SharedIndexInformer]string
	// unlisted is set when a watch failed before its first list: what
	// changed meanwhile is in no event, so its first list is told as a
	// change of every group.
	unlisted bool
}

// NewWatcher returns a Watcher of m's cluster through client. Run starts
// it.
func NewWatcher(m *Mapper, client metadata.Interface) *Watcher {
	return &Watcher{mapper: m, client: client, settle: time.Second, pending: map[changeKey]bool{}, broken: map[cache.SharedIndexInformer]string{}}
}

// Subscribe has f called with every change, after the Mapper's cache was
// reset for it. f must not block.
func (w *Watcher) Subscribe(f func(Change)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.subs = append(w.subs, f)
}

// Run watches until ctx is done.
func (w *Watcher) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	factory := metadatainformer.NewSharedInformerFactory(w.client, 0)
	var synced []cache.InformerSynced
	for _, gvr := range []schema.GroupVersionResource{crdGVR, apiServiceGVR} {
		informer := factory.ForResource(gvr).Informer()
		keyOf := func(obj any) changeKey {
			m := objectMeta(obj)
			if m == nil {
				return changeKey{}
			}
			// A CRD is named RESOURCE.GROUP; an APIService VERSION.GROUP,
			// and serves any kind of its group.
			first, group, _ := strings.Cut(m.Name, ".")
			if gvr == crdGVR {
				return changeKey{group, first}
			}
			return changeKey{group: group}
		}
		_, _ = informer.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
			AddFunc: func(obj any, initial bool) {
				if !initial {
					w.changed(keyOf(obj), true)
				}
			},
			UpdateFunc: func(old, obj any) {
				o, n := objectMeta(old), objectMeta(obj)
				if o == nil || n == nil || o.ResourceVersion == n.ResourceVersion {
					return // a resync
				}
				// A CRD deleted and created again while the watch was
				// down comes back from the relist as an update, with a
				// new UID and maybe the same generation.
				w.changed(keyOf(obj), o.Generation != n.Generation || o.UID != n.UID)
			},
			DeleteFunc: func(obj any) { w.changed(keyOf(obj), true) },
		})
		logged := false
		// A watch that fails after the first list needs no announcement
		// of its own: the reflector watches on from the last resource
		// version, or lists again, and the informer compares that list
		// with its cache, so every CRD or APIService added, changed or
		// removed meanwhile reaches the handlers above as an event of its
		// group. Announcing every group at each failure instead made each
		// retry of a forbidden watch (every few seconds, with backoff)
		// reread discovery, schemas and CRDs for every running rule.
		_ = informer.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
			w.mu.Lock()
			w.broken[informer] = informer.LastSyncResourceVersion()
			if !informer.HasSynced() {
				w.unlisted = true
			}
			w.mu.Unlock()
			w.mapper.setWatched(w.watching)
			// The reflector retries with backoff; the first error is
			// worth telling, the rest only when asked for.
			if !logged {
				logger.Info("Cannot follow CustomResourceDefinitions and APIServices; discovery is read again whenever a kind is not found", "resource", gvr.String(), "err", err.Error())
				logged = true
			} else {
				logger.V(4).Info("Watch failed", "resource", gvr.String(), "err", err.Error())
			}
		})
		w.informers = append(w.informers, informer)
		synced = append(synced, informer.HasSynced)
	}
	factory.Start(ctx.Done())
	go w.refreshUnwatched(ctx)
	if cache.WaitForCacheSync(ctx.Done(), synced...) {
		w.mapper.setWatched(w.watching)
		// A kind added after the mapper first read discovery and before
		// the first list is in the list, not an event: read discovery
		// once more, so the next lookup sees it.
		w.mapper.Reset()
		w.mu.Lock()
		unlisted := w.unlisted
		w.mu.Unlock()
		if unlisted {
			w.changed(changeKey{group: allGroups}, true)
		}
	}
	<-ctx.Done()
	factory.Shutdown()
	w.mapper.setWatched(nil)
}

// refreshUnwatched announces a change of every group once per
// unwatchedRefresh while the Watcher is not watching (it may not, or its
// watch is broken): nothing else would then tell the subscribers that a
// CRD changed in place, so they would keep its old schemas until a
// restart. It is a timer rather than the reflector's retries, whose
// backoff starts at under a second.
func (w *Watcher) refreshUnwatched(ctx context.Context) {
	ticker := time.NewTicker(unwatchedRefresh)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			if !w.watching() {
				w.changed(changeKey{group: allGroups}, true)
			}
		}
	}
}

// unwatchedRefresh is how often a Watcher that is not watching tells its
// subscribers that any group may have changed.
const unwatchedRefresh = time.Minute

// watching reports whether both informers are synced and watching.
func (w *Watcher) watching() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, informer := range w.informers {
		if !informer.HasSynced() {
			return false
		}
		if rv, ok := w.broken[informer]; ok {
			if informer.LastSyncResourceVersion() == rv {
				return false
			}
			delete(w.broken, informer)
		}
	}
	return len(w.informers) > 0
}

// changed records a change and announces it, with the others, once none
// came for the settle time.
func (w *Watcher) changed(key changeKey, spec bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending[key] = w.pending[key] || spec
	if w.timer != nil {
		w.timer.Stop()
	}
	w.timer = time.AfterFunc(w.settle, w.announce)
}

func (w *Watcher) announce() {
	w.mu.Lock()
	pending := w.pending
	w.pending = map[changeKey]bool{}
	subs := slices.Clone(w.subs)
	w.mu.Unlock()
	// A kind that was just added may take discovery a moment to serve:
	// misses reset the cache for a while (see Mapper.changed).
	keys := slices.SortedFunc(maps.Keys(pending), func(a, b changeKey) int {
		return cmp.Or(strings.Compare(a.group, b.group), strings.Compare(a.resource, b.resource))
	})
	var groups []string
	for _, k := range keys {
		if !slices.Contains(groups, k.group) {
			groups = append(groups, k.group)
		}
	}
	w.mapper.changed(groups)
	for _, k := range keys {
		for _, f := range subs {
			c := Change{Group: k.group, Resource: k.resource, Spec: pending[k]}
			if k.group == allGroups {
				c = Change{All: true, Spec: pending[k]}
			}
			f(c)
		}
	}
}

func objectMeta(obj any) *metav1.ObjectMeta {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if o, ok := obj.(*metav1.PartialObjectMetadata); ok {
		return &o.ObjectMeta
	}
	return nil
}
