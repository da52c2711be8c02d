package cleanup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/pager"
	"k8s.io/klog/v2"

	"kgen.dev/kgen/pkg/controller"
	"kgen.dev/kgen/pkg/mapper"
	"kgen.dev/kgen/pkg/reconcile"
	"kgen.dev/kgen/pkg/ruleset"
	"kgen.dev/kgen/rules"
)

// Finalizer is the finalizer Release removes: the one kgen puts on parents
// whose children Kubernetes cannot garbage-collect.
const Finalizer = reconcile.Finalizer

// attempts bounds how often Release re-reads a parent whose finalizers
// changed between its read and its patch.
const attempts = 5

// Resolver finds the API resource of a kind; *mapper.Mapper is one.
type Resolver interface {
	ResourceFor(gvk schema.GroupVersionKind) (mapper.Mapping, error)
}

var _ Resolver = (*mapper.Mapper)(nil)

// Object names one object of a resource.
type Object struct {
	Resource  schema.GroupResource
	Namespace string
	Name      string
}

func (o Object) String() string {
	if o.Namespace == "" {
		return o.Resource.String() + " " + o.Name
	}
	return o.Resource.String() + " " + o.Namespace + "/" + o.Name
}

// Result says what Release did.
type Result struct {
	// Checked counts the parents looked at.
	Checked int
	// Released are the parents whose finalizer Release removed.
	Released []Object
	// Skipped says, one sentence each, what was not looked at and why.
	Skipped []string
	// Others are the parents left to another kgen: every child of theirs
	// was made by a rule this kgen neither ran nor recorded (see Release).
	Others []Object
}

// Sources are the rules whose parents Release looks at.
type Sources struct {
	// Files are the rules of kgen's rules files.
	Files []*rules.Rule
	// RuleObjects adds the rules of the cluster's Rule objects
	// (rules.kgen.dev), when the API server serves the kind. A Rule object
	// with the name of a rule of Files is left out: kgen ran the file's rule
	// instead. An invalid one still names its parent kind, whose objects are
	// looked at all the same.
	RuleObjects bool
	// Record, when set, is kgen's record (kgenctl run --state-configmap).
	// Where it says a rule watched its parents, and no rule of Files or
	// of the Rule objects looks, is looked at too: the parents of a rule
	// removed while kgen could not release them (it was stopped, or a
	// helm upgrade took its grants away with the rule). A record that
	// cannot be read, or such a place kgen may not list, is a note, not
	// an error: kgen's own rules' parents are released all the same. So
	// is a place of a rule's parents kgen may not list where the record
	// says no rule of kgen ever watched (neverWatched). The record also
	// tells another kgen's parents (see Release).
	Record RecordLoader
	// ReleaseOthers releases the parents that the record tells are
	// another kgen's too: for a kgen whose rules made children before it
	// kept a record (chart 0.1.0), or whose record was lost, and a rule
	// of which was removed meanwhile, since its children name a rule
	// that the record does not hold either.
	ReleaseOthers bool
}

// RecordLoader reads kgen's record; *controller.ConfigMapRecord is one.
type RecordLoader interface {
	Load(ctx context.Context) (controller.Recorded, error)
}

var _ RecordLoader = (*controller.ConfigMapRecord)(nil)

// ruleParents says where one rule's parents are: the objects of its parent
// kind, in its namespaces (none: every namespace), that parsed, the rule,
// selects; nil for an invalid Rule object, whose selector is unknown.
type ruleParents struct {
	rule       string
	gvk        schema.GroupVersionKind
	namespaces []string
	parsed     *rules.Rule
}

func parentsOf(r *rules.Rule) ruleParents {
	return ruleParents{rule: r.Name, gvk: r.Parent.GroupVersionKind, namespaces: r.Parent.Namespaces, parsed: r}
}

// selects reports whether the rule may select obj, an object of its parent
// kind in any version: an invalid rule selects every object in its
// namespaces.
func (r ruleParents) selects(obj *unstructured.Unstructured) bool {
	if r.parsed != nil {
		return r.parsed.SelectsInAnyVersion(obj)
	}
	return obj.GroupVersionKind().GroupKind() == r.gvk.GroupKind() &&
		(len(r.namespaces) == 0 || slices.Contains(r.namespaces, obj.GetNamespace()))
}

