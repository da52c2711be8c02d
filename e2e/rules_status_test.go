//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/printers"

	"kgen.dev/kgen/pkg/reconcile"
)

// Contract §7: a Rule's status (Ready reasons, parent counts), --rules
// files changed to an invalid version, --rule-objects=false, and Rule
// objects read back as rules files.

// gadgetRuleDoc returns a Rule document for parents of kind Gadget (or
// another kind of the group) in one namespace.
func gadgetRuleDoc(name, group, kind, ns, body string) string {
	return fmt.Sprintf(`apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: %s}
spec:
  parent: {apiVersion: %s/v1, kind: %s, namespaces: [%s]}
%s`, name, group, kind, ns, body)
}

// readyIs checks a Rule's Ready condition: its status, reason, and words
// of its message, for the Rule's current generation.
func readyIs(status, reason string, words ...string) func(*unstructured.Unstructured) error {
	return func(o *unstructured.Unstructured) error {
		c := conditionOf(o, "Ready")
		if c == nil || c["status"] != status || c["reason"] != reason || c["observedGeneration"] != o.GetGeneration() {
			return fmt.Errorf("Ready = %v (generation %d), want %s %s", c, o.GetGeneration(), status, reason)
		}
		for _, w := range words {
			if !strings.Contains(fmt.Sprint(c["message"]), w) {
				return fmt.Errorf("Ready message %q does not say %q", c["message"], w)
			}
		}
		return nil
	}
}

// counts checks a Rule's status.parents and status.readyParents.
func counts(parents, ready int64) func(*unstructured.Unstructured) error {
	return func(o *unstructured.Unstructured) error {
		p, _, _ := unstructured.NestedInt64(o.Object, "status", "parents")
		r, _, _ := unstructured.NestedInt64(o.Object, "status", "readyParents")
		if p != parents || r != ready {
			return fmt.Errorf("parents %d, readyParents %d; want %d, %d", p, r, parents, ready)
		}
		return nil
	}
}

// ruleStatusWrites returns the times of a user's writes of a Rule's status
// since a time.
func ruleStatusWrites(t *testing.T, user, rule string, since time.Time) []time.Time {
	t.Helper()
	var out []time.Time
	for _, e := range auditOf(t, user, since) {
		if e.ObjectRef.Resource == "rules" && e.ObjectRef.Subresource == "status" && e.ObjectRef.Name == rule && isWrite(e.Verb) {
			out = append(out, e.StageTimestamp)
		}
	}
	return out
}

// Scenario: a rule whose parent kind, or child kind, is not served yet.
// Its Ready condition says KindNotServed naming the kind; once the CRD is
// installed the rule runs, without a restart.
func TestRuleReadyKindNotServed(t *testing.T) {
	const group = "notserved.example.com"
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	ns := newNamespace(t)
	startControllerWith(t, controllerOptions{RuleObjects: true})
	applyRule(t, gadgetRuleDoc("parent-later", group, "Gadget", ns, configChild("p")))
	widgets := newCRD(t, group, "Widget", "widgets")
	applyRule(t, gadgetRuleDoc("child-later", group, "Widget", ns, `  children:
  - id: gizmo
    template:
      apiVersion: `+group+`/v1
      kind: Gizmo
      metadata:
        name: ${parent.metadata.name}
`))
	waitRuleStatus(t, "parent-later", readyIs("False", "KindNotServed", "Gadget"))
	waitRuleStatus(t, "child-later", readyIs("False", "KindNotServed", "Gizmo"))

	gadgets := newCRD(t, group, "Gadget", "gadgets")
	waitRuleStatus(t, "parent-later", readyIs("True", "Running"))
	create(t, gadgets, gadget(group, ns, "g", map[string]any{}))
	waitFor(t, cmGVR, ns, "g", nil)

	gizmos := newCRD(t, group, "Gizmo", "gizmos")
	waitRuleStatus(t, "child-later", readyIs("True", "Running"))
	create(t, widgets, map[string]any{"apiVersion": group + "/v1", "kind": "Widget", "metadata": map[string]any{"name": "w", "namespace": ns}})
	waitFor(t, gizmos, ns, "w", nil)
}

