package controller

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"kgen.dev/kgen/pkg/reconcile"
	"kgen.dev/kgen/rules"
)

// moveRules are rule a (parents labelled tier=a, a ConfigMap child) and
// rule b (tier=b, a Deployment child) of one parent kind.
func moveRules(t *testing.T) []*rules.Rule {
	t.Helper()
	rs, err := rules.Parse("rules.yaml", []byte(`apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: a}
spec:
  parent: {apiVersion: example.com/v1, kind: Gadget, namespaces: [ns], selector: {matchLabels: {tier: a}}}
  children:
`+configChild+`---
apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: b}
spec:
  parent: {apiVersion: example.com/v1, kind: Gadget, namespaces: [ns], selector: {matchLabels: {tier: b}}}
  children:
`+deployChild), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func labelled(o *unstructured.Unstructured, key, value string) *unstructured.Unstructured {
	l := o.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l[key] = value
	o.SetLabels(l)
	return o
}

// startMoveRules runs rules a and b over a cluster with the objects until
// both have synced.
func startMoveRules(t *testing.T, objs ...*unstructured.Unstructured) *Controller {
	t.Helper()
	var in []runtime.Object
	for _, o := range objs {
		in = append(in, o)
	}
	client, m := fakeCluster(in...)
	c := New(Config{Rules: moveRules(t), Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100), Record: &memRecord{scopes: map[string][]ChildScope{}}})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		c.queue.ShutDown()
		c.watches.Shutdown()
	})
	for _, name := range []string{"a", "b"} {
		if err := c.activate(ctx, c.rules[name]); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "both rules to sync", func() bool {
		a, _ := c.State("a")
		b, _ := c.State("b")
		return a.Synced && b.Synced
	})
	return c
}

// A parent moved from rule a to rule b: b's reconciles see the children a
// made, also of a kind only a watches (to prune them), and events of those
// children reach b.
func TestChildrenOfMovedParent(t *testing.T) { synctest.Test(t, testChildrenOfMovedParent) }

func testChildrenOfMovedParent(t *testing.T) {
	parent := labelled(object("example.com/v1", "Gadget", "g", "p1", ""), "tier", "b")
	made := labelled(labelled(object("v1", "ConfigMap", "g", "c1", "p1"), reconcile.LabelChild, "config"), reconcile.LabelRule, "a")
	c := startMoveRules(t, parent, made)
	if got, want := childNames(c, "p1"), []string(nil); !slices.Equal(got, want) {
		t.Errorf("children for rule r (not running) = %v, want none", got)
	}
	var got []string
	for _, o := range c.Children("b", "p1") {
		got = append(got, o.GetKind()+"/"+o.GetName())
	}
	if want := []string{"ConfigMap/g"}; !slices.Equal(got, want) {
		t.Errorf("children of the parent for rule b = %v, want %v: rule a's child, which only a watches", got, want)
	}

	// An event of that child, on rule a's informer, queues the parent
	// for rule b, which holds it now.
	for c.queue.Len() > 0 {
		k, _ := c.queue.Get()
		c.queue.Done(k)
		c.queue.Forget(k)
	}
	cmKey := c.rules["a"].childRegs[0].Informer().Key()
	c.childHandler("a", cmKey)(made, false)
	if n := c.queue.Len(); n != 1 {
		t.Fatalf("queued %d keys, want 1", n)
	}
	k, _ := c.queue.Get()
	if k != (Key{Rule: "b", Namespace: "ns", Name: "g"}) {
		t.Errorf("queued %v, want rule b's key", k)
	}
	c.queue.Done(k)
	// An informer that rule b watches too tells b itself (b's handler):
	// rule a's handler of it does not queue b's key again.
	c.childHandler("a", c.rules["b"].childRegs[0].Informer().Key())(made, false)
	if n := c.queue.Len(); n != 0 {
		t.Errorf("queued %d keys for an informer rule b has, want 0", n)
	}
	// Nor does an informer of rule a that sees, in every namespace, a
	// child of rule b's kind that b watches in its namespace through an
	// informer of its own: a new version of rule a, registering on it,
	// must not reconcile rule b's parents (contract section 7).
	own := c.rules["b"].childRegs[0].Informer().Key()
	everywhere := own
	everywhere.Namespace = ""
	deployment := labelled(object("apps/v1", "Deployment", "g", "d1", "p1"), reconcile.LabelChild, "deploy")
	c.childHandler("a", everywhere)(deployment, false)
	if n := c.queue.Len(); n != 0 {
		t.Errorf("queued %d keys for a child rule b watches where it is, want 0", n)
	}
}

