package explain

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"kgen.dev/kgen/pkg/kinds"
	"kgen.dev/kgen/pkg/mapper"
	"kgen.dev/kgen/pkg/reconcile"
	kschema "kgen.dev/kgen/pkg/schema"
	"kgen.dev/kgen/rules"
)

// Resources resolves kinds through discovery; *mapper.Mapper is one.
type Resources interface {
	// Resolve returns what a reference in any gvk-to-gvr form may mean,
	// the preferred first.
	Resolve(ref string) ([]mapper.Mapping, error)
	ResourceFor(gvk schema.GroupVersionKind) (mapper.Mapping, error)
}

// Config holds what Explain reads the cluster with. Client, Resources and
// Rules are required.
type Config struct {
	Client    dynamic.Interface
	Resources Resources
	// Schemas, when set, tells how kgen compares a kind's fields (keyed
	// lists, quantities); without it lists compare as atomic.
	Schemas reconcile.Schemas
	// Rules are the rules to find the parent's among (see LoadRules).
	Rules []*rules.Rule
}

// Ref names the parent to explain.
type Ref struct {
	// Kind is the parent's kind or resource in any form kgenctl
	// gvk-to-gvr takes: WebApp, webapps, example.com/v1alpha1/WebApp, ...
	Kind string
	// Namespace is the parent's namespace; ignored for a cluster-scoped
	// kind.
	Namespace string
	Name      string
}

// Report is what Explain found. It marshals to the JSON kgenctl explain -o
// json prints.
type Report struct {
	Parent Parent `json:"parent"`
	// Rule is the name of the rule that selects the parent.
	Rule string `json:"rule"`
	// Conditions are the parent's status.conditions, kgen's Ready and
	// those of others.
	Conditions []metav1.Condition `json:"conditions"`
	// Children are the rule's children for the parent, in the order kgen
	// applies them: one entry per object of a forEach child, one per
	// child that waits or is not wanted, and one per object kgen is about
	// to delete.
	Children []Child `json:"children"`
	// Events are the parent's Events, oldest first.
	Events []Event `json:"events"`
	// RenderError is why the rule cannot render the parent (an expression
	// that fails on its data, a namespace the rule does not allow); the
	// children are then the objects that exist, unjudged.
	RenderError string `json:"renderError,omitempty"`
	// Notes say what Explain could not read, and what it left out.
	Notes []string `json:"notes,omitempty"`
}

// JSON returns the report as kgenctl explain -o json prints it: indented,
// with <, > and & as they are.
func (r *Report) JSON() ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	err := enc.Encode(r)
	return b.Bytes(), err
}

// Parent identifies the parent.
type Parent struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	UID        string `json:"uid"`
	// Generation is metadata.generation; ObservedGeneration the
	// status.observedGeneration kgen wrote, 0 when it wrote none.
	Generation         int64 `json:"generation"`
	ObservedGeneration int64 `json:"observedGeneration"`
	// ObservedBy is the field manager that last wrote
	// status.observedGeneration when that is not kgen (another controller
	// of the parent's kind), as its managed fields tell.
	ObservedBy string `json:"observedBy,omitempty"`
}

// Actions: what kgen does next about a child.
const (
	ActionNone    = "none"    // up to date, or not wanted and gone
	ActionCreate  = "create"  // it does not exist
	ActionUpdate  = "update"  // rendered differently from what kgen last applied
	ActionRepair  = "repair"  // someone changed a field kgen manages
	ActionAdopt   = "adopt"   // an object marked as the child of a parent that is gone
	ActionBlocked = "blocked" // an object that is not kgen's stands where it should be
	ActionWait    = "wait"    // it reads a child that does not exist yet, or a missing input
	ActionDelete  = "delete"  // it exists and is no longer wanted
	ActionUnknown = "unknown" // the rule cannot render the parent (Report.RenderError)
)

