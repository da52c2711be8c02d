package reconcile

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"kgen.dev/kgen/pkg/mapper"
	kschema "kgen.dev/kgen/pkg/schema"
	"kgen.dev/kgen/pkg/watch"
	"kgen.dev/kgen/rules"
)

// FieldManager is the server-side apply field manager of everything kgen writes.
const FieldManager = "kgen"

// finalizerManager is the field manager of kgen's finalizer on parents, apart
// from FieldManager so that adding and removing it never touches anything
// else kgen applies to a parent.
const finalizerManager = FieldManager + "-finalizer"

// Finalizer is put on a parent that has children Kubernetes cannot
// garbage-collect for it (no ownerReference allowed), so kgen can delete
// them before the parent goes.
const Finalizer = "kgen.dev/cleanup"

// ConditionReady is the type of the condition kgen writes on parents.
const ConditionReady = "Ready"

// Reasons of the Ready condition.
const (
	ReasonReady       = "Ready"
	ReasonNotReady    = "ChildNotReady"
	ReasonWaiting     = "WaitingForDependency"
	ReasonInvalid     = "InvalidSpec"
	ReasonConflict    = "Conflict"
	ReasonForbidden   = "Forbidden"
	ReasonApplyFailed = "ApplyFailed"
	// ReasonDeleteFailed says that kgen could not delete a child its
	// finalizer guards, so the parent being deleted keeps the finalizer.
	// Warning events of a failed delete have this reason too.
	ReasonDeleteFailed = "DeleteFailed"
)

// Reasons of the Normal events kgen records (see EventPolicy).
const (
	EventCreated  = "Created"
	EventUpdated  = "Updated"
	EventRepaired = "Repaired"
	EventDeleted  = "Deleted"
	EventAdopted  = "Adopted"
	EventOrphaned = "Orphaned"
)

// DefaultParallelWrites bounds how many writes of one parent's children
// are in flight at once.
const DefaultParallelWrites = 4

// createOnlyResourceVersion is the resourceVersion kgen puts in a
// server-side apply that must create its object. The API server ignores a
// resourceVersion when an apply creates an object, and treats it as a
// precondition when the object exists; no object ever has this one, so the
// apply fails with a conflict instead of taking over an object kgen did not
// make. The child is then owned by kgen's apply from its first write, and a
// field a later template drops is removed (a POST would leave it owned by
// an Update entry that no apply removes).
const createOnlyResourceVersion = "18446744073709551615"

// ErrTerminal is matched, with errors.Is, by errors that retrying soon will
// not fix: a bad rule or parent. The parent's status says what is wrong; a
// change to the parent, its children or the rules starts a new attempt.
var ErrTerminal = errors.New("terminal error")

type terminalError struct{ err error }

func (e *terminalError) Error() string        { return e.err.Error() }
func (e *terminalError) Unwrap() error        { return e.err }
func (e *terminalError) Is(target error) bool { return target == ErrTerminal }

// Terminal marks err as not worth a hot retry.
func Terminal(err error) error { return &terminalError{err: err} }

// Result tells the caller when to look at the parent again, apart from events.
type Result struct {
	// RequeueAfter, when positive, asks for another reconcile after it.
	RequeueAfter time.Duration
	// Conflict, when not empty, says which object kgen must not take over
	// stands where a child should be (the Ready condition's message). The
	// reconcile failed, but retrying soon will not help and kgen's
	// informers do not show the object, so the caller logs it, counts it
	// as a failure and looks again later, backing off while the conflict
	// stays (and watching Blockers meanwhile).
	Conflict string
	// Ready reports that the parent's Ready condition is True.
	Ready bool
	// Blockers are the objects kgen may not take over that stand where
	// children should be, as read: kgen's informers do not show them, so
	// the caller may watch them to look again as soon as one goes.
	Blockers []Blocker
	// Again reports that a child waits for children this reconcile wrote
	// (or knows of before the cache shows them): rendered with them it
	// would no longer wait. Their watch events are kgen's own writes,
	// which wake no parent, so the caller reconciles the parent again
	// soon instead.
	Again bool
}

// Blocker is an object that stands where a child should be and is not
// the parent's to take over, as it was read.
type Blocker struct {
	GVR             schema.GroupVersionResource
	Namespace, Name string
	ResourceVersion string
	// Marks fingerprints what makes the object someone's (see
	// OwnershipMarks): kgen may take it over once they change.
	Marks string
}

// OwnershipMarks fingerprints what decides whose an object is: its
// ownerReferences, kgen's labels and annotations, and whether it is being
// deleted. A change of anything else of an object in a child's way (its
// data, say) leaves it someone else's.
func OwnershipMarks(obj metav1.Object) string {
	var b strings.Builder
	for _, ref := range obj.GetOwnerReferences() {
		fmt.Fprintf(&b, "owner=%s;", ref.UID)
	}
	for _, k := range []string{LabelManagedBy, LabelRule, LabelParentUID, LabelChild} {
		fmt.Fprintf(&b, "%s=%s;", k, obj.GetLabels()[k])
	}
	fmt.Fprintf(&b, "%s=%s;deleting=%t", AnnotationOrphanedFrom, obj.GetAnnotations()[AnnotationOrphanedFrom], obj.GetDeletionTimestamp() != nil)
	return b.String()
}

// ChildLister reads a parent's children from the informer cache.
type ChildLister interface {
	// Children returns the cached objects, of the kinds the rule watches,
	// that carry the parent's UID (in kgen.dev/parent-uid), in any order.
	// Callers must not modify them.
	Children(rule string, parent types.UID) []*unstructured.Unstructured
}

// Resources maps kinds to resources; *mapper.Mapper is one.
type Resources interface {
	ResourceFor(gvk schema.GroupVersionKind) (mapper.Mapping, error)
}

// InputReader reads a rule's inputs for a parent from the caches.
type InputReader interface {
	// Inputs returns, per input id, the objects the parent's rule reads
	// (see Observed.Inputs).
	Inputs(rule *rules.Rule, parent *unstructured.Unstructured) (map[string][]*unstructured.Unstructured, error)
}

// Schemas tells what is known of a kind's fields; *schema.Source is one.
// A nil *schema.Field, or an error, means nothing is known.
type Schemas interface {
	Kind(gvk schema.GroupVersionKind) (*kschema.Field, error)
}

// Observer is told of what kgen backs off from, for metrics.
type Observer interface {
	// StatusBackoff is called when kgen stops writing a parent's status for
	// a while: reason is ReasonStatusContended or ReasonStatusLoop.
	StatusBackoff(rule, reason string)
	// ChildBackoff is called when kgen stops repairing a child that
	// another writer keeps changing back (ReasonChildContended).
	ChildBackoff(rule string)
	// ChildSpaced is called when kgen starts spacing the updates of a
	// child that follows its inputs or other children too often
	// (ReasonChildFollowSpaced).
	ChildSpaced(rule string)
}

// Config holds a Reconciler's dependencies. Client, Resources, Children,
// Writes and Recorder are required.
type Config struct {
	Client    dynamic.Interface
	Resources Resources
	// Schemas, when set, tells which lists are keyed and which fields are
	// quantities, so that differences the API server made are not taken
	// for changes, and how to write a parent's status.
	Schemas  Schemas
	Children ChildLister
	// Inputs reads rules' inputs; rules with inputs wait for them without.
	Inputs InputReader
	// SchemaDefaults reads each parent with the defaults of its rule's
	// spec.parent.schema set where it lacks them (rules.Rule.WithDefaults),
	// as the API server serves it when the CRD is made from that schema
	// (kgenctl run --manage-crds): a parent in the cache decoded before
	// the CRD gained a defaulted field then reads as the default.
	SchemaDefaults bool
	// Impersonate returns a client acting as a ServiceAccount, for the
	// writes of the children of a rule with spec.serviceAccount; without
	// it such a rule's writes fail. Reads stay on kgen's own identity.
	Impersonate func(rules.ServiceAccount) (dynamic.Interface, error)
	// Writes remembers kgen's own writes until the caches show them.
	Writes   *watch.Writes
	Recorder record.EventRecorder
	// Events says which events to record; EventsNotable when empty.
	Events   EventPolicy
	Observer Observer
	// Now returns the time; time.Now when nil.
	Now func() time.Time
	// ParallelWrites bounds the writes of one parent's children in flight
	// at once; DefaultParallelWrites when zero, 1 to write them in order.
	ParallelWrites int
}

