package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"kgen.dev/kgen/pkg/kinds"
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
	// Schemas, when set, tells the reconciler what it needs of kinds'
	// schemas (see reconcile.Config.Schemas).
	Schemas reconcile.Schemas
	// Events says which events to record; reconcile.EventsNotable when
	// empty.
	Events reconcile.EventPolicy
	// Impersonate, when set, gives clients that act as a ServiceAccount,
	// for rules with spec.serviceAccount (see reconcile.Config).
	Impersonate func(rules.ServiceAccount) (dynamic.Interface, error)
	// Workers is how many parents are reconciled at once; DefaultWorkers when zero.
	Workers int
	// RetryInterval is how often rules whose kinds are not served are tried
	// again; DefaultRetryInterval when zero.
	RetryInterval time.Duration
	// Metrics receives the controller's metrics; none are kept when nil.
	Metrics *Metrics
	// RulesLoaded, when set, tells whether every rule has been read (the
	// files and the Rule objects) and none is unreadable (pkg/ruleset's
	// Settled): until it does, no parent is taken for one that left every
	// rule (see sweepLeft and sweepParents).
	RulesLoaded func() bool
	// Sharding, when set, limits the controller to the parents assigned
	// to this replica, and their children (see shard.go).
	Sharding Sharding
	// Record keeps where each rule may have made children across
	// restarts, so that children of kinds that left a rule are pruned
	// (see record.go); without it, only while kgen runs.
	Record Record
	// SchemaDefaults reads each parent with the defaults of its rule's
	// spec.parent.schema set where it lacks them (rules.Rule.WithDefaults):
	// for kgenctl run --manage-crds, whose CRDs are made from those
	// schemas, so the API server serves those defaults.
	SchemaDefaults bool
	// Prepare, when set, is called each time kgen tries to start a rule,
	// before it looks up the rule's kinds: it may make the parent kind
	// served (kgenctl run --manage-crds applies its CRD). An error keeps
	// the rule waiting, and it is tried again.
	Prepare func(ctx context.Context, rule *rules.Rule) error
	// Admit, when set, is asked once a rule's parent kind is served,
	// before its informers start: an error (its expressions do not fit
	// the parent's schema) keeps the rule waiting with the error, and it
	// is asked again at the next try. ranBefore says whether the Record
	// holds this version of the rule as the one that last started.
	Admit func(ctx context.Context, rule *rules.Rule, ranBefore bool) error
	// Recheck, when set, is asked for each running rule that uses a kind
	// of an API group whose CustomResourceDefinitions changed, after the
	// schemas known of the group were dropped: it reports a rule that no
	// longer fits them. The rule keeps running either way.
	Recheck func(ctx context.Context, rule *rules.Rule)
}

// Defaults for Config.
const (
	DefaultWorkers       = 8
	DefaultRetryInterval = 5 * time.Second
)

// Backoffs of the work queue.
const (
	// A failed reconcile is retried after 10 ms, doubling to 5 minutes,
	// under an overall limit of 50 retries per second.
	retryBase, retryMax = 10 * time.Millisecond, 5 * time.Minute
	// A parent whose child waits for children its reconcile just wrote
	// is reconciled again after 50 ms (the informers show a write within
	// that, as a rule), doubling to 10 s while the cache does not show
	// them.
	againBase, againMax = 50 * time.Millisecond, 10 * time.Second
	// A parent whose child's name is taken by an object kgen must not
	// touch is looked at again after 30 s, doubling to 10 minutes while the
	// conflict stays; meanwhile a watch of that object by name (blockers)
	// wakes it as soon as the object goes.
	conflictBase, conflictMax = 30 * time.Second, 10 * time.Minute
	// A write the API server's admission refuses because it does not know
	// a kind yet (reconcile.LearningKind) is retried at least every 2 s,
	// under the overall limit, for the first learningTries: the server
	// learns a kind within 30 s; one it never learns is backed off as
	// any failure then.
	learningRetry = 2 * time.Second
	learningTries = 40
	// watchErrorLogEvery bounds how often a failing list or watch of one
	// informer is logged.
	watchErrorLogEvery = time.Minute
	// watchSettle is how long an informer that read a whole list again
	// must go without a failure before its failure is forgotten: where
	// kgen may list but not watch, the watch after each list is refused
	// within milliseconds, and the rule must not show healthy in between.
	watchSettle = 5 * time.Second
)

// indexParent indexes children by the UID of their parent
// (reconcile.LabelParentUID): a child is its parent's whatever rule made
// it, so renaming a rule or moving a parent to another rule keeps its
// children.
const indexParent = "kgen.dev/parent-uid"

// childSelector selects the objects kgen manages; child informers cache
// nothing else.
var childSelector = reconcile.LabelManagedBy + "=" + reconcile.ManagedBy

// Controller runs the rules. Create it with New and start it with Run.
type Controller struct {
	cfg   Config
	queue workqueue.TypedRateLimitingInterface[Key]
	// retries is the per-key backoff of the queue's failed reconciles, and
	// overall their limit over every key; the queue steps both.
	retries   workqueue.TypedRateLimiter[Key]
	overall   workqueue.TypedRateLimiter[Key]
	conflicts workqueue.TypedRateLimiter[Key]
	// conflictLogged is when each parent's Conflict that came with Again
	// was last logged: such reconciles do not step the conflicts backoff,
	// so their log is limited by time instead. A Conflict alone is
	// logged once per step of its backoff.
	conflictLogged logTimes
	// conflictLook is when each parent in Conflict is next looked at by
	// its backoff: a reconcile before then (a change of the parent or a
	// child woke it) does not step the backoff, nor log again.
	conflictLook logTimes
	// again backs off reconciles that ask to run again (Result.Again)
	// while the cache does not show what they wait for.
	again workqueue.TypedRateLimiter[Key]
	// blockers watches the objects in the way of parents in Conflict.
	blockers   *blockers
	watches    *watch.Manager
	reconciler *reconcile.Reconciler
	metrics    *Metrics
	// shards is nil unless Config.Sharding is set.
	shards *sharded

	// kick wakes the activation loop early, after a kind went away.
	kick chan struct{}
	// kindsChanges counts KindsChanged calls, so that a rule that was
	// starting during one reads its parent mapping again.
	kindsChanges atomic.Uint64

	mu    sync.Mutex
	rules map[string]*ruleState
	// pending are the new versions of changed rules whose previous
	// version runs: the previous version keeps the rule's name, and its
	// parents, until its successor's caches have synced (see
	// startPending).
	pending map[string]*ruleState
	// leaving are parents that left a rule's informer while carrying
	// kgen's finalizer: relabelled out of the rule's selector, most likely.
	leaving map[Key]types.UID
	// held are the events of the parents being reconciled right now,
	// held back until their reconcile ends (see hold).
	held map[Key][]heldEvent
	// watchErrors are the informers whose list or watch fails, and why.
	watchErrors map[watch.Key]watchError
	// retiring are the states of rules that were changed or removed, to
	// stop once their successors have their informers.
	retiring []*ruleState
	// readers index the parents by the inputs they read (see inputs.go);
	// readsOf is the reverse.
	readers map[readKey]map[Key]read
	readsOf map[Key][]read
	// record is what kgen knows of its Record (see record.go).
	record recordState
}

type watchError struct {
	err    error
	at     time.Time // when it last failed
	logged time.Time
	// gone says, for a refused list in a namespace, that the namespace
	// does not exist or is being deleted (namespaceGone); "" otherwise.
	gone string
	// listed is when the informer first read a whole list again after
	// err (onListed); zero while it has not.
	listed time.Time
}

// current returns the failure as it stands at now: none once the informer
// listed again and did not fail for watchSettle since. The entry itself
// stays, so that a failure that comes back soon after is not logged again
// within watchErrorLogEvery.
func (e watchError) current(now time.Time) watchError {
	if !e.listed.IsZero() && now.Sub(e.listed) >= watchSettle {
		return watchError{logged: e.logged}
	}
	return e
}

// watchErrLocked returns the current failure of an informer's list or
// watch (see watchError.current); the caller holds c.mu.
func (c *Controller) watchErrLocked(key watch.Key) watchError {
	return c.watchErrors[key].current(time.Now())
}

// ruleState is one rule and what the controller runs for it. The fields
// after rule are guarded by Controller.mu.
type ruleState struct {
	rule *rules.Rule

	active bool
	// synced is set once every informer of the active rule has listed
	// everything: only then are its parents reconciled.
	synced     bool
	waiting    string
	parent     mapper.Mapping
	parentRegs map[string]*watch.Registration // by namespace ("" = all)
	childRegs  []*watch.Registration
	inputRegs  []*watch.Registration
	gvrs       []schema.GroupVersionResource // parent's, children's and inputs'
	// unassign ends the sharding's assignment of the rule's parents.
	unassign []func()
	// scopes are where the rule's children may be; pruning are the
	// informers of recorded scopes the rule no longer covers, unwatched
	// those it could not watch yet, and recordErr why the record could
	// not be read or written (see record.go).
	scopes    []ChildScope
	pruning   []*pruneWatch
	unwatched []ChildScope
	recordErr string
	// settled are the scopes inherited from a removed rule (see
	// inheritedLocked) that were found empty, or that kgen may not list:
	// not watched again by this version of the rule (the removed rule's
	// entry stays in the record, so the next version, or the next start
	// of kgen, looks once more).
	settled map[ChildScope]bool
	// parentScopes are where the rule watches its parents, for the
	// record (see parents.go).
	parentScopes []ChildScope

	// waitRegs watch the parents of a rule that could not start, by
	// namespace, while its parent kind waitParent is served: its deleted
	// parents are finalized meanwhile (see waiting.go).
	waitRegs   map[string]*watch.Registration
	waitParent mapper.Mapping
	// waitingSince is when the rule began to wait; once it has waited
	// waitReportAfter, waitReported is set and its parents say so on
	// their Ready condition (reportWaiting).
	waitingSince time.Time
	waitReported bool

	// stop ends the wait for the rule's informers to sync.
	stop context.CancelFunc
	// kindNotServed is set while the rule waits for a kind to be served.
	kindNotServed bool
	// ready holds, per parent UID, whether its last reconcile left it
	// Ready, for the Rule's count of ready parents.
	ready map[types.UID]bool
}

