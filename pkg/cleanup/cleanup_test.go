package cleanup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	"kgen.dev/kgen/pkg/controller"
	"kgen.dev/kgen/pkg/mapper"
	"kgen.dev/kgen/pkg/reconcile"
	"kgen.dev/kgen/rules"
)

var (
	webapps   = mapper.Mapping{Group: "example.com", Version: "v1", Kind: "WebApp", Resource: "webapps", Namespaced: true}
	tenants   = mapper.Mapping{Group: "example.com", Version: "v1", Kind: "Tenant", Resource: "tenants"}
	ruleKinds = mapper.Mapping{Group: "kgen.dev", Version: "v1alpha1", Kind: "Rule", Resource: "rules"}
	roles     = mapper.Mapping{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole", Resource: "clusterroles"}
	widgets   = mapper.Mapping{Group: "example.com", Version: "v1", Kind: "Widget", Resource: "widgets", Namespaced: true}
)

// fakeResolver serves the mappings it holds and nothing else.
type fakeResolver []mapper.Mapping

func (f fakeResolver) ResourceFor(gvk schema.GroupVersionKind) (mapper.Mapping, error) {
	for _, m := range f {
		if m.GroupVersionKind() == gvk {
			return m, nil
		}
	}
	return mapper.Mapping{}, &mapper.NotFoundError{Ref: gvk.String(), Searched: "the test's kinds"}
}

// Resolve answers "group/Kind", as mapper.AnyVersion asks.
func (f fakeResolver) Resolve(ref string) ([]mapper.Mapping, error) {
	var out []mapper.Mapping
	for _, m := range f {
		if m.Group+"/"+m.Kind == ref {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		return nil, &mapper.NotFoundError{Ref: ref, Searched: "the test's kinds"}
	}
	return out, nil
}

// forbidWebApps refuses every list of WebApps, but in the namespaces
// given.
func forbidWebApps(allowed ...string) func(*dynamicfake.FakeDynamicClient) {
	return func(c *dynamicfake.FakeDynamicClient) {
		c.PrependReactor("list", "webapps", func(a clienttesting.Action) (bool, runtime.Object, error) {
			if slices.Contains(allowed, a.GetNamespace()) {
				return false, nil, nil
			}
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "example.com", Resource: "webapps"}, "", fmt.Errorf("no list in %s", a.GetNamespace()))
		})
	}
}

func rule(name, kind, extra string) string {
	return fmt.Sprintf(`apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: %s}
spec:
  parent:
    apiVersion: example.com/v1
    kind: %s
%s  children:
  - id: role
    template:
      apiVersion: rbac.authorization.k8s.io/v1
      kind: ClusterRole
      metadata: {name: "${parent.metadata.name}"}
`, name, kind, extra)
}

func parent(kind, ns, name string, finalizers ...string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("example.com/v1")
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetFinalizers(finalizers)
	return u
}

// withUID gives a parent a UID, for its children to name.
func withUID(u *unstructured.Unstructured, uid string) *unstructured.Unstructured {
	u.SetUID(types.UID(uid))
	return u
}

// child is an object of kind (ClusterRole or Widget) that a rule made for
// the parent of UID parentUID.
func child(kind, ns, name, rule, parentUID string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(map[string]string{"ClusterRole": "rbac.authorization.k8s.io/v1", "Widget": "example.com/v1"}[kind])
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetLabels(map[string]string{reconcile.LabelManagedBy: reconcile.ManagedBy, reconcile.LabelRule: rule, reconcile.LabelParentUID: parentUID})
	return u
}

func labelled(u *unstructured.Unstructured, key, value string) *unstructured.Unstructured {
	u.SetLabels(map[string]string{key: value})
	return u
}