// Reconciler makes one parent's children equal to its rule's templates. It
// reads only from the informer caches (through ChildLister, Writes and the
// parent it is given) and writes with server-side apply. It is safe for
// concurrent use on different parents.
type Reconciler struct {
	cfg    Config
	events EventPolicy
	scope  Scoper
	normal *normalized
	status *statusGuard
	// contend holds off repairs of children another writer keeps
	// changing back.
	contend *childGuard
	seen    *seenChildren
	// owed are the UIDs of adopted children whose fields kgen has yet to
	// take from other managers (takeCoOwned failed): the next reconcile
	// of their parent tries again, even when nothing else is to write.
	owed sync.Map
}

// New returns a Reconciler.
func New(cfg Config) *Reconciler {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Events == "" {
		cfg.Events = EventsNotable
	}
	if cfg.ParallelWrites <= 0 {
		cfg.ParallelWrites = DefaultParallelWrites
	}
	cfg.Recorder = filteredRecorder{EventRecorder: cfg.Recorder, policy: cfg.Events}
	return &Reconciler{cfg: cfg, events: cfg.Events, scope: resourceScoper{cfg.Resources}, normal: newNormalized(cfg.Now), status: newStatusGuard(cfg.Now),
		contend: newChildGuard(cfg.Now), seen: newSeenChildren()}
}

// resourceScoper answers scope questions from discovery.
type resourceScoper struct{ r Resources }

func (s resourceScoper) Namespaced(gvk schema.GroupVersionKind) (bool, error) {
	m, err := s.r.ResourceFor(gvk)
	return m.Namespaced, err
}

// kind returns what is known of a kind's fields, or nil.
func (r *Reconciler) kind(gvk schema.GroupVersionKind) *kschema.Field {
	if r.cfg.Schemas == nil {
		return nil
	}
	f, _ := r.cfg.Schemas.Kind(gvk)
	return f
}

// judge compares a desired child with its live object: up to date when
// Matches says so, or when the live object still shows what the server
// made of kgen's last write of the same template.
func (r *Reconciler) judge(desired, live *unstructured.Unstructured) Op {
	kind := r.kind(desired.GroupVersionKind())
	if templateHash(desired) != templateHash(live) {
		if r.normal.applied(live.GetUID(), templateHash(desired)) {
			// kgen applied this very template to it: someone else
			// changed its template-hash annotation.
			return OpRepair
		}
		return OpUpdate
	}
	if Matches(storedForm(desired).Object, live.Object, kind) || r.normal.same(live.GetUID(), templateHash(desired), Project(desired.Object, live.Object, kind)) {
		return OpKeep
	}
	return OpRepair
}

// outcome is what happened to one child in one reconcile.
type outcome struct {
	step   Step
	live   *unstructured.Unstructured // the child as it now is; nil if it does not exist
	reason string                     // a Ready reason when the child is not fine
	msg    string
	ok     bool          // the wanted object exists and is kgen's
	retry  time.Duration // when positive, look again after it (a held repair)
	note   string        // what Ready adds when it is True (a spaced child)
	in     *Blocker      // the object in the way, for a Conflict with one
}

// Reconcile brings the children of one parent in line with the rule, prunes
// those no longer wanted, and writes the parent's status. parent is the
// cached parent object and mapping its resource.
//
// After a child fails, the others are still tried and the parent's status is
// still written; the errors are returned joined.
func (r *Reconciler) Reconcile(ctx context.Context, rule *rules.Rule, mapping mapper.Mapping, parent *unstructured.Unstructured) (Result, error) {
	// The cache may not show kgen's own last writes yet, nor, for a parent
	// read before its CRD gained a defaulted field, the default.
	parent = r.cfg.Writes.Latest(parent)
	if r.cfg.SchemaDefaults {
		parent = rule.WithDefaults(parent)
	}
	observed := r.observed(rule, parent)
	if parent.GetDeletionTimestamp() != nil {
		return r.finalize(ctx, rule, mapping, parent, observed)
	}
	var inputs map[string][]*unstructured.Unstructured
	var plan *Plan
	var err error
	if r.cfg.Inputs != nil && len(rule.Inputs) > 0 {
		// An input's name or namespace that does not evaluate for this
		// parent is invalid as a child's template is (ErrInvalid).
		inputs, err = r.cfg.Inputs.Inputs(rule, parent)
	}
	if err == nil {
		plan, err = MakePlan(rule, parent, observed, inputs, r.scope, r.judge)
	}
	if err != nil {
		if errors.Is(err, ErrInvalid) {
			r.cfg.Recorder.Event(parent, corev1.EventTypeWarning, ReasonInvalid, err.Error())
			res, statusErr := r.writeStatus(ctx, rule, mapping, parent, nil, readyCondition(ReasonInvalid, err.Error()), observed)
			if statusErr != nil {
				return res, statusErr // retried: the parent must show why
			}
			return res, Terminal(err)
		}
		return Result{}, err
	}
	return r.execute(ctx, rule, mapping, parent, plan, observed, inputs)
}

// observed returns the parent's children from the cache, each replaced by
// what kgen last wrote to it when that is newer.
func (r *Reconciler) observed(rule *rules.Rule, parent *unstructured.Unstructured) []*unstructured.Unstructured {
	cached := r.cfg.Children.Children(rule.Name, parent.GetUID())
	out := make([]*unstructured.Unstructured, 0, len(cached))
	for _, obj := range cached {
		out = append(out, r.cfg.Writes.Latest(obj))
	}
	return out
}

