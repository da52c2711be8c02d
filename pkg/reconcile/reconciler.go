package reconcile

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"kgen.dev/kgen/pkg/mapper"
	"kgen.dev/kgen/rules"
)

// FieldManager is the server-side apply field manager of everything kgen writes.
const FieldManager = "kgen"

// Finalizer is put on a parent that has children Kubernetes cannot
// garbage-collect for it (no ownerReference allowed), so kgen can delete
// them before the parent goes.
const Finalizer = "kgen.dev/cleanup"

// ConditionReady is the type of the condition kgen writes on parents.
const ConditionReady = "Ready"

// Reasons of the Ready condition.
const (
	ReasonReady         = "Ready"
	ReasonNotReady      = "ChildNotReady"
	ReasonWaiting       = "WaitingForDependency"
	ReasonInvalid       = "InvalidSpec"
	ReasonConflict      = "Conflict"
	ReasonForbidden     = "Forbidden"
	ReasonApplyFailed   = "ApplyFailed"
	conflictRecheck     = 30 * time.Second
	notReadyRecheckNone = 0
)

// ErrTerminal is matched, with errors.Is, by errors that retrying soon will
// not fix: a bad rule or parent, or an object kgen must not take over. The
// parent's status says what is wrong; a change to the parent, its children
// or the rules starts a new attempt.
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
}

// ChildLister reads a parent's children from the informer cache.
type ChildLister interface {
	// Children returns the cached children of the rule's parent with the
	// given UID, in any order. Callers must not modify them.
	Children(rule string, parent types.UID) []*unstructured.Unstructured
}

// Resources maps kinds to resources; *mapper.Mapper is one.
type Resources interface {
	ResourceFor(gvk schema.GroupVersionKind) (mapper.Mapping, error)
}

// Cache tells what version of an object the informer cache holds.
type Cache interface {
	// CachedResourceVersion returns the resource version of the cached
	// object of that resource, namespace and name, or "" if none is cached.
	CachedResourceVersion(gvr schema.GroupVersionResource, namespace, name string) string
}

// Config holds a Reconciler's dependencies. All but Cache are required.
type Config struct {
	Client    dynamic.Interface
	Resources Resources
	Children  ChildLister
	Recorder  record.EventRecorder
	// Cache, when set, lets the Reconciler forget at once a write the
	// cache already shows (its watch event came before the response).
	Cache Cache
}

// Reconciler makes one parent's children equal to its rule's templates. It
// reads only from the informer cache (through ChildLister and the parent it
// is given) and writes with server-side apply. It is safe for concurrent use
// on different parents.
type Reconciler struct {
	cfg    Config
	recent *recentWrites
	scope  Scoper
}

// New returns a Reconciler.
func New(cfg Config) *Reconciler {
	r := &Reconciler{cfg: cfg, recent: newRecentWrites(), scope: resourceScoper{cfg.Resources}}
	if cfg.Cache != nil {
		r.recent.cached = func(apiVersion, kind, namespace, name string) string {
			m, err := cfg.Resources.ResourceFor(schema.FromAPIVersionAndKind(apiVersion, kind))
			if err != nil {
				return ""
			}
			return cfg.Cache.CachedResourceVersion(m.GroupVersionResource(), namespace, name)
		}
	}
	return r
}

// Seen tells the Reconciler that the informer cache now holds this version
// of an object, so what it remembered of its own writes to it can go. Call it
// from the informers' event handlers.
func (r *Reconciler) Seen(obj metav1.Object) {
	r.recent.seen(obj.GetUID(), obj.GetResourceVersion())
}

// resourceScoper answers scope questions from discovery.
type resourceScoper struct{ r Resources }

func (s resourceScoper) Namespaced(gvk schema.GroupVersionKind) (bool, error) {
	m, err := s.r.ResourceFor(gvk)
	return m.Namespaced, err
}

// childOutcome is what happened to one child in one reconcile.
type childOutcome struct {
	id     string
	live   *unstructured.Unstructured
	reason string // a Ready reason when the child is not fine
	msg    string
	change string // "Created" or "Updated" when kgen wrote the child
	ref    string // the child as kubectl names it
}

// changes collects the child writes of one reconcile, so they are reported
// in one Event per kind of change rather than one per child: events are
// writes too, and would otherwise double kgen's load on the API server.
type changes map[string][]string

func (c changes) add(change, what string) {
	if change != "" {
		c[change] = append(c[change], what)
	}
}

func (c changes) record(recorder record.EventRecorder, parent *unstructured.Unstructured) {
	for _, change := range []string{"Created", "Updated", "Deleted"} {
		if list := c[change]; len(list) > 0 {
			recorder.Eventf(parent, corev1.EventTypeNormal, change, "%s %s", change, strings.Join(list, ", "))
		}
	}
}

