package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"kgen.dev/kgen/pkg/mapper"
	"kgen.dev/kgen/rules"
)

// readerChild is a Deployment that reads the config child: it can be
// rendered only once the ConfigMap is observed.
const readerChild = `  - id: app
    template: {apiVersion: apps/v1, kind: Deployment, metadata: {name: "${parent.metadata.name}", annotations: {config: "${children.config.metadata.name}"}}}
`

// againStep is how far the tests move the fake clock at a time: every
// delay of the Again backoff (50 ms doubling, 10 s) is a multiple of it, so
// the delays the tests measure are exact.
const againStep = 10 * time.Millisecond

// againCluster is a fake cluster with one Gadget, whose server-side
// applies of children are stored as the API server would store them
// (uid, resource version), except that while hide is set the ConfigMap
// applies are answered but not stored: the informers never see them.
type againCluster struct {
	client *dynamicfake.FakeDynamicClient
	mapper *mapper.Mapper

	mu     sync.Mutex
	hide   bool
	rv     int
	hidden *unstructured.Unstructured // the last ConfigMap answered and not stored
}

func newAgainCluster(hide bool) *againCluster {
	client, m := fakeCluster(object("example.com/v1", "Gadget", "g", "p1", ""))
	a := &againCluster{client: client, mapper: m, hide: hide, rv: 100}
	client.PrependReactor("patch", "*", a.apply)
	return a
}

// apply answers a server-side apply of a child: it creates the object or
// replaces the live one (kgen is the only writer here).
func (a *againCluster) apply(action clienttesting.Action) (bool, runtime.Object, error) {
	p := action.(clienttesting.PatchAction)
	gvr := p.GetResource()
	if gvr == gadgets {
		return false, nil, nil
	}
	out := &unstructured.Unstructured{}
	if err := out.UnmarshalJSON(p.GetPatch()); err != nil {
		return true, nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.rv++
	out.SetResourceVersion(fmt.Sprint(a.rv))
	tracker := a.client.Tracker()
	live, err := tracker.Get(gvr, p.GetNamespace(), p.GetName())
	if err == nil {
		out.SetUID(live.(metav1.Object).GetUID())
		return true, out, tracker.Update(gvr, out, p.GetNamespace())
	}
	out.SetUID(types.UID(fmt.Sprintf("uid-%s-%d", gvr.Resource, a.rv)))
	if a.hide && gvr == cmResource {
		a.hidden = out.DeepCopy()
		return true, out, nil
	}
	return true, out, tracker.Create(gvr, out, p.GetNamespace())
}

// show stops hiding ConfigMaps and stores the one last answered, as the
// watch would have shown it.
func (a *againCluster) show(t *testing.T) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.hide = false
	if a.hidden == nil {
		t.Fatal("no ConfigMap was hidden")
	}
	if err := a.client.Tracker().Create(cmResource, a.hidden, "ns"); err != nil {
		t.Fatal(err)
	}
	a.hidden = nil
}

// hideAgain hides the ConfigMaps applied from now on.
func (a *againCluster) hideAgain() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.hide = true
}

// runController runs c until the test ends.
func runController(t *testing.T, c *Controller) { runControllerCtx(t, context.Background(), c) }

// runControllerCtx is runController with a context (a logger in it, say).
func runControllerCtx(t *testing.T, parent context.Context, c *Controller) {
	ctx, cancel := context.WithCancel(parent)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// runAgain runs a controller with the rule of config and readerChild over
// the cluster, with one worker, until the test ends. The bubble fails the
// test if anything Run started outlives it.
func runAgain(t *testing.T, a *againCluster) *Metrics {
	t.Helper()
	metrics := NewMetrics(prometheus.NewRegistry())
	c := New(Config{
		Rules: []*rules.Rule{gadgetRule(t, configChild+readerChild)}, Client: a.client, Mapper: a.mapper,
		Recorder: record.NewFakeRecorder(1000), Workers: 1, Metrics: metrics,
	})
	runController(t, c)
	return metrics
}

// reconcilesOf returns how many reconciles of rule r ended, whatever their
// result, as controller_runtime_reconcile_total counts them.
func reconcilesOf(m *Metrics) int {
	n := 0.0
	for _, result := range []string{resultSuccess, resultError, resultRequeue, resultRequeueAfter} {
		n += testutil.ToFloat64(m.reconciles.WithLabelValues("r", result))
	}
	return int(n)
}

// againClock moves a synctest bubble's fake clock in steps of againStep and
// notes when reconciles ran.
type againClock struct {
	m     *Metrics
	seen  int
	start time.Time
}

// firstWrite steps the clock until a reconcile has written a child, and
// measures time from then on. (Reconciles before the rule's caches synced
// count in the metrics too, but do nothing.)
func firstWrite(t *testing.T, a *againCluster, m *Metrics) *againClock {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for len(writes(a.client)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("waited a minute (fake time) for the parent's first write")
		}
		time.Sleep(againStep)
		synctest.Wait()
	}
	return &againClock{m: m, seen: reconcilesOf(m), start: time.Now()}
}