// execute carries out a plan: the finalizer first when a child needs it,
// then the children in order, the prunes, and the parent's status.
func (r *Reconciler) execute(ctx context.Context, rule *rules.Rule, mapping mapper.Mapping, parent *unstructured.Unstructured, plan *Plan, observed []*unstructured.Unstructured, inputs map[string][]*unstructured.Unstructured) (Result, error) {
	var errs []error
	var outcomes []outcome
	var finalizerErr error
	// The status write below tests the parent's resource version: it
	// must be the one the finalizer's write made. (Before, a status that
	// was not a keyed list failed that test, and when the reconcile also
	// failed for good the parent was left without its Ready condition.)
	latest := parent
	if plan.Finalizer {
		if latest, finalizerErr = r.setFinalizerOn(ctx, mapping, parent, true); finalizerErr != nil {
			errs = append(errs, finalizerErr)
		}
	}
	var live []*unstructured.Unstructured // the children as they now are
	live = append(live, plan.Keep...)
	failed := map[string]bool{} // ids with a step that did not succeed
	// The steps of one reconcile are independent: a child that reads
	// another is rendered only once that one exists. Their writes go out
	// together, so a parent's children cost one round trip, not one each.
	results := make([]outcome, len(plan.Steps))
	stepErrs := make([]error, len(plan.Steps))
	var wg sync.WaitGroup
	limit := make(chan struct{}, r.cfg.ParallelWrites)
	for i, step := range plan.Steps {
		if finalizerErr != nil && !step.OwnerReference {
			// Without the finalizer such a child could never be cleaned
			// up: do not write it, but keep what exists of it.
			results[i] = outcome{step: step, live: step.Live}
			results[i].reason, results[i].msg = failure(rule, step.ID, "the parent", "set the finalizer on", finalizerErr)
			continue
		}
		if _, owed := r.owed.Load(liveUID(step)); step.Op == OpKeep && step.Live != nil && !owed {
			// Nothing to send; a child whose updates are spaced keeps
			// saying so while they are.
			key := contendKey{parent.GetUID(), refOf(step.ID, step.Object), false}
			results[i] = r.spacedOutcome(outcome{step: step, live: step.Live, ok: true}, key)
			continue
		}
		write := func() {
			results[i], stepErrs[i] = r.writeChild(ctx, rule, parent, step)
		}
		if r.cfg.ParallelWrites == 1 {
			write() // in order
			continue
		}
		wg.Go(func() {
			limit <- struct{}{}
			defer func() { <-limit }()
			write()
		})
	}
	wg.Wait()
	for i, out := range results {
		errs = append(errs, stepErrs[i])
		if out.live != nil {
			live = append(live, out.live)
		}
		if !out.ok {
			failed[out.step.ID] = true
		}
		outcomes = append(outcomes, out)
	}
	// A prune that fails is on the Ready condition too (see below).
	var pruneFailed []childError
	gone := map[types.UID]bool{} // pruned, or let go of
	pruned := func(id string, obj *unstructured.Unstructured, err error) {
		if err != nil {
			errs = append(errs, err)
			pruneFailed = append(pruneFailed, childError{id, err})
			return
		}
		gone[obj.GetUID()] = true
	}
	// A renamed child's old object, or the object of a forEach element
	// that is gone, goes only once every object of its child exists.
	for _, id := range sortedKeys(plan.Superseded) {
		c := rule.Child(id)
		for _, old := range plan.Superseded[id] {
			otherKind := c != nil && !sameKind(old, c.GroupVersionKind)
			if failed[id] {
				if !otherKind {
					live = append(live, old)
				} // else kept, but not as the child, which is of another kind
				continue
			}
			why := "its forEach has no element for it any more"
			switch {
			case otherKind:
				why = "its kind is no longer the child's"
				var by []*unstructured.Unstructured
				for _, o := range outcomes {
					if o.step.ID == id && o.live != nil {
						by = append(by, o.live)
					}
				}
				// Of a forEach, the element's object of the same name.
				if i := slices.IndexFunc(by, func(o *unstructured.Unstructured) bool { return o.GetName() == old.GetName() }); i >= 0 {
					by = by[i : i+1]
				}
				if len(by) == 1 {
					why += "; it is replaced by " + by[0].GetKind() + " " + by[0].GetName()
				}
			case c != nil && len(c.ForEach) == 0:
				why = "the child was renamed"
				for _, o := range outcomes {
					if o.step.ID == id && o.live != nil {
						why += " to " + o.live.GetName()
					}
				}
			}
			pruned(id, old, r.prune(ctx, rule, parent, old, id, why))
		}
	}
	for _, p := range plan.Prunes {
		if p.OfKind && slices.ContainsFunc(outcomes, func(o outcome) bool {
			return !o.ok && o.step.Live == nil && sameKind(p.Object, o.step.Object.GroupVersionKind())
		}) {
			// Maybe the old object of a renamed id whose new object
			// could not be created (its name is taken, say): kept
			// until every object of its kind exists. (A child that
			// exists and fails an update is no one's replacement.)
			klog.FromContext(ctx).V(2).Info("Keeping the object of a removed child id while a child of its kind cannot be made", "child", p.ID, "object", describeChild(p.Object))
			continue
		}
		pruned(p.ID, p.Object, r.prune(ctx, rule, parent, p.Object, p.ID, p.Why))
	}
	if finalizerErr == nil && !needsFinalizer(plan, parent, remaining(plan, parent, observed, live, gone), len(pruneFailed) > 0) {
		var err error
		latest, err = r.setFinalizerOn(ctx, mapping, latest, false)
		errs = append(errs, err)
	}

	seenNow := live
	for _, o := range outcomes {
		if o.retry > 0 && o.live == nil {
			// A re-creation held back (holdRepair): still the child
			// someone deleted, so that the next reconcile holds it too.
			seenNow = append(slices.Clone(seenNow), o.step.Object)
		}
	}
	r.seen.set(parent.GetUID(), seenNow)
	// What the next plan will see: not an object being deleted (a child
	// held by a finalizer), which MakePlan leaves out too, so a reader of
	// it is not woken to wait again.
	going := func(o *unstructured.Unstructured) bool { return o.GetDeletionTimestamp() != nil }
	observedNow := Observed{Children: GroupChildren(rule, slices.DeleteFunc(slices.Clone(live), going)), Inputs: inputs}
	status := plan.Rendered.Status
	waits := waitsForChildren(plan.Rendered)
	var again bool
	waiting := plan.Rendered
	if len(plan.Rendered.StatusOmitted) > 0 && created(outcomes) || waits {
		if now, err := Render(rule, parent, observedNow, r.scope); err == nil {
			if len(plan.Rendered.StatusOmitted) > 0 && created(outcomes) {
				// Status fields that read a child this reconcile
				// created can be computed now, rather than in one more
				// status write once the cache shows the child.
				status = now.Status
			}
			again = waits && rendersMore(plan.Rendered, now)
			if !again {
				// No reconcile follows (kgen skips the events of its
				// own writes): what a child waits for now, such as a
				// field of a child this reconcile created, not the
				// child it waited for before.
				waiting = now
			}
		} else if waits {
			// It cannot render now that what it waited for exists (a
			// field of the parent that is not set): another reconcile
			// reports why, rather than the wait, which no event of
			// kgen's own writes would end (a live check).
			again = true
		}
	}
	cond := r.readiness(rule, parent, waiting, outcomes, observedNow)
	if len(pruneFailed) > 0 && (cond.Status == metav1.ConditionTrue || cond.Reason == ReasonNotReady || cond.Reason == ReasonWaiting || cond.Reason == ReasonInputMissing) {
		// An object kgen must delete and cannot (the rule's
		// ServiceAccount may not, say) is a failure of the parent's,
		// not a detail of the log: a failed write of a child outranks
		// it, a child that is merely not ready yet does not.
		f := pruneFailed[0]
		cond = readyCondition(deleteReason(f.err), fmt.Sprintf("child %s: %v", f.id, f.err))
	}
	res, statusErr := r.writeStatus(ctx, rule, mapping, latest, status, cond, observed)
	errs = append(errs, statusErr)
	err := classify(errs)
	if err == nil && cond.Reason == ReasonConflict {
		res.Conflict = cond.Message
		for _, o := range outcomes {
			if o.in != nil {
				res.Blockers = append(res.Blockers, *o.in)
			}
		}
	}
	// Ready only once the parent shows it: a status write that failed
	// leaves the parent's last condition, or (see writeStatus) a False
	// one.
	res.Ready = cond.Status == metav1.ConditionTrue && statusErr == nil
	res.Again = again
	for _, o := range outcomes {
		if o.retry > 0 && (res.RequeueAfter <= 0 || o.retry < res.RequeueAfter) {
			res.RequeueAfter = o.retry // the end of a held repair's backoff
		}
	}
	return res, err
}

// owedFailure is the outcome of a child whose fields kgen could not take
// from other managers after adopting it (takeCoOwned): not the
// template's fault, so ApplyFailed.
func owedFailure(out outcome, ref string, err error) (outcome, error) {
	err = fmt.Errorf("take the fields kgen applies of adopted %s from other managers: %w", ref, err)
	out.reason, out.msg = ReasonApplyFailed, fmt.Sprintf("child %s: %v", out.step.ID, err)
	return out, err
}

// liveUID is the UID of a step's live object; "" when there is none.
func liveUID(step Step) types.UID {
	if step.Live == nil {
		return ""
	}
	return step.Live.GetUID()
}

// waitsForChildren reports whether a child was not rendered because it
// reads a child (or an object of one) that was not observed.
func waitsForChildren(r *Rendered) bool {
	for _, w := range r.Waiting {
		if w.Reason == ReasonWaiting {
			return true
		}
	}
	return false
}

// rendersMore reports whether a child that before waited for other children
// does not wait in now.
func rendersMore(before, now *Rendered) bool {
	for id, w := range before.Waiting {
		if w.Reason != ReasonWaiting {
			continue
		}
		if _, still := now.Waiting[id]; !still {
			return true
		}
	}
	return false
}

// created reports whether a step created its child.
func created(outcomes []outcome) bool {
	for _, o := range outcomes {
		if o.ok && o.step.Op == OpCreate {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// classify joins the errors of one reconcile so that it is terminal only when
// every error is: one retryable failure means the parent is retried.
func classify(errs []error) error {
	var retry, terminal []error
	for _, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, ErrTerminal):
			terminal = append(terminal, err)
		default:
			retry = append(retry, err)
		}
	}
	if len(retry) > 0 {
		return errors.Join(retry...)
	}
	if len(terminal) > 0 {
		return Terminal(errors.Join(terminal...))
	}
	return nil
}

