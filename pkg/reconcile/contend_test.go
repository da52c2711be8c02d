package reconcile

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
)

// countingObserver counts backoffs.
type countingObserver struct{ status, child, spaced int }

func (o *countingObserver) StatusBackoff(string, string) { o.status++ }
func (o *countingObserver) ChildBackoff(string)          { o.child++ }
func (o *countingObserver) ChildSpaced(string)           { o.spaced++ }

// A writer that sets back what kgen repairs: kgen repairs the child
// contendedAfter times, then stops repairing it for a growing while, says
// so, and looks again when the while ends; a change of the template lands
// during it; repairs spread out, or that fail, are no fight.
func TestChildFoughtOverBacksOff(t *testing.T) {
	// fight changes data.a as another writer, "fighter", does.
	fight := func(h *harness) {
		cm := h.api.get(cmGVK, "team", "web-config")
		cm.Object["data"].(map[string]any)["a"] = "theirs"
		cm.SetManagedFields([]metav1.ManagedFieldsEntry{
			{Manager: "kgen", Operation: metav1.ManagedFieldsOperationApply, Time: &metav1.Time{Time: h.now}},
			{Manager: "fighter", Operation: metav1.ManagedFieldsOperationUpdate, Time: &metav1.Time{Time: h.now},
				FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{"f:a":{}}}`)}}})
		h.api.add(cm)
	}
	// remove deletes the child, as another writer that deletes it does.
	remove := func(h *harness) {
		h.cfg.Writes.Deleted(h.api.get(cmGVK, "team", "web-config").GetUID()) // as its watch event tells
		h.api.mu.Lock()
		delete(h.api.objects, objKey{gvrOf(cmGVK), "team", "web-config"})
		h.api.mu.Unlock()
	}
	childWrites := func(h *harness) int {
		return len(slices.DeleteFunc(h.api.writes(), func(w string) bool { return !strings.HasSuffix(w, "configmaps team/web-config") }))
	}
	type step struct {
		after  time.Duration    // the clock moves on by this first
		change func(h *harness) // then this is made
		// what the reconcile then does
		writes  int           // writes of the child
		reason  string        // the Ready condition's reason
		requeue time.Duration // Result.RequeueAfter
		event   []string      // a Warning event, containing each of these
	}
	contended := func(requeue time.Duration, event ...string) step {
		return step{change: fight, reason: ReasonChildContended, requeue: requeue, event: event}
	}
	repaired := step{change: fight, writes: 1, reason: ReasonReady}
	// A writer that puts back an old template hash (a copy of the child
	// kept in Git, say): kgen applied this template, so it is a repair.
	stripHash := step{change: func(h *harness) {
		cm := h.api.get(cmGVK, "team", "web-config")
		annotations := cm.GetAnnotations()
		annotations[AnnotationTemplateHash] = "old"
		cm.SetAnnotations(annotations)
		h.api.add(cm)
	}, writes: 1, reason: ReasonReady}
	failing := false // the API server refuses writes of the child
	// A writer that takes kgen's ownerReference off a CreateOnly child,
	// whose marks alone kgen writes.
	unmark := step{change: func(h *harness) {
		cm := h.api.get(cmGVK, "team", "web-config")
		cm.SetAnnotations(nil)
		h.api.add(cm)
	}, writes: 1, reason: ReasonReady}
	// ...or its ownerReference: then kgen finds it only when its create
	// is refused (2 writes).
	unown := step{change: func(h *harness) {
		cm := h.api.get(cmGVK, "team", "web-config")
		cm.SetOwnerReferences(nil)
		h.api.add(cm)
	}, writes: 2, reason: ReasonReady}
	createOnly := strings.Replace(appRule, "  - id: config\n", "  - id: config\n    updatePolicy: CreateOnly\n", 1)
	for _, tt := range []struct {
		name     string
		rule     string // appRule if empty
		steps    []step
		backoffs int
	}{{
		name: "kgen's annotations taken off a CreateOnly child after every write",
		rule: createOnly,
		// The first write of marks may follow a change of the rule;
		// writing the same marks again is a repair.
		steps: []step{unmark, unmark, unmark, unmark,
			{change: unmark.change, reason: ReasonChildContended, requeue: time.Minute, event: []string{"child config", "metadata.annotations"}},
		},
		backoffs: 1,
	}, {
		name: "the ownerReference of a CreateOnly child taken off after every write",
		rule: createOnly,
		steps: []step{unown, unown, unown, unown,
			{change: unown.change, reason: ReasonChildContended, requeue: time.Minute, event: []string{"child config", "ownerReference"}},
		},
		backoffs: 1,
	}, {
		name: "the ownerReference of a child taken off after every repair",
		steps: []step{unown, unown, unown,
			{change: unown.change, reason: ReasonChildContended, requeue: time.Minute, event: []string{"child config", "ownerReference"}},
		},
		backoffs: 1,
	}, {
		name: "set back after every repair",
		steps: []step{repaired, repaired, repaired,
			contended(time.Minute, "kgen set configmaps team/web-config back 3 times", "after another writer (fighter) changed data.a", "child config", "for 1m0s"),
			// It goes on during the backoff: nothing written, the
			// parent looked at again when the backoff ends.
			{after: 20 * time.Second, change: fight, reason: ReasonChildContended, requeue: 40 * time.Second},
			// The backoff over, kgen repairs again; the next backoff
			// is twice as long.
			{after: 40 * time.Second, writes: 1, reason: ReasonReady},
			repaired, repaired, contended(2*time.Minute, "for 2m0s"),
		},
		backoffs: 2,
	}, {
		name: "deleted after every creation",
		steps: []step{
			{change: remove, writes: 1, reason: ReasonReady}, {change: remove, writes: 1, reason: ReasonReady}, {change: remove, writes: 1, reason: ReasonReady},
			{change: remove, reason: ReasonChildContended, requeue: time.Minute, event: []string{"configmaps team/web-config was deleted, or lost kgen's labels or ownerReference, 3 times", "child config"}},
			{after: time.Minute, writes: 1, reason: ReasonReady},
		},
		backoffs: 1,
	}, {
		name: "deleted after every creation, and woken meanwhile by something else",
		steps: []step{
			{change: remove, writes: 1, reason: ReasonReady}, {change: remove, writes: 1, reason: ReasonReady}, {change: remove, writes: 1, reason: ReasonReady},
			{change: remove, reason: ReasonChildContended, requeue: time.Minute, event: []string{"was deleted"}},
			// Another child's change wakes the parent: still held.
			{after: 10 * time.Second, reason: ReasonChildContended, requeue: 50 * time.Second},
			{after: 50 * time.Second, writes: 1, reason: ReasonReady},
		},
		backoffs: 1,
	}, {
		// A deletion is another cause than a field set back (a soak
		// counted them together): the child is created again at once
		// while kgen holds off the writer of its fields, and one
		// deletion adds nothing to that writer's count.
		name: "deleted during the backoff from a writer of its fields",
		steps: []step{repaired, repaired, repaired, contended(time.Minute, "child config"),
			{after: 10 * time.Second, change: remove, writes: 1, reason: ReasonReady},
		},
		backoffs: 1,
	}, {
		name: "a deletion among field repairs",
		steps: []step{repaired, {change: remove, writes: 1, reason: ReasonReady}, repaired, repaired,
			contended(time.Minute, "child config"),
		},
		backoffs: 1,
	}, {
		name: "the template-hash annotation set back after every repair",
		steps: []step{stripHash, stripHash, stripHash,
			{change: stripHash.change, reason: ReasonChildContended, requeue: time.Minute, event: []string{"metadata.annotations[kgen.dev/template-hash]"}},
		},
		backoffs: 1,
	}, {
		name: "a change of the parent lands during the backoff",
		steps: []step{repaired, repaired, repaired, contended(time.Minute, "child config"),
			{change: func(h *harness) { h.setSpec(map[string]any{"data": map[string]any{"a": "2"}}) }, writes: 1, reason: ReasonReady},
		},
		backoffs: 1,
	}, {
		name: "repairs spread over more than the window are no fight",
		steps: []step{repaired, repaired,
			{after: contendedWindow, change: fight, writes: 1, reason: ReasonReady},
			{after: time.Minute, change: fight, writes: 1, reason: ReasonReady},
		},
	}, {
		name: "repairs that fail are no fight",
		steps: []step{repaired, repaired,
			{change: func(h *harness) {
				fight(h)
				failing = true
			}, reason: ReasonApplyFailed},
			{reason: ReasonApplyFailed},
			{reason: ReasonApplyFailed},
			{change: func(*harness) { failing = false }, writes: 1, reason: ReasonReady},
		},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			obs := &countingObserver{}
			h := newHarness(t, cmp.Or(tt.rule, appRule), func(c *Config) { c.Observer = obs })
			failing = false
			h.api.PrependReactor("patch", "configmaps", func(clienttesting.Action) (bool, runtime.Object, error) {
				if failing {
					return true, nil, apierrors.NewServiceUnavailable("try later")
				}
				return false, nil, nil
			})
			h.converge(appParent(nil))
			for i, s := range tt.steps {
				h.now = h.now.Add(s.after)
				if s.change != nil {
					s.change(h)
				}
				h.api.resetRequests()
				res, err := h.reconcile(appParent(nil))
				if err != nil && s.reason != ReasonApplyFailed {
					t.Fatalf("step %d: %v", i, err)
				}
				if n := childWrites(h); n != s.writes {
					t.Errorf("step %d: %d writes of the child, want %d: %v", i, n, s.writes, h.api.calls())
				}
				if c := h.ready(); c["reason"] != s.reason {
					t.Errorf("step %d: Ready = %v, want reason %s", i, c, s.reason)
				}
				if s.reason != ReasonApplyFailed && res.RequeueAfter != s.requeue {
					t.Errorf("step %d: RequeueAfter = %v, want %v", i, res.RequeueAfter, s.requeue)
				}
				var warnings []string
				for _, e := range h.drain() {
					if strings.HasPrefix(e, "Warning "+ReasonChildContended) {
						warnings = append(warnings, e)
					}
				}
				switch {
				case len(s.event) == 0 && len(warnings) > 0:
					t.Errorf("step %d: unexpected %v", i, warnings)
				case len(s.event) > 0 && len(warnings) != 1:
					t.Errorf("step %d: events %v, want one %s", i, warnings, ReasonChildContended)
				case len(s.event) > 0:
					for _, want := range s.event {
						if !strings.Contains(warnings[0], want) {
							t.Errorf("step %d: event %q does not say %q", i, warnings[0], want)
						}
					}
					if msg := h.ready()["message"]; !strings.Contains(warnings[0], msg.(string)) {
						t.Errorf("step %d: Ready message %q is not the event's %q", i, msg, warnings[0])
					}
				}
			}
			if obs.child != tt.backoffs {
				t.Errorf("ChildBackoff called %d times, want %d", obs.child, tt.backoffs)
			}
		})
	}
}

// What is remembered of a contended child goes with its parent, and is
// swept once quiet; a child still backing off is kept.
func TestChildGuardForgets(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	g := newChildGuard(func() time.Time { return now })
	key := func(parent, name string) contendKey {
		return contendKey{parent: types.UID("uid-" + parent), child: childRef{id: "config", kind: schema.GroupKind{Kind: "ConfigMap"}, namespace: "team", name: name}}
	}
	for range contendedAfter {
		g.repaired(key("a", "x"))
		g.repaired(key("b", "y"))
	}
	if wait, _, start := g.check(key("a", "x")); !start || wait != minBackoff {
		t.Fatalf("check = %v, %v; want a backoff of %v", wait, start, minBackoff)
	}
	g.forget("uid-b")
	if g.historyLocked(key("b", "y"), false) != nil {
		t.Errorf("b's child remembered after b was forgotten")
	}
	now = now.Add(30 * time.Second)
	g.sweep(time.Second)
	if g.historyLocked(key("a", "x"), false) == nil {
		t.Errorf("a child backing off was swept")
	}
	now = now.Add(contendedWindow + maxBackoff)
	g.sweep(time.Second)
	if len(g.parents) != 0 {
		t.Errorf("%d parents' quiet children remembered after a sweep", len(g.parents))
	}
}

// What kgen remembers of the marks it wrote (to tell a rewrite of the same
// marks, a repair, from a change of the rule) differs exactly when
// MarksDiffer finds a difference: else a rule's change of a mark that the
// fingerprint left out (a deletionPolicy of a child with no
// ownerReference, a serviceAccount) would count as a fight.
func TestMarksOfAgreesWithMarksDiffer(t *testing.T) {
	base := func() *unstructured.Unstructured {
		o := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap"}}
		o.SetLabels(map[string]string{LabelManagedBy: ManagedBy, LabelRule: "app", LabelParentUID: "uid-parent", LabelChild: "config"})
		o.SetAnnotations(map[string]string{AnnotationParent: "team/web"})
		return o
	}
	var variants []*unstructured.Unstructured
	for _, k := range markLabels {
		o := base()
		l := o.GetLabels()
		l[k] = "other"
		o.SetLabels(l)
		variants = append(variants, o)
	}
	for _, k := range markAnnotations {
		o := base()
		a := o.GetAnnotations()
		a[k] = "other"
		o.SetAnnotations(a)
		variants = append(variants, o)
	}
	owned := base()
	owned.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "App", Name: "web", UID: "uid-parent", Controller: new(true)}})
	variants = append(variants, owned)
	unrelated := base()
	unrelated.SetAnnotations(map[string]string{AnnotationParent: "team/web", "note": "not a mark"})
	variants = append(variants, unrelated)
	for _, a := range append(variants, base()) {
		for _, b := range variants {
			if differ, same := len(MarksDiffer(a, b)) > 0, marksOf(a) == marksOf(b); differ == same {
				t.Errorf("MarksDiffer = %v but marksOf equal = %t:\n%v\n%v", MarksDiffer(a, b), same, a.Object["metadata"], b.Object["metadata"])
			}
		}
	}
}

// A child whose template reads what changes many times a second (another
// child's status here; across parents, an input that is another parent's
// child, which reads this one: a loop no load-time check can see) is not
// updated as often: after more than 10 updates in a minute they come at
// most one per childFollowSpacing, the last value lands, and a change of
// the parent or the rule lands at once. The first hold is told once (a
// Warning event and the metric); a child that follows at most 10 times a
// minute is never held, and nothing is told.
func TestChildFollowsAtBoundedRate(t *testing.T) {
	follow := strings.Replace(appRule, "      data: ${parent.spec.data}\n",
		"      data: {n: \"${string(children.deploy.?status.?n.orValue(0))}\"}\n", 1)
	configWrites := func(h *harness) int {
		return len(slices.DeleteFunc(h.api.writes(), func(w string) bool { return !strings.HasSuffix(w, "configmaps team/web-config") }))
	}
	// change sets the Deployment's status.n, as its controller would.
	change := func(h *harness, n int) {
		d := h.api.get(deployGVK, "team", "web")
		d.Object["status"] = map[string]any{"n": int64(n)}
		d.SetResourceVersion("")
		h.api.add(d)
	}
	configN := func(h *harness) string {
		n, _, _ := unstructured.NestedString(h.api.get(cmGVK, "team", "web-config").Object, "data", "n")
		return n
	}
	for _, tc := range []struct {
		name    string
		every   time.Duration
		changes int
		writes  int
		spaced  int
	}{
		// 11 updates in the first 2 s, then one at 12 s; 100 changes
		// take 20 s.
		{"five a second", 200 * time.Millisecond, 100, 12, 1},
		// Never more than 10 in a minute: every change is followed.
		{"every six seconds", 6 * time.Second, 30, 30, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obs := &countingObserver{}
			h := newHarness(t, follow, func(c *Config) { c.Observer = obs })
			h.converge(appParent(nil))
			h.drain()
			writes := 0
			var last Result
			for i := 1; i <= tc.changes; i++ {
				change(h, i)
				h.api.resetRequests()
				res, err := h.reconcile(h.api.get(appGVK, "team", "web"))
				if err != nil {
					t.Fatal(err)
				}
				w := configWrites(h)
				if w == 0 && res.RequeueAfter <= 0 {
					t.Fatalf("change %d: the child was not updated and no requeue asked for", i)
				}
				writes += w
				last = res
				h.now = h.now.Add(tc.every)
			}
			if writes != tc.writes {
				t.Errorf("updates of the child for %d changes = %d, want %d", tc.changes, writes, tc.writes)
			}
			h.now = h.now.Add(last.RequeueAfter - tc.every)
			if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
				t.Fatal(err)
			}
			if got, want := configN(h), fmt.Sprint(tc.changes); got != want {
				t.Errorf("data.n = %s after the requeue, want the last value %s", got, want)
			}
			var warnings []string
			for _, e := range h.drain() {
				if strings.HasPrefix(e, "Warning") {
					warnings = append(warnings, e)
				}
			}
			if len(warnings) != tc.spaced || obs.spaced != tc.spaced {
				t.Errorf("warnings = %q, metric %d; want %d %s", warnings, obs.spaced, tc.spaced, ReasonChildFollowSpaced)
			}
			for _, e := range warnings {
				if !strings.Contains(e, ReasonChildFollowSpaced) || !strings.Contains(e, "child config") || !strings.Contains(e, "at most once every 10s") {
					t.Errorf("event %q, want %s naming the child and the spacing", e, ReasonChildFollowSpaced)
				}
			}
		})
	}
	// While spaced, a change of the parent, then of the rule, lands at
	// once, with the template's inputs as they are; a loop that goes on
	// stays spaced, and is told once.
	t.Run("parent and rule changes not held", func(t *testing.T) {
		obs := &countingObserver{}
		h := newHarness(t, follow, func(c *Config) { c.Observer = obs })
		h.converge(appParent(nil))
		n := 0
		held := func() bool {
			t.Helper()
			n++
			change(h, n)
			h.api.resetRequests()
			res, err := h.reconcile(h.api.get(appGVK, "team", "web"))
			if err != nil {
				t.Fatal(err)
			}
			h.now = h.now.Add(100 * time.Millisecond)
			return configWrites(h) == 0 && res.RequeueAfter > 0
		}
		for i := 0; i < 11; i++ {
			if held() {
				t.Fatalf("update %d held, want the first 11 in a minute written", i+1)
			}
		}
		if !held() {
			t.Fatal("the 12th update within a minute was not held")
		}
		change(h, 1000)
		h.setSpec(map[string]any{"image": "nginx:2"})
		h.api.resetRequests()
		if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
			t.Fatal(err)
		}
		if got := configN(h); got != "1000" {
			t.Errorf("data.n = %s after the parent changed during the spacing, want 1000 written at once", got)
		}
		h.rule = parseRule(t, strings.Replace(follow, "metadata: {name: \"${parent.metadata.name}\"}", "metadata: {name: \"${parent.metadata.name}\", labels: {v: \"2\"}}", 1))
		change(h, 2000)
		if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
			t.Fatal(err)
		}
		if got := configN(h); got != "2000" {
			t.Errorf("data.n = %s after the rule changed during the spacing, want 2000 written at once", got)
		}
		// A loop going on for minutes: one update per spacing, told once.
		writes := 0
		for i := 0; i < 3*60*5; i++ {
			if !held() {
				writes++
			}
			h.now = h.now.Add(100 * time.Millisecond)
		}
		if writes > 3*11+3 {
			t.Errorf("%d updates in 3 minutes of changes 5 times a second, want at most %d", writes, 3*11+3)
		}
		if obs.spaced != 2 {
			t.Errorf("spacings told = %d, want 2 (after the rule changed, the count starts again)", obs.spaced)
		}
	})
}
