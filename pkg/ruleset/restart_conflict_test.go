package ruleset

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// b ran generation 1 (recorded); its generation 2 overlaps web, which runs,
// so generation 2 waits and generation 1 keeps running (docs/rules.md). At a
// restart, generation 1 must keep running too.
func TestConflictingEditOfRunningRuleSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	web := ruleObject(t, ruleDoc("web", "parent.spec.image"), "uid-web", 1, nil)
	web.Object["status"] = map[string]any{"running": map[string]any{"generation": int64(1), "spec": web.Object["spec"]}}
	b1 := ruleObject(t, ruleDoc("b", "parent.spec.image"), "uid-b", 1, nil)
	b2 := ruleObject(t, strings.Replace(ruleDoc("b", "parent.spec.image"), "namespaces: [b]", "namespaces: [web]", 1), "uid-b", 2, nil)
	b2.Object["status"] = map[string]any{"running": map[string]any{"generation": int64(1), "spec": b1.Object["spec"]}}

	// Live: b's generation 1 runs, then generation 2 arrives and waits.
	live := newObjectSet(t)
	live.observe(ctx, web, false)
	live.observe(ctx, b1, false)
	live.recompute(ctx)
	live.observe(ctx, b2, false)
	live.recompute(ctx)
	live.mu.Lock()
	liveRuns := live.applied["b"] != nil
	live.mu.Unlock()
	if !liveRuns {
		t.Fatal("live: b's generation 1 stopped")
	}

	// Restart.
	s := newObjectSet(t)
	s.observe(ctx, web, false)
	s.observe(ctx, b2, false)
	s.recompute(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.applied["web"] == nil {
		t.Error("web does not run")
	}
	if s.applied["b"] == nil {
		t.Fatalf("after a restart b runs no version (conflict: %v); before it, generation 1 ran", s.objects["b"].conflict)
	}
	st := s.statusLocked("b", s.objects["b"])
	if gen, _, _ := unstructured.NestedInt64(st, "running", "generation"); gen != 1 {
		t.Errorf("status.running.generation = %d, want 1, the version that runs", gen)
	}
	if c := st["conditions"].([]any)[0].(map[string]any); c["type"] != "Accepted" || c["status"] != "False" || !strings.Contains(fmt.Sprint(c["message"]), "web") {
		t.Errorf("Accepted = %v, want False naming web", c)
	}
}
