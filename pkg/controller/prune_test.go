package controller

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"kgen.dev/kgen/pkg/mapper"
	"kgen.dev/kgen/pkg/reconcile"
	"kgen.dev/kgen/rules"
)

// memRecord is a Record in memory that counts its writes of child scopes.
type memRecord struct {
	mu      sync.Mutex
	scopes  map[string][]ChildScope
	parents map[string][]ChildScope
	running map[string]string
	docs    map[string][]byte
	// runningWrites counts UpdateRunning calls; duringRunning, when set,
	// is called in each, before it changes the record.
	runningWrites int
	duringRunning func()
	saves         int
	// failLoad and failSave, when set, are what Load and the saves return.
	failLoad, failSave error
}

func (m *memRecord) Load(context.Context) (Recorded, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failLoad != nil {
		return Recorded{}, m.failLoad
	}
	out := Recorded{Children: map[string][]ChildScope{}, Parents: map[string][]ChildScope{}}
	for k, v := range m.scopes {
		out.Children[k] = slices.Clone(v)
	}
	for k, v := range m.parents {
		out.Parents[k] = slices.Clone(v)
	}
	out.Running = maps.Clone(m.running)
	out.Documents = maps.Clone(m.docs)
	return out, nil
}

func (m *memRecord) UpdateRunning(_ context.Context, rule, version string, document []byte) error {
	if m.duringRunning != nil {
		m.duringRunning()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failSave != nil {
		return m.failSave
	}
	m.runningWrites++
	if m.running == nil {
		m.running, m.docs = map[string]string{}, map[string][]byte{}
	}
	delete(m.docs, rule)
	if version == "" {
		delete(m.running, rule)
	} else {
		m.running[rule] = version
		if document != nil {
			m.docs[rule] = document
		}
	}
	return nil
}

// getRunning returns the running version recorded for a rule.
func (m *memRecord) getRunning(rule string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.running[rule]
}

func (m *memRecord) Update(_ context.Context, rule string, add, remove []ChildScope) ([]ChildScope, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failSave != nil {
		return nil, m.failSave
	}
	m.saves++
	return updateScopes(m.scopes, rule, add, remove), nil
}

func (m *memRecord) UpdateParents(_ context.Context, rule string, add, remove []ChildScope) ([]ChildScope, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failSave != nil {
		return nil, m.failSave
	}
	if m.parents == nil {
		m.parents = map[string][]ChildScope{}
	}
	return updateScopes(m.parents, rule, add, remove), nil
}

// updateScopes adds and removes scopes of a rule's, as a Record's Update.
func updateScopes(in map[string][]ChildScope, rule string, add, remove []ChildScope) []ChildScope {
	next := sortScopes(append(slices.Clone(in[rule]), add...))
	next = slices.DeleteFunc(next, func(s ChildScope) bool { return slices.Contains(remove, s) })
	if len(next) == 0 {
		delete(in, rule)
	} else {
		in[rule] = next
	}
	return slices.Clone(next)
}

// getParents returns the parent scopes recorded for a rule.
func (m *memRecord) getParents(rule string) []ChildScope {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.parents[rule])
}

func (m *memRecord) get(rule string) ([]ChildScope, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.scopes[rule]), m.saves
}

var (
	gadgets     = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gadgets"}
	cmResource  = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	depResource = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
)

// fakeCluster serves Gadgets, ConfigMaps and Deployments: a fake dynamic
// client with the objects, and discovery of the three.
func fakeCluster(objs ...runtime.Object) (*dynamicfake.FakeDynamicClient, *mapper.Mapper) {
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		gadgets: "GadgetList", cmResource: "ConfigMapList", depResource: "DeploymentList",
	}, objs...)
	// Every namespace exists, unless a test says otherwise: kgen asks
	// whether the namespace of a refused list is gone (namespaceGone).
	client.PrependReactor("get", "namespaces", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if o, err := client.Tracker().Get(a.GetResource(), "", a.(clienttesting.GetAction).GetName()); err == nil {
			return true, o, nil
		}
		ns := &unstructured.Unstructured{}
		ns.SetAPIVersion("v1")
		ns.SetKind("Namespace")
		ns.SetName(a.(clienttesting.GetAction).GetName())
		return true, ns, nil
	})
	return client, mapper.New(fakeDiscovery())
}

