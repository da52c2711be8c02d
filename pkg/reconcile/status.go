package reconcile

import (
	"context"
	"crypto/sha256"
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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"kgen.dev/kgen/pkg/kinds"
	"kgen.dev/kgen/pkg/mapper"
	kschema "kgen.dev/kgen/pkg/schema"
	"kgen.dev/kgen/rules"
)

// Reasons of the Warning events kgen records when it stops writing a
// parent's status for a while.
const (
	// ReasonStatusContended: another writer keeps changing kgen's Ready
	// condition or observedGeneration (a parent kind with a controller of
	// its own).
	ReasonStatusContended = "StatusContended"
	// ReasonStatusLoop: kgen rewrote the status many times while nothing it
	// is computed from changed (a rule whose status reads the status).
	ReasonStatusLoop = "StatusLoop"
	// ReasonStatusFailed: the API server refused the status write, and
	// the Ready condition could not say so (its parent's stored object
	// no longer fits its CRD's schema, say); kgen retries with backoff.
	ReasonStatusFailed = "StatusWriteFailed"
)

// Limits of the status guard.
const (
	// contendedAfter overwrites of kgen's status by another writer within
	// contendedWindow start a backoff.
	contendedAfter  = 3
	contendedWindow = 5 * time.Minute
	// loopAfter status writes within loopWindow, with nothing they are
	// computed from changed, start a backoff (contract: more than 10 in a
	// minute).
	loopAfter  = 10
	loopWindow = time.Minute
	// After more than followAfter status writes within followWindow, each caused by
	// a change of what the status is computed from (a status field that
	// reads a child's status, whose writer changes it many times a
	// second), the next writes of that parent's status come at least
	// followSpacing apart: the status still follows, with its last value
	// at most followSpacing late, instead of one write per change of the
	// child. A write for a new generation of the parent, or that changes
	// the Ready condition's status or reason, is never held: only the
	// values in between (status fields, Ready's message) are.
	followAfter   = 10
	followWindow  = time.Minute
	followSpacing = 5 * time.Second
	// Backoffs start at minBackoff and double, up to maxBackoff, while the
	// cause persists.
	minBackoff = time.Minute
	maxBackoff = 16 * time.Minute
)

// ReportWaiting writes a parent's Ready condition False, with reason and
// msg, for a parent whose rule cannot run (a kind it uses is not served,
// say): its children are not reconciled meanwhile, and Ready must not say
// they are. The rule's status fields keep their values; nothing is written
// when the status says so already, and the status guard holds as for any
// status write.
func (r *Reconciler) ReportWaiting(ctx context.Context, rule *rules.Rule, mapping mapper.Mapping, parent *unstructured.Unstructured, reason, msg string) (Result, error) {
	ready := metav1.Condition{Type: ConditionReady, Status: metav1.ConditionFalse, Reason: reason, Message: msg}
	return r.writeStatus(ctx, rule, mapping, parent, nil, ready, nil)
}