func TestRelease(t *testing.T) {
	// Two kgens' parents of one kind: this kgen's rule webapp (tier web,
	// in team-a and team-b), a rule gone it removed, a rule watched it
	// recorded only the parents of, and another kgen's rule other. The
	// record says where this kgen's rules made children: ClusterRoles,
	// Widgets in team-b, and a kind no longer served.
	twoKgens := []*unstructured.Unstructured{
		withUID(parent("WebApp", "team-a", "ours", Finalizer), "uid-ours"), child("ClusterRole", "", "ours", "webapp", "uid-ours"),
		withUID(parent("WebApp", "team-a", "removed", Finalizer), "uid-removed"), child("ClusterRole", "", "removed", "gone", "uid-removed"),
		withUID(parent("WebApp", "team-a", "watched", Finalizer), "uid-watched"), child("ClusterRole", "", "watched", "watched", "uid-watched"),
		withUID(parent("WebApp", "team-b", "theirs", Finalizer), "uid-theirs"), child("ClusterRole", "", "theirs", "other", "uid-theirs"),
		withUID(parent("WebApp", "team-b", "theirs-too", Finalizer), "uid-theirs-too"), child("Widget", "team-b", "theirs-too", "other", "uid-theirs-too"),
		withUID(parent("WebApp", "team-b", "mixed", Finalizer), "uid-mixed"), child("ClusterRole", "", "mixed", "other", "uid-mixed"), child("Widget", "team-b", "mixed", "webapp", "uid-mixed"),
		withUID(parent("WebApp", "team-b", "unnamed", Finalizer), "uid-unnamed"), child("ClusterRole", "", "unnamed", "", "uid-unnamed"),
		withUID(parent("WebApp", "team-b", "childless", Finalizer), "uid-childless"),
		// Selected by webapp: its own, whoever made its children.
		withUID(labelled(parent("WebApp", "team-b", "selected", Finalizer), "tier", "web"), "uid-selected"), child("ClusterRole", "", "selected", "other", "uid-selected"),
	}
	made := &controller.Recorded{
		Children: map[string][]controller.ChildScope{
			"webapp": {{GroupVersionKind: roles.GroupVersionKind()}, {GroupVersionKind: widgets.GroupVersionKind(), Namespace: "team-b"}},
			"gone":   {{GroupVersionKind: roles.GroupVersionKind()}, {GroupVersionKind: schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Gone"}}},
		},
		Parents: map[string][]controller.ChildScope{
			"webapp":  {{GroupVersionKind: webapps.GroupVersionKind(), Namespace: "team-a"}},
			"watched": {{GroupVersionKind: webapps.GroupVersionKind(), Namespace: "team-a"}},
		},
	}
	allReleased := []string{"webapps.example.com team-a/ours", "webapps.example.com team-a/removed", "webapps.example.com team-a/watched",
		"webapps.example.com team-b/childless", "webapps.example.com team-b/mixed", "webapps.example.com team-b/selected",
		"webapps.example.com team-b/theirs", "webapps.example.com team-b/theirs-too", "webapps.example.com team-b/unnamed"}
	oursReleased := slices.DeleteFunc(slices.Clone(allReleased), func(s string) bool { return strings.HasSuffix(s, "/theirs") || strings.HasSuffix(s, "/theirs-too") })
	webappRule := rule("webapp", "WebApp", "    selector: {matchLabels: {tier: web}}\n    namespaces: [team-a, team-b]\n")
	tests := []struct {
		name  string
		rules []string
		// withObjects serves Rule objects, ruleObjects (YAML documents).
		withObjects bool
		ruleObjects []string
		served      fakeResolver
		objects     []*unstructured.Unstructured
		reactors    func(*dynamicfake.FakeDynamicClient)
		// record is kgen's record, or recordErr the error reading it.
		record    *controller.Recorded
		recordErr error
		// goneNamespaces do not exist; every other one does.
		goneNamespaces []string
		releaseOthers  bool
		// want maps "kind ns/name" to the finalizers left.
		want         map[string][]string
		wantReleased []string
		// wantOthers are the parents left to another kgen.
		wantOthers  []string
		wantSkipped string
		wantErr     string
	}{{
		name:   "only kgen's finalizer goes, whatever the labels",
		rules:  []string{webappRule},
		served: fakeResolver{webapps},
		objects: []*unstructured.Unstructured{
			parent("WebApp", "team-a", "shop", "example.com/other", Finalizer, "example.com/last"),
			parent("WebApp", "team-b", "relabelled", Finalizer),
			parent("WebApp", "team-a", "untouched", "example.com/other"),
		},
		want: map[string][]string{
			"WebApp team-a/shop":       {"example.com/other", "example.com/last"},
			"WebApp team-b/relabelled": nil,
			"WebApp team-a/untouched":  {"example.com/other"},
		},
		wantReleased: []string{"webapps.example.com team-a/shop", "webapps.example.com team-b/relabelled"},
	}, {
		name:   "outside the rule's namespaces",
		rules:  []string{webappRule},
		served: fakeResolver{webapps},
		objects: []*unstructured.Unstructured{
			parent("WebApp", "team-c", "elsewhere", Finalizer),
		},
		want: map[string][]string{"WebApp team-c/elsewhere": {Finalizer}},
	}, {
		name:   "a rule for every namespace widens another's",
		rules:  []string{webappRule, rule("all-webapps", "WebApp", "    selector: {matchLabels: {tier: db}}\n")},
		served: fakeResolver{webapps},
		objects: []*unstructured.Unstructured{
			parent("WebApp", "team-c", "elsewhere", Finalizer),
		},
		want:         map[string][]string{"WebApp team-c/elsewhere": nil},
		wantReleased: []string{"webapps.example.com team-c/elsewhere"},
	}, {
		name:   "a cluster-scoped parent",
		rules:  []string{rule("tenant", "Tenant", "")},
		served: fakeResolver{tenants},
		objects: []*unstructured.Unstructured{
			parent("Tenant", "", "acme", Finalizer, "example.com/other"),
		},
		want:         map[string][]string{"Tenant acme": {"example.com/other"}},
		wantReleased: []string{"tenants.example.com acme"},
	}, {
		name:         "a kind that is not served is skipped",
		rules:        []string{webappRule, rule("tenant", "Tenant", "")},
		served:       fakeResolver{tenants},
		objects:      []*unstructured.Unstructured{parent("Tenant", "", "acme", Finalizer)},
		want:         map[string][]string{"Tenant acme": nil},
		wantSkipped:  "example.com/v1/WebApp (rule webapp) is not served",
		wantReleased: []string{"tenants.example.com acme"},
	}, {
		name:   "the finalizers change between the read and the patch",
		rules:  []string{rule("tenant", "Tenant", "")},
		served: fakeResolver{tenants},
		objects: []*unstructured.Unstructured{
			parent("Tenant", "", "acme", "example.com/other", Finalizer),
		},
		reactors: func(c *dynamicfake.FakeDynamicClient) {
			// Another controller adds its finalizer in front just
			// before kgen's first patch, which then fails its test.
			raced := false
			c.PrependReactor("patch", "tenants", func(clienttesting.Action) (bool, runtime.Object, error) {
				if raced {
					return false, nil, nil
				}
				raced = true
				gvr := tenants.GroupVersionResource()
				obj, err := c.Tracker().Get(gvr, "", "acme")
				if err != nil {
					return true, nil, err
				}
				u := obj.(*unstructured.Unstructured)
				u.SetFinalizers(append([]string{"example.com/first"}, u.GetFinalizers()...))
				if err := c.Tracker().Update(gvr, u, ""); err != nil {
					return true, nil, err
				}
				return true, nil, apierrors.NewInvalid(schema.GroupKind{Group: "example.com", Kind: "Tenant"}, "acme", nil)
			})
		},
		want:         map[string][]string{"Tenant acme": {"example.com/first", "example.com/other"}},
		wantReleased: []string{"tenants.example.com acme"},
	}, {
		name:   "a kind that may not be listed is an error; the others are still released",
		rules:  []string{webappRule, rule("tenant", "Tenant", "")},
		served: fakeResolver{webapps, tenants},
		objects: []*unstructured.Unstructured{
			parent("Tenant", "", "acme", Finalizer),
		},
		reactors:     forbidWebApps(),
		want:         map[string][]string{"Tenant acme": nil},
		wantReleased: []string{"tenants.example.com acme"},
		wantErr:      "list webapps.example.com in namespace team-a: webapps.example.com is forbidden",
	}, {
		name:        "a Rule object's parents are released, with no rules files",
		withObjects: true,
		ruleObjects: []string{rule("tenant", "Tenant", "")},
		served:      fakeResolver{tenants, ruleKinds},
		objects: []*unstructured.Unstructured{
			parent("Tenant", "", "acme", Finalizer, "example.com/other"),
		},
		want:         map[string][]string{"Tenant acme": {"example.com/other"}},
		wantReleased: []string{"tenants.example.com acme"},
	}, {
		name:        "Rule objects and files together",
		rules:       []string{webappRule},
		withObjects: true,
		ruleObjects: []string{rule("tenant", "Tenant", "")},
		served:      fakeResolver{webapps, tenants, ruleKinds},
		objects: []*unstructured.Unstructured{
			parent("Tenant", "", "acme", Finalizer),
			parent("WebApp", "team-a", "shop", Finalizer),
		},
		want:         map[string][]string{"Tenant acme": nil, "WebApp team-a/shop": nil},
		wantReleased: []string{"tenants.example.com acme", "webapps.example.com team-a/shop"},
	}, {
		name:        "a file rule wins over a Rule object of its name",
		rules:       []string{webappRule},
		withObjects: true,
		// For every namespace, but the file's rule, for two, ran.
		ruleObjects: []string{rule("webapp", "WebApp", "")},
		served:      fakeResolver{webapps, ruleKinds},
		objects: []*unstructured.Unstructured{
			parent("WebApp", "team-c", "elsewhere", Finalizer),
			parent("WebApp", "team-b", "shop", Finalizer),
		},
		want:         map[string][]string{"WebApp team-c/elsewhere": {Finalizer}, "WebApp team-b/shop": nil},
		wantReleased: []string{"webapps.example.com team-b/shop"},
		wantSkipped:  "Rule webapp is left out: a rules file has a rule of that name",
	}, {
		name:        "an invalid Rule object still names its parent kind",
		withObjects: true,
		ruleObjects: []string{strings.Replace(rule("broken", "WebApp", "    namespaces: [team-a]\n"), "${parent.metadata.name}", "${parent.metadata.nmae +}", 1)},
		served:      fakeResolver{webapps, ruleKinds},
		objects: []*unstructured.Unstructured{
			parent("WebApp", "team-a", "shop", Finalizer),
			parent("WebApp", "team-b", "other", Finalizer),
		},
		want:         map[string][]string{"WebApp team-a/shop": nil, "WebApp team-b/other": {Finalizer}},
		wantReleased: []string{"webapps.example.com team-a/shop"},
		wantSkipped:  "Rule broken is invalid ('kubectl get rule broken -o yaml' says why); the objects of its parent kind example.com/v1/WebApp are looked at all the same",
	}, {
		name:        "a Rule object that names no parent kind is left out",
		withObjects: true,
		ruleObjects: []string{strings.Replace(rule("kindless", "Tenant", ""), "    kind: Tenant\n", "", 1)},
		served:      fakeResolver{tenants, ruleKinds},
		objects:     []*unstructured.Unstructured{parent("Tenant", "", "acme", Finalizer)},
		want:        map[string][]string{"Tenant acme": {Finalizer}},
		wantSkipped: "Rule kindless is left out: it is invalid, and its spec.parent names no apiVersion and kind",
	}, {
		name:         "Rule objects that are not served",
		rules:        []string{rule("tenant", "Tenant", "")},
		withObjects:  true,
		served:       fakeResolver{tenants},
		objects:      []*unstructured.Unstructured{parent("Tenant", "", "acme", Finalizer)},
		want:         map[string][]string{"Tenant acme": nil},
		wantReleased: []string{"tenants.example.com acme"},
		wantSkipped:  "Rule objects (rules.kgen.dev) are not served",
	}, {
		name:        "Rule objects that may not be listed are an error; the files' parents are still released",
		rules:       []string{rule("tenant", "Tenant", "")},
		withObjects: true,
		served:      fakeResolver{tenants, ruleKinds},
		objects:     []*unstructured.Unstructured{parent("Tenant", "", "acme", Finalizer)},
		reactors: func(c *dynamicfake.FakeDynamicClient) {
			c.PrependReactor("list", "rules", func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "kgen.dev", Resource: "rules"}, "", errors.New("no list"))
			})
		},
		want:         map[string][]string{"Tenant acme": nil},
		wantReleased: []string{"tenants.example.com acme"},
		wantErr:      "list Rule objects: rules.kgen.dev is forbidden",
	}, {
		name:        "Rule objects are not read unless asked",
		ruleObjects: []string{rule("tenant", "Tenant", "")},
		served:      fakeResolver{tenants, ruleKinds},
		objects:     []*unstructured.Unstructured{parent("Tenant", "", "acme", Finalizer)},
		want:        map[string][]string{"Tenant acme": {Finalizer}},
	}, {
		name: "a recorded kind whose version is no longer served is listed in the version served",
		record: &controller.Recorded{Parents: map[string][]controller.ChildScope{
			"gone": {{GroupVersionKind: schema.GroupVersionKind{Group: "example.com", Version: "v1alpha1", Kind: "WebApp"}, Namespace: "team-c"}},
		}},
		rules:        []string{rule("tenant", "Tenant", "")},
		served:       fakeResolver{webapps, tenants},
		objects:      []*unstructured.Unstructured{parent("WebApp", "team-c", "left", Finalizer)},
		want:         map[string][]string{"WebApp team-c/left": nil},
		wantReleased: []string{"webapps.example.com team-c/left"},
	}, {
		name:  "where the record says a removed rule watched, its parents are released too",
		rules: []string{webappRule},
		// gone watched WebApps in team-c and Tenants; webapp still
		// covers team-a.
		record: &controller.Recorded{Parents: map[string][]controller.ChildScope{
			"gone":   {{GroupVersionKind: webapps.GroupVersionKind(), Namespace: "team-c"}, {GroupVersionKind: tenants.GroupVersionKind()}},
			"webapp": {{GroupVersionKind: webapps.GroupVersionKind(), Namespace: "team-a"}},
		}},
		served: fakeResolver{webapps, tenants},
		objects: []*unstructured.Unstructured{
			parent("WebApp", "team-c", "left", Finalizer),
			parent("WebApp", "team-d", "never", Finalizer),
			parent("Tenant", "", "acme", Finalizer),
		},
		want:         map[string][]string{"WebApp team-c/left": nil, "WebApp team-d/never": {Finalizer}, "Tenant acme": nil},
		wantReleased: []string{"tenants.example.com acme", "webapps.example.com team-c/left"},
	}, {
		name:   "a recorded place that may not be listed is a note",
		rules:  []string{rule("tenant", "Tenant", "")},
		record: &controller.Recorded{Parents: map[string][]controller.ChildScope{"gone": {{GroupVersionKind: webapps.GroupVersionKind(), Namespace: "team-c"}}}},
		served: fakeResolver{webapps, tenants},
		objects: []*unstructured.Unstructured{
			parent("Tenant", "", "acme", Finalizer),
		},
		reactors:     forbidWebApps(),
		want:         map[string][]string{"Tenant acme": nil},
		wantReleased: []string{"tenants.example.com acme"},
		wantSkipped:  "webapps.example.com in namespace team-c (recorded for rule gone) may not be listed",
	}, {
		name:   "a kind kgen may not list and its record says it never watched is a note",
		rules:  []string{webappRule, rule("tenant", "Tenant", "")},
		record: &controller.Recorded{Parents: map[string][]controller.ChildScope{"tenant": {{GroupVersionKind: tenants.GroupVersionKind()}}}},
		served: fakeResolver{webapps, tenants},
		objects: []*unstructured.Unstructured{
			parent("Tenant", "", "acme", Finalizer),
		},
		reactors:     forbidWebApps(),
		want:         map[string][]string{"Tenant acme": nil},
		wantReleased: []string{"tenants.example.com acme"},
		wantSkipped:  "webapps.example.com in namespace team-a (rule webapp) may not be listed, and kgen's record says no rule of kgen ever watched there",
	}, {
		name:   "a namespace that is gone, where kgen may not list any more, is a note",
		rules:  []string{webappRule},
		record: &controller.Recorded{Parents: map[string][]controller.ChildScope{"webapp": {{GroupVersionKind: webapps.GroupVersionKind(), Namespace: "team-a"}, {GroupVersionKind: webapps.GroupVersionKind(), Namespace: "team-b"}}}},
		served: fakeResolver{webapps},
		objects: []*unstructured.Unstructured{
			parent("WebApp", "team-b", "shop", Finalizer),
		},
		goneNamespaces: []string{"team-a"},
		reactors:       forbidWebApps("team-b"),
		want:           map[string][]string{"WebApp team-b/shop": nil},
		wantReleased:   []string{"webapps.example.com team-b/shop"},
		wantSkipped:    "webapps.example.com in namespace team-a (rule webapp) may not be listed, and the namespace is gone",
	}, {
		name:     "an empty record tells nothing: a kind kgen may not list is an error",
		rules:    []string{webappRule},
		record:   &controller.Recorded{},
		served:   fakeResolver{webapps},
		reactors: forbidWebApps(),
		wantErr:  "list webapps.example.com in namespace team-a: webapps.example.com is forbidden",
	}, {
		name:     "a rule whose child kinds are recorded ran, with a kgen from before parent scopes: a kind it may not list is an error",
		rules:    []string{webappRule, rule("tenant", "Tenant", "")},
		record:   &controller.Recorded{Children: map[string][]controller.ChildScope{"webapp": {{GroupVersionKind: roles.GroupVersionKind()}}}, Parents: map[string][]controller.ChildScope{"tenant": {{GroupVersionKind: tenants.GroupVersionKind()}}}},
		served:   fakeResolver{webapps, tenants},
		reactors: forbidWebApps(),
		wantErr:  "list webapps.example.com in namespace team-a: webapps.example.com is forbidden",
	}, {
		name:   "a kind kgen may not list where its record says it watched is an error",
		rules:  []string{webappRule},
		record: &controller.Recorded{Parents: map[string][]controller.ChildScope{"webapp": {{GroupVersionKind: webapps.GroupVersionKind(), Namespace: "team-b"}}}},
		served: fakeResolver{webapps},
		objects: []*unstructured.Unstructured{
			parent("WebApp", "team-a", "shop", Finalizer),
		},
		reactors:     forbidWebApps("team-a"),
		want:         map[string][]string{"WebApp team-a/shop": nil},
		wantReleased: []string{"webapps.example.com team-a/shop"},
		wantErr:      "list webapps.example.com in namespace team-b: webapps.example.com is forbidden",
	}, {
		name:         "a record that cannot be read is a note",
		rules:        []string{rule("tenant", "Tenant", "")},
		recordErr:    errors.New("configmaps \"kgen-state\" is forbidden"),
		served:       fakeResolver{tenants},
		objects:      []*unstructured.Unstructured{parent("Tenant", "", "acme", Finalizer)},
		want:         map[string][]string{"Tenant acme": nil},
		wantReleased: []string{"tenants.example.com acme"},
		wantSkipped:  "kgen's record cannot be read",
	}, {
		name:    "another kgen's parents keep the finalizer; this kgen's, also of rules it removed, and those it selects, do not",
		rules:   []string{webappRule},
		record:  made,
		served:  fakeResolver{webapps, roles, widgets},
		objects: twoKgens,
		want: map[string][]string{"WebApp team-a/ours": nil, "WebApp team-a/removed": nil, "WebApp team-a/watched": nil,
			"WebApp team-b/theirs": {Finalizer}, "WebApp team-b/theirs-too": {Finalizer}, "WebApp team-b/mixed": nil,
			"WebApp team-b/unnamed": nil, "WebApp team-b/childless": nil, "WebApp team-b/selected": nil},
		wantReleased: oursReleased,
		wantOthers:   []string{"webapps.example.com team-b/theirs", "webapps.example.com team-b/theirs-too"},
	}, {
		name:   "another kgen's parent being deleted is left to it too",
		rules:  []string{webappRule},
		record: made,
		served: fakeResolver{webapps, roles, widgets},
		objects: []*unstructured.Unstructured{
			func() *unstructured.Unstructured {
				p := withUID(parent("WebApp", "team-b", "theirs", Finalizer), "uid-theirs")
				p.SetDeletionTimestamp(&metav1.Time{})
				return p
			}(),
			child("ClusterRole", "", "theirs", "other", "uid-theirs"),
		},
		want:       map[string][]string{"WebApp team-b/theirs": {Finalizer}},
		wantOthers: []string{"webapps.example.com team-b/theirs"},
	}, {
		name:         "without the record, no parent is another kgen's",
		rules:        []string{webappRule},
		served:       fakeResolver{webapps, roles, widgets},
		objects:      twoKgens,
		want:         map[string][]string{"WebApp team-b/theirs": nil},
		wantReleased: allReleased,
	}, {
		name:          "asked to, another kgen's parents are released too",
		rules:         []string{webappRule},
		record:        made,
		releaseOthers: true,
		served:        fakeResolver{webapps, roles, widgets},
		objects:       twoKgens,
		want:          map[string][]string{"WebApp team-b/theirs": nil},
		wantReleased:  allReleased,
	}, {
		name:    "children that may not be listed: every parent is released, with a note",
		rules:   []string{webappRule},
		record:  made,
		served:  fakeResolver{webapps, roles, widgets},
		objects: twoKgens,
		reactors: func(c *dynamicfake.FakeDynamicClient) {
			c.PrependReactor("list", "widgets", func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "example.com", Resource: "widgets"}, "", errors.New("no list"))
			})
		},
		want:         map[string][]string{"WebApp team-b/theirs": nil},
		wantReleased: allReleased,
		wantSkipped:  "the children of kgen's rules in example.com/v1 Widget team-b cannot be listed",
	}, {
		name:    "children that cannot be listed otherwise: every parent is released, with a note, and no other place is listed",
		rules:   []string{webappRule},
		record:  made,
		served:  fakeResolver{webapps, roles, widgets},
		objects: twoKgens,
		reactors: func(c *dynamicfake.FakeDynamicClient) {
			c.PrependReactor("list", "clusterroles", func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewServiceUnavailable("etcd is away")
			})
			c.PrependReactor("list", "widgets", func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, errors.New("widgets listed after the evidence was lost")
			})
		},
		want:         map[string][]string{"WebApp team-b/theirs": nil},
		wantReleased: allReleased,
		wantSkipped:  "the children of kgen's rules in rbac.authorization.k8s.io/v1 ClusterRole cannot be listed (etcd is away)",
	}, {
		name:    "a child kind that went away meanwhile is skipped",
		rules:   []string{webappRule},
		record:  made,
		served:  fakeResolver{webapps, roles, widgets},
		objects: twoKgens[:9], // theirs-too without its Widget
		reactors: func(c *dynamicfake.FakeDynamicClient) {
			c.PrependReactor("list", "widgets", func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: "example.com", Resource: "widgets"}, "")
			})
		},
		want:         map[string][]string{"WebApp team-b/theirs": {Finalizer}, "WebApp team-b/theirs-too": nil},
		wantReleased: []string{"webapps.example.com team-a/ours", "webapps.example.com team-a/removed", "webapps.example.com team-a/watched", "webapps.example.com team-b/theirs-too"},
		wantOthers:   []string{"webapps.example.com team-b/theirs"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			var loaded []*rules.Rule
			for i, text := range tt.rules {
				rs, err := rules.Parse(fmt.Sprintf("rules-%d.yaml", i), []byte(text), rules.Options{})
				if err != nil {
					t.Fatal(err)
				}
				loaded = append(loaded, rs...)
			}
			objects := slices.Clone(tt.objects)
			for _, doc := range tt.ruleObjects {
				u := &unstructured.Unstructured{}
				if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
					t.Fatal(err)
				}
				objects = append(objects, u)
			}
			client := newClient(objects...)
			// Every namespace exists, but those the test deleted.
			client.PrependReactor("get", "namespaces", func(a clienttesting.Action) (bool, runtime.Object, error) {
				name := a.(clienttesting.GetAction).GetName()
				if slices.Contains(tt.goneNamespaces, name) {
					return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, name)
				}
				ns := &unstructured.Unstructured{}
				ns.SetAPIVersion("v1")
				ns.SetKind("Namespace")
				ns.SetName(name)
				return true, ns, nil
			})
			if tt.reactors != nil {
				tt.reactors(client)
			}
			src := Sources{Files: loaded, RuleObjects: tt.withObjects, ReleaseOthers: tt.releaseOthers}
			if tt.record != nil || tt.recordErr != nil {
				src.Record = fakeRecord{tt.record, tt.recordErr}
			}
			res, err := Release(ctx, client, tt.served, src)
			if tt.wantErr == "" && err != nil {
				t.Fatalf("Release: %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Release error = %v, want one containing %q", err, tt.wantErr)
			}
			var released []string
			for _, o := range res.Released {
				released = append(released, o.String())
			}
			slices.Sort(released)
			if !slices.Equal(released, tt.wantReleased) {
				t.Errorf("released %q, want %q", released, tt.wantReleased)
			}
			var others []string
			for _, o := range res.Others {
				others = append(others, o.String())
			}
			slices.Sort(others)
			if !slices.Equal(others, tt.wantOthers) {
				t.Errorf("left to another kgen %q, want %q", others, tt.wantOthers)
			}
			if skipped := strings.Join(res.Skipped, "\n"); !strings.Contains(skipped, tt.wantSkipped) || (tt.wantSkipped == "") != (skipped == "") {
				t.Errorf("skipped %q, want %q", skipped, tt.wantSkipped)
			}
			for key, want := range tt.want {
				if got := finalizersOf(t, client, key); !slices.Equal(got, want) {
					t.Errorf("%s has finalizers %q, want %q", key, got, want)
				}
			}

			// Once more: nothing is left to release, and nothing changes.
			again, _ := Release(ctx, client, tt.served, src)
			if len(again.Released) != 0 {
				t.Errorf("a second Release released %v", again.Released)
			}
		})
	}
}

