package watch

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
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
	ResyncPeriod time.Duration
	// OnWatchError is told of every list or watch error of an informer.
	OnWatchError func(key Key, err error)
}

// Manager owns the running informers. It is safe for concurrent use.
type Manager struct {
	cfg Config

	writes *Writes
	// relistDelay is relistDelay but in tests.
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

// Informer is one running informer and its cache. Relist replaces the
// client-go informer behind it with a fresh one (see Manager.Relist); its
// methods always read the current one.
type Informer struct {
	key Key
	cur atomic.Pointer[generation]
	// next, guarded by Manager.mu, replaces cur once it has synced; nil
	// when no replacement is starting.
	next *generation
	// regs, guarded by Manager.mu, are the informer's users.
	regs map[*Registration]struct{}
}

// generation is one client-go informer of an Informer.
type generation struct {
	informer cache.SharedIndexInformer
	ctx      context.Context
	cancel   context.CancelFunc
	done     chan struct{}
}

// start runs the informer after delay, unless it is stopped first.
func (g *generation) start(delay time.Duration) {
	go func() {
		defer close(g.done)
		if delay > 0 {
			t := time.NewTimer(delay)
			defer t.Stop()
			select {
			case <-t.C:
			case <-g.ctx.Done():
				return
			}
		}
		g.informer.RunWithContext(g.ctx)
	}()
}

// Key returns what the informer watches.
func (i *Informer) Key() Key { return i.key }

// Indexer returns the informer's cache. Objects in it are shared: never
// modify them. After a relist it is another cache: ask again rather than
// keep it.
func (i *Informer) Indexer() cache.Indexer { return i.cur.Load().informer.GetIndexer() }

// HasSynced reports whether the informer has listed everything once.
func (i *Informer) HasSynced() bool { return i.cur.Load().informer.HasSynced() }

// Get returns the cached object with the given namespace and name, decoded
// (see Decode): the result is the caller's own. It returns nil and no error
// when there is no such object.
func (i *Informer) Get(namespace, name string) (*unstructured.Unstructured, error) {
	key := name
	if namespace != "" {
		key = namespace + "/" + name
	}
	obj, ok, err := i.Indexer().GetByKey(key)
	if err != nil || !ok {
		return nil, err
	}
	return Decode(obj)
}

// Registration is one user's hold on an informer.
type Registration struct {
	m        *Manager
	informer *Informer
	handler  Handler
	// handle, guarded by m.mu, is the handler's registration with the
	// informer's current generation.
	handle cache.ResourceEventHandlerRegistration
	// synced stays set once the handler has seen the first list: a
	// relist does not make a user unsynced again.
	synced atomic.Bool
	once   sync.Once
}

// Informer returns the informer the registration holds.
func (r *Registration) Informer() *Informer { return r.informer }

// HasSynced reports whether the handler has seen every object of the
// informer's first list.
func (r *Registration) HasSynced() bool {
	if r.synced.Load() {
		return true
	}
	r.m.mu.Lock()
	handle := r.handle
	r.m.mu.Unlock()
	if !handle.HasSynced() {
		return false
	}
	r.synced.Store(true)
	return true
}

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
	r := &Registration{m: m, informer: inf, handler: handler}
	handle, err := inf.cur.Load().informer.AddEventHandler(handlerFuncs(handler))
	if err != nil {
		if len(inf.regs) == 0 {
			m.stopLocked(inf)
		}
		return nil, fmt.Errorf("watch %s: %w", key, err)
	}
	r.handle = handle
	inf.regs[r] = struct{}{}
	return r, nil
}

func handlerFuncs(handler Handler) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { deliver(handler, obj, false) },
		UpdateFunc: func(_, obj any) { deliver(handler, obj, false) },
		DeleteFunc: func(obj any) { deliver(handler, obj, true) },
	}
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
	g, err := m.newGeneration(key)
	if err != nil {
		return nil, err
	}
	// The first handler tells Writes what the cache now holds.
	if _, err := g.informer.AddEventHandler(handlerFuncs(m.writes.observe)); err != nil {
		g.cancel()
		return nil, fmt.Errorf("watch %s: %w", key, err)
	}
	inf := &Informer{key: key, regs: map[*Registration]struct{}{}}
	inf.cur.Store(g)
	g.start(0)
	m.informers[key] = inf
	return inf, nil
}

