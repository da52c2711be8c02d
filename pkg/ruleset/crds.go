package ruleset

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"

	"kgen.dev/kgen/pkg/kinds"
	"kgen.dev/kgen/pkg/mapper"
	kschema "kgen.dev/kgen/pkg/schema"
	"kgen.dev/kgen/rules"
)

// CRDGVR is the resource of CustomResourceDefinitions.
var CRDGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// FieldManager is the server-side apply field manager of the CRDs kgen
// manages, as of everything else it writes.
const FieldManager = "kgen"

// CRDs reads the CustomResourceDefinitions of rules' parent kinds, to check
// the rules' expressions against their schemas when the rules start, and
// with Manage creates and updates the CRDs of rules that describe their
// parent kind with spec.parent.schema (kgenctl run --manage-crds).
//
// The schema comes from the CRD object itself, read with one get of the CRD
// by name (RBAC: get on that one customresourcedefinition, which kgenctl
// rbac grants), rather than from the OpenAPI v3 document pkg/schema reads:
// the CRD's openAPIV3Schema is exactly what rules.Options.Schemas takes and
// what kgenctl validate --crd reads offline, so run and validate check a
// rule against the same schema, while the published document is a
// transformation of it (metadata replaced by a reference to ObjectMeta,
// extensions and defaults in another form) that would have to be turned
// back, and could differ. A rule is checked when it starts, and a rule
// that waits because it does not fit is checked again at every try, so a
// CRD fixed later lets it start.
type CRDs struct {
	// Client reads, and with Manage applies, CRDs.
	Client dynamic.Interface
	// Resources maps a parent kind to its resource, whose name and group
	// name its CRD.
	Resources Resources
	// Manage applies the CRD of every rule with spec.parent.schema before
	// the rule starts.
	Manage bool
	// Types, when set, reads the schemas the API server publishes
	// (OpenAPI v3), which the children's templates, and the expressions
	// of a rule whose parent kind is not a custom resource, are checked
	// against. *schema.Source is one; share it with the controller, so
	// that a document is read once for both.
	Types Types

	mu sync.Mutex
	// applied are the rule versions whose CRD was applied.
	applied map[*rules.Rule]bool
	// failed are the rule versions whose last apply of their CRD failed:
	// Prepare answers with that error, without asking the API server,
	// until the backoff ends.
	failed map[*rules.Rule]applyFailure
	// logged are the problems reading schemas that were logged: each
	// once.
	logged map[string]bool
}

// Types reads the schemas the API server publishes.
type Types interface {
	Prefetch(gvks ...schema.GroupVersionKind) error
	Type(gvk schema.GroupVersionKind) (*kschema.Type, error)
}

var _ Types = (*kschema.Source)(nil)

// TypeError says that a rule does not fit the schemas of its kinds.
type TypeError struct {
	// CRD is the name of the parent kind's CustomResourceDefinition, when
	// the rule was checked against it.
	CRD string
	// Err is rules.Rule.CheckSchema's error: a rules.ErrorList naming each
	// field and expression.
	Err error
}

func (e *TypeError) Error() string {
	if e.CRD == "" {
		return fmt.Sprintf("the rule does not fit the schemas of its kinds: %v", e.Err)
	}
	return fmt.Sprintf("the rule does not fit the schemas of its kinds (parent: CustomResourceDefinition %s): %v", e.CRD, e.Err)
}

// Unwrap returns the rule's errors.
func (e *TypeError) Unwrap() error { return e.Err }

// applyFailure is a failed apply of a rule version's CRD.
type applyFailure struct {
	err   error
	tries int
	next  time.Time // when to apply again
}

// The backoff of a CRD apply that failed: from FirstApplyBackoff, doubled
// at every failure, up to MaxApplyBackoff. A CRD the API server refuses
// (its scope cannot change) stays refused until the rule or the CRD
// changes; a new version of the rule is tried at once.
const (
	FirstApplyBackoff = 5 * time.Second
	MaxApplyBackoff   = 5 * time.Minute
)

