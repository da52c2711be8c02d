package controller

import (
	"context"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"kgen.dev/kgen/pkg/reconcile"
	"kgen.dev/kgen/rules"
)

var (
	gadgetKind = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Gadget"}
	widgetKind = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"} // not served
)

// applyFinalizers makes the fake client answer a server-side apply of a
// Gadget (kgen's finalizer patch) by setting the object's finalizers to
// the applied ones, as the API server does for kgen's field manager.
func applyFinalizers(client *dynamicfake.FakeDynamicClient) {
	client.PrependReactor("patch", "gadgets", func(a clienttesting.Action) (bool, runtime.Object, error) {
		p := a.(clienttesting.PatchAction)
		obj, err := client.Tracker().Get(gadgets, p.GetNamespace(), p.GetName())
		if err != nil {
			return true, nil, err
		}
		u := obj.(*unstructured.Unstructured).DeepCopy()
		applied := &unstructured.Unstructured{}
		if err := applied.UnmarshalJSON(p.GetPatch()); err != nil {
			return true, nil, err
		}
		// kgen's field manager owns only kgen's finalizer.
		finalizers := slices.DeleteFunc(u.GetFinalizers(), func(f string) bool { return f == reconcile.Finalizer })
		u.SetFinalizers(append(finalizers, applied.GetFinalizers()...))
		return true, u, client.Tracker().Update(gadgets, u, p.GetNamespace())
	})
}

func gadgetWith(name string, finalizer, deleting bool) *unstructured.Unstructured {
	o := object("example.com/v1", "Gadget", name, "uid-"+name, "")
	if finalizer {
		o.SetFinalizers([]string{reconcile.Finalizer, "other.example.com/keep"})
	}
	if deleting {
		now := metav1.Now()
		o.SetDeletionTimestamp(&now)
	}
	return o
}

