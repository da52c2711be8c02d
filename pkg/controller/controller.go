package controller

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"kgen.dev/kgen/pkg/mapper"
	"kgen.dev/kgen/pkg/reconcile"
	"kgen.dev/kgen/pkg/watch"
	"kgen.dev/kgen/rules"
)

// Key identifies one parent of one rule in the work queue.
type Key struct {
	Rule      string
	Namespace string
	Name      string
}

func (k Key) String() string {
	if k.Namespace == "" {
		return k.Rule + ":" + k.Name
	}
	return k.Rule + ":" + k.Namespace + "/" + k.Name
}

// Config holds a Controller's dependencies and settings. Rules, Client,
// Mapper and Recorder are required; the zero value of the others is sensible.
type Config struct {
	Rules  []*rules.Rule
	Client dynamic.Interface
	// REST, when set, lists and watches for the informers, decoding
	// objects without maps (see watch.Config.REST and watch.NewRESTClient).
	REST     rest.Interface
	Mapper   *mapper.Mapper
	Recorder record.EventRecorder
	// Workers is how many parents are reconciled at once; DefaultWorkers when zero.
	Workers int
	// RetryInterval is how often rules whose kinds are not served are tried
	// again; DefaultRetryInterval when zero.
	RetryInterval time.Duration
	// Metrics receives the controller's metrics; none are kept when nil.
	Metrics *Metrics
}

// Defaults for Config.
const (
	DefaultWorkers       = 8
	DefaultRetryInterval = 5 * time.Second
)

// indexParent indexes children by "<rule>/<parent UID>".
const indexParent = "kgen.dev/parent"

// childSelector selects the objects kgen manages; child informers cache
// nothing else.
var childSelector = reconcile.LabelManagedBy + "=" + reconcile.ManagedBy

// Controller runs the rules. Create it with New and start it with Run.
type Controller struct {
	cfg        Config
	queue      workqueue.TypedRateLimitingInterface[Key]
	watches    *watch.Manager
	reconciler *reconcile.Reconciler
	metrics    *Metrics

	// kick wakes the activation loop early, after a kind went away.
	kick chan struct{}

	mu    sync.Mutex
	rules map[string]*ruleState
}

// ruleState is one rule and what the controller runs for it. The fields
// after rule are guarded by Controller.mu.
type ruleState struct {
	rule *rules.Rule

	active     bool
	waiting    string
	parent     mapper.Mapping
	parentRegs map[string]*watch.Registration // by namespace ("" = all)
	childRegs  []*watch.Registration
	gvrs       []schema.GroupVersionResource // parent's and children's
}

// New returns a Controller for the rules; it starts nothing until Run.
func New(cfg Config) *Controller {
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = DefaultRetryInterval
	}
	c := &Controller{
		cfg:     cfg,
		metrics: cfg.Metrics,
		kick:    make(chan struct{}, 1),
		rules:   map[string]*ruleState{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedMaxOfRateLimiter(
				workqueue.NewTypedItemExponentialFailureRateLimiter[Key](10*time.Millisecond, 5*time.Minute),
				&workqueue.TypedBucketRateLimiter[Key]{Limiter: rate.NewLimiter(rate.Limit(50), 300)},
			),
			workqueue.TypedRateLimitingQueueConfig[Key]{Name: "kgen"}),
	}
	c.watches = watch.New(watch.Config{
		Client:   cfg.Client,
		REST:     cfg.REST,
		Indexers: cache.Indexers{indexParent: parentIndex},
		// The index and the handlers read only kgen's own labels and
		// annotations; the cached JSON keeps the rest.
		Transform:    watch.CompactKeeping(isKgenKey),
		OnWatchError: c.onWatchError,
	})
	c.reconciler = reconcile.New(reconcile.Config{
		Client: cfg.Client, Resources: cfg.Mapper, Children: c, Recorder: cfg.Recorder, Cache: c.watches,
	})
	for _, r := range cfg.Rules {
		c.rules[r.Name] = &ruleState{rule: r, waiting: "not started"}
	}
	if c.metrics != nil {
		c.metrics.watches = c.watches
	}
	return c
}

// isKgenKey reports whether a label or annotation key is one of kgen's.
func isKgenKey(key string) bool {
	return strings.HasPrefix(key, "kgen.dev/") || key == reconcile.LabelManagedBy
}