// writeStatus writes the parent's status when it differs from what is
// there: status.observedGeneration, the single condition of type Ready,
// and the rule's status fields; nothing else. Other conditions, written by
// other controllers, are neither rewritten nor co-owned: where the parent's
// schema keys its conditions by type (x-kubernetes-list-type: map), kgen
// applies only its Ready condition with server-side apply; otherwise it
// sends a JSON patch that replaces only that condition, guarded by the
// resourceVersion it read, so it never writes back a stale copy.
//
// A parent kind without a status subresource gets no status, and neither
// does a built-in kind: its status has a fixed schema (no Ready condition of
// kgen's) and belongs to Kubernetes' own controllers.
//
// fields nil means the rule's fields could not be computed: the values
// there are kept. children are the parent's children as observed, part of
// what the status is computed from (see statusGuard).
func (r *Reconciler) writeStatus(ctx context.Context, rule *rules.Rule, mapping mapper.Mapping, parent *unstructured.Unstructured, fields map[string]any, ready metav1.Condition, children []*unstructured.Unstructured) (Result, error) {
	if !mapping.HasSubresource("status") {
		return Result{}, nil
	}
	if _, builtin := kinds.Builtin(parent.GroupVersionKind().GroupKind()); builtin {
		return Result{}, nil
	}
	current, _, _ := unstructured.NestedMap(parent.Object, "status")
	if fields == nil {
		fields = map[string]any{}
		for _, f := range rule.Status {
			if v, ok := current[f.Name]; ok {
				fields[f.Name] = v
			}
		}
	}
	gen := parent.GetGeneration()
	currentReady, index := findCondition(current)
	keyed := keyedConditions(r.kind(parent.GroupVersionKind()))
	stale := staleStatusFields(parent, current, rule, keyed)
	ready = stamp(ready, currentReady, gen, r.cfg.Now())
	want := statusOf(conditionMap(ready), gen, fields)
	have := statusOf(currentReady, observedGeneration(current), current)
	if sameStatus(want, have) && len(stale) == 0 {
		return Result{}, nil
	}

	inputs := statusInputs(rule, parent, children)
	cause := statusInputs(rule, parent, nil)
	urgent := want.generation != have.generation || have.ready == nil ||
		!scalarEqual(want.ready["status"], have.ready["status"]) || !scalarEqual(want.ready["reason"], have.ready["reason"])
	allowed, wait, reason := r.status.check(parent.GetUID(), want.digest(), have.digest(), inputs, cause, urgent)
	if reason != "" {
		msg := map[string]string{
			ReasonStatusContended: "another writer keeps changing the Ready condition or observedGeneration that kgen writes; kgen stops writing the status for %s",
			ReasonStatusLoop:      "kgen rewrote the status more than %d times in a minute while the parent's spec, its children and the rule stayed the same; kgen stops writing it for %s",
		}[reason]
		if reason == ReasonStatusLoop {
			msg = fmt.Sprintf(msg, loopAfter, wait.Round(time.Second))
		} else {
			msg = fmt.Sprintf(msg, wait.Round(time.Second))
		}
		r.cfg.Recorder.Event(parent, corev1.EventTypeWarning, reason, msg)
		klog.FromContext(ctx).Info("Backing off writing the parent's status", "reason", reason, "for", wait.Round(time.Second))
		if r.cfg.Observer != nil {
			r.cfg.Observer.StatusBackoff(rule.Name, reason)
		}
	}
	if !allowed {
		return Result{RequeueAfter: wait}, nil
	}

	updated, err := r.sendStatus(ctx, mapping, parent, keyed, current, index, want, ready, fields, stale)
	refused := ""
	if err != nil && len(fields) > 0 {
		refused = refusedStatus(err)
	}
	if refused != "" {
		// The rule's status fields do not fit the parent's schema (it
		// changed since the rule was checked against it, or was not
		// known then): no write with them can succeed, and the parent
		// must not keep a Ready condition it no longer earns. Write Ready
		// False, keeping its cause and adding the refusal, with the
		// fields the server did not name (none, if it named none of
		// them), and retry the whole status with backoff, since a change
		// of the schema or the rule mends it.
		fallback, kept := refusedFallback(ready, fields, refused, refusedFields(err))
		fallback = stamp(fallback, currentReady, gen, r.cfg.Now())
		only := statusOf(conditionMap(fallback), gen, kept)
		if !sameStatus(only, have) || len(stale) > 0 {
			var fallbackErr error
			if updated, fallbackErr = r.sendStatus(ctx, mapping, parent, keyed, current, index, only, fallback, kept, stale); fallbackErr != nil {
				return Result{}, r.statusFailed(mapping, parent, errors.Join(err, fallbackErr))
			}
			r.status.wrote(parent.GetUID(), only.digest(), inputs)
			r.cfg.Writes.Wrote(mapping.GroupVersionResource(), updated)
		}
		r.status.refused(parent.GetUID(), want.digest())
		return Result{}, fmt.Errorf("write status of %s (kgen wrote its Ready condition False, and only the status fields that fit, as the rule's status fields do not fit the parent's schema): %w", describeObject(mapping, parent), err)
	}
	if err != nil {
		if (apierrors.IsConflict(err) || apierrors.IsInvalid(err)) && !keyed {
			// The JSON patch's tests failed: the parent changed since it
			// was cached. Its event brings the change, and another
			// reconcile.
			return Result{RequeueAfter: time.Second}, nil
		}
		return Result{}, r.statusFailed(mapping, parent, err)
	}
	r.status.wrote(parent.GetUID(), want.digest(), inputs)
	r.cfg.Writes.Wrote(mapping.GroupVersionResource(), updated)
	return Result{}, nil
}

