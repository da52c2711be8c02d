package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	"kgen.dev/kgen/pkg/kinds"
	"kgen.dev/kgen/pkg/mapper"
	"kgen.dev/kgen/pkg/reconcile"
	"kgen.dev/kgen/pkg/watch"
	"kgen.dev/kgen/rules"
)

// Deleted parents of a rule that waits.
//
// A rule waits when one of its kinds is not served (a child kind's CRD was
// deleted under it, say), or when it started but an informer of its cannot
// list or watch (kgen may not list a child kind: 403; or its API fails):
// none of its parents is reconciled until it runs. A parent deleted
// meanwhile would stay Terminating on kgen's finalizer for as long as the
// rule waits. So a waiting rule still finalizes its deleted parents:
//
//   - a rule that could not start, whose parent kind is served, watches its
//     parents where it would when running (watchWaiting): a parent that is
//     being deleted and carries kgen's finalizer is queued. A rule that
//     started and is held back by a failing informer has its parent
//     informers already. Each pass of the activation loop also queues such
//     parents of both kinds of waiting rules from their caches (for a rule
//     held back, their events came before it was), unless a failed try
//     backs off (queueWaitingDeleted);
//   - finalizeWaiting lists the parent's children that only the finalizer
//     guards from the API server, by its UID, where the rule's children
//     cannot be owned by the parent and where its record says earlier
//     versions made children (guardedScopes). A kind that is served in no
//     version is skipped: nothing of it can exist. Then they are deleted
//     (or let go, for deletionPolicy Orphan) and the finalizer removed
//     (Reconciler.Release);
//   - a kind kgen may not list (403) leaves kgen unable to know or delete
//     those children: nothing is deleted and the finalizer stays. The
//     reconcile fails, which logs it naming the kind and retries with the
//     queue's backoff, and a Warning event on the parent says what to do:
//     grant kgen the right, or remove the finalizer.
//
// Once the rule runs, its parent informers replace the waiting ones (the
// same informers: nothing is listed again), and its reconciles finalize
// parents as usual.
//
// A rule that could not start for waitReportAfter also has its parents say
// so: each one's Ready condition turns False, with the rule's reason
// (KindNotServed, or Waiting) and why it waits (reportWaiting), so that no
// parent keeps a Ready=True its children no longer earn (a live audit: a
// child kind's CRD deleted while kgen was stopped left every parent Ready
// while none of those children existed). Only the status is written, once
// per parent (and per change of one) for each time the rule waits; a kind
// that comes back within the grace, as during a CRD's update, costs
// nothing. Once the rule runs, its reconciles write Ready again.

// watchWaiting starts, for a rule that could not start and whose parent
// kind is served, the informers of its parents, so that its deleted
// parents are finalized while it waits; it stops them once the rule runs
// or its parent kind is not served.
func (c *Controller) watchWaiting(ctx context.Context, rs *ruleState) {
	c.mu.Lock()
	active := rs.active
	c.mu.Unlock()
	if active {
		c.unwatchWaiting(rs)
		return
	}
	m, err := c.cfg.Mapper.ResourceFor(rs.rule.Parent.GroupVersionKind)
	if err != nil {
		c.unwatchWaiting(rs)
		return
	}
	c.mu.Lock()
	held := rs.waitRegs != nil && rs.waitParent.GroupVersionResource() == m.GroupVersionResource()
	if held {
		rs.waitParent = m
	}
	c.mu.Unlock()
	if held {
		return
	}
	c.unwatchWaiting(rs)
	namespaces := []string{metav1.NamespaceAll}
	if m.Namespaced && len(rs.rule.Parent.Namespaces) > 0 {
		namespaces = rs.rule.Parent.Namespaces
	}
	regs := map[string]*watch.Registration{}
	for _, ns := range namespaces {
		key := watch.Key{GVR: m.GroupVersionResource(), Namespace: ns, Selector: c.shardSelector(rs.rule.Parent.Selector.String())}
		reg, err := c.watches.Acquire(key, c.waitingHandler(rs.rule.Name))
		if err != nil {
			for _, r := range regs {
				r.Release()
			}
			klog.FromContext(ctx).Error(err, "Cannot watch the parents of a waiting rule to finalize those deleted; trying again", "rule", rs.rule.Name)
			return
		}
		regs[ns] = reg
	}
	c.mu.Lock()
	if rs.active || c.rules[rs.rule.Name] != rs {
		c.mu.Unlock()
		for _, r := range regs {
			r.Release()
		}
		return
	}
	rs.waitRegs, rs.waitParent = regs, m
	c.mu.Unlock()
	klog.FromContext(ctx).V(2).Info("Watching the parents of a waiting rule, to finalize those deleted", "rule", rs.rule.Name, "parent", m.GroupVersionResource().String())
}

