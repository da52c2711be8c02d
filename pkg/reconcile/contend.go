package reconcile

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"

	"kgen.dev/kgen/rules"
)

// ReasonChildContended is the Ready reason, and the Warning event, of a
// parent whose child another writer keeps setting back after kgen repairs
// it: kgen stops repairing that child for a while (see childGuard).
const ReasonChildContended = "ChildContended"

// ReasonChildFollowSpaced is the Warning event of a parent whose child
// kgen updates at most once every childFollowSpacing, as it followed its
// inputs or other children too often (see checkFollow).
const ReasonChildFollowSpaced = "ChildFollowSpaced"

// childFollowSpacing is the least time between updates of a child that
// follows what its template reads too often (see checkFollow).
const childFollowSpacing = 10 * time.Second

// childGuard keeps kgen from fighting another writer of a child: one
// that sets a field of the template back whenever kgen repairs it (an
// autoscaler on a Deployment's replicas, a second controller with its own
// idea of the object), or deletes the child whenever kgen creates it
// again. Each of its writes is drift, and each repair wakes it: without a
// bound the two would write the object back and forth at the API
// server's speed for as long as both run. So, as for a contended status
// (statusGuard), after contendedAfter repairs of one child of one cause
// (contendKey) within contendedWindow kgen stops repairing it for that
// cause for minBackoff, doubling up to maxBackoff while the fight goes on,
// and says so. Only repairs count: a
// change of the template or the parent that changes the child is applied
// at once, during a backoff too.
//
// A child is known by its parent and its place (id, kind, namespace and
// name), not by its UID, so that a child deleted and created again is
// the same child.
type childGuard struct {
	now     func() time.Time
	mu      sync.Mutex
	parents map[types.UID]map[repairSlot]*repairHistory // by parent, then child
}

// contendKey names a child's repairs of one cause: gone, when kgen did not
// find the child as the parent's (deleted, or its labels or
// ownerReference taken off), else its fields set back. The two are
// counted apart: a child deleted once while kgen holds off a writer of
// its fields is created again at once.
type contendKey struct {
	parent types.UID
	child  childRef
	gone   bool
}

type repairSlot struct {
	child childRef
	gone  bool
}

type repairHistory struct {
	backoffSpan
	repairs []time.Time // within contendedWindow
	note    string      // the Ready message while backing off
	marks   string      // the marks kgen last wrote on it alone (OpMarks)
	used    time.Time
	followHistory
}

// followHistory is a child's updates that followed a change of something
// other than its rule and parent (see checkFollow).
type followHistory struct {
	cause    Digest      // the rule and parent of the last update
	follows  []time.Time // updates of that cause, within followWindow
	followed time.Time   // the last update
	spacing  bool        // the updates are spaced (see childFollowSpacing)
}

// backoffSpan is a growing backoff: a while with no writes, which doubles
// when the cause comes back soon after it ended.
type backoffSpan struct {
	until   time.Time // no writes before this
	backoff time.Duration
}

// start stops writes for the next backoff, doubling it if the last one
// ended recently.
func (b *backoffSpan) start(now time.Time) time.Duration {
	switch {
	case b.backoff == 0 || now.Sub(b.until) > 2*maxBackoff:
		b.backoff = minBackoff
	case b.backoff < maxBackoff:
		b.backoff *= 2
	}
	b.until = now.Add(b.backoff)
	return b.backoff
}

func newChildGuard(now func() time.Time) *childGuard {
	return &childGuard{now: now, parents: map[types.UID]map[repairSlot]*repairHistory{}}
}

// historyLocked returns a child's history; a new one if create, else nil
// when there is none.
func (g *childGuard) historyLocked(key contendKey, create bool) *repairHistory {
	children := g.parents[key.parent]
	slot := repairSlot{key.child, key.gone}
	h := children[slot]
	if h == nil && create {
		if children == nil {
			children = map[repairSlot]*repairHistory{}
			g.parents[key.parent] = children
		}
		h = &repairHistory{}
		children[slot] = h
	}
	return h
}

// check tells whether kgen may repair a child now. If not, wait is how
// long it holds off, and note what the parent's Ready condition says
// meanwhile; start reports that this check starts the backoff, whose
// note the caller then sets (setNote).
func (g *childGuard) check(key contendKey) (wait time.Duration, note string, start bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	h := g.historyLocked(key, false)
	if h == nil {
		return 0, "", false
	}
	now := g.now()
	h.used = now
	if now.Before(h.until) {
		return h.until.Sub(now), h.note, false
	}
	h.repairs = recent(h.repairs, now, contendedWindow)
	if len(h.repairs) < contendedAfter {
		return 0, "", false
	}
	h.repairs, h.note = nil, ""
	return h.start(now), "", true
}