// newSweeper returns a controller running rules of other kinds than the
// recorded ones, with its record read.
func newSweeper(t *testing.T, client *dynamicfake.FakeDynamicClient, rec *memRecord, docs string) *Controller {
	t.Helper()
	_, m := fakeCluster()
	rs, err := rules.Parse("rules.yaml", []byte(docs), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := New(Config{Rules: rs, Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100), Record: rec})
	t.Cleanup(c.queue.ShutDown)
	t.Cleanup(c.watches.Shutdown)
	if err := c.loadRecord(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}

// A rule's record of where it watched its parents, and where it made
// children, lets the next run release its parents when no rule of their
// kind is loaded any more: a parent that carries kgen's finalizer loses it
// (its other finalizers stay), one being deleted first loses the children
// only the finalizer guards (listed by its UID where the rule made
// children), and the scope leaves the record. A parent whose children
// another kgen's rules made keeps the finalizer and its children. A scope
// a loaded rule still covers is left to that rule's own sweep; a kind no
// longer served leaves the record without a request.
func TestSweepRecordedParents(t *testing.T) { synctest.Test(t, testSweepRecordedParents) }

func testSweepRecordedParents(t *testing.T) {
	// The child only the finalizer guards is in another namespace; the
	// garbage collector deletes the one with an ownerReference.
	orphanChild := object("v1", "ConfigMap", "doomed-config", "uid-doomed-config", "uid-doomed")
	orphanChild.SetNamespace("team-b")
	orphanChild.SetAnnotations(map[string]string{reconcile.AnnotationParent: "ns/doomed"})
	ownedChild := object("v1", "ConfigMap", "doomed-owned", "uid-doomed-owned", "uid-doomed")
	ownedChild.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "Gadget", Name: "doomed", UID: "uid-doomed"}})
	// foreign is another kgen's parent (a second chart release, with its
	// own record): its child names a rule this kgen does not know.
	foreignChild := object("v1", "ConfigMap", "foreign-config", "uid-foreign-config", "uid-foreign")
	foreignChild.SetNamespace("team-b")
	withRule := func(o *unstructured.Unstructured, rule string) {
		labels := o.GetLabels()
		labels[reconcile.LabelRule] = rule
		o.SetLabels(labels)
	}
	withRule(foreignChild, "another-kgens")
	withRule(orphanChild, "gone")
	client, _ := fakeCluster(
		gadgetWith("left", true, false),
		gadgetWith("doomed", true, true),
		gadgetWith("foreign", true, false),
		gadgetWith("plain", false, false),
		object("v1", "ConfigMap", "stranger", "uid-stranger", "uid-someone-else"),
		orphanChild, ownedChild, foreignChild,
	)
	applyFinalizers(client)
	rec := &memRecord{
		scopes: map[string][]ChildScope{"gone": {{GroupVersionKind: configMaps}}},
		parents: map[string][]ChildScope{
			"gone":    {{GroupVersionKind: gadgetKind, Namespace: "ns"}},
			"widgets": {{GroupVersionKind: widgetKind}},
			"stays":   {{GroupVersionKind: gadgetKind, Namespace: "kept"}},
		},
	}
	// Rule "stays" watches Gadgets in "kept" only; rule "other" another
	// kind. Neither looks at Gadgets in "ns".
	c := newSweeper(t, client, rec, `apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: stays}
spec:
  parent: {apiVersion: example.com/v1, kind: Gadget, namespaces: [kept]}
  children:
`+configChild+`---
apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: other}
spec:
  parent: {apiVersion: apps/v1, kind: Deployment}
  children:
`+configChild)
	ctx := context.Background()
	if !c.beginSweep() {
		t.Fatal("beginSweep() = false with recorded parent kinds no rule covers")
	}
	client.ClearActions()
	c.sweepParents(ctx)

	var got []string
	for _, a := range client.Actions() {
		switch a := a.(type) {
		case clienttesting.ListAction:
			got = append(got, "list "+a.GetResource().Resource+" "+a.GetNamespace()+" "+a.GetListRestrictions().Labels.String())
		case clienttesting.PatchAction:
			got = append(got, "patch "+a.GetResource().Resource+" "+a.GetName())
		case clienttesting.DeleteAction:
			got = append(got, "delete "+a.GetResource().Resource+" "+a.GetName())
		}
	}
	want := []string{
		"list gadgets ns ",
		"list configmaps  app.kubernetes.io/managed-by=kgen,kgen.dev/parent-uid=uid-doomed",
		"delete configmaps doomed-config",
		"patch gadgets doomed",
		"list configmaps  app.kubernetes.io/managed-by=kgen,kgen.dev/parent-uid=uid-foreign",
		"list configmaps  app.kubernetes.io/managed-by=kgen,kgen.dev/parent-uid=uid-left",
		"patch gadgets left",
	}
	if !slices.Equal(got, want) {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for name, want := range map[string][]string{
		"left": {"other.example.com/keep"}, "doomed": {"other.example.com/keep"}, "plain": nil,
		"foreign": {reconcile.Finalizer, "other.example.com/keep"},
	} {
		obj, err := client.Tracker().Get(gadgets, "ns", name)
		if err != nil {
			t.Fatal(err)
		}
		if got := obj.(*unstructured.Unstructured).GetFinalizers(); !slices.Equal(got, want) {
			t.Errorf("finalizers of %s = %v, want %v", name, got, want)
		}
	}
	for name, want := range map[string]bool{"team-b/doomed-config": false, "ns/doomed-owned": true, "ns/stranger": true, "team-b/foreign-config": true} {
		ns, name, _ := strings.Cut(name, "/")
		_, err := client.Tracker().Get(cmResource, ns, name)
		if exists := err == nil; exists != want {
			t.Errorf("ConfigMap %s exists = %v, want %v (err %v)", name, exists, want, err)
		}
	}
	for rule, want := range map[string][]ChildScope{
		"gone": nil, "widgets": nil, "stays": {{GroupVersionKind: gadgetKind, Namespace: "kept"}},
	} {
		if got := rec.getParents(rule); !slices.Equal(got, want) {
			t.Errorf("recorded parents of %s = %v, want %v", rule, got, want)
		}
	}
	// Done: nothing is due, and no further pass makes a request.
	client.ClearActions()
	if c.beginSweep() {
		t.Error("beginSweep() = true after every uncovered scope was swept")
	}
	c.sweepParents(ctx)
	if a := client.Actions(); len(a) != 0 {
		t.Errorf("a second sweep made requests: %v", a)
	}
}