// writeChild creates, applies or keeps one child, as its step says.
func (r *Reconciler) writeChild(ctx context.Context, rule *rules.Rule, parent *unstructured.Unstructured, step Step) (outcome, error) {
	logger := klog.FromContext(ctx)
	out := outcome{step: step, live: step.Live}
	desired := step.Object
	mapping, err := r.cfg.Resources.ResourceFor(desired.GroupVersionKind())
	if err != nil {
		out.reason, out.msg = ReasonApplyFailed, fmt.Sprintf("child %s: %v", step.ID, err)
		return out, err
	}
	gvr := mapping.GroupVersionResource()
	// Writes go through client (as the rule's ServiceAccount, if it has
	// one); the rare reads through reader, kgen's own, as its caches do.
	reader := r.resource(mapping, desired.GetNamespace())
	client, err := r.childResource(rule, mapping, desired.GetNamespace())
	if err != nil {
		out.reason, out.msg = ReasonApplyFailed, fmt.Sprintf("child %s: %v", step.ID, err)
		return out, err
	}
	ref := describeObject(mapping, desired)
	kind := r.kind(desired.GroupVersionKind())

	live := step.Live
	op := step.Op
	createOnly := rule.Child(step.ID).UpdatePolicy == rules.UpdateCreateOnly
	if live == nil {
		// Created by an earlier reconcile that the cache does not show yet?
		if fresh := r.cfg.Writes.Created(gvr, desired.GetNamespace(), desired.GetName(), sameChild(parent.GetUID(), step.ID)); fresh != nil {
			live = fresh
			op = r.judge(desired, live)
			if createOnly {
				op = OpKeep // created once, never written again
			}
		}
	}
	if live != nil {
		if _, owed := r.owed.Load(live.GetUID()); owed {
			fresh, err := reader.Get(ctx, live.GetName(), metav1.GetOptions{})
			if err == nil {
				_, err = r.takeCoOwned(ctx, reader, client, fresh)
			}
			if err != nil && !apierrors.IsNotFound(err) {
				return owedFailure(out, ref, err)
			}
			r.owed.Delete(live.GetUID())
		}
	}
	// What a repair of this child counts as (see childGuard).
	key := contendKey{parent.GetUID(), refOf(step.ID, desired), live == nil}
	if op == OpKeep {
		out.live, out.ok = live, true
		return r.spacedOutcome(out, key), nil
	}
	if op == OpMarks {
		return r.writeMarks(ctx, client, reader, rule, parent, live, step, gvr, ref, key)
	}

	// A repair: a field kgen sets was changed, or the child was deleted
	// after the last reconcile (it existed then).
	recreate := live == nil && r.seen.had(parent.GetUID(), refOf(step.ID, desired))
	if op == OpRepair || recreate {
		if held, ok := r.holdRepair(ctx, rule, parent, live, reader, step, ref, key); ok {
			return held, nil
		}
	}
	adopted := "" // why an object found at the child's name is taken
	if live == nil {
		created, err := r.create(ctx, client, desired)
		switch {
		case err == nil:
			r.wrote(gvr, created, desired, kind)
			logger.V(2).Info("Created child", "child", step.ID, "object", ref)
			if recreate {
				r.contend.repaired(key)
				r.cfg.Recorder.Eventf(parent, corev1.EventTypeNormal, EventRepaired, "Repaired %s (child %s): it was deleted, and is created again", ref, step.ID)
			} else {
				r.cfg.Recorder.Eventf(parent, corev1.EventTypeNormal, EventCreated, "Created %s (child %s)", ref, step.ID)
			}
			out.live, out.ok = created, true
			return out, nil
		case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
			// Not in the cache: either the cache is behind, or the object
			// is not this parent's child. Only on this rare path is a read
			// worth it.
			existing, getErr := reader.Get(ctx, desired.GetName(), metav1.GetOptions{})
			if getErr != nil {
				out.reason, out.msg = failure(rule, step.ID, ref, "read", getErr)
				return out, fmt.Errorf("get %s: %w", ref, getErr)
			}
			who := r.owner(ctx, existing, parent)
			if who == ownerThis && !ownedBy(existing, parent) && r.parentLeaving(ctx, parent) {
				// Its ownerReference was taken away, and the parent is
				// being deleted: the garbage collector orphaned it, as
				// 'kubectl delete --cascade=orphan' asks, and the cache
				// does not show the parent's deletion yet. Giving the
				// ownerReference back would have the garbage collector
				// delete what the user meant to keep.
				logger.V(2).Info("Not giving a child its ownerReference back: the parent is being deleted", "child", step.ID, "object", ref)
				out.live = existing
				return out, nil
			}
			switch {
			case who == ownerThis && existing.GetDeletionTimestamp() != nil:
				// Being deleted (held by a finalizer of someone
				// else's): nothing to write to; it is created again
				// once it is gone, and until then it is not ready
				// (CheckReady says why). Not ok: what its id
				// supersedes stays, and no reader is woken for it.
				out.live = existing
				return out, nil
			case who == ownerThis && createOnly && ownedBy(existing, parent):
				out.live, out.ok = existing, true // the cache is behind: kept as it is
				return out, nil
			case who == ownerThis && createOnly:
				// Its ownerReference was taken away: given back, and
				// its content kept.
				return r.writeMarks(ctx, client, reader, rule, parent, existing, step, gvr, ref, key)
			case who == ownerThis:
				live = existing
			case who == ownerGone:
				live, adopted = existing, "its owner no longer exists"
			case who == ownerOrphaned:
				live, adopted = existing, "this parent let go of it earlier (deletionPolicy Orphan) and wants it again"
			default:
				out.live = nil
				out.reason = ReasonConflict
				out.msg = fmt.Sprintf("child %s: %s exists and %s; kgen leaves it untouched", step.ID, ref, who)
				out.in = &Blocker{GVR: gvr, Namespace: existing.GetNamespace(), Name: existing.GetName(),
					ResourceVersion: existing.GetResourceVersion(), Marks: OwnershipMarks(existing)}
				r.cfg.Recorder.Event(parent, corev1.EventTypeWarning, ReasonConflict, out.msg)
				return out, nil
			}
			if adopted != "" && createOnly {
				return r.adoptCreateOnly(ctx, client, rule, parent, live, step, gvr, ref, adopted)
			}
			op = OpUpdate
			if adopted == "" && templateHash(live) == templateHash(desired) {
				op = r.judge(desired, live)
				if op == OpKeep {
					out.live, out.ok = live, true
					return out, nil
				}
			}
		case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) && desired.GetNamespace() == parent.GetNamespace():
			// The parent's namespace, and so the parent, is going away.
			out.reason, out.msg = ReasonApplyFailed, fmt.Sprintf("child %s: namespace %s is being deleted", step.ID, desired.GetNamespace())
			return out, Terminal(fmt.Errorf("create %s: %w", ref, err))
		default:
			out.reason, out.msg = failure(rule, step.ID, ref, "create", err)
			r.cfg.Recorder.Event(parent, corev1.EventTypeWarning, out.reason, out.msg)
			return out, wrapFailure(fmt.Errorf("create %s: %w", ref, err))
		}
	}

	// An update that follows a change of what the template reads (the
	// default case below): the rule and parent it was rendered from.
	var cause Digest
	if op == OpUpdate && adopted == "" {
		cause = followCause(rule, parent)
		if held, ok := r.holdFollow(ctx, rule, parent, live, step, ref, key, cause); ok {
			return held, nil
		}
	}
	var who string
	if op == OpRepair {
		who = r.lastWriter(ctx, reader, live, desired)
	}
	if err := r.upgradeOwnership(ctx, reader, client, live); err != nil {
		out.reason, out.msg = failure(rule, step.ID, ref, "migrate the field ownership of", err)
		return out, fmt.Errorf("migrate field ownership of %s: %w", ref, err)
	}
	// The UID pins the write to the object seen: if it was replaced by
	// someone else's meanwhile, the apply fails instead of taking it over.
	desired.SetUID(live.GetUID())
	applied, err := client.Apply(ctx, desired.GetName(), desired, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
	desired.SetUID("")
	if path, managers := r.clashes(ctx, reader, err, live); len(managers) > 0 {
		// Not the template's fault: what another writer set there (an
		// entry of a keyed list whose key it changed, say: a Service
		// port edited from 9090 to 7070) is kept by the apply, which
		// never removes another manager's fields, and the result is
		// invalid. kgen leaves it, and says who must undo it; their
		// change to the child, or the conflict's next look, applies
		// again.
		out.reason = ReasonConflict
		out.msg = fmt.Sprintf("child %s: apply %s: %v; the live object's %s holds what %s set, which kgen does not remove and which clashes with the template: undo that change, and kgen applies the template again",
			step.ID, ref, err, path, strings.Join(managers, ", "))
		r.cfg.Recorder.Event(parent, corev1.EventTypeWarning, out.reason, out.msg)
		out.live = live
		return out, nil
	}
	if err != nil {
		out.reason, out.msg = failure(rule, step.ID, ref, "apply", err)
		r.cfg.Recorder.Event(parent, corev1.EventTypeWarning, out.reason, out.msg)
		return out, wrapFailure(fmt.Errorf("apply %s: %w", ref, err))
	}
	if adopted != "" {
		taken, err := r.takeCoOwned(ctx, reader, client, applied)
		if err != nil {
			// The child is this parent's now, so the next reconcile
			// would not adopt it again: it is owed, until done.
			r.owed.Store(applied.GetUID(), struct{}{})
			r.wrote(gvr, applied, desired, kind)
			out, err = owedFailure(out, ref, err)
			r.cfg.Recorder.Event(parent, corev1.EventTypeWarning, out.reason, out.msg)
			return out, err
		}
		applied = taken
	}
	r.wrote(gvr, applied, desired, kind)
	out.live, out.ok = applied, true
	if applied.GetResourceVersion() == live.GetResourceVersion() {
		// The server found nothing to change (it normalises a value the
		// template spells differently): not a change worth an event.
		return r.spacedOutcome(out, key), nil
	}
	logger.V(2).Info("Applied child", "child", step.ID, "object", ref, "op", op.String())
	switch {
	case adopted != "":
		r.cfg.Recorder.Eventf(parent, corev1.EventTypeNormal, EventAdopted, "Adopted %s (child %s): %s", ref, step.ID, adopted)
	case op == OpRepair:
		r.contend.repaired(key)
		out = r.spacedOutcome(out, key) // still spaced: Ready says so on every reconcile
		r.cfg.Recorder.Eventf(parent, corev1.EventTypeNormal, EventRepaired, "Repaired %s (child %s)%s", ref, step.ID, who)
	default:
		r.contend.followed(key, cause)
		out = r.spacedOutcome(out, key)
		r.cfg.Recorder.Eventf(parent, corev1.EventTypeNormal, EventUpdated, "Updated %s (child %s)", ref, step.ID)
	}
	return out, nil
}

