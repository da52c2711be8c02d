package shard

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"kgen.dev/kgen/pkg/reconcile"
)

// ref names one parent.
type ref struct {
	gvr             schema.GroupVersionResource
	namespace, name string
}

func (r ref) key() string { return Key(r.gvr.GroupResource(), r.namespace, r.name) }

func (r ref) String() string {
	if r.namespace == "" {
		return r.gvr.Resource + "/" + r.name
	}
	return r.gvr.Resource + " " + r.namespace + "/" + r.name
}

// snapshot is what the sharder last saw of a parent: its shard and its
// resource version.
type snapshot struct {
	shard, resourceVersion string
}

func snapshotOf(obj metav1.Object) snapshot {
	return snapshot{shard: obj.GetLabels()[Label], resourceVersion: obj.GetResourceVersion()}
}

// parentState is what happens to one parent here: reconciles in flight, a
// hand-over in progress, or a hand-over done.
type parentState struct {
	inflight int
	// draining is set while the parent is being handed over: no reconcile
	// starts; drained is closed once those in flight have ended.
	draining bool
	drained  chan struct{}
	// released is the resource version of the parent's hand-over: a cached
	// copy of the parent older than it is stale and must not be
	// reconciled here. releasedAt is when.
	released   string
	releasedAt time.Time
}

// scopeKey is one informer's worth of parents: a resource, a namespace
// ("" for all) and the rule's label selector.
type scopeKey struct {
	gvr                 schema.GroupVersionResource
	namespace, selector string
}

// scope is a scopeKey the controller watches, and how the sharder sees its
// parents: the controller's caches of this shard's parents, and an
// informer of the parents no shard has. left tells the controller of
// parents that left the scope's selector (see Assign).
type scope struct {
	key scopeKey
	// selects is key.selector parsed; nil if it does not parse (it
	// always does, for a rule's).
	selects    labels.Selector
	cached     map[int]func() []any
	left       map[int]func(namespace, name string, uid types.UID)
	nextID     int
	unassigned cache.SharedIndexInformer
	// unassignedSel is the label selector unassigned watches with (see
	// unassignedSelector).
	unassignedSel string
	stop          context.CancelFunc
}

// unassignedSelector selects the parents that no shard holds: those
// without a shard, and those whose shard is not among holding, the shards
// that are not dead (notin matches an object without the label too). A
// parent restored from a backup with the label of a shard that is gone is
// then seen at once, not at the next sweep.
func unassignedSelector(holding []string) string {
	if len(holding) == 0 {
		return "!" + Label
	}
	return Label + " notin (" + strings.Join(holding, ",") + ")"
}

// with returns the scope's selector with more requirements.
func (k scopeKey) with(more string) string {
	if k.selector == "" {
		return more
	}
	return k.selector + "," + more
}

// Assign has the shard assign the parents of a resource in a namespace
// ("" for all) that match a label selector (the rule's): it claims those
// the ring gives it that have no shard, or a dead one, and hands its own
// over when the ring gives them to another shard. cached lists the
// controller's cached parents of this shard in that scope. left is told of
// parents of the resource and namespace that the selector no longer
// matches, that carry kgen's finalizer and that this replica releases (see
// Releases): no shard's informer sees them any more, so the sharder finds
// them when a shard dies and at every sweep. Assign returns the function
// that ends it.
func (s *Shard) Assign(gvr schema.GroupVersionResource, namespace, selector string, cached func() []any,
	left func(namespace, name string, uid types.UID)) (stop func()) {
	k := scopeKey{gvr: gvr, namespace: namespace, selector: selector}
	s.mu.Lock()
	sc := s.scopes[k]
	if sc == nil {
		sc = &scope{key: k, cached: map[int]func() []any{}, left: map[int]func(string, string, types.UID){}}
		sc.selects, _ = labels.Parse(selector)
		s.scopes[k] = sc
		s.startUnassignedLocked(sc)
		// Its parents of shards that died before it was assigned are
		// searched for at once, not at the next sweep.
		s.fresh = append(s.fresh, sc)
		defer s.kickMembership()
	}
	id := sc.nextID
	sc.nextID++
	sc.cached[id] = cached
	if left != nil {
		sc.left[id] = left
	}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(sc.cached, id)
		delete(sc.left, id)
		if len(sc.cached) == 0 && s.scopes[k] == sc {
			sc.stop()
			delete(s.scopes, k)
		}
	}
}

