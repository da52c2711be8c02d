package watch

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// Key identifies one informer.
type Key struct {
	// GVR is the watched resource.
	GVR schema.GroupVersionResource
	// Namespace limits the watch to one namespace; empty means all.
	Namespace string
	// Selector is a label selector in its string form; empty means all.
	Selector string
	// AllLabels keeps every label of the cached objects in their typed
	// metadata, whatever the Manager's transform keeps, so callers can
	// match label selectors without decoding objects.
	AllLabels bool
}

func (k Key) String() string {
	s := k.GVR.String()
	if k.Namespace != "" {
		s += " in " + k.Namespace
	}
	if k.Selector != "" {
		s += " where " + k.Selector
	}
	return s
}

// Handler receives the metadata of an object that was added or updated
// (deleted false), or that left the cache (deleted true, with its last known
// state): deleted, or no longer matched by the informer's selector.
type Handler func(obj metav1.Object, deleted bool)

// Config configures a Manager. Only Client is required.
type Config struct {
	// Client lists and watches, unless REST is set.
	Client dynamic.Interface
	// REST, when set, lists and watches instead of Client, decoding
	// objects straight into *Object; it needs only to reach the API
	// server's paths (rest.UnversionedRESTClientFor makes one).
	REST rest.Interface
	// Indexers are added to every informer.
	Indexers cache.Indexers
	// Transform is applied to objects before they are cached; Compact
	// when nil.
	Transform cache.TransformFunc
	// ResyncPeriod, when set, replays the cache to handlers periodically.
	// Leave it 0 for Relist to reach handlers at once: a relisted object
	// keeps its resource version, and a shared informer delivers such an
	// update only to handlers that are due a resync, which with no period
	// all always are.
	ResyncPeriod time.Duration
	// OnWatchError is told of every list or watch error of an informer.
	OnWatchError func(key Key, err error)
	// OnListed is told whenever an informer read a whole list (also in a
	// watch-list, or a relist in its watch): after an error, it lists and
	// watches again. Only informers of REST have it.
	OnListed func(key Key)
}

// Manager owns the running informers. It is safe for concurrent use.
type Manager struct {
	cfg Config

	writes *Writes
	// relistDelay is the informers' (see listWatch.delay).
	relistDelay time.Duration

	mu        sync.Mutex
	informers map[Key]*Informer
}

// New returns a Manager that starts no informer until asked.
func New(cfg Config) *Manager {
	if cfg.Transform == nil {
		cfg.Transform = Compact
	}
	m := &Manager{cfg: cfg, informers: map[Key]*Informer{}, writes: NewWrites(), relistDelay: relistDelay}
	m.writes.cached = m.cachedResourceVersion
	return m
}

// Writes returns the record of the client's own writes that the Manager's
// informers keep up to date.
func (m *Manager) Writes() *Writes { return m.writes }

// Informer is one running informer and its cache.
type Informer struct {
	key      Key
	lw       *listWatch // nil for a dynamic informer
	informer cache.SharedIndexInformer
	cancel   context.CancelFunc
	done     chan struct{}
	refs     int
}

// Key returns what the informer watches.
func (i *Informer) Key() Key { return i.key }

// Indexer returns the informer's cache. Objects in it are shared: never
// modify them.
func (i *Informer) Indexer() cache.Indexer { return i.informer.GetIndexer() }

// HasSynced reports whether the informer has listed everything once.
func (i *Informer) HasSynced() bool { return i.informer.HasSynced() }

// Get returns the cached object with the given namespace and name, decoded
// (see Decode): the result is the caller's own. It returns nil and no error
// when there is no such object.
func (i *Informer) Get(namespace, name string) (*unstructured.Unstructured, error) {
	key := name
	if namespace != "" {
		key = namespace + "/" + name
	}
	obj, ok, err := i.informer.GetIndexer().GetByKey(key)
	if err != nil || !ok {
		return nil, err
	}
	return Decode(obj)
}

// Registration is one user's hold on an informer.
type Registration struct {
	m        *Manager
	informer *Informer
	handle   cache.ResourceEventHandlerRegistration
	once     sync.Once
}

// Informer returns the informer the registration holds.
func (r *Registration) Informer() *Informer { return r.informer }

// HasSynced reports whether the handler has seen every object of the
// informer's first list.
func (r *Registration) HasSynced() bool { return r.handle.HasSynced() }

// Release removes the handler and stops the informer if no one else uses it.
// It is safe to call more than once.
func (r *Registration) Release() {
	r.once.Do(func() { r.m.release(r) })
}

// Acquire registers handler on the informer for key, starting the informer
// if it is not running yet.
func (m *Manager) Acquire(key Key, handler Handler) (*Registration, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	inf, ok := m.informers[key]
	if !ok {
		var err error
		if inf, err = m.startLocked(key); err != nil {
			return nil, err
		}
	}
	handle, err := inf.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { deliver(handler, obj, false) },
		UpdateFunc: func(_, obj any) { deliver(handler, obj, false) },
		DeleteFunc: func(obj any) { deliver(handler, obj, true) },
	})
	if err != nil {
		if inf.refs == 0 {
			m.stopLocked(inf)
		}
		return nil, fmt.Errorf("watch %s: %w", key, err)
	}
	inf.refs++
	return &Registration{m: m, informer: inf, handle: handle}, nil
}

func deliver(handler Handler, obj any, deleted bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if o, ok := obj.(metav1.Object); ok {
		handler(o, deleted)
	}
}