// fakeRecord is a RecordLoader with a fixed answer.
type fakeRecord struct {
	rec *controller.Recorded
	err error
}

func (f fakeRecord) Load(context.Context) (controller.Recorded, error) {
	if f.err != nil {
		return controller.Recorded{}, f.err
	}
	return *f.rec, nil
}

func newClient(objs ...*unstructured.Unstructured) *dynamicfake.FakeDynamicClient {
	var objects []runtime.Object
	for _, o := range objs {
		objects = append(objects, o)
	}
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		webapps.GroupVersionResource():   "WebAppList",
		tenants.GroupVersionResource():   "TenantList",
		roles.GroupVersionResource():     "ClusterRoleList",
		widgets.GroupVersionResource():   "WidgetList",
		ruleKinds.GroupVersionResource(): "RuleList",
	}, objects...)
}

// finalizersOf reads the finalizers of "Kind ns/name" or "Kind name".
func finalizersOf(t *testing.T, client *dynamicfake.FakeDynamicClient, key string) []string {
	t.Helper()
	kind, ref, _ := strings.Cut(key, " ")
	ns, name, found := strings.Cut(ref, "/")
	if !found {
		ns, name = "", ref
	}
	gvr := map[string]schema.GroupVersionResource{"WebApp": webapps.GroupVersionResource(), "Tenant": tenants.GroupVersionResource()}[kind]
	var ri = client.Resource(gvr)
	var u *unstructured.Unstructured
	var err error
	if ns == "" {
		u, err = ri.Get(context.Background(), name, metav1.GetOptions{})
	} else {
		u, err = ri.Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	}
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return u.GetFinalizers()
}