// startUnassignedLocked starts the scope's informer of parents that no
// shard holds (unassignedSelector): normally none, as every new
// parent is claimed at once, and the parents of a shard that died are
// claimed by the others. It caches only their metadata. The caller holds
// s.mu.
func (s *Shard) startUnassignedLocked(sc *scope) {
	k := sc.key
	sel := unassignedSelector(s.holding)
	inf := metadatainformer.NewFilteredMetadataInformer(s.cfg.Metadata, k.gvr, k.namespace, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.LabelSelector = k.with(sel) }).Informer()
	_ = inf.SetTransform(func(obj any) (any, error) {
		if m, ok := obj.(metav1.Object); ok {
			m.SetManagedFields(nil)
			m.SetAnnotations(nil)
		}
		return obj, nil
	})
	enqueue := func(obj any) {
		if m, ok := obj.(metav1.Object); ok {
			s.enqueue(ref{gvr: k.gvr, namespace: m.GetNamespace(), name: m.GetName()}, snapshotOf(m))
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	})
	ctx, cancel := context.WithCancel(context.Background())
	sc.unassigned, sc.unassignedSel, sc.stop = inf, sel, cancel
	go inf.RunWithContext(ctx)
}

// restartUnassignedLocked starts each scope's informer of unassigned
// parents again when the shards that hold parents changed its selector.
// The caller holds s.mu.
func (s *Shard) restartUnassignedLocked() {
	sel := unassignedSelector(s.holding)
	for _, sc := range s.scopes {
		if sc.unassignedSel != sel {
			sc.stop()
			s.startUnassignedLocked(sc)
		}
	}
}

// stopScopes stops every scope's informer.
func (s *Shard) stopScopes() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, sc := range s.scopes {
		sc.stop()
		delete(s.scopes, k)
	}
}

// Begin tells whether this replica may reconcile a parent of resource gvr
// now, as the controller cached it: only when the replica holds its Lease,
// the parent is assigned to it, is not being handed over or stale from
// before a hand-over, and the ring gives it to this replica (otherwise it
// is handed over, and not reconciled here). When it may, done must be
// called once the reconcile has ended: a hand-over waits for it.
func (s *Shard) Begin(gvr schema.GroupVersionResource, parent metav1.Object) (done func(), ok bool) {
	r := ref{gvr: gvr, namespace: parent.GetNamespace(), name: parent.GetName()}
	snap := snapshotOf(parent)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.member || snap.shard != s.cfg.ID {
		return nil, false
	}
	st := s.parents[r]
	if st != nil && st.draining {
		return nil, false
	}
	if st != nil && st.released != "" {
		if !newer(snap.resourceVersion, st.released) {
			return nil, false // the cache has not seen the hand-over yet
		}
		st.released = "" // handed back since
	}
	if owner := s.ring.Owner(r.key()); owner != s.cfg.ID {
		s.enqueueLocked(r, snap) // hand it over
		return nil, false
	}
	if st == nil {
		st = &parentState{}
		s.parents[r] = st
	}
	st.inflight++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		st.inflight--
		if st.inflight == 0 && st.draining && st.drained != nil {
			close(st.drained)
			st.drained = nil
		}
		s.forgetIdleLocked(r, st)
	}, true
}

// forgetIdleLocked drops the state of a parent nothing happens to.
func (s *Shard) forgetIdleLocked(r ref, st *parentState) {
	if st.inflight == 0 && !st.draining && st.released == "" && s.parents[r] == st {
		delete(s.parents, r)
	}
}

// enqueue queues a parent for the sharder to look at, remembering the
// newest snapshot of it.
func (s *Shard) enqueue(r ref, snap snapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.enqueueLocked(r, snap)
}

func (s *Shard) enqueueLocked(r ref, snap snapshot) {
	if old, ok := s.snaps[r]; ok && newer(old.resourceVersion, snap.resourceVersion) {
		snap = old
	}
	s.snaps[r] = snap
	// Queued for any worker; a parent queued twice is looked at once.
	s.queue.Add(r)
}