// scope is where to look for the objects of one parent kind.
type scope struct {
	gvk   schema.GroupVersionKind
	rules []string
	// namespaces are the rules' namespaces; nil when a rule covers every
	// namespace.
	namespaces []string
	// recorded is set for a place only kgen's record names: one kgen may
	// not list there is a note, not an error.
	recorded bool
}

// covers reports whether the scope looks at the kind, in any version, in
// a namespace ("": every namespace).
func (s *scope) covers(gvk schema.GroupVersionKind, ns string) bool {
	return s.gvk.GroupKind() == gvk.GroupKind() && (s.namespaces == nil || ns != "" && slices.Contains(s.namespaces, ns))
}

// recordedScopes returns the places kgen's record says rules watched their
// parents that none of the rules' scopes covers.
func recordedScopes(rec controller.Recorded, covered []*scope) []*scope {
	var out []*scope
	for _, rule := range slices.Sorted(maps.Keys(rec.Parents)) {
		for _, p := range rec.Parents[rule] {
			if slices.ContainsFunc(covered, func(s *scope) bool { return s.covers(p.GroupVersionKind, p.Namespace) }) {
				continue
			}
			i := slices.IndexFunc(out, func(s *scope) bool {
				return s.gvk.GroupKind() == p.GroupVersionKind.GroupKind() && s.namespaces != nil
			})
			if i < 0 || p.Namespace == "" {
				s := &scope{gvk: p.GroupVersionKind, recorded: true}
				if p.Namespace != "" {
					s.namespaces = []string{p.Namespace}
				}
				if i >= 0 {
					s.rules = out[i].rules
					out = slices.Delete(out, i, i+1)
				}
				s.rules = append(s.rules, rule)
				out = append(out, s)
				continue
			}
			if !slices.Contains(out[i].rules, rule) {
				out[i].rules = append(out[i].rules, rule)
			}
			if !slices.Contains(out[i].namespaces, p.Namespace) {
				out[i].namespaces = append(out[i].namespaces, p.Namespace)
			}
		}
	}
	return out
}

// scopes merges the rules that share a parent kind, in the rules' order.
func scopes(all []ruleParents) []*scope {
	var out []*scope
	// By group and kind: each served version lists the same objects.
	byKind := map[schema.GroupKind]*scope{}
	for _, r := range all {
		s := byKind[r.gvk.GroupKind()]
		if s == nil {
			s = &scope{gvk: r.gvk, namespaces: []string{}}
			byKind[r.gvk.GroupKind()] = s
			out = append(out, s)
		}
		s.rules = append(s.rules, r.rule)
		switch {
		case len(r.namespaces) == 0:
			s.namespaces = nil
		case s.namespaces != nil:
			for _, ns := range r.namespaces {
				if !slices.Contains(s.namespaces, ns) {
					s.namespaces = append(s.namespaces, ns)
				}
			}
		}
	}
	return out
}

// ruleObjects lists the cluster's Rule objects and returns where their
// rules' parents are, and notes on the objects it left out. A kind that is
// not served is a note: then no Rule object exists.
func ruleObjects(ctx context.Context, client dynamic.Interface, resolver Resolver, files []*rules.Rule) ([]ruleParents, []string, error) {
	mapping, err := resolver.ResourceFor(ruleset.RuleGVK)
	if errors.Is(err, mapper.ErrNotFound) {
		return nil, []string{"Rule objects (rules.kgen.dev) are not served: there are none to read"}, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("resolve the Rule kind: %w", err)
	}
	fromFile := map[string]bool{}
	for _, r := range files {
		fromFile[r.Name] = true
	}
	var out []ruleParents
	var notes []string
	ri := client.Resource(mapping.GroupVersionResource())
	err = pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return ri.List(ctx, opts)
	}).EachListItem(ctx, metav1.ListOptions{}, func(obj runtime.Object) error {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return fmt.Errorf("unexpected item %T", obj)
		}
		name := u.GetName()
		if fromFile[name] {
			notes = append(notes, fmt.Sprintf("Rule %s is left out: a rules file has a rule of that name, which kgen ran instead", name))
			return nil
		}
		r, err := rules.FromObject(u.Object, rules.Options{})
		if err == nil {
			out = append(out, parentsOf(r))
			return nil
		}
		// kgen may have run a previous, valid version of the rule, whose
		// parents may hold the finalizer. Only the parent kind matters
		// here, and an invalid rule still names it.
		p, perr := parentOfObject(u)
		if perr != nil {
			notes = append(notes, fmt.Sprintf("Rule %s is left out: it is invalid, and %v", name, perr))
			return nil
		}
		notes = append(notes, fmt.Sprintf("Rule %s is invalid ('kubectl get rule %s -o yaml' says why); the objects of its parent kind %s are looked at all the same",
			name, name, kindString(p.gvk)))
		out = append(out, p)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("list Rule objects: %w", err)
	}
	return out, notes, nil
}