func parentIndex(obj any) ([]string, error) {
	o, ok := obj.(metav1.Object)
	if !ok {
		return nil, nil
	}
	rule, uid := label(o, reconcile.LabelRule), label(o, reconcile.LabelParentUID)
	if rule == "" || uid == "" {
		return nil, nil
	}
	return []string{rule + "/" + uid}, nil
}

// label returns one label of obj; for a cached *watch.Object it does not
// build the map GetLabels would.
func label(obj metav1.Object, key string) string {
	if o, ok := obj.(*watch.Object); ok {
		return o.Label(key)
	}
	return obj.GetLabels()[key]
}

// annotation returns one annotation of obj, as label does a label.
func annotation(obj metav1.Object, key string) string {
	if o, ok := obj.(*watch.Object); ok {
		return o.Annotation(key)
	}
	return obj.GetAnnotations()[key]
}

// Run starts the rules and the workers and blocks until ctx is done. It then
// stops taking new work, lets the workers finish what they hold, and stops
// every informer.
func (c *Controller) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	logger.Info("Starting controller", "rules", len(c.rules), "workers", c.cfg.Workers)
	var wg sync.WaitGroup
	wg.Go(func() { c.activateLoop(ctx) })
	// Work in flight finishes on a context that outlives ctx, so a SIGTERM
	// does not cut a parent's writes in half; the workers take no new work
	// once ctx is done.
	work := context.WithoutCancel(ctx)
	for range c.cfg.Workers {
		wg.Go(func() {
			for c.processNextWorkItem(work, ctx) {
			}
		})
	}
	<-ctx.Done()
	logger.Info("Shutting down controller; finishing work in flight")
	// Queued parents are dropped (processNextWorkItem sees ctx is done) and
	// picked up again by the next leader or run; ShutDownWithDrain waits
	// for the ones being reconciled.
	c.queue.ShutDownWithDrain()
	wg.Wait()
	c.watches.Shutdown()
	logger.Info("Controller stopped")
	return nil
}

// processNextWorkItem reconciles one parent with ctx; it returns false once
// the queue is shut down. Once stop is done it takes no more work.
func (c *Controller) processNextWorkItem(ctx, stop context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	// Done lets the key be processed again, by any worker.
	defer c.queue.Done(key)
	if stop.Err() != nil {
		return true // shutting down: leave it to the next run
	}
	result, err := c.reconcileKey(ctx, key)
	switch {
	case err != nil && errors.Is(err, reconcile.ErrTerminal):
		// Retrying will not help; the parent's status says why, and a
		// change to it or its children queues it again.
		c.queue.Forget(key)
		klog.FromContext(ctx).V(1).Info("Parent needs a change before it can be reconciled", "key", key, "err", err)
	case err != nil:
		// Transient: back off, per key and overall.
		c.queue.AddRateLimited(key)
		klog.FromContext(ctx).Error(err, "Reconcile failed; will retry", "key", key)
	case result.RequeueAfter > 0:
		// Done for now: reset the backoff, and look again later.
		c.queue.Forget(key)
		c.queue.AddAfter(key, result.RequeueAfter)
	default:
		// Done: reset the backoff.
		c.queue.Forget(key)
	}
	return true
}

// reconcileKey reconciles one parent, turning a panic into an error.
func (c *Controller) reconcileKey(ctx context.Context, key Key) (result reconcile.Result, err error) {
	start := time.Now()
	defer func() {
		if p := recover(); p != nil {
			c.metrics.panicked()
			err = fmt.Errorf("panic reconciling %s: %v\n%s", key, p, debug.Stack())
		}
		c.metrics.observe(key.Rule, start, err)
	}()
	c.mu.Lock()
	rs, ok := c.rules[key.Rule]
	var reg *watch.Registration
	var mapping mapper.Mapping
	if ok && rs.active {
		mapping = rs.parent
		if reg = rs.parentRegs[key.Namespace]; reg == nil {
			reg = rs.parentRegs[""]
		}
	}
	c.mu.Unlock()
	if reg == nil {
		return reconcile.Result{}, nil // not running; activation lists every parent again
	}
	if !c.childrenSynced(rs) {
		// Without every child cached, existing children would look missing.
		return reconcile.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}
	parent, err := reg.Informer().Get(key.Namespace, key.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	if parent == nil {
		return reconcile.Result{}, nil // gone: owner references and the finalizer did the rest
	}
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("rule", key.Rule, "parent", klog.KObj(parent)))
	return c.reconciler.Reconcile(ctx, rs.rule, mapping, parent)
}

