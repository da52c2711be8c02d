package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"kgen.dev/kgen/pkg/mapper"
	"kgen.dev/kgen/rules"
)

// widgetChild is a child of a kind the fake cluster does not serve.
const widgetChild = `  - id: widget
    template: {apiVersion: example.com/v1, kind: Widget, metadata: {name: "${parent.metadata.name}"}}
`

// A rule changed live to a version that cannot run yet keeps its previous
// version running (contract section 7): a new version with a kind that is
// not served waits, and one with a kind kgen may not list starts but does
// not take over until its caches sync. Meanwhile the previous version
// reconciles the rule's parents, and the rule's state says the new
// version waits. A further change replaces the waiting version, a change
// back drops it, and once the new version can sync it takes over.
func TestPreviousVersionRunsWhileNewWaits(t *testing.T) {
	// As in TestFinalizeWhileRuleWaits: a failing list must not make
	// client-go's error handler sleep for decades in the bubble.
	quietListErrors(t)
	synctest.Test(t, testPreviousVersionRunsWhileNewWaits)
}

func testPreviousVersionRunsWhileNewWaits(t *testing.T) {
	client, m := fakeCluster(gadgetWith("g1", false, false))
	var denied atomic.Bool
	denied.Store(true)
	client.PrependReactor("list", depResource.Resource, func(clienttesting.Action) (bool, runtime.Object, error) {
		if denied.Load() {
			return true, nil, apierrors.NewForbidden(depResource.GroupResource(), "", nil)
		}
		return false, nil, nil
	})
	v1 := gadgetRule(t, configChild)
	c := New(Config{Rules: []*rules.Rule{v1}, Client: client, Mapper: m, Recorder: record.NewFakeRecorder(1000), Workers: 1, RetryInterval: time.Second})
	runController(t, c)
	// The fake client cannot create by server-side apply, so the writes
	// fail; that kgen tries them shows which version reconciles.
	tried := func(w string) bool { return slices.Contains(writes(client), w) }
	waitFor(t, "version 1 to reconcile g1", func() bool { return tried("patch configmaps g1") })

	// reconciledBy creates a parent and waits until a version of the rule
	// reconciles it, as the write of child says.
	reconciledBy := func(name, child string) {
		t.Helper()
		if _, err := client.Resource(gadgets).Namespace("ns").Create(context.Background(), gadgetWith(name, false, false), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the running version to reconcile "+name, func() bool { return tried("patch " + child + " " + name) })
	}
	next := func() *RuleState {
		s, ok := c.State("r")
		if !ok {
			t.Fatal("rule r is gone")
		}
		return s.Next
	}

	// A kind that is not served: the new version waits, version 1 runs.
	c.SetRules([]*rules.Rule{gadgetRule(t, configChild+widgetChild)})
	waitFor(t, "the new version to wait", func() bool { n := next(); return n != nil && n.KindNotServed })
	if s, _ := c.State("r"); !s.Running || !s.Synced || !strings.Contains(s.Next.Waiting, "Widget") {
		t.Errorf("state %+v, next %+v: want version 1 running and the new one waiting for Widget", s, *s.Next)
	}
	reconciledBy("g2", "configmaps")

	// Changed back: nothing waits any more, and version 1 runs on.
	c.SetRules([]*rules.Rule{v1})
	waitFor(t, "the waiting version to go", func() bool { return next() == nil })
	if s, _ := c.State("r"); !s.Synced {
		t.Errorf("state %+v after the change back, want version 1 running", s)
	}

	// A kind kgen may not list: the new version starts but cannot sync,
	// and version 1 still reconciles.
	v3 := gadgetRule(t, configChild+deployChild)
	c.SetRules([]*rules.Rule{v3})
	waitFor(t, "the new version to fail to list", func() bool { n := next(); return n != nil && n.Forbidden })
	reconciledBy("g3", "configmaps")
	if tried("patch deployments g3") {
		t.Error("the new version reconciled before its caches synced")
	}

	// Allowed: it syncs, takes over, and reconciles every parent.
	denied.Store(false)
	// The reflector lists again after its backoff: up to 30 s.
	time.Sleep(time.Minute)
	waitFor(t, "the new version to take over", func() bool {
		s, _ := c.State("r")
		c.mu.Lock()
		defer c.mu.Unlock()
		return s.Next == nil && s.Synced && c.rules["r"].rule == v3
	})
	for _, g := range []string{"g1", "g2", "g3"} {
		waitFor(t, "the new version to reconcile "+g, func() bool { return tried("patch deployments " + g) })
	}

	// Removed while a new version waits: both stop.
	c.SetRules([]*rules.Rule{gadgetRule(t, configChild+widgetChild)})
	waitFor(t, "the new version to wait", func() bool { n := next(); return n != nil && n.KindNotServed })
	c.SetRules(nil)
	waitFor(t, "the rule to go", func() bool {
		_, ok := c.State("r")
		c.mu.Lock()
		defer c.mu.Unlock()
		return !ok && len(c.pending) == 0
	})
}

// A changed CRD has the running rules that use its kind checked again
// (Config.Recheck), and no other rule: not one that uses another kind of
// its group (a live audit: every rule of the group was reconciled again
// at each schema edit with --manage-crds).
func TestRecheckOnKindsChanged(t *testing.T) {
	client, m := fakeCluster(gadgetWith("g1", false, false))
	var mu sync.Mutex
	var rechecked []string
	c := New(Config{Rules: []*rules.Rule{gadgetRule(t, configChild)}, Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100),
		Recheck: func(_ context.Context, r *rules.Rule) {
			mu.Lock()
			defer mu.Unlock()
			rechecked = append(rechecked, r.Name)
		}})
	activateRule(t, c)
	for _, tc := range []struct {
		change mapper.Change
		want   []string
	}{
		{mapper.Change{Group: "example.com", Spec: true}, []string{"r"}},
		{mapper.Change{Group: "example.com", Resource: "gadgets", Spec: true}, []string{"r"}},
		{mapper.Change{Group: "example.com", Resource: "widgets", Spec: true}, nil},
		{mapper.Change{Group: "", Spec: true}, []string{"r"}}, // ConfigMaps: a child kind
		{mapper.Change{Group: "other.example.com", Spec: true}, nil},
		{mapper.Change{All: true, Spec: true}, []string{"r"}},
	} {
		mu.Lock()
		rechecked = nil
		mu.Unlock()
		c.recheck(tc.change)
		mu.Lock()
		if !slices.Equal(rechecked, tc.want) {
			t.Errorf("%+v rechecked %v, want %v", tc.change, rechecked, tc.want)
		}
		mu.Unlock()
	}
}