// registrations returns the informer registrations of the rule, but for
// those inherited from a removed rule (see registrationsOf); the caller
// holds Controller.mu.
func (rs *ruleState) registrations() []*watch.Registration {
	return rs.registrationsOf(false)
}

// registrationsOf returns the rule's registrations; with inherited, also
// the prune-only ones inherited from a removed rule (see inheritedLocked),
// which are not the rule's to sync or fail: its state and watch errors
// leave them out, but stopping the rule releases them too.
func (rs *ruleState) registrationsOf(inherited bool) []*watch.Registration {
	out := append(slices.Clone(rs.childRegs), rs.inputRegs...)
	for _, p := range rs.pruning {
		if inherited || !p.inherited {
			out = append(out, p.reg)
		}
	}
	return append(out, mapsValues(rs.parentRegs)...)
}

// NotStarted is RuleState.Waiting of a rule this replica has not tried to
// start yet: it says nothing of the rule, only of this replica (just
// started, or waiting for its Lease).
const NotStarted = "not started"

func newRuleState(r *rules.Rule) *ruleState {
	return &ruleState{rule: r, waiting: NotStarted, ready: map[types.UID]bool{}}
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
		cfg:         cfg,
		metrics:     cfg.Metrics,
		shards:      newSharded(cfg.Sharding),
		kick:        make(chan struct{}, 1),
		rules:       map[string]*ruleState{},
		pending:     map[string]*ruleState{},
		leaving:     map[Key]types.UID{},
		held:        map[Key][]heldEvent{},
		watchErrors: map[watch.Key]watchError{},
		readers:     map[readKey]map[Key]read{},
		readsOf:     map[Key][]read{},
		retries:     workqueue.NewTypedItemExponentialFailureRateLimiter[Key](retryBase, retryMax),
		overall:     &workqueue.TypedBucketRateLimiter[Key]{Limiter: rate.NewLimiter(rate.Limit(50), 300)},
		conflicts:   workqueue.NewTypedItemExponentialFailureRateLimiter[Key](conflictBase, conflictMax),
		again:       workqueue.NewTypedItemExponentialFailureRateLimiter[Key](againBase, againMax),
	}
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedMaxOfRateLimiter(c.retries, c.overall),
		workqueue.TypedRateLimitingQueueConfig[Key]{Name: "kgen"})
	c.blockers = newBlockers(cfg.Client, func(key Key) { c.queue.Add(key) })
	c.watches = watch.New(watch.Config{
		Client:   cfg.Client,
		REST:     cfg.REST,
		Indexers: cache.Indexers{indexParent: parentIndex, cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
		// The index and the handlers read only kgen's own labels and
		// annotations; the cached JSON keeps the rest.
		Transform:    watch.CompactKeeping(isKgenKey),
		OnWatchError: c.onWatchError,
		OnListed:     c.onListed,
	})
	c.reconciler = reconcile.New(reconcile.Config{
		Client: cfg.Client, Resources: cfg.Mapper, Schemas: cfg.Schemas, Children: c, Inputs: c, Writes: c.watches.Writes(),
		Recorder: cfg.Recorder, Events: cfg.Events, Observer: c.metrics, Impersonate: cfg.Impersonate,
		SchemaDefaults: cfg.SchemaDefaults,
	})
	for _, r := range cfg.Rules {
		c.rules[r.Name] = newRuleState(r)
		c.metrics.addRule(r.Name, cfg.Workers)
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
	if uid := label(o, reconcile.LabelParentUID); uid != "" {
		return []string{uid}, nil
	}
	return nil, nil
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
	c.blockers.stop()
	// ShutDownWithDrain leaves the delaying queue's loop running (client-go
	// stops it only in ShutDown): end it, so nothing outlives Run.
	c.queue.ShutDown()
	c.mu.Lock()
	for _, rs := range c.statesLocked() {
		if rs.stop != nil {
			rs.stop()
		}
	}
	c.mu.Unlock()
	c.watches.Shutdown()
	logger.Info("Controller stopped")
	return nil
}

// logTimes holds a time per parent: when something was last logged, or
// is next due.
type logTimes struct {
	mu   sync.Mutex
	last map[Key]time.Time
}

// due tells whether at least every has passed since the parent's last
// log, and if so notes now as its last.
func (l *logTimes) due(key Key, every time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if last, ok := l.last[key]; ok && now.Sub(last) < every {
		return false
	}
	if l.last == nil {
		l.last = map[Key]time.Time{}
	}
	l.last[key] = now
	return true
}

// until returns how long until the time noted for the parent, if that is
// after now.
func (l *logTimes) until(key Key, now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	at, ok := l.last[key]
	if !ok || !now.Before(at) {
		return 0, false
	}
	return at.Sub(now), true
}

// note notes a time for the parent.
func (l *logTimes) note(key Key, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last = map[Key]time.Time{}
	}
	l.last[key] = at
}

func (l *logTimes) forget(key Key) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.last, key)
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
	defer c.metrics.working(key.Rule)()
	logger := klog.FromContext(ctx).WithValues("key", key)
	c.hold(key)
	result, err := c.reconcileKey(ctx, key)
	c.unhold(key)
	if !result.Again || err != nil {
		c.again.Forget(key)
	}
	switch {
	case err != nil && errors.Is(err, reconcile.ErrTerminal):
		// Retrying will not help; the parent's status says why, and a
		// change to it, its children or the rule queues it again.
		c.conflictEnded(key)
		logger.Error(err, "Reconcile failed; waiting for a change to the parent, its children or the rule")
		if result.RequeueAfter > 0 {
			// Its status write must be made again (the parent changed
			// under it, or its backoff ends): without it the parent
			// would not say why. With the retry backoff too, so a
			// status write that keeps failing is not tried every
			// second.
			c.queue.AddAfter(key, max(result.RequeueAfter, c.retries.When(key)))
		} else {
			c.queue.Forget(key)
		}
	case err != nil && reconcile.LearningKind(err) && c.queue.NumRequeues(key) < learningTries:
		// The API server learns a new CRD's kind at its next reset of its
		// own RESTMapper, up to 30 s later: a backoff that grows past a
		// few seconds would leave the parent waiting long after.
		c.queue.AddAfter(key, max(c.overall.When(key), min(c.retries.When(key), learningRetry)))
		logger.Error(err, "Reconcile failed; will retry", "retries", c.queue.NumRequeues(key))
	case err != nil:
		// Transient: back off, per key and overall; logged once per step.
		c.queue.AddRateLimited(key)
		logger.Error(err, "Reconcile failed; will retry", "retries", c.queue.NumRequeues(key))
	case result.Conflict != "" && result.Again:
		// A child waits for one this reconcile wrote: that comes first,
		// soon, whatever stands in another child's way. The conflict's
		// backoff is kept; the next reconcile that only has the conflict
		// steps it. Logged at most every conflictBase meanwhile.
		c.queue.Forget(key)
		c.queue.AddAfter(key, c.again.When(key))
		c.watchBlockers(stop, key, result.Blockers, conflictBase)
		if c.conflictLogged.due(key, conflictBase) {
			logger.Error(errors.New(result.Conflict), "Reconcile failed: an object kgen may not take over is in the way; will look again")
		}
	case result.Conflict != "":
		// Failed, but an object kgen does not cache is in the way: look
		// again later, less often while it stays, and as soon as a watch
		// of that object sees it go. Logged once per step: a reconcile
		// before the next look (a busy child's status woke it) neither
		// steps the backoff nor logs; the look it came before stands.
		c.queue.Forget(key)
		now := time.Now()
		delay, early := c.conflictLook.until(key, now)
		if !early {
			delay = c.conflicts.When(key)
			c.conflictLook.note(key, now.Add(delay))
		}
		c.queue.AddAfter(key, delay)
		if result.RequeueAfter > 0 && result.RequeueAfter < delay {
			// A status write the reconcile held for a few seconds
			// (reconcile's status spacing) lands then, not at the
			// conflict's next look; the queue keeps the earlier time.
			c.queue.AddAfter(key, result.RequeueAfter)
		}
		c.watchBlockers(stop, key, result.Blockers, delay)
		if !early {
			logger.Error(errors.New(result.Conflict), "Reconcile failed: an object kgen may not take over is in the way; will look again", "after", delay)
		}
	case result.Again:
		// A child waits for children this reconcile wrote: reconcile
		// again once the cache is likely to show them; one that still
		// does not see them asks again, later each time (a child the
		// cache never shows costs a reconcile every againMax, not a
		// busy loop).
		c.queue.Forget(key)
		c.conflictEnded(key)
		c.queue.AddAfter(key, c.again.When(key))
	case result.RequeueAfter > 0:
		// Done for now: reset the backoffs, and look again later.
		c.queue.Forget(key)
		c.conflictEnded(key)
		c.queue.AddAfter(key, result.RequeueAfter)
	default:
		// Done: reset the backoffs.
		c.queue.Forget(key)
		c.conflictEnded(key)
	}
	return true
}

// watchBlockers watches the objects in a parent's way (see blockers.watch)
// while its rule runs: a reconcile that ends after its rule stopped, which
// forgot its watches (deactivate), opens none again.
func (c *Controller) watchBlockers(stop context.Context, key Key, in []reconcile.Blocker, next time.Duration) {
	c.mu.Lock()
	rs := c.rules[key.Rule]
	runs := rs != nil && rs.active
	c.mu.Unlock()
	if runs {
		c.blockers.watch(stop, key, in, next)
	}
}

