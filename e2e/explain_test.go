//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"kgen.dev/kgen/pkg/reconcile"
)

// explainReport is the part of kgenctl explain -o json the test reads: the
// fields the contract names.
type explainReport struct {
	Parent struct {
		APIVersion, Kind, Namespace, Name, UID string
	} `json:"parent"`
	Rule       string `json:"rule"`
	Conditions []struct {
		Type, Status, Reason, Message string
	} `json:"conditions"`
	Children []struct {
		ID          string   `json:"id"`
		APIVersion  string   `json:"apiVersion"`
		Kind        string   `json:"kind"`
		Namespace   string   `json:"namespace"`
		Name        string   `json:"name"`
		Exists      bool     `json:"exists"`
		UpToDate    bool     `json:"upToDate"`
		Differences []string `json:"differences"`
		Ready       bool     `json:"ready"`
		WaitingOn   []string `json:"waitingOn"`
		Message     string   `json:"message"`
	} `json:"children"`
	Events []struct {
		Type, Reason, Message string
		LastTimestamp         time.Time
	} `json:"events"`
}

// kgenctl explain, the real binary, on a WebApp whose Deployment has no
// available replicas (no pods run here) and whose Service's name is taken
// by a Service that is not kgen's: the text and the JSON say which child
// is not ready and why, which is in conflict, and what differs once someone
// changes the Deployment; and explain makes no write.
func TestExplain(t *testing.T) {
	installCRD(t, "examples/webapp/crd.yaml")
	ns := newNamespace(t)
	rulesFile := webappRulesIn(t, ns)
	kgen := startController(t, nil, rulesFile)
	kgen.waitReady(t)
	create(t, svcGVR, map[string]any{"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": "shop", "namespace": ns},
		"spec":     map[string]any{"ports": []any{map[string]any{"port": int64(80)}}}})
	parent := create(t, webappGVR, webapp(ns, "shop", 2))
	waitFor(t, deployGVR, ns, "shop", nil)
	waitFor(t, webappGVR, ns, "shop", func(p *unstructured.Unstructured) error {
		if c := readyCondition(p); c == nil || c["reason"] != "Conflict" {
			return fmt.Errorf("Ready = %v", c)
		}
		return nil
	})
	eventually(t, 30*time.Second, func() (bool, error) {
		evs, err := env.kube.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(parent.GetUID())})
		return err == nil && len(evs.Items) > 0, err
	}, "the Conflict event")

	kubeconfig := userKubeconfig(t, "explain-user")
	explain := func(t *testing.T, args ...string) string {
		t.Helper()
		out, stderr, err := kgenctlAs(t, append([]string{"explain", "webapp/shop", "-n", ns, "--rules", rulesFile, "--rule-objects=false", "--kubeconfig", kubeconfig}, args...)...)
		if err != nil {
			t.Fatalf("kgenctl explain: %v: %s", err, stderr)
		}
		return out
	}
	start := time.Now()

	text := explain(t)
	t.Logf("kgenctl explain webapp/shop -n %s:\n%s", ns, text)
	for _, want := range []string{
		"Name:        shop\nNamespace:   " + ns + "\nKind:        WebApp (example.com/v1alpha1)\nUID:         " + string(parent.GetUID()) + "\nRule:        webapp\n",
		"├─ config: ConfigMap " + ns + "/shop-config\n│    Exists:      yes\n│    Up to date:  yes\n│    Ready:       yes\n",
		"├─ deployment: Deployment " + ns + "/shop\n│    Exists:      yes\n│    Up to date:  yes\n" +
			"│    Ready:       no: waiting for status.availableReplicas (not set yet)\n" +
			"│    ReadyWhen:   ${self.status.availableReplicas >= parent.spec.replicas}\n",
		"└─ service: Service " + ns + "/shop\n     Exists:      no\n" +
			"     Conflict:    services " + ns + "/shop exists and is not managed by kgen; kgen leaves it untouched\n",
		"  Ready  False   Conflict  ",
		"  Warning  Conflict  ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("kgenctl explain printed:\n%s\nwant it to contain:\n%s", text, want)
		}
	}

	var report explainReport
	if err := json.Unmarshal([]byte(explain(t, "-o", "json")), &report); err != nil {
		t.Fatal(err)
	}
	if p := report.Parent; p.APIVersion != "example.com/v1alpha1" || p.Kind != "WebApp" || p.Namespace != ns || p.Name != "shop" || types.UID(p.UID) != parent.GetUID() || report.Rule != "webapp" {
		t.Errorf("parent %+v, rule %s", p, report.Rule)
	}
	got := map[string]string{}
	for _, c := range report.Children {
		got[c.ID] = fmt.Sprintf("%s %s %s/%s exists=%t upToDate=%t differences=%q ready=%t waitingOn=%q: %s",
			c.APIVersion, c.Kind, c.Namespace, c.Name, c.Exists, c.UpToDate, c.Differences, c.Ready, c.WaitingOn, c.Message)
	}
	want := map[string]string{
		"config":     `v1 ConfigMap ` + ns + `/shop-config exists=true upToDate=true differences=[] ready=true waitingOn=[]: up to date and ready`,
		"deployment": `apps/v1 Deployment ` + ns + `/shop exists=true upToDate=true differences=[] ready=false waitingOn=[]: not ready: waiting for status.availableReplicas (not set yet)`,
		"service":    `v1 Service ` + ns + `/shop exists=false upToDate=false differences=[] ready=false waitingOn=[]: services ` + ns + `/shop exists and is not managed by kgen; kgen leaves it untouched`,
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("child %s:\n got %s\nwant %s", id, got[id], w)
		}
	}
	if len(report.Children) != len(want) {
		t.Errorf("children %q", got)
	}
	if !slices.ContainsFunc(report.Conditions, func(c struct{ Type, Status, Reason, Message string }) bool {
		return c.Type == "Ready" && c.Status == "False" && c.Reason == "Conflict"
	}) {
		t.Errorf("conditions %+v", report.Conditions)
	}
	if !slices.ContainsFunc(report.Events, func(e struct {
		Type, Reason, Message string
		LastTimestamp         time.Time
	}) bool {
		return e.Type == "Warning" && e.Reason == "Conflict" && !e.LastTimestamp.IsZero()
	}) {
		t.Errorf("events %+v", report.Events)
	}

	// With kgen stopped, someone scales the Deployment: explain names the
	// field, and says kgen would set it back.
	kgen.stop()
	if _, err := env.dynamic.Resource(deployGVR).Namespace(ns).Patch(t.Context(), "shop", types.MergePatchType,
		[]byte(`{"spec":{"replicas":5}}`), metav1.PatchOptions{FieldManager: "kubectl-scale"}); err != nil {
		t.Fatal(err)
	}
	if text := explain(t); !strings.Contains(text, "│    Up to date:  no: spec.replicas\n") || !strings.Contains(text, "│    Next:        kgen sets it back: someone changed fields its template sets\n") {
		t.Errorf("after the Deployment was scaled, kgenctl explain printed:\n%s", text)
	}

	reqs := auditOf(t, "explain-user", start)
	if len(reqs) == 0 {
		t.Fatal("the audit log has no request of explain-user")
	}
	for _, e := range reqs {
		if e.Verb != "get" && e.Verb != "list" {
			t.Errorf("kgenctl explain sent %s %s", e.Verb, e.RequestURI)
		}
	}
}

