package reconcile

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/validation/path"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"

	"kgen.dev/kgen/pkg/kinds"
	"kgen.dev/kgen/rules"
)

// Rendered is what a rule makes of one parent.
type Rendered struct {
	// Children are the included children whose dependencies exist, in
	// dependency order: apply them in this order.
	Children []Child
	// Excluded are the ids of the children whose includeWhen is false, or
	// that read a child that is excluded, in dependency order. They must not
	// exist: prune them.
	Excluded []string
	// Waiting maps the id of each child that is not rendered yet to why, such
	// as "waiting for child config": a child it reads does not exist yet.
	// Such a child is neither applied nor pruned this time. Never nil.
	Waiting map[string]string
	// Status holds the rule's status fields, evaluated. A field is left out
	// when it reads a child that does not exist (or is excluded), when its
	// expression cannot be evaluated yet (a field of a child's status that
	// is not set), or when it is an empty optional. Nil when the rule has no
	// status fields.
	Status map[string]any
	// StatusOmitted maps each status field left out of Status, except empty
	// optionals, to why. Never nil.
	StatusOmitted map[string]string
}

// Child is one desired child object.
type Child struct {
	// ID is the child's id in its rule.
	ID string
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
	if e.Child != "" {
		return fmt.Sprintf("rule %q: child %q: %v", e.Rule, e.Child, e.Err)
	}
	return fmt.Sprintf("rule %q: %v", e.Rule, e.Err)
}

// Unwrap returns the cause.
func (e *RenderError) Unwrap() error { return e.Err }

// Is reports that a RenderError is an ErrInvalid.
func (e *RenderError) Is(target error) bool { return target == ErrInvalid }

// Render computes the children a rule wants for a parent, as the controller
// will apply them, and the rule's status fields. It is a pure function of its
// arguments: it reads the parent and the observed children and changes
// neither.
//
// observed maps child ids to the children as last seen in the cluster (nil or
// missing when they do not exist); a child that reads children.<id> is
// rendered only once that child is observed. scope tells the scope of the
// parent's and children's kinds.
//
// An error that comes from the rule or the parent is a *RenderError matching
// ErrInvalid; an error of the Scoper is returned wrapped as it is. Render
// stops at the first error.
func Render(rule *rules.Rule, parent *unstructured.Unstructured, observed map[string]*unstructured.Unstructured, scope Scoper) (*Rendered, error) {
	r := &renderer{rule: rule, parent: parent, scope: scope}
	if err := r.checkParent(); err != nil {
		return nil, err
	}
	r.present = map[string]any{}
	for _, c := range rule.Children {
		if o := observed[c.ID]; o != nil {
			r.present[c.ID] = o.Object
		}
	}
	r.vars = rules.NewVars(parent.Object, r.present, nil)
	out := &Rendered{Waiting: map[string]string{}, StatusOmitted: map[string]string{}}
	excluded := map[string]bool{}
	for _, c := range rule.Order() {
		if dep := firstOf(c.DependsOn, excluded); dep != "" {
			excluded[c.ID] = true
			out.Excluded = append(out.Excluded, c.ID)
			continue
		}
		var includeRefs []string
		for _, cond := range c.IncludeWhen {
			includeRefs = append(includeRefs, cond.References...)
		}
		if missing := r.missing(includeRefs); len(missing) > 0 {
			out.Waiting[c.ID] = waitingFor(missing)
			continue
		}
		include, err := r.included(c)
		if err != nil {
			return nil, err
		}
		if !include {
			excluded[c.ID] = true
			out.Excluded = append(out.Excluded, c.ID)
			continue
		}
		if missing := r.missing(c.Template.References()); len(missing) > 0 {
			out.Waiting[c.ID] = waitingFor(missing)
			continue
		}
		child, err := r.child(c)
		if err != nil {
			return nil, err
		}
		out.Children = append(out.Children, child)
	}
	if err := r.status(out, excluded); err != nil {
		return nil, err
	}
	return out, nil
}

// renderer is the state of one Render.
type renderer struct {
	rule             *rules.Rule
	parent           *unstructured.Unstructured
	scope            Scoper
	placement        *rules.Placement
	parentNamespaced bool
	present          map[string]any // observed children's objects by id
	vars             *rules.Vars
}

func (r *renderer) invalid(child string, format string, args ...any) error {
	return &RenderError{Rule: r.rule.Name, Child: child, Err: fmt.Errorf(format, args...)}
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

// missing returns the ids among refs of children that are not observed.
func (r *renderer) missing(refs []string) []string {
	var out []string
	for _, id := range refs {
		if _, ok := r.present[id]; !ok && !contains(out, id) {
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

// included evaluates a child's includeWhen.
func (r *renderer) included(c *rules.Child) (bool, error) {
	for _, cond := range c.IncludeWhen {
		ok, err := cond.EvalBool(r.vars)
		if err != nil {
			return false, &RenderError{Rule: r.rule.Name, Child: c.ID, Err: err}
		}
		if !ok {
			return false, nil
		}
	}
	return true, nil
}

// child renders one child and fills in its metadata.
func (r *renderer) child(c *rules.Child) (Child, error) {
	val, _, err := c.Template.Evaluate(r.vars)
	if err != nil {
		return Child{}, &RenderError{Rule: r.rule.Name, Child: c.ID, Err: err}
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

// Ready evaluates a child's readyWhen with self bound to the observed child.
// It returns whether the child is ready and, when not, a message naming the
// failing expression (or what it waits for).
//
// A child without readyWhen is ready once it exists. A readyWhen that cannot
// be evaluated yet (it reads a field of self that is not set, or a child
// that does not exist) means not ready, with a message saying why. The error
// is for a child id the rule does not have, and for a *RenderError matching
// ErrInvalid when an expression goes over a limit.
func Ready(rule *rules.Rule, childID string, parent, self *unstructured.Unstructured, observed map[string]*unstructured.Unstructured) (bool, string, error) {
	c := rule.Child(childID)
	if c == nil {
		return false, "", fmt.Errorf("rule %q has no child %q", rule.Name, childID)
	}
	if self == nil || self.Object == nil {
		return false, fmt.Sprintf("child %s does not exist yet", childID), nil
	}
	if len(c.ReadyWhen) == 0 {
		return true, "", nil
	}
	present := map[string]any{}
	for _, o := range rule.Children {
		if obj := observed[o.ID]; obj != nil {
			present[o.ID] = obj.Object
		}
	}
	var parentObj map[string]any
	if parent != nil {
		parentObj = parent.Object
	}
	vars := rules.NewVars(parentObj, present, self.Object)
	for _, e := range c.ReadyWhen {
		var missing []string
		for _, id := range e.References {
			if _, ok := present[id]; !ok {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 {
			return false, fmt.Sprintf("readyWhen %s is %s", e, waitingFor(missing)), nil
		}
		ok, err := e.EvalBool(vars)
		if errors.Is(err, rules.ErrLimitExceeded) {
			return false, "", &RenderError{Rule: rule.Name, Child: childID, Err: err}
		}
		if err != nil {
			var re *rules.Error
			if errors.As(err, &re) && re.Err != nil {
				err = re.Err
			}
			return false, fmt.Sprintf("readyWhen %s: %v", e, err), nil
		}
		if !ok {
			return false, fmt.Sprintf("readyWhen %s is false", e), nil
		}
	}
	return true, "", nil
}
