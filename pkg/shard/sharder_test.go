package shard

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

var webapps = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "webapps"}

const ns = "team-a"

// parentOf returns a WebApp's metadata, with a shard label unless shard is
// empty.
func parentOf(name, shard, rv string) *metav1.PartialObjectMetadata {
	p := &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "example.com/v1", Kind: "WebApp"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, ResourceVersion: rv, UID: types.UID("uid-" + name)},
	}
	if shard != "" {
		p.Labels = map[string]string{Label: shard}
	}
	return p
}

// nameOwnedBy returns a parent name that the ring of shards gives to want.
func nameOwnedBy(t *testing.T, shards []string, want string) string {
	t.Helper()
	r := NewRing(shards, 0)
	for i := range 1000 {
		name := fmt.Sprintf("app-%d", i)
		if r.Owner(Key(webapps.GroupResource(), ns, name)) == want {
			return name
		}
	}
	t.Fatalf("no name of 1000 goes to %s", want)
	return ""
}

// fixture is a Shard with fake clients and a fake clock, whose view of
// the other shards a test sets.
type fixture struct {
	s     *Shard
	meta  *metadatafake.FakeMetadataClient
	kube  *kubefake.Clientset
	clock *clocktesting.FakeClock
}

func newFixture(t *testing.T, id string, objects ...runtime.Object) *fixture {
	t.Helper()
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return newFixtureWith(t, id, metadatafake.NewSimpleMetadataClient(scheme, objects...))
}

func newFixtureWith(t *testing.T, id string, meta *metadatafake.FakeMetadataClient) *fixture {
	t.Helper()
	f := &fixture{meta: meta, kube: kubefake.NewClientset(), clock: clocktesting.NewFakeClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))}
	s, err := New(Config{ID: id, Namespace: "kgen", Kube: f.kube, Metadata: f.meta, LeaseDuration: 4 * time.Second, Clock: f.clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.queue.ShutDown)
	f.s = s
	return f
}

// view makes the shard a member that sees the given live shards (itself
// included) and the given Leases.
func (f *fixture) view(live []string, leases ...*coordinationv1.Lease) {
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	f.s.member = true
	f.s.live = live
	f.s.ring = NewRing(live, 0)
	f.s.synced = f.clock.Now()
	for _, l := range leases {
		f.s.leases[strings.TrimPrefix(l.Name, LeasePrefix)] = &leaseView{lease: l, observed: f.clock.Now()}
	}
}

// process runs the sharder until its queue is empty.
func (f *fixture) process(t *testing.T) {
	t.Helper()
	for f.s.queue.Len() > 0 {
		f.s.processNext(t.Context())
	}
}

func (f *fixture) shardOf(t *testing.T, name string) string {
	t.Helper()
	p, err := f.meta.Resource(webapps).Namespace(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Labels[Label]
}

// patches returns the patches the shard sent, as "type body".
func (f *fixture) patches() []string {
	var out []string
	for _, a := range f.meta.Actions() {
		if p, ok := a.(clienttesting.PatchAction); ok {
			out = append(out, string(p.GetPatchType())+" "+string(p.GetPatch()))
		}
	}
	return out
}

func lease(id, holder string) *coordinationv1.Lease {
	d := int32(4)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: LeasePrefix + id, Namespace: "kgen", ResourceVersion: "5", Labels: map[string]string{LabelLease: id}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &d},
	}
}