// Prepare applies the CRD of a rule with spec.parent.schema, with
// server-side apply (field manager kgen), when Manage is set: once per
// version of the rule, and again while its kind is not served (an apply
// that changes nothing costs the server no write). An apply that failed
// is tried again with backoff (FirstApplyBackoff, doubled up to
// MaxApplyBackoff); meanwhile Prepare returns its error. It fits
// controller.Config.Prepare.
func (c *CRDs) Prepare(ctx context.Context, rule *rules.Rule) error {
	if !c.Manage || rule.Parent.Schema == nil {
		return nil
	}
	c.mu.Lock()
	applied := c.applied[rule]
	failed, hasFailed := c.failed[rule]
	c.mu.Unlock()
	if hasFailed && time.Now().Before(failed.next) {
		return failed.err
	}
	if applied {
		if _, err := c.Resources.ResourceFor(rule.Parent.GroupVersionKind); err == nil {
			return nil
		}
	}
	crd, err := rule.CRD()
	if err != nil {
		return err
	}
	err = c.compatible(ctx, rule, crd)
	if err == nil {
		_, err = c.Client.Resource(CRDGVR).Apply(ctx, crd.GetName(), crd, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
	}
	if err != nil {
		err = fmt.Errorf("apply CustomResourceDefinition %s of the rule's parent kind (--manage-crds): %w", crd.GetName(), err)
		tries := failed.tries + 1
		wait := min(FirstApplyBackoff<<min(tries-1, 16), MaxApplyBackoff)
		c.mu.Lock()
		if c.failed == nil {
			c.failed = map[*rules.Rule]applyFailure{}
		}
		c.failed[rule] = applyFailure{err: err, tries: tries, next: time.Now().Add(wait)}
		c.mu.Unlock()
		return err
	}
	c.mu.Lock()
	if c.applied == nil {
		c.applied = map[*rules.Rule]bool{}
	}
	c.applied[rule] = true
	delete(c.failed, rule)
	c.mu.Unlock()
	if !applied {
		klog.FromContext(ctx).Info("Applied the CustomResourceDefinition of the rule's parent kind", "rule", rule.Name, "crd", crd.GetName())
	}
	return nil
}

// compatible refuses a CRD that would change the type of a field of the
// CRD served now: the objects that hold the field keep their values, which
// no longer fit, and from then on every server-side apply to them fails
// (kgen's status writes too: "failed to create typed live object"), so
// their parents would keep a Ready condition that says nothing of it. The
// version compared is the rule's, or the stored one if the CRD has no
// such version yet. A CRD kgen may not read is applied unchecked.
func (c *CRDs) compatible(ctx context.Context, rule *rules.Rule, desired *unstructured.Unstructured) error {
	obj, err := c.Client.Resource(CRDGVR).Get(ctx, desired.GetName(), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsForbidden(err):
		return nil
	case err != nil:
		return fmt.Errorf("read it to compare the schemas: %w", err)
	}
	live, want := &apiextensionsv1.CustomResourceDefinition{}, &apiextensionsv1.CustomResourceDefinition{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, live); err != nil {
		return fmt.Errorf("read it: %w", err)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(desired.Object, want); err != nil {
		return err
	}
	version := rule.Parent.GroupVersionKind.Version
	old := versionSchema(live, version)
	if old == nil {
		for _, v := range live.Spec.Versions {
			if v.Storage && v.Schema != nil {
				old = v.Schema.OpenAPIV3Schema
			}
		}
	}
	changes := typeChanges(old, versionSchema(want, version), "")
	if len(changes) == 0 {
		return nil
	}
	// A status field's type comes from its expression (spec.status), not
	// from spec.parent.schema.
	from := "spec.parent.schema changes"
	if !slices.ContainsFunc(changes, func(c string) bool { return !strings.HasPrefix(c, "status.") }) {
		from = "the rule's status fields (spec.status) change"
	}
	return fmt.Errorf("%s the type of %s: the %s objects that hold it could no longer be written (not even their status), so kgen does not apply it; "+
		"give the field a new name, or migrate those objects and apply the CustomResourceDefinition yourself (kgenctl crd prints it)",
		from, strings.Join(changes, ", "), rule.Parent.GroupVersionKind.Kind)
}

// typeChanges returns "PATH from OLD to NEW" for each field, at the same
// path in both schemas, whose values of the old type the new type does not
// take (an integer field that becomes a number is no change). A field
// only one of them has, or an old one of no declared type, is none.
func typeChanges(old, next *apiextensionsv1.JSONSchemaProps, path string) []string {
	if old == nil || next == nil {
		return nil
	}
	var out []string
	if from, to := typeOf(old), typeOf(next); from != "" && to != "" && !takes(to, from) {
		name := path
		if name == "" {
			name = "the object"
		}
		out = append(out, fmt.Sprintf("%s from %s to %s", name, from, to))
		return out // what is under it changed with it
	}
	join := func(name string) string {
		if path == "" {
			return name
		}
		return path + "." + name
	}
	for _, name := range slices.Sorted(maps.Keys(old.Properties)) {
		if n, ok := next.Properties[name]; ok {
			o := old.Properties[name]
			out = append(out, typeChanges(&o, &n, join(name))...)
		}
	}
	if old.Items != nil && next.Items != nil {
		out = append(out, typeChanges(old.Items.Schema, next.Items.Schema, path+"[*]")...)
	}
	if old.AdditionalProperties != nil && next.AdditionalProperties != nil {
		out = append(out, typeChanges(old.AdditionalProperties.Schema, next.AdditionalProperties.Schema, join("*"))...)
	}
	return out
}

// typeOf is a schema's type, "int-or-string" for x-kubernetes-int-or-string.
func typeOf(p *apiextensionsv1.JSONSchemaProps) string {
	if p.XIntOrString {
		return "int-or-string"
	}
	return p.Type
}

// takes tells whether every value of type from is a value of type to.
func takes(to, from string) bool {
	return to == from || to == "number" && from == "integer" || to == "int-or-string" && (from == "integer" || from == "string")
}

// Forget drops what c remembers of rule versions that are not in set.
func (c *CRDs) Forget(set []*rules.Rule) {
	c.mu.Lock()
	defer c.mu.Unlock()
	keep := map[*rules.Rule]bool{}
	for _, r := range set {
		keep[r] = true
	}
	for r := range c.applied {
		if !keep[r] {
			delete(c.applied, r)
		}
	}
	for r := range c.failed {
		if !keep[r] {
			delete(c.failed, r)
		}
	}
}

// Check checks a rule against the schemas of its kinds: a *TypeError if
// it does not fit. Its expressions are checked against its parent kind's
// schema: the CRD's, when the kind is a custom resource the cluster serves,
// or else, for a built-in kind or one of an aggregated API, what Types
// publishes. Its children's templates are checked against what Types
// publishes of their kinds. There is nothing to check for a parent kind not
// served (yet), nor for a kind whose schema is not published; nor, with
// Manage, against the served schema of a rule's parent kind with
// spec.parent.schema, whose CRD kgen makes from it. When kgen may not read
// the CRD or the published schemas, that is logged once, and the rest is
// checked. Another error reading the CRD is returned as it is: the caller
// tries again.
func (c *CRDs) Check(ctx context.Context, rule *rules.Rule) error {
	gvk := rule.Parent.GroupVersionKind
	m, err := c.Resources.ResourceFor(gvk)
	if err != nil {
		return nil // not served: the rule waits for it anyway
	}
	// Its CRD, with Manage, is made from spec.parent.schema, which the
	// rule was checked against when it loaded; the CRD served now may be
	// the previous version's, which Prepare is about to replace.
	managed := c.Manage && rule.Parent.Schema != nil
	var props *apiextensionsv1.JSONSchemaProps
	var name string
	if _, builtin := kinds.Builtin(gvk.GroupKind()); !builtin && !managed {
		if props, name, err = c.crdSchema(ctx, rule, m); err != nil {
			return err
		}
	}
	types := c.types(ctx, rule, props == nil && !managed)
	if err := rule.CheckSchema(props, types); err != nil {
		var list rules.ErrorList
		if !errors.As(err, &list) {
			return err
		}
		return &TypeError{CRD: name, Err: err}
	}
	return nil
}

// crdSchema reads the schema of the parent kind's CRD: nil when there is
// none, or kgen may not read it.
func (c *CRDs) crdSchema(ctx context.Context, rule *rules.Rule, m mapper.Mapping) (*apiextensionsv1.JSONSchemaProps, string, error) {
	name := m.Resource + "." + m.Group
	obj, err := c.Client.Resource(CRDGVR).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, "", nil
	case apierrors.IsForbidden(err):
		if c.once("crd " + name) {
			klog.FromContext(ctx).Info("Cannot read the CustomResourceDefinition of a rule's parent kind; its expressions are checked when they run", "rule", rule.Name, "crd", name, "err", err.Error())
		}
		return nil, "", nil
	case err != nil:
		return nil, "", fmt.Errorf("read CustomResourceDefinition %s to check the rule against it: %w", name, err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, crd); err != nil {
		return nil, "", fmt.Errorf("read CustomResourceDefinition %s: %w", name, err)
	}
	props := versionSchema(crd, rule.Parent.GroupVersionKind.Version)
	if props == nil {
		return nil, "", nil
	}
	return props, name, nil
}

// types returns what Types publishes of the rule's children's kinds, and
// of its parent kind with parent; nil without Types. The documents are
// read once for all of them (and kept for the comparisons of the running
// rule); a kind whose document cannot be read is not checked, which is
// logged once per problem.
func (c *CRDs) types(ctx context.Context, rule *rules.Rule, parent bool) func(schema.GroupVersionKind) (*kschema.Type, bool) {
	if c.Types == nil {
		return nil
	}
	var gvks []schema.GroupVersionKind
	if parent {
		gvks = append(gvks, rule.Parent.GroupVersionKind)
	}
	for _, ch := range rule.Children {
		if !slices.Contains(gvks, ch.GroupVersionKind) {
			gvks = append(gvks, ch.GroupVersionKind)
		}
	}
	if err := c.Types.Prefetch(gvks...); err != nil && c.once("types "+err.Error()) {
		klog.FromContext(ctx).Info("Cannot read the published schema of a rule's kinds; its templates are checked when they are applied", "rule", rule.Name, "err", err.Error())
	}
	return func(gvk schema.GroupVersionKind) (*kschema.Type, bool) {
		if !slices.Contains(gvks, gvk) {
			return nil, false
		}
		t, err := c.Types.Type(gvk)
		return t, err == nil && t != nil
	}
}

// once tells whether a problem is new, remembering it.
func (c *CRDs) once(problem string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.logged[problem] {
		return false
	}
	if c.logged == nil {
		c.logged = map[string]bool{}
	}
	c.logged[problem] = true
	return true
}

// versionSchema returns the schema a CRD declares for a version; nil when
// it declares none.
func versionSchema(crd *apiextensionsv1.CustomResourceDefinition, version string) *apiextensionsv1.JSONSchemaProps {
	for _, v := range crd.Spec.Versions {
		if v.Name == version && v.Schema != nil {
			return v.Schema.OpenAPIV3Schema
		}
	}
	return nil
}
