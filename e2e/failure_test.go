//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"kgen.dev/kgen/pkg/reconcile"
)

// Contract §6, "Failures are visible and bounded": a failing list or
// watch, a failed reconcile and a status that triggers itself are logged,
// counted and retried with backoff, never in a busy loop.

// newBrokenConversionCRD creates a CRD Widget served at v1 (its storage
// version) and v2, converted by a webhook nobody serves: reading a stored
// object at v2 makes the API server fail with 500, as when a conversion
// webhook's Service has no endpoints (here the URL refuses connections, so
// every request fails at once instead of after the webhook timeout). It
// returns the resource at v1 and at v2.
func newBrokenConversionCRD(t *testing.T, group string) (v1, v2 schema.GroupVersionResource) {
	t.Helper()
	version := func(name string, storage bool) apiextensionsv1.CustomResourceDefinitionVersion {
		return apiextensionsv1.CustomResourceDefinitionVersion{Name: name, Served: true, Storage: storage,
			Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
				Type: "object", XPreserveUnknownFields: new(true)}}}
	}
	url := "https://127.0.0.1:1/convert"
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group, Scope: apiextensionsv1.NamespaceScoped,
			Names:    apiextensionsv1.CustomResourceDefinitionNames{Kind: "Widget", ListKind: "WidgetList", Plural: "widgets", Singular: "widget"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{version("v1", true), version("v2", false)},
			Conversion: &apiextensionsv1.CustomResourceConversion{
				Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{
					ConversionReviewVersions: []string{"v1"},
					ClientConfig:             &apiextensionsv1.WebhookClientConfig{URL: &url},
				},
			},
		},
	}
	if _, err := env.crds.ApiextensionsV1().CustomResourceDefinitions().Create(t.Context(), crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.crds.ApiextensionsV1().CustomResourceDefinitions().Delete(context.Background(), crd.Name, metav1.DeleteOptions{})
	})
	v1 = schema.GroupVersionResource{Group: group, Version: "v1", Resource: "widgets"}
	v2 = schema.GroupVersionResource{Group: group, Version: "v2", Resource: "widgets"}
	eventually(t, 30*time.Second, func() (bool, error) {
		_, err := env.dynamic.Resource(v1).List(t.Context(), metav1.ListOptions{Limit: 1})
		return err == nil, err
	}, "%s to be served", v1)
	return v1, v2
}

// fixConversion turns the CRD's conversion into None: the API server then
// serves every version without the webhook.
func fixConversion(t *testing.T, group string) {
	t.Helper()
	patch := []byte(`{"spec":{"conversion":{"strategy":"None","webhook":null}}}`)
	if _, err := env.crds.ApiextensionsV1().CustomResourceDefinitions().Patch(t.Context(), "widgets."+group, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// scrape returns kgen's metric families from a /metrics URL.
func scrape(t *testing.T, url string) (map[string]*dto.MetricFamily, error) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(resp.Body)
}

// sumOf sums the samples of a counter family whose labels include every one
// of labels; it returns -1 if no series matches.
func sumOf(families map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	total, found := 0.0, false
	for _, m := range families[name].GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range labels {
			match = match && have[k] == v
		}
		if match {
			total, found = total+m.GetCounter().GetValue(), true
		}
	}
	if !found {
		return -1
	}
	return total
}

// counter sums a counter of the in-process kgen, as sumOf does.
func counter(t *testing.T, r *running, name string, labels map[string]string) float64 {
	t.Helper()
	gathered, err := r.mgr.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	families := map[string]*dto.MetricFamily{}
	for _, f := range gathered {
		families[f.GetName()] = f
	}
	return sumOf(families, name, labels)
}