// setNote records what the parent's Ready condition says during the
// backoff that check started.
func (g *childGuard) setNote(key contendKey, note string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if h := g.historyLocked(key, false); h != nil {
		h.note = note
	}
}

// repaired records a repair that changed the child.
func (g *childGuard) repaired(key contendKey) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	h := g.historyLocked(key, true)
	h.repairs, h.used = append(recent(h.repairs, now, contendedWindow), now), now
}

// checkFollow tells whether kgen may update a child now, with a template
// rendered from cause (the rule and the parent, see followCause): not,
// when the child was updated more than followAfter times within
// followWindow with the same cause, and the last update is less than
// childFollowSpacing ago. Such updates follow what else the template
// reads: inputs, other children. Rules whose children read one another
// across parents (A's child is B's input, and B's is A's) would otherwise
// write them back and forth at the API server's speed for as long as both
// run, and no load-time check can see it: which objects an input selects
// is known only per parent. Spaced, the child still follows, with its
// last value at most childFollowSpacing late; a change of the rule or the
// parent is applied at once. start reports that this check starts the
// spacing, which lasts until the child updated fewer than followAfter/3
// times within followWindow (so a loop that goes on stays spaced, rather
// than bursting each time the window empties).
func (g *childGuard) checkFollow(key contendKey, cause Digest) (wait time.Duration, start bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	h := g.historyLocked(key, false)
	if h == nil || h.cause != cause {
		return 0, false
	}
	now := g.now()
	h.used = now
	h.follows = recent(h.follows, now, followWindow)
	if h.spacing && len(h.follows) < followAfter/3 {
		h.spacing = false
	}
	if !h.spacing && len(h.follows) <= followAfter {
		return 0, false
	}
	next := h.followed.Add(childFollowSpacing)
	if !now.Before(next) {
		return 0, false
	}
	start = !h.spacing
	h.spacing = true
	return next.Sub(now), start
}

// followed records an update of a child, with a template rendered from
// cause.
func (g *childGuard) followed(key contendKey, cause Digest) {
	g.mu.Lock()
	defer g.mu.Unlock()
	h := g.historyLocked(key, true)
	now := g.now()
	if h.cause != cause {
		h.followHistory = followHistory{cause: cause}
	}
	h.follows = append(recent(h.follows, now, followWindow), now)
	h.followed, h.used = now, now
}

// followCause fingerprints the rule and the parent a child is rendered
// from: an update after a change of either is never spaced.
func followCause(rule *rules.Rule, parent *unstructured.Unstructured) Digest {
	return statusInputs(rule, parent, nil)
}

// spacing tells whether a child's updates are spaced (see checkFollow).
func (g *childGuard) spacing(key contendKey) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.parents[key.parent] == nil {
		return false // most parents: no lookup of the child
	}
	h := g.historyLocked(key, false)
	if h == nil || !h.followHistory.spacing {
		return false
	}
	// Ended once what it follows went quiet, also with no update
	// pending to ask checkFollow (a live check: Ready said the child
	// was spaced minutes after its input stopped changing).
	h.follows = recent(h.follows, g.now(), followWindow)
	if len(h.follows) < followAfter/3 {
		h.followHistory.spacing = false
	}
	return h.followHistory.spacing
}

// spacedNote is what the parent's Ready condition adds for a child whose
// updates are spaced: the same whether this reconcile held an update or
// made one, so that the condition does not change every spacing.
func spacedNote(id string) string {
	return fmt.Sprintf("child %s is updated at most once every %s, as it follows its inputs or other children more than %d times a minute", id, childFollowSpacing, followAfter)
}

// holdFollow is asked before kgen updates a child with a template rendered
// from cause: held reports that the update is spaced (checkFollow), and
// out asks for another look when the spacing ends. The first hold of a
// spacing is told in a Warning event, a log line and a metric: a child
// that changes this often with its rule and parent unchanged is most
// often a loop between rules.
func (r *Reconciler) holdFollow(ctx context.Context, rule *rules.Rule, parent, live *unstructured.Unstructured, step Step, ref string, key contendKey, cause Digest) (out outcome, held bool) {
	wait, start := r.contend.checkFollow(key, cause)
	if wait <= 0 {
		return outcome{}, false
	}
	if start {
		msg := fmt.Sprintf("child %s: %s changed more than %d times within %s while the rule and the parent stayed the same, following what its template reads (inputs, other children); kgen now updates it at most once every %s. Children that read one another, across parents through inputs, keep doing so: make one of them not read the other",
			step.ID, ref, followAfter, followWindow, childFollowSpacing)
		r.cfg.Recorder.Event(parent, corev1.EventTypeWarning, ReasonChildFollowSpaced, msg)
		klog.FromContext(ctx).Info("Spacing the updates of a child that follows its inputs or other children more than 10 times a minute", "child", step.ID, "object", ref, "every", childFollowSpacing)
		if r.cfg.Observer != nil {
			r.cfg.Observer.ChildSpaced(rule.Name)
		}
	}
	return outcome{step: step, live: live, ok: true, retry: wait, note: spacedNote(step.ID)}, true
}