// childrenSynced reports whether every child informer of the rule has synced.
func (c *Controller) childrenSynced(rs *ruleState) bool {
	c.mu.Lock()
	regs := rs.childRegs
	c.mu.Unlock()
	for _, reg := range regs {
		if !reg.HasSynced() {
			return false
		}
	}
	return true
}

// Children returns the cached children of a rule's parent; it makes the
// Controller the reconciler's ChildLister.
func (c *Controller) Children(rule string, parent types.UID) []*unstructured.Unstructured {
	c.mu.Lock()
	rs := c.rules[rule]
	var regs []*watch.Registration
	if rs != nil {
		regs = rs.childRegs
	}
	c.mu.Unlock()
	var out []*unstructured.Unstructured
	seen := map[types.UID]bool{}
	for _, reg := range regs {
		objs, err := reg.Informer().Indexer().ByIndex(indexParent, rule+"/"+string(parent))
		if err != nil {
			continue
		}
		for _, o := range objs {
			m, ok := o.(metav1.Object)
			if !ok || seen[m.GetUID()] {
				continue
			}
			u, err := watch.Decode(o)
			if err != nil {
				continue // cannot happen for what the transform made
			}
			seen[m.GetUID()] = true
			out = append(out, u)
		}
	}
	return out
}

var _ reconcile.ChildLister = (*Controller)(nil)

// activateLoop starts waiting rules now and whenever it is kicked or the
// retry interval passes, until ctx is done.
func (c *Controller) activateLoop(ctx context.Context) {
	logger := klog.FromContext(ctx)
	ticker := time.NewTicker(c.cfg.RetryInterval)
	defer ticker.Stop()
	for {
		waiting := false
		c.mu.Lock()
		states := make([]*ruleState, 0, len(c.rules))
		for _, rs := range c.rules {
			states = append(states, rs)
		}
		c.mu.Unlock()
		slices.SortFunc(states, func(a, b *ruleState) int { return strings.Compare(a.rule.Name, b.rule.Name) })
		for _, rs := range states {
			if err := c.activate(ctx, rs); err != nil {
				waiting = true
				logger.Info("Rule is waiting", "rule", rs.rule.Name, "reason", err.Error())
			}
		}
		if waiting {
			// Kinds served later are found only by asking discovery again.
			c.cfg.Mapper.Reset()
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-c.kick:
		}
	}
}

// activate starts the informers of a rule that is not running yet.
func (c *Controller) activate(ctx context.Context, rs *ruleState) error {
	c.mu.Lock()
	active := rs.active
	c.mu.Unlock()
	if active {
		return nil
	}
	rule := rs.rule
	parent, err := c.cfg.Mapper.ResourceFor(rule.Parent.GroupVersionKind)
	if err != nil {
		return c.setWaiting(rs, fmt.Errorf("parent kind %s: %w", rule.Parent.GroupVersionKind, err))
	}
	gvrs := []schema.GroupVersionResource{parent.GroupVersionResource()}
	// Namespaced children of a parent limited to namespaces are watched
	// only there, unless they may live elsewhere: such a rule then needs no
	// cluster-wide access (pkg/rbac grants exactly this).
	childNamespaces := []string{""}
	if parent.Namespaced && len(rule.Parent.Namespaces) > 0 && len(rule.AllowCrossNamespace) == 0 {
		childNamespaces = rule.Parent.Namespaces
	}
	var childKeys []watch.Key
	for _, child := range rule.Children {
		m, err := c.cfg.Mapper.ResourceFor(child.GroupVersionKind)
		if err != nil {
			return c.setWaiting(rs, fmt.Errorf("child %s kind %s: %w", child.ID, child.GroupVersionKind, err))
		}
		if !slices.Contains(gvrs, m.GroupVersionResource()) {
			gvrs = append(gvrs, m.GroupVersionResource())
		}
		namespaces := []string{""}
		if m.Namespaced {
			namespaces = childNamespaces
		}
		for _, ns := range namespaces {
			key := watch.Key{GVR: m.GroupVersionResource(), Namespace: ns, Selector: childSelector}
			if !slices.Contains(childKeys, key) {
				childKeys = append(childKeys, key)
			}
		}
	}

	// Children first; reconcileKey waits until they have synced, so a
	// parent's first reconcile sees them.
	var childRegs []*watch.Registration
	release := func() {
		for _, r := range childRegs {
			r.Release()
		}
	}
	for _, key := range childKeys {
		reg, err := c.watches.Acquire(key, c.childHandler(rule.Name))
		if err != nil {
			release()
			return c.setWaiting(rs, err)
		}
		childRegs = append(childRegs, reg)
	}
	namespaces := []string{""}
	if parent.Namespaced && len(rule.Parent.Namespaces) > 0 {
		namespaces = rule.Parent.Namespaces
	}
	parentRegs := map[string]*watch.Registration{}
	for _, ns := range namespaces {
		key := watch.Key{GVR: parent.GroupVersionResource(), Namespace: ns, Selector: rule.Parent.Selector.String()}
		reg, err := c.watches.Acquire(key, c.parentHandler(rule))
		if err != nil {
			for _, r := range parentRegs {
				r.Release()
			}
			release()
			return c.setWaiting(rs, err)
		}
		parentRegs[ns] = reg
	}
	c.mu.Lock()
	rs.active, rs.waiting = true, ""
	rs.parent, rs.parentRegs, rs.childRegs, rs.gvrs = parent, parentRegs, childRegs, gvrs
	c.mu.Unlock()
	c.metrics.setWaiting(rule.Name, false)
	klog.FromContext(ctx).Info("Rule started", "rule", rule.Name, "parent", parent.GroupVersionResource().String())
	return nil
}