// Scenario: kgen may not list or watch a child kind of a rule (its own
// RBAC lacks it). The Rule says Ready False, reason Forbidden, naming the
// resource; once kgen is allowed, the rule runs, without a restart.
func TestRuleReadyForbidden(t *testing.T) {
	const group = "ruleforbid.example.com"
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	const user = "kgen-rule-forbidden"
	// Everything kgen needs but secrets.
	allowed := []rbacv1.PolicyRule{
		{APIGroups: []string{"kgen.dev"}, Resources: []string{"rules"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"kgen.dev"}, Resources: []string{"rules/status"}, Verbs: []string{"patch", "update"}},
		{APIGroups: []string{group}, Resources: []string{"gadgets", "gadgets/status", "gadgets/finalizers"}, Verbs: []string{"get", "list", "watch", "patch", "update"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "create", "patch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
	grant(t, user, allowed)
	config, err := env.cp.UserConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	startControllerWith(t, controllerOptions{Config: config, RuleObjects: true})
	applyRule(t, gadgetRuleDoc("forbidden", group, "Gadget", ns, configChild("c")+`  - id: secret
    template:
      apiVersion: v1
      kind: Secret
      metadata:
        name: ${parent.metadata.name}
`))
	create(t, gvr, gadget(group, ns, "f", map[string]any{}))
	waitRuleStatus(t, "forbidden", readyIs("False", "Forbidden", "secrets", "forbidden", user))

	grant(t, user, append(allowed, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch", "create", "patch", "delete"}}))
	waitRuleStatus(t, "forbidden", readyIs("True", "Running"))
	waitFor(t, secretGVR, ns, "f", nil)
}

// Scenario (contract §6 "Failures are visible and bounded", §7 Rule status,
// through a change of kgen's grants): kgen may list its parent kind but not
// watch it, a common slip in a hand-written Role. Each list works and the
// watch after it is refused at once, at every step of the reflector's
// backoff. The Rule says Forbidden, and kgen logs it once, not at each
// retry (it did, as each list made it forget the failure). Once kgen may
// watch, the rule runs and follows a new parent.
func TestRuleWatchRefusedListAllowed(t *testing.T) {
	const group = "rulenowatch.example.com"
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	const user = "kgen-no-watch"
	allowed := func(gadgetVerbs ...string) []rbacv1.PolicyRule {
		return []rbacv1.PolicyRule{
			{APIGroups: []string{"kgen.dev"}, Resources: []string{"rules"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"kgen.dev"}, Resources: []string{"rules/status"}, Verbs: []string{"patch", "update"}},
			{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "create", "patch", "update", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
			{APIGroups: []string{group}, Resources: []string{"gadgets", "gadgets/status", "gadgets/finalizers"}, Verbs: gadgetVerbs},
		}
	}
	grant(t, user, allowed("get", "list", "patch", "update"))
	waitCan(t, user, false, authorizationv1.ResourceAttributes{Verb: "watch", Group: group, Resource: "gadgets", Namespace: ns})
	kubeconfig, err := env.cp.WriteKubeconfig(user+".kubeconfig", user)
	if err != nil {
		t.Fatal(err)
	}
	create(t, gvr, gadget(group, ns, "g", map[string]any{}))
	p := startKgenWith(t, user, kubeconfig, "-n", ns)
	applyRule(t, gadgetRuleDoc("nowatch", group, "Gadget", ns, configChild("c")))
	waitRuleStatus(t, "nowatch", readyIs("False", "Forbidden", "does not see changes", "gadgets", "forbidden", user))

	failures := func() (lines []string) {
		for _, line := range strings.Split(p.output.String(), "\n") {
			if strings.Contains(line, "Cannot list or watch") && strings.Contains(line, "gadgets") {
				lines = append(lines, line)
			}
		}
		return lines
	}
	// 45 s: the reflector lists and is refused its watch about 6 times
	// (backoff 0.8 s, doubling, at most 30 s).
	for range 45 {
		time.Sleep(time.Second)
		o := get(t, ruleGVR, "", "nowatch")
		if err := readyIs("False", "Forbidden")(o); err != nil {
			t.Errorf("while kgen may list but not watch its parents: %v", err)
			break
		}
	}
	if lines := failures(); len(lines) > 1 {
		t.Errorf("the refused watch was logged %d times in 45 s, want once a minute:\n%s", len(lines), strings.Join(lines, "\n"))
	}

	grant(t, user, allowed("get", "list", "watch", "patch", "update"))
	eventually(t, 60*time.Second, func() (bool, error) {
		err := readyIs("True", "Running")(get(t, ruleGVR, "", "nowatch"))
		return err == nil, err
	}, "the rule to run once kgen may watch its parents")
	create(t, gvr, gadget(group, ns, "h", map[string]any{}))
	waitFor(t, cmGVR, ns, "h", nil)
}

// Scenario: the parent kind's API fails (a conversion webhook that cannot
// be reached, so the rule's version of its objects cannot be read). The
// rule is not forbidden and its kind is served: it says Ready False,
// reason Waiting.
func TestRuleReadyWaiting(t *testing.T) {
	const group = "rulewait.example.com"
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	ns := newNamespace(t)
	preserve := true
	anything := &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: &preserve}}
	url := "https://127.0.0.1:1/convert"
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "gadgets." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: "Gadget", ListKind: "GadgetList", Plural: "gadgets", Singular: "gadget"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{Name: "v1", Served: true, Storage: true, Schema: anything},
				{Name: "v2", Served: true, Schema: anything},
			},
			Conversion: &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{ClientConfig: &apiextensionsv1.WebhookClientConfig{URL: &url}, ConversionReviewVersions: []string{"v1"}}},
		},
	}
	if _, err := env.crds.ApiextensionsV1().CustomResourceDefinitions().Create(t.Context(), crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.crds.ApiextensionsV1().CustomResourceDefinitions().Delete(context.Background(), crd.Name, metav1.DeleteOptions{})
	})
	v1 := schema.GroupVersionResource{Group: group, Version: "v1", Resource: "gadgets"}
	eventually(t, 30*time.Second, func() (bool, error) {
		_, err := env.dynamic.Resource(v1).Namespace(ns).Create(t.Context(), &unstructured.Unstructured{Object: gadget(group, ns, "w", map[string]any{})}, metav1.CreateOptions{})
		return err == nil, err
	}, "a v1 Gadget to be created")
	startControllerWith(t, controllerOptions{RuleObjects: true})
	applyRule(t, strings.Replace(gadgetRuleDoc("waiting", group, "Gadget", ns, configChild("w")), group+"/v1", group+"/v2", 1))
	// Once the watch-list falls back to a list (pkg/watch notStreamable),
	// the list's error names the webhook: the Rule says which cache does
	// not sync, and why.
	start := time.Now()
	check := readyIs("False", "Waiting", "caches not synced", group+"/v2, Resource=gadgets", "conversion webhook", "/convert")
	eventually(t, 90*time.Second, func() (bool, error) {
		o := get(t, ruleGVR, "", "waiting")
		if o == nil {
			return false, errNotYet
		}
		err := check(o)
		return err == nil, err
	}, "the Rule to name the failing conversion webhook")
	t.Logf("the Rule names the webhook %s after it was applied", time.Since(start).Round(time.Millisecond))
}