// conflictEnded forgets a parent's Conflict: its backoff, when it was
// logged and looks next, and the watches of the objects in its way.
func (c *Controller) conflictEnded(key Key) {
	c.conflicts.Forget(key)
	c.conflictLogged.forget(key)
	c.conflictLook.forget(key)
	c.blockers.forget(key)
}

// reconcileKey reconciles one parent, turning a panic into an error.
func (c *Controller) reconcileKey(ctx context.Context, key Key) (result reconcile.Result, err error) {
	start := time.Now()
	// A key of a rule that cannot reconcile yet is no reconcile: counted
	// as a success, it made the reconcile metrics of a rule that could
	// not list a kind show nothing but successes (a live audit).
	counted := true
	defer func() {
		if p := recover(); p != nil {
			c.metrics.panickedIn(key.Rule)
			err = fmt.Errorf("panic reconciling %s: %v\n%s", key, p, debug.Stack())
		}
		if counted || err != nil {
			c.metrics.reconciled(key.Rule, start, result, err)
		}
	}()
	c.mu.Lock()
	rs, ok := c.rules[key.Rule]
	var reg *watch.Registration
	var mapping mapper.Mapping
	synced := false
	if ok && rs.active {
		mapping, synced = rs.parent, rs.synced
		if reg = rs.parentRegs[key.Namespace]; reg == nil {
			reg = rs.parentRegs[""]
		}
	}
	leavingUID, leaving := c.leaving[key]
	c.mu.Unlock()
	if reg == nil || !synced {
		// Not running, or its caches are not complete yet (existing
		// children would look missing): the rule's start queues every
		// parent once its caches have synced. A rule that waits still
		// finalizes its deleted parents (waiting.go).
		counted = false
		if ok {
			// Finalizing a deleted parent is a reconcile; nothing else is.
			if counted, err = c.finalizeWaiting(ctx, key, rs); counted || err != nil {
				return reconcile.Result{}, err
			}
			return c.reportWaiting(ctx, key, rs)
		}
		return reconcile.Result{}, nil
	}
	parent, err := reg.Informer().Get(key.Namespace, key.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("rule", key.Rule, "parent", klog.KRef(key.Namespace, key.Name)))
	if parent == nil {
		if leaving {
			return reconcile.Result{}, c.release(ctx, key, rs, mapping, leavingUID)
		}
		return reconcile.Result{}, nil // gone: owner references and the finalizer did the rest
	}
	if leaving {
		c.mu.Lock()
		delete(c.leaving, key)
		c.mu.Unlock()
	}
	if c.behind(key.Rule, parent) {
		// Relabelled into another rule, whose cache is ahead: this rule's
		// watch tells it soon (see move.go).
		return reconcile.Result{}, nil
	}
	done, refused, ok := c.beginShard(key, mapping.GroupVersionResource(), parent)
	if !ok {
		return refused, nil // another replica's, or on its way to one
	}
	defer done()
	if err := c.takeOver(ctx, rs, mapping, parent); err != nil {
		return reconcile.Result{}, err
	}
	result, err = c.reconciler.Reconcile(ctx, rs.rule, mapping, parent)
	c.mu.Lock()
	if rs.active {
		// Not into a version that stopped meanwhile (deactivate cleared
		// its set): it counts its parents again once it runs.
		rs.ready[parent.GetUID()] = result.Ready
	}
	c.mu.Unlock()
	return result, err
}

// release handles a parent that left the rule's informer while it carried
// kgen's finalizer, or that the sharding found had left (see
// Sharding.Assign): if it still exists and no rule selects it any more,
// kgen's finalizer is removed from it (after deleting the children only
// the finalizer guards, if it is being deleted), so it is never stuck.
// Under sharding one replica does this, whichever shard had the parent
// (see releasesHere).
func (c *Controller) release(ctx context.Context, key Key, rs *ruleState, mapping mapper.Mapping, uid types.UID) error {
	res := c.cfg.Client.Resource(mapping.GroupVersionResource())
	var ri dynamic.ResourceInterface = res
	if mapping.Namespaced {
		ri = res.Namespace(key.Namespace)
	}
	parent, err := ri.Get(ctx, key.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		c.doneLeaving(key)
		return nil
	case apierrors.IsForbidden(err) && key.Namespace != "":
		if gone, known := c.namespaceGone(key.Namespace); known && gone == "does not exist" {
			// Its namespace was deleted, and kgen's Role there with it:
			// the parent is gone too, and a retry would read nothing
			// but the same refusal, every backoff step, for good.
			c.doneLeaving(key)
			return nil
		}
		return fmt.Errorf("read %s %s, which left rule %s: %w", mapping.Resource, key.Name, key.Rule, err)
	case err != nil:
		return fmt.Errorf("read %s %s, which left rule %s: %w", mapping.Resource, key.Name, key.Rule, err)
	}
	if parent.GetUID() != uid || !slices.Contains(parent.GetFinalizers(), reconcile.Finalizer) || c.selectedByAny(parent) ||
		!c.releasesHere(mapping.GroupVersionResource(), parent) {
		c.doneLeaving(key)
		return nil
	}
	if parent.GetDeletionTimestamp() != nil {
		// The children only the finalizer guards are deleted first, as
		// this replica caches them: under sharding, they may still carry
		// the shard that had the parent, and are taken over first.
		if err := c.takeOver(ctx, rs, mapping, parent); err != nil {
			return err
		}
		defer c.unsettle(uid)
	}
	klog.FromContext(ctx).Info("Parent left every rule; releasing it", "finalizer", reconcile.Finalizer)
	if err := c.releaseParent(ctx, rs.rule, mapping, parent, c.childrenOf(rs, uid)); err != nil {
		return err
	}
	c.doneLeaving(key)
	return nil
}

// sweepLeft looks once, when a rule starts, for parents of its kind that
// carry kgen's finalizer but that no running rule selects: parents that
// left a rule while kgen was not running (relabelled, or a rule narrowed
// between two runs), which no watch event will ever tell about. Each is
// released as a parent that left live is (see release). It lists the
// rule's parent kind where the rule watches it, without the selector, a
// page at a time.
func (c *Controller) sweepLeft(ctx context.Context, rs *ruleState) {
	// Only once every rule is known (Rule objects are read after the
	// files): a parent of a rule not loaded yet has not left.
	for c.cfg.RulesLoaded != nil && !c.cfg.RulesLoaded() {
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
	c.mu.Lock()
	mapping := rs.parent
	var namespaces []string
	for ns, reg := range rs.parentRegs {
		// Not where the namespace is gone or going (awaitSync): kgen
		// may not list there any more.
		if c.watchErrLocked(reg.Informer().Key()).gone == "" {
			namespaces = append(namespaces, ns)
		}
	}
	slices.Sort(namespaces)
	c.mu.Unlock()
	res := c.cfg.Client.Resource(mapping.GroupVersionResource())
	var queue []Key
	for _, ns := range namespaces {
		var ri dynamic.ResourceInterface = res
		if mapping.Namespaced && ns != "" {
			ri = res.Namespace(ns)
		}
		opts := metav1.ListOptions{Limit: 500}
		for {
			list, err := ri.List(ctx, opts)
			if err != nil {
				klog.FromContext(ctx).Info("Cannot look for parents that left the rule while kgen was away", "rule", rs.rule.Name, "err", err.Error())
				break
			}
			for i := range list.Items {
				p := &list.Items[i]
				if !slices.Contains(p.GetFinalizers(), reconcile.Finalizer) || c.selectedByAny(p) ||
					c.anothers(ctx, p, c.childrenOf(rs, p.GetUID())) {
					continue
				}
				key := Key{Rule: rs.rule.Name, Namespace: p.GetNamespace(), Name: p.GetName()}
				c.mu.Lock()
				c.leaving[key] = p.GetUID()
				c.mu.Unlock()
				queue = append(queue, key)
			}
			if opts.Continue = list.GetContinue(); opts.Continue == "" {
				break
			}
		}
	}
	for _, key := range queue {
		c.queue.Add(key)
	}
}

func (c *Controller) doneLeaving(key Key) {
	c.mu.Lock()
	delete(c.leaving, key)
	c.mu.Unlock()
}

// selectedByAny reports whether a rule selects the object, running or
// waiting for its kinds (a waiting rule takes the parent over once it
// runs), whichever version of the kind the rule names: each version serves
// the same objects.
func (c *Controller) selectedByAny(obj *unstructured.Unstructured) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range c.rules {
		if rs.rule.SelectsInAnyVersion(obj) {
			return true
		}
	}
	return false
}