// In another rule's caches, a rule sees a parent's children made by a
// rule of its parent kind that is loaded (the parent moved from it), not
// those of a rule that was removed or whose parent kind changed: that rule
// let its parents go, and their children stay (contract §7). A live audit:
// a new rule deleted a removed rule's ServiceAccounts in the one namespace
// where another rule happened to watch ServiceAccounts, and left them in
// the others. A child whose rule label someone took off is seen, as before,
// and so is one of the rule's own in another rule's cache only.
func TestChildrenOfAReleasedParent(t *testing.T) { synctest.Test(t, testChildrenOfAReleasedParent) }

func testChildrenOfAReleasedParent(t *testing.T) {
	parent := labelled(object("example.com/v1", "Gadget", "g", "p1", ""), "tier", "b")
	child := func(name, uid, rule string) *unstructured.Unstructured {
		o := labelled(object("v1", "ConfigMap", name, uid, "p1"), reconcile.LabelChild, name)
		if rule != "" {
			o = labelled(o, reconcile.LabelRule, rule)
		}
		return o
	}
	c := startMoveRules(t, parent, child("moved", "c1", "a"), child("removed", "c2", "gone"), child("unlabelled", "c3", ""),
		child("own", "c4", "b")) // b's own, of a kind only a watches now

	var got []string
	for _, o := range c.Children("b", "p1") {
		got = append(got, o.GetName())
	}
	slices.Sort(got)
	if want := []string{"moved", "own", "unlabelled"}; !slices.Equal(got, want) {
		t.Errorf("children of the parent for rule b = %v, want %v: not the removed rule's", got, want)
	}
	// Rule a's own caches show it every child of the parent.
	got = nil
	for _, o := range c.Children("a", "p1") {
		got = append(got, o.GetName())
	}
	slices.Sort(got)
	if want := []string{"moved", "own", "removed", "unlabelled"}; !slices.Equal(got, want) {
		t.Errorf("children of the parent for rule a = %v, want %v", got, want)
	}
}

// While a relabelled parent is in two rules' caches, the rule whose cache
// holds the older version does not reconcile it.
func TestBehindAnotherRule(t *testing.T) {
	old := labelled(object("example.com/v1", "Gadget", "g", "p1", ""), "tier", "a")
	old.SetResourceVersion("7")
	moved := labelled(old.DeepCopy(), "tier", "b")
	moved.SetResourceVersion("8")
	other := moved.DeepCopy()
	other.SetUID(types.UID("p2")) // deleted and made again: another parent
	for _, tc := range []struct {
		name     string
		inA, inB *unstructured.Unstructured
		aBehind  bool
		bBehind  bool
	}{
		{name: "moved from a to b", inA: old, inB: moved, aBehind: true},
		{name: "moved from b to a", inA: moved, inB: old, bBehind: true},
		{name: "one version", inA: moved, inB: moved},
		{name: "only in b", inB: moved},
		{name: "another parent of the name", inA: old, inB: other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { behindCase(t, tc.inA, tc.inB, tc.aBehind, tc.bBehind) })
		})
	}
}

// behindCase puts a parent in rule a's and rule b's caches and checks
// whether each rule is behind.
func behindCase(t *testing.T, inA, inB *unstructured.Unstructured, aBehind, bBehind bool) {
	c := startMoveRules(t)
	for name, o := range map[string]*unstructured.Unstructured{"a": inA, "b": inB} {
		idx := c.rules[name].parentRegs["ns"].Informer().Indexer()
		for _, k := range idx.ListKeys() {
			if obj, ok, _ := idx.GetByKey(k); ok {
				_ = idx.Delete(obj)
			}
		}
		if o != nil {
			_ = idx.Add(o)
		}
	}
	if inA != nil {
		if got := c.behind("a", inA); got != aBehind {
			t.Errorf("rule a behind = %v, want %v", got, aBehind)
		}
	}
	if got := c.behind("b", inB); got != bBehind {
		t.Errorf("rule b behind = %v, want %v", got, bBehind)
	}
}
