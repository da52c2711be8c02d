package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"kgen.dev/kgen/pkg/kinds"
	"kgen.dev/kgen/pkg/mapper"
	"kgen.dev/kgen/pkg/reconcile"
	"kgen.dev/kgen/pkg/watch"
	"kgen.dev/kgen/rules"
)

// Sharding spreads parents over several replicas ('kgenctl run --shards');
// *shard.Shard is one. With it, the controller watches only the parents
// and children labelled reconcile.LabelShard=ID(), has the Sharding assign
// the parents of every rule, and asks it before each reconcile.
type Sharding interface {
	// ID is this replica's shard: the value of reconcile.LabelShard on its
	// parents and children.
	ID() string
	// Assign has the sharding assign the parents of a resource in a
	// namespace ("" for all) that match a rule's label selector; cached
	// lists those of this shard the controller caches. left is told of
	// parents there that the selector no longer matches, that carry
	// kgen's finalizer and that this replica releases (see Releases),
	// which no informer of this replica saw leave: those of a shard that
	// died, or that left without a shard. It returns the function that
	// ends it.
	Assign(gvr schema.GroupVersionResource, namespace, selector string, cached func() []any,
		left func(namespace, name string, uid types.UID)) (stop func())
	// Owner returns the live shard that the ring gives a key (shard.Key);
	// "" while this replica knows of none.
	Owner(key string) string
	// Releases tells whether this replica removes kgen's finalizer from a
	// parent of resource gvr that no rule selects: exactly one replica
	// does, whichever shard, if any, the parent's label names.
	Releases(gvr schema.GroupVersionResource, parent metav1.Object) bool
	// Begin says whether this replica may reconcile the cached parent now;
	// if so, done must be called when the reconcile has ended.
	Begin(gvr schema.GroupVersionResource, parent metav1.Object) (done func(), ok bool)
}

// Backoff of a parent that Begin refused while it is still in this
// shard's cache: it is being handed over, and leaves the cache once it
// is; if the hand-over fails, it is reconciled here again.
const shardRetryBase, shardRetryMax = 100 * time.Millisecond, 30 * time.Second

// sharded is the controller's part of sharding: which parents it has
// taken over since they arrived.
type sharded struct {
	Sharding
	retry workqueue.TypedRateLimiter[Key]

	mu sync.Mutex
	// settled are the parents whose children carry this shard's label, as
	// far as this replica knows: taken over, or found with children in
	// its caches.
	settled map[types.UID]bool
}

func newSharded(s Sharding) *sharded {
	if s == nil {
		return nil
	}
	return &sharded{Sharding: s, settled: map[types.UID]bool{},
		retry: workqueue.NewTypedItemExponentialFailureRateLimiter[Key](shardRetryBase, shardRetryMax)}
}

// shardSelector returns a label selector that also requires this shard's
// label; selector itself when sharding is off.
func (c *Controller) shardSelector(selector string) string {
	if c.shards == nil {
		return selector
	}
	req := reconcile.LabelShard + "=" + c.shards.ID()
	if selector == "" {
		return req
	}
	return selector + "," + req
}

// assign has the sharding assign the parents of a rule's informers, and
// returns the functions that end it.
func (c *Controller) assign(rule *rules.Rule, parentRegs map[string]*watch.Registration) []func() {
	if c.shards == nil {
		return nil
	}
	var stops []func()
	for ns, reg := range parentRegs {
		stops = append(stops, c.shards.Assign(reg.Informer().Key().GVR, ns, rule.Parent.Selector.String(), reg.Informer().Indexer().List,
			func(namespace, name string, uid types.UID) {
				c.left(Key{Rule: rule.Name, Namespace: namespace, Name: name}, uid)
			}))
	}
	return stops
}

// left queues a parent that the sharding found has left the rule while
// carrying kgen's finalizer, to be released (see Controller.release).
func (c *Controller) left(key Key, uid types.UID) {
	c.mu.Lock()
	c.leaving[key] = uid
	c.mu.Unlock()
	c.queue.Add(key)
}