// unwatchWaiting stops the informers watchWaiting started for a rule.
func (c *Controller) unwatchWaiting(rs *ruleState) {
	c.mu.Lock()
	regs := rs.waitRegs
	rs.waitRegs = nil
	c.mu.Unlock()
	for _, r := range regs {
		r.Release()
	}
}

// waitingHandler queues a parent of a waiting rule that is being deleted
// and carries kgen's finalizer, and, once the rule's wait is reported,
// any parent that is new or changed.
func (c *Controller) waitingHandler(rule string) watch.Handler {
	return func(obj metav1.Object, deleted bool) {
		if deleted {
			return
		}
		queue := beingFinalized(obj)
		if !queue {
			c.mu.Lock()
			rs := c.rules[rule]
			queue = rs != nil && !rs.active && rs.waitReported
			c.mu.Unlock()
		}
		if queue {
			c.queue.Add(Key{Rule: rule, Namespace: obj.GetNamespace(), Name: obj.GetName()})
		}
	}
}

// waitReportAfter is how long a rule waits before its parents' Ready
// condition says so.
const waitReportAfter = 30 * time.Second

// queueWaitingReports queues, once, the parents of each rule that could
// not start and has waited waitReportAfter, for reportWaiting.
func (c *Controller) queueWaitingReports() {
	var keys []Key
	c.mu.Lock()
	for name, rs := range c.rules {
		if rs.active || rs.waiting == "" || rs.waitReported || rs.waitRegs == nil || time.Since(rs.waitingSince) < waitReportAfter {
			continue
		}
		rs.waitReported = true
		for _, reg := range rs.waitRegs {
			for _, obj := range reg.Informer().Indexer().List() {
				if m, ok := obj.(metav1.Object); ok && m.GetDeletionTimestamp() == nil {
					keys = append(keys, Key{Rule: name, Namespace: m.GetNamespace(), Name: m.GetName()})
				}
			}
		}
	}
	c.mu.Unlock()
	for _, key := range keys {
		c.queue.Add(key)
	}
}

// reportWaiting writes, for a parent of a rule that could not start and
// whose wait is reported, a Ready condition False saying why the rule
// waits: nothing else, and nothing when it says so already.
func (c *Controller) reportWaiting(ctx context.Context, key Key, rs *ruleState) (reconcile.Result, error) {
	c.mu.Lock()
	report := !rs.active && rs.waitReported && c.rules[rs.rule.Name] == rs
	reg := rs.waitRegs[key.Namespace]
	if reg == nil {
		reg = rs.waitRegs[metav1.NamespaceAll]
	}
	mapping := rs.waitParent
	reason := ruleWaiting
	if rs.kindNotServed {
		reason = ruleKindNotServed
	}
	msg := fmt.Sprintf("rule %s waits, and does not reconcile this parent until it can run: %s", rs.rule.Name, rs.waiting)
	c.mu.Unlock()
	if !report || reg == nil {
		return reconcile.Result{}, nil
	}
	cached, err := reg.Informer().Get(key.Namespace, key.Name)
	if err != nil || cached == nil {
		return reconcile.Result{}, err
	}
	parent := c.watches.Writes().Latest(cached)
	if parent.GetDeletionTimestamp() != nil {
		return reconcile.Result{}, nil
	}
	// Under sharding, only while the parent is this replica's to write,
	// as for a reconcile.
	done, refused, ok := c.beginShard(key, mapping.GroupVersionResource(), parent)
	if !ok {
		return refused, nil
	}
	defer done()
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("rule", key.Rule, "parent", klog.KObj(parent)))
	return c.reconciler.ReportWaiting(ctx, rs.rule, mapping, parent, reason, msg)
}