// deploymentRule is a rule on another kind than the recorded Gadgets: it
// covers none of them.
const deploymentRule = `apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: other}
spec:
  parent: {apiVersion: apps/v1, kind: Deployment}
  children:
` + configChild

// A recorded parent kind whose version the API server no longer serves
// (its CRD serves v1 now, not v1alpha1) still has its objects: they are
// listed in the version served and released, not dropped as not served.
func TestSweepRecordedParentsInAnotherVersion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client, _ := fakeCluster(gadgetWith("left", true, false))
		applyFinalizers(client)
		old := schema.GroupVersionKind{Group: "example.com", Version: "v1alpha1", Kind: "Gadget"}
		rec := &memRecord{parents: map[string][]ChildScope{"gone": {{GroupVersionKind: old, Namespace: "ns"}}}}
		c := newSweeper(t, client, rec, deploymentRule)
		if !c.beginSweep() {
			t.Fatal("beginSweep() = false with a recorded parent kind no rule covers")
		}
		c.sweepParents(context.Background())
		obj, err := client.Tracker().Get(gadgets, "ns", "left")
		if err != nil {
			t.Fatal(err)
		}
		if got := obj.(*unstructured.Unstructured).GetFinalizers(); !slices.Equal(got, []string{"other.example.com/keep"}) {
			t.Errorf("finalizers = %v, want kgen's removed", got)
		}
		if got := rec.getParents("gone"); len(got) != 0 {
			t.Errorf("recorded parents of gone = %v, want none once swept", got)
		}
	})
}

// A sweep that cannot list its kind keeps the scope in the record and
// backs off; once it can, it releases and drops it. Until every rule is
// loaded, no sweep starts.
func TestSweepRecordedParentsRetries(t *testing.T) { synctest.Test(t, testSweepRecordedParentsRetries) }

func testSweepRecordedParentsRetries(t *testing.T) {
	client, _ := fakeCluster(gadgetWith("left", true, false))
	applyFinalizers(client)
	forbidden := true
	client.PrependReactor("list", "gadgets", func(clienttesting.Action) (bool, runtime.Object, error) {
		if forbidden {
			return true, nil, apierrors.NewForbidden(gadgets.GroupResource(), "", nil)
		}
		return false, nil, nil
	})
	scope := ChildScope{GroupVersionKind: gadgetKind}
	rec := &memRecord{scopes: map[string][]ChildScope{}, parents: map[string][]ChildScope{"gone": {scope}}}
	c := newSweeper(t, client, rec, deploymentRule)
	loaded := false
	c.cfg.RulesLoaded = func() bool { return loaded }
	if c.beginSweep() {
		t.Fatal("beginSweep() = true before every rule was loaded")
	}
	loaded = true
	if !c.beginSweep() {
		t.Fatal("beginSweep() = false once every rule was loaded")
	}
	c.sweepParents(context.Background())
	if got := rec.getParents("gone"); !slices.Equal(got, []ChildScope{scope}) {
		t.Errorf("recorded parents = %v after a failed sweep, want the scope kept", got)
	}
	if c.beginSweep() {
		t.Error("beginSweep() = true right after a failed sweep, want a backoff")
	}
	// Forbidden: only an operator's grant helps, so it waits an hour,
	// longer than any other failure's backoff.
	time.Sleep(sweepRetryMax)
	if c.beginSweep() {
		t.Error("beginSweep() = true within the hour after a forbidden sweep")
	}
	time.Sleep(sweepForbiddenRetry - sweepRetryMax)
	forbidden = false
	if !c.beginSweep() {
		t.Fatal("beginSweep() = false after the backoff")
	}
	c.sweepParents(context.Background())
	if got := rec.getParents("gone"); len(got) != 0 {
		t.Errorf("recorded parents = %v after the sweep, want none", got)
	}
	obj, err := client.Tracker().Get(gadgets, "ns", "left")
	if err != nil {
		t.Fatal(err)
	}
	if f := obj.(*unstructured.Unstructured).GetFinalizers(); slices.Contains(f, reconcile.Finalizer) {
		t.Errorf("finalizers = %v, want kgen's released", f)
	}
}

