//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"kgen.dev/kgen/pkg/reconcile"
)

// The tests of this file install charts/kgen with helm and run kgen as the
// chart's pods through the fake kubelet, to check what happens to a running
// install over its life: helm test, helm upgrade, helm uninstall.

// helmInstallWebApp installs a chart (a folder or a packaged .tgz) as
// release "kgen" in a new namespace with the WebApp example's rules
// limited to ns and their generated RBAC, waits for it, and returns the
// release namespace and the helm arguments that give the rules and RBAC.
func helmInstallWebApp(t *testing.T, chart, ns string, extra ...string) (string, *fakeKubelet, []string) {
	t.Helper()
	installCRD(t, "examples/webapp/crd.yaml")
	release := newNamespace(t)
	kubelet := startPods(t, release)
	rulesFile := exampleWebAppRulesIn(t, ns)
	values := []string{"-f", generateRBACValues(t, rulesFile), "--set-file", "rules.webapp=" + rulesFile}
	helmInstall(t, chart, release, append(values, extra...)...)
	return release, kubelet, values
}

// helmInstall installs a chart as release "kgen", waits for it, and
// uninstalls it when the test ends.
func helmInstall(t *testing.T, chart, release string, args ...string) {
	t.Helper()
	helmInstallNamed(t, chart, "kgen", release, args...)
}

// helmInstallNamed installs a chart as the named release in the namespace
// release, waits for it, and uninstalls it when the test ends.
func helmInstallNamed(t *testing.T, chart, name, release string, args ...string) {
	t.Helper()
	start := time.Now()
	if _, err := runHelm(t, append([]string{"install", name, chart, "--namespace", release, "--wait", "--timeout", "3m"}, args...)...); err != nil {
		dumpPods(t, release)
		t.Fatalf("helm install %s: %v", name, err)
	}
	t.Logf("helm install %s --wait took %s", name, time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() { _, _ = runHelm(t, "uninstall", name, "--namespace", release, "--wait", "--timeout", "2m") })
}

// helm test passes on a running install, and fails, saying why, once kgen
// is scaled to 0.
func TestHelmTest(t *testing.T) {
	ctx := t.Context()
	release, kubelet, _ := helmInstallWebApp(t, filepath.Join(env.root, "charts/kgen"), newNamespace(t))
	waitLeader(t, release, "kgen")
	out, err := runHelm(t, "test", "kgen", "--namespace", release, "--timeout", "2m")
	if err != nil || !strings.Contains(out, "Phase:          Succeeded") {
		t.Fatalf("helm test on a running install: %v\n%s\n%s", err, out, kubelet.output("kgen-test"))
	}
	logs := kubelet.output("kgen-test")
	for _, want := range []string{"ok: deployment " + release + "/kgen has 2 of 2 replicas available", "ok: lease " + release + "/kgen is held by"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the test pod did not say %q:\n%s", want, logs)
		}
	}

	scale, err := env.kube.AppsV1().Deployments(release).GetScale(ctx, "kgen", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	scale.Spec.Replicas = 0
	if _, err := env.kube.AppsV1().Deployments(release).UpdateScale(ctx, "kgen", scale, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, func() (bool, error) {
		pods := podsOf(t, release, "app.kubernetes.io/name=kgen,app.kubernetes.io/instance=kgen")
		return len(pods) == 0, fmt.Errorf("%d pods left", len(pods))
	}, "kgen's pods to stop")
	out, err = runHelm(t, "test", "kgen", "--namespace", release, "--timeout", "2m")
	if err == nil {
		t.Fatalf("helm test passed with kgen scaled to 0:\n%s", out)
	}
	t.Logf("helm test with kgen scaled to 0: %v", err)
	logs = kubelet.output("kgen-test")
	for _, want := range []string{"deployment " + release + "/kgen is scaled to 0", "lease " + release + "/kgen is held by no replica"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the failed test pod did not say %q:\n%s", want, logs)
		}
	}
}

