package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/pager"
	"k8s.io/klog/v2"

	"kgen.dev/kgen/pkg/mapper"
	"kgen.dev/kgen/pkg/reconcile"
	"kgen.dev/kgen/pkg/watch"
	"kgen.dev/kgen/rules"
)

// Parents of kinds no rule watches any more.
//
// A parent that leaves every rule while kgen runs is released by retire
// or release, and one that leaves while kgen is stopped by the sweepLeft
// of a rule of its kind that still watches its namespace. What neither
// finds is a parent where no rule looks any more: every rule of its kind
// was removed, or its namespace dropped from a rule's namespaces, while
// kgen was stopped. Deleted, such a parent would stay Terminating on
// kgen's finalizer forever.
//
// So the record (record.go) also holds, per rule, where it watched its
// parents: its parent kind and each namespace it watched ("" for every
// namespace), written with its child scopes when the rule starts, before
// any of its parents is reconciled (and so before kgen puts its finalizer
// on one). Once every rule is loaded and the record read, each recorded
// parent scope that no rule covers (no rule of that group and kind
// watches, or would watch once its kinds are served, its namespace) is
// swept once: listed without a watch, a page at a time, and each parent
// in it that carries kgen's finalizer and that no rule selects is released
// by releaseParent, as retire and release release one (the children only
// the finalizer guards are deleted first if the parent is being deleted;
// they are listed by the parent's UID in the child scopes recorded for the
// rules that watched the parent). Then the scope leaves the record. This is
// a one-off at start, or after a live change of the rules leaves a scope
// uncovered: in steady state it makes no request.
//
// A recorded kind that is not served any more is logged and dropped: its
// objects went with it (a CRD's objects are deleted with the CRD, and a
// Terminating CRD is still served until they are). A sweep that fails
// (kgen may not list or patch the kind, the server fails) keeps the scope,
// is logged, and is tried again with backoff, from sweepRetryBase doubling
// to sweepRetryMax; one whose list is forbidden, hourly (sweepForbiddenRetry).

// Backoff of a failed sweep of a recorded parent scope, and the wait after
// a sweep that kgen is forbidden to make.
const sweepRetryBase, sweepRetryMax, sweepForbiddenRetry = 10 * time.Second, 10 * time.Minute, time.Hour

// sweepRetry is when the sweep of a parent scope may be tried again.
type sweepRetry struct {
	failures int
	next     time.Time
}

// parentScopes returns where a rule watches its parents: a scope per
// namespace of its parent informers.
func parentScopes(rule *rules.Rule, parentRegs map[string]*watch.Registration) []ChildScope {
	out := make([]ChildScope, 0, len(parentRegs))
	for ns := range parentRegs {
		out = append(out, ChildScope{GroupVersionKind: rule.Parent.GroupVersionKind, Namespace: ns})
	}
	return sortScopes(out)
}

// saveParentScopes adds a started rule state's parent scopes to what the
// controller wants recorded for the rule, and writes that unless the
// Record holds it already. The caller has read the Record.
func (c *Controller) saveParentScopes(ctx context.Context, rs *ruleState) error {
	name := rs.rule.Name
	c.mu.Lock()
	if c.record.parents == nil {
		c.record.parents = map[string][]ChildScope{}
	}
	c.record.parents[name] = sortScopes(append(slices.Clone(c.record.parents[name]), rs.parentScopes...))
	c.mu.Unlock()
	return c.writeParents(ctx, name)
}

// writeParents writes the parent scopes the controller wants recorded for
// a rule, unless the Record holds them already (or was not read yet).
func (c *Controller) writeParents(ctx context.Context, rule string) error {
	c.mu.Lock()
	want := slices.Clone(c.record.parents[rule])
	saved := c.record.savedParents[rule]
	loaded := c.record.loaded
	c.mu.Unlock()
	if !loaded {
		return nil
	}
	now, wrote, err := c.writeScopes(rule, want, saved, func(r Record, add, remove []ChildScope) ([]ChildScope, error) {
		return r.UpdateParents(ctx, rule, add, remove)
	})
	if err != nil || !wrote {
		return err
	}
	c.mu.Lock()
	c.record.savedParents[rule] = now
	if others := minus(now, want); len(others) > 0 {
		// Written by other replicas meanwhile: swept by this one too
		// once no rule covers them.
		c.record.parents[rule] = sortScopes(append(c.record.parents[rule], others...))
	}
	c.mu.Unlock()
	want = now
	if len(want) == 0 {
		klog.FromContext(ctx).Info("Nothing left to record of where the rule watched its parents", "rule", rule)
	} else {
		klog.FromContext(ctx).Info("Recorded where the rule watches its parents", "rule", rule, "scopes", encodeScopes(want))
	}
	return nil
}