// Reconcile brings the children of one parent in line with the rule, prunes
// those no longer wanted, and writes the parent's status. parent is the
// cached parent object and mapping its resource.
//
// After a child fails, the others are still tried and the parent's status is
// still written; the first error is returned.
func (r *Reconciler) Reconcile(ctx context.Context, rule *rules.Rule, mapping mapper.Mapping, parent *unstructured.Unstructured) (Result, error) {
	logger := klog.FromContext(ctx)
	// The cache may not show kgen's own last status write yet.
	parent = r.recent.freshest(parent, parent)
	observed := r.observed(rule, parent)
	if parent.GetDeletionTimestamp() != nil {
		return r.finalize(ctx, rule, mapping, parent, observed)
	}

	liveByID := map[string]*unstructured.Unstructured{}
	for _, obj := range observed {
		id := obj.GetLabels()[LabelChild]
		if prev, dup := liveByID[id]; !dup || prev.GetCreationTimestamp().After(obj.GetCreationTimestamp().Time) {
			liveByID[id] = obj
		}
	}
	rendered, err := Render(rule, parent, Observed{Children: GroupChildren(rule, observed)}, r.scope)
	if err != nil {
		if errors.Is(err, ErrInvalid) {
			r.cfg.Recorder.Event(parent, corev1.EventTypeWarning, ReasonInvalid, err.Error())
			if statusErr := r.writeStatus(ctx, rule, mapping, parent, nil, readyCondition(ReasonInvalid, err.Error())); statusErr != nil {
				return Result{}, statusErr // retried: the parent must show why
			}
			return Result{}, Terminal(err)
		}
		return Result{}, err
	}

	var errs []error
	var outcomes []childOutcome
	changed := changes{}
	defer changed.record(r.cfg.Recorder, parent)
	keep := map[types.UID]bool{}
	needFinalizer := false
	for _, c := range rendered.Children {
		if !c.OwnerReference {
			needFinalizer = true
		}
	}
	finalizerErr := error(nil)
	if needFinalizer {
		if finalizerErr = r.setFinalizer(ctx, mapping, parent, true); finalizerErr != nil {
			errs = append(errs, finalizerErr)
		}
	}
	for _, c := range rendered.Children {
		if finalizerErr != nil && !c.OwnerReference {
			// Without the finalizer such a child could never be cleaned
			// up: do not write it, but keep what exists of it.
			reason, msg := failure(c.ID, "the parent", "set the finalizer on", finalizerErr)
			out := childOutcome{id: c.ID, live: liveByID[c.ID], reason: reason, msg: msg}
			if out.live != nil {
				keep[out.live.GetUID()] = true
			}
			outcomes = append(outcomes, out)
			continue
		}
		out, err := r.applyChild(ctx, rule, parent, c, liveByID[c.ID])
		changed.add(out.change, fmt.Sprintf("%s (child %s)", out.ref, c.ID))
		if out.live != nil {
			keep[out.live.GetUID()] = true
			liveByID[c.ID] = out.live
		}
		outcomes = append(outcomes, out)
		errs = append(errs, err)
	}
	// A child waiting for a dependency keeps what exists of it.
	for id := range rendered.Waiting {
		if live := liveByID[id]; live != nil {
			keep[live.GetUID()] = true
		}
	}
	for _, obj := range observed {
		if keep[obj.GetUID()] {
			continue
		}
		ref, err := r.prune(ctx, parent, obj)
		if err == nil && ref != "" {
			changed.add("Deleted", fmt.Sprintf("%s (child %s is no longer wanted)", ref, obj.GetLabels()[LabelChild]))
		}
		errs = append(errs, err)
	}

	cond := r.readiness(rule, parent, rendered, outcomes, liveByID)
	errs = append(errs, r.writeStatus(ctx, rule, mapping, parent, rendered.Status, cond))
	err = classify(errs)
	if err == nil && cond.Reason == ReasonConflict {
		// The object in the way is not in kgen's cache, so no event will say
		// when it goes: look again later.
		return Result{RequeueAfter: conflictRecheck}, nil
	}
	if err != nil {
		logger.V(2).Info("Reconcile failed", "parent", klog.KObj(parent), "err", err)
	}
	return Result{}, err
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

// observed returns the parent's children from the cache, each replaced by
// what kgen last wrote to it when that is newer.
func (r *Reconciler) observed(rule *rules.Rule, parent *unstructured.Unstructured) []*unstructured.Unstructured {
	cached := r.cfg.Children.Children(rule.Name, parent.GetUID())
	out := make([]*unstructured.Unstructured, 0, len(cached))
	for _, obj := range cached {
		out = append(out, r.recent.freshest(obj, obj))
	}
	return out
}

// applyChild creates the child if it does not exist, applies it if it
// differs from the template, and leaves it alone otherwise.
func (r *Reconciler) applyChild(ctx context.Context, rule *rules.Rule, parent *unstructured.Unstructured, c Child, live *unstructured.Unstructured) (childOutcome, error) {
	logger := klog.FromContext(ctx)
	out := childOutcome{id: c.ID}
	desired := withHash(c.Object) // Render's objects are ours to change
	if live != nil && (live.GetName() != desired.GetName() || live.GetNamespace() != desired.GetNamespace()) {
		live = nil // renamed: create the new one; the old one is pruned
	}
	if live == nil {
		live = r.recent.freshest(nil, desired)
	}
	mapping, err := r.cfg.Resources.ResourceFor(desired.GroupVersionKind())
	if err != nil {
		// Keep what exists: a failure to write must never turn into a prune.
		out.live = live
		out.reason, out.msg = ReasonApplyFailed, fmt.Sprintf("child %s: %v", c.ID, err)
		return out, err
	}
	client := r.resource(mapping, desired.GetNamespace())
	ref := describeObject(mapping, desired)
	out.ref = ref

	if live == nil {
		created, err := client.Create(ctx, desired, metav1.CreateOptions{FieldManager: FieldManager})
		switch {
		case err == nil:
			r.recent.remember(created)
			logger.V(2).Info("Created child", "parent", klog.KObj(parent), "child", c.ID, "object", ref)
			out.live, out.change = created, "Created"
			return out, nil
		case apierrors.IsAlreadyExists(err):
			// Not in the cache: either the cache is behind, or the object
			// is not kgen's. Only on this rare path is one read worth it.
			existing, getErr := client.Get(ctx, desired.GetName(), metav1.GetOptions{})
			if getErr != nil {
				out.reason, out.msg = ReasonApplyFailed, fmt.Sprintf("child %s: %s: %v", c.ID, ref, getErr)
				return out, getErr
			}
			if !ownedBy(existing, rule.Name, parent.GetUID(), c.ID) {
				out.reason = ReasonConflict
				out.msg = fmt.Sprintf("child %s: %s exists and is not managed by kgen for this parent; kgen leaves it untouched", c.ID, ref)
				r.cfg.Recorder.Event(parent, corev1.EventTypeWarning, ReasonConflict, out.msg)
				return out, nil
			}
			live = existing
		case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) && desired.GetNamespace() == parent.GetNamespace():
			// The parent's namespace, and so the parent, is going away.
			out.reason, out.msg = ReasonApplyFailed, fmt.Sprintf("child %s: namespace %s is being deleted", c.ID, desired.GetNamespace())
			return out, Terminal(fmt.Errorf("create %s: %w", ref, err))
		default:
			out.reason, out.msg = failure(c.ID, ref, "create", err)
			r.cfg.Recorder.Event(parent, corev1.EventTypeWarning, out.reason, out.msg)
			return out, wrapFailure(fmt.Errorf("create %s: %w", ref, err))
		}
	}
	if UpToDate(desired, live) {
		out.live = live
		return out, nil
	}
	// The UID pins the write to the object seen: if it was replaced by
	// someone else's meanwhile, the apply fails instead of taking it over.
	desired.SetUID(live.GetUID())
	applied, err := client.Apply(ctx, desired.GetName(), desired, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
	if err != nil {
		out.live = live
		out.reason, out.msg = failure(c.ID, ref, "apply", err)
		r.cfg.Recorder.Event(parent, corev1.EventTypeWarning, out.reason, out.msg)
		return out, wrapFailure(fmt.Errorf("apply %s: %w", ref, err))
	}
	out.live = applied
	if applied.GetResourceVersion() == live.GetResourceVersion() {
		// The server found nothing to change (it normalises a value the
		// template spells differently): not a change worth an event.
		return out, nil
	}
	r.recent.remember(applied)
	logger.V(2).Info("Applied child", "parent", klog.KObj(parent), "child", c.ID, "object", ref)
	out.change = "Updated"
	return out, nil
}

// failure turns an API error into a Ready reason and message.
func failure(id, ref, verb string, err error) (reason, msg string) {
	switch {
	case apierrors.IsForbidden(err):
		reason = ReasonForbidden
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		reason = ReasonInvalid
	default:
		reason = ReasonApplyFailed
	}
	return reason, fmt.Sprintf("child %s: %s %s: %v", id, verb, ref, err)
}

// wrapFailure marks an error the API server will give again for the same
// object (it is invalid) as terminal; the parent's status says why.
func wrapFailure(err error) error {
	if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
		return Terminal(err)
	}
	return err
}