// writeMarks writes kgen's marks on a CreateOnly child (see
// adoptCreateOnly): its deletionPolicy, id or rule changed, or someone
// took marks off it. Writing marks kgen wrote before is a repair, held
// off as one when another writer keeps taking them off (holdRepair).
func (r *Reconciler) writeMarks(ctx context.Context, client, reader dynamic.ResourceInterface, rule *rules.Rule, parent, live *unstructured.Unstructured, step Step,
	gvr schema.GroupVersionResource, ref string, key contendKey) (outcome, error) {
	marks := marksOf(step.Object)
	again := r.contend.rewritesMarks(key, marks)
	if again {
		if held, ok := r.holdRepair(ctx, rule, parent, live, reader, step, ref, key); ok {
			return held, nil
		}
	}
	out, err := r.adoptCreateOnly(ctx, client, rule, parent, live, step, gvr, ref, "")
	if err == nil && out.ok {
		if again {
			r.contend.repaired(key)
		}
		r.contend.wroteMarks(key, marks)
	}
	return out, err
}

// adoptCreateOnly takes over a CreateOnly child whose owner is gone, or
// that this parent orphaned earlier (why says which), or brings its own
// child's marks up to date (why is ""): the ownerReference someone
// removed, or a deletionPolicy, id or rule that changed (OpMarks), without
// writing its content: it was
// created once (a generated password, which data kept elsewhere was set up
// with) and is never written again. Only kgen's labels and annotations and
// the controller ownerReference change, in one merge patch carrying the
// object's UID and resource version, so it never changes another object,
// or one someone changed since it was read. As with orphan, the patch is
// kgen's Update entry, which upgradeOwnership moves into kgen's apply entry
// if the child's updatePolicy becomes Apply.
func (r *Reconciler) adoptCreateOnly(ctx context.Context, client dynamic.ResourceInterface, rule *rules.Rule, parent, live *unstructured.Unstructured, step Step,
	gvr schema.GroupVersionResource, ref, why string) (outcome, error) {
	out := outcome{step: step}
	desired := step.Object
	labels := map[string]any{}
	for _, k := range markLabels {
		if v, ok := desired.GetLabels()[k]; ok {
			labels[k] = v
		} else {
			labels[k] = nil
		}
	}
	annotations := map[string]any{AnnotationOrphanedFrom: nil}
	for _, k := range markAnnotations {
		if v, ok := desired.GetAnnotations()[k]; ok {
			annotations[k] = v
		} else {
			annotations[k] = nil
		}
	}
	// The gone owner's controller reference gives way to this parent's
	// (none for a child in another namespace); other owners stay.
	owners := []any{}
	for _, o := range append(slices.DeleteFunc(live.GetOwnerReferences(), func(o metav1.OwnerReference) bool {
		return o.Controller != nil && *o.Controller
	}), desired.GetOwnerReferences()...) {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&o)
		if err != nil {
			return out, err
		}
		owners = append(owners, m)
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid": string(live.GetUID()), "resourceVersion": live.GetResourceVersion(),
		"labels": labels, "annotations": annotations, "ownerReferences": owners,
	}})
	if err != nil {
		return out, err
	}
	adopted, err := client.Patch(ctx, live.GetName(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	if err != nil {
		out.reason, out.msg = failure(rule, step.ID, ref, "adopt", err)
		r.cfg.Recorder.Event(parent, corev1.EventTypeWarning, out.reason, out.msg)
		return out, wrapFailure(fmt.Errorf("adopt %s: %w", ref, err))
	}
	r.cfg.Writes.Wrote(gvr, adopted)
	out.live, out.ok = adopted, true
	if why == "" {
		klog.FromContext(ctx).V(2).Info("Wrote kgen's marks on a CreateOnly child, not its content", "child", step.ID, "object", ref,
			"marks", MarksDiffer(desired, live))
		return out, nil
	}
	klog.FromContext(ctx).V(2).Info("Adopted child", "child", step.ID, "object", ref)
	r.cfg.Recorder.Eventf(parent, corev1.EventTypeNormal, EventAdopted, "Adopted %s (child %s, updatePolicy CreateOnly): %s; its content is kept", ref, step.ID, why)
	return out, nil
}

// create creates a child with a server-side apply that cannot take over an
// existing object (see createOnlyResourceVersion).
func (r *Reconciler) create(ctx context.Context, client dynamic.ResourceInterface, desired *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	desired.SetResourceVersion(createOnlyResourceVersion)
	defer desired.SetResourceVersion("")
	return client.Apply(ctx, desired.GetName(), desired, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
}

// wrote records a write: for reading it back before the cache shows it, and
// what the server made of the fields the template sets.
func (r *Reconciler) wrote(gvr schema.GroupVersionResource, obj, desired *unstructured.Unstructured, kind *kschema.Field) {
	r.cfg.Writes.Wrote(gvr, obj)
	r.normal.remember(obj.GetUID(), templateHash(desired), Project(desired.Object, obj.Object, kind))
}

// sameChild accepts a remembered object that carries the parent's UID and
// the child's id.
func sameChild(parent types.UID, id string) func(*watch.Object) bool {
	return func(o *watch.Object) bool {
		return o.Label(LabelParentUID) == string(parent) && o.Label(LabelChild) == id
	}
}

// failure turns an API error into a Ready reason and message. When the
// server refused the object (invalid), the message also says where in the
// rules the child's template is, as that is what to fix.
func failure(rule *rules.Rule, id, ref, verb string, err error) (reason, msg string) {
	where := ""
	switch {
	case LearningKind(err):
		// Not a lack of rights: it passes within 30 s.
		reason, where = ReasonApplyFailed, " (the API server has not learned the kind yet; kgen tries again every 2 s)"
	case beingDeleted(err):
		// Not a lack of rights either (a live audit: a namespace and a
		// CRD being deleted read as Forbidden on the parents).
		reason, where = ReasonApplyFailed, " (not a lack of rights: the API server refuses new objects where they are being deleted; kgen tries again with backoff)"
	case apierrors.IsForbidden(err):
		reason = ReasonForbidden
	case refusedAsInvalid(err):
		reason = ReasonInvalid
		if text, ok := untypedApply(err); ok {
			err = errors.New(text)
		}
		if src := ChildSource(rule, id); src != "" {
			where = " (its template: " + src + ")"
		}
	default:
		reason = ReasonApplyFailed
	}
	return reason, fmt.Sprintf("child %s: %s %s: %v%s", id, verb, ref, err, where)
}

// clashes returns, for an apply the API server refused as invalid for a
// duplicate value, the field it named (as "spec.ports": the path up to the
// first list) where the live object, read again (the cache keeps no
// managedFields), holds fields of other managers than kgen, and those
// managers; none when the error is of another kind, names no field, or no
// other manager has fields there.
func (r *Reconciler) clashes(ctx context.Context, reader dynamic.ResourceInterface, err error, live *unstructured.Unstructured) (path string, managers []string) {
	var api apierrors.APIStatus
	if err == nil || !apierrors.IsInvalid(err) || !errors.As(err, &api) || api.Status().Details == nil {
		return "", nil
	}
	// Only a duplicate (two entries of a list with one name, say) is what
	// a kept entry of another writer's makes; any other invalid value is
	// the template's, even where another manager has fields (a
	// controller's annotation next to an invalid one of the template).
	var causes []metav1.StatusCause
	for _, c := range api.Status().Details.Causes {
		if c.Type == metav1.CauseTypeFieldValueDuplicate {
			causes = append(causes, c)
		}
	}
	if len(causes) == 0 {
		return "", nil
	}
	live, getErr := reader.Get(ctx, live.GetName(), metav1.GetOptions{})
	if getErr != nil {
		return "", nil
	}
	for _, cause := range causes {
		var steps []string
		for part := range strings.SplitSeq(cause.Field, ".") {
			name, _, indexed := strings.Cut(part, "[")
			steps = append(steps, name)
			if indexed {
				break
			}
		}
		if len(steps) == 0 || steps[0] == "" {
			continue
		}
		for _, m := range live.GetManagedFields() {
			if ownManager(m.Manager) || m.Subresource != "" || m.FieldsV1 == nil || slices.Contains(managers, m.Manager) {
				continue
			}
			var fields map[string]any
			if json.Unmarshal(m.FieldsV1.Raw, &fields) != nil {
				continue
			}
			if holds(fields, steps) {
				path = strings.Join(steps, ".")
				managers = append(managers, m.Manager)
			}
		}
		if len(managers) > 0 {
			return path, managers
		}
	}
	return "", nil
}

// holds tells whether a managedFields set (FieldsV1) has fields under a
// path of field names.
func holds(fields map[string]any, path []string) bool {
	for _, name := range path {
		next, ok := fields["f:"+name].(map[string]any)
		if !ok {
			return false
		}
		fields = next
	}
	return true
}

// LearningKind reports whether err holds a write the API server's
// admission refused because its own RESTMapper does not know a kind yet: an
// ownerReference that blocks its owner's deletion is checked against the
// owner's kind, which the server's mapper learns within 30 s of a new CRD
// being served ("cannot set blockOwnerDeletion in this case because cannot
// find RESTMapping for APIVersion ... Kind ..."). Each error joined in err
// is looked at on its own.
func LearningKind(err error) bool {
	switch e := err.(type) {
	case interface{ Unwrap() []error }:
		return slices.ContainsFunc(e.Unwrap(), LearningKind)
	case apierrors.APIStatus:
		s := e.Status()
		return s.Reason == metav1.StatusReasonForbidden && strings.Contains(s.Message, "cannot find RESTMapping")
	case interface{ Unwrap() error }:
		return LearningKind(e.Unwrap())
	}
	return false
}

// beingDeleted tells the API server's refusal (403) of a new object in a
// namespace that is being deleted, or of a kind whose CRD is, from a lack
// of rights, also when errors are joined or wrapped.
func beingDeleted(err error) bool {
	switch e := err.(type) {
	case interface{ Unwrap() []error }:
		return slices.ContainsFunc(e.Unwrap(), beingDeleted)
	case apierrors.APIStatus:
		s := e.Status()
		if s.Reason != metav1.StatusReasonForbidden {
			return false
		}
		if s.Details != nil && slices.ContainsFunc(s.Details.Causes, func(c metav1.StatusCause) bool { return c.Type == corev1.NamespaceTerminatingCause }) {
			return true
		}
		return strings.Contains(s.Message, "because it is being terminated") || strings.Contains(s.Message, "while custom resource definition is terminating")
	case interface{ Unwrap() error }:
		return beingDeleted(e.Unwrap())
	}
	return false
}

// childError is a failure of one of a parent's children.
type childError struct {
	id  string
	err error
}

// deleteReason is the Ready reason of a delete (or a release) that failed:
// Forbidden when the API server refused it, DeleteFailed otherwise.
func deleteReason(err error) string {
	if apierrors.IsForbidden(err) {
		return ReasonForbidden
	}
	return ReasonDeleteFailed
}

// wrapFailure marks an error the API server will give again for the same
// object (it is invalid) as terminal; the parent's status says why.
func wrapFailure(err error) error {
	if refusedAsInvalid(err) {
		return Terminal(err)
	}
	return err
}

// refusedAsInvalid reports whether the API server refused a write because
// the object is not valid: it will refuse it again until the object
// changes. A server-side apply whose object does not fit the kind's schema
// (a number where a string goes) is refused with a 500, not a 422, and is
// such a refusal too.
func refusedAsInvalid(err error) bool {
	_, typed := untypedApply(err)
	return typed || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err)
}

// goValue is how the API server's typed-patch errors print a value: as
// the Go struct that holds it ("&value.valueUnstructured{Value:8080}").
var goValue = regexp.MustCompile(`&value\.value[A-Za-z]*\{Value:(.*?)\}`)

// untypedApply returns, for a server-side apply that the API server
// could not type against the kind's schema, what it said of the field
// (".data.port: expected string, got 8080"), without the Go notation of
// values.
func untypedApply(err error) (string, bool) {
	var api apierrors.APIStatus
	if !errors.As(err, &api) {
		return "", false
	}
	m := typedPatchError.FindStringSubmatch(api.Status().Message)
	if m == nil {
		return "", false
	}
	return goValue.ReplaceAllString(strings.TrimSpace(m[1]), "$1"), true
}

// prune deletes a child that is no longer wanted, only if it is still the
// object kgen saw and still carries this parent's UID.
func (r *Reconciler) prune(ctx context.Context, rule *rules.Rule, parent, obj *unstructured.Unstructured, id, why string) error {
	if obj.GetDeletionTimestamp() != nil {
		return nil // already going
	}
	if !ownedBy(obj, parent) {
		return nil // not this parent's: never deleted
	}
	mapping, err := r.cfg.Resources.ResourceFor(obj.GroupVersionKind())
	if err != nil {
		// Its API may be down (mapper.ErrUnavailable): the object is
		// still there, and so is the need to delete it.
		r.cfg.Recorder.Eventf(parent, corev1.EventTypeWarning, ReasonDeleteFailed, "Deleting %s %s (child %s): %v", obj.GetKind(), klog.KObj(obj), id, err)
		return fmt.Errorf("delete %s %s (child %s): %w", obj.GetKind(), klog.KObj(obj), id, err)
	}
	ref := describeObject(mapping, obj)
	client, err := r.childResource(WriterOf(rule, obj), mapping, obj.GetNamespace())
	if err != nil {
		return err
	}
	uid := obj.GetUID()
	if obj.GetAnnotations()[AnnotationDeletionPolicy] == string(rules.DeletionOrphan) {
		return r.orphan(ctx, client, parent, obj, ref, id, why)
	}
	propagation := metav1.DeletePropagationBackground
	err = client.Delete(ctx, obj.GetName(), metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uid}, PropagationPolicy: &propagation,
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		// The same reason as the Ready condition's (Forbidden when refused).
		r.cfg.Recorder.Eventf(parent, corev1.EventTypeWarning, deleteReason(err), "Deleting %s (child %s): %v", ref, id, err)
		return fmt.Errorf("delete %s: %w", ref, err)
	}
	r.cfg.Writes.Deleted(uid)
	r.normal.forget(uid)
	if err != nil {
		return nil // gone or replaced already: not kgen's doing
	}
	klog.FromContext(ctx).V(2).Info("Pruned child", "child", id, "object", ref)
	r.cfg.Recorder.Eventf(parent, corev1.EventTypeNormal, EventDeleted, "Deleted %s (child %s): %s", ref, id, why)
	return nil
}