// Child is one child object of the parent, or a child that has none.
type Child struct {
	// ID is the child's id in the rule.
	ID         string `json:"id"`
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace"`
	// Name is the object's name; empty for a child that waits and has no
	// object.
	Name string `json:"name"`
	// Exists tells whether the parent has this object.
	Exists bool `json:"exists"`
	// UpToDate tells whether it holds everything its template sets, as
	// kgen compares them; Differences are the field paths where it does
	// not.
	UpToDate    bool     `json:"upToDate"`
	Differences []string `json:"differences"`
	// Ready tells whether it passes its readyWhen. NotReady says why not
	// ("waiting for status.availableReplicas (not set yet)"), and
	// ReadyWhen is the readyWhen that fails, as written.
	Ready     bool   `json:"ready"`
	NotReady  string `json:"notReady,omitempty"`
	ReadyWhen string `json:"readyWhen,omitempty"`
	// WaitingOn are the ids of the children it reads that do not exist
	// yet, or whose field it reads is not set yet; DependsOn all the
	// children it reads.
	WaitingOn []string `json:"waitingOn"`
	DependsOn []string `json:"dependsOn,omitempty"`
	// Conflict says which object stands where it should be, and why kgen
	// leaves that object alone.
	Conflict string `json:"conflict,omitempty"`
	// Action is what kgen does next (ActionNone, ActionCreate, ...), and
	// Next says it in words.
	Action string `json:"action"`
	Next   string `json:"next,omitempty"`
	// Message sums the child up in a sentence: the conflict, or what kgen
	// does next, and why it is not ready.
	Message string `json:"message"`
}

// summarize sets Message.
func (c *Child) summarize() {
	c.Message = c.Next
	if c.Conflict != "" {
		c.Message = c.Conflict
	}
	if c.NotReady != "" {
		c.Message = join(c.Message, "not ready: "+c.NotReady)
	}
	if c.Message == "" && c.Ready {
		c.Message = "up to date and ready"
	}
}

// Event is one Event about the parent.
type Event struct {
	Type          string    `json:"type"`
	Reason        string    `json:"reason"`
	Message       string    `json:"message"`
	LastTimestamp time.Time `json:"lastTimestamp"`
	Count         int32     `json:"count"`
}

// ErrNoRule is matched by the error of a parent that no rule selects.
var ErrNoRule = errors.New("no rule selects it")

// Explain reads one parent and what its rule makes of it. It makes only
// get and list requests. An error says why there is no report: the kind is
// not served or is ambiguous, the parent does not exist, no rule selects
// it (ErrNoRule), or a read was refused (an API error, as the server sent
// it).
func Explain(ctx context.Context, cfg Config, ref Ref) (*Report, error) {
	mapping, err := parentMapping(cfg, ref.Kind)
	if err != nil {
		return nil, err
	}
	ns := ref.Namespace
	if !mapping.Namespaced {
		ns = ""
	}
	where := describe(mapping, ns, ref.Name)
	parent, err := resource(cfg.Client, mapping, ns).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", where, err)
	}
	rule, parent, err := selecting(ctx, cfg, mapping, parent, where)
	if err != nil {
		return nil, err
	}
	e := &explainer{cfg: cfg, rule: rule, parent: parent, scope: scoper{cfg.Resources, rule.Parent.GroupVersionKind}, report: &Report{
		Rule: rule.Name, Conditions: []metav1.Condition{}, Children: []Child{}, Events: []Event{},
	}}
	e.describeParent()
	if err := e.children(ctx); err != nil {
		return nil, err
	}
	e.events(ctx)
	return e.report, nil
}

// parentMapping resolves the parent's kind, preferring among several
// meanings the kind of a rule's parents.
func parentMapping(cfg Config, kind string) (mapper.Mapping, error) {
	found, err := cfg.Resources.Resolve(kind)
	if err != nil {
		return mapper.Mapping{}, err
	}
	for _, m := range found {
		for _, r := range cfg.Rules {
			if r.Parent.GroupVersionKind.GroupKind() == m.GroupVersionKind().GroupKind() {
				return m, nil
			}
		}
	}
	kinds := map[schema.GroupKind]bool{}
	var names []string
	for _, m := range found {
		if gk := m.GroupVersionKind().GroupKind(); !kinds[gk] {
			kinds[gk] = true
			names = append(names, gk.String())
		}
	}
	if len(kinds) > 1 {
		return mapper.Mapping{}, fmt.Errorf("%q is ambiguous: it may be %s; name the group, as in %s", kind, strings.Join(names, ", "), found[0].Resource+"."+found[0].Group)
	}
	return found[0], nil
}