// The hand-over: a shard that the ring no longer gives a parent stops
// starting reconciles of it, waits for the one in flight, and only then
// relabels it, testing that it still names itself. Afterwards a stale
// cached copy of the parent is not reconciled here.
func TestHandOverWaitsForReconcileInFlight(t *testing.T) {
	name := nameOwnedBy(t, []string{"a", "b"}, "b")
	f := newFixture(t, "a", parentOf(name, "a", "10"))
	f.view([]string{"a"})
	cached := parentOf(name, "a", "10")

	done, ok := f.s.Begin(webapps, cached)
	if !ok {
		t.Fatal("Begin refused a parent of its own shard")
	}
	// b joins: the ring now gives the parent to b.
	f.view([]string{"a", "b"})
	f.s.enqueue(ref{webapps, ns, name}, snapshotOf(cached))
	handed := make(chan struct{})
	go func() {
		defer close(handed)
		f.process(t)
	}()
	// Wait until the hand-over has begun draining.
	err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		f.s.mu.Lock()
		defer f.s.mu.Unlock()
		st := f.s.parents[ref{webapps, ns, name}]
		return st != nil && st.draining, nil
	})
	if err != nil {
		t.Fatalf("the hand-over did not begin: %v", err)
	}
	if _, ok := f.s.Begin(webapps, cached); ok {
		t.Error("Begin let a reconcile start while the parent is handed over")
	}
	if got := f.patches(); len(got) > 0 {
		t.Fatalf("relabelled while a reconcile was in flight: %q", got)
	}
	done()
	<-handed
	want := []string{`application/json-patch+json [{"op":"test","path":"/metadata/labels/kgen.dev~1shard","value":"a"},{"op":"replace","path":"/metadata/labels/kgen.dev~1shard","value":"b"}]`}
	if got := f.patches(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("patches = %q, want %q", got, want)
	}
	if got := f.shardOf(t, name); got != "b" {
		t.Errorf("parent's shard = %q, want b", got)
	}
	if _, ok := f.s.Begin(webapps, cached); ok {
		t.Error("Begin let a stale cached copy (still labelled a) be reconciled after the hand-over")
	}
	if _, ok := f.s.Begin(webapps, parentOf(name, "b", "20")); ok {
		t.Error("Begin let another shard's parent be reconciled")
	}
}

// What the sharder does about one parent, as it sees the ring and the
// other shards' Leases.
func TestSharderDecides(t *testing.T) {
	mine := nameOwnedBy(t, []string{"a", "b"}, "a")
	theirs := nameOwnedBy(t, []string{"a", "b"}, "b")
	mergeClaim := `application/merge-patch+json {"metadata":{"labels":{"kgen.dev/shard":"a"},"resourceVersion":"7"}}`
	takeFrom := func(from string) string {
		return `application/json-patch+json [{"op":"test","path":"/metadata/labels/kgen.dev~1shard","value":"` + from + `"},{"op":"replace","path":"/metadata/labels/kgen.dev~1shard","value":"a"}]`
	}
	tests := []struct {
		name    string
		parent  string
		shard   string
		leases  []*coordinationv1.Lease
		member  bool
		want    []string // patches
		wantNow string   // the parent's shard afterwards
	}{
		{name: "a new parent the ring gives it is claimed", parent: mine, member: true, want: []string{mergeClaim}, wantNow: "a"},
		{name: "a new parent the ring gives another is left to it", parent: theirs, member: true, wantNow: ""},
		{name: "a parent of a released Lease is taken", parent: mine, shard: "c", leases: []*coordinationv1.Lease{lease("c", "")}, member: true,
			want: []string{takeFrom("c")}, wantNow: "a"},
		{name: "a parent of a taken Lease is taken", parent: mine, shard: "c", leases: []*coordinationv1.Lease{lease("c", "taken-by-b")}, member: true,
			want: []string{takeFrom("c")}, wantNow: "a"},
		{name: "a parent of a live shard outside this ring is left alone", parent: mine, shard: "c", leases: []*coordinationv1.Lease{lease("c", "c_1234")}, member: true,
			wantNow: "c"},
		{name: "a parent of a shard never seen is left alone at first", parent: mine, shard: "c", member: true, wantNow: "c"},
		{name: "nothing moves before the shard holds its Lease", parent: mine, wantNow: ""},
		{name: "a parent of its own stays", parent: mine, shard: "a", member: true, wantNow: "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, "a", parentOf(tt.parent, tt.shard, "7"))
			f.view([]string{"a", "b"}, tt.leases...)
			f.s.member = tt.member
			f.s.enqueue(ref{webapps, ns, tt.parent}, snapshotOf(parentOf(tt.parent, tt.shard, "7")))
			f.process(t)
			if got := f.patches(); fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("patches = %q, want %q", got, tt.want)
			}
			if got := f.shardOf(t, tt.parent); got != tt.wantNow {
				t.Errorf("parent's shard = %q, want %q", got, tt.wantNow)
			}
		})
	}
}