// fakeDiscovery serves Gadgets (example.com/v1, its list last),
// ConfigMaps and Deployments.
func fakeDiscovery() *fakediscovery.FakeDiscovery {
	res := func(name, kind string) metav1.APIResource {
		return metav1.APIResource{Name: name, Kind: kind, Namespaced: true, Verbs: []string{"get", "list", "watch"}}
	}
	return &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{Resources: []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{res("configmaps", "ConfigMap")}},
		{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{res("deployments", "Deployment")}},
		{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{res("gadgets", "Gadget")}},
	}}}
}

func gadgetRule(t *testing.T, children string) *rules.Rule {
	t.Helper()
	rs, err := rules.Parse("rules.yaml", []byte(`apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: r}
spec:
  parent: {apiVersion: example.com/v1, kind: Gadget, namespaces: [ns]}
  children:
`+children), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return rs[0]
}

const (
	configChild = `  - id: config
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: "${parent.metadata.name}"}}
`
	deployChild = `  - id: app
    template: {apiVersion: apps/v1, kind: Deployment, metadata: {name: "${parent.metadata.name}"}}
`
)

func object(apiVersion, kind, name string, uid, parentUID string) *unstructured.Unstructured {
	o := &unstructured.Unstructured{}
	o.SetAPIVersion(apiVersion)
	o.SetKind(kind)
	o.SetNamespace("ns")
	o.SetName(name)
	o.SetUID(types.UID(uid))
	if parentUID != "" {
		o.SetLabels(map[string]string{reconcile.LabelManagedBy: reconcile.ManagedBy, reconcile.LabelParentUID: parentUID, reconcile.LabelChild: "app"})
		o.SetAnnotations(map[string]string{reconcile.AnnotationParent: "ns/g"})
	}
	return o
}

// activateRule starts rule r of a controller a test made, and stops its
// queue, informers and context when the test ends. It returns the context.
func activateRule(t *testing.T, c *Controller) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		c.watches.Shutdown()
		c.queue.ShutDown()
		cancel()
	})
	if err := c.activate(ctx, c.rules["r"]); err != nil {
		t.Fatal(err)
	}
	return ctx
}

// waitState polls the controller's state of rule r until ok accepts it.
func waitState(t *testing.T, c *Controller, what string, ok func(RuleState) bool) RuleState {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, _ := c.State("r")
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s; state %+v", what, s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// changeRule changes rule r to its version v, as activateLoop does: the
// new version starts, takes over once its caches have synced, and the
// previous one stops. It returns the state of the new version.
func changeRule(t *testing.T, ctx context.Context, c *Controller, v *rules.Rule) RuleState {
	t.Helper()
	c.SetRules([]*rules.Rule{v})
	c.startPending(ctx, map[*rules.Rule]string{})
	s := waitState(t, c, "the new version to take over", func(s RuleState) bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.rules["r"].rule == v && s.Synced && s.Next == nil
	})
	c.mu.Lock()
	retiring := c.retiring
	c.retiring = nil
	c.mu.Unlock()
	for _, old := range retiring {
		c.deactivate(old, context.Canceled)
	}
	return s
}

func childNames(c *Controller, uid string) []string {
	var out []string
	for _, o := range c.Children("r", types.UID(uid)) {
		out = append(out, o.GetKind()+"/"+o.GetName())
	}
	slices.Sort(out)
	return out
}

// A kind that left the rule before kgen started (the record holds it) is
// watched, its children are the parents' children again (to be pruned),
// and once none is left it leaves the record, with one write.
func TestPruneOnlyScopeAfterRestart(t *testing.T) { synctest.Test(t, testPruneOnlyScopeAfterRestart) }