// The chart refuses more than one replica without leader election, before
// it creates anything.
func TestHelmRefusesReplicasWithoutLeaderElection(t *testing.T) {
	release := newNamespace(t)
	out, err := runHelm(t, "install", "kgen", filepath.Join(env.root, "charts/kgen"), "--namespace", release,
		"--set", "replicaCount=2", "--set", "leaderElection.enabled=false")
	if err == nil || !strings.Contains(err.Error(), "replicaCount is 2 but leaderElection.enabled is false") {
		t.Fatalf("helm install of 2 replicas without leader election: %v\n%s", err, out)
	}
	if list, _ := runHelm(t, "list", "--all", "--short", "--namespace", release); strings.TrimSpace(list) != "" {
		t.Errorf("a release was recorded: %q", list)
	}
	if deploys, err := env.kube.AppsV1().Deployments(release).List(t.Context(), metav1.ListOptions{}); err != nil || len(deploys.Items) > 0 {
		t.Errorf("the refused install created Deployments: %v %v", deploys, err)
	}
}

// helm uninstall leaves no parent with kgen's finalizer: the chart's
// pre-delete hook stops kgen and removes it, from the parents of the rules
// of the values and of the Rule objects, keeping the parents' other
// finalizers and their children; the parents can then be deleted.
func TestHelmUninstallReleasesFinalizers(t *testing.T) {
	ctx := t.Context()
	installCRD(t, "e2e/testdata/octopus-crd.yaml")
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	// The values' rule has its parents in ns, the Rule object's in objNS.
	ns, objNS, release := newNamespace(t), newNamespace(t), newNamespace(t)
	startPods(t, release)
	// A cluster-scoped child, which no ownerReference can tie to its
	// namespaced parent: kgen's finalizer guards it.
	octopusRule := func(name, ns string) string {
		return `apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata:
  name: ` + name + `
spec:
  parent:
    apiVersion: zoo.example.com/v1
    kind: Octopus
    namespaces: [` + ns + `]
  children:
  - id: role
    template:
      apiVersion: rbac.authorization.k8s.io/v1
      kind: ClusterRole
      metadata:
        name: octopus-${parent.metadata.namespace}-${parent.metadata.name}
      rules: []
`
	}
	rulesFile := writeRules(t, octopusRule("octopus-cleanup", ns))
	objectRule := octopusRule("octopus-cleanup-object", objNS)
	// The RBAC of every rule kgen runs, the Rule object's included.
	values, err := kgenctl(t, "rbac", "--rules", rulesFile, "--rules", writeRules(t, objectRule),
		"--crd", filepath.Join(env.root, "e2e/testdata/octopus-crd.yaml"), "-o", "helm-values")
	if err != nil {
		t.Fatal(err)
	}
	valuesFile := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(valuesFile, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	chart := filepath.Join(env.root, "charts/kgen")
	if _, err := runHelm(t, "install", "kgen", chart, "--namespace", release, "-f", valuesFile,
		"--set-file", "rules.octopus="+rulesFile, "--wait", "--timeout", "3m"); err != nil {
		dumpPods(t, release)
		t.Fatalf("helm install: %v", err)
	}
	t.Cleanup(func() { _, _ = runHelm(t, "uninstall", "kgen", "--namespace", release, "--no-hooks") })
	applyRule(t, objectRule)
	octopus := func(ns, name string) map[string]any {
		return map[string]any{"apiVersion": "zoo.example.com/v1", "kind": "Octopus",
			"metadata": map[string]any{"name": name, "namespace": ns, "finalizers": []any{"example.com/keep"}},
			"spec":     map[string]any{"arms": int64(8)}}
	}
	// otto is a parent of the values' rule, olga of the Rule object's.
	parents := []struct{ ns, name string }{{ns, "otto"}, {objNS, "olga"}}
	for _, p := range parents {
		create(t, octopusGVR, octopus(p.ns, p.name))
		role := "octopus-" + p.ns + "-" + p.name
		t.Cleanup(func() {
			_ = env.kube.RbacV1().ClusterRoles().Delete(context.Background(), role, metav1.DeleteOptions{})
		})
		waitFor(t, crGVR, "", role, nil)
		waitFor(t, octopusGVR, p.ns, p.name, func(o *unstructured.Unstructured) error {
			if !slices.Contains(o.GetFinalizers(), "kgen.dev/cleanup") {
				return fmt.Errorf("finalizers = %v", o.GetFinalizers())
			}
			return nil
		})
	}

	start := time.Now()
	out, err := runHelm(t, "uninstall", "kgen", "--namespace", release, "--wait", "--timeout", "3m")
	if err != nil {
		dumpPods(t, release)
		t.Fatalf("helm uninstall: %v\n%s", err, out)
	}
	t.Logf("helm uninstall --wait took %s", time.Since(start).Round(time.Millisecond))
	for _, p := range parents {
		parent := get(t, octopusGVR, p.ns, p.name)
		if parent == nil {
			t.Fatalf("the parent %s is gone", p.name)
		}
		if got := parent.GetFinalizers(); !slices.Equal(got, []string{"example.com/keep"}) {
			t.Errorf("after helm uninstall the finalizers of %s are %q, want only the other controller's", p.name, got)
		}
		if get(t, crGVR, "", "octopus-"+p.ns+"-"+p.name) == nil {
			t.Errorf("helm uninstall deleted the child of %s; children stay", p.name)
		}
	}
	if get(t, ruleGVR, "", "octopus-cleanup-object") == nil {
		t.Error("helm uninstall deleted the Rule object; Rule objects stay")
	}
	for _, gone := range []struct {
		gvr  schema.GroupVersionResource
		name string
	}{{deployGVR, "kgen"}, {schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}, "kgen-cleanup"}} {
		if get(t, gone.gvr, release, gone.name) != nil {
			t.Errorf("%s %s is left after helm uninstall", gone.gvr.Resource, gone.name)
		}
	}
	user := "system:serviceaccount:" + release + ":kgen"
	for _, e := range auditOfPods(t, user, start) {
		if e.ResponseStatus.Code == 403 {
			t.Errorf("the cleanup hook was refused %s %s %s/%s", e.Verb, e.ObjectRef.Resource, e.ObjectRef.Namespace, e.ObjectRef.Name)
		}
	}

	// Only the other controller's finalizer holds the parents now.
	for _, p := range parents {
		if err := env.dynamic.Resource(octopusGVR).Namespace(p.ns).Delete(ctx, p.name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		patch := []byte(`[{"op":"test","path":"/metadata/finalizers/0","value":"example.com/keep"},{"op":"remove","path":"/metadata/finalizers/0"}]`)
		if _, err := env.dynamic.Resource(octopusGVR).Namespace(p.ns).Patch(ctx, p.name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		waitGone(t, octopusGVR, p.ns, p.name)
	}
}

// TestHelmUninstallWithForbiddenRuleObject (audit finding): a Rule object
// created without its RBAC never runs (it says Forbidden), and the
// uninstall hook may not list its parents either. kgen's record says no
// rule of kgen ever watched them, so none holds kgen's finalizer: the hook
// notes it and helm uninstall succeeds, where it used to fail.
func TestHelmUninstallWithForbiddenRuleObject(t *testing.T) {
	const group = "forbiddenuninstall.example.com"
	ns := newNamespace(t)
	newCRD(t, group, "Gadget", "gadgets")
	release, kubelet, _ := helmInstallWebApp(t, filepath.Join(env.root, "charts/kgen"), ns)
	waitLeader(t, release, "kgen")
	create(t, webappGVR, webapp(ns, "shop", 1))
	waitFor(t, cmGVR, ns, "shop-config", nil)
	applyRule(t, gadgetRuleDoc("forbidden-uninstall", group, "Gadget", ns, `  children:
  - id: config
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: "${parent.metadata.name}-gadget"}}
`))
	waitRuleStatus(t, "forbidden-uninstall", readyIs("False", "Forbidden", "gadgets"))

	out, err := runHelm(t, "uninstall", "kgen", "--namespace", release, "--wait", "--timeout", "3m")
	if err != nil {
		dumpPods(t, release)
		t.Fatalf("helm uninstall with a Rule object kgen may not run: %v\n%s\n%s", err, out, kubelet.outputs())
	}
	if logs := kubelet.outputs(); !strings.Contains(logs, "no rule of kgen ever watched there") {
		t.Errorf("the cleanup hook did not note the parents it may not list:\n%s", logs)
	}
}

// Two releases of the chart in one namespace, each with its own rule of
// one kind in every namespace, told apart by a label selector (a
// cluster-scoped child, so kgen's finalizer guards it). Each keeps its own
// record of its rules (<fullname>-state): the second release neither takes
// the first's rule for a removed one and releases its parent when it
// starts, nor the first the second's when it restarts, nor the first's
// uninstall hook (kgenctl cleanup) the second's parent.
func TestHelmTwoReleasesInOneNamespace(t *testing.T) {
	installCRD(t, "e2e/testdata/octopus-crd.yaml")
	release := newNamespace(t)
	startPods(t, release)
	chart := filepath.Join(env.root, "charts/kgen")
	type install struct{ name, rule, ns, parent string }
	installs := []install{{"kgen-a", "two-a", newNamespace(t), "otto"}, {"kgen-b", "two-b", newNamespace(t), "olga"}}
	converged := func(in install) func(*unstructured.Unstructured) error {
		return func(o *unstructured.Unstructured) error {
			if !slices.Contains(o.GetFinalizers(), reconcile.Finalizer) {
				return fmt.Errorf("finalizers of %s = %v, want kgen's", in.parent, o.GetFinalizers())
			}
			return nil
		}
	}
	start := time.Now()
	for _, in := range installs {
		rulesFile := writeRules(t, `apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata:
  name: `+in.rule+`
spec:
  parent:
    apiVersion: zoo.example.com/v1
    kind: Octopus
    selector: {matchLabels: {release: `+in.name+`}}
  children:
  - id: role
    template:
      apiVersion: rbac.authorization.k8s.io/v1
      kind: ClusterRole
      metadata:
        name: octopus-${parent.metadata.namespace}-${parent.metadata.name}
      rules: []
`)
		values, err := kgenctl(t, "rbac", "--rules", rulesFile, "--crd", filepath.Join(env.root, "e2e/testdata/octopus-crd.yaml"), "-o", "helm-values")
		if err != nil {
			t.Fatal(err)
		}
		valuesFile := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(valuesFile, []byte(values), 0o644); err != nil {
			t.Fatal(err)
		}
		// Rule objects are for one kgen per cluster; these run files only.
		helmInstallNamed(t, chart, in.name, release, "-f", valuesFile, "--set-file", "rules.octopus="+rulesFile, "--set", "ruleObjects.enabled=false")
		role := "octopus-" + in.ns + "-" + in.parent
		t.Cleanup(func() {
			_, _ = env.dynamic.Resource(octopusGVR).Namespace(in.ns).Patch(context.Background(), in.parent, types.MergePatchType,
				[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			_ = env.kube.RbacV1().ClusterRoles().Delete(context.Background(), role, metav1.DeleteOptions{})
		})
		create(t, octopusGVR, map[string]any{"apiVersion": "zoo.example.com/v1", "kind": "Octopus",
			"metadata": map[string]any{"name": in.parent, "namespace": in.ns, "labels": map[string]any{"release": in.name}},
			"spec":     map[string]any{"arms": int64(8)}})
		waitFor(t, crGVR, "", role, nil)
		waitFor(t, octopusGVR, in.ns, in.parent, converged(in))
	}
	// Neither release writes to the other's parents or children: a release
	// and a re-add of kgen's finalizer would pass unseen by a check of the
	// parents alone.
	crossWrites := func() {
		t.Helper()
		for _, in := range installs {
			for _, e := range auditOfPods(t, "system:serviceaccount:"+release+":"+in.name, start) {
				if !isWrite(e.Verb) || e.ObjectRef.Resource == "leases" || e.ObjectRef.Resource == "events" || e.ObjectRef.Resource == "configmaps" {
					continue
				}
				if slices.ContainsFunc(installs, func(o install) bool {
					return o != in && (e.ObjectRef.Namespace == o.ns || e.ObjectRef.Name == "octopus-"+o.ns+"-"+o.parent)
				}) {
					t.Errorf("release %s wrote the other release's %s %s/%s (%s)", in.name, e.ObjectRef.Resource, e.ObjectRef.Namespace, e.ObjectRef.Name, e.Verb)
				}
			}
		}
	}
	records := func() {
		t.Helper()
		crossWrites()
		for _, in := range installs {
			cm, err := env.kube.CoreV1().ConfigMaps(release).Get(t.Context(), in.name+"-state", metav1.GetOptions{})
			if err != nil {
				t.Fatalf("the record of release %s: %v", in.name, err)
			}
			var got []string
			for k := range cm.Data {
				got = append(got, k)
			}
			if !slices.Contains(got, in.rule) || slices.ContainsFunc(installs, func(o install) bool { return o != in && slices.Contains(got, o.rule) }) {
				t.Errorf("the record of release %s holds rules %v, want %s and not the other release's", in.name, got, in.rule)
			}
		}
	}
	// The second release has started, swept and recorded.
	time.Sleep(3 * time.Second)
	records()
	for _, in := range installs {
		if p := get(t, octopusGVR, in.ns, in.parent); p == nil || converged(in)(p) != nil {
			t.Errorf("after the second release started: %v", p)
		}
	}

	// The first restarts, and again leaves the second's parent alone.
	restartPods(t, release, "app.kubernetes.io/instance=kgen-a")
	time.Sleep(3 * time.Second)
	records()
	for _, in := range installs {
		if p := get(t, octopusGVR, in.ns, in.parent); p == nil || converged(in)(p) != nil {
			t.Errorf("after the first release restarted: %v", p)
		}
	}

	// Uninstalling the first: its hook releases its own parent and leaves
	// the second's, which it finds as well, alone.
	if out, err := runHelm(t, "uninstall", "kgen-a", "--namespace", release, "--wait", "--timeout", "3m"); err != nil {
		t.Fatalf("helm uninstall kgen-a: %v\n%s", err, out)
	}
	crossWrites()
	if p := get(t, octopusGVR, installs[0].ns, installs[0].parent); p == nil || slices.Contains(p.GetFinalizers(), reconcile.Finalizer) {
		t.Errorf("after kgen-a was uninstalled, its parent %s: %v, want it without kgen's finalizer", installs[0].parent, p)
	}
	if p := get(t, octopusGVR, installs[1].ns, installs[1].parent); p == nil || converged(installs[1])(p) != nil {
		t.Errorf("after kgen-a was uninstalled, kgen-b's parent: %v", p)
	}
}

// helm upgrade from the previous chart version (e2e/testdata, 0.1.0) to
// this one rolls kgen's pods and keeps every parent converged: no child is
// deleted or recreated.
func TestHelmUpgradeFromPreviousChart(t *testing.T) {
	ns := newNamespace(t)
	release, _, values := helmInstallWebApp(t, filepath.Join(env.root, "e2e/testdata/kgen-0.1.0.tgz"), ns)
	const parents = 3
	for i := range parents {
		create(t, webappGVR, webapp(ns, fmt.Sprintf("shop-%d", i), 1))
	}
	eventually(t, 60*time.Second, func() (bool, error) { return converged(t, ns, parents) }, "the parents to converge under chart 0.1.0")
	before := childUIDs(t, ns)
	if len(before) != 3*parents {
		t.Fatalf("%d children, want %d", len(before), 3*parents)
	}
	oldPods := podsOf(t, release, "app.kubernetes.io/name=kgen")

	start := time.Now()
	if _, err := runHelm(t, append([]string{"upgrade", "kgen", filepath.Join(env.root, "charts/kgen"), "--namespace", release,
		"--wait", "--timeout", "5m"}, values...)...); err != nil {
		dumpPods(t, release)
		t.Fatalf("helm upgrade: %v", err)
	}
	t.Logf("helm upgrade --wait took %s", time.Since(start).Round(time.Millisecond))
	for _, p := range podsOf(t, release, "app.kubernetes.io/name=kgen") {
		if slices.ContainsFunc(oldPods, func(old corev1.Pod) bool { return old.UID == p.UID }) {
			t.Errorf("pod %s of chart 0.1.0 still runs", p.Name)
		}
		if p.Labels["helm.sh/chart"] != "kgen-0.2.0" {
			t.Errorf("pod %s is of chart %s", p.Name, p.Labels["helm.sh/chart"])
		}
	}
	waitLeader(t, release, "kgen")
	// The new leader works: a new parent converges, and the old stay.
	create(t, webappGVR, webapp(ns, "after-upgrade", 1))
	eventually(t, 60*time.Second, func() (bool, error) { return converged(t, ns, parents+1) }, "the parents to converge under this chart")
	after := childUIDs(t, ns)
	for name, uid := range before {
		if after[name] != uid {
			t.Errorf("child %s was recreated or deleted across the upgrade: uid %s, then %q", name, uid, after[name])
		}
	}
	user := "system:serviceaccount:" + release + ":kgen"
	for _, e := range auditOfPods(t, user, start) {
		if e.Verb == "delete" && e.ObjectRef.Namespace == ns {
			t.Errorf("kgen (pod %s) deleted %s %s during the upgrade", e.pod(), e.ObjectRef.Resource, e.ObjectRef.Name)
		}
	}
}

// childUIDs returns the UIDs of kgen's children in ns by kind and name.
func childUIDs(t *testing.T, ns string) map[string]types.UID {
	t.Helper()
	out := map[string]types.UID{}
	for _, gvr := range []schema.GroupVersionResource{cmGVR, deployGVR, svcGVR} {
		list, err := env.dynamic.Resource(gvr).Namespace(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=kgen"})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range list.Items {
			out[gvr.Resource+"/"+o.GetName()] = o.GetUID()
		}
	}
	return out
}

// A rolling update never has two leaders writing: while kgen's pods roll
// and a parent keeps changing, the writes of each pod (told apart by the
// pod its token is bound to) span intervals that do not overlap.
func TestHelmRollingUpdateHasOneWriter(t *testing.T) {
	ctx := t.Context()
	ns := newNamespace(t)
	release, _, values := helmInstallWebApp(t, filepath.Join(env.root, "charts/kgen"), ns)
	before := waitLeader(t, release, "kgen")
	lease, err := env.kube.CoordinationV1().Leases(release).Get(ctx, "kgen", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	transitions := ptrOr(lease.Spec.LeaseTransitions, 0)
	create(t, webappGVR, webapp(ns, "busy", 1))
	waitFor(t, cmGVR, ns, "busy-config", nil)

	// Change the parent all along the rollout, so there is always
	// something to write.
	start := time.Now()
	stop := make(chan struct{})
	halt := sync.OnceFunc(func() { close(stop) })
	t.Cleanup(halt) // also when the test fails before it halts
	var wg sync.WaitGroup
	var changes atomic.Int64 // image i is nginx:1.(100+i)
	var lastImage string
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			image := fmt.Sprintf("nginx:1.%d", 100+changes.Load())
			patch := fmt.Appendf(nil, `{"spec":{"image":%q}}`, image)
			if _, err := env.dynamic.Resource(webappGVR).Namespace(ns).Patch(context.Background(), "busy", types.MergePatchType, patch, metav1.PatchOptions{}); err == nil {
				changes.Add(1)
				lastImage = image
			}
		}
	})
	_, err = runHelm(t, append([]string{"upgrade", "kgen", filepath.Join(env.root, "charts/kgen"), "--namespace", release,
		"--wait", "--timeout", "5m", "--set-string", "podAnnotations.example\\.com/rollout=1"}, values...)...)
	if err != nil {
		halt()
		wg.Wait()
		dumpPods(t, release)
		t.Fatalf("helm upgrade: %v", err)
	}
	// helm's wait ends once the new pods are ready, which may be before
	// the old leader has gone: keep changing the parent until a new pod
	// leads and has followed a change made after it took the Lease, so
	// that the handover happens while there is something to write.
	eventually(t, 60*time.Second, func() (bool, error) {
		l, err := env.kube.CoordinationV1().Leases(release).Get(ctx, "kgen", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		holder := ptrOr(l.Spec.HolderIdentity, "")
		return holder != "" && holder != before, fmt.Errorf("the Lease is still held by %q", holder)
	}, "a new pod to lead")
	led := 100 + changes.Load() // no image from here on was made before the new leader led
	waitFor(t, cmGVR, ns, "busy-config", func(o *unstructured.Unstructured) error {
		image, _, _ := unstructured.NestedString(o.Object, "data", "image")
		var i int64
		if _, err := fmt.Sscanf(image, "nginx:1.%d", &i); err != nil || i < led {
			return fmt.Errorf("image %q, want nginx:1.%d or later", image, led)
		}
		return nil
	})
	halt()
	wg.Wait()
	t.Logf("the parent changed %d times during the rollout", changes.Load())
	waitFor(t, cmGVR, ns, "busy-config", func(o *unstructured.Unstructured) error { return expect(o, lastImage, "data", "image") })
	after := waitLeader(t, release, "kgen")
	lease, err = env.kube.CoordinationV1().Leases(release).Get(ctx, "kgen", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the Lease went from %s to %s in %d transitions", before, after, ptrOr(lease.Spec.LeaseTransitions, 0)-transitions)
	if after == before {
		t.Errorf("the leader %s survived a rollout that replaced every pod", before)
	}

	// Each pod's writes, from its first request received to its last
	// answered.
	type span struct {
		pod         string
		first, last time.Time
		writes      int
	}
	spans := map[string]*span{}
	for _, e := range auditOfPods(t, "system:serviceaccount:"+release+":kgen", start) {
		if !isWrite(e.Verb) || e.ObjectRef.Resource == "leases" || e.ObjectRef.Resource == "events" {
			continue
		}
		s := spans[e.pod()]
		if s == nil {
			s = &span{pod: e.pod(), first: e.RequestReceivedTimestamp, last: e.StageTimestamp}
			spans[e.pod()] = s
		}
		s.writes++
		s.first = minTime(s.first, e.RequestReceivedTimestamp)
		s.last = maxTime(s.last, e.StageTimestamp)
	}
	var ordered []*span
	for _, s := range spans {
		ordered = append(ordered, s)
	}
	sort.Slice(ordered, func(i, j int) bool { return ordered[i].first.Before(ordered[j].first) })
	for i, s := range ordered {
		t.Logf("pod %s wrote %d times from %s to %s", s.pod, s.writes, s.first.Format("15:04:05.000000"), s.last.Format("15:04:05.000000"))
		if i > 0 {
			if prev := ordered[i-1]; !s.first.After(prev.last) {
				t.Errorf("pods %s and %s wrote at the same time: %s began before %s ended", prev.pod, s.pod,
					s.first.Format("15:04:05.000000"), prev.last.Format("15:04:05.000000"))
			} else {
				t.Logf("  %s after %s's last write", s.first.Sub(prev.last).Round(time.Millisecond), prev.pod)
			}
		}
	}
	if len(ordered) < 2 {
		t.Errorf("%d pods wrote during the rollout; the handover was not exercised", len(ordered))
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// podAuditEvent is an audit event with what tells pods apart: the pod a
// service account token is bound to, in the user's extra.
type podAuditEvent struct {
	auditEvent
	User struct {
		Username string              `json:"username"`
		Extra    map[string][]string `json:"extra"`
	} `json:"user"`
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
}

func (e podAuditEvent) pod() string {
	if p := e.User.Extra["authentication.kubernetes.io/pod-name"]; len(p) > 0 {
		return p[0]
	}
	return "(no pod)"
}

// auditOfPods returns the completed requests of a user since a time.
func auditOfPods(t *testing.T, user string, since time.Time) []podAuditEvent {
	t.Helper()
	return readAudit(t, func(e podAuditEvent) bool {
		return e.Stage == "ResponseComplete" && e.User.Username == user && !e.StageTimestamp.Before(since)
	})
}

// An upgrade that changes how kgen's replicas agree on who writes (leader
// election turned on, another Lease, sharding on, and back), and a
// rollback across such a change, have one writer per object throughout:
// old and new pods do not see each other's Leases, so the chart's
// pre-upgrade and pre-rollback hook stops the old ones first. From one
// replica without leader election to two with it, the Deployment
// controller would even scale the old pods (no leader election) up to two
// before it rolls. An upgrade that changes none of that stops nothing. No
// child is deleted or recreated.
func TestHelmUpgradeChangesWriters(t *testing.T) {
	ctx := t.Context()
	ns := newNamespace(t)
	chart := filepath.Join(env.root, "charts/kgen")
	release, kubelet, values := helmInstallWebApp(t, chart, ns, "--set", "replicaCount=1", "--set", "leaderElection.enabled=false")
	create(t, webappGVR, webapp(ns, "busy", 1))
	waitFor(t, cmGVR, ns, "busy-config", nil)
	before := childUIDs(t, ns)

	upgrade := func(set ...string) []string {
		return append(append([]string{"upgrade", "kgen", chart, "--namespace", release, "--wait", "--timeout", "5m"}, values...), set...)
	}
	var changes atomic.Int64 // image i is nginx:1.(100+i)
	steps := []struct {
		name  string
		helm  []string
		stops bool // whether the hook stops the running kgen
	}{
		{"leader election on, two replicas", upgrade(), true},                                                                             // revision 2
		{"a rollout that keeps the writers", upgrade("--set-string", "podAnnotations.example\\.com/rollout=1"), false},                    // 3
		{"another Lease", upgrade("--set", "leaderElection.leaseName=kgen-other"), true},                                                  // 4
		{"sharding instead of leader election", upgrade("--set", "sharding.enabled=true", "--set", "leaderElection.enabled=false"), true}, // 5
		{"back to leader election", upgrade(), true},                                                                                      // 6
		{"rollback to sharding", []string{"rollback", "kgen", "5", "--namespace", release, "--wait", "--timeout", "5m"}, true},
	}
	for _, step := range steps {
		start := time.Now()
		stop := make(chan struct{})
		halt := sync.OnceFunc(func() { close(stop) })
		var wg sync.WaitGroup
		var lastImage atomic.Value
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(200 * time.Millisecond):
				}
				image := fmt.Sprintf("nginx:1.%d", 100+changes.Load())
				patch := fmt.Appendf(nil, `{"spec":{"image":%q}}`, image)
				if _, err := env.dynamic.Resource(webappGVR).Namespace(ns).Patch(context.Background(), "busy", types.MergePatchType, patch, metav1.PatchOptions{}); err == nil {
					changes.Add(1)
					lastImage.Store(image)
				}
			}
		})
		out, err := runHelm(t, step.helm...)
		if err != nil {
			halt()
			wg.Wait()
			dumpPods(t, release)
			t.Fatalf("%s: helm %s: %v\n%s\n%s", step.name, step.helm[0], err, out, kubelet.outputs())
		}
		stopped := 0
		for _, e := range auditOfPods(t, "system:serviceaccount:"+release+":kgen-stop", start) {
			if e.Verb == "update" && e.ObjectRef.Subresource == "scale" && e.ResponseStatus.Code == 200 {
				stopped++
			}
		}
		if (stopped > 0) != step.stops {
			t.Errorf("%s: the hook scaled kgen to 0 %d times, want it to stop kgen: %t", step.name, stopped, step.stops)
		}
		// The new pods follow a change made after they started.
		after := 100 + changes.Load()
		waitFor(t, cmGVR, ns, "busy-config", func(o *unstructured.Unstructured) error {
			image, _, _ := unstructured.NestedString(o.Object, "data", "image")
			var i int64
			if _, err := fmt.Sscanf(image, "nginx:1.%d", &i); err != nil || i < after {
				return fmt.Errorf("image %q, want nginx:1.%d or later", image, after)
			}
			return nil
		})
		halt()
		wg.Wait()
		waitFor(t, cmGVR, ns, "busy-config", func(o *unstructured.Unstructured) error { return expect(o, lastImage.Load().(string), "data", "image") })
		checkOneWriterPerObject(t, step.name, release, start)
	}
	if _, err := env.kube.BatchV1().Jobs(release).Get(ctx, "kgen-stop", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the stop hook's Job is left after it succeeded: %v", err)
	}
	for name, uid := range childUIDs(t, ns) {
		if before[name] != uid {
			t.Errorf("child %s is %s, was %s: recreated", name, uid, before[name])
		}
	}
}

// checkOneWriterPerObject fails the test when two of kgen's pods wrote one
// object at the same time since start: for each object, the span of each
// pod's writes (from its first request received to its last answered)
// must not overlap another pod's.
func checkOneWriterPerObject(t *testing.T, step, release string, start time.Time) {
	t.Helper()
	type span struct {
		pod         string
		first, last time.Time
		writes      int
	}
	objects := map[string]map[string]*span{}
	for _, e := range auditOfPods(t, "system:serviceaccount:"+release+":kgen", start) {
		if !isWrite(e.Verb) || e.ObjectRef.Resource == "leases" || e.ObjectRef.Resource == "events" || e.ResponseStatus.Code >= 300 {
			continue
		}
		key := strings.Join([]string{e.ObjectRef.Resource, e.ObjectRef.Subresource, e.ObjectRef.Namespace, e.ObjectRef.Name}, "/")
		if objects[key] == nil {
			objects[key] = map[string]*span{}
		}
		s := objects[key][e.pod()]
		if s == nil {
			s = &span{pod: e.pod(), first: e.RequestReceivedTimestamp, last: e.StageTimestamp}
			objects[key][e.pod()] = s
		}
		s.writes++
		s.first = minTime(s.first, e.RequestReceivedTimestamp)
		s.last = maxTime(s.last, e.StageTimestamp)
	}
	pods := map[string]int{}
	for key, spans := range objects {
		var ordered []*span
		for _, s := range spans {
			ordered = append(ordered, s)
			pods[s.pod] += s.writes
		}
		sort.Slice(ordered, func(i, j int) bool { return ordered[i].first.Before(ordered[j].first) })
		for i := 1; i < len(ordered); i++ {
			if prev, s := ordered[i-1], ordered[i]; !s.first.After(prev.last) {
				t.Errorf("%s: pods %s (%d writes until %s) and %s (%d from %s) wrote %s at the same time", step,
					prev.pod, prev.writes, prev.last.Format("15:04:05.000"), s.pod, s.writes, s.first.Format("15:04:05.000"), key)
			}
		}
	}
	t.Logf("%s: writes by pod %v, to %d objects", step, pods, len(objects))
	if len(pods) < 2 {
		t.Errorf("%s: %d pods wrote; the handover was not exercised", step, len(pods))
	}
}