// selecting returns the rule that selects the parent, and the parent at
// the version of the rule's parent kind.
func selecting(ctx context.Context, cfg Config, mapping mapper.Mapping, parent *unstructured.Unstructured, where string) (*rules.Rule, *unstructured.Unstructured, error) {
	gk := mapping.GroupVersionKind().GroupKind()
	var why []string
	for _, r := range cfg.Rules {
		gvk := r.Parent.GroupVersionKind
		if gvk.GroupKind() != gk {
			continue
		}
		obj := parent
		if gvk.Version != mapping.Version {
			m, err := cfg.Resources.ResourceFor(gvk)
			if err != nil {
				why = append(why, fmt.Sprintf("rule %s: %v", r.Name, err))
				continue
			}
			if obj, err = resource(cfg.Client, m, parent.GetNamespace()).Get(ctx, parent.GetName(), metav1.GetOptions{}); err != nil {
				return nil, nil, fmt.Errorf("get %s at %s: %w", where, gvk.GroupVersion(), err)
			}
		}
		if r.Selects(obj) {
			return r, obj, nil
		}
		why = append(why, "rule "+r.Name+" "+notSelected(r, obj))
	}
	if len(why) == 0 {
		var names []string
		for _, r := range cfg.Rules {
			names = append(names, fmt.Sprintf("%s (%s)", r.Name, r.Parent.GroupVersionKind.GroupKind()))
		}
		if len(names) == 0 {
			names = []string{"none"}
		}
		return nil, nil, fmt.Errorf("%w: %s: no rule has parent kind %s (the rules: %s)", ErrNoRule, where, gk, strings.Join(names, ", "))
	}
	return nil, nil, fmt.Errorf("%w: %s: %s", ErrNoRule, where, strings.Join(why, "; "))
}

// notSelected says why a rule of the parent's kind does not select it.
func notSelected(r *rules.Rule, obj *unstructured.Unstructured) string {
	if len(r.Parent.Namespaces) > 0 && !slices.Contains(r.Parent.Namespaces, obj.GetNamespace()) {
		return fmt.Sprintf("selects only namespaces %s", strings.Join(r.Parent.Namespaces, ", "))
	}
	have := labels.Set(obj.GetLabels()).String()
	if have == "" {
		have = "none"
	}
	return fmt.Sprintf("selects %s, and the object's labels are %s", metav1.FormatLabelSelector(r.Parent.LabelSelector), have)
}

// explainer builds one report.
type explainer struct {
	cfg    Config
	rule   *rules.Rule
	parent *unstructured.Unstructured
	scope  scoper
	report *Report
}

func (e *explainer) note(format string, args ...any) {
	e.report.Notes = append(e.report.Notes, fmt.Sprintf(format, args...))
}

// describeParent fills in the parent and its conditions.
func (e *explainer) describeParent() {
	p := e.parent
	observed, _, _ := unstructured.NestedInt64(p.Object, "status", "observedGeneration")
	e.report.Parent = Parent{APIVersion: p.GetAPIVersion(), Kind: p.GetKind(), Namespace: p.GetNamespace(), Name: p.GetName(),
		UID: string(p.GetUID()), Generation: p.GetGeneration(), ObservedGeneration: observed}
	// A built-in kind's status is its own controller's: kgen writes none,
	// so whoever wrote it is no news.
	_, builtin := kinds.Builtin(p.GroupVersionKind().GroupKind())
	if by := observedBy(p); observed > 0 && by != "" && !builtin {
		e.report.Parent.ObservedBy = by
		e.note("status.observedGeneration was last written by %s, not kgen: another writer changes the status kgen writes; when the events say StatusContended, kgen has stopped writing the parent's status for a while, and its Ready condition may be the other writer's", by)
	}
	if p.GetDeletionTimestamp() != nil {
		e.note("the parent is being deleted: kgen deletes the children that only its finalizer guards, then removes the finalizer; the garbage collector deletes the others")
	}
	conds, _, _ := unstructured.NestedSlice(p.Object, "status", "conditions")
	for _, c := range conds {
		b, err := json.Marshal(c)
		var cond metav1.Condition
		if err == nil && json.Unmarshal(b, &cond) == nil && cond.Type != "" {
			e.report.Conditions = append(e.report.Conditions, cond)
		}
	}
}

// observedBy returns the field manager that owns the parent's
// status.observedGeneration, by its managed fields, when kgen does not: ""
// when kgen owns it (alone or with others), or when no entry names it.
func observedBy(p *unstructured.Unstructured) string {
	by := ""
	for _, m := range p.GetManagedFields() {
		if m.Subresource != "status" || m.FieldsV1 == nil {
			continue
		}
		var set struct {
			Status map[string]json.RawMessage `json:"f:status"`
		}
		if json.Unmarshal(m.FieldsV1.Raw, &set) != nil {
			continue
		}
		if _, ok := set.Status["f:observedGeneration"]; !ok {
			continue
		}
		if m.Manager == reconcile.FieldManager {
			return ""
		}
		by = m.Manager
	}
	return by
}

