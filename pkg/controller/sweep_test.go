package controller

import (
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"

	"kgen.dev/kgen/pkg/reconcile"
	"kgen.dev/kgen/rules"
)

// When a rule starts, once every rule is loaded, the parents of its kind
// that carry kgen's finalizer and that no rule selects (running, waiting,
// on any version of the kind) are taken as having left: they left while
// kgen was not running. One whose children another kgen's rules made is
// not.
func TestSweepLeft(t *testing.T) { synctest.Test(t, testSweepLeft) }

func testSweepLeft(t *testing.T) {
	gadget := func(name, tier string, finalizer bool) runtime.Object {
		o := object("example.com/v1", "Gadget", name, "uid-"+name, "")
		o.SetLabels(map[string]string{"tier": tier})
		if finalizer {
			o.SetFinalizers([]string{reconcile.Finalizer})
		}
		return o
	}
	// The child of alien names a rule this kgen does not know: alien is
	// another kgen's parent (a second chart release), not one that left.
	alienChild := object("v1", "ConfigMap", "alien", "uid-alien-config", "uid-alien")
	labels := alienChild.GetLabels()
	labels[reconcile.LabelRule] = "another-kgens"
	alienChild.SetLabels(labels)
	client, m := fakeCluster(
		gadget("kept", "web", true),     // selected by the running rule
		gadget("left", "batch", true),   // selected by no rule: it left
		gadget("plain", "batch", false), // not kgen's
		gadget("versioned", "db", true), // selected by a rule of another version, waiting
		gadget("lonely", "none", false), // no finalizer, no rule
		gadget("alien", "batch", true),  // another kgen's
		alienChild,
	)
	rs, err := rules.Parse("rules.yaml", []byte(`apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: r}
spec:
  parent: {apiVersion: example.com/v1, kind: Gadget, namespaces: [ns], selector: {matchLabels: {tier: web}}}
  children:
`+configChild+`---
apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: r2}
spec:
  parent: {apiVersion: example.com/v1beta1, kind: Gadget, selector: {matchLabels: {tier: db}}}
  children:
`+configChild), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var loaded atomic.Bool
	c := New(Config{Rules: rs, Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100), RulesLoaded: loaded.Load})
	activateRule(t, c)
	waitState(t, c, "the rule to sync", func(s RuleState) bool { return s.Synced })
	leaving := func() []string {
		c.mu.Lock()
		defer c.mu.Unlock()
		var out []string
		for k := range maps.Keys(c.leaving) {
			out = append(out, k.Name)
		}
		slices.Sort(out)
		return out
	}
	time.Sleep(5 * time.Second)
	if got := leaving(); len(got) != 0 {
		t.Errorf("leaving = %v before every rule was loaded, want none", got)
	}
	loaded.Store(true)
	waitFor(t, "the sweep", func() bool { return len(leaving()) > 0 })
	synctest.Wait()
	if got, want := leaving(), []string{"left"}; !slices.Equal(got, want) {
		t.Errorf("leaving = %v, want %v", got, want)
	}
}