// Scenario: a Rule's parent counts. status.parents and readyParents follow
// parents created, becoming ready and unready, and deleted; they are
// written at most every 10 s however many parents change, and not at all
// while nothing changes.
func TestRuleParentCounts(t *testing.T) {
	const group = "counts.example.com"
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	const user = "kgen-rule-counts"
	startControllerWith(t, controllerOptions{User: user, RuleObjects: true})
	applyRule(t, gadgetRuleDoc("counts", group, "Gadget", ns, `  children:
  - id: config
    readyWhen: ["${self.data.ready == 'yes'}"]
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: ${parent.metadata.name}
      data:
        ready: ${parent.spec.?ready.orValue('no')}
`))
	const deadline = 60 * time.Second
	waitCounts := func(parents, ready int64) {
		t.Helper()
		eventually(t, deadline, func() (bool, error) {
			o := get(t, ruleGVR, "", "counts")
			if o == nil {
				return false, fmt.Errorf("no Rule")
			}
			err := counts(parents, ready)(o)
			return err == nil, err
		}, "the Rule's counts to be %d parents, %d ready", parents, ready)
	}
	for _, name := range []string{"a", "b", "c"} {
		create(t, gvr, gadget(group, ns, name, map[string]any{}))
	}
	waitCounts(3, 0)
	patchSpec(t, gvr, ns, "a", map[string]any{"ready": "yes"})
	patchSpec(t, gvr, ns, "b", map[string]any{"ready": "yes"})
	waitCounts(3, 2)
	patchSpec(t, gvr, ns, "b", map[string]any{"ready": "no"})
	waitCounts(3, 1)
	if err := env.dynamic.Resource(gvr).Namespace(ns).Delete(t.Context(), "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCounts(2, 0)

	// Many parents change: 50 become ready, one every 400 ms.
	const many = 50
	for i := range many {
		create(t, gvr, gadget(group, ns, fmt.Sprintf("m%02d", i), map[string]any{}))
	}
	waitCounts(2+many, 0)
	start := time.Now()
	pace := time.NewTicker(400 * time.Millisecond) // spreads the changes over 20 s
	for i := range many {
		<-pace.C
		patchSpec(t, gvr, ns, fmt.Sprintf("m%02d", i), map[string]any{"ready": "yes"})
	}
	pace.Stop()
	waitCounts(2+many, many)
	end := time.Now()
	time.Sleep(2 * time.Second) // the audit log is written after the response
	writes := ruleStatusWrites(t, user, "counts", start)
	t.Logf("%d status writes of the Rule in %s while %d parents changed", len(writes), end.Sub(start).Round(time.Second), many)
	if limit := int(end.Sub(start)/(10*time.Second)) + 1; len(writes) > limit {
		t.Errorf("%d status writes in %s, want at most %d (one every 10 s)", len(writes), end.Sub(start).Round(time.Second), limit)
	}
	if len(writes) < 2 {
		t.Errorf("%d status writes while the counts changed for %s, want the counts updated meanwhile", len(writes), end.Sub(start).Round(time.Second))
	}
	for i := 1; i < len(writes); i++ {
		// The server's times; kgen's own are 10 s apart.
		if gap := writes[i].Sub(writes[i-1]); gap < 9*time.Second {
			t.Errorf("status writes %s apart at %s, want at least 10 s", gap.Round(time.Millisecond), writes[i].Format(time.StampMilli))
		}
	}

	// Steady state: nothing changes, nothing is written.
	steady := time.Now()
	time.Sleep(15 * time.Second) // a window in which nothing may happen
	if w := ruleStatusWrites(t, user, "counts", steady); len(w) > 0 {
		t.Errorf("%d status writes of the Rule in a steady state, want none (at %v)", len(w), w)
	}
}

// Scenario: a --rules file edited to an invalid version. The previous
// version keeps running (a parent's change still lands), the error is
// logged with the file, line and field, and the Rule object the file
// shadows says so; once the file is fixed, its new version runs.
func TestRuleFileInvalidEdit(t *testing.T) {
	const group = "fileedit.example.com"
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	children := func(value string) string {
		return strings.Replace(configChild(value), "      data:\n", "      data:\n        spec: ${parent.spec.?v.orValue('none')}\n", 1)
	}
	file := writeRules(t, gadgetRuleDoc("edited", group, "Gadget", ns, children("one")))
	r := startControllerWith(t, controllerOptions{RuleObjects: true}, file)
	r.waitReady(t)
	applyRule(t, gadgetRuleDoc("edited", group, "Gadget", ns, children("from-object")))
	waitRuleStatus(t, "edited", readyIs("False", "Shadowed"))
	create(t, gvr, gadget(group, ns, "e", map[string]any{}))
	waitFor(t, cmGVR, ns, "e", func(o *unstructured.Unstructured) error { return expect(o, "one", "data", "value") })

	// An unknown field, on line 8 of the file.
	bad := strings.Replace(mustRead(t, file), "    template:\n", "    readywhen: []\n    template:\n", 1)
	if err := os.WriteFile(file, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`%s:8:5: rule "edited": spec.children[0]: unknown field "readywhen"`, file)
	eventually(t, 20*time.Second, func() (bool, error) {
		// The log quotes the error: its words, not its quotes.
		logs := r.logs.String()
		for _, w := range []string{file + ":8:5: rule", "spec.children[0]: unknown field", "readywhen"} {
			if !strings.Contains(logs, w) {
				return false, fmt.Errorf("the log does not say %q", w)
			}
		}
		return true, nil
	}, "the invalid file to be logged")
	waitRuleStatus(t, "edited", readyIs("False", "Shadowed", want))
	// The previous version still runs.
	patchSpec(t, gvr, ns, "e", map[string]any{"v": "changed"})
	waitFor(t, cmGVR, ns, "e", func(o *unstructured.Unstructured) error {
		if err := expect(o, "changed", "data", "spec"); err != nil {
			return err
		}
		return expect(o, "one", "data", "value")
	})

	if err := os.WriteFile(file, []byte(gadgetRuleDoc("edited", group, "Gadget", ns, children("two"))), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() (bool, error) {
		o := get(t, cmGVR, ns, "e")
		return o != nil && expect(o, "two", "data", "value") == nil, fmt.Errorf("not yet")
	}, "the child to follow the fixed file within 10 s")
	waitRuleStatus(t, "edited", func(o *unstructured.Unstructured) error {
		if err := readyIs("False", "Shadowed")(o); err != nil {
			return err
		}
		if c := conditionOf(o, "Ready"); strings.Contains(fmt.Sprint(c["message"]), "invalid") {
			return fmt.Errorf("Ready message %q still says the file is invalid", c["message"])
		}
		return nil
	})
}

// Scenario: kgenctl run --rule-objects=false. A Rule object in the cluster
// is ignored: its parents get no children, its status is not written, and
// kgen never reads Rule objects.
func TestRuleObjectsOff(t *testing.T) {
	const group = "objectsoff.example.com"
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	ns := newNamespace(t)
	gadgets := newCRD(t, group, "Gadget", "gadgets")
	widgets := newCRD(t, group, "Widget", "widgets")
	applyRule(t, gadgetRuleDoc("ignored", group, "Gadget", ns, configChild("x")))
	const user = "kgen-objects-off"
	start := time.Now()
	file := writeRules(t, gadgetRuleDoc("from-file", group, "Widget", ns, strings.Replace(configChild("w"), "${parent.metadata.name}", "w-${parent.metadata.name}", 1)))
	startControllerWith(t, controllerOptions{User: user}, file).waitReady(t)
	create(t, gadgets, gadget(group, ns, "g", map[string]any{}))
	create(t, widgets, map[string]any{"apiVersion": group + "/v1", "kind": "Widget", "metadata": map[string]any{"name": "x", "namespace": ns}})
	// The file's rule works, so kgen runs.
	waitFor(t, cmGVR, ns, "w-x", nil)
	time.Sleep(3 * time.Second) // a Rule object would be served at watch speed
	if get(t, cmGVR, ns, "g") != nil {
		t.Error("a parent of a Rule object got a child with --rule-objects=false")
	}
	if o := get(t, ruleGVR, "", "ignored"); o == nil {
		t.Fatal("the Rule object is gone")
	} else if st, ok := o.Object["status"]; ok {
		t.Errorf("the ignored Rule has a status: %v", st)
	}
	for _, e := range auditOf(t, user, start) {
		if e.ObjectRef.Resource == "rules" {
			t.Errorf("kgen made a request of Rule objects: %s %s", e.Verb, e.RequestURI)
		}
	}
}

// Scenario: a rules document is a valid Rule object and the reverse. A
// Rule read back as kubectl prints it (get -o yaml, one object or a List)
// is accepted by kgenctl validate and runs from --rules.
func TestRuleObjectReadBack(t *testing.T) {
	const group = "readback.example.com"
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	newCRD(t, group, "Widget", "widgets")
	r := startControllerWith(t, controllerOptions{RuleObjects: true})
	label := "readback-" + ns
	withLabel := func(doc string) string {
		return strings.Replace(doc, "metadata: {name: ", "metadata: {labels: {e2e: "+label+"}, name: ", 1)
	}
	applyRule(t, withLabel(gadgetRuleDoc("read-back", group, "Gadget", ns, configChild("back"))))
	applyRule(t, withLabel(gadgetRuleDoc("read-back-too", group, "Widget", ns, configChild("too"))))
	for _, name := range []string{"read-back", "read-back-too"} {
		waitRuleStatus(t, name, func(o *unstructured.Unstructured) error {
			if err := accepted("True")(o); err != nil {
				return err
			}
			return readyIs("True", "Running")(o)
		})
	}
	r.stop()

	// As kubectl get rule read-back -o yaml, and kubectl get rules -l ... -o yaml.
	dir := t.TempDir()
	printed := func(name string, obj runtime.Object) string {
		t.Helper()
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := (&printers.YAMLPrinter{}).PrintObj(obj, f); err != nil {
			t.Fatal(err)
		}
		return f.Name()
	}
	one := get(t, ruleGVR, "", "read-back")
	for _, field := range []string{"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields"} {
		if _, ok := one.Object["metadata"].(map[string]any)[field]; !ok {
			t.Fatalf("the Rule read back has no metadata.%s", field)
		}
	}
	single := printed("rule.yaml", one)
	listed, err := env.dynamic.Resource(ruleGVR).List(t.Context(), metav1.ListOptions{LabelSelector: "e2e=" + label})
	if err != nil {
		t.Fatal(err)
	}
	// kubectl prints several objects as a v1 List.
	list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "List", "metadata": map[string]any{"resourceVersion": ""}}, Items: listed.Items}
	for i := range list.Items {
		list.Items[i].SetAPIVersion("kgen.dev/v1alpha1")
		list.Items[i].SetKind("Rule")
	}
	many := printed("rules.yaml", list)

	for _, tt := range []struct{ file, want string }{
		{single, "1 rule is valid: read-back\n"},
		{many, "2 rules are valid: read-back, read-back-too\n"},
	} {
		out, stderr, err := kgenctlAs(t, "validate", "--rules", tt.file)
		if err != nil || out != tt.want {
			t.Errorf("kgenctl validate --rules %s: %q, %v; want %q\n%s", filepath.Base(tt.file), out, err, tt.want, stderr)
		}
	}

	// The same rule runs from the file.
	for _, name := range []string{"read-back", "read-back-too"} {
		if err := env.dynamic.Resource(ruleGVR).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	startControllerWith(t, controllerOptions{}, single).waitReady(t)
	create(t, gvr, gadget(group, ns, "b", map[string]any{}))
	waitFor(t, cmGVR, ns, "b", func(o *unstructured.Unstructured) error { return expect(o, "back", "data", "value") })
}