// Scenario (contract §10, audit s10): a Rule object edited to a version
// the running kgen does not accept (an expression its parent kind's schema
// refuses); the previous version keeps running. kgenctl explain, which
// cannot see that version, does not explain with the rejected one: it says
// the rule was left out, and why, instead of a render error kgen does not
// have.
func TestExplainRejectedRuleObject(t *testing.T) {
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	installCRD(t, "examples/webapp/crd.yaml")
	ns := newNamespace(t)
	startControllerWith(t, controllerOptions{RuleObjects: true})
	rule := func(name, ns, field string) string {
		return fmt.Sprintf(`apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: %s}
spec:
  parent: {apiVersion: example.com/v1alpha1, kind: WebApp, namespaces: [%s]}
  children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}"}
      data: {image: "${parent.spec.%s}"}
`, name, ns, field)
	}
	// Another rule, valid, whose parents are elsewhere.
	applyRule(t, rule("explain-elsewhere", newNamespace(t), "image"))
	applyRule(t, rule("explain-rejected", ns, "image"))
	create(t, webappGVR, webapp(ns, "shop", 1))
	waitFor(t, cmGVR, ns, "shop", nil)
	applyRule(t, rule("explain-rejected", ns, "imgae"))
	waitRuleStatus(t, "explain-rejected", func(o *unstructured.Unstructured) error {
		if c := conditionOf(o, "Accepted"); c == nil || c["status"] != "False" || c["observedGeneration"] != o.GetGeneration() {
			return fmt.Errorf("Accepted = %v, want False for generation %d", c, o.GetGeneration())
		}
		return nil
	})

	// kgen runs the previous version, which the Rule's status records:
	// explain explains the parent with that one, and says so.
	stdout, stderr, err := kgenctlAs(t, "explain", "webapp/shop", "-n", ns, "--kubeconfig", userKubeconfig(t, "explain-rejected"))
	if err != nil {
		t.Fatalf("kgenctl explain: %v\n%s", err, stderr)
	}
	for _, want := range []string{"Rule explain-rejected: the running kgen did not accept its latest version", "imgae",
		"explained with the version kgen runs, of generation 1", "config: ConfigMap " + ns + "/shop\n", "Up to date:  yes"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("kgenctl explain said:\n%s\nwant it to say %q", stdout, want)
		}
	}

	// A Rule whose status records no version that runs (a CRD from before
	// status.running, say) is left out, and the parent has no rule.
	if _, err := env.dynamic.Resource(ruleGVR).Patch(t.Context(), "explain-rejected", types.JSONPatchType,
		[]byte(`[{"op":"remove","path":"/status/running"}]`), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	_, stderr, err = kgenctlAs(t, "explain", "webapp/shop", "-n", ns, "--kubeconfig", userKubeconfig(t, "explain-rejected"))
	wantExitError(t, err, stderr)
	for _, want := range []string{"no rule selects it", "Rule explain-rejected: the running kgen did not accept its latest version", "imgae", "its status records no version that runs"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("kgenctl explain said:\n%s\nwant it to say %q", stderr, want)
		}
	}
}