// Only a rule's current version acts on the events of its informers: a
// pending version (its previous one running) and a retired one (replaced,
// its handlers not yet released) get the same events as the current one
// through the shared informers, and must not queue them again, or ask
// Writes.Echo, which forgets an echo when first asked.
func TestOnlyTheCurrentVersionHandles(t *testing.T) {
	v1 := gadgetRule(t, configChild)
	c := New(Config{Rules: []*rules.Rule{v1}, Recorder: record.NewFakeRecorder(10)})
	old := c.rules["r"]
	calls := map[string]int{}
	handler := func(name string) func(metav1.Object, bool) { return func(metav1.Object, bool) { calls[name]++ } }
	oldH := c.ifCurrent(old, handler("old"))
	oldH(&metav1.ObjectMeta{Name: "p"}, false)

	c.mu.Lock()
	old.active = true // running, so a new version waits as pending
	c.mu.Unlock()
	c.SetRules([]*rules.Rule{gadgetRule(t, configChild+deployChild)})
	c.mu.Lock()
	next := c.pending["r"]
	c.mu.Unlock()
	if next == nil {
		t.Fatal("no pending version")
	}
	nextH := c.ifCurrent(next, handler("next"))
	oldH(&metav1.ObjectMeta{Name: "p"}, false)
	nextH(&metav1.ObjectMeta{Name: "p"}, false)
	if calls["old"] != 2 || calls["next"] != 0 {
		t.Errorf("calls %v while the new version is pending, want old 2, next 0", calls)
	}

	// The swap (awaitSync): the new version is current, the old one retires.
	c.mu.Lock()
	c.rules["r"] = next
	delete(c.pending, "r")
	c.mu.Unlock()
	oldH(&metav1.ObjectMeta{Name: "p"}, false)
	nextH(&metav1.ObjectMeta{Name: "p"}, false)
	if calls["old"] != 2 || calls["next"] != 1 {
		t.Errorf("calls %v after the swap, want old 2, next 1", calls)
	}
}

// A rule that waits for a child kind is not admitted (Admit reads the
// parent kind's CRD) at each try to start it: only once every kind it
// names is served. A waiting rule costs no request every 5 s.
func TestWaitingRuleIsNotAdmittedEachTry(t *testing.T) {
	synctest.Test(t, testWaitingRuleIsNotAdmittedEachTry)
}

func testWaitingRuleIsNotAdmittedEachTry(t *testing.T) {
	client, m := fakeCluster(gadgetWith("g1", false, false))
	var admitted atomic.Int32
	c := New(Config{Rules: []*rules.Rule{gadgetRule(t, configChild+widgetChild)}, Client: client, Mapper: m,
		Recorder: record.NewFakeRecorder(1000), Workers: 1, RetryInterval: time.Second,
		Admit: func(context.Context, *rules.Rule, bool) error { admitted.Add(1); return nil }})
	runController(t, c)
	waitFor(t, "the rule to wait for Widget", func() bool { s, _ := c.State("r"); return s.KindNotServed })
	time.Sleep(time.Minute)
	synctest.Wait()
	if n := admitted.Load(); n != 0 {
		t.Errorf("Admit was called %d times in a minute while a child kind is not served, want 0", n)
	}
}

// A controller that is not running yet (a standby following its rules
// files) keeps one retiring state per rule however many versions it is
// handed: none of them started, and there is nothing to release (a review:
// 200 edits left 200 compiled rules, logged one by one at takeover).
func TestStandbyKeepsOneRetiringVersion(t *testing.T) {
	client, m := fakeCluster()
	c := New(Config{Rules: []*rules.Rule{gadgetRule(t, configChild)}, Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100)})
	defer func() {
		c.watches.Shutdown()
		c.queue.ShutDown()
	}()
	for i := range 50 {
		c.SetRules([]*rules.Rule{gadgetRule(t, configChild+fmt.Sprintf("  - id: extra\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: \"x-%d\"}}\n", i))})
	}
	c.mu.Lock()
	n := len(c.retiring)
	c.mu.Unlock()
	if n != 1 {
		t.Errorf("%d retiring states after 50 versions handed to a controller that is not running, want 1", n)
	}
}