func testPruneOnlyScopeAfterRestart(t *testing.T) {
	client, m := fakeCluster(
		object("example.com/v1", "Gadget", "g", "p1", ""),
		object("apps/v1", "Deployment", "g", "d1", "p1"),
	)
	rec := &memRecord{scopes: map[string][]ChildScope{"r": {
		{GroupVersionKind: configMaps, Namespace: "ns"}, {GroupVersionKind: deployments, Namespace: "ns"},
	}}}
	rule := gadgetRule(t, configChild)
	c := New(Config{Rules: []*rules.Rule{rule}, Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100), Record: rec})
	ctx := activateRule(t, c)
	s := waitState(t, c, "the rule to sync", func(s RuleState) bool { return s.Synced })
	if want := []string{"apps/v1 Deployment ns"}; !slices.Equal(s.Pruning, want) {
		t.Errorf("Pruning = %v, want %v", s.Pruning, want)
	}
	waitFor(t, "the Deployment to be a child again", func() bool { return slices.Equal(childNames(c, "p1"), []string{"Deployment/g"}) })
	if _, saves := rec.get("r"); saves != 0 {
		t.Errorf("the record was written %d times; it held the rule's scopes already", saves)
	}
	// While the child is there, passes keep the scope.
	c.prunePass(ctx)
	c.prunePass(ctx)
	if s, _ := c.State("r"); len(s.Pruning) != 1 {
		t.Fatalf("Pruning = %v with the child still there", s.Pruning)
	}
	// Pruned (as a reconcile would): two passes drop the scope.
	if err := client.Resource(depResource).Namespace("ns").Delete(ctx, "g", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the cache to lose the Deployment", func() bool { return len(childNames(c, "p1")) == 0 })
	c.prunePass(ctx)
	if s, _ := c.State("r"); len(s.Pruning) != 1 {
		t.Fatalf("Pruning = %v after one empty pass, want the scope kept until a second", s.Pruning)
	}
	c.prunePass(ctx)
	if s, _ := c.State("r"); len(s.Pruning) != 0 {
		t.Errorf("Pruning = %v after two empty passes", s.Pruning)
	}
	got, saves := rec.get("r")
	if want := []ChildScope{{GroupVersionKind: configMaps, Namespace: "ns"}}; !slices.Equal(got, want) || saves != 1 {
		t.Errorf("record = %v after %d writes, want %v after 1", got, saves, want)
	}
}

// A rule renamed while kgen was stopped, losing a kind with the rename: the
// old name's record (its parents where the new rule watches) leads the new
// rule to the old kind, so its children are the parents' children again,
// to be pruned, as under the rule's own name. A removed rule whose parents
// were elsewhere leads nowhere.
//
// The inherited scope is not written to the new rule's record (the old
// name's entry holds it), and one kgen may not list (the removed rule's
// grants went with it) is dropped, without holding the rule back or
// making it Forbidden.
func TestPruneOnlyScopeOfRenamedRule(t *testing.T) {
	quietListErrors(t)
	synctest.Test(t, testPruneOnlyScopeOfRenamedRule)
}

func testPruneOnlyScopeOfRenamedRule(t *testing.T) {
	client, m := fakeCluster(
		object("example.com/v1", "Gadget", "g", "p1", ""),
		object("apps/v1", "Deployment", "g", "d1", "p1"),
	)
	client.PrependReactor("list", depResource.Resource, func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() == "locked" {
			return true, nil, apierrors.NewForbidden(depResource.GroupResource(), "", nil)
		}
		return false, nil, nil
	})
	gadgetsIn := func(ns string) []ChildScope { return []ChildScope{{GroupVersionKind: gadgetKind, Namespace: ns}} }
	rec := &memRecord{
		scopes: map[string][]ChildScope{
			"old":       {{GroupVersionKind: configMaps, Namespace: "ns"}, {GroupVersionKind: deployments, Namespace: "ns"}},
			"locked":    {{GroupVersionKind: deployments, Namespace: "locked"}},
			"elsewhere": {{GroupVersionKind: deployments, Namespace: "other"}},
		},
		parents: map[string][]ChildScope{"old": gadgetsIn("ns"), "locked": gadgetsIn("ns"), "elsewhere": gadgetsIn("other")},
	}
	c := New(Config{Rules: []*rules.Rule{gadgetRule(t, configChild)}, Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100), Record: rec})
	ctx := activateRule(t, c)
	s := waitState(t, c, "the rule to sync", func(s RuleState) bool { return s.Synced })
	if want := []string{"apps/v1 Deployment locked", "apps/v1 Deployment ns"}; !slices.Equal(s.Pruning, want) {
		t.Errorf("Pruning = %v, want %v: the renamed rule's kinds, not the other removed rule's", s.Pruning, want)
	}
	waitFor(t, "the Deployment to be a child again", func() bool { return slices.Equal(childNames(c, "p1"), []string{"Deployment/g"}) })
	waitFor(t, "the refused list", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.watchErrors) > 0
	})
	c.prunePass(ctx)
	if s, _ := c.State("r"); len(s.Pruning) != 2 || s.Forbidden {
		t.Errorf("Pruning = %v, Forbidden = %v after one pass: want the refused scope kept one more pass, and the rule not Forbidden", s.Pruning, s.Forbidden)
	}
	c.prunePass(ctx)
	s, _ = c.State("r")
	if want := []string{"apps/v1 Deployment ns"}; !slices.Equal(s.Pruning, want) || s.Forbidden {
		t.Errorf("Pruning = %v, Forbidden = %v after two passes: want the refused inherited scope dropped, and the rule not Forbidden", s.Pruning, s.Forbidden)
	}
	c.prunePass(ctx)
	if s, _ := c.State("r"); !slices.Equal(s.Pruning, []string{"apps/v1 Deployment ns"}) {
		t.Errorf("Pruning = %v after another pass: the refused scope was watched again", s.Pruning)
	}
	// Pruned (as a reconcile would): the inherited scope goes after two
	// empty passes, and is not watched again, though the removed rule's
	// entry still names it.
	if err := client.Resource(depResource).Namespace("ns").Delete(ctx, "g", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the cache to lose the Deployment", func() bool { return len(childNames(c, "p1")) == 0 })
	for range 3 {
		c.prunePass(ctx)
	}
	if s, _ := c.State("r"); len(s.Pruning) != 0 {
		t.Errorf("Pruning = %v: the inherited scope found empty is watched again", s.Pruning)
	}
	if got, _ := rec.get("r"); slices.ContainsFunc(got, func(s ChildScope) bool { return s.GroupVersionKind == deployments }) {
		t.Errorf("the rule's record = %v: it holds the inherited scopes", got)
	}
	// Stopping the rule releases every informer, the inherited one too.
	c.deactivate(c.rules["r"], context.Canceled)
	if stats := c.watches.Stats(); len(stats) != 0 {
		t.Errorf("informers left after the rule stopped: %v", stats)
	}
}