// ownedBy reports whether obj carries kgen's marks for this rule, parent and child.
func ownedBy(obj *unstructured.Unstructured, rule string, parent types.UID, id string) bool {
	l := obj.GetLabels()
	return l[LabelManagedBy] == ManagedBy && l[LabelRule] == rule && l[LabelParentUID] == string(parent) && l[LabelChild] == id
}

// prune deletes a child that is no longer wanted, only if it is still the
// object kgen saw. It returns the child's name as kubectl gives it when this
// call deleted it.
func (r *Reconciler) prune(ctx context.Context, parent, obj *unstructured.Unstructured) (string, error) {
	mapping, err := r.cfg.Resources.ResourceFor(obj.GroupVersionKind())
	if err != nil {
		return "", err
	}
	ref := describeObject(mapping, obj)
	if obj.GetDeletionTimestamp() != nil {
		return "", nil // already going
	}
	uid := obj.GetUID()
	propagation := metav1.DeletePropagationBackground
	err = r.resource(mapping, obj.GetNamespace()).Delete(ctx, obj.GetName(), metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uid}, PropagationPolicy: &propagation,
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		r.cfg.Recorder.Eventf(parent, corev1.EventTypeWarning, "DeleteFailed", "Deleting %s: %v", ref, err)
		return "", fmt.Errorf("delete %s: %w", ref, err)
	}
	r.recent.forget(obj)
	if err != nil {
		return "", nil // gone or replaced already: not kgen's doing
	}
	klog.FromContext(ctx).V(2).Info("Pruned child", "parent", klog.KObj(parent), "object", ref)
	return ref, nil
}