// advance lets what is due now run, then steps the clock by d, and returns
// when, since the first write, the reconciles that ran meanwhile did.
func (c *againClock) advance(d time.Duration) []time.Duration {
	var at []time.Duration
	note := func() {
		synctest.Wait()
		for n := reconcilesOf(c.m); c.seen < n; c.seen++ {
			at = append(at, time.Since(c.start))
		}
	}
	note()
	for end := time.Now().Add(d); time.Now().Before(end); {
		time.Sleep(againStep)
		note()
	}
	return at
}

// gapsBetween returns the time between each reconcile and the one before it;
// the first is measured from prev.
func gapsBetween(prev time.Duration, at []time.Duration) []time.Duration {
	out := make([]time.Duration, 0, len(at))
	for _, t := range at {
		out = append(out, t-prev)
		prev = t
	}
	return out
}

// againDelays returns the first n delays of the Again backoff: 50 ms,
// doubling, at most 10 s.
func againDelays(n int) []time.Duration {
	out := make([]time.Duration, n)
	d := againBase
	for i := range out {
		out[i] = min(d, againMax)
		d *= 2
	}
	return out
}

// A parent whose second child reads its first is reconciled again after a
// reconcile that wrote the first (Result.Again), with no event from
// outside: the echo of kgen's own write queues nothing. While the cache
// never shows the first child, the parent is retried later each time, up
// to every 10 s: no busy loop, and no giving up.
func TestAgain(t *testing.T) {
	for _, tc := range []struct {
		name string
		// hide keeps the ConfigMap out of the informers' sight.
		hide bool
		// delays are those between the reconciles that follow the first,
		// over a minute.
		delays []time.Duration
		writes []string
	}{{
		name:   "the cache shows the child",
		delays: againDelays(1),
		writes: []string{"patch configmaps g", "patch deployments g"},
	}, {
		name: "the cache never shows the child",
		hide: true,
		// 50 ms, 100 ms, ... 6.4 s (12.75 s in all), then every 10 s:
		// 12 retries in a minute, and more to come.
		delays: againDelays(12),
		writes: []string{"patch configmaps g"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := newAgainCluster(tc.hide)
				clk := firstWrite(t, a, runAgain(t, a))
				if got, want := writes(a.client), tc.writes[:1]; !slices.Equal(got, want) {
					t.Errorf("the first reconcile wrote %v, want %v", got, want)
				}
				got := gapsBetween(0, clk.advance(time.Minute))
				if !sameDelays(got, tc.delays) {
					t.Errorf("delays between reconciles over a minute = %v, want %v", got, tc.delays)
				}
				if got := writes(a.client); !slices.Equal(got, tc.writes) {
					t.Errorf("writes = %v, want %v", got, tc.writes)
				}
			})
		})
	}
}

// Once the child a parent waited for shows in the cache, the Again backoff
// of the parent is forgotten: the next wait starts at 50 ms again, not
// where the last one stopped.
func TestAgainForgotten(t *testing.T) { synctest.Test(t, testAgainForgotten) }