// A rule changed while kgen runs: its first version records its kinds
// before any parent is reconciled; the version without the Deployment
// watches Deployments to prune them.
func TestPruneOnlyScopeLive(t *testing.T) { synctest.Test(t, testPruneOnlyScopeLive) }

func testPruneOnlyScopeLive(t *testing.T) {
	client, m := fakeCluster(object("example.com/v1", "Gadget", "g", "p1", ""))
	rec := &memRecord{scopes: map[string][]ChildScope{}}
	v1 := gadgetRule(t, configChild+deployChild)
	c := New(Config{Rules: []*rules.Rule{v1}, Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100), Record: rec})
	ctx := activateRule(t, c)
	waitState(t, c, "version 1 to sync", func(s RuleState) bool { return s.Synced })
	want := []ChildScope{{GroupVersionKind: deployments, Namespace: "ns"}, {GroupVersionKind: configMaps, Namespace: "ns"}}
	if got, saves := rec.get("r"); !slices.Equal(got, want) || saves != 1 {
		t.Fatalf("record = %v after %d writes, want %v after 1", got, saves, want)
	}

	v2 := gadgetRule(t, configChild)
	s := changeRule(t, ctx, c, v2)
	if want := []string{"apps/v1 Deployment ns"}; !slices.Equal(s.Pruning, want) {
		t.Errorf("Pruning = %v, want %v", s.Pruning, want)
	}
	c.prunePass(ctx)
	c.prunePass(ctx)
	if got, saves := rec.get("r"); !slices.Equal(got, want[1:]) || saves != 2 {
		t.Errorf("record = %v after %d writes, want %v after 2", got, saves, want[1:])
	}
}

// A rule whose Record cannot be read (kgen's RBAC lacks the ConfigMap)
// runs anyway, saying why in its state, and the Record is not written
// before it was read. A kind that leaves the rule meanwhile is still
// pruned, from memory. Once the Record can be read, what it held is pruned
// too, and the record is written; once the Record cannot be written, the
// rule keeps running.
func TestRuleRunsWithoutItsRecord(t *testing.T) { synctest.Test(t, testRuleRunsWithoutItsRecord) }