// Children returns the cached children of a parent: every object that
// carries the parent's UID in the caches of the rule's child kinds and of
// its own prune-only scopes, whichever rule made it; in a scope inherited
// from a removed rule (a rename, see inheritedLocked), those that rule or
// this one made; and, in the caches of the other running rules, those
// made by this rule or by a rule that is loaded and whose parents are of
// this rule's parent kind. A parent moved to this rule
// from another (by relabelling it) thus also sees the children the other
// rule made of kinds this rule does not have, and prunes them; while it
// was that rule's, the other rule kept watching them. The children of a
// rule that was removed, or whose parent kind changed, are not: that rule
// let its parents go, and their children stay (contract §7), also when a
// rule that watches their kind for parents of its own happens to cache
// them. It makes the Controller the reconciler's ChildLister.
func (c *Controller) Children(rule string, parent types.UID) []*unstructured.Unstructured {
	c.mu.Lock()
	rs := c.rules[rule]
	if rs == nil {
		c.mu.Unlock()
		return nil
	}
	own := slices.Clone(rs.childRegs)
	var inherited []*pruneWatch
	for _, p := range rs.pruning {
		if p.inherited {
			inherited = append(inherited, p)
		} else {
			own = append(own, p.reg)
		}
	}
	var from map[ChildScope][]string
	if len(inherited) > 0 {
		from = c.inheritedFromLocked(rs)
	}
	var others []*watch.Registration
	movedFrom := map[string]bool{}
	movedFrom[rule] = true // its own, in a cache of another rule's only
	for name, other := range c.rules {
		if other == rs {
			continue
		}
		others = append(others, other.childRegistrationsLocked()...)
		if other.rule.Parent.GroupVersionKind.GroupKind() == rs.rule.Parent.GroupVersionKind.GroupKind() {
			movedFrom[name] = true
		}
	}
	for name, p := range c.pending {
		if p.rule.Parent.GroupVersionKind.GroupKind() == rs.rule.Parent.GroupVersionKind.GroupKind() {
			movedFrom[name] = true
		}
	}
	c.mu.Unlock()
	out := childrenIn(own, parent)
	seen := map[types.UID]bool{}
	for _, o := range out {
		seen[o.GetUID()] = true
	}
	// In a scope inherited from a removed rule, only what that rule made:
	// the rule renamed into this one. Another object of the parent there
	// (left by a rule kgen let go, say) is not this rule's to prune.
	for _, p := range inherited {
		for _, o := range childrenIn([]*watch.Registration{p.reg}, parent) {
			made, ok := o.GetLabels()[reconcile.LabelRule]
			if !seen[o.GetUID()] && (!ok || made == rule || slices.Contains(from[p.scope], made)) {
				seen[o.GetUID()] = true
				out = append(out, o)
			}
		}
	}
	for _, o := range childrenIn(others, parent) {
		// Without the label (taken off by someone), it cannot be told: as
		// before the label was read.
		if made, ok := o.GetLabels()[reconcile.LabelRule]; !seen[o.GetUID()] && (!ok || movedFrom[made]) {
			out = append(out, o)
		}
	}
	return out
}

// childrenOf returns the cached children of a parent, of the kinds a rule
// state watches.
func (c *Controller) childrenOf(rs *ruleState, parent types.UID) []*unstructured.Unstructured {
	c.mu.Lock()
	regs := rs.childRegistrationsLocked()
	c.mu.Unlock()
	return childrenIn(regs, parent)
}

// childRegistrationsLocked returns the registrations of the rule's child
// informers, prune-only ones included; the caller holds Controller.mu.
func (rs *ruleState) childRegistrationsLocked() []*watch.Registration {
	regs := slices.Clone(rs.childRegs)
	for _, p := range rs.pruning {
		regs = append(regs, p.reg)
	}
	return regs
}