// finalize deletes the children Kubernetes will not garbage-collect for a
// parent that is being deleted, then releases the parent.
func (r *Reconciler) finalize(ctx context.Context, rule *rules.Rule, mapping mapper.Mapping, parent *unstructured.Unstructured, observed []*unstructured.Unstructured) (Result, error) {
	if !slices.Contains(parent.GetFinalizers(), Finalizer) {
		return Result{}, nil // owner references do the rest
	}
	var errs []error
	remaining := 0
	for _, obj := range observed {
		if hasOwner(obj, parent.GetUID()) {
			continue // the garbage collector's job
		}
		remaining++
		if _, err := r.prune(ctx, parent, obj); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Result{}, err
	}
	if remaining > 0 {
		// Wait for the deletions to show in the cache; their events
		// requeue the parent.
		return Result{}, nil
	}
	return Result{}, r.setFinalizer(ctx, mapping, parent, false)
}

func hasOwner(obj *unstructured.Unstructured, uid types.UID) bool {
	for _, o := range obj.GetOwnerReferences() {
		if o.UID == uid {
			return true
		}
	}
	return false
}

// setFinalizer adds or removes kgen's finalizer on the parent with
// server-side apply, so other finalizers are never touched.
func (r *Reconciler) setFinalizer(ctx context.Context, mapping mapper.Mapping, parent *unstructured.Unstructured, want bool) error {
	if slices.Contains(parent.GetFinalizers(), Finalizer) == want {
		return nil
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
		metav1.ApplyOptions{FieldManager: FieldManager + "-finalizer", Force: true})
	if apierrors.IsNotFound(err) && !want {
		return nil
	}
	if err != nil {
		return fmt.Errorf("set finalizer on %s: %w", describeObject(mapping, parent), err)
	}
	// Until the cache shows it, the next reconcile must not patch again.
	r.recent.remember(updated)
	return nil
}

// readiness computes the parent's Ready condition.
func (r *Reconciler) readiness(rule *rules.Rule, parent *unstructured.Unstructured, rendered *Rendered, outcomes []childOutcome, live map[string]*unstructured.Unstructured) metav1.Condition {
	// Failures first, in child order: they are what needs attention.
	for _, reason := range []string{ReasonForbidden, ReasonInvalid, ReasonConflict, ReasonApplyFailed} {
		for _, o := range outcomes {
			if o.reason == reason {
				return readyCondition(reason, o.msg)
			}
		}
	}
	for _, c := range rule.Order() {
		if why, ok := rendered.Waiting[c.ID]; ok {
			return readyCondition(ReasonWaiting, fmt.Sprintf("child %s is %s", c.ID, why))
		}
	}
	for _, o := range outcomes {
		ok, msg, err := Ready(rule, Child{ID: o.id}, parent, o.live, Observed{Children: GroupChildren(rule, slices.Collect(maps.Values(live)))})
		if err != nil {
			return readyCondition(ReasonInvalid, err.Error())
		}
		if !ok {
			return readyCondition(ReasonNotReady, fmt.Sprintf("child %s: %s", o.id, msg))
		}
	}
	return metav1.Condition{Type: ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonReady, Message: "all children are applied and ready"}
}

func readyCondition(reason, msg string) metav1.Condition {
	return metav1.Condition{Type: ConditionReady, Status: metav1.ConditionFalse, Reason: reason, Message: msg}
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