// Scenario: a Rule changed live to a version that cannot run yet (a child
// kind not served, then one kgen may not list). Contract §7: the previous
// version keeps running meanwhile, repairing drift of the rule's children,
// and the Rule says its new version waits and why; once the kind is served
// or allowed, the new version takes over without a restart.
func TestRuleNewVersionWaitsPreviousRuns(t *testing.T) {
	const group = "rulenext.example.com"
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	const user = "kgen-rule-next"
	allowed := []rbacv1.PolicyRule{
		{APIGroups: []string{"kgen.dev"}, Resources: []string{"rules"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"kgen.dev"}, Resources: []string{"rules/status"}, Verbs: []string{"patch", "update"}},
		{APIGroups: []string{group}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch", "create", "patch", "update", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "create", "patch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
	grant(t, user, allowed)
	config, err := env.cp.UserConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	startControllerWith(t, controllerOptions{Config: config, RuleObjects: true})
	applyRule(t, gadgetRuleDoc("next", group, "Gadget", ns, configChild("a")))
	create(t, gvr, gadget(group, ns, "g", map[string]any{}))
	value := func(want string) func(*unstructured.Unstructured) error {
		return func(o *unstructured.Unstructured) error { return expect(o, want, "data", "value") }
	}
	waitFor(t, cmGVR, ns, "g", value("a"))
	waitRuleStatus(t, "next", readyIs("True", "Running"))
	// repaired deletes the ConfigMap child and waits until the running
	// version makes it again.
	repaired := func(want string) {
		t.Helper()
		if err := env.kube.CoreV1().ConfigMaps(ns).Delete(t.Context(), "g", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, cmGVR, ns, "g", value(want))
	}

	// A child kind that is not served.
	applyRule(t, gadgetRuleDoc("next", group, "Gadget", ns, configChild("b")+`  - id: widget
    template:
      apiVersion: `+group+`/v1
      kind: Widget
      metadata: {name: "${parent.metadata.name}"}
`))
	waitRuleStatus(t, "next", readyIs("False", "KindNotServed", "Widget", "previous version keeps running"))
	repaired("a")
	widgets := newCRD(t, group, "Widget", "widgets")
	waitRuleStatus(t, "next", readyIs("True", "Running"))
	waitFor(t, cmGVR, ns, "g", value("b"))
	waitFor(t, widgets, ns, "g", nil)

	// A child kind kgen may not list.
	applyRule(t, gadgetRuleDoc("next", group, "Gadget", ns, configChild("c")+`  - id: widget
    template:
      apiVersion: `+group+`/v1
      kind: Widget
      metadata: {name: "${parent.metadata.name}"}
  - id: secret
    template:
      apiVersion: v1
      kind: Secret
      metadata: {name: "${parent.metadata.name}"}
`))
	waitRuleStatus(t, "next", readyIs("False", "Forbidden", "secrets", "previous version keeps running"))
	repaired("b")
	grant(t, user, append(allowed, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch", "create", "patch", "delete"}}))
	waitRuleStatus(t, "next", readyIs("True", "Running"))
	waitFor(t, cmGVR, ns, "g", value("c"))
	waitFor(t, secretGVR, ns, "g", nil)
	waitFor(t, widgets, ns, "g", nil)
}

// Scenario: the parent kind's CRD changes under a running rule (a field its
// template reads is renamed). Contract §7/§8: the rule is checked again
// against the new schema, and its Rule object says Accepted False naming
// the field path and the expression; the rule keeps running. The CRD
// changed back, Accepted is True again and the parent converges.
func TestRuleRecheckedWhenCRDChanges(t *testing.T) {
	const group = "recheck.example.com"
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	ns := newNamespace(t)
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "gizmos." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: "Gizmo", ListKind: "GizmoList", Plural: "gizmos", Singular: "gizmo"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
			}},
		},
	}
	withField := func(field string) {
		crd.Spec.Versions[0].Schema = &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
			Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"spec":   {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{field: {Type: "string"}}},
				"status": {Type: "object", XPreserveUnknownFields: new(true)},
			}}}
	}
	crds := env.crds.ApiextensionsV1().CustomResourceDefinitions()
	withField("image")
	created, err := crds.Create(t.Context(), crd, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	crd = created
	t.Cleanup(func() { _ = crds.Delete(context.Background(), crd.Name, metav1.DeleteOptions{}) })
	gvr := schema.GroupVersionResource{Group: group, Version: "v1", Resource: "gizmos"}
	eventually(t, 30*time.Second, func() (bool, error) {
		_, err := env.dynamic.Resource(gvr).List(t.Context(), metav1.ListOptions{Limit: 1})
		return err == nil, err
	}, "gizmos to be served")
	update := func(field string) {
		t.Helper()
		updateCRD(t, crd.Name, func(got *apiextensionsv1.CustomResourceDefinition) {
			crd = got
			withField(field)
		})
	}

	startControllerWith(t, controllerOptions{RuleObjects: true})
	applyRule(t, gadgetRuleDoc("recheck", group, "Gizmo", ns, `  children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}"}
      data: {image: "${parent.spec.image}"}
`))
	create(t, gvr, map[string]any{"apiVersion": group + "/v1", "kind": "Gizmo",
		"metadata": map[string]any{"name": "g", "namespace": ns}, "spec": map[string]any{"image": "nginx"}})
	waitFor(t, cmGVR, ns, "g", func(o *unstructured.Unstructured) error { return expect(o, "nginx", "data", "image") })
	waitRuleStatus(t, "recheck", accepted("True"))

	update("imageRef")
	waitRuleStatus(t, "recheck", accepted("False", "spec.children[0].template.data.image", "${parent.spec.image}", `no field "image"`, "keeps running"))
	waitRuleStatus(t, "recheck", readyIs("True", "Running"))

	update("image")
	waitRuleStatus(t, "recheck", accepted("True"))
	patchSpec(t, gvr, ns, "g", map[string]any{"image": "nginx:2"})
	waitFor(t, cmGVR, ns, "g", func(o *unstructured.Unstructured) error { return expect(o, "nginx:2", "data", "image") })
}

