package controller

import (
	"context"
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
	// A record that holds this kgen's rules: a parent whose children name
	// none of them is another kgen's.
	rec := &memRecord{scopes: map[string][]ChildScope{"r": {{GroupVersionKind: configMaps, Namespace: "ns"}}}}
	c := New(Config{Rules: rs, Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100), RulesLoaded: loaded.Load, Record: rec})
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

// A parent is another kgen's only on evidence: its children all name
// rules this kgen neither runs nor records, its record read. Being
// deleted, it is still the other kgen's to finalize.
func TestAnothers(t *testing.T) {
	child := object("v1", "ConfigMap", "c", "uid-c", "uid-p")
	labels := child.GetLabels()
	labels[reconcile.LabelRule] = "another-kgens"
	child.SetLabels(labels)
	ours := child.DeepCopy()
	labels = ours.GetLabels()
	labels[reconcile.LabelRule] = "gone"
	ours.SetLabels(labels)
	parent := object("example.com/v1", "Gadget", "p", "uid-p", "")
	deleting := parent.DeepCopy()
	now := metav1.Now()
	deleting.SetDeletionTimestamp(&now)

	c := New(Config{Record: &memRecord{scopes: map[string][]ChildScope{"gone": {{GroupVersionKind: configMaps, Namespace: "ns"}}}}})
	ctx := context.Background()
	if c.anothers(ctx, parent, []*unstructured.Unstructured{child}) {
		t.Error("a parent is another kgen's before the record was read")
	}
	if err := c.loadRecord(ctx); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		parent   *unstructured.Unstructured
		children []*unstructured.Unstructured
		want     bool
	}{
		{"children of unknown rules", parent, []*unstructured.Unstructured{child}, true},
		{"a child of a recorded rule", parent, []*unstructured.Unstructured{child, ours}, false},
		{"no children", parent, nil, false},
		{"being deleted", deleting, []*unstructured.Unstructured{child}, true},
	} {
		if got := c.anothers(ctx, tc.parent, tc.children); got != tc.want {
			t.Errorf("%s: anothers() = %v, want %v", tc.name, got, tc.want)
		}
	}

	// A new install's record holds nothing: it has no removed rules of
	// its own, so the parent is still another kgen's.
	empty := New(Config{Record: &memRecord{}})
	if err := empty.loadRecord(ctx); err != nil {
		t.Fatal(err)
	}
	if !empty.anothers(ctx, parent, []*unstructured.Unstructured{child}) {
		t.Error("a new install takes another kgen's parent for its own")
	}
}