// children reads the parent's children and inputs, and judges each child
// as the controller does.
func (e *explainer) children(ctx context.Context) error {
	placement, err := e.rule.Placement(e.scope)
	if err != nil {
		return fmt.Errorf("rule %s: %w", e.rule.Name, err)
	}
	observed, err := e.observed(ctx, placement)
	if err != nil {
		return err
	}
	inputs, err := e.inputs(ctx)
	var plan *reconcile.Plan
	if err == nil {
		plan, err = reconcile.MakePlan(e.rule, e.parent, observed, inputs, e.scope, e.judge)
	}
	if err != nil {
		if !errors.Is(err, reconcile.ErrInvalid) {
			return err
		}
		e.report.RenderError = err.Error()
		// In the rule's order; ids the rule no longer has last.
		order := func(obj *unstructured.Unstructured) int {
			i := slices.IndexFunc(e.rule.Order(), func(c *rules.Child) bool { return c.ID == obj.GetLabels()[reconcile.LabelChild] })
			if i < 0 {
				return len(e.rule.Children)
			}
			return i
		}
		slices.SortFunc(observed, func(a, b *unstructured.Unstructured) int {
			if x, y := order(a), order(b); x != y {
				return x - y
			}
			return strings.Compare(a.GetName(), b.GetName())
		})
		const next = "nothing, until the parent or the rule changes: the rule cannot render the parent (see the error)"
		for _, obj := range observed {
			ch := entry(obj.GetLabels()[reconcile.LabelChild], obj, ActionUnknown, next)
			ch.Exists = true
			e.report.Children = append(e.report.Children, ch)
		}
		// The rule's children of which no object exists: still the tree,
		// with what can be told without rendering.
		for i, c := range e.rule.Order() {
			if slices.ContainsFunc(observed, func(o *unstructured.Unstructured) bool { return o.GetLabels()[reconcile.LabelChild] == c.ID }) {
				continue
			}
			ch := Child{ID: c.ID, APIVersion: c.GroupVersionKind.GroupVersion().String(), Kind: c.GroupVersionKind.Kind,
				Differences: []string{}, WaitingOn: []string{}, DependsOn: c.DependsOn, Action: ActionUnknown, Next: next}
			at := slices.IndexFunc(e.report.Children, func(x Child) bool {
				return slices.IndexFunc(e.rule.Order(), func(r *rules.Child) bool { return r.ID == x.ID }) > i ||
					!slices.ContainsFunc(e.rule.Children, func(r *rules.Child) bool { return r.ID == x.ID })
			})
			if at < 0 {
				at = len(e.report.Children)
			}
			e.report.Children = slices.Insert(e.report.Children, at, ch)
		}
		e.summarize()
		return nil
	}
	live := slices.Clone(plan.Keep)
	steps := make([]Child, len(plan.Steps))
	readiness := make([]*unstructured.Unstructured, len(plan.Steps)) // the object to judge readiness of
	for i, step := range plan.Steps {
		steps[i], readiness[i] = e.step(ctx, step)
		if readiness[i] != nil {
			live = append(live, readiness[i])
		}
	}
	now := reconcile.Observed{Children: reconcile.GroupChildren(e.rule, live), Inputs: inputs}
	for i, step := range plan.Steps {
		if readiness[i] == nil {
			continue
		}
		r, err := reconcile.CheckReady(e.rule, step.Child, e.parent, readiness[i], now)
		if err != nil {
			r.Message = err.Error()
		}
		steps[i].Ready, steps[i].NotReady, steps[i].ReadyWhen = r.Ready, r.Message, r.ReadyWhen
	}

	excluded := map[string]bool{}
	for _, id := range plan.Rendered.Excluded {
		excluded[id] = true
	}
	for _, c := range e.rule.Order() {
		for i, step := range plan.Steps {
			if step.ID == c.ID {
				steps[i].DependsOn = c.DependsOn
				e.report.Children = append(e.report.Children, steps[i])
			}
		}
		if wait, ok := plan.Rendered.Waiting[c.ID]; ok {
			e.waiting(c, wait, plan, now)
		}
		if excluded[c.ID] && !slices.ContainsFunc(plan.Prunes, func(p reconcile.Prune) bool { return p.ID == c.ID }) {
			ch := Child{ID: c.ID, APIVersion: c.GroupVersionKind.GroupVersion().String(), Kind: c.GroupVersionKind.Kind,
				Differences: []string{}, WaitingOn: []string{}, DependsOn: c.DependsOn, Action: ActionNone}
			ch.Next = "nothing to do: it is not wanted (" + whyExcluded(c, excluded) + ")"
			e.report.Children = append(e.report.Children, ch)
		}
		// The controller deletes a superseded object only once every
		// object of its child was written: one that cannot be (an
		// object that is not kgen's stands at its name, or one being
		// deleted does) keeps it.
		held := heldBy(plan, steps, "written", func(step reconcile.Step) bool { return step.ID == c.ID })
		for _, old := range plan.Superseded[c.ID] {
			if held != "" {
				ch := entry(c.ID, old, ActionWait, "kgen keeps it until its replacement exists ("+held+")")
				ch.Exists = true
				e.report.Children = append(e.report.Children, ch)
				continue
			}
			why := "its forEach has no element for it any more"
			switch {
			case old.GroupVersionKind().GroupKind() != c.GroupVersionKind.GroupKind():
				why = "its kind is no longer the child's"
			case len(c.ForEach) == 0:
				why = "the child was renamed"
			}
			e.report.Children = append(e.report.Children, e.deleting(c.ID, old, why))
		}
		for _, p := range plan.Prunes {
			if p.ID == c.ID {
				e.report.Children = append(e.report.Children, e.deleting(p.ID, p.Object, p.Why))
			}
		}
	}
	for _, p := range plan.Prunes {
		if e.rule.Child(p.ID) != nil {
			continue
		}
		// As the controller does (reconcile.Prune.OfKind): kept while a
		// child of its kind cannot be created, as it may be that one's
		// old object.
		held := heldBy(plan, steps, "created", func(step reconcile.Step) bool {
			return p.OfKind && step.Live == nil && step.Object.GroupVersionKind().GroupKind() == p.Object.GroupVersionKind().GroupKind()
		})
		if held != "" {
			ch := entry(p.ID, p.Object, ActionWait, "kgen deletes it ("+p.Why+") once every "+p.Object.GetKind()+" the rule wants exists, as it may be a renamed child's old object ("+held+")")
			ch.Exists = true
			e.report.Children = append(e.report.Children, ch)
			continue
		}
		e.report.Children = append(e.report.Children, e.deleting(p.ID, p.Object, p.Why))
	}
	// The object of an id the rule no longer has, kept while a child of
	// its kind waits (it may be a renamed id's old object).
	for _, obj := range plan.Keep {
		if id := obj.GetLabels()[reconcile.LabelChild]; e.rule.Child(id) == nil {
			ch := entry(id, obj, ActionWait, fmt.Sprintf("kgen deletes it (the rule has no child %s any more) once every %s the rule wants exists: one waits to be rendered, and this may be a renamed child's old object", id, obj.GetKind()))
			ch.Exists = true
			e.report.Children = append(e.report.Children, ch)
		}
	}
	e.summarize()
	return nil
}

