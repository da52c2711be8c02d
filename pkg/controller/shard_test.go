package controller

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"kgen.dev/kgen/pkg/reconcile"
	"kgen.dev/kgen/rules"
)

// fakeSharding is a Sharding whose answers a test sets: this replica is
// shard id, releases the parents releases accepts, and may reconcile its
// own parents.
type fakeSharding struct {
	id       string
	releases func(parent metav1.Object) bool
	// owner is the shard of every key; id when empty.
	owner string

	mu   sync.Mutex
	left []func(namespace, name string, uid types.UID)
}

func (f *fakeSharding) ID() string { return f.id }

func (f *fakeSharding) Assign(_ schema.GroupVersionResource, _, _ string, _ func() []any, left func(namespace, name string, uid types.UID)) func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.left = append(f.left, left)
	return func() {}
}

func (f *fakeSharding) Owner(string) string {
	if f.owner == "" {
		return f.id
	}
	return f.owner
}

func (f *fakeSharding) Releases(_ schema.GroupVersionResource, parent metav1.Object) bool {
	return f.releases(parent)
}

func (f *fakeSharding) Begin(_ schema.GroupVersionResource, parent metav1.Object) (func(), bool) {
	return func() {}, parent.GetLabels()[reconcile.LabelShard] == f.id
}

// tell hands a parent to the controller as the sharding does one it found
// had left the rule.
func (f *fakeSharding) tell(namespace, name string, uid types.UID) {
	f.mu.Lock()
	left := slices.Clone(f.left)
	f.mu.Unlock()
	for _, l := range left {
		l(namespace, name, uid)
	}
}

// Under sharding, a parent that no rule selects any more is released by
// the one replica the sharding names, whatever shard its label names: one
// of a dead shard (in no replica's cache), one that lost its shard label
// with its rule's, and one being deleted, whose children only the
// finalizer guards are taken over and deleted first. The sharding hands
// such parents to the controller (Assign's left); a parent another
// replica releases is left alone.
func TestShardedReleaseOfParentsThatLeft(t *testing.T) {
	synctest.Test(t, testShardedReleaseOfParentsThatLeft)
}

func testShardedReleaseOfParentsThatLeft(t *testing.T) {
	parent := func(name, shard string, deleting bool) *unstructured.Unstructured {
		o := gadgetWith(name, true, deleting)
		l := map[string]string{"tier": "batch"}
		if shard != "" {
			l[reconcile.LabelShard] = shard
		}
		o.SetLabels(l)
		return o
	}
	// A child that only the finalizer guards (in another namespace: no
	// ownerReference), still labelled with the dead shard.
	child := object("v1", "ConfigMap", "gone", "uid-child", "uid-gone")
	child.SetNamespace("other")
	child.SetLabels(map[string]string{reconcile.LabelManagedBy: reconcile.ManagedBy, reconcile.LabelParentUID: "uid-gone",
		reconcile.LabelChild: "config", reconcile.LabelShard: "c"})
	child.SetAnnotations(map[string]string{reconcile.AnnotationParent: "ns/gone"})
	client, m := fakeCluster(
		parent("gone", "c", true), // its shard died; deleted
		parent("bare", "", false), // lost its shard label too, shard alive
		parent("theirs", "c", false),
		child,
	)
	applyFinalizers(client)
	rs, err := rules.Parse("rules.yaml", []byte(`apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: r}
spec:
  parent: {apiVersion: example.com/v1, kind: Gadget, namespaces: [ns], selector: {matchLabels: {tier: web}}}
  allowCrossNamespace: [other]
  children:
  - id: config
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: "${parent.metadata.name}", namespace: other}}
`), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	shards := &fakeSharding{id: "a", releases: func(p metav1.Object) bool { return p.GetName() != "theirs" }}
	// Rules never all load: the start's own sweep (sweepLeft) stays out
	// of the way, so only the sharding's word makes parents leave.
	c := New(Config{Rules: rs, Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100), Sharding: shards,
		RulesLoaded: func() bool { return false }})
	ctx := activateRule(t, c)
	waitState(t, c, "the rule to sync", func(s RuleState) bool { return s.Synced })
	for _, name := range []string{"gone", "bare", "theirs"} {
		shards.tell("ns", name, types.UID("uid-"+name))
	}
	for c.queue.Len() > 0 {
		key, _ := c.queue.Get()
		if _, err := c.reconcileKey(ctx, key); err != nil {
			t.Errorf("reconcile %s: %v", key, err)
		}
		c.queue.Done(key)
	}
	for name, want := range map[string][]string{
		"gone":   {"other.example.com/keep"},
		"bare":   {"other.example.com/keep"},
		"theirs": {reconcile.Finalizer, "other.example.com/keep"},
	} {
		obj, err := client.Tracker().Get(gadgets, "ns", name)
		if err != nil {
			t.Fatal(err)
		}
		if got := obj.(*unstructured.Unstructured).GetFinalizers(); !slices.Equal(got, want) {
			t.Errorf("finalizers of %s = %v, want %v", name, got, want)
		}
	}
	if _, err := client.Tracker().Get(cmResource, "other", "gone"); !apierrors.IsNotFound(err) {
		t.Errorf("the child only the finalizer guarded of the deleted parent: err = %v, want it deleted", err)
	}
}