// orphan lets go of a child whose deletionPolicy is Orphan instead of
// deleting it: it loses kgen's labels and annotations (and any
// ownerReference to the parent), so kgen and the garbage collector leave
// it alone from then on, and gains the orphaned-from mark, by which this
// parent, or one that replaces it once it is gone, may take it back when
// it renders the object again (see owner). The patch carries the object's
// UID, so it never changes another object of that name. It is sent as
// kgen's Update entry, which upgradeOwnership moves into kgen's apply
// entry when a parent takes the object back: that apply then drops the
// mark.
func (r *Reconciler) orphan(ctx context.Context, client dynamic.ResourceInterface, parent, obj *unstructured.Unstructured, ref, id, why string) error {
	labels := map[string]any{}
	for _, k := range markLabels {
		labels[k] = nil
	}
	annotations := map[string]any{}
	for _, k := range []string{AnnotationParent, AnnotationTemplateHash, AnnotationDeletionPolicy, AnnotationServiceAccount} {
		annotations[k] = nil
	}
	annotations[AnnotationOrphanedFrom] = orphanedFrom(parent)
	meta := map[string]any{"uid": string(obj.GetUID()), "labels": labels, "annotations": annotations}
	var owners []any
	for _, o := range obj.GetOwnerReferences() {
		if o.UID != parent.GetUID() {
			m, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(&o)
			owners = append(owners, m)
		}
	}
	if len(owners) != len(obj.GetOwnerReferences()) {
		meta["ownerReferences"] = owners
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	_, err = client.Patch(ctx, obj.GetName(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		r.cfg.Recorder.Eventf(parent, corev1.EventTypeWarning, "OrphanFailed", "Letting go of %s (child %s): %v", ref, id, err)
		return fmt.Errorf("orphan %s: %w", ref, err)
	}
	r.cfg.Writes.Deleted(obj.GetUID())
	r.normal.forget(obj.GetUID())
	klog.FromContext(ctx).V(2).Info("Orphaned child", "child", id, "object", ref)
	r.cfg.Recorder.Eventf(parent, corev1.EventTypeNormal, EventOrphaned, "Orphaned %s (child %s, deletionPolicy Orphan): %s; it stays, without kgen's marks", ref, id, why)
	return nil
}

// ownedBy reports whether obj is a child of parent: its controller
// ownerReference names the parent's UID, or, where Kubernetes allows the
// child no ownerReference to the parent (another namespace, or a
// cluster-scoped child of a namespaced parent), it carries kgen's mark and
// the parent's UID and name. kgen gives every child an ownerReference where
// one is allowed, so labels alone, which anyone who may patch an object can
// add, never make an object kgen's to delete: an object that names the
// parent its controller is deleted with the parent by the garbage collector
// anyway.
func ownedBy(obj, parent *unstructured.Unstructured) bool {
	if ref := metav1.GetControllerOfNoCopy(obj); ref != nil {
		return ref.UID == parent.GetUID()
	}
	orphanable := obj.GetAnnotations()[AnnotationDeletionPolicy] == string(rules.DeletionOrphan)
	if (parent.GetNamespace() == "" || obj.GetNamespace() == parent.GetNamespace()) && !orphanable {
		// An ownerReference was allowed, and it has none. (A child whose
		// deletionPolicy is Orphan has none on purpose; kgen only ever
		// orphans it, never deletes it.)
		return false
	}
	return obj.GetLabels()[LabelManagedBy] == ManagedBy && obj.GetLabels()[LabelParentUID] == string(parent.GetUID()) &&
		obj.GetAnnotations()[AnnotationParent] == parentRef(parent)
}

// parentRef is the value of AnnotationParent for a parent.
func parentRef(parent *unstructured.Unstructured) string {
	if ns := parent.GetNamespace(); ns != "" {
		return ns + "/" + parent.GetName()
	}
	return parent.GetName()
}

// finalize deletes the children Kubernetes will not garbage-collect for a
// parent that is being deleted, then releases the parent. While a delete
// fails, the parent keeps the finalizer and its Ready condition says why
// (reason Forbidden when refused, DeleteFailed otherwise): a parent stuck
// Terminating shows its cause.
func (r *Reconciler) finalize(ctx context.Context, rule *rules.Rule, mapping mapper.Mapping, parent *unstructured.Unstructured, observed []*unstructured.Unstructured) (Result, error) {
	r.Forget(parent.GetUID())
	if !slices.Contains(parent.GetFinalizers(), Finalizer) {
		return Result{}, nil // owner references do the rest
	}
	var errs []error
	remaining := 0
	// In a stable order, so that the Ready message of failed deletes
	// stays the same from one try to the next.
	observed = slices.SortedFunc(slices.Values(observed), func(a, b *unstructured.Unstructured) int {
		return cmp.Or(strings.Compare(a.GetLabels()[LabelChild], b.GetLabels()[LabelChild]), strings.Compare(a.GetNamespace(), b.GetNamespace()), strings.Compare(a.GetName(), b.GetName()))
	})
	for _, obj := range observed {
		if hasOwner(obj, parent.GetUID()) {
			continue // the garbage collector's job
		}
		if !ownedBy(obj, parent) {
			// Only carries its marks (someone copied kgen's labels, or
			// took its ownerReference away where one belongs): not
			// kgen's to delete (prune leaves it), nor to wait for.
			continue
		}
		remaining++
		errs = append(errs, r.prune(ctx, rule, parent, obj, obj.GetLabels()[LabelChild], "its parent is being deleted"))
	}
	if err := errors.Join(errs...); err != nil {
		msg := fmt.Sprintf("kgen keeps its finalizer %s until it has deleted the children only the finalizer guards: %v", Finalizer, err)
		if _, statusErr := r.writeStatus(ctx, rule, mapping, parent, nil, readyCondition(deleteReason(err), msg), observed); statusErr != nil {
			err = errors.Join(err, statusErr)
		}
		return Result{}, err
	}
	if remaining > 0 {
		// Wait for the deletions to show in the cache; their events
		// requeue the parent.
		return Result{}, nil
	}
	return Result{}, r.setFinalizer(ctx, mapping, parent, false)
}

// Forget drops what the Reconciler remembers of a parent that is gone or
// left its rule.
func (r *Reconciler) Forget(parent types.UID) {
	r.status.forget(parent)
	r.contend.forget(parent)
	r.seen.forget(parent)
}

// Release removes kgen's finalizer from a parent that no rule selects any
// more (relabelled, or its rule's scope narrowed or removed). Its children
// stay; if the parent is being deleted, the children that only the
// finalizer guards are deleted first, as when a rule still selected it.
// children are the parent's children as cached, possibly none.
func (r *Reconciler) Release(ctx context.Context, rule *rules.Rule, mapping mapper.Mapping, parent *unstructured.Unstructured, children []*unstructured.Unstructured) error {
	r.Forget(parent.GetUID())
	if parent.GetDeletionTimestamp() != nil && slices.Contains(parent.GetFinalizers(), Finalizer) {
		// No later reconcile will come for a parent no rule selects: the
		// deletes are made, and the finalizer goes at once.
		var errs []error
		for _, obj := range children {
			if !hasOwner(obj, parent.GetUID()) {
				errs = append(errs, r.prune(ctx, rule, parent, obj, obj.GetLabels()[LabelChild], "its parent is being deleted"))
			}
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	return r.setFinalizer(ctx, mapping, parent, false)
}

// setFinalizer adds or removes kgen's finalizer on the parent with
// server-side apply, so other finalizers are never touched.
func (r *Reconciler) setFinalizer(ctx context.Context, mapping mapper.Mapping, parent *unstructured.Unstructured, want bool) error {
	_, err := r.setFinalizerOn(ctx, mapping, parent, want)
	return err
}

// setFinalizerOn is setFinalizer, and returns the parent as the server
// has it after the write, or parent when it wrote nothing: a status write
// that follows needs the new resource version.
func (r *Reconciler) setFinalizerOn(ctx context.Context, mapping mapper.Mapping, parent *unstructured.Unstructured, want bool) (*unstructured.Unstructured, error) {
	if slices.Contains(parent.GetFinalizers(), Finalizer) == want {
		return parent, nil
	}
	patch := &unstructured.Unstructured{}
	patch.SetAPIVersion(parent.GetAPIVersion())
	patch.SetKind(parent.GetKind())
	patch.SetName(parent.GetName())
	patch.SetNamespace(parent.GetNamespace())
	patch.SetUID(parent.GetUID())
	if want {
		patch.SetFinalizers([]string{Finalizer})
	}
	updated, err := r.resource(mapping, parent.GetNamespace()).Apply(ctx, parent.GetName(), patch,
		metav1.ApplyOptions{FieldManager: finalizerManager, Force: true})
	if apierrors.IsNotFound(err) && !want {
		return parent, nil
	}
	if err != nil && !want && r.parentGone(ctx, mapping, parent) {
		// The apply, pinned to the parent's UID, found none of it: the
		// parent went meanwhile (another rule of its kind released it
		// first, and it was being deleted), or another object took its
		// name. Nothing of kgen's is left on it.
		return parent, nil
	}
	if err != nil {
		return parent, fmt.Errorf("set finalizer on %s: %w", describeObject(mapping, parent), err)
	}
	// Until the cache shows it, the next reconcile must not patch again.
	r.cfg.Writes.Wrote(mapping.GroupVersionResource(), updated)
	if want {
		klog.FromContext(ctx).V(2).Info("Added finalizer", "finalizer", Finalizer)
	} else {
		klog.FromContext(ctx).V(2).Info("Removed finalizer", "finalizer", Finalizer)
	}
	return updated, nil
}

// parentLeaving reports whether the parent, read from the API server, is
// being deleted or no longer exists as the object kgen saw. A failed read
// tells nothing.
func (r *Reconciler) parentLeaving(ctx context.Context, parent *unstructured.Unstructured) bool {
	mapping, err := r.cfg.Resources.ResourceFor(parent.GroupVersionKind())
	if err != nil {
		return false
	}
	now, err := r.resource(mapping, parent.GetNamespace()).Get(ctx, parent.GetName(), metav1.GetOptions{})
	return apierrors.IsNotFound(err) || err == nil && (now.GetUID() != parent.GetUID() || now.GetDeletionTimestamp() != nil)
}

// parentGone reports whether the parent no longer exists as the object
// kgen saw: none of its name, or one with another UID. A failed read tells
// nothing.
func (r *Reconciler) parentGone(ctx context.Context, mapping mapper.Mapping, parent *unstructured.Unstructured) bool {
	now, err := r.resource(mapping, parent.GetNamespace()).Get(ctx, parent.GetName(), metav1.GetOptions{})
	return apierrors.IsNotFound(err) || err == nil && now.GetUID() != parent.GetUID()
}

// remaining returns the parent's objects as they are after a reconcile's
// writes: the children as the writes left them (live), and every other
// observed object that was not pruned or let go of (gone). Objects the
// plan keeps without a step (a child's object of its old kind, kept while
// its replacement waits or failed; a waiting child's) are among them.
func remaining(plan *Plan, parent *unstructured.Unstructured, observed, live []*unstructured.Unstructured, gone map[types.UID]bool) []*unstructured.Unstructured {
	seen := map[types.UID]bool{}
	for _, o := range live {
		seen[o.GetUID()] = true
	}
	for _, s := range plan.Steps {
		if s.Live != nil {
			seen[s.Live.GetUID()] = true // live holds what its write left
		}
	}
	out := slices.Clone(live)
	for _, o := range observed {
		// As MakePlan, only the parent's own children that are not
		// being deleted count: an object that merely carries its marks
		// is not kgen's to guard.
		if !ownedBy(o, parent) || o.GetDeletionTimestamp() != nil {
			continue
		}
		if !seen[o.GetUID()] && !gone[o.GetUID()] {
			out = append(out, o)
		}
	}
	return out
}

// needsFinalizer tells whether the parent still needs kgen's finalizer
// once a reconcile's writes are done: a child it wants cannot carry an
// ownerReference to it, an object of the parent's that stays (remaining)
// has none, or a prune failed. The plan asks for the finalizer before the
// writes also for children that lose it by them (a child whose
// deletionPolicy changed from Orphan to Delete gets its ownerReference, a
// cluster-scoped child removed from the rule is deleted): without this
// judgement after them, the finalizer would stay until the parent next
// changed.
func needsFinalizer(plan *Plan, parent *unstructured.Unstructured, remaining []*unstructured.Unstructured, pruneFailed bool) bool {
	if pruneFailed || slices.ContainsFunc(plan.Steps, func(s Step) bool { return !s.OwnerReference }) {
		return true
	}
	return slices.ContainsFunc(remaining, func(o *unstructured.Unstructured) bool { return !hasOwner(o, parent.GetUID()) })
}

// readiness computes the parent's Ready condition.
func (r *Reconciler) readiness(rule *rules.Rule, parent *unstructured.Unstructured, rendered *Rendered, outcomes []outcome, observed Observed) metav1.Condition {
	// Failures first, in child order: they are what needs attention.
	for _, reason := range []string{ReasonForbidden, ReasonInvalid, ReasonConflict, ReasonApplyFailed, ReasonChildContended} {
		for _, o := range outcomes {
			if o.reason == reason {
				return readyCondition(reason, o.msg)
			}
		}
	}
	for _, c := range rule.Order() {
		if wait, ok := rendered.Waiting[c.ID]; ok {
			reason := wait.Reason
			if reason == "" {
				reason = ReasonWaiting
			}
			return readyCondition(reason, fmt.Sprintf("child %s is %s", c.ID, wait.Message))
		}
	}
	for _, o := range outcomes {
		ok, msg, err := Ready(rule, o.step.Child, parent, o.live, observed)
		if err != nil {
			return readyCondition(ReasonInvalid, err.Error())
		}
		if !ok {
			what := o.step.ID
			if c := rule.Child(o.step.ID); c != nil && len(c.ForEach) > 0 {
				what += " (" + o.step.Object.GetName() + ")"
			}
			return readyCondition(ReasonNotReady, fmt.Sprintf("child %s: %s", what, msg))
		}
	}
	var notes []string
	for _, o := range outcomes {
		if o.note != "" {
			notes = append(notes, o.note)
		}
	}
	if len(notes) > 0 {
		// Not "applied": a spaced child's last update may be held.
		return metav1.Condition{Type: ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonReady, Message: "all children are ready; " + strings.Join(notes, "; ")}
	}
	return metav1.Condition{Type: ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonReady, Message: "all children are applied and ready"}
}

func readyCondition(reason, msg string) metav1.Condition {
	return metav1.Condition{Type: ConditionReady, Status: metav1.ConditionFalse, Reason: reason, Message: msg}
}

// childResource returns the client that writes a rule's children: kgen's
// own, or, for a rule with spec.serviceAccount, one that acts as that
// ServiceAccount, so the rule can do no more than it may.
func (r *Reconciler) childResource(rule *rules.Rule, m mapper.Mapping, namespace string) (dynamic.ResourceInterface, error) {
	if rule == nil || rule.ServiceAccount == nil {
		return r.resource(m, namespace), nil
	}
	if r.cfg.Impersonate == nil {
		return nil, fmt.Errorf("rule %s writes its children as ServiceAccount %s/%s, and kgen cannot act as another user here",
			rule.Name, rule.ServiceAccount.Namespace, rule.ServiceAccount.Name)
	}
	client, err := r.cfg.Impersonate(*rule.ServiceAccount)
	if err != nil {
		return nil, err
	}
	res := client.Resource(m.GroupVersionResource())
	if m.Namespaced {
		return res.Namespace(namespace), nil
	}
	return res, nil
}

// WriterOf returns the rule to delete (or let go of) a child as. A rule
// with spec.serviceAccount acts as its account, whoever's the child is: it
// can do no more than the account may. A loaded rule without one acts on
// its own children (LabelRule) with kgen's rights, as its author chose,
// whatever account an earlier version of it used. Any other child is a
// removed rule's: the rule is known by name alone (its parent released),
// or a loaded rule of the same kind releases a parent the removed rule
// had. Such a child is deleted as the ServiceAccount it says wrote it
// (AnnotationServiceAccount), if any: a removed rule must not delete with
// kgen's rights what its account may not. Under sharding, a child that
// comes to a shard with its parent is relabelled as the same writer.
func WriterOf(rule *rules.Rule, obj *unstructured.Unstructured) *rules.Rule {
	if rule == nil || rule.ServiceAccount != nil {
		return rule
	}
	if len(rule.Children) > 0 && obj.GetLabels()[LabelRule] == rule.Name {
		return rule
	}
	ns, name, ok := strings.Cut(obj.GetAnnotations()[AnnotationServiceAccount], "/")
	if !ok || ns == "" || name == "" {
		return rule
	}
	as := *rule
	as.ServiceAccount = &rules.ServiceAccount{Namespace: ns, Name: name}
	return &as
}

func (r *Reconciler) resource(m mapper.Mapping, namespace string) dynamic.ResourceInterface {
	res := r.cfg.Client.Resource(m.GroupVersionResource())
	if m.Namespaced {
		return res.Namespace(namespace)
	}
	return res
}

// describeObject names an object as kubectl would: "deployments.apps ns/name".
func describeObject(m mapper.Mapping, obj *unstructured.Unstructured) string {
	res := m.Resource
	if m.Group != "" {
		res += "." + m.Group
	}
	name := obj.GetName()
	if ns := obj.GetNamespace(); ns != "" && m.Namespaced {
		name = ns + "/" + name
	}
	return strings.TrimSpace(res + " " + name)
}