// beginShard asks the sharding whether the parent may be reconciled here
// now. If not, the result requeues the key with a backoff of its own.
func (c *Controller) beginShard(key Key, gvr schema.GroupVersionResource, parent *unstructured.Unstructured) (done func(), res reconcile.Result, ok bool) {
	if c.shards == nil {
		return func() {}, reconcile.Result{}, true
	}
	done, ok = c.shards.Begin(gvr, parent)
	if !ok {
		return nil, reconcile.Result{RequeueAfter: c.shards.retry.When(key)}, false
	}
	c.shards.retry.Forget(key)
	return done, reconcile.Result{}, true
}

// unsettle forgets a parent that left this shard's cache: if it comes
// back, it is taken over again.
func (c *Controller) unsettle(uid types.UID) {
	if c.shards == nil {
		return
	}
	c.shards.mu.Lock()
	delete(c.shards.settled, uid)
	c.shards.mu.Unlock()
}

// releasesHere reports whether this replica releases a parent, read from
// the API server, that no rule selects: always without sharding; with it,
// only the one replica the sharding names, whichever shard the parent's
// label names (see Sharding.Releases). Its own shard may be dead, or
// another than the one whose informer saw it leave.
func (c *Controller) releasesHere(gvr schema.GroupVersionResource, parent metav1.Object) bool {
	return c.shards == nil || c.shards.Releases(gvr, parent)
}

// takeOver relabels the children of a parent that has just come to this
// shard (moved from another, claimed from a dead one, or new), so that
// this shard's informers see them, before the parent is first reconciled
// here: the children of a parent that moved still carry the old shard's
// label, and would look missing. They are listed from the API server by
// the parent's UID, and each gets this shard's label by one patch pinned
// to its UID. The reconcile waits until this shard's caches show them (at
// watch speed; up to takeOverWait); the template hash leaves the label out,
// so the reconcile finds them up to date and writes nothing more. The
// children are looked for in the child kinds of every rule of the parent's
// kind, not only the rule that selects it now: a parent relabelled from
// one rule into another while its shard was dead still has the old rule's
// children, which the reconcile prunes only if this shard's caches show
// them (see Controller.Children and move.go). A parent
// whose children are in this shard's caches already needs none of this
// (unless kgen's finalizer of it is to be carried out: see below), and
// neither does one kgen never reconciled (see reconciledBefore).
func (c *Controller) takeOver(ctx context.Context, rs *ruleState, mapping mapper.Mapping, parent *unstructured.Unstructured) error {
	if c.shards == nil {
		return nil
	}
	uid := parent.GetUID()
	c.shards.mu.Lock()
	settled := c.shards.settled[uid]
	c.shards.mu.Unlock()
	// A parent being deleted whose finalizer guards children (in other
	// namespaces, or let go of) is finalized from this shard's caches:
	// a child another shard's label still hides (a replica that died in
	// the middle of taking the parent over relabelled only some) would
	// be left behind for good. Its children are looked for every time;
	// any other parent's missing child is found by the reconcile's
	// create, which the API server refuses, and taken over then.
	finalizing := parent.GetDeletionTimestamp() != nil && slices.Contains(parent.GetFinalizers(), reconcile.Finalizer)
	if settled && !finalizing {
		return nil
	}
	regs := c.takeOverRegs(rs, parent)
	cached := false
	for _, r := range regs {
		if objs, err := r.reg.Informer().Indexer().ByIndex(indexParent, string(uid)); err == nil && len(objs) > 0 {
			cached = true
			break
		}
	}
	if (!cached || finalizing) && reconciledBefore(mapping, parent) {
		if err := c.relabelChildren(ctx, rs, parent, regs); err != nil {
			return err
		}
	}
	c.shards.mu.Lock()
	c.shards.settled[uid] = true
	c.shards.mu.Unlock()
	return nil
}