// statusFailed reports a status write the API server refused: the
// parent's Ready condition cannot say so, so a Warning event does (the
// recorder counts repeats of one message in one event). Not a race the
// next reconcile settles: the parent deleted, or replaced, meanwhile.
func (r *Reconciler) statusFailed(mapping mapper.Mapping, parent *unstructured.Unstructured, err error) error {
	err = fmt.Errorf("write status of %s: %w", describeObject(mapping, parent), err)
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return err
	}
	r.cfg.Recorder.Event(parent, corev1.EventTypeWarning, ReasonStatusFailed, "kgen cannot write this object's status, so its Ready condition may be out of date; it retries with backoff: "+err.Error())
	return err
}

// maxConditionMessage is metav1.Condition's limit on a message, and
// messageCut what ends one cut to it.
const (
	maxConditionMessage = 32768
	messageCut          = "… (cut)"
)

// stamp completes a Ready condition about to be written: the parent's
// generation, and the time of its last transition, which stays that of
// the parent's current Ready condition while the status is unchanged.
func stamp(ready metav1.Condition, currentReady map[string]any, gen int64, now time.Time) metav1.Condition {
	ready.ObservedGeneration = gen
	if len(ready.Message) > maxConditionMessage {
		// metav1.Condition's limit, which CRDs declare (kgenctl crd's
		// too): past it the API server refuses the whole status.
		cut := strings.ToValidUTF8(ready.Message[:maxConditionMessage-len(messageCut)], "")
		ready.Message = cut + messageCut
	}
	ready.LastTransitionTime = metav1.NewTime(now.Truncate(time.Second))
	if currentReady != nil && currentReady["status"] == string(ready.Status) {
		// metav1.Condition: the time changes only on a transition.
		if t, ok := currentReady["lastTransitionTime"].(string); ok {
			if parsed, err := parseTime(t); err == nil {
				ready.LastTransitionTime = parsed
			}
		}
	}
	return ready
}