// Under sharding every replica writes the rule's record, but only the one
// the ring gives the rule removes scopes from it, judging a prune-only
// scope empty against every parent of the rule, not only its own: a
// scope that still holds a child of another shard's parent stays in the
// record. Another replica drops the prune-only informer once its own
// parents have no child there, and leaves the record alone.
func TestShardedRecordScopes(t *testing.T) {
	for _, owner := range []string{"a", "b"} {
		t.Run("owner "+owner, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { testShardedRecordScopes(t, owner) })
		})
	}
}

func testShardedRecordScopes(t *testing.T, owner string) {
	inShard := func(o *unstructured.Unstructured, shard string) *unstructured.Unstructured {
		l := o.GetLabels()
		if l == nil {
			l = map[string]string{}
		}
		l[reconcile.LabelShard] = shard
		o.SetLabels(l)
		return o
	}
	client, m := fakeCluster(
		inShard(object("example.com/v1", "Gadget", "g", "p1", ""), "a"),
		inShard(object("apps/v1", "Deployment", "g", "d1", "p1"), "a"),
		inShard(object("example.com/v1", "Gadget", "h", "p2", ""), "b"), // another shard's
		inShard(object("apps/v1", "Deployment", "h", "d2", "p2"), "b"),
	)
	kept := []ChildScope{{GroupVersionKind: configMaps, Namespace: "ns"}, {GroupVersionKind: deployments, Namespace: "ns"}}
	rec := &memRecord{scopes: map[string][]ChildScope{"r": slices.Clone(kept)}}
	rule := gadgetRule(t, configChild)
	shards := &fakeSharding{id: "a", owner: owner, releases: func(metav1.Object) bool { return false }}
	c := New(Config{Rules: []*rules.Rule{rule}, Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100), Record: rec, Sharding: shards})
	ctx := activateRule(t, c)
	s := waitState(t, c, "the rule to sync", func(s RuleState) bool { return s.Synced })
	if want := []string{"apps/v1 Deployment ns"}; !slices.Equal(s.Pruning, want) {
		t.Fatalf("Pruning = %v, want %v", s.Pruning, want)
	}
	// This shard's child there is pruned; the other shard's is not yet.
	if err := client.Resource(depResource).Namespace("ns").Delete(ctx, "g", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the cache to lose the Deployment", func() bool { return len(childNames(c, "p1")) == 0 })
	synctest.Wait()
	c.prunePass(ctx)
	c.prunePass(ctx)
	c.prunePass(ctx)
	s, _ = c.State("r")
	got, saves := rec.get("r")
	if owner == "b" {
		// Not this replica's to judge: it stops watching for its own
		// parents, and the record keeps the scope.
		if len(s.Pruning) != 0 {
			t.Errorf("Pruning = %v, want none: this shard's parents have no child left there", s.Pruning)
		}
		if !slices.Equal(got, kept) || saves != 0 {
			t.Errorf("record = %v after %d writes, want %v after none", got, saves, kept)
		}
		return
	}
	if len(s.Pruning) != 1 || !slices.Equal(got, kept) || saves != 0 {
		t.Fatalf("Pruning = %v, record %v after %d writes, while another shard's parent has a child there; want the scope kept", s.Pruning, got, saves)
	}
	if err := client.Resource(depResource).Namespace("ns").Delete(ctx, "h", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the prune-only cache to empty", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.rules["r"].pruning) == 1 && len(c.rules["r"].pruning[0].reg.Informer().Indexer().ListKeys()) == 0
	})
	c.prunePass(ctx)
	c.prunePass(ctx)
	s, _ = c.State("r")
	got, saves = rec.get("r")
	if want := kept[:1]; len(s.Pruning) != 0 || !slices.Equal(got, want) || saves != 1 {
		t.Errorf("Pruning = %v, record %v after %d writes once no parent has a child there; want none, %v after 1", s.Pruning, got, saves, want)
	}
}