func testRuleRunsWithoutItsRecord(t *testing.T) {
	client, m := fakeCluster(
		object("example.com/v1", "Gadget", "g", "p1", ""),
		object("apps/v1", "Deployment", "g", "d1", "p1"),
	)
	forbidden := errors.New(`configmaps "kgen-state" is forbidden`)
	old := ChildScope{GroupVersionKind: deployments, Namespace: "old"}
	rec := &memRecord{scopes: map[string][]ChildScope{"r": {old}}, failLoad: forbidden}
	v1 := gadgetRule(t, configChild+deployChild)
	c := New(Config{Rules: []*rules.Rule{v1}, Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100), Record: rec})
	ctx := activateRule(t, c)
	s := waitState(t, c, "the rule to run without its record", func(s RuleState) bool { return s.Synced })
	if !strings.Contains(s.RecordError, "forbidden") || len(s.Unsynced) > 0 {
		t.Errorf("state %+v, want RecordError saying forbidden and nothing failing", s)
	}
	// The fake client cannot create by server-side apply, so the writes
	// fail; that kgen tries them is what counts.
	_, _ = c.reconcileKey(ctx, Key{Rule: "r", Namespace: "ns", Name: "g"})
	if w := writes(client); !slices.Contains(w, "patch configmaps g") {
		t.Errorf("reconciling a parent of a rule without its record wrote %v, want its children", w)
	}

	// The Deployment leaves the rule: watched from memory.
	v2 := gadgetRule(t, configChild)
	s = changeRule(t, ctx, c, v2)
	if want := []string{"apps/v1 Deployment ns"}; !slices.Equal(s.Pruning, want) {
		t.Errorf("Pruning = %v without the record, want %v", s.Pruning, want)
	}
	c.prunePass(ctx)
	c.prunePass(ctx)
	if s, _ := c.State("r"); !slices.Equal(s.Pruning, []string{"apps/v1 Deployment ns"}) {
		t.Errorf("Pruning = %v with the child still there", s.Pruning)
	}
	if got, saves := rec.get("r"); !slices.Equal(got, []ChildScope{old}) || saves != 0 {
		t.Errorf("record = %v after %d writes, want %v untouched until it is read", got, saves, []ChildScope{old})
	}

	// Readable: what it held is watched too, and it is written.
	rec.mu.Lock()
	rec.failLoad = nil
	rec.mu.Unlock()
	c.prunePass(ctx)
	s, _ = c.State("r")
	if want := []string{"apps/v1 Deployment ns", "apps/v1 Deployment old"}; !slices.Equal(s.Pruning, want) || s.RecordError != "" {
		t.Errorf("Pruning = %v, RecordError %q once the record is read, want %v and none", s.Pruning, s.RecordError, want)
	}
	want := []ChildScope{{GroupVersionKind: deployments, Namespace: "ns"}, old, {GroupVersionKind: configMaps, Namespace: "ns"}}
	if got, saves := rec.get("r"); !slices.Equal(got, want) || saves != 1 {
		t.Errorf("record = %v after %d writes, want %v after 1", got, saves, want)
	}

	// Not writable: the rule runs on, and the record catches up later.
	rec.mu.Lock()
	rec.failSave = forbidden
	rec.mu.Unlock()
	if err := client.Resource(depResource).Namespace("ns").Delete(ctx, "g", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		time.Sleep(time.Second) // the caches follow
		c.prunePass(ctx)
	}
	s, _ = c.State("r")
	if len(s.Pruning) != 0 || !strings.Contains(s.RecordError, "forbidden") || !s.Synced {
		t.Errorf("state %+v after the prune-only scopes emptied with the record not writable", s)
	}
	rec.mu.Lock()
	rec.failSave = nil
	rec.mu.Unlock()
	c.prunePass(ctx)
	if got, saves := rec.get("r"); !slices.Equal(got, want[2:]) || saves != 2 {
		t.Errorf("record = %v after %d writes, want %v after 2", got, saves, want[2:])
	}
	if s, _ := c.State("r"); s.RecordError != "" || len(s.Pruning) != 0 {
		t.Errorf("state %+v once the record was written", s)
	}
}

// A Record read for the first time by a write keeps the scopes it held:
// the write keeps them until they are watched, at the next pass.
func TestRecordReadByAWrite(t *testing.T) { synctest.Test(t, testRecordReadByAWrite) }

