package ruleset

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"kgen.dev/kgen/rules"
)

// kgen restarts. While it was stopped, a rules file gained rule "a", and
// Rule object b was edited (generation 2); b's status records generation 1.
// a, b1 and b2 all select namespace shared. The file rule a runs from the
// start (New hands it to the controller); b's versions are tier 0 (b1, the
// recorded one) and tier 1 (b2). docs/rules.md: "a version that runs ...
// goes first ... between two of those ... at start the first by name", so
// a, which runs and sorts first, must keep running.
func TestRecordedVersionDoesNotDisplaceRunningRule(t *testing.T) {
	ctx := context.Background()
	shared := func(doc string) string {
		return strings.Replace(doc, "namespaces: [", "namespaces: [shared, ", 1)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(shared(ruleDoc("a", "parent.spec.image"))), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Paths: []string{dir}, Objects: true, Client: fakeClient(appCRD(t)), Resources: serveApps,
		CRDs:     &CRDs{Client: fakeClient(appCRD(t)), Resources: serveApps},
		Progress: progress{Running: true, Synced: true}, Apply: func([]*rules.Rule) {}})
	if err != nil {
		t.Fatal(err)
	}
	if s.Rules()[0].Name != "a" {
		t.Fatal("file rule a does not run at start")
	}
	b1 := ruleObject(t, shared(ruleDoc("b", "parent.spec.image")), "uid-b", 1, nil)
	b2 := ruleObject(t, shared(ruleDoc("b", "parent.metadata.name")), "uid-b", 2, nil)
	b2.Object["status"] = map[string]any{"running": map[string]any{"generation": int64(1), "spec": b1.Object["spec"]}}
	s.loaded.Store(true)
	s.observe(ctx, b2, false)
	s.recompute(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.applied["a"] == nil {
		t.Fatalf("the file rule a, running since the start, was stopped; b runs generation %v in its place",
			s.objects["b"].versions[s.applied["b"]].generation)
	}
	if b := s.objects["b"]; s.applied["b"] != nil || b.conflict == nil || !strings.Contains(b.conflict.Error(), `"a"`) {
		t.Errorf("b runs %v, its conflict is %v; want b held back by a", s.applied["b"] != nil, b.conflict)
	}
}
