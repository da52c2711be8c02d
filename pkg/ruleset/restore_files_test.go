package ruleset

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	"kgen.dev/kgen/pkg/controller"
	"kgen.dev/kgen/rules"
)

// kgen starts with a rules file whose rule does not fit the parent kind's
// CRD (it reads a field the CRD lacks: a helm upgrade to it, then a pod
// restarted). The version kgen's record says ran before runs in its
// place, as a running kgen keeps it; the file's version replaces it once
// it fits. Without a document in the record (an older kgen wrote it), or
// when the file's version is the one that ran, nothing is restored.
func TestRestoreFilesRunsTheVersionThatRan(t *testing.T) {
	ctx := context.Background()
	good, err := rules.Parse("old.yaml", []byte(ruleDoc("r", "parent.spec.image")), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ran := good[0]
	for _, tc := range []struct {
		name     string
		file     string // the rule r as the file has it
		record   map[string]Ran
		restored bool
	}{
		{"a version that does not fit", ruleDoc("r", "parent.spec.imgae"),
			map[string]Ran{"r": {Version: ran.Version(), Document: ran.Document()}}, true},
		{"no document recorded", ruleDoc("r", "parent.spec.imgae"),
			map[string]Ran{"r": {Version: ran.Version()}}, false},
		{"nothing recorded", ruleDoc("r", "parent.spec.imgae"), nil, false},
		{"a version that fits", ruleDoc("r", "parent.spec.image + '-2'"),
			map[string]Ran{"r": {Version: ran.Version(), Document: ran.Document()}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "rules.yaml")
			if err := os.WriteFile(file, []byte(tc.file), 0o644); err != nil {
				t.Fatal(err)
			}
			var applied [][]*rules.Rule
			reads := 0
			s, err := New(Config{Paths: []string{file}, Client: fakeClient(appCRD(t)), Resources: serveApps,
				CRDs:  &CRDs{Client: fakeClient(appCRD(t)), Resources: serveApps},
				Ran:   func(context.Context) (map[string]Ran, error) { reads++; return tc.record, nil },
				Apply: func(rs []*rules.Rule) { applied = append(applied, rs) }})
			if err != nil {
				t.Fatal(err)
			}
			fromFile := s.Rules()[0]
			s.ReadFiles(ctx)
			s.RestoreFiles(ctx)
			got := s.Rules()[0]
			if fits := tc.name == "a version that fits"; fits != (reads == 0) {
				// The record is read only for a rule that does not fit
				// (a start with none made a request kgen may not have
				// the right to: TestRunSecureMetrics).
				t.Errorf("the record was read %d times, for a rule that fits: %v", reads, fits)
			}
			if !tc.restored {
				if got != fromFile || len(applied) != 0 {
					t.Errorf("rule r = %s, sets applied %d; want the file's version %s, nothing applied", got.Version(), len(applied), fromFile.Version())
				}
				return
			}
			if got.Version() != ran.Version() || len(applied) != 1 || applied[0][0] != got {
				t.Fatalf("rule r = %s, sets applied %d; want the recorded version %s applied", got.Version(), len(applied), ran.Version())
			}
			// It starts: the controller's record says this version ran.
			if err := s.Admit(ctx, got, true); err != nil {
				t.Errorf("Admit(the restored version) = %v", err)
			}
			// The file's version still does not fit: the restored one
			// stays.
			s.ReadFiles(ctx)
			if s.Rules()[0] != got {
				t.Error("the restored version was replaced while the file's version does not fit")
			}
			// The file fixed: its version runs.
			if err := os.WriteFile(file, []byte(ruleDoc("r", "parent.spec.image + '-3'")), 0o644); err != nil {
				t.Fatal(err)
			}
			s.ReadFiles(ctx)
			if now := s.Rules()[0]; now == got || now.Version() == ran.Version() {
				t.Error("the file's fixed version did not replace the restored one")
			}
		})
	}
}

