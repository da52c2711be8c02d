package reconcile

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/validation/path"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"kgen.dev/kgen/pkg/kinds"
	"kgen.dev/kgen/rules"
)

// Observed is what Render knows of the cluster besides the parent: the
// children and the inputs as last seen.
type Observed struct {
	// Children maps a child id to its objects: at most one for an
	// ordinary child (more are ignored: see GroupChildren), any number for
	// a forEach child.
	Children map[string][]*unstructured.Unstructured
	// Inputs maps an input id to what the controller read for it (see
	// rules.Rule.InputRefs): the object of a named input (none when it does
	// not exist), the matching objects of a selector input.
	Inputs map[string][]*unstructured.Unstructured
}

// GroupChildren sorts a parent's observed children, by their
// kgen.dev/child label, into Observed.Children: every object of a forEach
// child; of any other child the oldest (a second object of one id is not
// this rule's to keep, and is pruned).
func GroupChildren(rule *rules.Rule, objs []*unstructured.Unstructured) map[string][]*unstructured.Unstructured {
	out := map[string][]*unstructured.Unstructured{}
	for _, obj := range objs {
		id := obj.GetLabels()[LabelChild]
		c := rule.Child(id)
		if c == nil {
			continue
		}
		if len(c.ForEach) > 0 {
			out[id] = append(out[id], obj)
			continue
		}
		if prev := out[id]; len(prev) == 0 || prev[0].GetCreationTimestamp().After(obj.GetCreationTimestamp().Time) {
			out[id] = []*unstructured.Unstructured{obj}
		}
	}
	return out
}

// Rendered is what a rule makes of one parent.
type Rendered struct {
	// Children are the included children whose dependencies exist, in
	// dependency order: apply them in this order. A forEach child has one
	// Child per object, in element order.
	Children []Child
	// Excluded are the ids of the children whose includeWhen is false (for
	// a forEach child: for every element), or that read a child that is
	// excluded, in dependency order. They must not exist: prune them.
	Excluded []string
	// Waiting maps the id of each child that is not rendered yet to why: a
	// child it reads does not exist yet, or a named input it reads is
	// missing. Such a child is neither applied nor pruned this time. Never
	// nil.
	Waiting map[string]Wait
	// Status holds the rule's status fields, evaluated. A field is left out
	// when it reads a child that does not exist (or is excluded) or a
	// missing input, when its expression cannot be evaluated yet (a field
	// of a child's status that is not set), or when it is an empty
	// optional. Nil when the rule has no status fields.
	Status map[string]any
	// StatusOmitted maps each status field left out of Status, except empty
	// optionals, to why. Never nil.
	StatusOmitted map[string]string
}

// ReasonInputMissing is the Ready reason of a parent whose child waits for
// a named input that does not exist.
const ReasonInputMissing = "InputMissing"

// Wait says why a child is not rendered yet.
type Wait struct {
	// Reason is the Ready condition's reason for it: ReasonWaiting (a
	// child it reads does not exist yet) or ReasonInputMissing.
	Reason string
	// Message says what it waits for: "waiting for child config".
	Message string
	// Field is set when it waits for a field of a child that exists, and
	// Child is that child's id: "children.deployment.status.availableReplicas"
	// and "deployment".
	Field, Child string
}

// String returns the message.
func (w Wait) String() string { return w.Message }

// Child is one desired child object.
type Child struct {
	// ID is the child's id in its rule.
	ID string
	// Index is the object's position among the objects of its forEach
	// child, in element order; 0 for an ordinary child.
	Index int
	// Each binds the forEach names to this object's element (as
	// rules.Child.Elements returns them); nil for an ordinary child. Pass
	// the Child to Ready, whose readyWhen may read them.
	Each map[string]any
	// Object is the desired object, with kgen's labels, annotation,
	// namespace and ownerReference filled in. It shares no memory with the
	// parent or the observed objects.
	Object *unstructured.Unstructured
	// OwnerReference is true when Object carries a controller
	// ownerReference to the parent. False means Kubernetes does not allow
	// one (a namespaced parent and a child in another namespace or
	// cluster-scoped), so kgen must delete the child itself (the parent's
	// finalizer).
	OwnerReference bool
}

// ChildKey identifies a desired or observed child object of a parent: its
// child id, namespace and name. Objects of a forEach child share the id and
// differ in name.
type ChildKey struct {
	ID, Namespace, Name string
}

// Key returns the child's identity.
func (c Child) Key() ChildKey {
	return ChildKey{ID: c.ID, Namespace: c.Object.GetNamespace(), Name: c.Object.GetName()}
}

// KeyOf returns the identity of an observed child, by its kgen.dev/child
// label.
func KeyOf(obj *unstructured.Unstructured) ChildKey {
	return ChildKey{ID: obj.GetLabels()[LabelChild], Namespace: obj.GetNamespace(), Name: obj.GetName()}
}