func testAgainForgotten(t *testing.T) {
	a := newAgainCluster(true)
	clk := firstWrite(t, a, runAgain(t, a))
	// Retried after 50, 100 and 200 ms; the next is due 400 ms later.
	hidden := againDelays(3)
	at := clk.advance(totalOf(hidden))
	if got := gapsBetween(0, at); !sameDelays(got, hidden) {
		t.Fatalf("delays while the child is hidden = %v, want %v", got, hidden)
	}
	// The cache shows it now. Its event is the echo of kgen's own write:
	// the retry that was due finds it and writes the second child.
	a.show(t)
	at = clk.advance(time.Second)
	if got, want := gapsBetween(totalOf(hidden), at), againDelays(4)[3:]; !sameDelays(got, want) {
		t.Fatalf("delays after the child showed = %v, want %v: the retry that was due, and no more", got, want)
	}
	if got, want := writes(a.client), []string{"patch configmaps g", "patch deployments g"}; !slices.Equal(got, want) {
		t.Fatalf("writes = %v, want %v", got, want)
	}
	if at := clk.advance(30 * time.Second); len(at) != 0 {
		t.Fatalf("reconciles at %v with nothing to wait for", at)
	}

	// The ConfigMap is deleted and its new copy is hidden: the deletion
	// queues the parent at once, and the retries start over at 50 ms.
	a.hideAgain()
	if err := a.client.Tracker().Delete(cmResource, "ns", "g"); err != nil {
		t.Fatal(err)
	}
	deleted := time.Since(clk.start)
	at = clk.advance(totalOf(againDelays(2)))
	if len(at) == 0 || at[0] != deleted {
		t.Fatalf("reconciles at %v after the child was deleted at %v, want one at once", at, deleted)
	}
	if got, want := gapsBetween(at[0], at[1:]), againDelays(2); !slices.Equal(got, want) {
		t.Errorf("delays of the second wait = %v, want %v: the first wait's backoff was not forgotten", got, want)
	}
}

// sameDelays compares delays measured from the first write: the first may
// be one step of the clock off, as the write is seen at the next step (the
// controller's own timers are not on the test's grid); the others are
// exact, each measured between two reconciles.
func sameDelays(got, want []time.Duration) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if d := got[i] - want[i]; d != 0 && (i > 0 || d < -againStep || d > againStep) {
			return false
		}
	}
	return true
}

// totalOf returns the sum of durations.
func totalOf(ds []time.Duration) time.Duration {
	var s time.Duration
	for _, d := range ds {
		s += d
	}
	return s
}

// A Conflict on one child (its name taken by an object that is not the
// parent's) does not hold back a sibling that waits for a child this
// reconcile wrote: the parent is reconciled again 50 ms later, not after
// the conflict's backoff, and the waiting child is written then. The
// conflict is still looked at again later.
func TestAgainDespiteConflict(t *testing.T) { synctest.Test(t, testAgainDespiteConflict) }

// blockedChild is a child whose name takeName gives someone else's object.
const blockedChild = `  - id: blocked
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: taken}}
`

// takeName makes the ConfigMap "taken" someone else's: kgen's apply,
// which may not take over, is refused, and a read finds it has no kgen
// marks.
func (a *againCluster) takeName(t *testing.T) {
	t.Helper()
	if err := a.client.Tracker().Create(cmResource, object("v1", "ConfigMap", "taken", "uid-taken", ""), "ns"); err != nil {
		t.Fatal(err)
	}
	a.client.PrependReactor("patch", "configmaps", func(action clienttesting.Action) (bool, runtime.Object, error) {
		if action.(clienttesting.PatchAction).GetName() == "taken" {
			return true, nil, apierrors.NewAlreadyExists(cmResource.GroupResource(), "taken")
		}
		return false, nil, nil
	})
}

// servesGadgetStatus gives Gadgets a status subresource, which kgen writes.
func (a *againCluster) servesGadgetStatus() {
	d := fakeDiscovery()
	for _, l := range d.Resources {
		if l.GroupVersion == "example.com/v1" {
			l.APIResources = append(l.APIResources, metav1.APIResource{Name: "gadgets/status", Kind: "Gadget", Namespaced: true, Verbs: []string{"get", "patch"}})
		}
	}
	a.mapper = mapper.New(d)
}