// Scenario: a child kind whose list answers 5xx. The API server fails every
// list of the kind at v2 with 500 (its conversion webhook is unreachable).
// kgen retries the list with backoff, not in a loop; the rule, the log and
// kgen_watch_errors_total say what fails; another rule keeps
// working; once the cause is fixed the rule recovers and its parents
// converge, and the foreign object that made the list fail is not touched.
func TestChangeChildKindServerError(t *testing.T) {
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	const group, widgetGroup, fineGroup = "fivexx.example.com", "conv.example.com", "fine.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	fineGVR := newCRD(t, fineGroup, "Gadget", "gadgets")
	widgetsV1, widgetsV2 := newBrokenConversionCRD(t, widgetGroup)
	// A stored object that kgen's child informer selects (the selector
	// is only on labels): listing it at v2 needs the webhook. It is not a
	// child of any parent, so kgen must leave it alone.
	foreign := create(t, widgetsV1, map[string]any{"apiVersion": widgetGroup + "/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "foreign", "namespace": ns, "labels": map[string]any{reconcile.LabelManagedBy: reconcile.ManagedBy}},
		"spec":     map[string]any{"theirs": "x"}})
	if _, err := env.dynamic.Resource(widgetsV2).Namespace(ns).List(t.Context(), metav1.ListOptions{}); !apierrors.IsInternalError(err) {
		t.Fatalf("listing widgets at v2: %v, want a 500: the test's premise does not hold", err)
	} else {
		t.Logf("list of widgets at v2: %v", err)
	}
	const parents = 3
	for i := range parents {
		create(t, gvr, gadget(group, ns, fmt.Sprintf("g%d", i), map[string]any{}))
	}
	applyRule(t, fmt.Sprintf(`apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata:
  name: fivexx
spec:
  parent:
    apiVersion: %s/v1
    kind: Gadget
    namespaces: [%s]
  children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: ${parent.metadata.name}
  - id: widget
    template:
      apiVersion: %s/v2
      kind: Widget
      metadata:
        name: ${parent.metadata.name}
      spec: {owner: "${parent.metadata.name}"}
`, group, ns, widgetGroup))
	applyRule(t, fmt.Sprintf(`apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata:
  name: fine
spec:
  parent:
    apiVersion: %s/v1
    kind: Gadget
    namespaces: [%s]
  children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: fine-${parent.metadata.name}
`, fineGroup, ns))

	const user = "kgen-fivexx"
	health, metrics := freePort(t), freePort(t)
	// The default verbosity: what is logged there is what users see.
	p := startKgenctl(t, user, "run", "--kubeconfig", userKubeconfig(t, user),
		"--health-probe-bind-address", health, "--metrics-bind-address", metrics)
	start := time.Now()
	// The API server first answers the watch for half a minute with an
	// empty stream, or a 504, that the reflector retries silently (see
	// pkg/watch notStreamable), so this can take a while.
	eventually(t, 90*time.Second, func() (bool, error) {
		c := conditionOf(get(t, ruleGVR, "", "fivexx"), "Ready")
		if msg := fmt.Sprint(c["message"]); c == nil || c["status"] != "False" || !strings.Contains(msg, "widgets") || !strings.Contains(msg, "conversion webhook") {
			return false, fmt.Errorf("Ready = %v, want False naming widgets and the failing webhook", c)
		}
		return true, nil
	}, "the Rule to report the failing list")
	failingSince := time.Now()
	t.Logf("the Rule reports the failure %s after kgen started", failingSince.Sub(start).Round(time.Millisecond))

	// Another rule keeps working, also on the ConfigMap informer both use.
	create(t, fineGVR, gadget(fineGroup, ns, "ok", map[string]any{}))
	waitFor(t, cmGVR, ns, "fine-ok", nil)
	if code, body, err := httpGet("http://" + health + "/readyz"); err != nil || code != http.StatusOK {
		t.Errorf("readyz = %d %q, %v with one rule failing; want 200", code, body, err)
	}

	// A window of the failure, to count what kgen does meanwhile.
	const window = 25 * time.Second
	time.Sleep(window - time.Since(failingSince))
	end := time.Now()

	// The API server answers the informer's watch by waiting 3 s and
	// ending it empty, and its lists with 429 "storage is (re)initializing:
	// failed to list ...: conversion webhook ... failed" (its watch cache of
	// v2 cannot start), where a list straight from etcd gets the 500 above.
	var lists, watches, failed int
	codes := map[int]int{}
	requests := readAudit(t, func(e auditEvent) bool {
		return e.Stage == "ResponseComplete" && e.User.Username == user && !e.StageTimestamp.Before(start) && !e.StageTimestamp.After(end)
	})
	for _, e := range requests {
		if e.ObjectRef.Resource != "widgets" {
			continue
		}
		switch e.Verb {
		case "list":
			lists++
		case "watch":
			watches++
		default:
			t.Errorf("kgen sent %s widgets/%s while their list fails", e.Verb, e.ObjectRef.Name)
		}
		codes[e.ResponseStatus.Code]++
		if e.ResponseStatus.Code >= 400 {
			failed++
		}
	}
	elapsed := end.Sub(start)
	t.Logf("in %s: %d requests of kgen, %d lists and %d watches of widgets, by response code %v",
		elapsed.Round(time.Second), len(requests), lists, watches, codes)
	if failed == 0 {
		t.Fatalf("no list or watch of widgets failed: the scenario did not happen")
	}
	// A try is a watch-list and, as it fails, a list; the reflector's
	// backoff between tries starts at 800 ms and doubles: about seven tries
	// in the window, and the server ends some stalled watch-lists with no
	// answer, which adds watches (runs measured 19 and 21). A busy loop
	// makes hundreds; 40 leaves room for a loaded machine.
	if lists+watches > 40 {
		t.Errorf("kgen listed or watched widgets %d times in %s: not a backoff", lists+watches, elapsed.Round(time.Second))
	}

	// kgen_watch_errors_total counts each failure for the rule, with the
	// reason its help text names; the other rule has none.
	families, err := scrape(t, "http://"+metrics+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	failures := sumOf(families, "kgen_watch_errors_total", map[string]string{"rule": "fivexx", "reason": "ListFailed"})
	t.Logf("kgen_watch_errors_total{rule=fivexx,reason=ListFailed} = %v", failures)
	if failures < 1 || failures > float64(lists+watches+1) {
		t.Errorf("kgen_watch_errors_total{rule=fivexx,reason=ListFailed} = %v, want between 1 and the %d failed lists and watches", failures, lists+watches)
	}
	if n := sumOf(families, "kgen_watch_errors_total", map[string]string{"rule": "fine"}); n > 0 {
		t.Errorf("kgen_watch_errors_total{rule=fine} = %v, want none", n)
	}

	// Logged at the default verbosity, naming the resource and the cause:
	// client-go's reflector once per failed try, kgen once per cause and
	// minute, so at most once per backoff step (a failed list is one).
	var logged, kgens []string
	for _, line := range strings.Split(p.output.String(), "\n") {
		if strings.Contains(line, "Cannot list or watch") && strings.Contains(line, "widgets") {
			kgens = append(kgens, line)
			logged = append(logged, line)
		} else if strings.Contains(line, "conversion webhook") || strings.Contains(line, "storage is (re)initializing") {
			logged = append(logged, line)
		}
	}
	t.Logf("%d log lines about the failure, %d of them kgen's, for %d failed lists", len(logged), len(kgens), lists)
	if !slices.ContainsFunc(kgens, func(l string) bool { return strings.Contains(l, "conversion webhook") }) {
		t.Errorf("no log line of kgen names the failing list and its cause:\n%s", tailOf(p.output.String(), 3000))
	}
	if len(kgens) > lists || len(logged) > 2*lists {
		t.Errorf("%d log lines (%d of kgen) for %d failed lists: more than once per backoff step:\n%s", len(logged), len(kgens), lists, strings.Join(logged, "\n"))
	}

	// The rule's parents are not reconciled meanwhile: their children
	// would look missing. (Their Ready condition does not say why yet.)
	for i := range parents {
		if got := get(t, cmGVR, ns, fmt.Sprintf("g%d", i)); got != nil {
			t.Errorf("child g%d was created while the rule's caches could not sync", i)
		}
	}

	// Fixed: the rule recovers without a restart (at the reflector's next
	// try, at most 30 s on), and the parents converge.
	fixConversion(t, widgetGroup)
	fixed := time.Now()
	eventually(t, 90*time.Second, func() (bool, error) {
		o := get(t, ruleGVR, "", "fivexx")
		if c := conditionOf(o, "Ready"); c == nil || c["status"] != "True" {
			return false, fmt.Errorf("Ready = %v", c)
		}
		return true, nil
	}, "the Rule to recover")
	t.Logf("the rule recovered %s after the fix", time.Since(fixed).Round(time.Millisecond))
	for i := range parents {
		name := fmt.Sprintf("g%d", i)
		waitFor(t, cmGVR, ns, name, nil)
		waitFor(t, widgetsV2, ns, name, func(o *unstructured.Unstructured) error { return expect(o, name, "spec", "owner") })
		waitFor(t, gvr, ns, name, isReady)
	}
	if got := get(t, widgetsV1, ns, "foreign"); got == nil || got.GetResourceVersion() != foreign.GetResourceVersion() {
		t.Errorf("the foreign widget was touched: %v", got)
	}
}

// Scenario (section 6): kgen may list a parent kind in one namespace and not
// in another, where two rules watch it. Only the rule of the refused
// namespace counts in kgen_watch_errors_total and is logged as failing; the
// other converges its parents. Once kgen may list there too, the rule
// recovers without a restart.
func TestWatchErrorsCountForTheirRule(t *testing.T) {
	const group = "watcherr.example.com"
	here, there := newNamespace(t), newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	const user = "kgen-watch-errors"
	grant(t, user, []rbacv1.PolicyRule{
		{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "create", "patch", "delete"}},
	})
	allowGadgets := func(ns string) {
		t.Helper()
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "gadgets", Namespace: ns}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{group}, Resources: []string{"gadgets", "gadgets/status", "gadgets/finalizers"}, Verbs: []string{"get", "list", "watch", "patch", "update"}}}}
		if _, err := env.kube.RbacV1().Roles(ns).Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "gadgets", Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "gadgets"},
			Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}}}
		if _, err := env.kube.RbacV1().RoleBindings(ns).Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitCan(t, user, true, authorizationv1.ResourceAttributes{Verb: "watch", Group: group, Resource: "gadgets", Namespace: ns})
	}
	allowGadgets(here)
	kubeconfig, err := env.cp.WriteKubeconfig(user+".kubeconfig", user)
	if err != nil {
		t.Fatal(err)
	}
	file := writeRules(t, languageRuleText("here", group, []string{here}, configChild("c"))+"---\n"+
		languageRuleText("there", group, []string{there}, configChild("c")))
	p := startKgenWith(t, user, kubeconfig, "--rules", file, "--rule-objects=false", "-n", here)
	create(t, gvr, gadget(group, here, "g", map[string]any{}))
	create(t, gvr, gadget(group, there, "g", map[string]any{}))
	waitReason(t, gvr, here, "g", reconcile.ReasonReady)

	var families map[string]*dto.MetricFamily
	eventually(t, 30*time.Second, func() (bool, error) {
		families, err = scrape(t, p.metric+"/metrics")
		if err != nil {
			return false, err
		}
		n := sumOf(families, "kgen_watch_errors_total", map[string]string{"rule": "there"})
		return n >= 1, fmt.Errorf("kgen_watch_errors_total{rule=there} = %v", n)
	}, "the refused rule to count its watch errors")
	if n := sumOf(families, "kgen_watch_errors_total", map[string]string{"rule": "here"}); n > 0 {
		t.Errorf("kgen_watch_errors_total{rule=here} = %v: a rule that may list its parents counts another's refusal", n)
	}
	for _, line := range strings.Split(p.output.String(), "\n") {
		if strings.Contains(line, "Cannot list or watch") && strings.Contains(line, `"here"`) {
			t.Errorf("the rule that may list its parents is logged as failing: %s", line)
		}
	}

	allowGadgets(there)
	waitReason(t, gvr, there, "g", reconcile.ReasonReady)
	waitFor(t, cmGVR, there, "g", nil)
}

