package controller

import (
	"context"
	"testing"
	"testing/synctest"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"kgen.dev/kgen/pkg/mapper"
	"kgen.dev/kgen/rules"
)

// A parent CRD changed in place to gain its status subresource: the running
// rule maps its parents again, so they get a status from then on, with no
// restart; and it loses the subresource the same way.
func TestParentMappingFollowsCRD(t *testing.T) { synctest.Test(t, testParentMappingFollowsCRD) }

func testParentMappingFollowsCRD(t *testing.T) {
	client, _ := fakeCluster(object("example.com/v1", "Gadget", "g", "p1", ""))
	disc := fakeDiscovery()
	m := mapper.New(disc)
	c := New(Config{Rules: []*rules.Rule{gadgetRule(t, configChild)}, Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100), Record: &memRecord{scopes: map[string][]ChildScope{}}})
	activateRule(t, c)
	waitState(t, c, "the rule to sync", func(s RuleState) bool { return s.Synced })
	status := func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.rules["r"].parent.HasSubresource("status")
	}
	if status() {
		t.Fatal("the parent mapping has a status subresource before the CRD has one")
	}
	gadgets := disc.Resources[2]
	kind := gadgets.APIResources[0]
	for _, step := range []struct {
		resources []metav1.APIResource
		change    mapper.Change
		want      bool
	}{
		{[]metav1.APIResource{kind, {Name: "gadgets/status"}}, mapper.Change{Group: "example.com", Spec: true}, true},
		{[]metav1.APIResource{kind}, mapper.Change{Group: "example.com", Spec: true}, false},
		// Another group's change leaves the mapping alone...
		{[]metav1.APIResource{kind, {Name: "gadgets/status"}}, mapper.Change{Group: "other.example.com", Spec: true}, false},
		// ...and a change of every group (a watch's late first list) reads it again.
		{[]metav1.APIResource{kind, {Name: "gadgets/status"}}, mapper.Change{All: true, Spec: true}, true},
	} {
		gadgets.APIResources = step.resources
		m.Reset() // as the Watcher does before it tells its subscribers
		c.KindsChanged(step.change)
		synctest.Wait() // KindsChanged reads discovery on its own goroutine
		if got := status(); got != step.want {
			t.Errorf("after %+v with %d resources in example.com/v1: the parent mapping has status = %v, want %v", step.change, len(step.resources), got, step.want)
		}
	}
}

// A CRD that gains its status subresource while its rule is starting (after
// the rule read the mapping, before it runs): the rule does not keep the
// older mapping.
func TestParentMappingChangedWhileStarting(t *testing.T) {
	synctest.Test(t, testParentMappingChangedWhileStarting)
}

func testParentMappingChangedWhileStarting(t *testing.T) {
	client, _ := fakeCluster(object("example.com/v1", "Gadget", "g", "p1", ""))
	disc := fakeDiscovery()
	m := mapper.New(disc)
	var c *Controller
	admit := func(context.Context, *rules.Rule, bool) error {
		gadgets := disc.Resources[2]
		gadgets.APIResources = append(gadgets.APIResources, metav1.APIResource{Name: "gadgets/status"})
		m.Reset()
		c.KindsChanged(mapper.Change{Group: "example.com", Spec: true})
		synctest.Wait() // the refresh ran, and skipped the rule: not running yet
		return nil
	}
	c = New(Config{Rules: []*rules.Rule{gadgetRule(t, configChild)}, Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100),
		Record: &memRecord{scopes: map[string][]ChildScope{}}, Admit: admit})
	activateRule(t, c)
	c.mu.Lock()
	got := c.rules["r"].parent.HasSubresource("status")
	c.mu.Unlock()
	if !got {
		t.Error("the rule kept the parent mapping it read before the CRD gained its status subresource")
	}
}

// A changed CRD reconciles again the parents of the rules that use its
// kind, and no other: not those of a rule that uses another kind of its
// group (contract §7; a live audit: with --manage-crds, each schema edit
// of one rule's parent kind reconciled, and relisted, every rule of the
// group).
func TestKindsChangedRequeuesOnlyUsers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client, m := fakeCluster(gadgetWith("g1", false, false))
		c := New(Config{Rules: []*rules.Rule{gadgetRule(t, configChild)}, Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100)})
		activateRule(t, c)
		waitState(t, c, "the rule to sync", func(s RuleState) bool { return s.Synced })
		for _, tc := range []struct {
			change mapper.Change
			want   int
		}{
			{mapper.Change{Group: "example.com", Resource: "widgets", Spec: true}, 0},
			{mapper.Change{Group: "example.com", Resource: "gadgets", Spec: true}, 1},
			{mapper.Change{Group: "example.com", Spec: true}, 1}, // an APIService: any kind of the group
		} {
			for c.queue.Len() > 0 {
				k, _ := c.queue.Get()
				c.queue.Done(k)
				c.queue.Forget(k)
			}
			c.KindsChanged(tc.change)
			synctest.Wait()
			if n := c.queue.Len(); n != tc.want {
				t.Errorf("%+v queued %d parents, want %d", tc.change, n, tc.want)
			}
		}
	})
}

// A rule that starts records its version; at the next start Admit is told
// that this version ran before (so a file rule starts past a CRD changed
// while kgen was stopped, as a Rule object does), and not for another
// version. A rule removed from the set leaves the record.
func TestRunningVersionRecorded(t *testing.T) { synctest.Test(t, testRunningVersionRecorded) }