// Two replicas that see different rings (b has not seen d yet) both try
// to take a parent of the dead shard c: exactly one wins, because each
// patch tests that the parent still names c, and the loser then leaves
// the parent to the live winner.
func TestTwoClaimsOneWinner(t *testing.T) {
	name := nameOwnedBy(t, []string{"b", "d"}, "d")
	if NewRing([]string{"b"}, 0).Owner(Key(webapps.GroupResource(), ns, name)) != "b" {
		t.Fatal("a ring of one must give b everything")
	}
	d := newFixture(t, "d", parentOf(name, "c", "7"))
	b := newFixtureWith(t, "b", d.meta) // one API server
	d.view([]string{"b", "d"}, lease("c", ""), lease("b", "b_1"))
	b.view([]string{"b"}, lease("c", ""))
	snap := snapshotOf(parentOf(name, "c", "7"))
	d.s.enqueue(ref{webapps, ns, name}, snap)
	b.s.enqueue(ref{webapps, ns, name}, snap)
	d.process(t)
	b.s.mu.Lock()
	b.s.leases["d"] = &leaseView{lease: lease("d", "d_1"), observed: b.clock.Now()} // b sees d's Lease now, but its ring is old
	b.s.mu.Unlock()
	b.process(t)
	if got := d.shardOf(t, name); got != "d" {
		t.Errorf("parent's shard = %q, want d", got)
	}
	var wins int
	for _, a := range d.meta.Actions() {
		if p, ok := a.(clienttesting.PatchAction); ok && strings.Contains(string(p.GetPatch()), `"op":"replace"`) {
			wins++
		}
	}
	if wins != 2 {
		t.Errorf("want two claims sent (one fails its test), got %d", wins)
	}
	// b retries its failed claim from a fresh copy: the parent is now the
	// live d's, so b leaves it alone.
	b.s.mu.Lock()
	r := ref{webapps, ns, name}
	act := b.s.decideLocked(r, b.s.snaps[r], b.clock.Now())
	b.s.mu.Unlock()
	if act != (action{}) {
		t.Errorf("after losing, b would %+v", act)
	}
}