// A sweep that lists its parents but cannot release one (a child the
// removed rule's ServiceAccount may not delete, or a patch refused) is
// not kgen's RBAC missing the scope: it backs off from sweepRetryBase, as
// any failure, not for an hour, so a grant to that account is noticed
// soon (an e2e run waited a minute in vain).
func TestSweepRetriesARefusedRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client, _ := fakeCluster(gadgetWith("left", true, false))
		applyFinalizers(client)
		refused := true
		client.PrependReactor("patch", "gadgets", func(clienttesting.Action) (bool, runtime.Object, error) {
			if refused {
				return true, nil, apierrors.NewForbidden(gadgets.GroupResource(), "left", nil)
			}
			return false, nil, nil
		})
		scope := ChildScope{GroupVersionKind: gadgetKind}
		rec := &memRecord{scopes: map[string][]ChildScope{}, parents: map[string][]ChildScope{"gone": {scope}}}
		c := newSweeper(t, client, rec, deploymentRule)
		if !c.beginSweep() {
			t.Fatal("beginSweep() = false with a recorded parent kind no rule covers")
		}
		c.sweepParents(context.Background())
		if got := rec.getParents("gone"); !slices.Equal(got, []ChildScope{scope}) {
			t.Fatalf("recorded parents = %v after a refused release, want the scope kept", got)
		}
		refused = false
		time.Sleep(sweepRetryBase)
		if !c.beginSweep() {
			t.Fatal("beginSweep() = false after the first backoff step: a refused release waits as long as a forbidden list")
		}
		c.sweepParents(context.Background())
		if got := rec.getParents("gone"); len(got) != 0 {
			t.Errorf("recorded parents = %v after the sweep, want none", got)
		}
	})
}

// A started rule records where it watches its parents with its child
// scopes, before its parents are reconciled; what its record held for a
// namespace it no longer watches is kept until swept.
func TestRecordParentScopes(t *testing.T) { synctest.Test(t, testRecordParentScopes) }

func testRecordParentScopes(t *testing.T) {
	client, m := fakeCluster(object("example.com/v1", "Gadget", "g", "p1", ""))
	dropped := ChildScope{GroupVersionKind: gadgetKind, Namespace: "dropped"}
	rec := &memRecord{scopes: map[string][]ChildScope{}, parents: map[string][]ChildScope{"r": {dropped}}}
	c := New(Config{Rules: []*rules.Rule{gadgetRule(t, configChild)}, Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100), Record: rec})
	ctx := activateRule(t, c)
	waitState(t, c, "the rule to sync", func(s RuleState) bool { return s.Synced })
	watched := ChildScope{GroupVersionKind: gadgetKind, Namespace: "ns"}
	if got, want := rec.getParents("r"), []ChildScope{dropped, watched}; !slices.Equal(got, want) {
		t.Errorf("recorded parents = %v, want %v", got, want)
	}
	c.sweepParents(ctx)
	if got, want := rec.getParents("r"), []ChildScope{watched}; !slices.Equal(got, want) {
		t.Errorf("recorded parents after the sweep = %v, want %v", got, want)
	}
}

// A parent being deleted that left every rule while kgen was stopped (its
// rule was removed), found by the start-up sweep of another rule of its
// kind, first loses the children only kgen's finalizer guards, though that
// rule does not watch them: the record says where the removed rule made
// children. Then its finalizer goes, and its other finalizers stay.
func TestReleaseDeletedParentOfRemovedRule(t *testing.T) {
	synctest.Test(t, testReleaseDeletedParentOfRemovedRule)
}

