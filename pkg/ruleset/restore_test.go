package ruleset

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"kgen.dev/kgen/pkg/controller"
	"kgen.dev/kgen/rules"
)

// A Rule object's status records the version kgen runs (status.running),
// and a kgen that starts while the object's latest version is invalid runs
// that version again: the previous valid version keeps running across a
// restart too, so its parents are repaired and finalized. A recorded
// version that is not valid under this kgen (or none) runs nothing, as
// before; one that no longer fits its CRD runs (see Admit).
func TestRuleObjectRestoredAtStart(t *testing.T) {
	ctx := context.Background()
	object := func(t *testing.T, gen int64, expr string, status map[string]any) *unstructured.Unstructured {
		return ruleObject(t, ruleDoc("r", expr), "uid-r", gen, status)
	}
	status := func(s *Set) map[string]any {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.statusLocked("r", s.objects["r"])
	}
	ran := func(st map[string]any) (int64, string) {
		gen, _, _ := unstructured.NestedInt64(st, "running", "generation")
		var expr string
		if children, ok, _ := unstructured.NestedSlice(st, "running", "spec", "children"); ok && len(children) > 0 {
			expr, _, _ = unstructured.NestedString(children[0].(map[string]any), "template", "data", "v")
		}
		return gen, expr
	}
	runningExpr := func(s *Set) string {
		s.mu.Lock()
		defer s.mu.Unlock()
		r := s.applied["r"]
		if r == nil {
			return ""
		}
		return r.Children[0].Template.Expressions()[0].String()
	}

	// The first kgen runs generation 1 and records it.
	first := newObjectSet(t)
	if !first.observe(ctx, object(t, 1, "parent.spec.image", nil), false) {
		t.Fatal("a valid Rule was not taken")
	}
	first.recompute(ctx)
	recorded := status(first)
	if gen, expr := ran(recorded); gen != 1 || expr != "${parent.spec.image}" {
		t.Fatalf("status.running = generation %d, data.v %q; want 1, ${parent.spec.image}", gen, expr)
	}
	// Its own invalid generation 2 keeps generation 1 running, and recorded.
	if first.observe(ctx, object(t, 2, "parent.spec.image +", recorded), false) {
		t.Error("an invalid version was taken")
	}
	first.recompute(ctx)
	if gen, _ := ran(status(first)); gen != 1 {
		t.Errorf("status.running.generation = %d after an invalid version, want 1", gen)
	}

	tests := []struct {
		name    string
		status  map[string]any
		want    string // the running version's data, "" for none
		message string
	}{{
		name: "recorded version runs", status: recorded,
		want: "${parent.spec.image}", message: "the rule runs (its previous valid version, of generation 1: the latest is not accepted)",
	}, {
		name: "nothing recorded", message: "no valid version of the rule runs",
	}, {
		name: "the recorded version is invalid under this kgen",
		status: func() map[string]any {
			spec := object(t, 1, "parent.spec.image +", nil).Object["spec"]
			return map[string]any{"running": map[string]any{"generation": int64(1), "spec": spec}}
		}(),
		message: "no valid version of the rule runs",
	}, {
		// It ran, and a CRD changed under it while kgen was stopped: it
		// runs, as it would have kept running (Admit reports it).
		name: "the recorded version no longer fits its CRD",
		status: func() map[string]any {
			spec := object(t, 1, "parent.spec.imgae", nil).Object["spec"]
			return map[string]any{"running": map[string]any{"generation": int64(1), "spec": spec}}
		}(),
		want: "${parent.spec.imgae}", message: "the rule runs (its previous valid version, of generation 1: the latest is not accepted)",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newObjectSet(t)
			taken := s.observe(ctx, object(t, 2, "parent.spec.image +", tt.status), false)
			if taken != (tt.want != "") {
				t.Errorf("observe() = %t, want %t", taken, tt.want != "")
			}
			s.recompute(ctx)
			if got := runningExpr(s); got != tt.want {
				t.Errorf("running version's data = %q, want %q", got, tt.want)
			}
			st := status(s)
			conds := st["conditions"].([]any)
			accepted, ready := conds[0].(map[string]any), conds[1].(map[string]any)
			if accepted["status"] != "False" || !strings.Contains(fmt.Sprint(accepted["message"]), "spec.children[0].template.data.v") {
				t.Errorf("Accepted = %v, want False naming the latest version's error", accepted)
			}
			if ready["message"] != tt.message {
				t.Errorf("Ready message = %q, want %q", ready["message"], tt.message)
			}
			// What the status records is kept, also while no version
			// runs: kgen's forced apply of the status would erase it,
			// and a later restart would have nothing to run.
			if gen, _ := ran(st); (gen == 1) != (tt.status != nil) {
				t.Errorf("status.running.generation = %d; want the recorded one kept", gen)
			}
			if tt.want == "" {
				return
			}
			// Fixed: the new version runs and is recorded; the restored
			// one is forgotten.
			if !s.observe(ctx, object(t, 3, "parent.metadata.name", st), false) {
				t.Fatal("the fixed version was not taken")
			}
			s.recompute(ctx)
			if gen, expr := ran(status(s)); gen != 3 || expr != "${parent.metadata.name}" {
				t.Errorf("status.running = generation %d, data.v %q; want 3, ${parent.metadata.name}", gen, expr)
			}
			if n := len(s.objects["r"].versions); n != 1 {
				t.Errorf("%d versions kept, want the one that runs", n)
			}
		})
	}
}