func testRecordReadByAWrite(t *testing.T) {
	client, m := fakeCluster(object("example.com/v1", "Gadget", "g", "p1", ""))
	old := ChildScope{GroupVersionKind: deployments, Namespace: "ns"}
	rec := &memRecord{scopes: map[string][]ChildScope{"r": {old}}, failLoad: errors.New("unavailable")}
	c := New(Config{Rules: []*rules.Rule{gadgetRule(t, configChild)}, Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100), Record: rec})
	ctx := activateRule(t, c)
	waitState(t, c, "the rule to run", func(s RuleState) bool { return s.Synced })
	rec.mu.Lock()
	rec.failLoad = nil
	rec.mu.Unlock()
	if err := c.writeRecord(ctx, c.rules["r"]); err != nil {
		t.Fatal(err)
	}
	want := []ChildScope{old, {GroupVersionKind: configMaps, Namespace: "ns"}}
	if got, _ := rec.get("r"); !slices.Equal(got, want) {
		t.Errorf("record = %v, want %v: what it held is kept", got, want)
	}
	c.prunePass(ctx)
	if s, _ := c.State("r"); !slices.Equal(s.Pruning, []string{"apps/v1 Deployment ns"}) {
		t.Errorf("Pruning = %v, want the scope the record held", s.Pruning)
	}
}