// A rules file whose latest version is invalid counts in InvalidFiles (the
// metric kgen_rules_files_invalid) while the previous version runs, and
// stops counting once the file is fixed.
func TestInvalidFilesCounted(t *testing.T) {
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "rules.yaml")
	write := func(doc string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(ruleDoc("r", "parent.spec.image"))
	s, err := New(Config{Paths: []string{file}, Client: fakeClient(appCRD(t)), Resources: serveApps,
		CRDs: &CRDs{Client: fakeClient(appCRD(t)), Resources: serveApps}})
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		doc  string
		want int
	}{
		{ruleDoc("r", "parent.spec.image +"), 1}, // does not compile
		{ruleDoc("r", "parent.spec.imgae"), 1},   // does not fit the CRD
		{ruleDoc("r", "parent.spec.image + '-2'"), 0},
	} {
		write(step.doc)
		s.ReadFiles(ctx)
		if got := s.InvalidFiles(); got != step.want {
			t.Errorf("InvalidFiles() = %d after %q, want %d", got, step.doc, step.want)
		}
	}

	// kgen starts with a version that does not fit, and no version ran
	// before (a live check: the rule waited, and the gauge said 0).
	write(ruleDoc("r", "parent.spec.imgae"))
	s, err = New(Config{Paths: []string{file}, Client: fakeClient(appCRD(t)), Resources: serveApps,
		CRDs: &CRDs{Client: fakeClient(appCRD(t)), Resources: serveApps}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Admit(ctx, s.Rules()[0], false); err == nil {
		t.Fatal("Admit() = nil for a version that does not fit")
	}
	if got := s.InvalidFiles(); got != 1 {
		t.Errorf("InvalidFiles() = %d while the file's rule waits, not fitting its CRD, want 1", got)
	}
	// A running version checked again after its CRD changed keeps
	// running: not counted.
	write(ruleDoc("r", "parent.spec.image"))
	s, err = New(Config{Paths: []string{file}, Client: fakeClient(appCRD(t)), Resources: serveApps,
		CRDs: &CRDs{Client: fakeClient(appCRD(t)), Resources: serveApps}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Admit(ctx, s.Rules()[0], false); err != nil {
		t.Fatal(err)
	}
	s.Recheck(ctx, s.Rules()[0])
	if got := s.InvalidFiles(); got != 0 {
		t.Errorf("InvalidFiles() = %d for a rule that runs, want 0", got)
	}
}

// switchProgress is a Progress whose state the test changes.
type switchProgress struct {
	mu sync.Mutex
	st controller.RuleState
}

func (p *switchProgress) State(string) (controller.RuleState, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.st, true
}

// A replica that has not tried to start a rule yet (just started, or a
// shard restarted with its id) writes nothing of it: not Ready False "not
// started" while the other replicas run it (a live audit). Once it has
// tried, it writes.
func TestStatusNotWrittenBeforeTheRuleWasTried(t *testing.T) {
	ctx := context.Background()
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(ruleDoc("obj", "parent.spec.image")), &obj.Object); err != nil {
		t.Fatal(err)
	}
	obj.SetUID("u1")
	obj.SetGeneration(1)
	client := fakeClient(appCRD(t), obj)
	client.PrependReactor("patch", "rules", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, nil // written
	})
	p := &switchProgress{} // the controller does not know the rule yet
	s, err := New(Config{Objects: true, Client: client, Resources: serveApps, Progress: p, Apply: func([]*rules.Rule) {}})
	if err != nil {
		t.Fatal(err)
	}
	statusWrites := func() int {
		n := 0
		for _, a := range client.Actions() {
			if a.GetSubresource() == "status" {
				n++
			}
		}
		return n
	}
	if !s.observe(ctx, obj, false) {
		t.Fatal("a valid Rule object was not taken")
	}
	// Seen, but the set with every Rule object not handed over yet (a
	// live check: every start wrote Ready False "no valid version of the
	// rule runs" for a second).
	s.writeAll(ctx)
	if n := statusWrites(); n != 0 {
		t.Errorf("%d status writes before the Rule objects were all read, want none", n)
	}
	s.loaded.Store(true)
	s.recompute(ctx)
	p.mu.Lock()
	p.st = controller.RuleState{Waiting: controller.NotStarted} // handed to the controller
	p.mu.Unlock()
	s.writeAll(ctx)
	if n := statusWrites(); n != 0 {
		t.Errorf("%d status writes before this replica tried to start the rule, want none", n)
	}
	p.mu.Lock()
	p.st = controller.RuleState{Running: true, Synced: true}
	p.mu.Unlock()
	s.writeAll(ctx)
	if n := statusWrites(); n != 1 {
		t.Errorf("%d status writes once the rule runs, want 1", n)
	}
	// A new version, not tried yet (a live check: every edit of a Rule
	// flipped its Ready to False "not started" for a second), then
	// running.
	p.mu.Lock()
	p.st = controller.RuleState{Running: true, Synced: true, Next: &controller.RuleState{Waiting: controller.NotStarted}}
	p.mu.Unlock()
	s.writeAll(ctx)
	if n := statusWrites(); n != 1 {
		t.Errorf("%d status writes while a new version was not tried yet, want none more", n)
	}
	p.mu.Lock()
	p.st = controller.RuleState{Running: true, Synced: true, Next: &controller.RuleState{Waiting: "kind example.com/v1, Kind=Other is not served"}}
	p.mu.Unlock()
	s.writeAll(ctx)
	if n := statusWrites(); n != 2 {
		t.Errorf("%d status writes once the new version was tried and waits, want 2", n)
	}
}

// A file's rule that conflicts with another rule does not run, and counts
// as an invalid file (a live audit: nothing but the log told).
func TestInvalidFilesCountsConflicts(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	write := func(file, doc string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(a, ruleDoc("a", "parent.spec.image"))
	write(b, ruleDoc("b", "parent.spec.image"))
	s, err := New(Config{Paths: []string{a, b}, Client: fakeClient(appCRD(t)), Resources: serveApps,
		CRDs: &CRDs{Client: fakeClient(appCRD(t)), Resources: serveApps}, Apply: func([]*rules.Rule) {}})
	if err != nil {
		t.Fatal(err)
	}
	s.ReadFiles(ctx)
	if got := s.InvalidFiles(); got != 0 {
		t.Fatalf("InvalidFiles() = %d, want 0", got)
	}
	// b now selects a's parents too.
	write(b, strings.Replace(ruleDoc("b", "parent.spec.image"), "namespaces: [b]", "namespaces: [a]", 1))
	s.ReadFiles(ctx)
	if got := s.InvalidFiles(); got != 1 {
		t.Errorf("InvalidFiles() = %d while b conflicts with a, want 1", got)
	}
	write(b, ruleDoc("b", "parent.spec.image"))
	s.ReadFiles(ctx)
	if got := s.InvalidFiles(); got != 0 {
		t.Errorf("InvalidFiles() = %d once the conflict is gone, want 0", got)
	}
}
