//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The tests of this file install charts/kgen and change its rules while
// kgen runs as the chart's pods (through the fake kubelet): Rule objects
// applied to the cluster, and rules of the values changed by helm upgrade.

// TestHelmServesRuleObject installs the chart with no rules in its values,
// only the RBAC that kgenctl rbac generates for the WebApp example's rule.
// kgen serves the Rule objects: applying the example's rule, as kubectl
// apply -f does, makes a WebApp get its children, and the Rule's status
// says it is accepted, runs, and has one parent.
func TestHelmServesRuleObject(t *testing.T) {
	installCRD(t, "examples/webapp/crd.yaml")
	ns, release := newNamespace(t), newNamespace(t)
	startPods(t, release)
	const name = "helm-served"
	rule := exampleRuleIn(t, name, ns)
	values := generateRBACValues(t, writeRules(t, rule))
	start := time.Now()
	helmInstall(t, filepath.Join(env.root, "charts/kgen"), release, "-f", values)

	manifest, err := runHelm(t, "get", "manifest", "kgen", "--namespace", release)
	if err != nil {
		t.Fatal(err)
	}
	objs := checkInstalled(t, manifest, release)
	for _, want := range []string{"ClusterRole/kgen-rule-objects", "ClusterRoleBinding/kgen-rule-objects", "Role/" + ns + "/kgen"} {
		if !slices.Contains(objs, want) {
			t.Errorf("the release has no %s; it has %v", want, objs)
		}
	}
	if slices.Contains(objs, "ConfigMap/"+release+"/kgen-rules") {
		t.Errorf("the release has a rules ConfigMap without rules in its values: %v", objs)
	}
	// helm installed the chart's crds/ first (or found the Rule kind there).
	if _, err := env.crds.ApiextensionsV1().CustomResourceDefinitions().Get(t.Context(), "rules.kgen.dev", metav1.GetOptions{}); err != nil {
		t.Fatalf("the Rule kind after helm install: %v", err)
	}
	waitLeader(t, release, "kgen")

	applyRule(t, rule)
	create(t, webappGVR, webapp(ns, "shop", 1))
	for _, child := range []struct {
		gvr  schema.GroupVersionResource
		name string
	}{{cmGVR, "shop-config"}, {deployGVR, "shop"}, {svcGVR, "shop"}} {
		waitFor(t, child.gvr, ns, child.name, nil)
	}
	var status *unstructured.Unstructured
	eventually(t, 60*time.Second, func() (bool, error) {
		o := get(t, ruleGVR, "", name)
		if o == nil {
			return false, notYet{}
		}
		status = o
		if err := accepted("True")(o); err != nil {
			return false, err
		}
		if c := conditionOf(o, "Ready"); c == nil || c["status"] != "True" {
			return false, fmt.Errorf("Ready = %v", c)
		}
		if p, _, _ := unstructured.NestedInt64(o.Object, "status", "parents"); p != 1 {
			return false, fmt.Errorf("parents = %d", p)
		}
		return true, nil
	}, "the Rule's status to say it runs with 1 parent")
	t.Logf("the Rule's status: %v", status.Object["status"])

	// kubectl get rules shows it, as docs/install.md and README.md say.
	raw, err := env.kube.Discovery().RESTClient().Get().AbsPath("/apis/kgen.dev/v1alpha1/rules", name).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	var columns []string
	for _, c := range table.ColumnDefinitions {
		columns = append(columns, c.Name)
	}
	if want := []string{"Name", "Parent", "Accepted", "Ready", "Reason", "Parents", "Ready-Parents", "Age"}; !slices.Equal(columns, want) {
		t.Errorf("kubectl get rules shows the columns %q, want %q", columns, want)
	}
	if len(table.Rows) != 1 {
		t.Fatalf("kubectl get rule %s shows %d rows", name, len(table.Rows))
	}
	cells := fmt.Sprint(table.Rows[0].Cells[:6])
	if want := fmt.Sprint([]any{name, "WebApp", "True", "True", "Running", 1}); cells != want {
		t.Errorf("kubectl get rule %s shows %s, want %s", name, cells, want)
	}

	for _, e := range auditOf(t, "system:serviceaccount:"+release+":kgen", start) {
		if e.ResponseStatus.Code == 403 {
			t.Errorf("kgen was refused %s %s %s/%s (subresource %q)", e.Verb, e.ObjectRef.Resource, e.ObjectRef.Namespace, e.ObjectRef.Name, e.ObjectRef.Subresource)
		}
	}
}

