package reconcile

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"kgen.dev/kgen/rules"
)

// Op is what a Step does to its child.
type Op int

const (
	// OpKeep leaves the child alone: it is up to date.
	OpKeep Op = iota
	// OpCreate creates the child: no object of it exists.
	OpCreate
	// OpUpdate applies the child because the template, or the parent it is
	// rendered from, changed.
	OpUpdate
	// OpRepair applies the child because a field kgen manages was changed
	// by someone else (drift).
	OpRepair
	// OpMarks writes only kgen's marks on a CreateOnly child (its labels,
	// annotations and controller ownerReference; see MarksDiffer), never
	// its content: the child's deletionPolicy, id or rule changed since it
	// was created, and its marks must say what happens to it.
	OpMarks
)

func (o Op) String() string {
	return [...]string{"keep", "create", "update", "repair", "marks"}[o]
}

// Plan is what one reconcile of one parent must do, computed from the
// parent, its rule and its children as cached, without a request. Executing
// it is the Reconciler's job; the plan is what most tests check.
type Plan struct {
	// Rendered is the rule's rendering for the parent.
	Rendered *Rendered
	// Steps are the wanted child objects, in the order to write them: one
	// per object of a forEach child.
	Steps []Step
	// Superseded are, per child id, observed objects of the child that no
	// wanted object is: the old name of a renamed child, or the object of
	// a forEach element that is gone. They are deleted only once every
	// step of their child succeeded, so a parent is never left without a
	// child because its replacement could not be made.
	Superseded map[string][]*unstructured.Unstructured
	// Prunes are observed children no longer wanted at all (their
	// includeWhen is false, or their id or kind left the rule): delete
	// them.
	Prunes []Prune
	// Keep are observed children that are neither written nor pruned this
	// time: they wait for a child or an input they read.
	Keep []*unstructured.Unstructured
	// Finalizer tells whether the parent needs kgen's finalizer: some child
	// it wants, or still has, cannot carry an ownerReference to it.
	Finalizer bool
}

// Step is one wanted child object.
type Step struct {
	Child
	// Live is the observed object the child is, or nil when it must be
	// created.
	Live *unstructured.Unstructured
	// Op says what to do.
	Op Op
}

// Prune is one observed child to delete.
type Prune struct {
	Object *unstructured.Unstructured
	// ID is the child id the object carries.
	ID string
	// Why says why it is no longer wanted, for events and logs.
	Why string
	// OfKind is set for the object of an id the rule no longer has, which
	// may be the old object of a child whose id was renamed: it is
	// deleted only once every object of its kind the rule wants has been
	// created (a renamed id whose new name is taken must not leave the
	// parent without the child).
	OfKind bool
}

// Judge tells whether a live child still holds what its desired object
// sets, and if not, whether the template changed (OpUpdate) or someone
// changed the child (OpRepair). desired carries its template hash.
type Judge func(desired, live *unstructured.Unstructured) Op

// MakePlan decides what to do for one parent. observed are the parent's
// children as cached (those marked with its UID, of the kinds the rule
// watches), newest writes included; inputs are the rule's inputs as read
// (see Observed.Inputs); scope answers whether kinds are namespaced; judge
// compares a desired child with its live object.
//
// An error comes from rendering: a *RenderError (ErrInvalid) for a problem
// of the rule or the parent's data, or the Scoper's error.
func MakePlan(rule *rules.Rule, parent *unstructured.Unstructured, observed []*unstructured.Unstructured, inputs map[string][]*unstructured.Unstructured, scope Scoper, judge Judge) (*Plan, error) {
	p, err := makePlan(rule, parent, observed, inputs, scope, judge, nil)
	if err != nil {
		return p, err
	}
	// An object that still carries another id (see makePlan) was read by
	// the render under that id: as the other child, by a reader of an id
	// two children swapped, or not at all. The rule is rendered again with
	// it under the id it now has, as the cache will show it once it is
	// relabelled; the relabel is kgen's own write, which wakes no parent.
	// A CreateOnly child is relabelled by a patch of its marks (OpMarks),
	// which wakes no parent either.
	moved := map[types.UID]string{}
	for _, st := range p.Steps {
		if st.Live != nil && st.Live.GetLabels()[LabelChild] != st.ID {
			moved[st.Live.GetUID()] = st.ID
		}
	}
	if len(moved) == 0 {
		return p, nil
	}
	return makePlan(rule, parent, observed, inputs, scope, judge, moved)
}