// heldBy says which of the plan's steps that match cannot be written
// (verb: "written", "created") and why, as the entries steps made of them
// say; "" when none. The controller keeps an object that such a step would
// replace.
func heldBy(plan *reconcile.Plan, steps []Child, verb string, match func(reconcile.Step) bool) string {
	held := ""
	for i, step := range plan.Steps {
		if !match(step) {
			continue
		}
		switch ch := steps[i]; ch.Action {
		case ActionBlocked:
			held = join(held, ch.Kind+" "+ch.Name+" cannot be "+verb+": "+ch.Conflict)
		case ActionWait:
			held = join(held, ch.Kind+" "+ch.Name+" cannot be "+verb+" yet: "+ch.Next)
		}
	}
	return held
}

func (e *explainer) summarize() {
	for i := range e.report.Children {
		e.report.Children[i].summarize()
	}
}

// judge compares as the Reconciler does, without its memory of what the
// server made of its last writes.
func (e *explainer) judge(desired, live *unstructured.Unstructured) reconcile.Op {
	switch {
	case reconcile.UpToDate(desired, live, e.kind(desired.GroupVersionKind())):
		return reconcile.OpKeep
	case desired.GetAnnotations()[reconcile.AnnotationTemplateHash] != live.GetAnnotations()[reconcile.AnnotationTemplateHash]:
		return reconcile.OpUpdate
	}
	return reconcile.OpRepair
}

func (e *explainer) kind(gvk schema.GroupVersionKind) *kschema.Field {
	if e.cfg.Schemas == nil {
		return nil
	}
	f, _ := e.cfg.Schemas.Kind(gvk)
	return f
}

// hashPath is where the template hash differs; Action says so instead.
var hashPath = "metadata.annotations[" + reconcile.AnnotationTemplateHash + "]"