// Scenario (contract §7): a Rule object that may select the same parents
// as another is not accepted and does not run. Once the other is deleted
// it runs, and its status says so: Accepted True, Ready "the rule runs" (a
// rename done by applying the new name and deleting the old).
func TestRuleConflictResolved(t *testing.T) {
	const group = "conflictgone.example.com"
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	startControllerWith(t, controllerOptions{RuleObjects: true})
	applyRule(t, gadgetRuleDoc("conflict-old", group, "Gadget", ns, configChild("old")))
	create(t, gvr, gadget(group, ns, "g", map[string]any{}))
	waitFor(t, cmGVR, ns, "g", func(o *unstructured.Unstructured) error { return expect(o, "old", "data", "value") })
	applyRule(t, gadgetRuleDoc("conflict-new", group, "Gadget", ns, configChild("new")))
	waitRuleStatus(t, "conflict-new", func(o *unstructured.Unstructured) error {
		if c := conditionOf(o, "Accepted"); c == nil || c["status"] != "False" || !strings.Contains(fmt.Sprint(c["message"]), "conflict-old") {
			return fmt.Errorf("Accepted = %v, want False naming conflict-old", c)
		}
		return nil
	})

	if err := env.dynamic.Resource(ruleGVR).Delete(t.Context(), "conflict-old", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, cmGVR, ns, "g", func(o *unstructured.Unstructured) error { return expect(o, "new", "data", "value") })
	waitRuleStatus(t, "conflict-new", func(o *unstructured.Unstructured) error {
		if c := conditionOf(o, "Accepted"); c == nil || c["status"] != "True" {
			return fmt.Errorf("Accepted = %v, want True once the conflict is gone", c)
		}
		return readyIs("True", "Running", "the rule runs")(o)
	})
	if c := conditionOf(get(t, ruleGVR, "", "conflict-new"), "Ready"); strings.Contains(fmt.Sprint(c["message"]), "previous") {
		t.Errorf("Ready = %v, which speaks of a previous version that never ran", c)
	}
}