// The Ready reasons of a parent whose rule waits: those the rule's own
// Ready condition gives (pkg/ruleset).
const (
	ruleWaiting       = "Waiting"
	ruleKindNotServed = "KindNotServed"
)

// beingFinalized tells whether a parent is being deleted and carries
// kgen's finalizer.
func beingFinalized(obj metav1.Object) bool {
	return obj.GetDeletionTimestamp() != nil && slices.Contains(obj.GetFinalizers(), reconcile.Finalizer)
}

// waitingParentRegsLocked returns the parent informers of a rule that
// waits, and its parent kind: those of watchWaiting for a rule that could
// not start, its own for one that started and is held back by an informer
// that cannot list or watch; none for a rule that runs, or whose caches
// are merely syncing. The caller holds c.mu.
func (c *Controller) waitingParentRegsLocked(rs *ruleState) (map[string]*watch.Registration, mapper.Mapping) {
	switch {
	case !rs.active:
		return rs.waitRegs, rs.waitParent
	case !rs.synced && c.stalledLocked(rs):
		return rs.parentRegs, rs.parent
	}
	return nil, mapper.Mapping{}
}

// stalledLocked tells whether a started rule that has not synced is held
// back by an informer whose list or watch fails (prune-only informers do
// not hold it back). The caller holds c.mu.
func (c *Controller) stalledLocked(rs *ruleState) bool {
	regs := append(slices.Clone(rs.childRegs), rs.inputRegs...)
	regs = append(regs, mapsValues(rs.parentRegs)...)
	for _, reg := range regs {
		if !reg.HasSynced() && c.watchErrLocked(reg.Informer().Key()).err != nil {
			return true
		}
	}
	return false
}

// queueWaitingDeleted queues the parents of every waiting rule that are
// being deleted and carry kgen's finalizer, from the rules' caches, unless
// a failed try of one backs off.
func (c *Controller) queueWaitingDeleted() {
	var keys []Key
	c.mu.Lock()
	for name, rs := range c.rules {
		regs, _ := c.waitingParentRegsLocked(rs)
		for _, reg := range regs {
			for _, obj := range reg.Informer().Indexer().List() {
				if m, ok := obj.(metav1.Object); ok && beingFinalized(m) {
					keys = append(keys, Key{Rule: name, Namespace: m.GetNamespace(), Name: m.GetName()})
				}
			}
		}
	}
	c.mu.Unlock()
	for _, key := range keys {
		if c.queue.NumRequeues(key) == 0 {
			c.queue.Add(key)
		}
	}
}