// step describes a wanted child object, and returns the object whose
// readiness counts: the child, or nil when it does not exist.
func (e *explainer) step(ctx context.Context, step reconcile.Step) (Child, *unstructured.Unstructured) {
	desired := step.Object
	ch := entry(step.ID, desired, ActionNone, "")
	live, op := step.Live, step.Op
	if live == nil {
		found, claim, why, err := e.inTheWay(ctx, desired)
		switch {
		case errors.Is(err, mapper.ErrNotFound):
			ch.Action, ch.Next = ActionWait, fmt.Sprintf("kgen creates it once the API server serves %s %s: its rule waits for the kind (KindNotServed)", desired.GetAPIVersion(), desired.GetKind())
			return ch, nil
		case err != nil:
			ch.Action, ch.Next = ActionCreate, "kgen creates it (reading the object at its name failed: "+err.Error()+")"
			return ch, nil
		case found == nil && e.contended(step.ID):
			ch.Action, ch.Next = ActionWait, heldNext
			return ch, nil
		case found == nil:
			ch.Action, ch.Next = ActionCreate, "kgen creates it"
			return ch, nil
		case claim == reconcile.ClaimConflict:
			ch.Action, ch.Conflict = ActionBlocked, why+"; kgen leaves it untouched"
			return ch, nil
		case claim == reconcile.ClaimAdopt:
			live, op = found, reconcile.OpUpdate
			ch.Action, ch.Next = ActionAdopt, "kgen adopts the object at its name: it is marked as the child of a parent that no longer exists"
		case found.GetDeletionTimestamp() != nil:
			// Held by a finalizer; the controller writes nothing to it
			// (its Ready says why) and creates it again once it is gone.
			ch.Exists = true
			ch.Action, ch.Next = ActionWait, "kgen creates it again once the object being deleted is gone"
			return ch, found
		default:
			live = found // the cache of a controller would show it soon
			op = e.judge(desired, live)
			if e.rule.Child(step.ID).UpdatePolicy == rules.UpdateCreateOnly {
				op = reconcile.OpKeep
			}
		}
	}
	ch.Exists = true
	ch.UpToDate = op == reconcile.OpKeep
	if e.rule.Child(step.ID).UpdatePolicy == rules.UpdateCreateOnly {
		// kgen never writes its content again; only its marks follow
		// the rule (reconcile.OpMarks).
		ch.Differences = reconcile.MarksDiffer(desired, live)
		ch.UpToDate = len(ch.Differences) == 0
		if !ch.UpToDate && ch.Action != ActionAdopt {
			ch.Action, ch.Next = ActionUpdate, "kgen writes kgen's marks on it (its deletionPolicy, id or rule changed), never its content (updatePolicy CreateOnly)"
		}
		return ch, live
	}
	for _, d := range reconcile.Differences(desired.Object, live.Object, e.kind(desired.GroupVersionKind())) {
		if d != hashPath {
			ch.Differences = append(ch.Differences, d)
		}
	}
	// And what kgen set last time that the template no longer sets (a
	// removed key, a renamed container's old entry, a changed port's old
	// one): kgen's next apply removes them.
	for _, d := range reconcile.Removed(desired, live) {
		if !slices.Contains(ch.Differences, d) {
			ch.Differences = append(ch.Differences, d)
		}
	}
	slices.Sort(ch.Differences)
	switch {
	case ch.Action == ActionAdopt:
	case op == reconcile.OpUpdate:
		ch.Action, ch.Next = ActionUpdate, "kgen applies it: the template renders differently from what kgen last applied"
	case op == reconcile.OpRepair && e.contended(step.ID):
		ch.Action, ch.Next = ActionRepair, heldNext
	case op == reconcile.OpRepair:
		ch.Action, ch.Next = ActionRepair, "kgen sets it back: someone changed fields its template sets"
	}
	return ch, live
}

// heldNext is what kgen does next with a child whose repairs it holds off.
const heldNext = "kgen holds off setting it back for a while: another writer keeps undoing its repairs (the parent's Ready condition, " +
	reconcile.ReasonChildContended + ", says how long); it looks again when that ends"

// contended tells whether the parent's Ready condition says that kgen
// holds off repairing child id (reconcile.ReasonChildContended): only the
// running controller knows how long.
func (e *explainer) contended(id string) bool {
	conds, _, _ := unstructured.NestedSlice(e.parent.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == reconcile.ConditionReady && m["reason"] == reconcile.ReasonChildContended {
			msg, _ := m["message"].(string)
			return strings.HasPrefix(msg, "child "+id+":")
		}
	}
	return false
}

// inTheWay reads the object at a child's name, and judges it as the
// Reconciler does when its create fails because the name is taken.
func (e *explainer) inTheWay(ctx context.Context, desired *unstructured.Unstructured) (*unstructured.Unstructured, reconcile.Claim, string, error) {
	m, err := e.cfg.Resources.ResourceFor(desired.GroupVersionKind())
	if err != nil {
		return nil, 0, "", err
	}
	obj, err := resource(e.cfg.Client, m, desired.GetNamespace()).Get(ctx, desired.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, 0, "", nil
	}
	if err != nil {
		return nil, 0, "", err
	}
	claim, why := reconcile.Whose(ctx, e.cfg.Client, e.cfg.Resources, obj, e.parent)
	return obj, claim, why, nil
}