// The children are listed once for every parent, and only when a parent
// that holds the finalizer and that no rule selects asks.
func TestReleaseListsChildrenOnce(t *testing.T) {
	webappRule, err := rules.Parse("rules.yaml", []byte(rule("webapp", "WebApp", "    selector: {matchLabels: {tier: web}}\n")), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	record := fakeRecord{rec: &controller.Recorded{Children: map[string][]controller.ChildScope{"webapp": {{GroupVersionKind: roles.GroupVersionKind()}}}}}
	for _, tt := range []struct {
		name    string
		objects []*unstructured.Unstructured
		want    int
	}{
		{"several parents nothing selects", []*unstructured.Unstructured{
			withUID(parent("WebApp", "team-a", "a", Finalizer), "a"), withUID(parent("WebApp", "team-b", "b", Finalizer), "b"), withUID(parent("WebApp", "team-c", "c", Finalizer), "c")}, 1},
		{"parents without the finalizer", []*unstructured.Unstructured{parent("WebApp", "team-a", "a"), parent("WebApp", "team-b", "b")}, 0},
		{"parents the rule selects", []*unstructured.Unstructured{labelled(parent("WebApp", "team-a", "a", Finalizer), "tier", "web")}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			client := newClient(tt.objects...)
			lists := 0
			client.PrependReactor("list", "clusterroles", func(clienttesting.Action) (bool, runtime.Object, error) {
				lists++
				return false, nil, nil
			})
			if _, err := Release(context.Background(), client, fakeResolver{webapps, roles}, Sources{Files: webappRule, Record: record}); err != nil {
				t.Fatal(err)
			}
			if lists != tt.want {
				t.Errorf("listed the children %d times, want %d", lists, tt.want)
			}
		})
	}
}