// TestHelmUpgradeChangesRulesLive changes a template of the rules in the
// values with helm upgrade: the rules ConfigMap changes, the fake kubelet
// swaps the volume's files as the kubelet does, and the running kgen
// applies the new rules. The children follow, and no kgen pod is replaced.
func TestHelmUpgradeChangesRulesLive(t *testing.T) {
	ctx := t.Context()
	ns := newNamespace(t)
	chart := filepath.Join(env.root, "charts/kgen")
	release, kubelet, values := helmInstallWebApp(t, chart, ns)
	create(t, webappGVR, webapp(ns, "shop", 1))
	waitFor(t, cmGVR, ns, "shop-config", func(o *unstructured.Unstructured) error { return expect(o, "nginx:1.27", "data", "image") })
	before := podsOf(t, release, "app.kubernetes.io/name=kgen")
	deployment, err := env.kube.AppsV1().Deployments(release).Get(ctx, "kgen", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// The same rules with one more entry in the ConfigMap child's data.
	rulesFile := exampleWebAppRulesIn(t, ns)
	text := mustRead(t, rulesFile)
	changed := strings.Replace(text, "        image: ${parent.spec.image}\n", "        image: ${parent.spec.image}\n        release: upgraded-${parent.metadata.name}\n", 1)
	if changed == text {
		t.Fatal("the test's edit of the rules did not apply")
	}
	changedFile := filepath.Join(t.TempDir(), "webapp.yaml")
	if err := os.WriteFile(changedFile, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	args := slices.Clone(values)
	i := slices.Index(args, "--set-file")
	if i < 0 {
		t.Fatalf("no --set-file in %q", args)
	}
	args[i+1] = "rules.webapp=" + changedFile
	start := time.Now()
	if _, err := runHelm(t, append([]string{"upgrade", "kgen", chart, "--namespace", release, "--wait", "--timeout", "3m"}, args...)...); err != nil {
		dumpPods(t, release)
		t.Fatalf("helm upgrade: %v", err)
	}
	// The kubelet updates a ConfigMap volume within about a minute (the
	// fake one within a second); kgen reads its files every 2 s.
	eventually(t, 90*time.Second, func() (bool, error) {
		o := get(t, cmGVR, ns, "shop-config")
		if o == nil {
			return false, notYet{}
		}
		err := expect(o, "upgraded-shop", "data", "release")
		return err == nil, err
	}, "the child to follow the upgraded rules")
	t.Logf("the child followed the upgraded rules %s after helm upgrade began", time.Since(start).Round(time.Millisecond))
	if logs := kubelet.outputs(); !strings.Contains(logs, "Rules file changed") {
		t.Errorf("kgen did not log the changed rules file")
	}

	// No pod was replaced or restarted: the pod template did not change.
	after := podsOf(t, release, "app.kubernetes.io/name=kgen")
	uids := func(pods []corev1.Pod) []string {
		var out []string
		for _, p := range pods {
			out = append(out, string(p.UID))
			for _, cs := range p.Status.ContainerStatuses {
				if cs.RestartCount != 0 {
					t.Errorf("pod %s restarted %d times", p.Name, cs.RestartCount)
				}
			}
		}
		slices.Sort(out)
		return out
	}
	if b, a := uids(before), uids(after); !slices.Equal(b, a) {
		t.Errorf("kgen's pods were replaced: %v before helm upgrade, %v after", b, a)
	}
	upgraded, err := env.kube.AppsV1().Deployments(release).Get(ctx, "kgen", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if upgraded.Generation != deployment.Generation {
		t.Errorf("helm upgrade changed the Deployment: generation %d, then %d", deployment.Generation, upgraded.Generation)
	}
}