// At start, r's latest version is invalid and its status records a valid
// version; another Rule object, a, may select the same parents and sorts
// first by name. The recorded version ran before, so it runs and a is
// blamed; and a version that does not run keeps what the status records,
// and keeps the set from being Settled if it ran before (its parents have
// not left it).
func TestRestoredVersionWinsAConflictAtStart(t *testing.T) {
	ctx := context.Background()
	s := newObjectSet(t)
	s.loaded.Store(true)
	mk := func(doc string, uid string, gen int64) *unstructured.Unstructured {
		return ruleObject(t, doc, uid, gen, nil)
	}
	good := mk(ruleDoc("r", "parent.spec.image"), "uid-r", 1)
	recorded := map[string]any{"running": map[string]any{"generation": int64(1), "spec": good.Object["spec"]}}
	r := mk(ruleDoc("r", "parent.spec.image +"), "uid-r", 2)
	r.Object["status"] = recorded
	a := mk(strings.Replace(ruleDoc("a", "parent.spec.image"), "namespaces: [a]", "namespaces: [r]", 1), "uid-a", 1)
	s.observe(ctx, a, false)
	s.observe(ctx, r, false)
	s.recompute(ctx)
	s.mu.Lock()
	st := s.statusLocked("r", s.objects["r"])
	applied := s.applied["r"]
	s.mu.Unlock()
	t.Logf("applied[r]=%v settled=%t status=%v", applied != nil, s.Settled(), st)
	if _, ok := st["running"]; !ok {
		t.Errorf("status.running is omitted: kgen's forced apply of the status removes the recorded version")
	}
	if applied == nil {
		t.Error("the recorded version of r does not run: the conflict was blamed on it")
	}
	s.mu.Lock()
	aRuns := s.applied["a"] != nil
	aStatus := s.statusLocked("a", s.objects["a"])
	s.mu.Unlock()
	if aRuns {
		t.Error("rule a runs next to r, which may select the same parents")
	}
	if _, ok := aStatus["running"]; ok {
		t.Error("rule a, which never ran, has a status.running")
	}
	if !s.Settled() {
		t.Error("Settled() is false: a, which never ran, holds no parent, and must not stop every sweep")
	}
	// Had a run before (its status records a version), its parents may
	// carry kgen's finalizer: nothing is released while it does not run.
	ranA := a.DeepCopy()
	ranA.Object["status"] = map[string]any{"running": map[string]any{"generation": int64(1), "spec": a.Object["spec"]}}
	s.observe(ctx, ranA, false)
	if s.Settled() {
		t.Error("Settled() is true while a valid version of a, which ran before, does not run: sweeps may release its parents")
	}
}