// conflictCluster is an againCluster whose rule has, besides the ConfigMap
// and its reader, a child whose name another object holds: a Conflict.
// The controller runs with a logger that collects the failures it logs.
func conflictCluster(t *testing.T, hide bool) (a *againCluster, metrics *Metrics, failures func() []string) {
	a = newAgainCluster(hide)
	a.takeName(t)
	metrics = NewMetrics(prometheus.NewRegistry())
	c := New(Config{
		Rules: []*rules.Rule{gadgetRule(t, configChild+readerChild+blockedChild)}, Client: a.client, Mapper: a.mapper,
		Recorder: record.NewFakeRecorder(1000), Workers: 1, Metrics: metrics,
	})
	var logMu sync.Mutex
	var logged []string
	logger := funcr.New(func(prefix, args string) {
		if strings.Contains(args, "Reconcile failed") {
			logMu.Lock()
			logged = append(logged, args)
			logMu.Unlock()
		}
	}, funcr.Options{})
	runControllerCtx(t, klog.NewContext(context.Background(), logger), c)
	return a, metrics, func() []string {
		logMu.Lock()
		defer logMu.Unlock()
		return slices.Clone(logged)
	}
}

// checkConflictLogged checks that the Conflict was logged between min and
// max times, naming the parent and what is in the way, and counted as a
// reconcile error.
func checkConflictLogged(t *testing.T, metrics *Metrics, failures []string, least, most int) {
	t.Helper()
	if len(failures) < least || len(failures) > most {
		t.Errorf("logged %d failures, want %d to %d: %q", len(failures), least, most, failures)
	}
	for _, f := range failures {
		if !strings.Contains(f, "configmaps ns/taken exists and is not managed by kgen") || !strings.Contains(f, `"key"`) {
			t.Errorf("failure log %s does not name the parent and what is in the way", f)
		}
	}
	if n := testutil.ToFloat64(metrics.failed.WithLabelValues("r")); n == 0 {
		t.Error("controller_runtime_reconcile_errors_total does not count the conflict")
	}
}

func testAgainDespiteConflict(t *testing.T) {
	a, metrics, failures := conflictCluster(t, false)
	clk := firstWrite(t, a, metrics)
	at := clk.advance(time.Second)
	if len(at) == 0 || !sameDelays(at[:1], againDelays(1)) {
		t.Fatalf("reconciles after the first write at %v, want one 50 ms later", at)
	}
	if got := writes(a.client); !slices.Contains(got, "patch deployments g") {
		t.Errorf("writes = %v: the child that waited for the ConfigMap was not written", got)
	}
	if at := clk.advance(2 * time.Minute); len(at) == 0 {
		t.Error("the conflict was never looked at again")
	}
	// A Conflict is a failed reconcile (contract section 6): logged with
	// the parent and what is in the way, once per backoff step (at once,
	// after 30 s, then 60 s: at most 4 in 2 minutes, one of them with the
	// first reconcile's Again), and counted as an error.
	checkConflictLogged(t, metrics, failures(), 2, 4)
}

// A Conflict while a child keeps waiting for one the cache never shows
// (every reconcile asks to run again, and the conflict's backoff is not
// stepped) is logged all the same, at most every 30 s: not never, and not
// at every reconcile.
func TestConflictLoggedWhileAChildWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, metrics, failures := conflictCluster(t, true)
		clk := firstWrite(t, a, metrics)
		if at := clk.advance(2 * time.Minute); len(at) < 10 {
			t.Fatalf("%d reconciles in 2 minutes, want the waiting child to ask again and again", len(at))
		}
		checkConflictLogged(t, metrics, failures(), 3, 5)
	})
}

// A write the API server's admission refuses while its RESTMapper learns a
// new CRD's kind (it resets every 30 s) is retried at least every 2 s, not
// after a backoff that grows to minutes: 14 refusals take 10 ms doubling
// to 1.28 s (2.55 s in all), then 2 s each, 14.55 s; the backoff alone
// would take 164 s.
func TestLearningKindRetriedSoon(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { testLearningKindRetriedSoon(t, 14) })
}

// A kind the API server never learns is retried every 2 s only for the
// first learningTries, then backed off as any failure: in 10 minutes, 40
// tries (8 in the first 2.6 s, then one every 2 s), then one every 5
// minutes.
func TestLearningKindBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		refused := testLearningKindRetriedSoon(t, -1)
		if n := refused(); n < learningTries || n > learningTries+3 {
			t.Errorf("refused %d times in 10 minutes, want %d and then one every 5 minutes", n, learningTries)
		}
	})
}