// parentOfObject reads the parent kind and namespaces of a Rule object
// that is not a valid rule.
func parentOfObject(u *unstructured.Unstructured) (ruleParents, error) {
	apiVersion, _, _ := unstructured.NestedString(u.Object, "spec", "parent", "apiVersion")
	kind, _, _ := unstructured.NestedString(u.Object, "spec", "parent", "kind")
	if apiVersion == "" || kind == "" {
		return ruleParents{}, errors.New("its spec.parent names no apiVersion and kind")
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return ruleParents{}, fmt.Errorf("its spec.parent.apiVersion: %w", err)
	}
	namespaces, _, err := unstructured.NestedStringSlice(u.Object, "spec", "parent", "namespaces")
	if err != nil {
		return ruleParents{}, fmt.Errorf("its spec.parent.namespaces: %w", err)
	}
	return ruleParents{rule: u.GetName(), gvk: gv.WithKind(kind), namespaces: namespaces}, nil
}

// Release removes Finalizer from every object of the parent kinds of the
// sources' rules that carries it, and leaves every other finalizer in
// place, and then does the same where src.Record says rules watched their
// parents and no rule looks any more. A parent kind the API server does
// not serve is skipped and noted in the result, as are the Rule objects
// left out.
//
// A parent of another kgen is left alone, as a running kgen leaves it
// (see the controller's start-up sweep): two chart releases whose rules
// share a parent kind both find each other's parents, and releasing the
// other's would take away the guard of its children until it puts the
// finalizer back, so that one deleted meanwhile would leave them behind.
// A parent that no rule of the sources selects is another kgen's when
// every child of it that the API server lists by its UID, where
// src.Record says this kgen's rules made children, names a rule
// (kgen.dev/rule) that is neither one of the sources' nor in the record.
// Without a record read, for a parent without such children, or when a
// place of them cannot be listed (noted), every parent is released
// as before; src.ReleaseOthers releases them all. An error on one kind,
// or in listing the Rule objects, does not stop the others; all errors are
// returned together. Running it again finds nothing more to do.
func Release(ctx context.Context, client dynamic.Interface, resolver Resolver, src Sources) (*Result, error) {
	res := &Result{}
	var errs []error
	var all []ruleParents
	for _, r := range src.Files {
		all = append(all, parentsOf(r))
	}
	if src.RuleObjects {
		objects, notes, err := ruleObjects(ctx, client, resolver, src.Files)
		if err != nil {
			errs = append(errs, err)
		}
		all = append(all, objects...)
		res.Skipped = append(res.Skipped, notes...)
	}
	look := scopes(all)
	var ev *evidence
	var read *controller.Recorded
	if src.Record != nil {
		rec, err := src.Record.Load(ctx)
		if err != nil {
			res.Skipped = append(res.Skipped, fmt.Sprintf("kgen's record cannot be read, so parents of rules removed while kgen could not release them are not looked for: %v", err))
		} else {
			read = &rec
			if !src.ReleaseOthers {
				ev = newEvidence(client, resolver, all, rec)
			}
		}
		look = append(look, recordedScopes(rec, look)...)
	}
	for _, s := range look {
		if err := releaseIn(ctx, client, resolver, s, ev, read, res); err != nil {
			errs = append(errs, err)
		}
	}
	return res, errors.Join(errs...)
}