// writes returns the writes a fake client saw, as "VERB RESOURCE NAME".
func writes(client *dynamicfake.FakeDynamicClient) []string {
	var out []string
	for _, a := range client.Actions() {
		switch a := a.(type) {
		case clienttesting.CreateAction:
			out = append(out, a.GetVerb()+" "+a.GetResource().Resource+" "+a.GetObject().(metav1.Object).GetName())
		case clienttesting.PatchAction:
			out = append(out, a.GetVerb()+" "+a.GetResource().Resource+" "+a.GetName())
		case clienttesting.DeleteAction:
			out = append(out, a.GetVerb()+" "+a.GetResource().Resource+" "+a.GetName())
		}
	}
	return out
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A rule narrowed from every namespace to one (the record holds the
// kind in every namespace): the prune-only informer there also sees the
// children the rule still makes in its namespace, which its own informer
// watches. They do not keep the prune-only informer: two passes drop it.
func TestPruneOnlyScopeOfNarrowedRule(t *testing.T) {
	synctest.Test(t, testPruneOnlyScopeOfNarrowedRule)
}

func testPruneOnlyScopeOfNarrowedRule(t *testing.T) {
	client, m := fakeCluster(
		object("example.com/v1", "Gadget", "g", "p1", ""),
		object("v1", "ConfigMap", "g", "c1", "p1"),
	)
	rec := &memRecord{scopes: map[string][]ChildScope{"r": {{GroupVersionKind: configMaps}}}}
	c := New(Config{Rules: []*rules.Rule{gadgetRule(t, configChild)}, Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100), Record: rec})
	ctx := activateRule(t, c)
	s := waitState(t, c, "the rule to sync", func(s RuleState) bool { return s.Synced })
	if want := []string{"v1 ConfigMap"}; !slices.Equal(s.Pruning, want) {
		t.Fatalf("Pruning = %v, want %v", s.Pruning, want)
	}
	c.prunePass(ctx)
	c.prunePass(ctx)
	if s, _ := c.State("r"); len(s.Pruning) != 0 {
		t.Errorf("Pruning = %v after two passes: the wanted child in the rule's namespace keeps it", s.Pruning)
	}
	if got, _ := rec.get("r"); !slices.Equal(got, []ChildScope{{GroupVersionKind: configMaps, Namespace: "ns"}}) {
		t.Errorf("record = %v, want the rule's namespace alone", got)
	}
}

// A removed rule's child kinds are inherited by a rule that takes its
// parents over in the same edit (a rename), not by one that selects them
// after kgen let them go: a removed rule's children stay (contract §7),
// also before the sweep drops its parent scopes from the record (a
// review: a new Rule created moments after the old one was deleted
// inherited, and pruned, what the old one made).
func TestLetGoParentsAreNotInherited(t *testing.T) {
	gadgetsInNS := ChildScope{GroupVersionKind: gadgetKind, Namespace: "ns"}
	old := gadgetRule(t, configChild)
	old.Name = "old"
	inherited := func(steps ...[]*rules.Rule) []ChildScope {
		rec := &memRecord{
			scopes:  map[string][]ChildScope{"old": {{GroupVersionKind: deployments, Namespace: "ns"}}},
			parents: map[string][]ChildScope{"old": {gadgetsInNS}},
		}
		c := New(Config{Rules: []*rules.Rule{old}, Record: rec, Recorder: record.NewFakeRecorder(10)})
		if err := c.loadRecord(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, set := range steps {
			c.SetRules(set)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		rs := c.rules["r"]
		rs.parentScopes = []ChildScope{gadgetsInNS} // as once it runs
		return c.inheritedLocked(rs)
	}
	r := gadgetRule(t, deployChild)
	if got := inherited([]*rules.Rule{r}); len(got) != 1 {
		t.Errorf("renamed in one edit: inherited %v, want the old rule's Deployments", got)
	}
	if got := inherited(nil, []*rules.Rule{r}); len(got) != 0 {
		t.Errorf("removed, then another rule: inherited %v, want nothing: kgen let the parents go", got)
	}
	if got := inherited(nil, []*rules.Rule{old}, []*rules.Rule{r}); len(got) != 1 {
		t.Errorf("removed, added back, then renamed: inherited %v, want the old rule's Deployments", got)
	}
}

// The let-go holds after a restart: the sweep drops a let-go parent scope
// from the record even once another rule covers it (a review: nothing
// swept a covered scope, so a restarted kgen inherited, and pruned, what
// the removed rule had left).
func TestLetGoOutlivesARestart(t *testing.T) { synctest.Test(t, testLetGoOutlivesARestart) }

func testLetGoOutlivesARestart(t *testing.T) {
	gadgetsInNS := ChildScope{GroupVersionKind: gadgetKind, Namespace: "ns"}
	old := gadgetRule(t, configChild)
	old.Name = "old"
	rec := &memRecord{
		scopes:  map[string][]ChildScope{"old": {{GroupVersionKind: deployments, Namespace: "ns"}}},
		parents: map[string][]ChildScope{"old": {gadgetsInNS}},
	}
	client, m := fakeCluster(object("example.com/v1", "Gadget", "g", "p1", ""))
	c := New(Config{Rules: []*rules.Rule{old}, Client: client, Mapper: m, Record: rec, Recorder: record.NewFakeRecorder(10)})
	defer c.queue.ShutDown()
	ctx := context.Background()
	if err := c.loadRecord(ctx); err != nil {
		t.Fatal(err)
	}
	c.SetRules(nil)                                       // old removed: its parents let go
	c.SetRules([]*rules.Rule{gadgetRule(t, deployChild)}) // r covers them now
	// A record that cannot be written keeps the scope and its mark, for
	// a later sweep.
	rec.mu.Lock()
	rec.failSave = errors.New("the API server is away")
	rec.mu.Unlock()
	if !c.beginSweep() {
		t.Fatal("no sweep due for the let-go scope another rule covers")
	}
	c.sweepParents(ctx)
	c.mu.Lock()
	kept, marked, retry := c.record.parents["old"], c.record.letGo["old"], c.record.sweeps[gadgetsInNS]
	c.mu.Unlock()
	if len(kept) != 1 || len(marked) != 1 || retry.failures != 1 {
		t.Fatalf("after a sweep whose record write failed: scopes %v, let go %v, retry %+v; want the scope kept, marked, and retried later", kept, marked, retry)
	}
	rec.mu.Lock()
	rec.failSave = nil
	rec.mu.Unlock()
	time.Sleep(time.Hour) // the sweep's backoff
	if !c.beginSweep() {
		t.Fatal("no sweep due for the let-go scope after its backoff")
	}
	c.sweepParents(ctx)
	rec.mu.Lock()
	left := rec.parents["old"]
	rec.mu.Unlock()
	if len(left) != 0 {
		t.Fatalf("the record still holds the removed rule's parent scopes %v after the sweep", left)
	}
	// A restart: the record no longer leads r to the old rule's kinds.
	restarted := New(Config{Rules: []*rules.Rule{gadgetRule(t, deployChild)}, Client: client, Mapper: m, Record: rec, Recorder: record.NewFakeRecorder(10)})
	defer restarted.queue.ShutDown()
	if err := restarted.loadRecord(ctx); err != nil {
		t.Fatal(err)
	}
	restarted.mu.Lock()
	rs := restarted.rules["r"]
	rs.parentScopes = []ChildScope{gadgetsInNS}
	got := restarted.inheritedLocked(rs)
	restarted.mu.Unlock()
	if len(got) != 0 {
		t.Errorf("after a restart, r inherits %v from the rule kgen let go", got)
	}
}

// Another rule of the parents' kind in their namespace (other parents, by
// its selector) does not make a removed rule's parents taken over: kgen
// lets them go all the same, also when that rule changes in the same
// change, and when the removal comes before the record was read (a live
// check and a review: the let-go mark was skipped whenever any rule of the
// kind watched the namespace, and a later rule inherited, and pruned, what
// the removed rule had left). A rule that may select the parents, new in
// the same change, takes them over (a rename).
func TestLetGoBesideAnotherRuleOfTheKind(t *testing.T) {
	gadgetsInNS := ChildScope{GroupVersionKind: gadgetKind, Namespace: "ns"}
	selecting := func(name, tier, children string) *rules.Rule {
		rs, err := rules.Parse("rules.yaml", []byte(`apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: `+name+`}
spec:
  parent: {apiVersion: example.com/v1, kind: Gadget, namespaces: [ns], selector: {matchLabels: {tier: `+tier+`}}}
  children:
`+children), rules.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return rs[0]
	}
	old, other := selecting("old", "web", configChild), selecting("other", "other", configChild)
	inherits := func(loadFirst bool, steps ...[]*rules.Rule) []ChildScope {
		rec := &memRecord{
			scopes:  map[string][]ChildScope{"old": {{GroupVersionKind: deployments, Namespace: "ns"}}},
			parents: map[string][]ChildScope{"old": {gadgetsInNS}},
		}
		c := New(Config{Rules: []*rules.Rule{old, other}, Record: rec, Recorder: record.NewFakeRecorder(10)})
		defer c.queue.ShutDown()
		if loadFirst {
			if err := c.loadRecord(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		for _, set := range steps {
			c.SetRules(set)
		}
		if err := c.loadRecord(context.Background()); err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.markLetGoLocked() // as the next sweep pass does
		rs := c.rules["r"]
		rs.parentScopes = []ChildScope{gadgetsInNS}
		return c.inheritedLocked(rs)
	}
	r := selecting("r", "web", deployChild)
	for _, tc := range []struct {
		name      string
		loadFirst bool
		steps     [][]*rules.Rule
		inherits  bool
	}{
		{"removed; r later", true, [][]*rules.Rule{{other}, {other, r}}, false},
		{"removed while the other rule changes; r later", true, [][]*rules.Rule{{selecting("other", "other", deployChild)}, {other, r}}, false},
		{"removed before the record was read; r later", false, [][]*rules.Rule{{other}, {other, r}}, false},
		{"renamed to r in one change", true, [][]*rules.Rule{{other, r}}, true},
		{"renamed to r in one change, before the record was read", false, [][]*rules.Rule{{other, r}}, true},
		{"removed, back, then renamed, before the record was read", false, [][]*rules.Rule{{other}, {other, old}, {other, r}}, true},
	} {
		if got := inherits(tc.loadFirst, tc.steps...); (len(got) > 0) != tc.inherits {
			t.Errorf("%s: r inherits %v, want inherited: %t", tc.name, got, tc.inherits)
		}
	}
}

// In a scope inherited from a removed rule (renamed into this one while
// kgen was stopped), a rule counts as its parents' children only what
// that rule made: not an object of the parent labelled with a third rule.
func TestInheritedScopeCountsOnlyTheRenamedRulesChildren(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		made := func(name, uid, rule string) *unstructured.Unstructured {
			o := object("apps/v1", "Deployment", name, uid, "p1")
			l := o.GetLabels()
			l[reconcile.LabelRule] = rule
			o.SetLabels(l)
			return o
		}
		client, m := fakeCluster(object("example.com/v1", "Gadget", "g", "p1", ""), made("by-old", "d1", "old"), made("by-third", "d2", "third"))
		rec := &memRecord{
			scopes:  map[string][]ChildScope{"old": {{GroupVersionKind: deployments, Namespace: "ns"}}},
			parents: map[string][]ChildScope{"old": {{GroupVersionKind: gadgetKind, Namespace: "ns"}}},
		}
		c := New(Config{Rules: []*rules.Rule{gadgetRule(t, configChild)}, Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100), Record: rec})
		activateRule(t, c)
		waitState(t, c, "the rule to sync", func(s RuleState) bool { return s.Synced && len(s.Pruning) == 1 })
		waitFor(t, "the inherited scope's cache", func() bool { return slices.Contains(childNames(c, "p1"), "Deployment/by-old") })
		if got, want := childNames(c, "p1"), []string{"Deployment/by-old"}; !slices.Equal(got, want) {
			t.Errorf("children of p1 = %v, want %v: not the third rule's", got, want)
		}
	})
}