// testLearningKindRetriedSoon has the API server refuse the child's apply
// refusals times (-1: always, for 10 minutes) and returns how many it did.
func testLearningKindRetriedSoon(t *testing.T, refusals int) func() int {
	a := newAgainCluster(false)
	var mu sync.Mutex
	refused := 0
	a.client.PrependReactor("patch", "configmaps", func(clienttesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if refused == refusals {
			return false, nil, nil
		}
		refused++
		return true, nil, apierrors.NewForbidden(cmResource.GroupResource(), "g", errors.New(
			`cannot set blockOwnerDeletion in this case because cannot find RESTMapping for APIVersion example.com/v1 Kind Gadget: no matches for kind "Gadget" in version "example.com/v1"`))
	})
	c := New(Config{
		Rules: []*rules.Rule{gadgetRule(t, configChild)}, Client: a.client, Mapper: a.mapper,
		Recorder: record.NewFakeRecorder(1000), Workers: 1, Metrics: NewMetrics(prometheus.NewRegistry()),
	})
	runController(t, c)
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return refused
	}
	start := time.Now()
	if refusals < 0 {
		for time.Since(start) < 10*time.Minute {
			time.Sleep(time.Second)
			synctest.Wait()
		}
		return count
	}
	for {
		if _, err := a.client.Tracker().Get(cmResource, "ns", "g"); err == nil {
			break
		}
		if time.Since(start) > 5*time.Minute {
			t.Fatal("waited 5 minutes (fake time) for the child")
		}
		time.Sleep(againStep)
		synctest.Wait()
	}
	if took := time.Since(start); took > 16*time.Second {
		t.Errorf("the child was made %s after the first refusal, want about 14.6 s", took)
	}
	return count
}

// A reconcile that fails for good and whose status write must be made
// again (its JSON patch found the parent changed) is queued again, with
// the retry backoff: the parent gets its Ready condition, and a status
// write that keeps failing is not tried every second.
func TestTerminalStatusRetriedWithBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newAgainCluster(false)
		a.servesGadgetStatus()
		a.client.PrependReactor("patch", "configmaps", func(clienttesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewInvalid(cmResource.GroupVersion().WithKind("ConfigMap").GroupKind(), "g", nil)
		})
		var mu sync.Mutex
		statusWrites := 0
		a.client.PrependReactor("patch", "gadgets", func(action clienttesting.Action) (bool, runtime.Object, error) {
			if action.GetSubresource() != "status" {
				return false, nil, nil
			}
			mu.Lock()
			defer mu.Unlock()
			statusWrites++
			return true, nil, apierrors.NewConflict(gadgets.GroupResource(), "g", errors.New("the object has been modified"))
		})
		c := New(Config{
			Rules: []*rules.Rule{gadgetRule(t, configChild)}, Client: a.client, Mapper: a.mapper,
			Recorder: record.NewFakeRecorder(10000), Workers: 1, Metrics: NewMetrics(prometheus.NewRegistry()),
		})
		runController(t, c)
		for start := time.Now(); time.Since(start) < 10*time.Minute; {
			time.Sleep(time.Second)
			synctest.Wait()
		}
		mu.Lock()
		defer mu.Unlock()
		// Once a second would be about 600; the backoff doubles from
		// 1 s up to 5 minutes: about 10. Without the requeue: 1.
		if statusWrites < 3 || statusWrites > 30 {
			t.Errorf("%d status writes in 10 minutes, want a few, backing off", statusWrites)
		}
	})
}