func (m *Manager) startLocked(key Key) (*Informer, error) {
	var informer cache.SharedIndexInformer
	var lw *listWatch
	if m.cfg.REST != nil {
		lw = newListWatch(m.cfg.REST, key)
		lw.delay = m.relistDelay
		if onListed := m.cfg.OnListed; onListed != nil {
			lw.onListed = func() { onListed(key) }
		}
		informer = cache.NewSharedIndexInformer(lw, &Object{}, m.cfg.ResyncPeriod, cache.Indexers{})
	} else {
		tweak := func(o *metav1.ListOptions) { o.LabelSelector = key.Selector }
		factory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(m.cfg.Client, m.cfg.ResyncPeriod, key.Namespace, tweak)
		informer = factory.ForResource(key.GVR).Informer()
	}
	transform := m.cfg.Transform
	if key.AllLabels {
		transform = Compact
	}
	if err := informer.SetTransform(transform); err != nil {
		return nil, fmt.Errorf("watch %s: %w", key, err)
	}
	// A dynamic informer comes with the namespace index; add only the
	// others.
	indexers := cache.Indexers{}
	for name, f := range m.cfg.Indexers {
		if _, ok := informer.GetIndexer().GetIndexers()[name]; !ok {
			indexers[name] = f
		}
	}
	if len(indexers) > 0 {
		if err := informer.AddIndexers(indexers); err != nil {
			return nil, fmt.Errorf("watch %s: %w", key, err)
		}
	}
	// The first handler tells Writes what the cache now holds.
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { deliver(m.writes.observe, obj, false) },
		UpdateFunc: func(_, obj any) { deliver(m.writes.observe, obj, false) },
		DeleteFunc: func(obj any) { deliver(m.writes.observe, obj, true) },
	}); err != nil {
		return nil, fmt.Errorf("watch %s: %w", key, err)
	}
	if m.cfg.OnWatchError != nil {
		onError := m.cfg.OnWatchError
		// In place of client-go's default handler, which logs every
		// failure at every retry: OnWatchError reports them (kgen's
		// controller at most once a minute per informer and cause).
		if err := informer.SetWatchErrorHandlerWithContext(watchErrorHandler(key, onError)); err != nil {
			return nil, fmt.Errorf("watch %s: %w", key, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	inf := &Informer{key: key, lw: lw, informer: informer, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(inf.done)
		informer.RunWithContext(ctx)
	}()
	m.informers[key] = inf
	return inf, nil
}

// watchErrorHandler tells onError of an informer's failed list or watch,
// but of a watch that closed normally: io.EOF itself, as client-go's own
// handler has it. A list cut short wraps io.EOF, and is a failure.
func watchErrorHandler(key Key, onError func(Key, error)) cache.WatchErrorHandlerWithContext {
	return func(_ context.Context, _ *cache.Reflector, err error) {
		if err == io.EOF {
			return
		}
		onError(key, err)
	}
}

func (m *Manager) release(r *Registration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	inf := r.informer
	_ = inf.informer.RemoveEventHandler(r.handle)
	inf.refs--
	if inf.refs <= 0 {
		m.stopLocked(inf)
	}
}

// stopLocked stops an informer without waiting for it: its goroutine ends
// on its own once the context is cancelled.
func (m *Manager) stopLocked(inf *Informer) {
	inf.cancel()
	if m.informers[inf.key] == inf {
		delete(m.informers, inf.key)
	}
}

// RelistResource makes the running informers of a resource of an API group
// (its plural, as a CustomResourceDefinition names it; every resource of
// the group when "") list it again, in every version (see
// listWatch.Relist): after a CustomResourceDefinition changed, what they
// cache was decoded under its old schema. Informers over the dynamic
// client (without Config.REST) are left as they are. The handlers get
// every object again (see Config.ResyncPeriod).
func (m *Manager) RelistResource(group, resource string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for key, inf := range m.informers {
		if key.GVR.Group == group && (resource == "" || key.GVR.Resource == resource) && inf.lw != nil {
			inf.lw.Relist()
		}
	}
}

// Shutdown stops every informer and waits until they have stopped.
func (m *Manager) Shutdown() {
	m.mu.Lock()
	infs := make([]*Informer, 0, len(m.informers))
	for _, inf := range m.informers {
		infs = append(infs, inf)
		m.stopLocked(inf)
	}
	m.mu.Unlock()
	for _, inf := range infs {
		<-inf.done
	}
}

// cachedResourceVersion returns the resource version of the object with
// the given namespace and name in the cache of any running informer of gvr
// that can hold it, or "" if none holds it. The cache is updated before
// handlers are told of an event.
func (m *Manager) cachedResourceVersion(gvr schema.GroupVersionResource, namespace, name string) string {
	key := name
	if namespace != "" {
		key = namespace + "/" + name
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, inf := range m.informers {
		if k.GVR != gvr || (k.Namespace != "" && k.Namespace != namespace) {
			continue
		}
		obj, ok, err := inf.informer.GetIndexer().GetByKey(key)
		if err != nil || !ok {
			continue
		}
		if o, ok := obj.(metav1.Object); ok {
			return o.GetResourceVersion()
		}
	}
	return ""
}

// Stats describes one running informer, for metrics and readiness.
type Stats struct {
	Key     Key
	Objects int
	Synced  bool
	Users   int
}

// Stats returns every running informer's key, object count and sync state,
// sorted by key.
func (m *Manager) Stats() []Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Stats, 0, len(m.informers))
	for key, inf := range m.informers {
		out = append(out, Stats{Key: key, Objects: len(inf.informer.GetIndexer().ListKeys()), Synced: inf.informer.HasSynced(), Users: inf.refs})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key.String() < out[j].Key.String() })
	return out
}