// coveredLocked tells whether a rule of the current set watches a parent
// scope, or would once its kinds are served: a rule of the same group and
// kind in every namespace or in the scope's. The caller holds c.mu.
func (c *Controller) coveredLocked(s ChildScope) bool {
	for _, rs := range c.rules {
		if rs.rule.Parent.GroupVersionKind.GroupKind() != s.GroupVersionKind.GroupKind() {
			continue
		}
		namespaces := rs.rule.Parent.Namespaces
		if rs.active {
			namespaces = slices.Collect(maps.Keys(rs.parentRegs))
		}
		// An active rule without a namespace list watches in "", every namespace.
		if len(namespaces) == 0 || slices.Contains(namespaces, "") || slices.Contains(namespaces, s.Namespace) {
			return true
		}
	}
	return false
}

// dueParentsLocked returns the recorded parent scopes that no rule covers
// and whose sweep is not backing off, each with the rules that recorded
// it, of the rules whose record this replica removes scopes from. The
// caller holds c.mu.
func (c *Controller) dueParentsLocked(now time.Time) map[ChildScope][]string {
	out := map[ChildScope][]string{}
	for rule, scopes := range c.record.parents {
		if !c.removesFromRecord(rule) {
			// Under sharding, the one replica that removes the scopes
			// sweeps them: it releases every parent there.
			continue
		}
		for _, s := range scopes {
			// A scope kgen let go is swept even once another rule covers
			// it (the sweep spares the parents a rule selects): so it
			// leaves the record, and the let-go holds after a restart.
			letGo := slices.Contains(c.record.letGo[rule], s)
			if c.coveredLocked(s) && !letGo || now.Before(c.record.sweeps[s].next) {
				continue
			}
			out[s] = append(out[s], rule)
		}
	}
	for _, rules := range out {
		slices.Sort(rules)
	}
	return out
}

// markLetGoLocked marks as let go (see recordState.letGo) the recorded
// parent scopes of the rules removed since (recordState.removals) that no
// rule new or changed in the same change may select, and those of rules
// that are not loaded and that no rule covers, once the record was read;
// the caller holds c.mu and knows every rule is loaded (a rule not read
// yet is not a removed one).
func (c *Controller) markLetGoLocked() {
	if !c.record.loaded {
		return
	}
	mark := func(name string, s ChildScope) {
		if !slices.Contains(c.record.letGo[name], s) {
			if c.record.letGo == nil {
				c.record.letGo = map[string][]ChildScope{}
			}
			c.record.letGo[name] = append(c.record.letGo[name], s)
		}
	}
	for _, rm := range c.record.removals {
		name := rm.rule.Name
		if c.rules[name] != nil || c.pending[name] != nil {
			continue // back since
		}
		for _, s := range c.record.parents[name] {
			takenOver := slices.ContainsFunc(rm.takers, func(r *rules.Rule) bool {
				// A taker counts while that version of it is loaded.
				if rs, p := c.rules[r.Name], c.pending[r.Name]; (rs == nil || rs.rule != r) && (p == nil || p.rule != r) {
					return false
				}
				return r.Parent.GroupVersionKind.GroupKind() == s.GroupVersionKind.GroupKind() &&
					(len(r.Parent.Namespaces) == 0 || slices.Contains(r.Parent.Namespaces, s.Namespace)) &&
					rules.MayOverlap(r.Parent, rm.rule.Parent)
			})
			if !takenOver {
				mark(name, s)
			}
		}
	}
	c.record.removals = nil
	for name, scopes := range c.record.parents {
		if c.rules[name] != nil || c.pending[name] != nil {
			continue
		}
		for _, s := range scopes {
			if !c.coveredLocked(s) {
				mark(name, s)
			}
		}
	}
}