// action is what the sharder does about one parent.
type action struct {
	claim    bool   // take it for this shard
	handOver string // give it to this shard
}

// decideLocked says what to do about a parent as last seen: hand it over
// if it is this shard's and the ring gives it to another live shard; claim
// it if the ring gives it to this shard and it has no shard or a dead
// one. A parent of another live (or not yet dead) shard is that shard's
// business.
func (s *Shard) decideLocked(r ref, snap snapshot, now time.Time) action {
	if !s.member {
		return action{}
	}
	owner := s.ring.Owner(r.key())
	switch {
	case snap.shard == s.cfg.ID:
		if owner != "" && owner != s.cfg.ID {
			return action{handOver: owner}
		}
	case owner != s.cfg.ID:
	case snap.shard == "", s.stateLocked(snap.shard, now) == dead:
		return action{claim: true}
	}
	return action{}
}

// processNext moves one queued parent; false once the queue is shut down.
func (s *Shard) processNext(ctx context.Context) bool {
	r, shutdown := s.queue.Get()
	if shutdown {
		return false
	}
	// Done lets the parent be queued again, for any worker.
	defer s.queue.Done(r)
	s.mu.Lock()
	snap, ok := s.snaps[r]
	act := s.decideLocked(r, snap, s.clock.Now())
	s.mu.Unlock()
	if !ok {
		s.queue.Forget(r)
		return true
	}
	var err error
	switch {
	case act.claim:
		err = s.claim(ctx, r, snap)
	case act.handOver != "":
		err = s.handOver(ctx, r, snap, act.handOver)
	}
	switch {
	case err == nil, apierrors.IsNotFound(err):
		// Done, or the parent is gone.
		s.queue.Forget(r)
		s.mu.Lock()
		if cur, ok := s.snaps[r]; ok && cur == snap {
			delete(s.snaps, r)
		}
		s.mu.Unlock()
	default:
		// Someone else changed the parent (its shard label, when a patch's
		// test fails), or the request failed: look again at a fresh copy,
		// with backoff.
		klog.FromContext(ctx).V(2).Info("Cannot move a parent; retrying", "parent", r.String(), "err", err.Error())
		if fresh, getErr := s.cfg.Metadata.Resource(r.gvr).Namespace(r.namespace).Get(ctx, r.name, metav1.GetOptions{}); getErr == nil {
			s.mu.Lock()
			s.snaps[r] = snapshotOf(fresh)
			s.mu.Unlock()
		} else if apierrors.IsNotFound(getErr) {
			s.queue.Forget(r)
			return true
		}
		s.queue.AddRateLimited(r)
	}
	return true
}

// claim labels a parent with this shard: one without a shard by a merge
// patch pinned to the resource version seen, one of a dead shard by a JSON
// patch that first tests it still names that shard. Either fails rather
// than take a parent another replica claimed or was given meanwhile.
func (s *Shard) claim(ctx context.Context, r ref, snap snapshot) error {
	var patch []byte
	var pt types.PatchType
	if snap.shard == "" {
		pt = types.MergePatchType
		patch, _ = json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": snap.resourceVersion, "labels": map[string]string{Label: s.cfg.ID}}})
	} else {
		pt = types.JSONPatchType
		patch = relabel(snap.shard, s.cfg.ID)
	}
	if err := s.patch(ctx, r, pt, patch); err != nil {
		return err
	}
	s.metrics.moved("claim")
	klog.FromContext(ctx).V(2).Info("Claimed a parent", "parent", r.String(), "from", snap.shard)
	return nil
}