// A parent in Conflict whose status follows a busy child, and whose
// status write is held for a few seconds (reconcile's status spacing), is
// reconciled again when the hold ends, not after the conflict's backoff:
// the last value lands within seconds.
func TestHeldStatusLandsDespiteConflict(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newAgainCluster(false)
		a.servesGadgetStatus()
		// kgen's status patch tests the parent's resourceVersion.
		g, err := a.client.Tracker().Get(gadgets, "ns", "g")
		if err != nil {
			t.Fatal(err)
		}
		g.(*unstructured.Unstructured).SetResourceVersion("1")
		if err := a.client.Tracker().Update(gadgets, g, "ns"); err != nil {
			t.Fatal(err)
		}
		a.takeName(t)
		rule := gadgetRule(t, configChild+blockedChild+"  status:\n    n: ${children.config.?data.?n.orValue(\"\")}\n")
		c := New(Config{Rules: []*rules.Rule{rule}, Client: a.client, Mapper: a.mapper,
			Recorder: record.NewFakeRecorder(10000), Workers: 1, Metrics: NewMetrics(prometheus.NewRegistry())})
		runController(t, c)
		firstWrite(t, a, c.metrics)
		status := func() string {
			o, err := a.client.Tracker().Get(gadgets, "ns", "g")
			if err != nil {
				t.Fatal(err)
			}
			n, _, _ := unstructured.NestedString(o.(*unstructured.Unstructured).Object, "status", "n")
			return n
		}
		// Another writer changes the child 15 times, 100 ms apart: more
		// than 10 status writes in a minute, so the last ones are held.
		const changes = 15
		for i := 1; i <= changes; i++ {
			a.setChildData(t, map[string]any{"n": fmt.Sprint(i)})
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
		}
		if got := status(); got == fmt.Sprint(changes) {
			t.Fatalf("status.n = %s right after the last change: no write was held, the test does not reach the limit", got)
		}
		time.Sleep(6 * time.Second)
		synctest.Wait()
		if got := status(); got != fmt.Sprint(changes) {
			t.Errorf("status.n = %q 6 s after the last change, want %d: the held write waits for the conflict's backoff", got, changes)
		}
	})
}

// A parent in Conflict that a busy child wakes (another writer changes it
// 20 times in 10 s) is reconciled each time, but its conflict backoff
// steps, and its failure is logged, only at the backoff's own looks: once
// per step, as contract §6 has it, not once per change of the child.
func TestConflictWokenEarlyKeepsItsBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newAgainCluster(false)
		a.takeName(t)
		c := New(Config{Rules: []*rules.Rule{gadgetRule(t, configChild+blockedChild)}, Client: a.client, Mapper: a.mapper,
			Recorder: record.NewFakeRecorder(10000), Workers: 1, Metrics: NewMetrics(prometheus.NewRegistry())})
		runController(t, c)
		clock := firstWrite(t, a, c.metrics)
		key := Key{Rule: "r", Namespace: "ns", Name: "g"}
		clock.advance(time.Second)
		if n := c.conflicts.NumRequeues(key); n != 1 {
			t.Fatalf("conflict backoff at %d steps after the first reconcile, want 1", n)
		}
		const changes = 20
		for i := 1; i <= changes; i++ {
			a.setChildData(t, map[string]any{"by": "someone", "n": fmt.Sprint(i)})
			clock.advance(500 * time.Millisecond)
		}
		if got := reconcilesOf(c.metrics); got < changes {
			t.Fatalf("%d reconciles for %d changes of the child: the test does not wake the parent", got, changes)
		}
		if n := c.conflicts.NumRequeues(key); n != 1 {
			t.Errorf("conflict backoff at %d steps after %d changes of a child in 10 s, want 1 (its first look, at 30 s, has not come)", n, changes)
		}
		// The backoff's own look still comes at 30 s, and steps it.
		clock.advance(conflictBase)
		if n := c.conflicts.NumRequeues(key); n != 2 {
			t.Errorf("conflict backoff at %d steps after its first look, want 2", n)
		}
	})
}

// setChildData is another writer setting the data of the parent's child,
// the ConfigMap ns/g, with a new resource version.
func (a *againCluster) setChildData(t *testing.T, data map[string]any) {
	t.Helper()
	o, err := a.client.Tracker().Get(cmResource, "ns", "g")
	if err != nil {
		t.Fatal(err)
	}
	cm := o.(*unstructured.Unstructured)
	cm.Object["data"] = data
	a.mu.Lock()
	a.rv++
	cm.SetResourceVersion(fmt.Sprint(a.rv))
	a.mu.Unlock()
	if err := a.client.Tracker().Update(cmResource, cm, "ns"); err != nil {
		t.Fatal(err)
	}
}