// newGeneration returns an informer for key, not started, with no handler.
func (m *Manager) newGeneration(key Key) (*generation, error) {
	var informer cache.SharedIndexInformer
	if m.cfg.REST != nil {
		informer = cache.NewSharedIndexInformer(newListWatch(m.cfg.REST, key), &Object{}, m.cfg.ResyncPeriod, cache.Indexers{})
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
	if m.cfg.OnWatchError != nil {
		onError := m.cfg.OnWatchError
		if err := informer.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
			cache.DefaultWatchErrorHandler(ctx, r, err)
			onError(key, err)
		}); err != nil {
			return nil, fmt.Errorf("watch %s: %w", key, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &generation{informer: informer, ctx: ctx, cancel: cancel, done: make(chan struct{})}, nil
}

func (m *Manager) release(r *Registration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	inf := r.informer
	_ = inf.cur.Load().informer.RemoveEventHandler(r.handle)
	delete(inf.regs, r)
	if len(inf.regs) == 0 {
		m.stopLocked(inf)
	}
}

// stopLocked stops an informer without waiting for it: its goroutines end
// on their own once their contexts are cancelled.
func (m *Manager) stopLocked(inf *Informer) {
	inf.cur.Load().cancel()
	if inf.next != nil {
		inf.next.cancel()
		inf.next = nil
	}
	if m.informers[inf.key] == inf {
		delete(m.informers, inf.key)
	}
}

// Relist replaces the running informers of an API group's resources with
// fresh ones, which list them again: after a CustomResourceDefinition of
// the group changed, the API server decodes its objects under the new
// schema (defaults, pruning), but a watch that resumes from its resource
// version sends only the objects that change afterwards, so the cache
// would keep the others as the old schema made them.
//
// A fresh informer, rather than making the running one list again (ending
// its watch with 410 Expired): client-go's reflector waits its backoff
// before every list after the first, and shared informers do not let it
// be set (client-go TODO #136943). Each relist within two minutes doubled
// the wait, from 0.8-1.6 s up to 30-60 s, and the watch was down for all
// of it: after five CRD changes in a row, parent edits followed 21-28 s
// late. The fresh one lists after relistDelay; the running one keeps
// watching and serving until the fresh one has synced; then the fresh one
// becomes the cache, and every handler gets each of its objects as added.
// A relist asked for while another is starting starts over, so the cache
// that wins was listed after the last change.
//
// Informers over the dynamic client (without Config.REST) are left as they
// are: only tests use them, with fake clients whose watches share the
// objects the tracker keeps, which the transform changes.
func (m *Manager) Relist(group string) {
	if m.cfg.REST == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for key, inf := range m.informers {
		if key.GVR.Group == group {
			m.replaceLocked(inf)
		}
	}
}

func (m *Manager) replaceLocked(inf *Informer) {
	if inf.next != nil {
		inf.next.cancel()
		inf.next = nil
	}
	g, err := m.newGeneration(inf.key)
	if err != nil {
		if m.cfg.OnWatchError != nil {
			m.cfg.OnWatchError(inf.key, err)
		}
		return
	}
	inf.next = g
	g.start(m.relistDelay)
	go func() {
		if err := wait.PollUntilContextCancel(g.ctx, relistPoll, true, func(context.Context) (bool, error) {
			return g.informer.HasSynced(), nil
		}); err != nil {
			return // stopped, or replaced by a later relist
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if inf.next == g {
			m.swapLocked(inf, g)
		}
	}()
}

const (
	// relistDelay is how long a replacing informer waits before it
	// lists. The API server rebuilds a CRD's storage when its own
	// informer sees the change, and kgen's event of it can come first: a
	// list at once could still be served under the old schema. The
	// running informer follows the watch meanwhile, and a relist asked
	// for within the delay starts it over.
	relistDelay = time.Second
	// relistPoll is how often a replacing informer is checked for its
	// sync.
	relistPoll = 50 * time.Millisecond
)

// swapLocked makes g, synced, the informer's cache and moves every handler
// to it. Each handler gets g's objects as added, once the cache is g: a
// handler that reads the cache sees what it was told of. The writes
// handler moves first, as it was first on the replaced informer.
func (m *Manager) swapLocked(inf *Informer, g *generation) {
	inf.next = nil
	old := inf.cur.Swap(g)
	// Events the old informer still delivers are followed by the same
	// ones from g; those it drops, g has.
	old.cancel()
	add := func(h Handler) cache.ResourceEventHandlerRegistration {
		// g runs, as only this Manager stops it, under m.mu: adding a
		// handler does not fail.
		handle, err := g.informer.AddEventHandler(handlerFuncs(h))
		if err != nil && m.cfg.OnWatchError != nil {
			m.cfg.OnWatchError(inf.key, err)
		}
		return handle
	}
	add(m.writes.observe)
	for r := range inf.regs {
		if handle := add(r.handler); handle != nil {
			r.handle = handle
		}
	}
}

// Shutdown stops every informer and waits until they have stopped.
func (m *Manager) Shutdown() {
	m.mu.Lock()
	var gens []*generation
	for _, inf := range m.informers {
		gens = append(gens, inf.cur.Load())
		if inf.next != nil {
			gens = append(gens, inf.next)
		}
		m.stopLocked(inf)
	}
	m.mu.Unlock()
	for _, g := range gens {
		<-g.done
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
		obj, ok, err := inf.Indexer().GetByKey(key)
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
		out = append(out, Stats{Key: key, Objects: len(inf.Indexer().ListKeys()), Synced: inf.HasSynced(), Users: len(inf.regs)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key.String() < out[j].Key.String() })
	return out
}