// spacedOutcome adds to the outcome of a child whose updates are spaced
// the note Ready says, and a look when the window in which its updates
// are counted has passed, so that the note goes once the child is quiet.
func (r *Reconciler) spacedOutcome(out outcome, key contendKey) outcome {
	if r.contend.spacing(key) {
		out.note = spacedNote(out.step.ID)
		if out.retry <= 0 || out.retry > followWindow {
			out.retry = followWindow
		}
	}
	return out
}

// rewritesMarks tells whether marks are what kgen last wrote on a child
// with a marks-only write (OpMarks): writing them again repairs what
// someone else removed, not a change of the rule.
func (g *childGuard) rewritesMarks(key contendKey, marks string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	h := g.historyLocked(key, false)
	return h != nil && h.marks == marks
}

// wroteMarks records the marks kgen wrote on a child with a marks-only
// write.
func (g *childGuard) wroteMarks(key contendKey, marks string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	h := g.historyLocked(key, true)
	h.marks, h.used = marks, g.now()
}

// forget drops what is known of a parent's children.
func (g *childGuard) forget(parent types.UID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.parents, parent)
}

// sweep drops the histories of children with no repair within
// contendedWindow that are not backing off and were not looked at for a
// while.
func (g *childGuard) sweep(olderThan time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	for parent, children := range g.parents {
		for c, h := range children {
			if now.Sub(h.used) > olderThan && now.After(h.until) && len(recent(h.repairs, now, contendedWindow)) == 0 && len(recent(h.follows, now, followWindow)) == 0 {
				delete(children, c)
			}
		}
		if len(children) == 0 {
			delete(g.parents, parent)
		}
	}
}

// holdRepair is asked before kgen repairs a child (live, or nil when it
// creates again a child it did not find as the parent's), with the key of
// the repair's cause: held reports that the child is contended and is not
// written now; out then says so on the parent's Ready condition and asks
// for another look when the backoff ends.
func (r *Reconciler) holdRepair(ctx context.Context, rule *rules.Rule, parent, live *unstructured.Unstructured, reader dynamic.ResourceInterface, step Step, ref string, key contendKey) (out outcome, held bool) {
	wait, note, start := r.contend.check(key)
	if wait <= 0 {
		return outcome{}, false
	}
	if start {
		if live == nil {
			// Deleted, or kgen's labels or ownerReference taken off
			// it: either way it was not found as the child.
			note = fmt.Sprintf("child %s: %s was deleted, or lost kgen's labels or ownerReference, %d times within %s, and kgen set it back each time; it stops for %s: stop the other writer, or remove the child from the rule",
				step.ID, ref, contendedAfter, contendedWindow, wait)
		} else {
			// Named as the last one: the repairs counted may have
			// followed other writers' changes.
			who, fields := r.changedBy(ctx, reader, live, step.Object)
			what := "fields"
			if len(fields) > 0 {
				what = strings.Join(fields, ", ")
			}
			by := "another writer"
			if who != "" {
				by += " (" + who + ")"
			}
			note = fmt.Sprintf("child %s: kgen set %s back %d times within %s, the last time after %s changed %s, which the template sets; it stops repairing it for %s: remove the field from the template, or stop the other writer",
				step.ID, ref, contendedAfter, contendedWindow, by, what, wait)
		}
		r.contend.setNote(key, note)
		r.cfg.Recorder.Event(parent, corev1.EventTypeWarning, ReasonChildContended, note)
		klog.FromContext(ctx).Info("Backing off repairing a child that another writer keeps changing", "child", step.ID, "object", ref, "for", wait)
		if r.cfg.Observer != nil {
			r.cfg.Observer.ChildBackoff(rule.Name)
		}
	}
	return outcome{step: step, live: live, ok: live != nil, reason: ReasonChildContended, msg: note, retry: wait}, true
}
