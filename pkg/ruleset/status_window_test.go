package ruleset

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	"kgen.dev/kgen/pkg/controller"
	"kgen.dev/kgen/rules"
)

// A review found: recompute kicks writeStatuses (kickLocked, under s.mu) before it
// hands the new set to the controller (Apply). A writeAll that runs in
// between (the woken writer goroutine, or its 1 s ticker) sees s.applied
// = the new version while the controller still reports the old one as
// running with no Next: it writes observedGeneration 2, Ready True "the
// rule runs" and status.running = generation 2, for a version this
// replica has not even been handed yet, let alone tried. 77d43c6 means to
// write nothing until the new version was tried.
func TestNoStatusForAVersionNotYetHandedOver(t *testing.T) {
	ctx := context.Background()
	mk := func(expr string, gen int64) *unstructured.Unstructured {
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(ruleDoc("obj", expr)), &obj.Object); err != nil {
			t.Fatal(err)
		}
		obj.SetUID("u1")
		obj.SetGeneration(gen)
		return obj
	}
	v1 := mk("parent.spec.image", 1)
	client := fakeClient(appCRD(t), v1)
	var patches []map[string]any
	client.PrependReactor("patch", "rules", func(a clienttesting.Action) (bool, runtime.Object, error) {
		var body map[string]any
		_ = json.Unmarshal(a.(clienttesting.PatchAction).GetPatch(), &body)
		patches = append(patches, body)
		return true, nil, nil
	})
	p := &switchProgress{}
	inWindow := false
	done := make(chan struct{})
	var s *Set
	apply := func([]*rules.Rule) {
		if inWindow {
			// The writer, woken by recompute's kick, runs before the
			// controller has the new set (given 200 ms to, should a
			// fix make it wait for the hand-over).
			go func() { s.writeAll(ctx); close(done) }()
			select {
			case <-done:
			case <-time.After(200 * time.Millisecond):
			}
			p.mu.Lock()
			p.st = controller.RuleState{Running: true, Synced: true, Next: &controller.RuleState{Waiting: controller.NotStarted}}
			p.mu.Unlock()
		}
	}
	var err error
	s, err = New(Config{Objects: true, Client: client, Resources: serveApps, Progress: p, Apply: apply})
	if err != nil {
		t.Fatal(err)
	}
	s.observe(ctx, v1, false)
	s.loaded.Store(true)
	s.recompute(ctx)
	p.mu.Lock()
	p.st = controller.RuleState{Running: true, Synced: true}
	p.mu.Unlock()
	s.writeAll(ctx)
	if len(patches) != 1 {
		t.Fatalf("setup: %d status writes for generation 1 running, want 1", len(patches))
	}
	// An edit: generation 2.
	inWindow = true
	if !s.observe(ctx, mk("parent.metadata.name", 2), false) {
		t.Fatal("setup: generation 2 not taken")
	}
	s.recompute(ctx)
	<-done
	for _, body := range patches[1:] {
		st, _ := body["status"].(map[string]any)
		b, _ := json.Marshal(st)
		if strings.Contains(string(b), `"running":{"generation":2`) || st["observedGeneration"] == float64(2) {
			t.Errorf("status written before the controller was handed generation 2: %s", b)
		}
	}
}