// gen1 runs; gen2 is valid but cannot start (the controller keeps gen1 and
// reports gen2 as Next): status.running keeps recording gen1, which a
// restart would run, not gen2, which cannot start.
func TestRunningRecordsTheVersionThatRuns(t *testing.T) {
	ctx := context.Background()
	s := newObjectSet(t)
	mk := func(expr string, gen int64, status map[string]any) *unstructured.Unstructured {
		return ruleObject(t, ruleDoc("r", expr), "uid-r", gen, status)
	}
	status := func() map[string]any {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.statusLocked("r", s.objects["r"])
	}
	s.observe(ctx, mk("parent.spec.image", 1, nil), false)
	s.recompute(ctx)
	written := status() // as kgen writes it
	if gen, _, _ := unstructured.NestedInt64(written, "running", "generation"); gen != 1 {
		t.Fatalf("status.running.generation = %d while generation 1 runs", gen)
	}
	// Generation 2 is handed to the controller, which keeps running 1.
	s.cfg.Progress = progress{Running: true, Synced: true, Next: &controller.RuleState{Waiting: "kind Foo is not served", KindNotServed: true}}
	s.observe(ctx, mk("parent.metadata.name", 2, written), false)
	s.recompute(ctx)
	st := status()
	ready := st["conditions"].([]any)[1].(map[string]any)
	if gen, _, _ := unstructured.NestedInt64(st, "running", "generation"); gen != 1 {
		t.Errorf("status.running.generation = %d while Ready says %q", gen, ready["message"])
	}
	// Once it runs, it is recorded.
	s.cfg.Progress = progress{Running: true, Synced: true}
	if gen, _, _ := unstructured.NestedInt64(status(), "running", "generation"); gen != 2 {
		t.Errorf("status.running.generation = %d once generation 2 runs", gen)
	}
}

// Rule web ran (its status records its latest version) and aaa, which may
// select the same parents and sorts first by name, was rejected for it. At
// a restart web keeps running and aaa is rejected again: aaa never ran, so
// it must not take web's parents and prune web's children. And a new
// version of web runs although it conflicts with aaa, which runs nowhere.
func TestRunningRuleWinsAConflictAtStart(t *testing.T) {
	ctx := context.Background()
	var handed [][]string // the names of each set handed to Apply
	s, err := New(Config{Objects: true, Client: fakeClient(appCRD(t)), Resources: serveApps,
		CRDs:     &CRDs{Client: fakeClient(appCRD(t)), Resources: serveApps},
		Progress: progress{Running: true, Synced: true}, Apply: func(set []*rules.Rule) {
			var names []string
			for _, r := range set {
				names = append(names, r.Name)
			}
			handed = append(handed, names)
		}})
	if err != nil {
		t.Fatal(err)
	}
	web := ruleObject(t, ruleDoc("web", "parent.spec.image"), "uid-web", 3, nil)
	web.Object["status"] = map[string]any{"running": map[string]any{"generation": int64(3), "spec": web.Object["spec"]}}
	b := ruleObject(t, strings.Replace(ruleDoc("aaa", "parent.spec.image"), "namespaces: [aaa]", "namespaces: [web]", 1), "uid-b", 1, nil)
	// As the informer's first list hands them over, one by one: nothing
	// is applied before the last is observed.
	for _, o := range []*unstructured.Unstructured{b, web} {
		if s.observe(ctx, o, false) {
			s.recompute(ctx)
		}
	}
	s.loaded.Store(true)
	s.recompute(ctx)
	if want := [][]string{{"web"}}; fmt.Sprint(handed) != fmt.Sprint(want) {
		t.Errorf("the sets handed to Apply at start: %q, want %q", handed, want)
	}
	runs := func(name string) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.applied[name] != nil
	}
	if !runs("web") || runs("aaa") {
		t.Fatalf("after a restart web runs: %t, aaa runs: %t; want web, which ran before, and not aaa", runs("web"), runs("aaa"))
	}
	// A new version of web (generation 4, not recorded yet) conflicts
	// with aaa too: web's runs, aaa does not.
	web4 := ruleObject(t, ruleDoc("web", "parent.metadata.name"), "uid-web", 4, nil)
	web4.Object["status"] = web.Object["status"]
	s.observe(ctx, web4, false)
	s.recompute(ctx)
	s.mu.Lock()
	running, want := s.applied["web"], s.objects["web"].rule
	s.mu.Unlock()
	if running != want || runs("aaa") {
		t.Errorf("the new version of web runs: %t, aaa runs: %t; want only web's new version", running == want, runs("aaa"))
	}
}