// reconciledBefore tells whether kgen may have made children for a parent:
// unless its kind has a status subresource and the parent has neither
// status.observedGeneration nor kgen's finalizer, which every reconcile
// that makes children leaves. A new parent then costs no list per child
// kind. (A replica that died after making children but before writing
// the parent's status leaves children that the reconcile takes for
// missing: the create is refused, and the reconciler finds each is its
// parent's and updates it, as it does any such child in the way.)
func reconciledBefore(mapping mapper.Mapping, parent *unstructured.Unstructured) bool {
	if !mapping.HasSubresource("status") || slices.Contains(parent.GetFinalizers(), reconcile.Finalizer) {
		return true
	}
	_, found, _ := unstructured.NestedFieldNoCopy(parent.Object, "status", "observedGeneration")
	return found
}

// takeOverReg is a child informer in which takeOver looks for a parent's
// children; inParentNamespace is set for one of the rule's own kinds
// whose every child lives in its parent's namespace.
type takeOverReg struct {
	reg               *watch.Registration
	inParentNamespace bool
}

// takeOverRegs returns the child informers of every rule of the parent's
// kind, prune-only ones included: those of the rule that selects the
// parent now, and those of the rules it may have moved from, whose
// children the reconcile finds there and prunes (see Controller.Children).
// Rules of other kinds never made children of this parent.
func (c *Controller) takeOverRegs(rs *ruleState, parent *unstructured.Unstructured) []takeOverReg {
	gk := parent.GroupVersionKind().GroupKind()
	c.mu.Lock()
	states := []*ruleState{rs}
	for _, other := range c.rules {
		if other != rs && other.rule.Parent.GroupVersionKind.GroupKind() == gk {
			states = append(states, other)
		}
	}
	var regs [][]*watch.Registration
	var pruning [][]*watch.Registration
	for _, s := range states {
		regs = append(regs, slices.Clone(s.childRegs))
		var p []*watch.Registration
		for _, w := range s.pruning {
			p = append(p, w.reg)
		}
		pruning = append(pruning, p)
	}
	c.mu.Unlock()
	var out []takeOverReg
	for i, s := range states {
		sameNamespace := c.childrenInParentNamespace(s.rule)
		for _, reg := range regs[i] {
			out = append(out, takeOverReg{reg: reg, inParentNamespace: sameNamespace[reg.Informer().Key().GVR]})
		}
		for _, reg := range pruning[i] {
			out = append(out, takeOverReg{reg: reg})
		}
	}
	return out
}