// beginSweep tells whether a sweep of recorded parent scopes is due, and if
// so marks one as running: every rule is loaded, the Record was read, no
// sweep runs, and some recorded scope no rule covers is not backing off.
func (c *Controller) beginSweep() bool {
	if c.cfg.RulesLoaded != nil && !c.cfg.RulesLoaded() {
		return false // a parent of a rule not loaded yet has not left
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.markLetGoLocked()
	if !c.record.loaded || c.record.sweeping || len(c.dueParentsLocked(time.Now())) == 0 {
		return false
	}
	c.record.sweeping = true
	return true
}

// sweepParents sweeps, once, every recorded parent scope that no rule
// covers (see the comment at the top of this file), and drops from the
// record those it is done with.
func (c *Controller) sweepParents(ctx context.Context) {
	defer func() {
		c.mu.Lock()
		c.record.sweeping = false
		c.mu.Unlock()
	}()
	c.mu.Lock()
	due := c.dueParentsLocked(time.Now())
	c.mu.Unlock()
	for _, s := range slices.SortedFunc(maps.Keys(due), compareScopes) {
		logger := klog.FromContext(ctx).WithValues("scope", s.String(), "recordedBy", due[s])
		err := c.sweepScope(klog.NewContext(ctx, logger), s, due[s])
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			c.mu.Lock()
			if c.record.sweeps == nil {
				c.record.sweeps = map[ChildScope]sweepRetry{}
			}
			r := c.record.sweeps[s]
			wait := min(sweepRetryBase<<min(r.failures, 16), sweepRetryMax)
			// Only kgen's list of the parents: a parent it could not
			// release (a child the removed rule's ServiceAccount may
			// not delete, say) is mended by a grant to that account,
			// and the sweep should notice it within minutes.
			var listErr *sweepListError
			forbidden := errors.As(err, &listErr) && apierrors.IsForbidden(err)
			if forbidden {
				// RBAC made from the new rules no longer grants the
				// scope: only an operator's grant helps, so the
				// retry does not need to be frequent.
				wait = sweepForbiddenRetry
			}
			c.record.sweeps[s] = sweepRetry{failures: r.failures + 1, next: time.Now().Add(wait)}
			c.mu.Unlock()
			if forbidden {
				logger.Error(err, "Cannot release the parents where no rule looks any more: kgen may not list or patch them there. Grant it list and patch on them until it has swept them once, or release them with kgenctl cleanup; trying again", "after", wait)
			} else {
				logger.Error(err, "Cannot release the parents where no rule looks any more; trying again", "after", wait)
			}
			continue
		}
		c.dropParentScope(ctx, s, due[s])
	}
}

// sweepListError is a sweep's failure to list the parents of its scope.
type sweepListError struct{ err error }

func (e *sweepListError) Error() string { return e.err.Error() }
func (e *sweepListError) Unwrap() error { return e.err }

// dropParentScope removes a swept parent scope from the record of the
// rules that recorded it, except a rule that covers it again meanwhile.
func (c *Controller) dropParentScope(ctx context.Context, s ChildScope, recordedBy []string) {
	c.mu.Lock()
	delete(c.record.sweeps, s)
	var changed []string
	wasLetGo := map[string]bool{}
	for _, rule := range recordedBy {
		if rs := c.rules[rule]; rs != nil && slices.Contains(rs.parentScopes, s) {
			continue
		}
		if kept := slices.DeleteFunc(slices.Clone(c.record.parents[rule]), func(r ChildScope) bool { return r == s }); len(kept) > 0 {
			c.record.parents[rule] = kept
		} else {
			delete(c.record.parents, rule)
		}
		wasLetGo[rule] = slices.Contains(c.record.letGo[rule], s)
		if kept := slices.DeleteFunc(slices.Clone(c.record.letGo[rule]), func(r ChildScope) bool { return r == s }); len(kept) > 0 {
			c.record.letGo[rule] = kept
		} else {
			delete(c.record.letGo, rule)
		}
		changed = append(changed, rule)
	}
	c.mu.Unlock()
	for _, rule := range changed {
		if err := c.writeParents(ctx, rule); err != nil {
			c.logRecordError(ctx, rule, err)
			// The record still holds the scope: so does memory, and a
			// let-go scope stays marked, so that a later sweep (with the
			// sweep's backoff) drops it. Dropped from memory only, a
			// scope another rule covers would never be swept again, and
			// a restart would take its rule as renamed.
			c.mu.Lock()
			if c.rules[rule] == nil && !slices.Contains(c.record.parents[rule], s) {
				c.record.parents[rule] = sortScopes(append(c.record.parents[rule], s))
				if wasLetGo[rule] {
					if c.record.letGo == nil {
						c.record.letGo = map[string][]ChildScope{}
					}
					c.record.letGo[rule] = append(c.record.letGo[rule], s)
				}
				if c.record.sweeps == nil {
					c.record.sweeps = map[ChildScope]sweepRetry{}
				}
				r := c.record.sweeps[s]
				c.record.sweeps[s] = sweepRetry{failures: r.failures + 1, next: time.Now().Add(min(sweepRetryBase<<min(r.failures, 16), sweepRetryMax))}
			}
			c.mu.Unlock()
		}
	}
}

