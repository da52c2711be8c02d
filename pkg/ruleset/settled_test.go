package ruleset

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A new Rule object that conflicts with a running rule (it may select the
// same parents) never ran, and holds no parent: it does not keep the set
// from being Settled, which would stop every sweep of every rule (a
// review found 85a974b did).
func TestNewConflictingRuleDoesNotUnsettle(t *testing.T) {
	ctx := context.Background()
	s := newObjectSet(t)
	s.loaded.Store(true)
	mk := func(doc string, uid string, gen int64) *unstructured.Unstructured {
		return ruleObject(t, doc, uid, gen, nil)
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