// A shard that stops renewing its Lease is fenced (its Lease is taken, so
// it can no longer renew it) one lease duration after it was last seen
// renewed, and only then are its parents taken over.
func TestExpiredLeaseIsTakenBeforeItsParents(t *testing.T) {
	name := nameOwnedBy(t, []string{"a"}, "a")
	f := newFixture(t, "a", parentOf(name, "c", "7"))
	c := lease("c", "c_1234")
	if _, err := f.kube.CoordinationV1().Leases("kgen").Create(t.Context(), c, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.view([]string{"a"}, c)
	t.Cleanup(f.s.Assign(webapps, ns, "", func() []any { return nil }, nil))
	ctx := t.Context()

	f.clock.Step(3 * time.Second)
	f.s.updateMembership(ctx)
	if got := leaseWrites(f.kube); len(got) > 0 {
		t.Fatalf("fenced a Lease that has not expired: %v", got)
	}
	f.clock.Step(2 * time.Second) // 5 s > 4 s since c's Lease last changed
	f.s.updateMembership(ctx)
	f.process(t)
	if got := leaseWrites(f.kube); len(got) != 1 || got[0] != "taken-by-a" {
		t.Fatalf("Lease writes = %v, want c's Lease taken by a", got)
	}
	if got := f.patches(); len(got) > 0 {
		t.Fatalf("took parents of c before its Lease was taken from it: %q", got)
	}
	// The informer shows the taken Lease: c is dead, its parents move.
	taken, err := f.kube.CoordinationV1().Leases("kgen").Get(ctx, c.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	taken.ResourceVersion = "6" // as a real API server would have it
	f.s.observeLease("c", taken, false)
	f.s.updateMembership(ctx)
	f.process(t)
	if got := f.shardOf(t, name); got != "a" {
		t.Errorf("parent's shard = %q, want a once c is dead", got)
	}
}

// leaseWrites returns the holders written by Lease updates.
func leaseWrites(kube *kubefake.Clientset) []string {
	var out []string
	for _, a := range kube.Actions() {
		if u, ok := a.(clienttesting.UpdateAction); ok && a.GetVerb() == "update" && u.GetResource().Resource == "leases" {
			out = append(out, *u.GetObject().(*coordinationv1.Lease).Spec.HolderIdentity)
		}
	}
	return out
}

func TestValidateID(t *testing.T) {
	for id, ok := range map[string]bool{
		"kgen-7d9f6c-x2k4q":     true,
		"":                      false,
		"Kgen_1":                false, // a valid label value, not a valid Lease name
		strings.Repeat("x", 64): false,
		"with space":            false,
	} {
		if err := ValidateID(id); (err == nil) != ok {
			t.Errorf("ValidateID(%q) = %v, want ok %t", id, err, ok)
		}
	}
}

// The parents of a shard that died before a rule's parents were assigned
// (every replica restarted, say) are found as soon as the rule is, not at
// the next sweep.
func TestNewScopeFindsParentsOfDeadShards(t *testing.T) {
	name := nameOwnedBy(t, []string{"a"}, "a")
	f := newFixture(t, "a", parentOf(name, "c", "7"))
	f.view([]string{"a"}, lease("c", ""))
	f.s.updateMembership(t.Context()) // c is dead; there is nothing to move yet
	f.process(t)
	if got := f.shardOf(t, name); got != "c" {
		t.Fatalf("parent's shard = %q before its scope was assigned", got)
	}
	t.Cleanup(f.s.Assign(webapps, ns, "", func() []any { return nil }, nil))
	f.s.updateMembership(t.Context())
	f.process(t)
	if got := f.shardOf(t, name); got != "a" {
		t.Errorf("parent's shard = %q, want a once its scope is assigned", got)
	}
}

// leftOf returns a WebApp that carries kgen's finalizer (unless not) and
// the given labels, a shard label among them unless shard is empty.
func leftOf(name, shard string, finalizer bool, kv ...string) *metav1.PartialObjectMetadata {
	p := parentOf(name, shard, "7")
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	for i := 0; i+1 < len(kv); i += 2 {
		p.Labels[kv[i]] = kv[i+1]
	}
	if finalizer {
		p.Finalizers = []string{"kgen.dev/cleanup"}
	}
	return p
}

// leftRecorder collects what a scope's left function is told.
type leftRecorder struct {
	mu    sync.Mutex
	names []string
}

func (l *leftRecorder) left(namespace, name string, uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.names = append(l.names, namespace+"/"+name+" "+string(uid))
}

func (l *leftRecorder) got() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Clone(l.names)
	slices.Sort(out)
	return slices.Compact(out)
}

// A parent of a shard that died, relabelled out of its rule's selector
// before any other shard took it, is in no replica's cache: when the shard
// dies, the replica that the ring gives the parent finds it (a list
// without the rule's selector) and hands it to the controller to release,
// if it carries kgen's finalizer and no rule assigned here selects it.
// Parents the selector still matches are claimed, as before.
func TestDeadShardsParentsThatLeftAreFound(t *testing.T) {
	shards := []string{"a", "b"}
	names := namesOwnedBy(t, shards, "a", 4)
	mine, mine2, mine3, mine4 := names[0], names[1], names[2], names[3]
	theirs := nameOwnedBy(t, shards, "b")
	f := newFixture(t, "a",
		leftOf(mine, "c", true, "app", "old"),   // left the rule: found
		leftOf(theirs, "c", true, "app", "old"), // left, but b releases it
		leftOf(mine2, "c", false, "app", "old"), // not kgen's any more
		leftOf(mine3, "c", true, "app", "web"),  // still selected: claimed
		leftOf(mine4, "c", true, "app", "db"),   // moved to another rule
	)
	f.view(shards, lease("b", "b_1"), lease("c", "c_1"))
	var web, db leftRecorder
	t.Cleanup(f.s.Assign(webapps, ns, "app=web", func() []any { return nil }, web.left))
	t.Cleanup(f.s.Assign(webapps, "", "app=db", func() []any { return nil }, db.left))
	f.s.updateMembership(t.Context()) // the new scopes are searched: c is live
	f.process(t)
	if got := web.got(); len(got) > 0 {
		t.Fatalf("left = %v while their shard is live", got)
	}
	// c releases its Lease (or has it taken): it is dead.
	released := lease("c", "")
	released.ResourceVersion = "6"
	f.s.observeLease("c", released, false)
	f.s.updateMembership(t.Context())
	f.process(t)
	if got, want := web.got(), []string{ns + "/" + mine + " uid-" + mine}; !slices.Equal(got, want) {
		t.Errorf("left = %v, want %v", got, want)
	}
	// The other rule's scope finds it too (the controller releases it
	// once).
	if got, want := db.got(), []string{ns + "/" + mine + " uid-" + mine}; !slices.Equal(got, want) {
		t.Errorf("the other rule was told %v left, want %v", got, want)
	}
	if got := f.shardOf(t, mine3); got != "a" {
		t.Errorf("selected parent's shard = %q, want a (claimed)", got)
	}
	for _, name := range []string{mine, theirs, mine2} {
		if got := f.shardOf(t, name); got != "c" {
			t.Errorf("shard of %s, which left the rule, = %q: claimed", name, got)
		}
	}
}

// The sweep also finds parents that left their rule with no shard label
// at all, outside every selector (a scope without a selector has no such
// parents, and costs no list).
func TestSweepFindsParentsThatLeftWithoutAShard(t *testing.T) {
	shards := []string{"a", "b"}
	mine := nameOwnedBy(t, shards, "a")
	theirs := nameOwnedBy(t, shards, "b")
	f := newFixture(t, "a",
		leftOf(mine, "", true, "app", "old"),
		leftOf(theirs, "", true, "app", "old"),
	)
	f.view(shards, lease("b", "b_1"))
	var web leftRecorder
	t.Cleanup(f.s.Assign(webapps, ns, "app=web", func() []any { return nil }, web.left))
	f.s.updateMembership(t.Context())
	f.process(t)
	if got := web.got(); len(got) > 0 {
		t.Fatalf("left = %v before the sweep (a new scope lists only dead shards' parents)", got)
	}
	f.s.sweep(t.Context())
	if got, want := web.got(), []string{ns + "/" + mine + " uid-" + mine}; !slices.Equal(got, want) {
		t.Errorf("left = %v, want %v", got, want)
	}

	g := newFixture(t, "a", leftOf(mine, "", true, "app", "old"))
	g.view(shards, lease("b", "b_1"))
	t.Cleanup(g.s.Assign(webapps, ns, "", func() []any { return nil }, web.left))
	// The sweep's lists, not the scope's informer of parents without a
	// shard (its list and watch start on their own goroutine).
	sweepLists := func() int {
		n := 0
		for _, a := range g.meta.Actions() {
			if l, ok := a.(clienttesting.ListAction); ok && l.GetListRestrictions().Labels.String() != "!"+Label {
				n++
			}
		}
		return n
	}
	before := sweepLists()
	g.s.sweep(t.Context())
	if got := sweepLists() - before; got != 1 {
		t.Errorf("sweep of a scope without a selector sent %d lists, want 1", got)
	}
}

// Exactly one replica releases a parent no rule selects: the shard its
// label names while that shard is live, else the ring's owner of its key.
func TestReleases(t *testing.T) {
	shards := []string{"a", "b"}
	mine := nameOwnedBy(t, shards, "a")
	theirs := nameOwnedBy(t, shards, "b")
	for _, tt := range []struct {
		name, shard string
		want        bool
	}{
		{mine, "a", true},
		{mine, "b", false}, // b's informer saw it leave
		{theirs, "a", true},
		{theirs, "b", false},
		{mine, "c", true}, // dead: the ring's owner
		{theirs, "c", false},
		{mine, "", true},
		{theirs, "", false},
	} {
		f := newFixture(t, "a")
		f.view(shards, lease("b", "b_1"), lease("c", ""))
		if got := f.s.Releases(webapps, parentOf(tt.name, tt.shard, "1")); got != tt.want {
			owner := "a"
			if tt.name == theirs {
				owner = "b"
			}
			t.Errorf("Releases(owner %s, label %q) = %t, want %t", owner, tt.shard, got, tt.want)
		}
	}
	f := newFixture(t, "a")
	if f.s.Releases(webapps, parentOf(mine, "", "1")) {
		t.Error("a replica that is no member releases a parent")
	}
}

// namesOwnedBy returns n parent names that the ring of shards gives to
// want.
func namesOwnedBy(t *testing.T, shards []string, want string, n int) []string {
	t.Helper()
	r := NewRing(shards, 0)
	var out []string
	for i := 0; i < 1000 && len(out) < n; i++ {
		name := fmt.Sprintf("app-%d", i)
		if r.Owner(Key(webapps.GroupResource(), ns, name)) == want {
			out = append(out, name)
		}
	}
	if len(out) < n {
		t.Fatalf("fewer than %d names of 1000 go to %s", n, want)
	}
	return out
}

// A parent that arrives with the label of a shard that is not live (restored
// from a backup taken while another set of replicas ran) is seen by the
// scope's informer of unassigned parents, which selects the parents no live
// shard holds, and is claimed at once, not at the next sweep. When the live
// shards change, that informer follows.
func TestUnassignedInformerSeesParentsOfGoneShards(t *testing.T) {
	live := []string{"a", "b"}
	name := nameOwnedBy(t, live, "a")
	f := newFixture(t, "a")
	var mu sync.Mutex
	var selectors []string
	f.meta.PrependReactor("list", "webapps", func(a clienttesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		selectors = append(selectors, a.(clienttesting.ListAction).GetListRestrictions().Labels.String())
		return false, nil, nil
	})
	listed := func(want string) {
		t.Helper()
		err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			return slices.Contains(selectors, want), nil
		})
		if err != nil {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("lists with selectors %q, want one with %q", selectors, want)
		}
	}
	f.view(live, lease("b", "b_1"))
	f.s.updateMembership(t.Context())
	t.Cleanup(f.s.Assign(webapps, ns, "", func() []any { return nil }, nil))
	listed("kgen.dev/shard notin (a,b)")

	// b's Lease expires: b is late, not dead, and its parents may not be
	// claimed: they are not listed (every replica would cache them all
	// each time a shard is slow to renew).
	f.clock.Step(5 * time.Second)
	f.s.updateMembership(t.Context())
	mu.Lock()
	n := len(selectors)
	mu.Unlock()
	// b is taken from its holder (fenced): dead, its parents are listed.
	taken := lease("b", "a_1")
	taken.ResourceVersion = "6"
	f.s.observeLease("b", taken, false)
	f.s.updateMembership(t.Context())
	listed("kgen.dev/shard notin (a)")
	mu.Lock()
	if slices.Contains(selectors[:n], "kgen.dev/shard notin (a)") {
		t.Errorf("lists %q: b's parents were listed while b was only late", selectors)
	}
	mu.Unlock()

	// Restored with the label of c, which has no Lease: dead once this
	// replica has followed the Leases for a lease duration.
	f.clock.Step(5 * time.Second)
	if err := f.meta.Tracker().Add(parentOf(name, "c", "9")); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		f.process(t)
		return f.shardOf(t, name) == "a", nil
	})
	if err != nil {
		t.Errorf("the restored parent is on shard %q, want a: claimed without a sweep", f.shardOf(t, name))
	}
}