// childrenIn returns the objects of the informers that carry the parent's
// UID, each once (informers are shared, and may overlap).
func childrenIn(regs []*watch.Registration, parent types.UID) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	seen := map[types.UID]bool{}
	for _, reg := range regs {
		objs, err := reg.Informer().Indexer().ByIndex(indexParent, string(parent))
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

// cachedParents returns whether a parent of that UID is in the cache of a
// rule's parents.
func (c *Controller) cachedParents() func(types.UID) bool {
	live := map[types.UID]bool{}
	c.mu.Lock()
	for _, rs := range c.rules {
		for _, reg := range rs.parentRegs {
			for _, obj := range reg.Informer().Indexer().List() {
				if m, ok := obj.(metav1.Object); ok {
					live[m.GetUID()] = true
				}
			}
		}
	}
	c.mu.Unlock()
	return func(uid types.UID) bool { return live[uid] }
}

// activateLoop starts waiting rules now and whenever it is kicked or the
// retry interval passes, until ctx is done; the deleted parents of rules
// that still wait are queued to be finalized (waiting.go). After each pass
// it retires the old versions of changed rules, prunes (record.go), and
// starts a sweep of recorded parent kinds no rule covers when one is due
// (parents.go). It also has the reconciler forget, hourly, what it
// remembers of objects long unseen.
func (c *Controller) activateLoop(ctx context.Context) {
	logger := klog.FromContext(ctx)
	// Sweeps of recorded parent kinds run beside the loop, one at a
	// time, and end with it.
	var sweeps sync.WaitGroup
	defer sweeps.Wait()
	ticker := time.NewTicker(c.cfg.RetryInterval)
	defer ticker.Stop()
	sweep := time.NewTicker(time.Hour)
	defer sweep.Stop()
	waiting := map[*rules.Rule]string{} // why each waiting rule version last waited
	// A kind served later is found by activate: the mapper asks discovery
	// again on a miss, or, when a mapper.Watcher follows the cluster's CRDs
	// and APIServices, KindsChanged kicks this loop.
	for {
		c.mu.Lock()
		states := make([]*ruleState, 0, len(c.rules))
		for _, rs := range c.rules {
			states = append(states, rs)
		}
		c.mu.Unlock()
		slices.SortFunc(states, func(a, b *ruleState) int { return strings.Compare(a.rule.Name, b.rule.Name) })
		c.mu.Lock()
		maps.DeleteFunc(waiting, func(r *rules.Rule, _ string) bool {
			p := c.pending[r.Name]
			return (p == nil || p.rule != r) && !slices.ContainsFunc(states, func(rs *ruleState) bool { return rs.rule == r })
		})
		c.mu.Unlock()
		for _, rs := range states {
			err := c.activate(ctx, rs)
			switch {
			case err == nil:
				delete(waiting, rs.rule)
			case waiting[rs.rule] != err.Error():
				// Logged when it starts to wait, or for another reason;
				// the retries every RetryInterval only at verbosity 2.
				waiting[rs.rule] = err.Error()
				logger.Info("Rule is waiting", "rule", rs.rule.Name, "reason", err.Error())
			default:
				logger.V(2).Info("Rule is still waiting", "rule", rs.rule.Name, "reason", err.Error())
			}
			// A rule that waits still finalizes its deleted parents.
			c.watchWaiting(ctx, rs)
		}
		c.startPending(ctx, waiting)
		// The successors of changed rules hold their informers now, so
		// the old versions can let go of theirs: an informer both use is
		// not restarted.
		c.mu.Lock()
		retiring := c.retiring
		c.retiring = nil
		c.mu.Unlock()
		for _, rs := range retiring {
			c.retire(ctx, rs)
		}
		c.prunePass(ctx)
		c.queueWaitingDeleted()
		c.queueWaitingReports()
		if c.beginSweep() {
			sweeps.Go(func() { c.sweepParents(ctx) })
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-c.kick:
		case <-sweep.C:
			c.reconciler.Sweep(c.cachedParents())
		}
	}
}

// activate starts the informers of a rule that is not running yet, and
// waits, in the background, for them to sync before its parents are
// reconciled.
func (c *Controller) activate(ctx context.Context, rs *ruleState) error {
	c.mu.Lock()
	active := rs.active
	c.mu.Unlock()
	if active {
		return nil
	}
	rule := rs.rule
	if c.cfg.Prepare != nil {
		if err := c.cfg.Prepare(ctx, rule); err != nil {
			return c.setWaiting(rs, err)
		}
	}
	changes := c.kindsChanges.Load()
	parent, err := c.cfg.Mapper.ResourceFor(rule.Parent.GroupVersionKind)
	if err != nil {
		return c.setWaiting(rs, fmt.Errorf("parent kind %s: %w", rule.Parent.GroupVersionKind, err))
	}
	// Where the rule's objects live: the one answer pkg/rbac grants
	// access by, so kgen watches exactly where it may.
	place, err := rule.Placement(scoper{c.cfg.Mapper})
	if err != nil {
		return c.setWaiting(rs, err)
	}
	gvrs := []schema.GroupVersionResource{parent.GroupVersionResource()}
	keys := func(kinds map[schema.GroupVersionKind][]string, selector string, allLabels bool) ([]watch.Key, error) {
		var out []watch.Key
		for _, gvk := range sortedKinds(kinds) {
			m, err := c.cfg.Mapper.ResourceFor(gvk)
			if err != nil {
				return nil, fmt.Errorf("kind %s: %w", gvk, err)
			}
			if !slices.Contains(gvrs, m.GroupVersionResource()) {
				gvrs = append(gvrs, m.GroupVersionResource())
			}
			namespaces := kinds[gvk]
			if !m.Namespaced {
				namespaces = []string{metav1.NamespaceAll}
			}
			for _, ns := range namespaces {
				key := watch.Key{GVR: m.GroupVersionResource(), Namespace: ns, Selector: selector, AllLabels: allLabels}
				if !slices.Contains(out, key) {
					out = append(out, key)
				}
			}
		}
		return out, nil
	}
	childKeys, err := keys(place.ChildWatchNamespaces(), c.shardSelector(childSelector), false)
	if err != nil {
		return c.setWaiting(rs, fmt.Errorf("child %w", err))
	}
	inputKeys, err := keys(place.InputWatchNamespaces(), "", true)
	if err != nil {
		return c.setWaiting(rs, fmt.Errorf("input %w", err))
	}
	// Where the rule's children may be, for its record (record.go).
	scopes, err := childScopes(place.ChildWatchNamespaces(), c.cfg.Mapper)
	if err != nil {
		return c.setWaiting(rs, fmt.Errorf("child %w", err))
	}
	// Only once every kind is served: Admit reads the parent kind's CRD,
	// which a rule that waits for a child kind must not cost every try.
	if c.cfg.Admit != nil {
		if err := c.cfg.Admit(ctx, rule, c.ranBefore(ctx, rule)); err != nil {
			return c.setWaiting(rs, err)
		}
	}

	var regs []*watch.Registration
	release := func() {
		for _, r := range regs {
			r.Release()
		}
	}
	var childRegs, inputRegs []*watch.Registration
	for _, key := range childKeys {
		reg, err := c.watches.Acquire(key, c.ifCurrent(rs, c.childHandler(rule.Name, key)))
		if err != nil {
			release()
			return c.setWaiting(rs, err)
		}
		regs = append(regs, reg)
		childRegs = append(childRegs, reg)
	}
	for _, key := range inputKeys {
		reg, err := c.watches.Acquire(key, c.ifCurrent(rs, c.inputHandler(rule.Name)))
		if err != nil {
			release()
			return c.setWaiting(rs, err)
		}
		regs = append(regs, reg)
		inputRegs = append(inputRegs, reg)
	}
	parentRegs := map[string]*watch.Registration{}
	for _, ns := range place.ParentWatchNamespaces() {
		key := watch.Key{GVR: parent.GroupVersionResource(), Namespace: ns, Selector: c.shardSelector(rule.Parent.Selector.String())}
		reg, err := c.watches.Acquire(key, c.ifCurrent(rs, c.parentHandler(rule)))
		if err != nil {
			release()
			return c.setWaiting(rs, err)
		}
		regs = append(regs, reg)
		parentRegs[ns] = reg
	}
	syncCtx, stop := context.WithCancel(ctx)
	unassign := c.assign(rule, parentRegs)
	c.mu.Lock()
	rs.active, rs.synced, rs.waiting = true, false, ""
	rs.waitingSince, rs.waitReported = time.Time{}, false
	rs.parent, rs.parentRegs, rs.childRegs, rs.inputRegs, rs.gvrs, rs.stop = parent, parentRegs, childRegs, inputRegs, gvrs, stop
	rs.unassign = unassign
	rs.scopes = scopes
	rs.parentScopes = parentScopes(rule, parentRegs)
	c.mu.Unlock()
	// Where its record says an earlier version made children: watched to
	// prune them, without holding the rule back (record.go).
	c.watchRecorded(ctx, rs)
	c.metrics.setWaiting(rule.Name, false)
	klog.FromContext(ctx).Info("Rule started; waiting for its caches", "rule", rule.Name, "parent", parent.GroupVersionResource().String())
	if !parent.HasSubresource("status") {
		// Not an error, but the rule's status fields and Ready condition
		// then go nowhere: said at each start of the rule.
		logStatusSubresource(klog.FromContext(ctx), rule.Name, parent)
	}
	if c.kindsChanges.Load() != changes {
		// The kinds changed while the rule started: its parent mapping
		// may be older than the change, which refreshParents (run for it)
		// skipped, the rule not being active yet.
		c.refreshParents(func(r *ruleState) bool { return r == rs })
	}
	go c.awaitSync(syncCtx, rs, regs)
	return nil
}

// awaitSync waits until every informer of a started rule has synced, then
// lets its parents be reconciled and queues them all. It waits as long as
// it takes: an informer that cannot list (forbidden, or the server fails)
// retries with the reflector's backoff, and the rule's parents are not
// reconciled until it can, rather than each being retried in a loop.
func (c *Controller) awaitSync(ctx context.Context, rs *ruleState, regs []*watch.Registration) {
	// An informer that may not list in a namespace that is gone does not
	// hold the rule back: kgen's Role there went with the namespace, and
	// the rule's other namespaces would wait for good (a restart of kgen
	// after a namespace the rule names was deleted). The informer keeps
	// retrying and syncs if the namespace, and kgen's Role, come back.
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, r := range regs {
			if !r.HasSynced() && c.watchErrLocked(r.Informer().Key()).gone == "" {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return // stopped
	}
	if p, ok := c.cfg.Schemas.(prefetcher); ok {
		// Read the kinds' schemas now rather than in the first reconciles,
		// each group version's document once.
		if err := p.Prefetch(kindsOf(rs.rule)...); err != nil {
			klog.FromContext(ctx).Info("Schema unavailable; comparing objects of its kinds literally", "rule", rs.rule.Name, "err", err.Error())
		}
	}
	// The record names every kind the rule may write before it writes one,
	// unless it cannot be written (then prunePass tries again).
	c.recordStarted(ctx, rs)
	c.mu.Lock()
	if !rs.active || ctx.Err() != nil {
		c.mu.Unlock()
		return
	}
	swapped := false
	if c.pending[rs.rule.Name] == rs {
		// A new version whose previous version ran until now: it takes
		// over the rule's name and parents, and the previous version
		// retires at the next pass of activateLoop, after this one holds
		// every informer both use.
		if old := c.rules[rs.rule.Name]; old != nil {
			c.retiring = append(c.retiring, old)
		}
		c.rules[rs.rule.Name] = rs
		delete(c.pending, rs.rule.Name)
		swapped = true
	}
	if c.rules[rs.rule.Name] != rs {
		c.mu.Unlock()
		return // retired meanwhile
	}
	rs.synced = true
	parentRegs := mapsValues(rs.parentRegs)
	for _, r := range regs {
		if r.HasSynced() {
			// It listed: as onListed (which informers made without a
			// REST client, in tests, do not call).
			c.listedLocked(r.Informer().Key())
		}
	}
	c.mu.Unlock()
	n := 0
	for _, reg := range parentRegs {
		for _, key := range reg.Informer().Indexer().ListKeys() {
			ns, name, _ := cache.SplitMetaNamespaceKey(key)
			c.queue.Add(Key{Rule: rs.rule.Name, Namespace: ns, Name: name})
			n++
		}
	}
	if swapped {
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
	klog.FromContext(ctx).Info("Rule running", "rule", rs.rule.Name, "parents", n)
	c.sweepLeft(ctx, rs)
}

// prefetcher reads the schemas of several kinds at once; *schema.Source is
// one.
type prefetcher interface {
	Prefetch(gvks ...schema.GroupVersionKind) error
}

// kindsOf returns the parent's and children's kinds of a rule.
func kindsOf(rule *rules.Rule) []schema.GroupVersionKind {
	out := []schema.GroupVersionKind{rule.Parent.GroupVersionKind}
	for _, c := range rule.Children {
		if !slices.Contains(out, c.GroupVersionKind) {
			out = append(out, c.GroupVersionKind)
		}
	}
	return out
}

func (c *Controller) setWaiting(rs *ruleState, err error) error {
	c.mu.Lock()
	if rs.waitingSince.IsZero() {
		rs.waitingSince, rs.waitReported = time.Now(), false
	}
	kindNotServed := errors.Is(err, mapper.ErrNotFound)
	if rs.waitReported && (kindNotServed != rs.kindNotServed || causeOf(err) != causeOf(errors.New(rs.waiting))) {
		// Its parents say why it waited: they are told again, at the
		// next pass.
		rs.waitReported = false
	}
	rs.waiting = err.Error()
	rs.kindNotServed = kindNotServed
	// A new version that waits while its previous version runs: the rule
	// is enforced, so it is not counted as waiting.
	pending := c.pending[rs.rule.Name] == rs
	c.mu.Unlock()
	if !pending {
		c.metrics.setWaiting(rs.rule.Name, true)
	}
	return err
}

// parentHandler queues a parent of the rule. A parent that leaves the
// informer while it carries kgen's finalizer is remembered as leaving: it
// was relabelled out of the rule's selector (a deleted parent goes only
// once the finalizer is removed), so its finalizer may have to go.
func (c *Controller) parentHandler(rule *rules.Rule) watch.Handler {
	return func(obj metav1.Object, deleted bool) {
		key := Key{Rule: rule.Name, Namespace: obj.GetNamespace(), Name: obj.GetName()}
		if deleted {
			c.mu.Lock()
			if rs := c.rules[rule.Name]; rs != nil && rs.rule == rule {
				delete(rs.ready, obj.GetUID())
			}
			if slices.Contains(obj.GetFinalizers(), reconcile.Finalizer) {
				c.leaving[key] = obj.GetUID()
			}
			c.mu.Unlock()
			c.reconciler.Forget(obj.GetUID())
			c.forgetReads(key)
			c.unsettle(obj.GetUID())
			c.queue.Add(key)
			return
		}
		c.enqueue(key, obj, false)
	}
}

// ifCurrent wraps a handler of a rule version's informers so that it
// does something only while that version is the rule's current one: not
// while it is pending (it waits for its caches, its previous version still
// running), nor once it retired (replaced, its handlers not yet released).
// The other version gets the same events through its own handlers, on the
// same shared informers, and queues the same keys; a new version
// reconciles every parent when it takes over. Two handlers of one event
// would each ask Writes.Echo, which forgets an echo when first asked: the
// second would take kgen's own write for another writer's, and a status
// field that reads the status would be rewritten in a loop, to StatusLoop,
// at every change of its rule.
func (c *Controller) ifCurrent(rs *ruleState, h watch.Handler) watch.Handler {
	return func(obj metav1.Object, deleted bool) {
		c.mu.Lock()
		current := c.rules[rs.rule.Name] == rs
		c.mu.Unlock()
		if current {
			h(obj, deleted)
		}
	}
}

// heldEvent is an event held back while its parent is reconciled: the
// object's identity and version, all Echo needs.
type heldEvent struct {
	uid             types.UID
	resourceVersion string
}

// hold starts holding back the events that would queue key, while it is
// reconciled. The watch event of a write can come before the write's
// answer, so before the write is known as kgen's own (Writes.Echo): under
// load that made almost every parent of an update wave reconcile twice.
func (c *Controller) hold(key Key) {
	c.mu.Lock()
	c.held[key] = nil
	c.mu.Unlock()
}

// unhold ends hold: it queues key once more if an event held back was not
// the echo of a write the reconcile made.
func (c *Controller) unhold(key Key) {
	c.mu.Lock()
	events := c.held[key]
	delete(c.held, key)
	c.mu.Unlock()
	again := false
	for _, e := range events {
		// Each is asked, so that every echo is forgotten.
		if !c.watches.Writes().Echo(&metav1.ObjectMeta{UID: e.uid, ResourceVersion: e.resourceVersion}) {
			again = true
		}
	}
	if again {
		c.queue.Add(key)
	}
}

// enqueue queues key for an event of obj, unless the event is the echo of
// kgen's own write (Writes.Echo). While key is reconciled the event is held
// instead, and judged in the order the events came once the reconcile's
// writes are all answered (see hold). A deleted object's event always
// queues key, held or not.
func (c *Controller) enqueue(key Key, obj metav1.Object, deleted bool) {
	if !deleted {
		c.mu.Lock()
		if events, ok := c.held[key]; ok {
			c.held[key] = append(events, heldEvent{uid: obj.GetUID(), resourceVersion: obj.GetResourceVersion()})
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		if c.watches.Writes().Echo(obj) {
			return // kgen's own write, already accounted for
		}
	}
	c.queue.Add(key)
}

// childHandler queues the parent of a child, for the rule whose informer
// (of key from) saw the child: the one the child's kgen.dev/parent
// annotation names, if the rule's cache holds it with the UID the child
// carries. A child whose rule label names another rule (the rule was
// renamed, or the parent moved to this rule) still reaches its parent. A
// child whose parent is not this rule's any more (it moved to another rule
// by a relabelling) reaches the rule that holds the parent now, unless that
// rule sees the child through an informer of its own too (this one, or
// one of the same resource where the child is: its own handler tells it):
// so the children of a kind that only the former rule watches are pruned
// by the new one (see Children).
func (c *Controller) childHandler(rule string, from watch.Key) watch.Handler {
	return func(obj metav1.Object, deleted bool) {
		ref, uid := annotation(obj, reconcile.AnnotationParent), label(obj, reconcile.LabelParentUID)
		if ref == "" || uid == "" {
			return
		}
		ns, name, found := strings.Cut(ref, "/")
		if !found {
			ns, name = "", ref
		}
		key := name
		if ns != "" {
			key = ns + "/" + name
		}
		holds := func(rs *ruleState) bool {
			reg := rs.parentRegs[ns]
			if reg == nil {
				reg = rs.parentRegs[""]
			}
			if reg == nil {
				return false
			}
			cached, ok, err := reg.Informer().Indexer().GetByKey(key)
			if err != nil || !ok {
				return false
			}
			p, ok := cached.(metav1.Object)
			return ok && string(p.GetUID()) == uid
		}
		// Whether an informer of the other rule sees the child too: the
		// same resource and selector, in its namespace or in every one.
		// Then its own handler tells it, and this one must not: a new
		// version of a rule registering on a shared informer is told of
		// every cached child again, and would reconcile another rule's
		// parents.
		sees := func(r *watch.Registration) bool {
			k := r.Informer().Key()
			return k == from || k.GVR == from.GVR && k.Selector == from.Selector && k.AllLabels == from.AllLabels &&
				(k.Namespace == metav1.NamespaceAll || k.Namespace == obj.GetNamespace())
		}
		c.mu.Lock()
		to := ""
		if rs := c.rules[rule]; rs != nil && holds(rs) {
			to = rule
		} else {
			for _, other := range c.rules {
				watched := slices.ContainsFunc(other.childRegistrationsLocked(), sees)
				if other != rs && !watched && holds(other) {
					to = other.rule.Name
					break
				}
			}
		}
		c.mu.Unlock()
		if to == "" {
			return
		}
		c.enqueue(Key{Rule: to, Namespace: ns, Name: name}, obj, deleted)
	}
}

var namespacesGVR = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// namespaceGone says whether a namespace does not exist ("does not
// exist") or is being deleted ("is being deleted"); "" if it exists, or
// kgen may not read it; known false when the answer tells nothing (a
// timeout, a 5xx). kgenctl rbac grants get on each namespace a rule
// names.
func (c *Controller) namespaceGone(ns string) (gone string, known bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o, err := c.cfg.Client.Resource(namespacesGVR).Get(ctx, ns, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "does not exist", true
	case err == nil && o.GetDeletionTimestamp() != nil:
		return "is being deleted", true
	case err == nil, apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return "", true
	}
	return "", false
}

// onWatchError stops the rules that use a resource that is no longer
// served, so they wait for it instead of failing forever, and reports (at
// most once a minute per informer and cause, so at most once per backoff
// step) lists and watches that fail otherwise: the reflector retries them
// with its backoff.
func (c *Controller) onWatchError(key watch.Key, err error) {
	if errors.Is(err, context.Canceled) {
		return // the informer was stopped (its rule stopped, or kgen): no failure
	}
	if apierrors.IsNotFound(err) {
		c.mu.Lock()
		var stopped []*ruleState
		for _, rs := range c.statesLocked() {
			if rs.active && slices.Contains(rs.gvrs, key.GVR) {
				stopped = append(stopped, rs)
			}
		}
		delete(c.watchErrors, key)
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
		return
	}
	var gone string
	known := true
	if key.Namespace != "" && apierrors.IsForbidden(err) {
		gone, known = c.namespaceGone(key.Namespace)
	}
	c.mu.Lock()
	prev := c.watchErrors[key]
	if !known {
		gone = prev.gone // the answer told nothing: as last known
	}
	// A new cause is logged at once: the first answer of a failing server
	// may not say why ("storage is (re)initializing"), a later one does.
	log := time.Since(prev.logged) >= watchErrorLogEvery || prev.err == nil || causeOf(prev.err) != causeOf(err) || prev.gone != gone
	e := watchError{err: err, at: time.Now(), logged: prev.logged, gone: gone}
	if log {
		e.logged = time.Now()
	}
	c.pruneWatchErrorsLocked()
	c.watchErrors[key] = e
	var names []string
	for _, rs := range c.statesLocked() {
		// Only the rules that use this informer (its resource in its
		// namespace), not every rule of the resource: a rule that
		// watches another namespace is not failing.
		uses := slices.ContainsFunc(rs.registrations(), func(r *watch.Registration) bool { return r.Informer().Key() == key })
		if rs.active && uses && !slices.Contains(names, rs.rule.Name) {
			names = append(names, rs.rule.Name)
		}
	}
	c.mu.Unlock()
	slices.Sort(names)
	for _, name := range names {
		c.metrics.watchFailed(name, reasonOf(err))
	}
	switch {
	case log && gone != "":
		klog.Background().Info("Cannot list in a namespace that "+gone+"; the rules run in their other namespaces, and this list retries with backoff until the namespace and kgen's grants there are back",
			"resource", key.String(), "rules", names, "err", err.Error())
	case log:
		klog.Background().Error(err, "Cannot list or watch; retrying with backoff", "resource", key.String(), "rules", names)
	}
}

// onListed notes that an informer read a whole list again: its cache is
// current, and its failure is forgotten once it does not fail again for
// watchSettle (see watchError.current).
func (c *Controller) onListed(key watch.Key) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.listedLocked(key)
}

// listedLocked is onListed; the caller holds c.mu.
func (c *Controller) listedLocked(key watch.Key) {
	if e, ok := c.watchErrors[key]; ok && e.listed.IsZero() {
		e.listed = time.Now()
		c.watchErrors[key] = e
	}
	c.pruneWatchErrorsLocked()
}

// pruneWatchErrorsLocked forgets the failures that no longer count: healed
// ones logged longer than watchErrorLogEvery ago (none left to throttle),
// and those of informers no rule uses any more (a namespace that is gone)
// that have not failed for as long (a rule that is starting may not hold
// the registration of its failing informer yet), so the entries do not
// pile up over a long run. The caller holds c.mu.
func (c *Controller) pruneWatchErrorsLocked() {
	now := time.Now()
	used := map[watch.Key]bool{}
	for _, rs := range c.statesLocked() {
		for _, r := range rs.registrations() {
			used[r.Informer().Key()] = true
		}
	}
	for key, e := range c.watchErrors {
		healed := e.current(now).err == nil && now.Sub(e.logged) >= watchErrorLogEvery
		if healed || !used[key] && now.Sub(e.at) >= watchErrorLogEvery {
			delete(c.watchErrors, key)
		}
	}
}

// statesLocked returns the states of the rules and of their pending new
// versions; the caller holds c.mu.
func (c *Controller) statesLocked() []*ruleState {
	out := make([]*ruleState, 0, len(c.rules)+len(c.pending))
	for _, rs := range c.rules {
		out = append(out, rs)
	}
	for _, p := range c.pending {
		out = append(out, p)
	}
	return out
}

// reasonOf names the cause of a failed list or watch, as the Ready
// condition of a Rule does.
// causeOf is what tells two failures of a list or watch apart for logging:
// their text without its numbers, which carry resource versions and
// timings that change at every retry. The first answer of a failing server
// may not say why ("storage is (re)initializing") where a later one, with
// the same status, does ("...: conversion webhook ... failed").
func causeOf(err error) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsDigit(r) {
			return -1
		}
		return r
	}, err.Error())
}