// ErrInvalid is matched, with errors.Is, by every error Render and Ready
// return because of the rule or the parent's data, rather than the
// environment: an expression that fails or goes over a limit, a missing
// field, a namespace the rule does not allow. Retrying does not help; a
// change to the parent or the rules does.
var ErrInvalid = errors.New("invalid rule or parent")

// RenderError is an error caused by the rule or the parent's data; it
// matches ErrInvalid. When it concerns one expression or field of the rules
// file, errors.As also finds the *rules.Error with its position, field and
// expression.
type RenderError struct {
	// Rule is the rule's name.
	Rule string
	// Child is the child id; empty for problems with the parent or a status
	// field.
	Child string
	// Source is where in the rules the child is (see ChildSource); empty
	// when unknown, or when Err says where.
	Source string
	// Err is the cause.
	Err error
}

// Error returns the cause, prefixed with the rule and child unless the cause
// already names them.
func (e *RenderError) Error() string {
	var re *rules.Error
	if errors.As(e.Err, &re) && re.Rule != "" {
		return e.Err.Error()
	}
	where := ""
	if e.Source != "" {
		where = e.Source + ": "
	}
	if e.Child != "" {
		return fmt.Sprintf("%srule %q: child %q: %v", where, e.Rule, e.Child, e.Err)
	}
	return fmt.Sprintf("%srule %q: %v", where, e.Rule, e.Err)
}

// ChildSource says where a child's entry is in the rules, for messages:
// file:line:column for a rules file, and for a Rule object its name and
// the entry's field path ("Rule/web spec.children[1]"), since the lines
// of the YAML kgen made of the object are not the user's. "" when the
// rule has no such child, or its position is unknown.
func ChildSource(rule *rules.Rule, id string) string {
	for i, c := range rule.Children {
		if c.ID != id {
			continue
		}
		if strings.HasPrefix(c.Pos.File, rules.ObjectFile("")) {
			return fmt.Sprintf("%s spec.children[%d]", c.Pos.File, i)
		}
		return c.Pos.String()
	}
	return ""
}

// renderError is a RenderError of a child of the rule, saying where the
// child is.
func renderError(rule *rules.Rule, id string, err error) *RenderError {
	return &RenderError{Rule: rule.Name, Child: id, Source: ChildSource(rule, id), Err: err}
}

// Unwrap returns the cause.
func (e *RenderError) Unwrap() error { return e.Err }

// Is reports that a RenderError is an ErrInvalid.
func (e *RenderError) Is(target error) bool { return target == ErrInvalid }