// A Rule that overlaps a running one, rejected for it, stays rejected
// across a restart of kgen, although its name sorts first: the running
// rule keeps its parents and its children, and a new version of it still
// runs while the rejected Rule exists.
func TestRuleConflictSurvivesARestart(t *testing.T) {
	const group = "conflictrestart.example.com"
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	first := startControllerWith(t, controllerOptions{RuleObjects: true})
	applyRule(t, gadgetRuleDoc("web", group, "Gadget", ns, configChild("one")))
	create(t, gvr, gadget(group, ns, "g", map[string]any{}))
	child := waitFor(t, cmGVR, ns, "g", func(o *unstructured.Unstructured) error { return expect(o, "one", "data", "value") })
	waitRuleStatus(t, "web", readyIs("True", "Running", "the rule runs"))
	// Renders another object, so that it would prune web's if it ran.
	applyRule(t, gadgetRuleDoc("aaa", group, "Gadget", ns, strings.Replace(configChild("aaa"), "${parent.metadata.name}", "${parent.metadata.name}-aaa", 1)))
	rejected := func(o *unstructured.Unstructured) error {
		if c := conditionOf(o, "Accepted"); c == nil || c["status"] != "False" || !strings.Contains(fmt.Sprint(c["message"]), "web") {
			return fmt.Errorf("Accepted = %v, want False naming web", c)
		}
		return nil
	}
	waitRuleStatus(t, "aaa", rejected)

	first.stop()
	startControllerWith(t, controllerOptions{RuleObjects: true})
	// A new version of web lands while aaa exists.
	applyRule(t, gadgetRuleDoc("web", group, "Gadget", ns, configChild("two")))
	waitFor(t, cmGVR, ns, "g", func(o *unstructured.Unstructured) error {
		if o.GetUID() != child.GetUID() {
			return fmt.Errorf("the child was recreated: uid %s, was %s", o.GetUID(), child.GetUID())
		}
		return expect(o, "two", "data", "value")
	})
	waitRuleStatus(t, "web", readyIs("True", "Running", "the rule runs"))
	waitRuleStatus(t, "aaa", rejected)
	if _, err := env.dynamic.Resource(cmGVR).Namespace(ns).Get(t.Context(), "g-aaa", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the rejected rule aaa made its child g-aaa: %v", err)
	}
}