// makePlan is MakePlan; moved gives objects the id (by UID) that the
// render should see them under instead of their label's.
func makePlan(rule *rules.Rule, parent *unstructured.Unstructured, observed []*unstructured.Unstructured, inputs map[string][]*unstructured.Unstructured, scope Scoper, judge Judge, moved map[types.UID]string) (*Plan, error) {
	// Only the parent's own children count: an object that merely carries
	// its marks (someone added kgen's labels to an object of theirs) is
	// neither read, written, nor pruned.
	observed = slices.DeleteFunc(slices.Clone(observed), func(obj *unstructured.Unstructured) bool {
		return !ownedBy(obj, parent) || obj.GetDeletionTimestamp() != nil
	})
	// The oldest object of a child is the one a template reads.
	slices.SortStableFunc(observed, func(a, b *unstructured.Unstructured) int {
		return a.GetCreationTimestamp().Compare(b.GetCreationTimestamp().Time)
	})
	var ofKind []*unstructured.Unstructured
	for _, obj := range observed {
		if c := rule.Child(obj.GetLabels()[LabelChild]); c != nil && sameKind(obj, c.GroupVersionKind) {
			ofKind = append(ofKind, obj)
		}
	}
	seen := ofKind // what the render reads
	if len(moved) > 0 {
		seen = nil
		for _, obj := range observed {
			id, ok := moved[obj.GetUID()]
			if !ok {
				id = obj.GetLabels()[LabelChild]
			} else {
				view := obj.DeepCopy()
				labels := view.GetLabels()
				labels[LabelChild] = id
				view.SetLabels(labels)
				obj = view
			}
			if c := rule.Child(id); c != nil && sameKind(obj, c.GroupVersionKind) {
				seen = append(seen, obj)
			}
		}
	}
	rendered, err := Render(rule, parent, Observed{Children: GroupChildren(rule, seen), Inputs: inputs}, scope)
	if err != nil {
		return nil, err
	}

	p := &Plan{Rendered: rendered, Superseded: map[string][]*unstructured.Unstructured{}}
	byKey := map[ChildKey]*unstructured.Unstructured{}
	for _, obj := range ofKind {
		if k := KeyOf(obj); byKey[k] == nil {
			byKey[k] = obj
		}
	}
	handled := map[types.UID]bool{}
	rendering := map[string]bool{} // ids with a step
	for _, c := range rendered.Children {
		if rule.Child(c.ID).DeletionPolicy == rules.DeletionOrphan {
			ann := c.Object.GetAnnotations()
			if ann == nil {
				ann = map[string]string{}
			}
			ann[AnnotationDeletionPolicy] = string(rules.DeletionOrphan)
			c.Object.SetAnnotations(ann)
		}
		if sa := rule.ServiceAccount; sa != nil {
			ann := c.Object.GetAnnotations()
			if ann == nil {
				ann = map[string]string{}
			}
			ann[AnnotationServiceAccount] = sa.Namespace + "/" + sa.Name
			c.Object.SetAnnotations(ann)
		}
		desired := withHash(c.Object) // Render's objects are ours to change
		step := Step{Child: c}
		step.Object = desired
		if live := byKey[c.Key()]; live != nil && sameKind(live, desired.GroupVersionKind()) {
			step.Live = live
			handled[live.GetUID()] = true
		}
		if !c.OwnerReference {
			p.Finalizer = true
		}
		rendering[c.ID] = true
		p.Steps = append(p.Steps, step)
	}
	// A child whose object carries another id (the id was renamed, two
	// ids swapped names, or the parent moved from a rule whose ids
	// differ) is the object of its kind and name that is this parent's:
	// it is taken as it is and relabelled by the apply, never created
	// anew while its old id's prune deletes the same object. Not the
	// object of a child that waits: that child did not render, so the
	// check of two children rendering one object could not see it, and
	// taking it would overwrite a child that is still wanted. It is an
	// error, as two children rendering one object are; unless the waiting
	// child reads this one (directly or through others), which has no
	// object until it takes this one: an id renamed, and the old id used
	// again for a child that reads the renamed one.
	for i := range p.Steps {
		step := &p.Steps[i]
		if step.Live != nil {
			continue
		}
		for _, obj := range observed {
			if !handled[obj.GetUID()] && sameKind(obj, step.Object.GroupVersionKind()) &&
				obj.GetNamespace() == step.Object.GetNamespace() && obj.GetName() == step.Object.GetName() {
				id := obj.GetLabels()[LabelChild]
				if to, ok := moved[obj.GetUID()]; ok {
					id = to
				}
				if wait, waiting := rendered.Waiting[id]; waiting && id != step.ID && rule.Child(id) != nil && !readsChild(rule, id, step.ID) {
					return nil, renderError(rule, step.ID, fmt.Errorf("child %q renders %s, the object of child %q, which is %s: two children never share an object, and kgen does not take it from %q while that one renders nothing",
						step.ID, describeChild(step.Object), id, wait.Message, id))
				}
				step.Live = obj
				handled[obj.GetUID()] = true
				break
			}
		}
	}
	for i := range p.Steps {
		step := &p.Steps[i]
		switch {
		case step.Live == nil:
			step.Op = OpCreate
		case rule.Child(step.ID).UpdatePolicy == rules.UpdateCreateOnly:
			// Created once, its content never written again; only its
			// marks follow the rule, so that a deletionPolicy changed
			// to Orphan keeps it when it is pruned or its parent goes.
			step.Op = OpKeep
			if len(MarksDiffer(step.Object, step.Live)) > 0 {
				step.Op = OpMarks
			}
		default:
			step.Op = judge(step.Object, step.Live)
		}
	}
	excluded := map[string]bool{}
	for _, id := range rendered.Excluded {
		excluded[id] = true
	}
	for _, obj := range observed {
		if handled[obj.GetUID()] {
			continue
		}
		id := obj.GetLabels()[LabelChild]
		if to, ok := moved[obj.GetUID()]; ok {
			id = to // as the render saw it: its new id
		}
		c := rule.Child(id)
		_, waiting := rendered.Waiting[id]
		switch {
		case c != nil && !sameKind(obj, c.GroupVersionKind) && rendering[id]:
			// Replaced by an object of the new kind: deleted once that
			// exists, as a renamed child is.
			p.Superseded[id] = append(p.Superseded[id], obj)
		case c != nil && !sameKind(obj, c.GroupVersionKind) && waiting:
			// Its replacement waits to be rendered: left as it is,
			// and not taken for the child, which is of another kind.
		case c != nil && !sameKind(obj, c.GroupVersionKind):
			p.Prunes = append(p.Prunes, Prune{Object: obj, ID: id, Why: "its kind is no longer the child's"})
		case c == nil && waitingOfKind(rule, rendered, observed, obj):
			// Maybe the old object of a renamed id whose new one waits
			// to be rendered: kept until it can be.
			p.Keep = append(p.Keep, obj)
		case c == nil:
			p.Prunes = append(p.Prunes, Prune{Object: obj, ID: id, Why: "the rule has no child " + id + " any more", OfKind: true})
		case excluded[id]:
			p.Prunes = append(p.Prunes, Prune{Object: obj, ID: id, Why: "its includeWhen is false"})
		case rendering[id]:
			p.Superseded[id] = append(p.Superseded[id], obj)
		case waiting:
			p.Keep = append(p.Keep, obj) // keep what exists of it
		default:
			// A forEach child with no element now.
			p.Prunes = append(p.Prunes, Prune{Object: obj, ID: id, Why: "its forEach has no element for it"})
		}
	}
	// A child that has no ownerReference to the parent (another namespace,
	// or cluster-scoped) still needs the finalizer until it is gone.
	for _, obj := range observed {
		if !hasOwner(obj, parent.GetUID()) {
			p.Finalizer = true
		}
	}
	return p, nil
}