// A live shard's Lease deleted (by a user): its holder, if it runs,
// creates it again at its next renewal, so the shard is not dead, and its
// parents not claimed, until it has had no Lease for a lease duration.
// (Before, it was dead at once: two replicas wrote the same parents.)
func TestDeletedLeaseIsNotDeadAtOnce(t *testing.T) {
	for _, back := range []bool{true, false} {
		t.Run(fmt.Sprintf("created again: %t", back), func(t *testing.T) {
			name := nameOwnedBy(t, []string{"a"}, "a")
			f := newFixture(t, "a", parentOf(name, "b", "7"))
			b := lease("b", "b_1")
			f.view([]string{"a", "b"}, b)
			f.s.mu.Lock()
			f.s.synced = f.clock.Now().Add(-time.Hour) // this replica has followed the Leases for long
			f.s.mu.Unlock()
			t.Cleanup(f.s.Assign(webapps, ns, "", func() []any { return nil }, nil))
			ctx := t.Context()
			f.s.updateMembership(ctx)

			f.s.observeLease("b", b, true)
			f.s.updateMembership(ctx)
			f.clock.Step(3 * time.Second)
			if next := f.s.updateMembership(ctx); next > time.Second {
				t.Errorf("next look in %v, want at most the 1 s left until b would be dead", next)
			}
			// Claims come through the unassigned informer, in the
			// background: give them time.
			claimed := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Second, true, func(context.Context) (bool, error) {
				f.process(t)
				return f.shardOf(t, name) != "b", nil
			})
			if claimed == nil {
				t.Fatalf("took b's parent within a lease duration of its Lease's deletion: on shard %q, patches %q", f.shardOf(t, name), f.patches())
			}
			f.s.mu.Lock()
			holding := slices.Contains(f.s.holding, "b")
			f.s.mu.Unlock()
			if !holding {
				t.Errorf("b is not among the shards holding parents while its Lease is briefly gone")
			}
			if back {
				again := lease("b", "b_1")
				again.ResourceVersion = "9"
				f.s.observeLease("b", again, false)
			}
			f.clock.Step(2 * time.Second) // 5 s > 4 s since the deletion
			f.s.updateMembership(ctx)
			err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 2*time.Second, true, func(context.Context) (bool, error) {
				f.process(t)
				return f.shardOf(t, name) == "a", nil
			})
			switch got := f.shardOf(t, name); {
			case back && got != "b":
				t.Errorf("parent's shard = %q, want b: its Lease is back", got)
			case !back && err != nil:
				t.Errorf("parent's shard = %q, want a once b had no Lease for a lease duration", got)
			}
		})
	}
}