// Scenario (contract §6, "Failures are visible", through change; an audit
// finding): the list and watch of a running rule's parent kind start to
// fail after its caches synced (its CRD gets a conversion webhook that
// cannot be reached, so its objects cannot be read at the rule's version).
// The Rule says so, Ready False, naming the webhook and that kgen does not
// see changes there; once the CRD is mended it runs again, and follows a
// new parent.
func TestRuleReportsWatchFailingAfterSync(t *testing.T) {
	const group = "rulestale.example.com"
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	ns := newNamespace(t)
	crd := twoVersionCRD(group, "Gadget", "gadgets")
	v1 := createCRD(t, crd)
	waitServed(t, schema.GroupVersionResource{Group: group, Version: "v2", Resource: "gadgets"})
	create(t, v1, gadget(group, ns, "g", map[string]any{}))
	startControllerWith(t, controllerOptions{RuleObjects: true})
	applyRule(t, strings.Replace(gadgetRuleDoc("stale", group, "Gadget", ns, configChild("w")), group+"/v1", group+"/v2", 1))
	ruleIs := func(check func(*unstructured.Unstructured) error, what string) {
		t.Helper()
		eventually(t, 60*time.Second, func() (bool, error) {
			o := get(t, ruleGVR, "", "stale")
			if o == nil {
				return false, errNotYet
			}
			err := check(o)
			return err == nil, err
		}, "%s", what)
	}
	ruleIs(readyIs("True", "Running"), "the rule to run")
	waitFor(t, cmGVR, ns, "g", nil)

	setConversion := func(conv *apiextensionsv1.CustomResourceConversion) {
		t.Helper()
		updateCRD(t, crd.Name, func(live *apiextensionsv1.CustomResourceDefinition) { live.Spec.Conversion = conv })
	}
	url := "https://127.0.0.1:1/convert"
	setConversion(&apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter,
		Webhook: &apiextensionsv1.WebhookConversion{ClientConfig: &apiextensionsv1.WebhookClientConfig{URL: &url}, ConversionReviewVersions: []string{"v1"}}})
	ruleIs(readyIs("False", "Waiting", "does not see changes", group+"/v2, Resource=gadgets", "conversion webhook"), "the Rule to say its parents' watch fails")

	setConversion(&apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter})
	ruleIs(readyIs("True", "Running"), "the rule to run again once its parents can be read")
	create(t, v1, gadget(group, ns, "h", map[string]any{}))
	waitFor(t, cmGVR, ns, "h", nil)
}