// Under sharding, the recorded parent scopes no rule covers are swept by
// the one replica that removes scopes from the rule's record.
func TestShardedSweepOfRecordedParents(t *testing.T) {
	for owner, want := range map[string]bool{"a": true, "b": false} {
		client, m := fakeCluster()
		rec := &memRecord{scopes: map[string][]ChildScope{}, parents: map[string][]ChildScope{"gone": {{GroupVersionKind: gadgetKind}}}}
		c := New(Config{Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100), Record: rec,
			Sharding: &fakeSharding{id: "a", owner: owner}})
		t.Cleanup(c.queue.ShutDown)
		t.Cleanup(c.watches.Shutdown)
		if err := c.loadRecord(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := c.beginSweep(); got != want {
			t.Errorf("beginSweep() = %t on shard a when the rule's record is %s's, want %t", got, owner, want)
		}
	}
}

// Under sharding, a parent relabelled from rule a into rule b while its
// shard was dead comes to this shard with the children rule a made, which
// still carry the dead shard's label. The takeover relabels them too, not
// only those of rule b's kinds: this shard's caches then show them, and
// rule b's reconcile prunes them, as it does a parent moved on a live
// shard (move.go).
func TestShardedTakeOverOfMovedParent(t *testing.T) {
	synctest.Test(t, testShardedTakeOverOfMovedParent)
}

func testShardedTakeOverOfMovedParent(t *testing.T) {
	// Claimed by this shard, s1, from the dead s0 (which reconciled it:
	// it carries kgen's finalizer).
	parent := labelled(labelled(gadgetWith("g", true, false), "tier", "b"), reconcile.LabelShard, "s1")
	parent.SetUID("p1")
	made := labelled(labelled(object("v1", "ConfigMap", "g", "c1", "p1"), reconcile.LabelChild, "config"), reconcile.LabelShard, "s0")
	controller := true
	made.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "Gadget", Name: "g", UID: "p1", Controller: &controller}})
	client, m := fakeCluster(parent, made)
	applyFinalizers(client)
	// Rule b's Deployment is created by its server-side apply, which the
	// fake client cannot do itself.
	client.PrependReactor("patch", "deployments", func(a clienttesting.Action) (bool, runtime.Object, error) {
		p := a.(clienttesting.PatchAction)
		if p.GetPatchType() != types.ApplyPatchType {
			return false, nil, nil
		}
		out := &unstructured.Unstructured{}
		if err := out.UnmarshalJSON(p.GetPatch()); err != nil {
			return true, nil, err
		}
		out.SetUID("d1")
		return true, out, client.Tracker().Create(depResource, out, p.GetNamespace())
	})
	c := New(Config{Rules: moveRules(t), Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100),
		Record: &memRecord{scopes: map[string][]ChildScope{}}, Sharding: &fakeSharding{id: "s1"}})
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
	client.ClearActions()
	if _, err := c.reconcileKey(ctx, Key{Rule: "b", Namespace: "ns", Name: "g"}); err != nil {
		t.Fatal(err)
	}
	obj, err := client.Tracker().Get(cmResource, "ns", "g")
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		t.Fatal(err)
	default:
		t.Errorf("rule a's ConfigMap of the parent now rule b's is left, labelled %s=%s; want it relabelled and pruned (writes %v)",
			reconcile.LabelShard, obj.(*unstructured.Unstructured).GetLabels()[reconcile.LabelShard], writes(client))
	}
}