// Scenario (section 10): a readyWhen over a list of the child's status
// says what the list holds, not CEL's text, and the parent follows the
// child's conditions as another controller changes them.
func TestReadyWhenSaysWhatTheListHolds(t *testing.T) {
	const group = "why.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	gizmos := newCRD(t, group, "Gizmo", "gizmos")
	startController(t, nil, gadgetRule(t, "why", group, `    namespaces: [`+ns+`]
  children:
  - id: gizmo
    readyWhen: ["${self.status.conditions.exists(c, c.type == 'Available' && c.status == 'True')}"]
    template:
      apiVersion: `+group+`/v1
      kind: Gizmo
      metadata:
        name: ${parent.metadata.name}
      spec: {size: 1}
`)).waitReady(t)
	create(t, gvr, gadget(group, ns, "g", map[string]any{}))
	waitFor(t, gvr, ns, "g", readyIs("False", reconcile.ReasonNotReady, "child gizmo", "status.conditions (not set yet)"))

	// The gizmo's own controller reports its conditions.
	setConditions := func(available string) {
		t.Helper()
		status, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []any{
			map[string]any{"type": "Progressing", "status": "True", "reason": "Rolling"},
			map[string]any{"type": "Available", "status": available, "reason": "Counted", "message": "a long message the Ready message leaves out"},
		}}})
		if _, err := env.dynamic.Resource(gizmos).Namespace(ns).Patch(t.Context(), "g", types.MergePatchType, status, metav1.PatchOptions{}, "status"); err != nil {
			t.Fatal(err)
		}
	}
	setConditions("False")
	waitFor(t, gvr, ns, "g", readyIs("False", reconcile.ReasonNotReady,
		`child gizmo`,
		`status.conditions has no entry where ${c.type == "Available" && c.status == "True"}; its entries: {type: "Progressing", status: "True"}, {type: "Available", status: "False"}`))
	if c := conditionOf(get(t, gvr, ns, "g"), "Ready"); strings.Contains(fmt.Sprint(c["message"]), "long message") {
		t.Errorf("the Ready message shows fields the readyWhen does not read: %q", c["message"])
	}

	setConditions("True")
	waitFor(t, gvr, ns, "g", readyIs("True", reconcile.ReasonReady))
	setConditions("False")
	waitFor(t, gvr, ns, "g", readyIs("False", reconcile.ReasonNotReady, `its entries: {type: "Progressing", status: "True"}, {type: "Available", status: "False"}`))
}

// Scenario (section 10, an audit finding): explain with a new version of
// the rules, before kgen runs it, names what that version no longer sets
// among the differences (a removed data key, a removed container), not
// only what it adds: kgen's next apply removes them.
func TestExplainNamesWhatANewTemplateRemoves(t *testing.T) {
	const group = "explainremove.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	body := func(data, containers string) string {
		return `    namespaces: [` + ns + `]
  children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}"}
      data: {` + data + `}
  - id: deploy
    template:
      apiVersion: apps/v1
      kind: Deployment
      metadata: {name: "${parent.metadata.name}"}
      spec:
        selector: {matchLabels: {app: x}}
        template:
          metadata: {labels: {app: x}}
          spec:
            containers: [` + containers + `]
`
	}
	startController(t, nil, gadgetRule(t, "explainremove", group, body(`a: "1", b: "2"`,
		`{name: app, image: nginx, ports: [{containerPort: 8080}]}, {name: side, image: busybox}`))).waitReady(t)
	create(t, gvr, gadget(group, ns, "g", map[string]any{}))
	waitFor(t, deployGVR, ns, "g", nil)
	waitFor(t, cmGVR, ns, "g", nil)

	next := gadgetRule(t, "explainremove", group, body(`a: "1"`, `{name: app, image: nginx, ports: [{containerPort: 8080}]}`))
	out, stderr, err := kgenctlAs(t, "explain", "gadgets."+group+"/g", "-n", ns, "--rules", next, "--rule-objects=false",
		"--kubeconfig", userKubeconfig(t, "explain-remove"), "-o", "json")
	if err != nil {
		t.Fatalf("kgenctl explain: %v: %s", err, stderr)
	}
	var report explainReport
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := map[string][]string{"config": {"data.b"}, "deploy": {"spec.template.spec.containers[name=side]"}}
	for _, c := range report.Children {
		if w, ok := want[c.ID]; ok && (c.UpToDate || !slices.Equal(c.Differences, w)) {
			t.Errorf("child %s: upToDate %t, differences %q; want %q", c.ID, c.UpToDate, c.Differences, w)
		}
	}
}
