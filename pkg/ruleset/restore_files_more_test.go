package ruleset

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"kgen.dev/kgen/pkg/reconcile"
	"kgen.dev/kgen/rules"
)

// restoredSet is a Set over a file whose rule r does not fit the App CRD,
// with a record that says the version reading parent.spec.image ran; it
// has run RestoreFiles.
func restoredSet(t *testing.T) (s *Set, file string, ran *rules.Rule) {
	t.Helper()
	ctx := context.Background()
	good, err := rules.Parse("old.yaml", []byte(ruleDoc("r", "parent.spec.image")), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ran = good[0]
	file = filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(file, []byte(ruleDoc("r", "parent.spec.imgae")), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err = New(Config{Paths: []string{file}, Client: fakeClient(appCRD(t)), Resources: serveApps,
		CRDs: &CRDs{Client: fakeClient(appCRD(t)), Resources: serveApps},
		Ran: func(context.Context) (map[string]Ran, error) {
			return map[string]Ran{"r": {Version: ran.Version(), Document: ran.Document()}}, nil
		},
		Apply: func([]*rules.Rule) {}})
	if err != nil {
		t.Fatal(err)
	}
	s.ReadFiles(ctx)
	s.RestoreFiles(ctx)
	if got := s.Rules()[0]; got.Version() != ran.Version() {
		t.Fatalf("not restored: %s", got.Version())
	}
	return s, file, ran
}

// The file goes back to the version that ran (helm rollback): the file's
// rule takes the place of the restored one, with the file's positions (a
// review: readFiles kept the restored rule "as it runs", and render errors
// on its parents named a Rule object "r" that does not exist).
func TestRestoredRuleGivesWayToTheFilesVersion(t *testing.T) {
	ctx := context.Background()
	s, file, _ := restoredSet(t)
	if err := os.WriteFile(file, []byte(ruleDoc("r", "parent.spec.image")), 0o644); err != nil {
		t.Fatal(err)
	}
	s.ReadFiles(ctx)
	r := s.Rules()[0]
	if r.Pos.File != file {
		t.Errorf("rule r from %s: Pos.File = %q, want %q", file, r.Pos.File, file)
	}
	if src := reconcile.ChildSource(r, "config"); !strings.HasPrefix(src, file) {
		t.Errorf("ChildSource(r, config) = %q, want a position in %s", src, file)
	}
}

// While the restored version runs, a Rule object of the same name is
// shadowed, and its Ready message says the file's latest version is
// invalid (a review: it looked the problem up by the restored rule's
// position, which is not the file's).
func TestShadowMessageOfRestoredFileRule(t *testing.T) {
	s, file, _ := restoredSet(t)
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kgen.dev/v1alpha1", "kind": "Rule",
		"metadata": map[string]any{"name": "r", "generation": int64(1), "uid": "u1"}}}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fileProblems[file] == nil {
		t.Fatalf("RestoreFiles set no problem for %s", file)
	}
	st := s.statusLocked("r", &object{obj: u, versions: map[*rules.Rule]version{}})
	conds, _ := st["conditions"].([]any)
	var msg string
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == ConditionReady {
			msg, _ = m["message"].(string)
		}
	}
	if !strings.Contains(msg, file) {
		t.Errorf("Ready message %q does not say the latest version of %s is invalid", msg, file)
	}
}