func reasonOf(err error) string {
	switch {
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return "Forbidden"
	default:
		return "ListFailed"
	}
}

func (c *Controller) deactivate(rs *ruleState, why error) {
	c.mu.Lock()
	if !rs.active {
		c.mu.Unlock()
		return
	}
	regs := rs.registrationsOf(true)
	if rs.stop != nil {
		rs.stop()
	}
	rs.active, rs.synced, rs.waiting = false, false, why.Error()
	rs.waitingSince, rs.waitReported = time.Now(), false
	rs.parentRegs, rs.childRegs, rs.inputRegs, rs.gvrs, rs.stop = nil, nil, nil, nil, nil
	unassign := rs.unassign
	rs.unassign = nil
	rs.pruning, rs.unwatched, rs.recordErr, rs.parentScopes, rs.settled = nil, nil, "", nil, nil
	// Its parents are counted again as they are reconciled once it runs
	// again: one deleted meanwhile, which no informer tells it of, must
	// not stay counted as ready.
	rs.ready = map[types.UID]bool{}
	// Only the version that holds the rule's name says whether the rule
	// waits: not an old one that retires, nor a new one whose previous
	// version runs.
	current := c.rules[rs.rule.Name] == rs
	_, named := c.rules[rs.rule.Name]
	c.mu.Unlock()
	if current || !named {
		// No version of the rule runs: its parents wait, so the objects
		// in their children's way need no watch (a version that takes
		// over reconciles every parent again).
		c.blockers.forgetRule(rs.rule.Name)
	}
	for _, stop := range unassign {
		stop()
	}
	for _, r := range regs {
		r.Release()
	}
	if current {
		c.metrics.setWaiting(rs.rule.Name, true)
	}
	klog.Background().Info("Rule stopped", "rule", rs.rule.Name, "reason", why.Error())
}