// handOver gives one of this shard's parents to another: it stops
// reconciling it, waits for the reconciles in flight, then relabels it,
// testing that it still names this shard. From then on this replica
// reconciles no copy of it older than the relabelling.
func (s *Shard) handOver(ctx context.Context, r ref, snap snapshot, to string) error {
	s.mu.Lock()
	st := s.parents[r]
	if st == nil {
		st = &parentState{}
		s.parents[r] = st
	}
	st.draining = true
	drained := make(chan struct{})
	if st.inflight > 0 {
		st.drained = drained
	} else {
		close(drained)
	}
	s.mu.Unlock()
	var err error
	var rv string
	select {
	case <-drained:
		rv, err = s.patchRV(ctx, r, types.JSONPatchType, relabel(s.cfg.ID, to))
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.mu.Lock()
	st.draining = false
	if err == nil {
		st.released, st.releasedAt = rv, s.clock.Now()
	}
	s.forgetIdleLocked(r, st)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	s.metrics.moved("handover")
	klog.FromContext(ctx).V(2).Info("Handed a parent over", "parent", r.String(), "to", to)
	return nil
}

// relabel is a JSON patch that changes the shard label from one shard to
// another, and fails if it does not name the first.
func relabel(from, to string) []byte {
	path := "/metadata/labels/" + strings.ReplaceAll(strings.ReplaceAll(Label, "~", "~0"), "/", "~1")
	b, _ := json.Marshal([]map[string]string{
		{"op": "test", "path": path, "value": from},
		{"op": "replace", "path": path, "value": to},
	})
	return b
}

func (s *Shard) patch(ctx context.Context, r ref, pt types.PatchType, data []byte) error {
	_, err := s.patchRV(ctx, r, pt, data)
	return err
}

// patchRV patches a parent's metadata and returns its new resource
// version.
func (s *Shard) patchRV(ctx context.Context, r ref, pt types.PatchType, data []byte) (string, error) {
	out, err := s.cfg.Metadata.Resource(r.gvr).Namespace(r.namespace).Patch(ctx, r.name, pt, data, metav1.PatchOptions{FieldManager: FieldManager})
	if err != nil {
		return "", fmt.Errorf("relabel %s: %w", r, err)
	}
	return out.GetResourceVersion(), nil
}

// rebalance queues, after the ring changed, this shard's parents that the
// ring now gives to others, the parents without a shard, and the parents
// of shards that just died.
func (s *Shard) rebalance(ctx context.Context, newlyDead []string) {
	s.mu.Lock()
	scopes := make([]*scope, 0, len(s.scopes))
	for _, sc := range s.scopes {
		scopes = append(scopes, sc)
	}
	s.mu.Unlock()
	for _, sc := range scopes {
		s.mu.Lock()
		listers := make([]func() []any, 0, len(sc.cached))
		for _, l := range sc.cached {
			listers = append(listers, l)
		}
		s.mu.Unlock()
		for _, list := range listers {
			for _, obj := range list() {
				if m, ok := obj.(metav1.Object); ok {
					r := ref{gvr: sc.key.gvr, namespace: m.GetNamespace(), name: m.GetName()}
					if s.Owner(r.key()) != s.cfg.ID {
						s.enqueue(r, snapshotOf(m))
					}
				}
			}
		}
		for _, obj := range sc.unassigned.GetStore().List() {
			if m, ok := obj.(metav1.Object); ok {
				s.enqueue(ref{gvr: sc.key.gvr, namespace: m.GetNamespace(), name: m.GetName()}, snapshotOf(m))
			}
		}
		for _, id := range newlyDead {
			s.find(ctx, sc, Label+"="+id)
		}
	}
}

// sweep queues every parent whose shard is not live: those of shards that
// died while no replica watched, or that never were. It also finds the
// parents that left a scope's selector without a shard, or whose shard was
// not their ring owner, and that no informer saw go (see find).
func (s *Shard) sweep(ctx context.Context) {
	s.mu.Lock()
	scopes := make([]*scope, 0, len(s.scopes))
	for _, sc := range s.scopes {
		scopes = append(scopes, sc)
	}
	s.mu.Unlock()
	s.sweepScopes(ctx, scopes, true)
}

// sweepScopes queues the parents of some scopes whose shard is not live,
// and forgets hand-overs done long ago. With unlabelled, it also lists the
// parents without a shard outside each scope's selector (none for a
// scope without one: it selects every parent there), for those that left
// it.
func (s *Shard) sweepScopes(ctx context.Context, scopes []*scope, unlabelled bool) {
	s.mu.Lock()
	member := s.member
	notLive := Label
	if len(s.live) > 0 {
		notLive += "," + Label + " notin (" + strings.Join(s.live, ",") + ")"
	}
	now := s.clock.Now()
	for r, st := range s.parents {
		if st.released != "" && now.Sub(st.releasedAt) > s.cfg.SweepInterval {
			st.released = "" // the cache has long caught up
			s.forgetIdleLocked(r, st)
		}
	}
	s.mu.Unlock()
	if !member {
		return
	}
	for _, sc := range scopes {
		s.find(ctx, sc, notLive)
		if unlabelled && sc.key.selector != "" {
			s.find(ctx, sc, "!"+Label)
		}
	}
}

// find lists the parents of a scope's resource and namespace whose labels
// match more, as the API server's watch cache has them, without the
// scope's selector: those the selector matches are queued to be assigned;
// the others, which left it, are handed to the scope's left functions if
// they carry kgen's finalizer and this replica releases them (Releases).
// A parent that left its rule after its shard died, or that left with no
// shard, is in no shard's cache: this is how it is found.
func (s *Shard) find(ctx context.Context, sc *scope, more string) {
	if sc.selects == nil {
		more = sc.key.with(more) // assign the selector's parents at least
	}
	opts := metav1.ListOptions{LabelSelector: more, ResourceVersion: "0"}
	list, err := s.cfg.Metadata.Resource(sc.key.gvr).Namespace(sc.key.namespace).List(ctx, opts)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Cannot list parents to assign", "resource", sc.key.gvr.String(), "selector", opts.LabelSelector)
		return
	}
	type leftParent struct {
		namespace, name string
		uid             types.UID
	}
	var left []leftParent
	for i := range list.Items {
		m := &list.Items[i]
		r := ref{gvr: sc.key.gvr, namespace: m.GetNamespace(), name: m.GetName()}
		set := labels.Set(m.GetLabels())
		switch {
		case sc.selects == nil || sc.selects.Matches(set):
			s.enqueue(r, snapshotOf(m))
		case slices.Contains(m.GetFinalizers(), reconcile.Finalizer) && !s.inAnyScope(r, set) && s.releases(r, set[Label]):
			left = append(left, leftParent{m.GetNamespace(), m.GetName(), m.GetUID()})
		}
	}
	if len(left) == 0 {
		return
	}
	s.mu.Lock()
	tell := slices.Collect(maps.Values(sc.left))
	s.mu.Unlock()
	klog.FromContext(ctx).V(2).Info("Found parents that left their rule", "resource", sc.key.gvr.String(), "parents", len(left))
	for _, p := range left {
		for _, f := range tell {
			f(p.namespace, p.name, p.uid)
		}
	}
}