// sweepScope lists a parent scope once and releases each parent in it that
// carries kgen's finalizer and that no rule selects.
func (c *Controller) sweepScope(ctx context.Context, s ChildScope, recordedBy []string) error {
	logger := klog.FromContext(ctx)
	m, err := c.cfg.Mapper.ResourceFor(s.GroupVersionKind)
	if errors.Is(err, mapper.ErrNotFound) {
		// Not in this version: its objects are still there if the kind
		// is served in another (a CRD that stopped serving v1alpha1).
		m, err = mapper.AnyVersion(c.cfg.Mapper, s.GroupVersionKind.GroupKind())
	}
	if errors.Is(err, mapper.ErrNotFound) {
		logger.Info("A parent kind where no rule looks any more is not served; it leaves the record", "err", err.Error())
		return nil
	}
	if err != nil {
		return err
	}
	res := c.cfg.Client.Resource(m.GroupVersionResource())
	var ri dynamic.ResourceInterface = res
	if m.Namespaced && s.Namespace != "" {
		ri = res.Namespace(s.Namespace)
	}
	var held []*unstructured.Unstructured
	err = pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return ri.List(ctx, opts)
	}).EachListItem(ctx, metav1.ListOptions{}, func(obj runtime.Object) error {
		if p, ok := obj.(*unstructured.Unstructured); ok && slices.Contains(p.GetFinalizers(), reconcile.Finalizer) && !c.selectedByAny(p) {
			held = append(held, p.DeepCopy())
		}
		return nil
	})
	if err != nil {
		return &sweepListError{fmt.Errorf("list %s: %w", m.GroupVersionResource(), err)}
	}
	// The children are pruned as the rule that recorded the scope: its
	// current version if it is still loaded (for its ServiceAccount),
	// else by its name alone, as kgen itself.
	var rule *rules.Rule
	c.mu.Lock()
	for _, name := range recordedBy {
		if rs := c.rules[name]; rs != nil && rule == nil {
			rule = rs.rule
		}
	}
	c.mu.Unlock()
	if rule == nil {
		rule = &rules.Rule{Name: recordedBy[0]}
	}
	var errs []error
	for _, p := range held {
		pctx := klog.NewContext(ctx, logger.WithValues("parent", klog.KObj(p)))
		children, err := c.listChildren(pctx, p, c.recordedChildScopes(p))
		switch {
		case err != nil && !beingFinalized(p) && (apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err)):
			// kgen may not list there (an upgrade took the removed
			// rule's grants): only the finalizer goes, which needs no
			// child, so the check for another kgen's parent is skipped.
			children = nil
		case err != nil:
			errs = append(errs, err)
			continue
		case c.anothers(pctx, p, children):
			continue
		}
		if err := retry(ctx, func() error { return c.reconciler.Release(pctx, rule, m, p, children) }); err != nil {
			errs = append(errs, err)
			continue
		}
		klog.FromContext(pctx).Info("Released a parent no rule selects any more", "finalizer", reconcile.Finalizer)
	}
	return errors.Join(errs...)
}

// releaseParent releases a parent that no rule selects any more
// (Reconciler.Release): kgen's finalizer goes, and its children stay. If
// the parent is being deleted, the children only the finalizer guards are
// deleted first: those given (as a rule's caches hold them), and those the
// API server lists by the parent's UID where the record says a rule that
// watched the parent made children (recordedChildScopes). The rule that
// made them may be gone, and its child kinds and namespaces watched by no
// rule: a parent left behind by a removed rule on a kind that another rule
// still watches is released by that rule, whose caches do not hold them.
func (c *Controller) releaseParent(ctx context.Context, rule *rules.Rule, mapping mapper.Mapping, parent *unstructured.Unstructured, cached []*unstructured.Unstructured) error {
	children := cached
	if beingFinalized(parent) {
		listed, err := c.listChildren(ctx, parent, c.recordedChildScopes(parent))
		if err != nil {
			return err
		}
		children = listed
		for _, o := range cached {
			if !slices.ContainsFunc(listed, func(l *unstructured.Unstructured) bool { return l.GetUID() == o.GetUID() }) {
				children = append(children, o)
			}
		}
	}
	return c.reconciler.Release(ctx, rule, mapping, parent, children)
}