// waiting adds a child that is not rendered because it reads a child that
// does not exist yet, or a missing input: its objects that exist, or an
// entry without a name.
func (e *explainer) waiting(c *rules.Child, wait reconcile.Wait, plan *reconcile.Plan, now reconcile.Observed) {
	var waitingOn []string
	for _, dep := range c.DependsOn {
		_, depWaits := plan.Rendered.Waiting[dep]
		if len(now.Children[dep]) == 0 || depWaits || slices.ContainsFunc(plan.Steps, func(s reconcile.Step) bool { return s.ID == dep && s.Live == nil }) {
			waitingOn = append(waitingOn, dep)
		}
	}
	if wait.Child != "" && !slices.Contains(waitingOn, wait.Child) {
		// It exists, and a field of it this child reads is not set yet.
		waitingOn = append(waitingOn, wait.Child)
	}
	add := func(ch Child) {
		ch.WaitingOn, ch.DependsOn = append([]string{}, waitingOn...), c.DependsOn
		ch.Action, ch.Next = ActionWait, wait.Message
		e.report.Children = append(e.report.Children, ch)
	}
	kept := false
	for _, obj := range plan.Keep {
		if obj.GetLabels()[reconcile.LabelChild] == c.ID {
			ch := entry(c.ID, obj, ActionWait, "")
			ch.Exists = true
			add(ch)
			kept = true
		}
	}
	if !kept {
		add(Child{ID: c.ID, APIVersion: c.GroupVersionKind.GroupVersion().String(), Kind: c.GroupVersionKind.Kind, Differences: []string{}})
	}
}

// whyExcluded says why a child is not wanted.
func whyExcluded(c *rules.Child, excluded map[string]bool) string {
	for _, dep := range c.DependsOn {
		if excluded[dep] {
			return "it reads child " + dep + ", which is not wanted"
		}
	}
	if len(c.ForEach) > 0 {
		return "its includeWhen is false for every element, or its forEach has none"
	}
	return "its includeWhen is false"
}

// deleting describes an object kgen is about to delete, or let go of.
func (e *explainer) deleting(id string, obj *unstructured.Unstructured, why string) Child {
	ch := entry(id, obj, ActionDelete, "kgen deletes it: "+why)
	if obj.GetAnnotations()[reconcile.AnnotationDeletionPolicy] == string(rules.DeletionOrphan) {
		ch.Next = "kgen lets go of it (deletionPolicy Orphan): " + why
	}
	ch.Exists = true
	return ch
}