func (c *Controller) setWaiting(rs *ruleState, err error) error {
	c.mu.Lock()
	rs.waiting = err.Error()
	c.mu.Unlock()
	c.metrics.setWaiting(rs.rule.Name, true)
	return err
}

// parentHandler queues a parent of the rule.
func (c *Controller) parentHandler(rule *rules.Rule) watch.Handler {
	return func(obj metav1.Object) {
		c.reconciler.Seen(obj)
		c.queue.Add(Key{Rule: rule.Name, Namespace: obj.GetNamespace(), Name: obj.GetName()})
	}
}

// childHandler queues the parent of a child of the rule, found from the
// child's own marks, so a child event queues exactly its parent.
func (c *Controller) childHandler(rule string) watch.Handler {
	return func(obj metav1.Object) {
		if label(obj, reconcile.LabelRule) != rule {
			return
		}
		c.reconciler.Seen(obj)
		ref := annotation(obj, reconcile.AnnotationParent)
		if ref == "" {
			return
		}
		ns, name, found := strings.Cut(ref, "/")
		if !found {
			ns, name = "", ref
		}
		c.queue.Add(Key{Rule: rule, Namespace: ns, Name: name})
	}
}

// onWatchError stops the rules that use a resource that is no longer served,
// so they wait for it instead of failing forever.
func (c *Controller) onWatchError(key watch.Key, err error) {
	if !apierrors.IsNotFound(err) {
		return
	}
	c.mu.Lock()
	var stopped []*ruleState
	for _, rs := range c.rules {
		if rs.active && slices.Contains(rs.gvrs, key.GVR) {
			stopped = append(stopped, rs)
		}
	}
	c.mu.Unlock()
	for _, rs := range stopped {
		c.deactivate(rs, fmt.Errorf("%s is no longer served: %w", key.GVR, err))
	}
	if len(stopped) > 0 {
		c.cfg.Mapper.Reset()
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
}

func (c *Controller) deactivate(rs *ruleState, why error) {
	c.mu.Lock()
	if !rs.active {
		c.mu.Unlock()
		return
	}
	regs := append(slices.Clone(rs.childRegs), mapsValues(rs.parentRegs)...)
	rs.active, rs.waiting = false, why.Error()
	rs.parentRegs, rs.childRegs, rs.gvrs = nil, nil, nil
	c.mu.Unlock()
	for _, r := range regs {
		r.Release()
	}
	c.metrics.setWaiting(rs.rule.Name, true)
	klog.Background().Info("Rule stopped", "rule", rs.rule.Name, "reason", why.Error())
}

func mapsValues(m map[string]*watch.Registration) []*watch.Registration {
	out := make([]*watch.Registration, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// Ready returns nil once every rule runs and every informer it uses has
// synced; otherwise an error that says what is missing.
func (c *Controller) Ready() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var problems []string
	names := make([]string, 0, len(c.rules))
	for name := range c.rules {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		rs := c.rules[name]
		if !rs.active {
			problems = append(problems, fmt.Sprintf("rule %s is waiting: %s", name, rs.waiting))
			continue
		}
		for _, reg := range append(slices.Clone(rs.childRegs), mapsValues(rs.parentRegs)...) {
			if !reg.HasSynced() {
				problems = append(problems, fmt.Sprintf("rule %s: cache of %s has not synced", name, reg.Informer().Key()))
			}
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}