func testReleaseDeletedParentOfRemovedRule(t *testing.T) {
	doomed := gadgetWith("doomed", true, true)
	doomed.SetLabels(map[string]string{"tier": "gone"})
	remote := object("v1", "ConfigMap", "doomed-remote", "uid-doomed-remote", "uid-doomed")
	remote.SetNamespace("team-b")
	remote.SetAnnotations(map[string]string{reconcile.AnnotationParent: "ns/doomed"})
	client, m := fakeCluster(doomed, remote)
	applyFinalizers(client)
	// The removed rule "gone" watched Gadgets in ns and made ConfigMaps in
	// team-b; rule r watches Gadgets in ns too, and ConfigMaps only there.
	rec := &memRecord{
		scopes:  map[string][]ChildScope{"gone": {{GroupVersionKind: configMaps, Namespace: "team-b"}}},
		parents: map[string][]ChildScope{"gone": {{GroupVersionKind: gadgetKind, Namespace: "ns"}}},
	}
	rs, err := rules.Parse("rules.yaml", []byte(`apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: r}
spec:
  parent: {apiVersion: example.com/v1, kind: Gadget, namespaces: [ns], selector: {matchLabels: {tier: web}}}
  children:
`+configChild), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := New(Config{Rules: rs, Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100), Record: rec})
	ctx := activateRule(t, c)
	waitState(t, c, "the rule to sync", func(s RuleState) bool { return s.Synced })
	key := Key{Rule: "r", Namespace: "ns", Name: "doomed"}
	waitFor(t, "the sweep to find the parent that left", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, ok := c.leaving[key]
		return ok
	})
	if _, err := c.reconcileKey(ctx, key); err != nil {
		t.Fatalf("reconcile %s: %v", key, err)
	}
	if _, err := client.Tracker().Get(cmResource, "team-b", "doomed-remote"); !apierrors.IsNotFound(err) {
		t.Errorf("the child only the finalizer guarded: get = %v, want it deleted", err)
	}
	obj, err := client.Tracker().Get(gadgets, "ns", "doomed")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := obj.(*unstructured.Unstructured).GetFinalizers(), []string{"other.example.com/keep"}; !slices.Equal(got, want) {
		t.Errorf("finalizers = %v, want %v", got, want)
	}
}

// A parent that left the rule (its informer lost it with kgen's finalizer
// on) in a namespace that was deleted since, with kgen's Role there: its
// read is refused, and the refusal is no reason to try again for good
// (a live audit: an error line every backoff step, without end). In a
// namespace that exists the refusal is a failure, retried.
func TestReleaseInDeletedNamespace(t *testing.T) {
	for _, tc := range []struct {
		name      string
		namespace bool // ns exists
	}{{"namespace deleted", false}, {"namespace exists", true}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				client, m := fakeCluster() // every namespace exists...
				if !tc.namespace {
					client.PrependReactor("get", "namespaces", func(clienttesting.Action) (bool, runtime.Object, error) {
						return true, nil, apierrors.NewNotFound(namespacesGVR.GroupResource(), "ns") // ...but this one
					})
				}
				client.PrependReactor("get", "gadgets", func(clienttesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewForbidden(gadgets.GroupResource(), "gone", nil)
				})
				rs, err := rules.Parse("rules.yaml", []byte(`apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: r}
spec:
  parent: {apiVersion: example.com/v1, kind: Gadget, namespaces: [ns]}
  children:
`+configChild), rules.Options{})
				if err != nil {
					t.Fatal(err)
				}
				c := New(Config{Rules: rs, Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100)})
				ctx := activateRule(t, c)
				waitState(t, c, "the rule to sync", func(s RuleState) bool { return s.Synced })
				key := Key{Rule: "r", Namespace: "ns", Name: "gone"}
				c.left(key, "uid-gone")
				_, err = c.reconcileKey(ctx, key)
				c.mu.Lock()
				_, still := c.leaving[key]
				c.mu.Unlock()
				if tc.namespace != (err != nil) || still != tc.namespace {
					t.Errorf("reconcile = %v, still leaving %t; want a failure and the parent kept only when the namespace exists", err, still)
				}
			})
		})
	}
}