// sendStatus writes want (the Ready condition ready, generation and
// fields) to the parent's status: by server-side apply of kgen's part
// where its conditions are keyed by type (the apply drops a field kgen
// alone set that it no longer sets), and else by a JSON patch, which also
// removes the stale fields (see staleStatusFields).
func (r *Reconciler) sendStatus(ctx context.Context, mapping mapper.Mapping, parent *unstructured.Unstructured, keyed bool, current map[string]any, index int, want parentStatus, ready metav1.Condition, fields map[string]any, stale []string) (*unstructured.Unstructured, error) {
	client := r.resource(mapping, parent.GetNamespace())
	if keyed {
		patch := &unstructured.Unstructured{Object: map[string]any{"status": want.applyConfiguration()}}
		patch.SetAPIVersion(parent.GetAPIVersion())
		patch.SetKind(parent.GetKind())
		patch.SetName(parent.GetName())
		patch.SetNamespace(parent.GetNamespace())
		patch.SetUID(parent.GetUID())
		return client.ApplyStatus(ctx, parent.GetName(), patch, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
	}
	body, err := json.Marshal(jsonPatch(parent, current, index, ready, parent.GetGeneration(), fields, stale))
	if err != nil {
		return nil, err
	}
	return client.Patch(ctx, parent.GetName(), types.JSONPatchType, body, metav1.PatchOptions{FieldManager: FieldManager}, "status")
}

// typedPatchError is how the API server refuses a server-side apply that
// does not fit the schema: "failed to create typed patch object (GVK
// namespace/name): .status.mode: field not declared in schema".
var typedPatchError = regexp.MustCompile(`(?s)failed to create typed patch object \([^)]*\): (.*)$`)

// refusedStatus returns what the API server said when it refused a status
// write because a value does not fit the parent's schema: a server-side
// apply it could not type (a field the schema does not declare, a value of
// another type), or a validation failure that names status fields (422
// with its causes). "" for every other error, among them a JSON patch
// whose tests failed (422 naming no field).
func refusedStatus(err error) string {
	var api apierrors.APIStatus
	if !errors.As(err, &api) {
		return ""
	}
	s := api.Status()
	if m := typedPatchError.FindStringSubmatch(s.Message); m != nil {
		return strings.TrimPrefix(strings.TrimSpace(m[1]), ".")
	}
	if s.Reason != metav1.StatusReasonInvalid || s.Details == nil {
		return ""
	}
	var msgs []string
	for _, c := range s.Details.Causes {
		if c.Field == "status" || strings.HasPrefix(c.Field, "status.") {
			msgs = append(msgs, c.Field+": "+c.Message)
		}
	}
	return strings.Join(msgs, "; ")
}

// refusedFields returns the top-level status fields the API server named
// when it refused a status write (refusedStatus): from the causes of a 422
// ("status.mode"), or from the message of a server-side apply it could not
// type (".status.mode: field not declared in schema"). None when it named
// none.
func refusedFields(err error) []string {
	var api apierrors.APIStatus
	if !errors.As(err, &api) {
		return nil
	}
	var paths []string
	s := api.Status()
	if m := typedPatchError.FindStringSubmatch(s.Message); m != nil {
		for _, part := range strings.Split(m[1], "\n") {
			if path, _, ok := strings.Cut(strings.TrimSpace(part), ":"); ok {
				paths = append(paths, strings.TrimPrefix(path, "."))
			}
		}
	}
	if s.Details != nil {
		for _, c := range s.Details.Causes {
			paths = append(paths, c.Field)
		}
	}
	var out []string
	for _, p := range paths {
		rest, ok := strings.CutPrefix(p, "status.")
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(rest, ".")
		name, _, _ = strings.Cut(name, "[")
		if name != "" && name != "conditions" && name != "observedGeneration" && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// refusedFallback returns what kgen writes when the server refused the
// rule's status fields (refused, as refusedStatus says it): a Ready
// condition False that keeps the cause of ready when it was False (a child
// that failed, a render error) and adds the refusal, and the fields the
// server did not name. When it named none of the fields kgen wrote, no
// field is kept: any of them may be the one.
func refusedFallback(ready metav1.Condition, fields map[string]any, refused string, named []string) (metav1.Condition, map[string]any) {
	kept := map[string]any{}
	if slices.ContainsFunc(named, func(n string) bool { _, ok := fields[n]; return ok }) {
		for k, v := range fields {
			if !slices.Contains(named, k) {
				kept[k] = v
			}
		}
	}
	what := "the rule's status fields do not fit the parent's schema, so kgen writes only those that do: " + refused
	if len(kept) == 0 {
		what = "the rule's status fields do not fit the parent's schema, so kgen writes none: " + refused
	}
	if ready.Status == metav1.ConditionTrue {
		return readyCondition(ReasonInvalid, what), kept
	}
	out := readyCondition(ready.Reason, ready.Message+"; and "+what)
	return out, kept
}

// keyedConditions reports whether a kind's status.conditions is a list
// keyed by type, so that applying one condition leaves the others alone.
func keyedConditions(kind *kschema.Field) bool {
	listType, keys := kind.Property("status").Property("conditions").Keys()
	return listType == kschema.ListMap && slices.Equal(keys, []string{"type"})
}

// parentStatus is the part of a parent's status kgen writes.
type parentStatus struct {
	ready      map[string]any // nil when absent
	generation int64
	fields     map[string]any
}

func statusOf(ready map[string]any, generation int64, fields map[string]any) parentStatus {
	own := map[string]any{}
	for k, v := range fields {
		if k != "conditions" && k != "observedGeneration" {
			own[k] = v
		}
	}
	return parentStatus{ready: ready, generation: generation, fields: own}
}

// sameStatus reports whether have already holds everything want sets.
func sameStatus(want, have parentStatus) bool {
	if want.generation != have.generation || have.ready == nil {
		return false
	}
	for _, k := range []string{"type", "status", "reason", "message", "observedGeneration"} {
		if !scalarEqual(want.ready[k], have.ready[k]) {
			return false
		}
	}
	return Matches(want.fields, have.fields, nil)
}

// digest fingerprints what kgen writes, without the transition time.
func (s parentStatus) digest() Digest {
	ready := map[string]any{}
	for k, v := range s.ready {
		if k != "lastTransitionTime" {
			ready[k] = v
		}
	}
	b, _ := json.Marshal([]any{ready, s.generation}) // JSON values: no error
	sum := sha256.Sum256(b)
	return Digest(sum[:16])
}

func (s parentStatus) applyConfiguration() map[string]any {
	out := map[string]any{}
	for k, v := range s.fields {
		out[k] = v
	}
	out["observedGeneration"] = s.generation
	out["conditions"] = []any{s.ready}
	return out
}

// jsonPatch returns the JSON patch that writes kgen's part of the status of
// a parent whose conditions are not keyed, and removes the stale fields: it
// tests the resourceVersion it read and the type of the condition it
// replaces, so it fails rather than write over a change it has not seen.
func jsonPatch(parent *unstructured.Unstructured, current map[string]any, index int, ready metav1.Condition, gen int64, fields map[string]any, stale []string) []map[string]any {
	ops := []map[string]any{{"op": "test", "path": "/metadata/resourceVersion", "value": parent.GetResourceVersion()}}
	cond := conditionMap(ready)
	switch {
	case current == nil:
		ops = append(ops, map[string]any{"op": "add", "path": "/status", "value": map[string]any{"conditions": []any{cond}}})
	case index >= 0:
		path := fmt.Sprintf("/status/conditions/%d", index)
		ops = append(ops,
			map[string]any{"op": "test", "path": path + "/type", "value": ConditionReady},
			map[string]any{"op": "replace", "path": path, "value": cond})
	case current["conditions"] != nil:
		ops = append(ops, map[string]any{"op": "add", "path": "/status/conditions/-", "value": cond})
	default:
		ops = append(ops, map[string]any{"op": "add", "path": "/status/conditions", "value": []any{cond}})
	}
	ops = append(ops, map[string]any{"op": "add", "path": "/status/observedGeneration", "value": gen})
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		ops = append(ops, map[string]any{"op": "add", "path": "/status/" + escapePointer(k), "value": fields[k]})
	}
	for _, k := range stale {
		ops = append(ops, map[string]any{"op": "remove", "path": "/status/" + escapePointer(k)})
	}
	return ops
}

// staleStatusFields returns the top-level status fields that kgen's status
// writes set on the parent and that the rule no longer has (a field it has
// but could not compute this time is not stale). kgen's entries of the
// parent's managed fields tell what it set (the caches keep them; see
// watch.LegacyManager): for keyed conditions its Apply entry, since its
// server-side apply removes only what that entry owns; otherwise any of
// its status entries, since its JSON patch removes any field. Only fields
// the parent has are returned, so a removal never fails on a field that is
// gone. A field another writer changed since is theirs (the API server
// moved it to their entry), and is never returned.
func staleStatusFields(parent *unstructured.Unstructured, current map[string]any, rule *rules.Rule, keyed bool) []string {
	md, _ := parent.Object["metadata"].(map[string]any)
	entries, _ := md["managedFields"].([]any)
	var stale []string
	for _, e := range entries {
		m, ok := e.(map[string]any)
		if !ok || m["manager"] != FieldManager || m["subresource"] != "status" ||
			keyed && m["operation"] != string(metav1.ManagedFieldsOperationApply) {
			continue
		}
		f1, _ := m["fieldsV1"].(map[string]any)
		owned, _ := f1["f:status"].(map[string]any)
		for k := range owned {
			name, ok := strings.CutPrefix(k, "f:")
			if !ok || name == "conditions" || name == "observedGeneration" {
				continue
			}
			if slices.ContainsFunc(rule.Status, func(f *rules.StatusField) bool { return f.Name == name }) {
				continue
			}
			if _, there := current[name]; there && !slices.Contains(stale, name) {
				stale = append(stale, name)
			}
		}
	}
	slices.Sort(stale)
	return stale
}

// escapePointer escapes a key for a JSON pointer (RFC 6901).
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// findCondition returns the Ready condition of a status and its index.
func findCondition(status map[string]any) (map[string]any, int) {
	list, _ := status["conditions"].([]any)
	for i, c := range list {
		if m, ok := c.(map[string]any); ok && m["type"] == ConditionReady {
			return m, i
		}
	}
	return nil, -1
}

func observedGeneration(status map[string]any) int64 {
	f, _ := number(status["observedGeneration"])
	return int64(f)
}

func conditionMap(c metav1.Condition) map[string]any {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&c)
	if err != nil { // a metav1.Condition always converts
		panic(err)
	}
	return m
}

func parseTime(s string) (metav1.Time, error) {
	var t metav1.Time
	err := json.Unmarshal([]byte(`"`+s+`"`), &t)
	return t, err
}

// statusInputs fingerprints what a parent's status is computed from: the
// rule, the parent's spec (its generation), labels and annotations, and its
// children's versions. Not the parent's status, resourceVersion or managed
// fields: a status that changes while these stay the same is a loop. A
// parent of a kind with no generation (a ConfigMap or Secret: the API
// server sets none on core kinds) stands for its content, but for its
// metadata and status, instead (a review: edits of a ConfigMap parent's
// data counted as a loop).
func statusInputs(rule *rules.Rule, parent *unstructured.Unstructured, children []*unstructured.Unstructured) Digest {
	h := sha256.New()
	fmt.Fprintf(h, "%p/%s/%d\n", rule, rule.Name, parent.GetGeneration())
	b, _ := json.Marshal([]any{parent.GetLabels(), parent.GetAnnotations()})
	h.Write(b)
	if parent.GetGeneration() == 0 {
		content := make(map[string]any, len(parent.Object))
		for k, v := range parent.Object {
			if k != "metadata" && k != "status" {
				content[k] = v
			}
		}
		b, _ := json.Marshal(content)
		h.Write(b)
	}
	versions := make([]string, 0, len(children))
	for _, c := range children {
		versions = append(versions, string(c.GetUID())+"="+c.GetResourceVersion())
	}
	slices.Sort(versions)
	fmt.Fprintln(h, strings.Join(versions, ","))
	var d Digest
	copy(d[:], h.Sum(nil))
	return d
}

// statusGuard keeps kgen from fighting another writer of a parent's status,
// and from a status that triggers its own rewrite: it remembers, per
// parent, what kgen last wrote and when, and stops status writes for a
// growing while when either pattern shows.
type statusGuard struct {
	now     func() time.Time
	mu      sync.Mutex
	parents map[types.UID]*statusHistory
}

type statusHistory struct {
	written    Digest    // what kgen last wrote
	refusal    Digest    // what the API server last refused (see refused)
	inputs     Digest    // what it was computed from
	at         time.Time // when
	loops      []time.Time
	follows    []time.Time // writes that followed a change of the inputs
	overwrites []time.Time
	// loopInputs, while a StatusLoop backoff runs, is the rule and the
	// parent the looping status was computed from: a change of them (the
	// rule fixed, the parent's spec changed) ends the backoff. Not of its
	// children: one that another controller keeps changing would end
	// every backoff of a real loop.
	loopInputs Digest
	looping    bool
	backoffSpan
}

func newStatusGuard(now func() time.Time) *statusGuard {
	return &statusGuard{now: now, parents: map[types.UID]*statusHistory{}}
}

// check tells whether kgen may write a parent's status now (want, where the
// parent has have and it was computed from inputs, of which cause is the
// rule and the parent alone; urgent when want records
// a generation of the parent that have does not, or turns Ready's status or
// reason), and else how long to wait. reason is set when this check starts
// a backoff.
func (g *statusGuard) check(uid types.UID, want, have, inputs, cause Digest, urgent bool) (allowed bool, wait time.Duration, reason string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	h := g.parents[uid]
	if h == nil {
		return true, 0, ""
	}
	if now.Before(h.until) {
		if !h.looping || cause == h.loopInputs {
			return false, h.until.Sub(now), ""
		}
		// What the loop was computed from changed: a fixed rule, or a
		// parent changed, is written at once (a live audit: a rule
		// fixed during the backoff showed its old status for minutes).
		h.until, h.looping = now, false
	}
	switch {
	case want == h.refusal:
		// Trying again what the server refused, as the controller's
		// backoff says: a retry, not a loop.
	case want == h.written && have != h.written:
		// kgen would write again what it wrote, and someone else changed it.
		h.overwrites = append(recent(h.overwrites, now, contendedWindow), now)
		if len(h.overwrites) >= contendedAfter {
			h.overwrites = nil
			h.looping = false
			return false, h.start(now), ReasonStatusContended
		}
	case inputs == h.inputs:
		h.loops = append(recent(h.loops, now, loopWindow), now)
		if len(h.loops) > loopAfter {
			h.loops = nil
			h.loopInputs, h.looping = cause, true
			return false, h.start(now), ReasonStatusLoop
		}
	default:
		h.loops = nil
		h.follows = recent(h.follows, now, followWindow)
		if next := h.at.Add(followSpacing); !urgent && len(h.follows) > followAfter && now.Before(next) {
			// Not a failure: the status follows what it reads, only
			// less often than that changes.
			return false, next.Sub(now), ""
		}
	}
	return true, 0, ""
}

// wrote records a status write.
func (g *statusGuard) wrote(uid types.UID, written, inputs Digest) {
	g.mu.Lock()
	defer g.mu.Unlock()
	h := g.parents[uid]
	if h == nil {
		h = &statusHistory{}
		g.parents[uid] = h
	}
	now := g.now()
	if inputs != h.inputs {
		// A write that followed a change of what it is computed from
		// (see followAfter); one with nothing changed is check's loop.
		h.follows = append(recent(h.follows, now, followWindow), now)
	}
	h.written, h.inputs, h.at = written, inputs, now
	if written == h.refusal {
		h.refusal = Digest{}
	}
}

// refused records that the API server refused to write want, so that
// trying it again is not taken for a loop.
func (g *statusGuard) refused(uid types.UID, want Digest) {
	g.mu.Lock()
	defer g.mu.Unlock()
	h := g.parents[uid]
	if h == nil {
		h = &statusHistory{}
		g.parents[uid] = h
	}
	h.refusal, h.at = want, g.now()
}

// forget drops what is known of a parent that is going.
func (g *statusGuard) forget(uid types.UID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.parents, uid)
}