// Contract §6, "Failures are visible and bounded", for a Conflict: a child
// whose name an object kgen did not make already has is a failed
// reconcile. It is on the parent's Ready condition, logged at the default
// verbosity with the parent and the object in the way (once per backoff
// step, which starts at 30 s), and counted as an error in the metrics.
// Once the user deletes their object, kgen makes the child within seconds
// (not at the backoff's next look), and the parent is Ready.
func TestConflictIsVisible(t *testing.T) {
	installCRD(t, "examples/webapp/crd.yaml")
	ns := newNamespace(t)
	if _, err := env.kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "taken-config"}, Data: map[string]string{"image": "mine"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := startKgen(t, "kgen-conflict", "--rules", webappRulesIn(t, ns))
	create(t, webappGVR, webapp(ns, "taken", 1))
	waitFor(t, webappGVR, ns, "taken", func(o *unstructured.Unstructured) error {
		if c := readyCondition(o); c == nil || c["reason"] != "Conflict" || !strings.Contains(fmt.Sprint(c["message"]), "taken-config") {
			return fmt.Errorf("Ready = %v, want Conflict naming taken-config", c)
		}
		return nil
	})
	seen := time.Now()

	var families map[string]*dto.MetricFamily
	eventually(t, 30*time.Second, func() (bool, error) {
		var err error
		if families, err = scrape(t, p.metric+"/metrics"); err != nil {
			return false, err
		}
		errs := sumOf(families, "controller_runtime_reconcile_errors_total", map[string]string{"controller": "webapp"})
		failed := sumOf(families, "controller_runtime_reconcile_total", map[string]string{"controller": "webapp", "result": "error"})
		return errs >= 1 && failed >= 1, fmt.Errorf("reconcile_errors_total = %v, reconcile_total{result=error} = %v", errs, failed)
	}, "the Conflict to count as a failed reconcile")

	// Logged with the parent and what is in the way, and not on every
	// reconcile: at most twice in the backoff's first step.
	time.Sleep(time.Until(seen.Add(20 * time.Second)))
	var logged []string
	for _, line := range strings.Split(p.output.String(), "\n") {
		if strings.Contains(line, "Reconcile failed") && strings.Contains(line, "taken-config") {
			logged = append(logged, line)
		}
	}
	if len(logged) == 0 || !strings.Contains(logged[0], ns+"/taken") {
		t.Errorf("no log line names the parent and the object in the way:\n%s", tailOf(p.output.String(), 3000))
	}
	if len(logged) > 2 {
		t.Errorf("%d log lines of the Conflict in 20 s: more than once per backoff step:\n%s", len(logged), strings.Join(logged, "\n"))
	}

	// The user's object goes after the conflict's first re-check, when the
	// next is a minute away: kgen, which watches it by name while it is in
	// the way, makes its own at once, not at the backoff's next look.
	eventually(t, 60*time.Second, func() (bool, error) {
		n := 0
		for _, line := range strings.Split(p.output.String(), "\n") {
			if strings.Contains(line, "Reconcile failed") && strings.Contains(line, "taken-config") {
				n++
			}
		}
		return n >= 2, fmt.Errorf("%d log lines of the Conflict", n)
	}, "the conflict's first re-check")
	if err := env.kube.CoreV1().ConfigMaps(ns).Delete(t.Context(), "taken-config", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() (bool, error) {
		c := readyCondition(get(t, webappGVR, ns, "taken"))
		return c != nil && c["reason"] != "Conflict" && get(t, cmGVR, ns, "taken-config") != nil, fmt.Errorf("Ready = %v", c)
	}, "kgen to make the child once the object in the way is gone")
}