// anothers reports whether the children of a parent that carries kgen's
// finalizer, and that no rule selects, were all made by rules this kgen
// does not know: neither loaded nor in its record. The parent is then
// another kgen's (a second chart release, with its own record, whose rules
// have the same parent kind), and releasing it would take away the
// finalizer that guards that kgen's children, which it puts back at once:
// a fight, and a window in which a deleted parent loses its children's
// guard. Being deleted, it is that kgen's to finalize: only it knows
// where its children are. kgen's own rules are always known: a rule is
// recorded before it makes a child, and a removed rule's entry of child
// kinds stays in the record. A parent without children, with a child that
// names no rule, or seen while the record is unread (kgen may not read
// it), is released.
func (c *Controller) anothers(ctx context.Context, parent *unstructured.Unstructured, children []*unstructured.Unstructured) bool {
	if len(children) == 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.record.loaded {
		return false
	}
	var names []string
	for _, o := range children {
		name := o.GetLabels()[reconcile.LabelRule]
		_, loaded := c.rules[name]
		_, pending := c.pending[name]
		_, made := c.record.want[name]
		_, watched := c.record.parents[name]
		if name == "" || loaded || pending || made || watched {
			return false
		}
		names = append(names, name)
	}
	klog.FromContext(ctx).V(2).Info("Leaving a parent another kgen's rules made children of", "rules", slices.Compact(slices.Sorted(slices.Values(names))))
	return true
}

// recordedChildScopes returns where the rules whose record says they
// watched a parent's kind where the parent is may have made children:
// their recorded child scopes, and those learned since kgen started.
func (c *Controller) recordedChildScopes(parent *unstructured.Unstructured) []ChildScope {
	at := ChildScope{GroupVersionKind: parent.GroupVersionKind(), Namespace: parent.GetNamespace()}
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []ChildScope
	for rule, scopes := range c.record.parents {
		if slices.ContainsFunc(scopes, func(s ChildScope) bool { return s.covers(at) }) {
			out = append(out, c.record.want[rule]...)
		}
	}
	return sortScopes(out)
}

// listChildren reads a parent's children from the API server, in the child
// scopes given: objects kgen manages that carry the parent's UID.
func (c *Controller) listChildren(ctx context.Context, parent *unstructured.Unstructured, scopes []ChildScope) ([]*unstructured.Unstructured, error) {
	selector := childSelector + "," + reconcile.LabelParentUID + "=" + string(parent.GetUID())
	var out []*unstructured.Unstructured
	seen := map[types.UID]bool{}
	for _, s := range scopes {
		m, err := c.cfg.Mapper.ResourceFor(s.GroupVersionKind)
		if errors.Is(err, mapper.ErrNotFound) {
			// Not in this version; its objects are still there if the
			// kind is served in another (a CRD that stopped serving
			// v1alpha1 and serves v1).
			m, err = mapper.AnyVersion(c.cfg.Mapper, s.GroupVersionKind.GroupKind())
		}
		if errors.Is(err, mapper.ErrNotFound) {
			continue // not served in any version: no child of it is left
		}
		if err != nil {
			return nil, err
		}
		res := c.cfg.Client.Resource(m.GroupVersionResource())
		var ri dynamic.ResourceInterface = res
		if m.Namespaced && s.Namespace != "" {
			ri = res.Namespace(s.Namespace)
		}
		list, err := ri.List(ctx, metav1.ListOptions{LabelSelector: selector})
		if apierrors.IsNotFound(err) {
			continue // no longer served: no child of it is left
		}
		if err != nil {
			return nil, fmt.Errorf("list the children of %s in %s: %w", klog.KObj(parent), s, err)
		}
		for i := range list.Items {
			if o := &list.Items[i]; !seen[o.GetUID()] {
				seen[o.GetUID()] = true
				out = append(out, o)
			}
		}
	}
	return out, nil
}
