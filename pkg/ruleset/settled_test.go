package ruleset

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"kgen.dev/kgen/rules"
)

// A new Rule object that conflicts with a running rule (it may select the
// same parents) never ran, and holds no parent: it does not keep the set
// from being Settled, which would stop every sweep of every rule (a
// review found 85a974b did).
func TestNewConflictingRuleDoesNotUnsettle(t *testing.T) {
	ctx := context.Background()
	s, err := New(Config{Objects: true, Client: fakeClient(appCRD(t)), Resources: serveApps,
		CRDs:     &CRDs{Client: fakeClient(appCRD(t)), Resources: serveApps},
		Progress: progress{Running: true, Synced: true}, Apply: func([]*rules.Rule) {}})
	if err != nil {
		t.Fatal(err)
	}
	s.loaded.Store(true)
	mk := func(doc string, uid string, gen int64) *unstructured.Unstructured {
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
			t.Fatal(err)
		}
		obj.SetUID(types.UID(uid))
		obj.SetGeneration(gen)
		return obj
	}
	r := mk(ruleDoc("r", "parent.spec.image"), "uid-r", 1)
	a := mk(strings.Replace(ruleDoc("a", "parent.spec.image"), "namespaces: [a]", "namespaces: [r]", 1), "uid-a", 1)
	s.observe(ctx, a, false)
	s.observe(ctx, r, false)
	for range 3 {
		s.recompute(ctx)
	}
	if !s.Settled() {
		t.Errorf("Settled() = false while two new valid Rule objects conflict: every sweep is blocked until a user fixes it")
	}
}