// startRecorded starts rule r with a Record, in a synctest bubble, and
// waits until it has synced and recorded what it records at its start; it
// returns the ranBefore that Admit was given.
func startRecorded(t *testing.T, rec *memRecord, rule *rules.Rule) (*Controller, context.Context, bool) {
	t.Helper()
	client, m := fakeCluster(gadgetWith("g1", false, false))
	var ran bool
	admit := func(_ context.Context, _ *rules.Rule, ranBefore bool) error { ran = ranBefore; return nil }
	c := New(Config{Rules: []*rules.Rule{rule}, Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100), Record: rec, Admit: admit})
	ctx := activateRule(t, c)
	waitState(t, c, "the rule to sync", func(s RuleState) bool { return s.Synced })
	synctest.Wait()
	return c, ctx, ran
}

func testRunningVersionRecorded(t *testing.T) {
	rec := &memRecord{scopes: map[string][]ChildScope{}}
	v1 := gadgetRule(t, configChild)
	if _, _, ran := startRecorded(t, rec, v1); ran {
		t.Error("a rule kgen never ran was admitted as one that ran before")
	}
	if got := rec.getRunning("r"); got != v1.Version() {
		t.Fatalf("recorded version %q, want %q", got, v1.Version())
	}
	if _, _, ran := startRecorded(t, rec, gadgetRule(t, configChild)); !ran {
		t.Error("the version that ran, at the next start, was not admitted as one that ran before")
	}
	v2 := gadgetRule(t, deployChild)
	c, ctx, ran := startRecorded(t, rec, v2)
	if ran {
		t.Error("another version of the rule was admitted as one that ran before")
	}
	if got := rec.getRunning("r"); got != v2.Version() {
		t.Errorf("recorded version %q after the new version started, want %q", got, v2.Version())
	}
	// Passes write nothing more: a converged cluster costs no request.
	rec.mu.Lock()
	writes := rec.runningWrites
	rec.mu.Unlock()
	c.prunePass(ctx)
	c.prunePass(ctx)
	rec.mu.Lock()
	if rec.runningWrites != writes {
		t.Errorf("two passes wrote the running version %d times, want none", rec.runningWrites-writes)
	}
	rec.mu.Unlock()

	c.mu.Lock()
	delete(c.rules, "r") // removed from the set
	c.mu.Unlock()
	// Not before every rule is loaded: a Rule object not listed yet is
	// not a removed rule.
	loaded := false
	c.cfg.RulesLoaded = func() bool { return loaded }
	c.prunePass(ctx)
	if got := rec.getRunning("r"); got != v2.Version() {
		t.Errorf("recorded version %q after a pass before every rule was loaded, want %q kept", got, v2.Version())
	}
	loaded = true
	c.prunePass(ctx)
	if got := rec.getRunning("r"); got != "" {
		t.Errorf("recorded version %q after the rule was removed, want none", got)
	}
}

// The pass of a version that a newer one replaces, which started (and
// recorded itself) while the pass ran, does not write the older version
// back; a version that waits to replace it does not stop the running one
// from being recorded.
func TestRunningVersionNotWrittenBack(t *testing.T) {
	synctest.Test(t, testRunningVersionNotWrittenBack)
}

func testRunningVersionNotWrittenBack(t *testing.T) {
	rec := &memRecord{scopes: map[string][]ChildScope{}}
	v1, v2 := gadgetRule(t, configChild), gadgetRule(t, deployChild)
	c, ctx, _ := startRecorded(t, rec, v1)
	c.mu.Lock()
	v1State := c.rules["r"]
	next := newRuleState(v2)
	c.pending["r"] = next // waiting: not started
	c.record.running["r"] = ""
	c.mu.Unlock()
	if err := c.saveRunning(ctx, v1State); err != nil {
		t.Fatal(err)
	}
	if got := rec.getRunning("r"); got != v1.Version() {
		t.Errorf("with the new version waiting, recorded %q, want the running version %q", got, v1.Version())
	}
	c.mu.Lock()
	next.active = true // started: it records itself
	c.record.running["r"] = ""
	c.mu.Unlock()
	if err := rec.UpdateRunning(ctx, "r", v2.Version(), v2.Document()); err != nil {
		t.Fatal(err)
	}
	if err := c.saveRunning(ctx, v1State); err != nil {
		t.Fatal(err)
	}
	if got := rec.getRunning("r"); got != v2.Version() {
		t.Errorf("the replaced version's pass wrote %q back over the started new version %q", got, v2.Version())
	}
}

// A rule removed and added back while its removal is written to the record
// is recorded again at the next pass: what the controller holds in memory
// follows the record.
func TestRunningVersionReAddedDuringRemoval(t *testing.T) {
	synctest.Test(t, testRunningVersionReAddedDuringRemoval)
}

func testRunningVersionReAddedDuringRemoval(t *testing.T) {
	rec := &memRecord{scopes: map[string][]ChildScope{}}
	v1 := gadgetRule(t, configChild)
	c, ctx, _ := startRecorded(t, rec, v1)
	c.mu.Lock()
	rs := c.rules["r"]
	delete(c.rules, "r")
	c.mu.Unlock()
	rec.duringRunning = func() {
		// Back while the removal is written.
		c.mu.Lock()
		c.rules["r"] = rs
		c.mu.Unlock()
	}
	c.forgetRemovedVersions(ctx)
	rec.duringRunning = nil
	c.prunePass(ctx)
	if got := rec.getRunning("r"); got != v1.Version() {
		t.Errorf("recorded version %q after the rule came back, want %q", got, v1.Version())
	}
}