// Render computes the children a rule wants for a parent, as the controller
// will apply them, and the rule's status fields. It is a pure function of its
// arguments: it reads the parent and the observed objects and changes
// none. (A template of a CreateOnly child may call randomString, whose value
// differs at every call.)
//
// observed holds the children and inputs as last seen in the cluster. A
// child that reads children.<id> is rendered only once that child exists:
// for a forEach child, once every object it renders now is observed; for
// it, children.<id> is the list of those objects, in element order. A child
// or status field that reads a named input that is missing waits
// (ReasonInputMissing). scope tells the scope of the parent's and
// children's kinds.
//
// Two rendered objects that are one object (the same group, kind,
// namespace and name), of two child ids or of two elements of a forEach
// child, are an error: each would be written as the other's, forever.
//
// An error that comes from the rule or the parent is a *RenderError matching
// ErrInvalid; an error of the Scoper is returned wrapped as it is. Render
// stops at the first error.
func Render(rule *rules.Rule, parent *unstructured.Unstructured, observed Observed, scope Scoper) (*Rendered, error) {
	r := &renderer{rule: rule, parent: parent, scope: scope, observed: observed}
	if err := r.checkParent(); err != nil {
		return nil, err
	}
	r.present, r.exists = bindChildren(rule, observed)
	for _, c := range rule.Children {
		if len(c.ForEach) > 0 {
			r.exists[c.ID] = false // until its objects are rendered
		}
	}
	var inputs map[string]any
	inputs, r.missingInputs = bindInputs(rule, parent, observed)
	r.vars = rules.NewVars(parent.Object, r.present, nil).WithInputs(inputs)
	out := &Rendered{Waiting: map[string]Wait{}, StatusOmitted: map[string]string{}}
	excluded := map[string]bool{}
	objects := map[objectKey]Child{} // every rendered object, to find two of one
	for _, c := range rule.Order() {
		if dep := firstOf(c.DependsOn, excluded); dep != "" {
			excluded[c.ID] = true
			out.Excluded = append(out.Excluded, c.ID)
			continue
		}
		if missing := r.missingInput(c.Inputs); len(missing) > 0 {
			out.Waiting[c.ID] = Wait{Reason: ReasonInputMissing, Message: r.waitingForInputs(missing)}
			continue
		}
		var refs []string
		for _, cond := range c.IncludeWhen {
			refs = append(refs, cond.References...)
		}
		for _, f := range c.ForEach {
			refs = append(refs, f.Expr.References...)
		}
		if missing := r.missing(refs); len(missing) > 0 {
			out.Waiting[c.ID] = Wait{Reason: ReasonWaiting, Message: waitingFor(missing)}
			continue
		}
		elements := []map[string]any{nil}
		if len(c.ForEach) > 0 {
			var err error
			if elements, err = c.Elements(r.vars); err != nil {
				if w, ok := notSet(err); ok {
					out.Waiting[c.ID] = w
					continue
				}
				return nil, renderError(rule, c.ID, err)
			}
		}
		var included []map[string]any
		var waiting *Wait
		for _, each := range elements {
			include, err := r.included(c, each)
			if w, ok := notSet(err); ok {
				waiting = &w
				break
			}
			if err != nil {
				return nil, err
			}
			if include {
				included = append(included, each)
			}
		}
		if waiting != nil {
			out.Waiting[c.ID] = *waiting
			continue
		}
		if len(elements) > 0 && len(included) == 0 {
			excluded[c.ID] = true
			out.Excluded = append(out.Excluded, c.ID)
			continue
		}
		if missing := r.missing(c.Template.References()); len(missing) > 0 {
			out.Waiting[c.ID] = Wait{Reason: ReasonWaiting, Message: waitingFor(missing)}
			continue
		}
		rendered, err := r.children(c, included)
		if w, ok := notSet(err); ok {
			out.Waiting[c.ID] = w
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, child := range rendered {
			if err := r.unique(objects, child); err != nil {
				return nil, err
			}
		}
		out.Children = append(out.Children, rendered...)
	}
	if err := r.checkInputs(objects, out.Waiting); err != nil {
		return nil, err
	}
	if err := r.status(out, excluded); err != nil {
		return nil, err
	}
	return out, nil
}

// bindChildren returns what children.<id> is for each observed child: its
// object, or for a forEach child the list of its objects, sorted by
// namespace and name; and which children exist.
func bindChildren(rule *rules.Rule, observed Observed) (present map[string]any, exists map[string]bool) {
	present, exists = map[string]any{}, map[string]bool{}
	for _, c := range rule.Children {
		objs := observed.Children[c.ID]
		if len(c.ForEach) == 0 {
			if len(objs) > 0 && objs[0] != nil {
				present[c.ID] = objs[0].Object
				exists[c.ID] = true
			}
			continue
		}
		sorted := slices.Clone(objs)
		slices.SortFunc(sorted, compareObjects)
		list := make([]any, 0, len(sorted))
		for _, o := range sorted {
			list = append(list, o.Object)
		}
		present[c.ID] = list
		exists[c.ID] = true
	}
	return present, exists
}

// bindInputs returns what inputs.<id> is for each input: the object of a
// named input, the list of a selector input's objects sorted by namespace
// and name; and the named inputs that are missing.
func bindInputs(rule *rules.Rule, parent *unstructured.Unstructured, observed Observed) (inputs map[string]any, missing map[string]bool) {
	inputs, missing = map[string]any{}, map[string]bool{}
	var own map[types.UID]string
	for _, in := range rule.Inputs {
		objs := observed.Inputs[in.ID]
		if in.Selector == nil {
			if len(objs) == 0 || objs[0] == nil {
				missing[in.ID] = true
				continue
			}
			inputs[in.ID] = objs[0].Object
			continue
		}
		// Never the parent or its own children (see checkInputs).
		if own == nil {
			own = ownWrites(parent, observed)
		}
		sorted := slices.DeleteFunc(slices.Clone(objs), func(o *unstructured.Unstructured) bool {
			return o == nil || own[o.GetUID()] != ""
		})
		slices.SortFunc(sorted, compareObjects)
		list := make([]any, 0, len(sorted))
		for _, o := range sorted {
			list = append(list, o.Object)
		}
		inputs[in.ID] = list
	}
	return inputs, missing
}

// checkInputs refuses a named input that is the parent itself, or an
// object a child renders (objects): kgen writes those, so a value read
// from them would be written back, and read again, in a loop that no
// load-time check can see (a live audit: a child that read its own
// resourceVersion, or a counter in its own data, through an input was
// written 400 times a second). The rule reads them as parent and
// children.<id>. It compares names, not UIDs, so that nothing is written
// when the object does not exist yet (a live audit: kgen created the
// input as a child, and pruned the child it replaced, before the next
// reconcile refused it), and an object kgen no longer renders, the old
// object of a renamed child that waits to be pruned, may be read; the
// object of a child that waits (kgen writes it once it renders) may not. A
// list input (selector) leaves kgen's objects out instead (bindInputs).
func (r *renderer) checkInputs(objects map[objectKey]Child, waiting map[string]Wait) error {
	if !slices.ContainsFunc(r.rule.Inputs, func(in *rules.Input) bool { return in.Selector == nil }) {
		return nil
	}
	refs, err := r.rule.InputRefs(r.parent, r.scope)
	if err != nil {
		return &RenderError{Rule: r.rule.Name, Err: err}
	}
	parent := keyOf(r.parent)
	for _, ref := range refs {
		if ref.Name == "" {
			continue
		}
		key := objectKey{GroupKind: ref.GroupVersionKind.GroupKind(), Namespace: ref.Namespace, Name: ref.Name}
		what, obj := "", (*unstructured.Unstructured)(nil)
		if key == parent {
			what, obj = "parent", r.parent
		} else if c, ok := objects[key]; ok {
			what, obj = "children."+c.ID, c.Object
		} else if id, o := waitingObject(r.observed, waiting, key); o != nil {
			what, obj = "children."+id, o
		} else {
			continue
		}
		return r.invalid("", "input %s is %s, which kgen writes: a value read from it would be written back in a loop; read it as %s", ref.ID, describeChild(obj), what)
	}
	return nil
}

// waitingObject returns the observed object at key of a child that waits,
// and the child's id.
func waitingObject(observed Observed, waiting map[string]Wait, key objectKey) (string, *unstructured.Unstructured) {
	for id := range waiting {
		for _, o := range observed.Children[id] {
			if o != nil && keyOf(o) == key {
				return id, o
			}
		}
	}
	return "", nil
}

// ownWrites returns the objects kgen writes for a parent, by UID: the
// parent itself and its observed children, each with how a rule reads it
// ("parent", "children.<id>"). By UID, not by kgen's labels: objects other
// controllers make copy a child's labels (the Endpoints and EndpointSlices
// of a Service), and are inputs like any other.
func ownWrites(parent *unstructured.Unstructured, observed Observed) map[types.UID]string {
	own := map[types.UID]string{}
	for id, objs := range observed.Children {
		for _, c := range objs {
			if c != nil && c.GetUID() != "" {
				own[c.GetUID()] = "children." + id
			}
		}
	}
	if parent != nil && parent.GetUID() != "" {
		own[parent.GetUID()] = "parent"
	}
	return own
}

func compareObjects(a, b *unstructured.Unstructured) int {
	if c := strings.Compare(a.GetNamespace(), b.GetNamespace()); c != 0 {
		return c
	}
	return strings.Compare(a.GetName(), b.GetName())
}

// renderer is the state of one Render.
type renderer struct {
	rule             *rules.Rule
	parent           *unstructured.Unstructured
	scope            Scoper
	observed         Observed
	placement        *rules.Placement
	parentNamespaced bool
	present          map[string]any  // children.<id> by id
	exists           map[string]bool // whether a child counts as existing
	missingInputs    map[string]bool // named inputs that do not exist
	vars             *rules.Vars
}

func (r *renderer) invalid(child string, format string, args ...any) error {
	return renderError(r.rule, child, fmt.Errorf(format, args...))
}

// checkParent checks that the parent is an object of the rule's kind, as
// read from the API server: with a name, a UID, and a namespace exactly when
// its kind is namespaced.
func (r *renderer) checkParent() error {
	p := r.parent
	if p == nil || p.Object == nil {
		return r.invalid("", "no parent object")
	}
	if gvk := p.GroupVersionKind(); gvk != r.rule.Parent.GroupVersionKind {
		return r.invalid("", "the parent is %s %s, but the rule's parent is %s %s",
			gvk.GroupVersion(), gvk.Kind, r.rule.Parent.GroupVersionKind.GroupVersion(), r.rule.Parent.GroupVersionKind.Kind)
	}
	if p.GetName() == "" {
		return r.invalid("", "the parent has no metadata.name")
	}
	if p.GetUID() == "" {
		return r.invalid("", "the parent %s has no metadata.uid", p.GetName())
	}
	pl, err := r.rule.Placement(r.scope)
	if err == nil && pl.ParentScope == kinds.ScopeUnknown {
		err = fmt.Errorf("scope of the parent: %w: %s", kinds.ErrUnknownScope, describeGVK(r.rule.Parent.GroupVersionKind))
	}
	var re *rules.Error
	if errors.As(err, &re) {
		return &RenderError{Rule: r.rule.Name, Err: err} // spec.parent.scope is wrong
	}
	if err != nil {
		return fmt.Errorf("rule %q: %w", r.rule.Name, err)
	}
	r.placement = pl
	namespaced := pl.ParentScope == kinds.Namespaced
	r.parentNamespaced = namespaced
	switch ns := p.GetNamespace(); {
	case namespaced && ns == "":
		return r.invalid("", "the parent %s is namespaced but has no metadata.namespace", p.GetName())
	case !namespaced && ns != "":
		return r.invalid("", "the parent %s is cluster-scoped but has metadata.namespace %q", p.GetName(), ns)
	}
	return nil
}

// missing returns the ids among refs of children that do not exist.
func (r *renderer) missing(refs []string) []string {
	var out []string
	for _, id := range refs {
		if !r.exists[id] && !contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// missingInput returns the ids among refs of named inputs that are missing.
func (r *renderer) missingInput(refs []string) []string {
	var out []string
	for _, id := range refs {
		if r.missingInputs[id] && !contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

func waitingFor(ids []string) string {
	if len(ids) == 1 {
		return "waiting for child " + ids[0]
	}
	return "waiting for children " + strings.Join(ids, ", ")
}

// notSet tells whether an error of a child's expression is a read of a
// field of another child that is not set yet (rules.NotSetError): the
// child waits for it, as for a child that does not exist yet. Anything
// else the expression reads that is not set is the rule's or the
// parent's error.
func notSet(err error) (Wait, bool) {
	var ns *rules.NotSetError
	if !errors.As(err, &ns) {
		return Wait{}, false
	}
	return Wait{Reason: ReasonWaiting, Message: "waiting for " + ns.Path + " (not set yet)", Field: ns.Path, Child: ns.Child}, true
}

// waitingForInputs is waitingForInputs, naming the object each input
// reads, which does not exist: "waiting for input shared (ConfigMap
// team/cfg-p3, which does not exist)".
func (r *renderer) waitingForInputs(ids []string) string {
	refs, err := r.rule.InputRefs(r.parent, r.scope)
	if err != nil {
		return waitingForInputs(ids)
	}
	named := make([]string, 0, len(ids))
	for _, id := range ids {
		for _, ref := range refs {
			if ref.ID == id && ref.Name != "" {
				obj := ref.Name
				if ref.Namespace != "" {
					obj = ref.Namespace + "/" + obj
				}
				id = fmt.Sprintf("%s (%s %s, which does not exist)", id, ref.GroupVersionKind.Kind, obj)
				break
			}
		}
		named = append(named, id)
	}
	return waitingForInputs(named)
}

func waitingForInputs(ids []string) string {
	if len(ids) == 1 {
		return "waiting for input " + ids[0]
	}
	return "waiting for inputs " + strings.Join(ids, ", ")
}

func firstOf(ids []string, set map[string]bool) string {
	for _, id := range ids {
		if set[id] {
			return id
		}
	}
	return ""
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// included evaluates a child's includeWhen for one element (nil for an
// ordinary child).
func (r *renderer) included(c *rules.Child, each map[string]any) (bool, error) {
	vars := r.vars.With(each)
	for _, cond := range c.IncludeWhen {
		ok, err := cond.EvalBool(vars)
		if err != nil {
			return false, renderError(r.rule, c.ID, err)
		}
		if !ok {
			return false, nil
		}
	}
	return true, nil
}

// children renders a child's objects, one per element (one nil element
// for an ordinary child), and records for a forEach child which of them
// exist: children.<id> is then the list of those, in element order.
func (r *renderer) children(c *rules.Child, elements []map[string]any) ([]Child, error) {
	out := make([]Child, 0, len(elements))
	seen := map[ChildKey]int{}
	for i, each := range elements {
		child, err := r.child(c, each)
		if err != nil {
			return nil, err
		}
		child.Index, child.Each = i, each
		key := child.Key()
		if j, dup := seen[key]; dup {
			return nil, r.invalid(c.ID, "forEach: elements %d and %d both render %s: give each element a name of its own", j, i, describeChild(child.Object))
		}
		seen[key] = i
		out = append(out, child)
	}
	if len(c.ForEach) == 0 {
		return out, nil
	}
	observed := map[ChildKey]*unstructured.Unstructured{}
	for _, o := range r.observed.Children[c.ID] {
		observed[ChildKey{ID: c.ID, Namespace: o.GetNamespace(), Name: o.GetName()}] = o
	}
	list := make([]any, 0, len(out))
	all := true
	for _, child := range out {
		if o := observed[child.Key()]; o != nil {
			list = append(list, o.Object)
		} else {
			all = false
		}
	}
	r.present[c.ID], r.exists[c.ID] = list, all
	return out, nil
}

// objectKey identifies an object in the cluster: its group and kind (not
// its version: apps/v1 and apps/v1beta2 Deployments are the same objects),
// namespace and name.
type objectKey struct {
	schema.GroupKind
	Namespace, Name string
}

func keyOf(obj *unstructured.Unstructured) objectKey {
	return objectKey{GroupKind: obj.GroupVersionKind().GroupKind(), Namespace: obj.GetNamespace(), Name: obj.GetName()}
}

// unique records a rendered object in objects, and fails when a child of
// another id rendered the same object before. Two ids would each write
// the object as theirs, over and over; the objects of one forEach child
// are told apart in children already.
func (r *renderer) unique(objects map[objectKey]Child, child Child) error {
	key := keyOf(child.Object)
	first, dup := objects[key]
	if !dup {
		objects[key] = child
		return nil
	}
	err := r.invalid("", "children %s and %s both render %s: give each child a name of its own",
		r.describeID(first), r.describeID(child), describeChild(child.Object))
	err.(*RenderError).Source = ChildSource(r.rule, child.ID)
	return err
}

// describeID names a rendered child by its id, and by its element for a
// forEach child: `"one"`, `"cm" (forEach element 2)`.
func (r *renderer) describeID(c Child) string {
	if rc := r.rule.Child(c.ID); rc != nil && len(rc.ForEach) > 0 {
		return fmt.Sprintf("%q (forEach element %d)", c.ID, c.Index)
	}
	return strconv.Quote(c.ID)
}

func describeChild(obj *unstructured.Unstructured) string {
	if ns := obj.GetNamespace(); ns != "" {
		return fmt.Sprintf("%s %s/%s", obj.GetKind(), ns, obj.GetName())
	}
	return fmt.Sprintf("%s %s", obj.GetKind(), obj.GetName())
}

// child renders one object of a child and fills in its metadata.
func (r *renderer) child(c *rules.Child, each map[string]any) (Child, error) {
	val, _, err := c.Template.Evaluate(r.vars.With(each))
	if err != nil {
		return Child{}, renderError(r.rule, c.ID, err)
	}
	m, ok := val.(map[string]any)
	if !ok {
		return Child{}, r.invalid(c.ID, "template: rendered to %T, not an object", val)
	}
	obj := &unstructured.Unstructured{Object: m}
	meta, ok := m["metadata"].(map[string]any)
	if !ok {
		return Child{}, r.invalid(c.ID, "template.metadata: rendered to %T, not a mapping", m["metadata"])
	}
	name, ok := meta["name"].(string)
	if !ok || name == "" {
		return Child{}, r.invalid(c.ID, "template.metadata.name: rendered to %s, not a non-empty string", describe(meta["name"]))
	}
	if msgs := path.IsValidPathSegmentName(name); len(msgs) > 0 {
		return Child{}, r.invalid(c.ID, "template.metadata.name: %q: %s", name, strings.Join(msgs, "; "))
	}
	ownerRef, err := r.namespace(c, meta)
	if err != nil {
		return Child{}, err
	}
	if c.TemplatedRoleRef() {
		// kgen may bind only these (pkg/rbac grants bind on nothing else),
		// so it does not even try another.
		role, _, _ := unstructured.NestedString(m, "roleRef", "name")
		if !slices.Contains(r.rule.AllowBindRoles, role) {
			return Child{}, r.invalid(c.ID, "template.roleRef.name: binding role %q is not allowed by spec.allowBindRoles (%s)", role, strings.Join(r.rule.AllowBindRoles, ", "))
		}
	}
	labels, err := r.stringMap(c, meta, "labels")
	if err != nil {
		return Child{}, err
	}
	labels[LabelManagedBy] = ManagedBy
	labels[LabelRule] = r.rule.Name
	labels[LabelParentUID] = string(r.parent.GetUID())
	labels[LabelChild] = c.ID
	if shard := r.parent.GetLabels()[LabelShard]; shard != "" {
		labels[LabelShard] = shard
	} else {
		delete(labels, LabelShard)
	}
	for k, v := range labels {
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			return Child{}, r.invalid(c.ID, "template.metadata.labels: invalid label key %q: %s", k, strings.Join(msgs, "; "))
		}
		if msgs := validation.IsValidLabelValue(v.(string)); len(msgs) > 0 {
			return Child{}, r.invalid(c.ID, "template.metadata.labels: invalid value %q for label %s: %s", v, k, strings.Join(msgs, "; "))
		}
	}
	meta["labels"] = labels
	annotations, err := r.stringMap(c, meta, "annotations")
	if err != nil {
		return Child{}, err
	}
	annotations[AnnotationParent] = r.parentRef()
	meta["annotations"] = annotations
	if ownerRef {
		p := r.parent
		meta["ownerReferences"] = []any{map[string]any{
			"apiVersion":         p.GetAPIVersion(),
			"kind":               p.GetKind(),
			"name":               p.GetName(),
			"uid":                string(p.GetUID()),
			"controller":         true,
			"blockOwnerDeletion": true,
		}}
	}
	return Child{ID: c.ID, Object: obj, OwnerReference: ownerRef}, nil
}

// namespace settles the child's namespace, and tells whether Kubernetes
// allows it an ownerReference to the parent.
func (r *renderer) namespace(c *rules.Child, meta map[string]any) (ownerRef bool, err error) {
	cp := r.placement.Child(c.ID)
	if cp.Scope == kinds.ScopeUnknown {
		return false, fmt.Errorf("rule %q: child %q: %w: %s", r.rule.Name, c.ID, kinds.ErrUnknownScope, describeGVK(c.GroupVersionKind))
	}
	childNamespaced := cp.Scope == kinds.Namespaced
	ns, set := meta["namespace"]
	nsName, isString := ns.(string)
	if set && !isString {
		return false, r.invalid(c.ID, "template.metadata.namespace: rendered to %s, not a string", describe(ns))
	}
	parentNS := r.parent.GetNamespace()
	switch {
	case !childNamespaced:
		if nsName != "" {
			return false, r.invalid(c.ID, "template.metadata.namespace: %s %s is cluster-scoped, but the template sets namespace %q",
				c.GroupVersionKind.GroupVersion(), c.GroupVersionKind.Kind, nsName)
		}
		delete(meta, "namespace")
		return cp.OwnerReference(parentNS, ""), nil
	case nsName == "" && r.parentNamespaced:
		nsName = parentNS
	case nsName == "":
		return false, r.invalid(c.ID, "template.metadata.namespace: the parent is cluster-scoped, so the template of namespaced %s %s must set a namespace",
			c.GroupVersionKind.GroupVersion(), c.GroupVersionKind.Kind)
	}
	if msgs := validation.IsDNS1123Label(nsName); len(msgs) > 0 {
		return false, r.invalid(c.ID, "template.metadata.namespace: %q is not a valid namespace name: %s", nsName, strings.Join(msgs, "; "))
	}
	if !r.rule.AllowsNamespace(parentNS, nsName) {
		if r.parentNamespaced {
			return false, r.invalid(c.ID, "template.metadata.namespace: %q is neither the parent's namespace %q nor one of spec.allowCrossNamespace (%s)", nsName, parentNS, strings.Join(r.rule.AllowCrossNamespace, ", "))
		}
		return false, r.invalid(c.ID, "template.metadata.namespace: %q is not one of spec.allowCrossNamespace (%s)", nsName, strings.Join(r.rule.AllowCrossNamespace, ", "))
	}
	if cp.Namespaces != nil && !slices.Contains(cp.Namespaces, nsName) {
		return false, r.invalid(c.ID, "template.metadata.namespace: %q is not among the namespaces the rule allows this child: %s", nsName, strings.Join(cp.Namespaces, ", "))
	}
	meta["namespace"] = nsName
	return cp.OwnerReference(parentNS, nsName), nil
}

// stringMap returns metadata.labels or metadata.annotations as rendered,
// checking that every value is a string; an empty map when absent.
func (r *renderer) stringMap(c *rules.Child, meta map[string]any, key string) (map[string]any, error) {
	v, ok := meta[key]
	if !ok || v == nil {
		return map[string]any{}, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, r.invalid(c.ID, "template.metadata.%s: rendered to %s, not a mapping", key, describe(v))
	}
	for k, s := range m {
		if _, ok := s.(string); !ok {
			return nil, r.invalid(c.ID, "template.metadata.%s[%q]: rendered to %s, not a string", key, k, describe(s))
		}
	}
	return m, nil
}

// parentRef is the value of AnnotationParent.
func (r *renderer) parentRef() string {
	if ns := r.parent.GetNamespace(); ns != "" {
		return ns + "/" + r.parent.GetName()
	}
	return r.parent.GetName()
}

// status evaluates the rule's status fields.
func (r *renderer) status(out *Rendered, excluded map[string]bool) error {
	if len(r.rule.Status) == 0 {
		return nil
	}
	out.Status = map[string]any{}
	for _, f := range r.rule.Status {
		refs := f.Value.References()
		if dep := firstOf(refs, excluded); dep != "" {
			out.StatusOmitted[f.Name] = "child " + dep + " is excluded"
			continue
		}
		if missing := r.missing(refs); len(missing) > 0 {
			out.StatusOmitted[f.Name] = waitingFor(missing)
			continue
		}
		if missing := r.missingInput(f.Value.Inputs()); len(missing) > 0 {
			out.StatusOmitted[f.Name] = r.waitingForInputs(missing)
			continue
		}
		val, ok, err := f.Value.Evaluate(r.vars)
		if errors.Is(err, rules.ErrLimitExceeded) {
			return &RenderError{Rule: r.rule.Name, Err: err}
		}
		if err != nil {
			// Status fields read observed state, which may not have the
			// field yet: leave the field out and say why.
			out.StatusOmitted[f.Name] = shortCause(err)
			continue
		}
		if ok {
			out.Status[f.Name] = val
		}
	}
	return nil
}

// shortCause describes an evaluation error by its expression and cause,
// without the position that the controller's readers do not need.
func shortCause(err error) string {
	var re *rules.Error
	if errors.As(err, &re) && re.Expression != "" && re.Err != nil {
		return "${" + re.Expression + "}: " + re.Err.Error()
	}
	return err.Error()
}

// describe names a rendered value's type for error messages.
func describe(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		return fmt.Sprintf("string %q", v)
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	}
	return fmt.Sprintf("%T %v", v, v)
}

// Ready evaluates a child's readyWhen with self bound to the observed
// object of c (a rendered Child, whose forEach names readyWhen may read; a
// Child with only its ID will do for an ordinary child). It returns whether
// the object is ready and, when not, a message saying why in a person's
// words (see Readiness.Message). A forEach child is ready when each of its
// objects is.
//
// A child without readyWhen is ready once it exists. A readyWhen that cannot
// be evaluated yet (it reads a field of self that is not set, a child that
// does not exist, a named input that is missing) means not ready, with a
// message saying why. The error is for a child id the rule does not have,
// and for a *RenderError matching ErrInvalid when an expression goes over a
// limit.
func Ready(rule *rules.Rule, c Child, parent, self *unstructured.Unstructured, observed Observed) (bool, string, error) {
	r, err := CheckReady(rule, c, parent, self, observed)
	return r.Ready, r.Message, err
}

// Readiness is what CheckReady found of one child object.
type Readiness struct {
	// Ready tells whether the object exists and every readyWhen holds.
	Ready bool
	// Message says why not, as the parent's Ready condition does: "child
	// web does not exist yet", "waiting for status.availableReplicas (not
	// set yet)", "status.availableReplicas is 1, wants >= 2
	// (parent.spec.replicas)" (see rules.Expression.Why), or, where the
	// expression's shape says no more, "readyWhen ${...} is false".
	Message string
	// ReadyWhen is the readyWhen that does not hold, as written; empty when
	// the object is ready or does not exist.
	ReadyWhen string
}

// CheckReady is Ready, also naming the readyWhen that does not hold.
func CheckReady(rule *rules.Rule, c Child, parent, self *unstructured.Unstructured, observed Observed) (Readiness, error) {
	rc := rule.Child(c.ID)
	if rc == nil {
		return Readiness{}, fmt.Errorf("rule %q has no child %q", rule.Name, c.ID)
	}
	if self == nil || self.Object == nil {
		return Readiness{Message: fmt.Sprintf("child %s does not exist yet", c.ID)}, nil
	}
	if self.GetDeletionTimestamp() != nil {
		// Held by a finalizer: kgen creates it again once it is gone.
		return Readiness{Message: fmt.Sprintf("child %s is being deleted (finalizers: %s); kgen creates it again once it is gone", c.ID, strings.Join(self.GetFinalizers(), ", "))}, nil
	}
	if len(rc.ReadyWhen) == 0 {
		return Readiness{Ready: true}, nil
	}
	present, exists := bindChildren(rule, observed)
	inputs, missingInputs := bindInputs(rule, parent, observed)
	var parentObj map[string]any
	if parent != nil {
		parentObj = parent.Object
	}
	vars := rules.NewVars(parentObj, present, self.Object).WithInputs(inputs).With(c.Each)
	for _, e := range rc.ReadyWhen {
		notReady := func(msg string) (Readiness, error) {
			return Readiness{Message: msg, ReadyWhen: e.String()}, nil
		}
		var missing, missingIn []string
		for _, id := range e.References {
			if !exists[id] {
				missing = append(missing, id)
			}
		}
		for _, id := range e.Inputs {
			if missingInputs[id] {
				missingIn = append(missingIn, id)
			}
		}
		switch {
		case len(missing) > 0:
			return notReady(fmt.Sprintf("readyWhen %s is %s", e, waitingFor(missing)))
		case len(missingIn) > 0:
			return notReady(fmt.Sprintf("readyWhen %s is %s", e, waitingForInputs(missingIn)))
		}
		ok, err := e.EvalBool(vars)
		if errors.Is(err, rules.ErrLimitExceeded) {
			return Readiness{}, renderError(rule, c.ID, err)
		}
		if ok {
			continue
		}
		if why := e.Why(vars, err); why != "" {
			return notReady(why)
		}
		// A shape Why does not explain: what the expression read, so a
		// person sees the value that makes it false, or that it cannot
		// take (CEL's error alone names neither).
		read := ""
		if r := e.Read(vars); r != "" {
			read = " (" + r + ")"
		}
		if err != nil {
			var re *rules.Error
			if errors.As(err, &re) && re.Err != nil {
				err = re.Err
			}
			msg := err.Error()
			if msg == "no such overload" {
				msg = "the values are not of the types the expression takes (no such overload)"
			}
			return notReady(fmt.Sprintf("readyWhen %s cannot be evaluated on what it read%s: %s", e, read, msg))
		}
		return notReady(fmt.Sprintf("readyWhen %s is false%s", e, read))
	}
	return Readiness{Ready: true}, nil
}