func mapsValues(m map[string]*watch.Registration) []*watch.Registration {
	out := make([]*watch.Registration, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// Ready returns nil once the caches of every rule that can run have
// synced: readiness means able to work. A rule waiting for its kinds to be
// served, or whose informers cannot list or watch (forbidden, or the
// server fails), does not make the controller unready: one such rule must
// not take every replica out of service. Logs and metrics report it. The
// error says which caches are still syncing.
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
		if !rs.active || rs.synced {
			continue
		}
		failing := false
		var syncing []string
		for _, reg := range rs.registrations() {
			if reg.HasSynced() {
				continue
			}
			if c.watchErrLocked(reg.Informer().Key()).err != nil {
				failing = true
			}
			syncing = append(syncing, reg.Informer().Key().String())
		}
		if !failing && len(syncing) > 0 {
			slices.Sort(syncing)
			problems = append(problems, fmt.Sprintf("rule %s: caches of %s have not synced", name, strings.Join(syncing, ", ")))
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// RuleState is what the controller knows of one rule's progress.
type RuleState struct {
	// Running is true once the rule's kinds are served and its informers
	// started.
	Running bool
	// Synced is true once its informers have listed everything.
	Synced bool
	// Waiting says why a rule does not run yet.
	Waiting string
	// Unsynced are the rule's running informers whose caches have not
	// synced yet, each with the last error of its list or watch: what a
	// rule that is not Synced waits for, and prune-only informers (which
	// do not hold the rule back) that cannot list.
	Unsynced []UnsyncedCache
	// Stale are the rule's informers whose caches synced but whose list
	// or watch fails since (a 403 once kgen's grants shrank, a 5xx), each
	// with its error: the rule runs, but does not see changes there until
	// the informer lists again.
	Stale []UnsyncedCache
	// Forbidden is set when the list or watch of an unsynced or stale
	// informer was refused (403, or 401): kgen's RBAC lacks a kind of the
	// rule.
	Forbidden bool
	// KindNotServed is set when the rule waits for a kind the API server
	// does not serve (yet).
	KindNotServed bool
	// Parents counts the rule's parents in its caches, and ReadyParents
	// those whose last reconcile left them Ready.
	Parents, ReadyParents int
	// Pruning are the scopes ("APIVERSION KIND [NAMESPACE]") where the
	// rule made children of a kind it no longer has, watched until those
	// children are pruned.
	Pruning []string
	// RecordError says why kgen cannot read or write its record of the
	// rule's child kinds (see Config.Record): the rule runs, but children
	// of a kind that leaves it while kgen is stopped may not be pruned.
	RecordError string
	// Next is the state of the rule's new version while it cannot start,
	// or its caches have not synced, and this one, the previous version,
	// keeps running; nil when there is none.
	Next *RuleState
	// Shards, with sharding, are the other live replicas where the rule
	// does not run or its caches have not synced, as each published it
	// (the controller never sets it; pkg/manager does): their parents
	// wait meanwhile.
	Shards []ShardState
}

// ShardState is why a rule does not run on another replica: the reason
// and message of the Ready condition that replica's state gives.
type ShardState struct {
	Shard, Reason, Message string
}

// UnsyncedCache is an informer of a rule whose cache has not synced yet.
type UnsyncedCache struct {
	// Resource is what the informer lists and watches.
	Resource watch.Key
	// Err is the last error of its list or watch; nil if none failed (yet).
	Err error
	// NamespaceGone says, when kgen may not list in the informer's
	// namespace, that the namespace "does not exist" or "is being
	// deleted": the informer does not hold its rule back.
	NamespaceGone string
}

// Failing reports whether the informer's list or watch failed, in a
// namespace that is there.
func (u UnsyncedCache) Failing() bool { return u.Err != nil && u.NamespaceGone == "" }

func (u UnsyncedCache) String() string {
	switch {
	case u.Err == nil:
		return u.Resource.String() + ": not listed yet"
	case u.NamespaceGone != "":
		return u.Resource.String() + ": namespace " + u.Resource.Namespace + " " + u.NamespaceGone + " (" + u.Err.Error() + ")"
	}
	return u.Resource.String() + ": " + u.Err.Error()
}

// State returns the state of a rule; false if the controller has no such
// rule.
func (c *Controller) State(rule string) (RuleState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rs, ok := c.rules[rule]
	if !ok {
		return RuleState{}, false
	}
	s := c.stateLocked(rs)
	if p := c.pending[rule]; p != nil {
		next := c.stateLocked(p)
		s.Next = &next
	}
	return s, true
}

// stateLocked returns the state of one version of a rule; the caller holds
// c.mu.
func (c *Controller) stateLocked(rs *ruleState) RuleState {
	s := RuleState{Running: rs.active, Synced: rs.synced, Waiting: rs.waiting, KindNotServed: rs.kindNotServed}
	for _, reg := range rs.parentRegs {
		s.Parents += len(reg.Informer().Indexer().ListKeys())
	}
	for _, ok := range rs.ready {
		if ok {
			s.ReadyParents++
		}
	}
	seen := map[watch.Key]bool{}
	for _, reg := range rs.registrations() {
		key := reg.Informer().Key()
		if seen[key] {
			continue
		}
		seen[key] = true
		e := c.watchErrLocked(key)
		u := UnsyncedCache{Resource: key, Err: e.err, NamespaceGone: e.gone}
		switch {
		case !reg.HasSynced():
			s.Unsynced = append(s.Unsynced, u)
		case u.Err != nil:
			// Synced, but its list or watch fails since (forgotten
			// once it lists again and does not fail for watchSettle).
			s.Stale = append(s.Stale, u)
		default:
			continue
		}
		s.Forbidden = s.Forbidden || u.Failing() && reasonOf(u.Err) == "Forbidden"
	}
	slices.SortFunc(s.Stale, func(a, b UnsyncedCache) int { return strings.Compare(a.Resource.String(), b.Resource.String()) })
	// Failing informers first, then by what they watch.
	slices.SortFunc(s.Unsynced, func(a, b UnsyncedCache) int {
		if (a.Err == nil) != (b.Err == nil) {
			if a.Err != nil {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Resource.String(), b.Resource.String())
	})
	s.RecordError = rs.recordErr
	s.Pruning = pruneScopesOf(rs)
	return s
}

// retireLocked queues a rule state for retire. Of the states of one rule
// that never started and watch nothing, it keeps the last: retire has
// nothing of theirs to release, and a standby that follows its rules files
// for days (its controller not running) would otherwise keep every
// version it was handed, and log each at takeover. The caller holds c.mu.
func (c *Controller) retireLocked(rs *ruleState) {
	if !rs.active && rs.waitRegs == nil {
		for i, o := range c.retiring {
			if o.rule.Name == rs.rule.Name && !o.active && o.waitRegs == nil {
				c.retiring[i] = rs
				return
			}
		}
	}
	c.retiring = append(c.retiring, rs)
}

// SetRules replaces the rules the controller runs, live. A rule whose name
// is new starts; a rule that is gone stops; a rule whose version changed
// (another *rules.Rule) restarts with the new version, and its parents are
// all reconciled again once its caches have synced. While the new version
// cannot start, or its caches have not synced (a child kind not served
// yet, or that kgen may not list), the previous version keeps running, as
// contract section 7 wants of a new version that cannot be applied. Rules
// that did not change are left alone, and informers that another rule, or
// the new version, still uses are not restarted.
//
// A parent that carries kgen's finalizer and that no rule of the new set
// selects any more (its rule was removed, or its scope narrowed) is
// released: kgen's finalizer goes (after the children only it guards, if
// the parent is being deleted); its children stay.
func (c *Controller) SetRules(set []*rules.Rule) {
	// Asked before c.mu: the rule set's answer takes its own lock.
	loaded := c.cfg.RulesLoaded == nil || c.cfg.RulesLoaded()
	c.mu.Lock()
	next := map[string]*rules.Rule{}
	for _, r := range set {
		next[r.Name] = r
	}
	// The versions loaded before this change: a rule new or changed in it
	// may take over a removed rule's parents (a rename); one that was there
	// already selected other parents (rules that may select one parent do
	// not load together).
	before := map[*rules.Rule]bool{}
	var removed []*rules.Rule
	for name, rs := range c.rules {
		before[rs.rule] = true
		if p := c.pending[name]; p != nil {
			before[p.rule] = true
		}
		if _, ok := next[name]; !ok {
			removed = append(removed, rs.rule)
		}
	}
	for name, rs := range c.rules {
		r, ok := next[name]
		p := c.pending[name]
		if p != nil && (!ok || r != p.rule) {
			// Removed, changed again, or changed back while its new
			// version waited: that version goes.
			c.retireLocked(p)
			delete(c.pending, name)
			p = nil
		}
		switch {
		case !ok:
			c.retireLocked(rs)
			delete(c.rules, name)
		case r == rs.rule || p != nil:
		case rs.active:
			// The previous version keeps running until the new one can
			// (startPending).
			c.pending[name] = newRuleState(r)
		default:
			c.retireLocked(rs)
			c.rules[name] = newRuleState(r)
		}
	}
	for name, r := range next {
		if _, ok := c.rules[name]; !ok {
			c.rules[name] = newRuleState(r)
			c.metrics.addRule(name, c.cfg.Workers)
		}
		delete(c.record.letGo, name) // loaded again: its own, not inherited
		c.record.removals = slices.DeleteFunc(c.record.removals, func(rm removal) bool { return rm.rule.Name == name })
	}
	// A removed rule's parents are let go (recordState.letGo) unless a
	// rule new or changed in this change may select them (a rename),
	// whatever other rules of their kind select in their namespace. Judged
	// once every rule is loaded and the record read.
	var takers []*rules.Rule
	for _, r := range set {
		if !before[r] {
			takers = append(takers, r)
		}
	}
	for _, r := range removed {
		c.record.removals = append(c.record.removals, removal{rule: r, takers: takers})
	}
	if loaded {
		c.markLetGoLocked()
	}
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// startPending tries to start the new versions of changed rules whose
// previous version runs; the previous version keeps the rule's parents
// until its successor's caches have synced (awaitSync swaps them). One
// whose previous version stopped meanwhile takes its place at once, and
// waits there as any rule does. waiting is what activateLoop last logged
// of each rule version.
func (c *Controller) startPending(ctx context.Context, waiting map[*rules.Rule]string) {
	logger := klog.FromContext(ctx)
	c.mu.Lock()
	var pending []*ruleState
	swapped := false
	for name, p := range c.pending {
		if rs := c.rules[name]; rs == nil || !rs.active {
			// The rule waits since the running version stopped, not
			// since this version first tried to start (its parents'
			// report keeps its grace: see queueWaitingReports).
			p.waitingSince, p.waitReported = time.Now(), false
			if rs != nil {
				c.retiring = append(c.retiring, rs)
				if !rs.waitingSince.IsZero() {
					p.waitingSince = rs.waitingSince
				}
			}
			c.rules[name] = p
			delete(c.pending, name)
			swapped = true
			continue
		}
		pending = append(pending, p)
	}
	c.mu.Unlock()
	if swapped {
		// Start it at the next pass rather than at the next tick.
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
	slices.SortFunc(pending, func(a, b *ruleState) int { return strings.Compare(a.rule.Name, b.rule.Name) })
	for _, p := range pending {
		err := c.activate(ctx, p)
		switch {
		case err == nil:
			delete(waiting, p.rule)
		case waiting[p.rule] != err.Error():
			waiting[p.rule] = err.Error()
			logger.Info("Rule's new version is waiting; its previous version keeps running", "rule", p.rule.Name, "reason", err.Error())
		default:
			logger.V(2).Info("Rule's new version is still waiting; its previous version keeps running", "rule", p.rule.Name, "reason", err.Error())
		}
	}
}

// KindsChanged is told that the kinds of an API group may have changed: a
// CustomResourceDefinition or APIService was added, changed or removed (see
// mapper.Watcher). Waiting rules are tried again at once. When a definition
// changed, what is known of the group's schemas is dropped, and for the
// CRD's kind (every kind of the group, for an APIService): the running
// rules whose parent kind it is read its mapping again (see
// refreshParents), its informers list again (the server decodes objects
// under the new schema, and a resumed watch would not send the unchanged
// ones again), the parents of the running rules that use it are
// reconciled again under the new schemas, and those rules are checked
// against them again (Config.Recheck); rules that use only other kinds of
// the group are left alone. A change of unknown groups (the first list of
// a watch that could not list at first) drops every schema, reads every
// parent mapping again and checks every running rule, but reconciles
// nothing. It does not block: what reads discovery
// runs on its own goroutine.
func (c *Controller) KindsChanged(ch mapper.Change) {
	c.kindsChanges.Add(1)
	if ch.Spec {
		if f, ok := c.cfg.Schemas.(interface{ ForgetGroup(string) }); ok {
			group := ch.Group
			if ch.All {
				group = "*"
			}
			f.ForgetGroup(group)
		}
		if !ch.All && ch.Group != "" {
			// The caches of the group's kinds hold objects as the old
			// schema made them (defaults, pruning), and a watch that
			// resumes does not send them again. A change of every
			// group (kgen cannot watch CRDs, or could not list them
			// at first) relists nothing: every informer each minute
			// would cost more than it mends. The core group has no
			// CRD (an APIService named v1. changed).
			c.watches.RelistResource(ch.Group, ch.Resource)
		}
		go func() {
			c.refreshParents(func(rs *ruleState) bool { return ch.Covers(rs.parent.GroupVersionResource().GroupResource()) })
			if !ch.All {
				c.requeueUsers(ch)
			}
			c.recheck(ch)
		}()
	}
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// recheck asks Config.Recheck about the running rules that use the
// changed kind (every running rule, for a change of unknown groups).
func (c *Controller) recheck(ch mapper.Change) {
	if c.cfg.Recheck == nil {
		return
	}
	var running []*rules.Rule
	c.mu.Lock()
	for _, rs := range c.rules {
		if rs.active && rs.usesLocked(ch) {
			running = append(running, rs.rule)
		}
	}
	c.mu.Unlock()
	for _, r := range running {
		c.cfg.Recheck(context.Background(), r)
	}
}

// usesLocked reports whether a running rule watches a kind the change may
// be of: its parent kind, a child kind (prune-only ones included) or an
// input kind. Only the rules that use a changed CRD are reconciled again
// (contract §7: parents of other rules are not), also when other kinds of
// its group are theirs. The caller holds Controller.mu.
func (rs *ruleState) usesLocked(ch mapper.Change) bool {
	return slices.ContainsFunc(rs.gvrs, func(gvr schema.GroupVersionResource) bool { return ch.Covers(gvr.GroupResource()) })
}

// requeueUsers queues every parent of the synced rules that use the
// changed kind.
func (c *Controller) requeueUsers(ch mapper.Change) {
	var keys []Key
	c.mu.Lock()
	for _, rs := range c.rules {
		if !rs.synced || !rs.usesLocked(ch) {
			continue
		}
		for _, reg := range rs.parentRegs {
			for _, key := range reg.Informer().Indexer().ListKeys() {
				ns, name, _ := cache.SplitMetaNamespaceKey(key)
				keys = append(keys, Key{Rule: rs.rule.Name, Namespace: ns, Name: name})
			}
		}
	}
	c.mu.Unlock()
	for _, k := range keys {
		c.queue.Add(k)
	}
}

// refreshParents reads again the parent mapping of the running rules that
// match: a CRD changed in place may have gained or lost its status
// subresource, which decides whether the parents get a status. A changed
// resource name or scope is left to the rule's watches, which fail and
// restart the rule.
func (c *Controller) refreshParents(match func(*ruleState) bool) {
	c.mu.Lock()
	var running []*ruleState
	for _, rs := range c.rules {
		if rs.active && match(rs) {
			running = append(running, rs)
		}
	}
	c.mu.Unlock()
	for _, rs := range running {
		m, err := c.cfg.Mapper.ResourceFor(rs.rule.Parent.GroupVersionKind)
		if err != nil {
			continue
		}
		c.mu.Lock()
		same := rs.active && m.Resource == rs.parent.Resource && m.Namespaced == rs.parent.Namespaced
		had := rs.parent.HasSubresource("status")
		if same {
			rs.parent = m
		}
		c.mu.Unlock()
		if same && had != m.HasSubresource("status") {
			logStatusSubresource(klog.Background(), rs.rule.Name, m)
		}
	}
}

// logStatusSubresource says whether the parents of a rule get a status,
// when the parent kind is a custom resource: a status subresource decides
// it. Said when a rule starts without one, and when a CRD gains or loses it.
func logStatusSubresource(logger klog.Logger, rule string, parent mapper.Mapping) {
	if _, builtin := kinds.Builtin(parent.GroupVersionKind().GroupKind()); builtin {
		return
	}
	if parent.HasSubresource("status") {
		logger.Info("The parent kind has a status subresource; its parents get a status", "rule", rule, "parent", parent.GroupVersionResource().String())
	} else {
		logger.Info("The parent kind has no status subresource; its parents get no status", "rule", rule, "parent", parent.GroupVersionResource().String())
	}
}

// retire stops an old version of a rule: it releases the parents no
// current rule selects, then its informers.
func (c *Controller) retire(ctx context.Context, rs *ruleState) {
	logger := klog.FromContext(ctx).WithValues("rule", rs.rule.Name)
	c.mu.Lock()
	active, mapping := rs.active, rs.parent
	parentRegs := mapsValues(rs.parentRegs)
	_, replaced := c.rules[rs.rule.Name]
	c.mu.Unlock()
	if active {
		for _, reg := range parentRegs {
			for _, obj := range reg.Informer().Indexer().List() {
				m, ok := obj.(metav1.Object)
				if !ok || !slices.Contains(m.GetFinalizers(), reconcile.Finalizer) {
					continue
				}
				parent, err := watch.Decode(obj)
				if err != nil || c.selectedByAny(parent) {
					continue
				}
				pctx := klog.NewContext(ctx, logger.WithValues("parent", klog.KObj(parent)))
				children := c.childrenOf(rs, parent.GetUID())
				err = retry(ctx, func() error { return c.releaseParent(pctx, rs.rule, mapping, parent, children) })
				if err != nil {
					logger.Error(err, "Cannot release a parent the rule no longer selects; kgenctl cleanup releases it", "parent", klog.KObj(parent))
					continue
				}
				klog.FromContext(pctx).Info("Released a parent no rule selects any more", "finalizer", reconcile.Finalizer)
			}
		}
	}
	c.deactivate(rs, errors.New("the rule changed"))
	c.unwatchWaiting(rs)
	if !replaced {
		c.metrics.forgetRule(rs.rule.Name)
		c.metrics.removeRule(rs.rule.Name)
		logger.Info("Rule removed")
	} else {
		logger.Info("Rule changed; its new version starts")
	}
}

// retry runs f up to five times, backing off, while it fails.
func retry(ctx context.Context, f func() error) error {
	var err error
	for i := range 5 {
		if err = f(); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(1<<i) * 200 * time.Millisecond):
		}
	}
	return err
}