// Scenario (contract §7 "parents of other rules are not [reconciled
// again], and informers that still have a user are not restarted",
// through a change of a CRD; a live audit): two rules whose parent kinds
// share an API group. A change of one kind's CRD relists that kind and
// reconciles its rule's parents; the other rule's parents are not
// reconciled again and its kind is not listed again. Before, kgen did
// both for every rule of the group, at every schema edit.
func TestChangeCRDLeavesOtherKindsOfItsGroup(t *testing.T) {
	const group = "onecrd.example.com"
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	ns := newNamespace(t)
	gadgets := newCRD(t, group, "Gadget", "gadgets")
	widgets := newCRD(t, group, "Widget", "widgets")
	p := startKgen(t, "kgen-onecrd")
	applyRule(t, gadgetRuleDoc("onecrd-gadgets", group, "Gadget", ns, configChild("g")))
	applyRule(t, gadgetRuleDoc("onecrd-widgets", group, "Widget", ns, configChild("w")))
	create(t, gadgets, gadget(group, ns, "g1", map[string]any{}))
	create(t, widgets, map[string]any{"apiVersion": group + "/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w1", "namespace": ns}, "spec": map[string]any{}})
	waitFor(t, cmGVR, ns, "g1", nil)
	waitFor(t, cmGVR, ns, "w1", nil)
	waitReason(t, gadgets, ns, "g1", reconcile.ReasonReady)
	waitReason(t, widgets, ns, "w1", reconcile.ReasonReady)
	time.Sleep(2 * time.Second)
	count := func(families map[string]*dto.MetricFamily) (gadgetReconciles, gadgetLists, widgetLists float64) {
		return sumOf(families, "controller_runtime_reconcile_total", map[string]string{"controller": "onecrd-gadgets"}),
			sumOf(families, "kgen_api_requests_total", map[string]string{"resource": "gadgets", "verb": "list"}),
			sumOf(families, "kgen_api_requests_total", map[string]string{"resource": "widgets", "verb": "list"})
	}
	before, err := scrape(t, p.metric+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	r0, g0, w0 := count(before)

	// The Widget CRD gains a field.
	updateCRD(t, "widgets."+group, func(crd *apiextensionsv1.CustomResourceDefinition) {
		crd.Spec.Versions[0].Schema = &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
			Type: "object", XPreserveUnknownFields: new(true), Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"spec": {Type: "object", XPreserveUnknownFields: new(true), Properties: map[string]apiextensionsv1.JSONSchemaProps{"size": {Type: "integer"}}},
			}}}
	})
	var after map[string]*dto.MetricFamily
	eventually(t, 30*time.Second, func() (bool, error) {
		after, err = scrape(t, p.metric+"/metrics")
		if err != nil {
			return false, err
		}
		_, _, w := count(after)
		return w > w0, fmt.Errorf("widgets listed %v times, %v before the change", w, w0)
	}, "kgen to list Widgets again after their CRD changed")
	time.Sleep(3 * time.Second) // what else the change sets off
	if after, err = scrape(t, p.metric+"/metrics"); err != nil {
		t.Fatal(err)
	}
	if r, g, _ := count(after); r != r0 || g != g0 {
		t.Errorf("after the Widget CRD changed, rule onecrd-gadgets reconciled %v times (%v before) and Gadgets were listed %v times (%v before): want no change",
			r, r0, g, g0)
	}
}