// releaseIn releases the parents of one scope, adding what it did to res.
// A namespace of it kgen may not list is a note, not an error, when it is
// only recorded, or when kgen's record, read, says no rule of kgen ever
// watched that kind there (neverWatched).
func releaseIn(ctx context.Context, client dynamic.Interface, resolver Resolver, s *scope, ev *evidence, rec *controller.Recorded, res *Result) error {
	logger := klog.FromContext(ctx)
	whose := "rule " + strings.Join(s.rules, ", ")
	if s.recorded {
		whose = "recorded for rule " + strings.Join(s.rules, ", ")
	}
	mapping, err := resolver.ResourceFor(s.gvk)
	if errors.Is(err, mapper.ErrNotFound) {
		// Not in this version: its objects are still there if the kind
		// is served in another (a CRD that stopped serving v1alpha1).
		mapping, err = anyVersion(resolver, s.gvk.GroupKind())
	}
	if errors.Is(err, mapper.ErrNotFound) {
		res.Skipped = append(res.Skipped, fmt.Sprintf("%s (%s) is not served: no parent can hold the finalizer", kindString(s.gvk), whose))
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w", whose, err)
	}
	gvr := mapping.GroupVersionResource()
	namespaces := []string{metav1.NamespaceAll}
	if mapping.Namespaced && s.namespaces != nil {
		namespaces = s.namespaces
	}
	var errs []error
	for _, ns := range namespaces {
		var ri dynamic.ResourceInterface = client.Resource(gvr)
		if mapping.Namespaced {
			ri = client.Resource(gvr).Namespace(ns)
		}
		err := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return ri.List(ctx, opts)
		}).EachListItem(ctx, metav1.ListOptions{}, func(obj runtime.Object) error {
			u, ok := obj.(*unstructured.Unstructured)
			if !ok {
				return fmt.Errorf("list %s: unexpected item %T", gvr.Resource, obj)
			}
			res.Checked++
			o := Object{Resource: gvr.GroupResource(), Namespace: u.GetNamespace(), Name: u.GetName()}
			if slices.Contains(u.GetFinalizers(), Finalizer) {
				if others := ev.anothers(ctx, u, res); others != nil {
					logger.V(2).Info("Leaving a parent another kgen's rules made children of", "resource", o.Resource.String(), "object", klog.KObj(u), "rules", others)
					res.Others = append(res.Others, o)
					return nil
				}
			}
			released, err := release(ctx, client.Resource(gvr), mapping.Namespaced, u)
			if err != nil {
				errs = append(errs, fmt.Errorf("release %s: %w", o, err))
			} else if released {
				logger.V(2).Info("Removed the finalizer", "resource", o.Resource.String(), "object", klog.KObj(u), "finalizer", Finalizer)
				res.Released = append(res.Released, o)
			}
			return nil
		})
		if err == nil {
			continue
		}
		where := "every namespace"
		if ns != "" {
			where = "namespace " + ns
		} else if !mapping.Namespaced {
			where = "the cluster"
		}
		forbidden := apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err)
		if forbidden && ns != "" && namespaceGone(ctx, client, ns) {
			// kgen's Role went with the namespace, and so did its
			// parents.
			res.Skipped = append(res.Skipped, fmt.Sprintf("%s in %s (%s) may not be listed, and the namespace is gone: no parent is left there", gvr.GroupResource(), where, whose))
			continue
		}
		if forbidden && s.recorded {
			res.Skipped = append(res.Skipped, fmt.Sprintf("%s in %s (%s) may not be listed: %v; a user who may can run kgenctl cleanup again", gvr.GroupResource(), where, whose, err))
			continue
		}
		if forbidden && neverWatched(rec, s.rules, s.gvk.GroupKind(), ns) {
			res.Skipped = append(res.Skipped, fmt.Sprintf("%s in %s (%s) may not be listed, and kgen's record says no rule of kgen ever watched there, so no parent there holds its finalizer: %v", gvr.GroupResource(), where, whose, err))
			continue
		}
		if s.recorded {
			where += " (" + whose + ")"
		}
		errs = append(errs, fmt.Errorf("list %s in %s: %w", gvr.GroupResource(), where, err))
	}
	return errors.Join(errs...)
}

// namespaceGone reports whether a namespace is known not to exist: kgenctl
// rbac grants get on the namespaces of the rules' parents. Any other
// answer tells nothing.
func namespaceGone(ctx context.Context, client dynamic.Interface, ns string) bool {
	_, err := client.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Get(ctx, ns, metav1.GetOptions{})
	return apierrors.IsNotFound(err)
}