// waitingOfKind tells whether a child of obj's kind that has no object
// yet waits to be rendered: a renamed id, whose old object obj may be. (A
// child that has objects is no id's replacement, and its wait, which may
// last, does not hold obj.)
func waitingOfKind(rule *rules.Rule, rendered *Rendered, observed []*unstructured.Unstructured, obj *unstructured.Unstructured) bool {
	for id := range rendered.Waiting {
		c := rule.Child(id)
		if c == nil || !sameKind(obj, c.GroupVersionKind) {
			continue
		}
		if !slices.ContainsFunc(observed, func(o *unstructured.Unstructured) bool { return o.GetLabels()[LabelChild] == id }) {
			return true
		}
	}
	return false
}

// sameKind reports whether an object is of the group and kind of gvk; the
// version may differ (a served version of the same kind).
func sameKind(obj *unstructured.Unstructured, gvk schema.GroupVersionKind) bool {
	return obj.GroupVersionKind().GroupKind() == gvk.GroupKind()
}

// hasOwner reports whether obj has an ownerReference to the object with uid.
func hasOwner(obj *unstructured.Unstructured, uid types.UID) bool {
	for _, o := range obj.GetOwnerReferences() {
		if o.UID == uid {
			return true
		}
	}
	return false
}

// readsChild tells whether child id's template reads child target, directly
// or through the children it reads.
func readsChild(rule *rules.Rule, id, target string) bool {
	seen := map[string]bool{id: true}
	next := []string{id}
	for len(next) > 0 {
		c := rule.Child(next[0])
		next = next[1:]
		if c == nil {
			continue
		}
		for _, ref := range c.Template.References() {
			if ref == target {
				return true
			}
			if !seen[ref] {
				seen[ref] = true
				next = append(next, ref)
			}
		}
	}
	return false
}