// relabelChildren gives the children of a parent, wherever the child
// informers regs watch, this shard's label.
func (c *Controller) relabelChildren(ctx context.Context, rs *ruleState, parent *unstructured.Unstructured, regs []takeOverReg) error {
	me := c.shards.ID()
	selector := reconcile.LabelManagedBy + "=" + reconcile.ManagedBy + "," + reconcile.LabelParentUID + "=" + string(parent.GetUID()) +
		"," + reconcile.LabelShard + "!=" + me
	type place struct {
		gvr schema.GroupVersionResource
		ns  string
	}
	var places []place
	listed := map[place]bool{}
	for _, r := range regs {
		k := r.reg.Informer().Key()
		ns := k.Namespace
		if ns == "" && parent.GetNamespace() != "" && r.inParentNamespace {
			ns = parent.GetNamespace() // not every namespace: the parent's holds them all
		}
		if !listed[place{k.GVR, ns}] {
			listed[place{k.GVR, ns}] = true
			places = append(places, place{k.GVR, ns})
		}
	}
	// One list of a kind in every namespace, where another rule watches
	// it so, finds what a list in one namespace would.
	places = slices.DeleteFunc(places, func(p place) bool { return p.ns != "" && listed[place{p.gvr, ""}] })
	relabelled := map[types.UID]string{} // resource versions of the relabelled children
	for _, p := range places {
		list, err := c.cfg.Client.Resource(p.gvr).Namespace(p.ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return fmt.Errorf("list the children of a parent that came to shard %s: %w", me, err)
		}
		for i := range list.Items {
			child := &list.Items[i]
			// Children are read as kgen and written as the reconcile
			// writes them, or prunes them if the rule does not make them
			// (reconcile.WriterOf): as the rule's ServiceAccount, if it
			// has one.
			writer := c.cfg.Client
			if sa := reconcile.WriterOf(rs.rule, child).ServiceAccount; sa != nil && c.cfg.Impersonate != nil {
				w, err := c.cfg.Impersonate(*sa)
				if err != nil {
					return err
				}
				writer = w
			}
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
				"uid": string(child.GetUID()), "labels": map[string]string{reconcile.LabelShard: me}}})
			out, err := writer.Resource(p.gvr).Namespace(child.GetNamespace()).Patch(ctx, child.GetName(), types.MergePatchType, patch,
				metav1.PatchOptions{FieldManager: shardFieldManager})
			if err != nil {
				return fmt.Errorf("relabel child %s %s of a parent that came to shard %s: %w", p.gvr.Resource, klog.KObj(child), me, err)
			}
			c.watches.Writes().Wrote(p.gvr, out)
			relabelled[out.GetUID()] = out.GetResourceVersion()
		}
	}
	if len(relabelled) == 0 {
		return nil
	}
	logger := klog.FromContext(ctx)
	logger.V(2).Info("Took a parent's children over", "children", len(relabelled), "shard", me)
	// Until the caches show them, the reconcile would take them for
	// missing (Writes finds only children kgen created itself). Each is
	// counted once: rules may share an informer.
	err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, takeOverWait, true, func(context.Context) (bool, error) {
		seen := map[types.UID]bool{}
		for _, r := range regs {
			objs, _ := r.reg.Informer().Indexer().ByIndex(indexParent, string(parent.GetUID()))
			for _, o := range objs {
				if m, ok := o.(metav1.Object); ok {
					if rv, ok := relabelled[m.GetUID()]; ok && !newerVersion(rv, m.GetResourceVersion()) {
						seen[m.GetUID()] = true
					}
				}
			}
		}
		return len(seen) >= len(relabelled), nil
	})
	if err != nil {
		logger.Info("The caches do not show a parent's relabelled children yet; reconciling it anyway", "wait", takeOverWait)
	}
	return nil
}

// takeOverWait bounds how long a parent that came to this shard waits for
// its relabelled children to show in the caches.
const takeOverWait = 10 * time.Second

// newerVersion reports whether resource version a is later than b (see
// watch.Writes).
func newerVersion(a, b string) bool {
	ra, errA := strconv.ParseUint(a, 10, 64)
	rb, errB := strconv.ParseUint(b, 10, 64)
	return errA == nil && errB == nil && ra > rb
}

// shardFieldManager writes the shard label (pkg/shard.FieldManager).
const shardFieldManager = "kgen-shard"

// childrenInParentNamespace returns the child resources of a rule whose
// every child lives in its parent's namespace.
func (c *Controller) childrenInParentNamespace(rule *rules.Rule) map[schema.GroupVersionResource]bool {
	out := map[schema.GroupVersionResource]bool{}
	place, err := rule.Placement(scoper{c.cfg.Mapper})
	if err != nil || place.ParentScope != kinds.Namespaced {
		return out
	}
	elsewhere := map[schema.GroupVersionResource]bool{}
	for _, cp := range place.Children {
		m, err := c.cfg.Mapper.ResourceFor(cp.GroupVersionKind)
		if err != nil {
			continue
		}
		gvr := m.GroupVersionResource()
		if cp.Scope == kinds.Namespaced && cp.Ownership == rules.OwnerReference {
			out[gvr] = true
		} else {
			elsewhere[gvr] = true
		}
	}
	for gvr := range elsewhere {
		delete(out, gvr)
	}
	return out
}