// finalizeWaiting finalizes a parent of a waiting rule that is being
// deleted and carries kgen's finalizer: it deletes the children only the
// finalizer guards, then removes it. A parent that is not being deleted,
// or a rule that does not wait, is left alone; finalizing says whether it
// was one to finalize.
func (c *Controller) finalizeWaiting(ctx context.Context, key Key, rs *ruleState) (finalizing bool, err error) {
	c.mu.Lock()
	regs, mapping := c.waitingParentRegsLocked(rs)
	reg := regs[key.Namespace]
	if reg == nil {
		reg = regs[metav1.NamespaceAll]
	}
	c.mu.Unlock()
	if reg == nil {
		return false, nil
	}
	cached, err := reg.Informer().Get(key.Namespace, key.Name)
	if err != nil || cached == nil {
		return false, err
	}
	parent := c.watches.Writes().Latest(cached)
	if !beingFinalized(parent) {
		return false, nil
	}
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("rule", key.Rule, "parent", klog.KObj(parent)))
	// Where earlier versions of the rule made children is in the record,
	// which no rule may have read yet if none ran since kgen started.
	if err := c.loadRecord(ctx); err != nil {
		// Without it, children an earlier version made would be missed
		// and left behind once the finalizer goes: try again later.
		return true, fmt.Errorf("finalize %s while rule %s waits: read the record of where rules made children: %w", klog.KObj(parent), rs.rule.Name, err)
	}
	children, err := c.listChildren(ctx, parent, c.guardedScopes(rs.rule, parent))
	if apierrors.IsForbidden(err) {
		err = fmt.Errorf("kgen keeps its finalizer %s while rule %s waits: it may not list the children the finalizer guards (403 Forbidden), so it can neither know nor delete them; grant kgen list and delete on them, or remove the finalizer (which leaves them): %w",
			reconcile.Finalizer, rs.rule.Name, err)
		if c.cfg.Events != reconcile.EventsNone {
			c.cfg.Recorder.Event(parent, corev1.EventTypeWarning, reconcile.ReasonForbidden, err.Error())
		}
		return true, err
	}
	if err != nil {
		return true, fmt.Errorf("finalize %s while rule %s waits: %w", klog.KObj(parent), rs.rule.Name, err)
	}
	if err := c.reconciler.Release(ctx, rs.rule, mapping, parent, children); err != nil {
		return true, err
	}
	klog.FromContext(ctx).Info("Finalized a deleted parent while its rule waits", "finalizer", reconcile.Finalizer, "children", len(children))
	return true, nil
}

// guardedScopes returns where the children of a parent of a rule that only
// kgen's finalizer guards may be: the scopes of the rule's children that
// the parent cannot own (of a kind that is not served, every namespace:
// listChildren skips it), and the scopes recorded for the rule that its
// children do not cover (made by earlier versions of it).
func (c *Controller) guardedScopes(rule *rules.Rule, parent *unstructured.Unstructured) []ChildScope {
	var current, out []ChildScope
	place, err := rule.Placement(servedScoper{c.cfg.Mapper})
	if err != nil {
		// The parent's scope is not what the rule says: look everywhere.
		for _, child := range rule.Children {
			s := ChildScope{GroupVersionKind: child.GroupVersionKind}
			current, out = append(current, s), append(out, s)
		}
	} else {
		for _, child := range place.Children {
			namespaces := child.Namespaces
			if namespaces == nil {
				namespaces = []string{metav1.NamespaceAll}
			}
			for _, ns := range namespaces {
				s := ChildScope{GroupVersionKind: child.GroupVersionKind, Namespace: ns}
				current = append(current, s)
				if !child.OwnerReference(parent.GetNamespace(), ns) {
					out = append(out, s)
				}
			}
		}
	}
	c.mu.Lock()
	recorded := slices.Clone(c.record.want[rule.Name])
	c.mu.Unlock()
	return sortScopes(append(out, uncovered(recorded, current)...))
}

// servedScoper answers scope questions from discovery; a kind that is not
// served is of unknown scope (kinds.ErrUnknownScope) rather than an error.
type servedScoper struct{ m *mapper.Mapper }

func (s servedScoper) Namespaced(gvk schema.GroupVersionKind) (bool, error) {
	m, err := s.m.ResourceFor(gvk)
	if errors.Is(err, mapper.ErrNotFound) {
		return false, fmt.Errorf("%w: %w", kinds.ErrUnknownScope, err)
	}
	return m.Namespaced, err
}