// markLabels and markAnnotations are kgen's marks on a child that say
// whose it is and what happens to it: what a CreateOnly child's writes
// (OpMarks, and its adoption) change.
var (
	markLabels      = []string{LabelManagedBy, LabelRule, LabelParentUID, LabelChild, LabelShard}
	markAnnotations = []string{AnnotationParent, AnnotationDeletionPolicy, AnnotationServiceAccount}
)

// marksOf fingerprints exactly what MarksDiffer compares: kgen's mark
// labels and annotations and the controller ownerReference.
func marksOf(obj *unstructured.Unstructured) string {
	var b strings.Builder
	for _, k := range markLabels {
		fmt.Fprintf(&b, "%s=%s;", k, obj.GetLabels()[k])
	}
	for _, k := range markAnnotations {
		fmt.Fprintf(&b, "%s=%s;", k, obj.GetAnnotations()[k])
	}
	if ref := metav1.GetControllerOfNoCopy(obj); ref != nil {
		fmt.Fprintf(&b, "controller=%s", ref.UID)
	}
	return b.String()
}

// MarksDiffer returns the field paths of kgen's marks (its labels and
// annotations, and the controller ownerReference) that differ between a
// desired child and its live object; none when they agree.
func MarksDiffer(desired, live *unstructured.Unstructured) []string {
	var paths []string
	for _, k := range markLabels {
		if desired.GetLabels()[k] != live.GetLabels()[k] {
			paths = append(paths, "metadata.labels["+k+"]")
		}
	}
	for _, k := range markAnnotations {
		if desired.GetAnnotations()[k] != live.GetAnnotations()[k] {
			paths = append(paths, "metadata.annotations["+k+"]")
		}
	}
	var want, has types.UID
	if ref := metav1.GetControllerOfNoCopy(desired); ref != nil {
		want = ref.UID
	}
	if ref := metav1.GetControllerOfNoCopy(live); ref != nil {
		has = ref.UID
	}
	if want != has {
		paths = append(paths, "metadata.ownerReferences")
	}
	return paths
}