// sweep drops the histories of parents whose status kgen has not written
// for a while and that are not backing off.
func (g *statusGuard) sweep(olderThan time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	for uid, h := range g.parents {
		if now.Sub(h.at) > olderThan && now.After(h.until) {
			delete(g.parents, uid)
		}
	}
}

// recent returns the times within window before now.
func recent(times []time.Time, now time.Time, window time.Duration) []time.Time {
	out := times[:0]
	for _, t := range times {
		if now.Sub(t) < window {
			out = append(out, t)
		}
	}
	return out
}

// normalized remembers, per child, what the server made of the fields
// kgen's last write of a template set (see Project), so that a difference
// between template and live object that the server made is not written
// again.
type normalized struct {
	now     func() time.Time
	mu      sync.Mutex
	objects map[types.UID]normal
}

type normal struct {
	hash   string // the template hash written
	digest Digest
	used   time.Time
}

func newNormalized(now func() time.Time) *normalized {
	return &normalized{now: now, objects: map[types.UID]normal{}}
}

func (n *normalized) remember(uid types.UID, hash string, d Digest) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.objects[uid] = normal{hash: hash, digest: d, used: n.now()}
}

// same reports whether kgen's last write of the template with this hash
// left the child with this projection.
func (n *normalized) same(uid types.UID, hash string, d Digest) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	e, ok := n.objects[uid]
	if !ok || e.hash != hash || e.digest != d {
		return false
	}
	e.used = n.now()
	n.objects[uid] = e
	return true
}

// applied tells whether kgen's last write of an object applied the
// template of hash.
func (n *normalized) applied(uid types.UID, hash string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	e, ok := n.objects[uid]
	return ok && e.hash == hash
}

func (n *normalized) forget(uid types.UID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.objects, uid)
}

// sweep drops what was not used for a while (children deleted by others).
func (n *normalized) sweep(olderThan time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	for uid, e := range n.objects {
		if now.Sub(e.used) > olderThan {
			delete(n.objects, uid)
		}
	}
}

// Sweep drops what the Reconciler remembers of parents and children it has
// not looked at for a while; call it now and then (the controller does,
// hourly).
//
// What it remembers of a parent's children (see seenChildren) is not
// dropped by age, since a quiet parent needs it as much as a busy one:
// live, when not nil, tells which parents still exist, and the children
// of the others are forgotten.
func (r *Reconciler) Sweep(live func(types.UID) bool) {
	r.status.sweep(time.Hour)
	r.contend.sweep(time.Hour)
	r.normal.sweep(24 * time.Hour)
	if live != nil {
		r.seen.retain(live)
	}
}