// entry starts the description of a child object.
func entry(id string, obj *unstructured.Unstructured, action, next string) Child {
	return Child{ID: id, APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(), Namespace: obj.GetNamespace(), Name: obj.GetName(),
		Differences: []string{}, WaitingOn: []string{}, Action: action, Next: next}
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// observed lists the parent's children: the objects of the rule's child
// kinds that carry its UID, where the rule's placement says they can be.
func (e *explainer) observed(ctx context.Context, placement *rules.Placement) ([]*unstructured.Unstructured, error) {
	selector := labels.Set{reconcile.LabelParentUID: string(e.parent.GetUID())}.String()
	type where struct {
		gvr       schema.GroupVersionResource
		namespace string
	}
	var out []*unstructured.Unstructured
	seen := map[where]bool{}
	for _, c := range e.rule.Children {
		m, err := e.cfg.Resources.ResourceFor(c.GroupVersionKind)
		if err != nil {
			e.note("child %s: %v", c.ID, err)
			continue
		}
		for _, ns := range e.childNamespaces(c, placement, m) {
			w := where{m.GroupVersionResource(), ns}
			if seen[w] {
				continue
			}
			seen[w] = true
			list, err := resource(e.cfg.Client, m, ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
			if err != nil {
				return nil, fmt.Errorf("list %s: %w", describe(m, ns, ""), err)
			}
			for i := range list.Items {
				out = append(out, &list.Items[i])
			}
		}
	}
	return out, nil
}

// childNamespaces are where a child of this parent can be: the parent's
// namespace when the template does not name one, else those the placement
// allows ("" for every namespace, or a cluster-scoped kind).
func (e *explainer) childNamespaces(c *rules.Child, placement *rules.Placement, m mapper.Mapping) []string {
	switch {
	case !m.Namespaced:
		return []string{""}
	case e.parent.GetNamespace() != "" && !c.Template.Sets("metadata", "namespace"):
		return []string{e.parent.GetNamespace()}
	}
	if cp := placement.Child(c.ID); cp != nil && cp.Namespaces != nil {
		return cp.Namespaces
	}
	return []string{metav1.NamespaceAll}
}

// inputs reads the rule's inputs for the parent, as the controller's
// caches hold them.
func (e *explainer) inputs(ctx context.Context) (map[string][]*unstructured.Unstructured, error) {
	if len(e.rule.Inputs) == 0 {
		return nil, nil
	}
	refs, err := e.rule.InputRefs(e.parent, e.scope)
	if err != nil {
		// The rule cannot render this parent, as the controller says.
		return nil, &reconcile.RenderError{Rule: e.rule.Name, Err: err}
	}
	out := map[string][]*unstructured.Unstructured{}
	for _, ref := range refs {
		m, err := e.cfg.Resources.ResourceFor(ref.GroupVersionKind)
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", ref.ID, err)
		}
		client := resource(e.cfg.Client, m, ref.Namespace)
		if ref.Name != "" {
			obj, err := client.Get(ctx, ref.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return nil, fmt.Errorf("input %s: get %s: %w", ref.ID, describe(m, ref.Namespace, ref.Name), err)
			default:
				out[ref.ID] = []*unstructured.Unstructured{obj}
			}
			continue
		}
		list, err := client.List(ctx, metav1.ListOptions{LabelSelector: ref.Selector.String()})
		if err != nil {
			return nil, fmt.Errorf("input %s: list %s: %w", ref.ID, describe(m, ref.Namespace, ""), err)
		}
		for i := range list.Items {
			out[ref.ID] = append(out[ref.ID], &list.Items[i])
		}
	}
	return out, nil
}

// eventsGVR is the resource of the Events kgen records.
var eventsGVR = schema.GroupVersionResource{Version: "v1", Resource: "events"}

// events reads the parent's Events, where kgen records them: in its
// namespace, or "default" for a cluster-scoped parent.
func (e *explainer) events(ctx context.Context) {
	ns := e.parent.GetNamespace()
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	uid := string(e.parent.GetUID())
	list, err := e.cfg.Client.Resource(eventsGVR).Namespace(ns).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.uid", uid).String(),
	})
	if err != nil {
		e.note("events: %v", err)
		return
	}
	for _, item := range list.Items {
		var ev corev1.Event
		if runtime.DefaultUnstructuredConverter.FromUnstructured(item.Object, &ev) != nil || string(ev.InvolvedObject.UID) != uid {
			continue
		}
		t := ev.LastTimestamp.Time
		switch {
		case !t.IsZero():
		case !ev.EventTime.IsZero():
			t = ev.EventTime.Time
		case !ev.FirstTimestamp.IsZero():
			t = ev.FirstTimestamp.Time
		default:
			t = ev.CreationTimestamp.Time
		}
		count := ev.Count
		if ev.Series != nil && ev.Series.Count > count {
			count = ev.Series.Count
		}
		e.report.Events = append(e.report.Events, Event{Type: ev.Type, Reason: ev.Reason, Message: ev.Message, LastTimestamp: t.UTC(), Count: max(count, 1)})
	}
	slices.SortStableFunc(e.report.Events, func(a, b Event) int { return a.LastTimestamp.Compare(b.LastTimestamp) })
}

// scoper answers scope questions from discovery, as kinds.Scoper. A kind
// the API server does not serve is taken as namespaced when parent is set:
// the rule waits for such a child kind (KindNotServed), no object of it
// exists, and the tree still shows its other children.
type scoper struct {
	r      Resources
	parent schema.GroupVersionKind
}

func (s scoper) Namespaced(gvk schema.GroupVersionKind) (bool, error) {
	m, err := s.r.ResourceFor(gvk)
	if errors.Is(err, mapper.ErrNotFound) && !s.parent.Empty() && gvk != s.parent {
		return true, nil
	}
	return m.Namespaced, err
}

var _ kinds.Scoper = scoper{}

func resource(client dynamic.Interface, m mapper.Mapping, namespace string) dynamic.ResourceInterface {
	res := client.Resource(m.GroupVersionResource())
	if m.Namespaced {
		return res.Namespace(namespace)
	}
	return res
}

// describe names objects as kubectl does: "webapps.example.com team-a/shop",
// "deployments.apps in team-a" for a list.
func describe(m mapper.Mapping, namespace, name string) string {
	res := m.Resource
	if m.Group != "" {
		res += "." + m.Group
	}
	switch {
	case name == "" && namespace != "":
		return res + " in " + namespace
	case name == "":
		return res
	case namespace != "":
		return res + " " + namespace + "/" + name
	}
	return res + " " + name
}