// neverWatched reports whether kgen's record, read and not empty, says
// that none of the rules ran and that no rule of kgen watched the parents
// of a kind in a namespace ("": any). kgen records a rule's child kinds,
// and where it watches its parents, when the rule starts, before it
// reconciles any parent, so it never put its finalizer on a parent there:
// a rule whose parent kind kgen may not list (a Rule object created
// without its RBAC) never ran. A rule with an entry of its own ran: a
// kgen from before parent scopes were recorded wrote only its child
// kinds, and its parents may hold the finalizer. An empty record may be
// one kgen never wrote (before it kept one), so it tells nothing. (A rule
// kgen started while it could not write its record is not in it; kgen
// logs that, and it needs its ConfigMap's RBAC taken away.)
func neverWatched(rec *controller.Recorded, rules []string, gk schema.GroupKind, ns string) bool {
	if rec == nil || len(rec.Parents) == 0 && len(rec.Children) == 0 {
		return false
	}
	for _, rule := range rules {
		if _, ok := rec.Children[rule]; ok {
			return false
		}
		if _, ok := rec.Parents[rule]; ok {
			return false
		}
	}
	for _, scopes := range rec.Parents {
		for _, p := range scopes {
			if p.GroupVersionKind.GroupKind() == gk && (ns == "" || p.Namespace == "" || p.Namespace == ns) {
				return false
			}
		}
	}
	return true
}

// evidence tells another kgen's parents (see Release) by their children.
type evidence struct {
	client   dynamic.Interface
	resolver Resolver
	// sources are the rules Release looks at the parents of.
	sources []ruleParents
	// known are the rules this kgen ran or recorded.
	known map[string]bool
	// made are where the record says this kgen's rules made children.
	made []controller.ChildScope
	// rules are the rules named by the children listed in made, by their
	// parent's UID; nil until a parent asks.
	rules map[types.UID][]string
	// blind is set when a place of made could not be listed: no parent is
	// then taken for another kgen's.
	blind bool
}

// newEvidence returns the evidence of the sources' rules, all, and of the
// record rec.
func newEvidence(client dynamic.Interface, resolver Resolver, all []ruleParents, rec controller.Recorded) *evidence {
	ev := &evidence{client: client, resolver: resolver, sources: all, known: map[string]bool{}}
	for _, r := range all {
		ev.known[r.rule] = true
	}
	for rule := range rec.Parents {
		ev.known[rule] = true
	}
	for _, rule := range slices.Sorted(maps.Keys(rec.Children)) {
		ev.known[rule] = true
		for _, s := range rec.Children[rule] {
			if !slices.Contains(ev.made, s) {
				ev.made = append(ev.made, s)
			}
		}
	}
	return ev
}

// anothers returns the rules that made the children of a parent that holds
// the finalizer if the parent is another kgen's, and nil if it is this
// one's to release. The children are listed once, for every parent, when
// the first parent that no source rule selects asks. A nil evidence (no
// record read) knows of no other kgen.
func (ev *evidence) anothers(ctx context.Context, parent *unstructured.Unstructured, res *Result) []string {
	if ev == nil || slices.ContainsFunc(ev.sources, func(r ruleParents) bool { return r.selects(parent) }) {
		return nil
	}
	if ev.rules == nil {
		ev.list(ctx, res)
	}
	names := ev.rules[parent.GetUID()]
	if ev.blind || len(names) == 0 {
		return nil
	}
	for _, name := range names {
		if name == "" || ev.known[name] {
			return nil
		}
	}
	return names
}

// childPageSize bounds the children a page of list holds: only two labels
// of each are kept.
const childPageSize = 100