// inAnyScope tells whether a parent is in the scope of any rule assigned
// here (of any version of its resource): it has not left, or it moved to
// another rule, and is assigned as that rule's.
func (s *Shard) inAnyScope(r ref, set labels.Set) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, sc := range s.scopes {
		if k.gvr.GroupResource() == r.gvr.GroupResource() && (k.namespace == "" || k.namespace == r.namespace) &&
			(sc.selects == nil || sc.selects.Matches(set)) {
			return true
		}
	}
	return false
}

// Releases tells whether this replica is the one that releases a parent of
// resource gvr that no rule selects any more (removes kgen's finalizer
// from it): the shard its label names while that shard is live (its
// informer saw the parent leave), else the shard the ring gives the
// parent's key. Every replica that agrees on the live shards names the
// same one.
func (s *Shard) Releases(gvr schema.GroupVersionResource, parent metav1.Object) bool {
	return s.releases(ref{gvr: gvr, namespace: parent.GetNamespace(), name: parent.GetName()}, parent.GetLabels()[Label])
}

func (s *Shard) releases(r ref, shard string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.member {
		return false
	}
	if slices.Contains(s.live, shard) {
		return shard == s.cfg.ID
	}
	return s.ring.Owner(r.key()) == s.cfg.ID
}

// newer reports whether resource version a is later than b (see
// watch.Writes: etcd's are increasing integers; others are never newer).
func newer(a, b string) bool {
	ra, errA := strconv.ParseUint(a, 10, 64)
	rb, errB := strconv.ParseUint(b, 10, 64)
	return errA == nil && errB == nil && ra > rb
}