// list reads the children of every parent where the record says this
// kgen's rules made children. A place that cannot be listed makes the
// evidence blind, with a note: a parent kgen cannot tell is released, as
// no parent of kgen's own may be left behind.
func (ev *evidence) list(ctx context.Context, res *Result) {
	ev.rules = map[types.UID][]string{}
	selector := reconcile.LabelManagedBy + "=" + reconcile.ManagedBy + "," + reconcile.LabelParentUID
	for _, s := range ev.made {
		mapping, err := ev.resolver.ResourceFor(s.GroupVersionKind)
		if errors.Is(err, mapper.ErrNotFound) {
			// Not in this version: its objects are still there if the
			// kind is served in another.
			mapping, err = anyVersion(ev.resolver, s.GroupVersionKind.GroupKind())
		}
		if errors.Is(err, mapper.ErrNotFound) {
			continue // not served in any version: no child of it is left
		}
		if err == nil {
			var ri dynamic.ResourceInterface = ev.client.Resource(mapping.GroupVersionResource())
			if mapping.Namespaced && s.Namespace != "" {
				ri = ev.client.Resource(mapping.GroupVersionResource()).Namespace(s.Namespace)
			}
			p := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
				return ri.List(ctx, opts)
			})
			p.PageSize, p.PageBufferSize = childPageSize, 1
			err = p.EachListItem(ctx, metav1.ListOptions{LabelSelector: selector}, func(obj runtime.Object) error {
				if o, ok := obj.(metav1.Object); ok {
					uid := types.UID(o.GetLabels()[reconcile.LabelParentUID])
					if name := o.GetLabels()[reconcile.LabelRule]; !slices.Contains(ev.rules[uid], name) {
						ev.rules[uid] = append(ev.rules[uid], name)
					}
				}
				return nil
			})
		}
		if apierrors.IsNotFound(err) {
			continue // the kind went away meanwhile: nothing of it is left
		}
		if err != nil {
			res.Skipped = append(res.Skipped, fmt.Sprintf("the children of kgen's rules in %s cannot be listed (%v), so no parent is taken for another kgen's", s, err))
			ev.blind = true
			return
		}
	}
}

// anyVersion is mapper.AnyVersion for a resolver that can list a kind's
// versions (*mapper.Mapper can); with another, no version is found.
func anyVersion(resolver Resolver, gk schema.GroupKind) (mapper.Mapping, error) {
	if r, ok := resolver.(mapper.Resolver); ok {
		return mapper.AnyVersion(r, gk)
	}
	return mapper.Mapping{}, fmt.Errorf("%s: %w", gk, mapper.ErrNotFound)
}

// release removes Finalizer from one object, reading it again when its
// finalizers changed since it was read. It reports whether it removed it.
func release(ctx context.Context, nri dynamic.NamespaceableResourceInterface, namespaced bool, obj *unstructured.Unstructured) (bool, error) {
	var ri dynamic.ResourceInterface = nri
	if namespaced {
		ri = nri.Namespace(obj.GetNamespace())
	}
	for attempt := 1; ; attempt++ {
		i := slices.Index(obj.GetFinalizers(), Finalizer)
		if i < 0 {
			return false, nil
		}
		_, err := ri.Patch(ctx, obj.GetName(), types.JSONPatchType, removePatch(i), metav1.PatchOptions{})
		switch {
		case err == nil:
			return true, nil
		case apierrors.IsNotFound(err):
			return false, nil
		case (apierrors.IsInvalid(err) || apierrors.IsConflict(err)) && attempt < attempts:
			// The test operation failed: the finalizers changed since
			// the read. Read them again.
		default:
			return false, err
		}
		if obj, err = ri.Get(ctx, obj.GetName(), metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return false, nil
		} else if err != nil {
			return false, err
		}
	}
}

// removePatch is a JSON patch that removes finalizer i if, and only if, it
// is still kgen's. Unlike a server-side apply of kgen's finalizer field
// manager with no finalizers, which only gives up kgen's claim, it removes
// the entry whoever else also owns it (a parent restored from a backup, or
// applied with the finalizer in its manifest); unlike a merge patch of the
// whole list, it cannot drop a finalizer another controller adds meanwhile.
func removePatch(i int) []byte {
	path := fmt.Sprintf("/metadata/finalizers/%d", i)
	patch, _ := json.Marshal([]map[string]any{
		{"op": "test", "path": path, "value": Finalizer},
		{"op": "remove", "path": path},
	})
	return patch
}

func kindString(gvk schema.GroupVersionKind) string {
	if gvk.Group == "" {
		return gvk.Version + "/" + gvk.Kind
	}
	return gvk.Group + "/" + gvk.Version + "/" + gvk.Kind
}
