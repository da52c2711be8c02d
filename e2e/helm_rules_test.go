//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"kgen.dev/kgen/pkg/reconcile"
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
	args := withRulesFile(t, values, changedFile)
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

// TestHelmUpgradeNarrowsNamespaces (contract §6, "No parent is ever stuck
// Terminating because of kgen"; audit finding): a helm upgrade narrows a
// rule's namespaces, with the RBAC values kgenctl rbac derives from the
// new rules, which no longer grant anything in the dropped namespace. The
// chart keeps list and patch on the parent kind there (its release Role,
// from the record's annotation), so kgen removes its finalizer from the
// parent left out, whose child stays; the parent can then be deleted. Once
// kgen has released it and dropped the scope from its record, the next
// upgrade removes the release Role.
func TestHelmUpgradeNarrowsNamespaces(t *testing.T) {
	ctx := t.Context()
	chart := filepath.Join(env.root, "charts/kgen")
	installCRD(t, "examples/webapp/crd.yaml")
	kept, dropped, remote := newNamespace(t), newNamespace(t), newNamespace(t)
	release := newNamespace(t)
	startPods(t, release)
	rulesFor := func(namespaces string) string {
		return remoteChildRule(t, "narrow", namespaces, remote)
	}
	valuesFor := func(rulesFile string) []string {
		return []string{"-f", generateRBACValues(t, rulesFile), "--set-file", "rules.narrow=" + rulesFile}
	}
	upgrade := func(values []string) {
		t.Helper()
		if _, err := runHelm(t, append([]string{"upgrade", "kgen", chart, "--namespace", release, "--wait", "--timeout", "3m"}, values...)...); err != nil {
			dumpPods(t, release)
			t.Fatalf("helm upgrade: %v", err)
		}
	}
	helmInstall(t, chart, release, valuesFor(rulesFor(kept+", "+dropped))...)
	t.Cleanup(func() {
		for _, ns := range []string{kept, dropped} {
			_, _ = env.dynamic.Resource(webappGVR).Namespace(ns).Patch(ctx, "shop", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		}
	})
	for _, ns := range []string{kept, dropped} {
		create(t, webappGVR, webapp(ns, "shop", 1))
		waitFor(t, webappGVR, ns, "shop", hasFinalizer(true))
		waitFor(t, cmGVR, remote, ns+"-shop", nil)
	}
	annotation := func() string {
		cm, err := env.kube.CoreV1().ConfigMaps(release).Get(ctx, "kgen-state", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cm.Annotations["kgen.dev/release"]
	}
	if got := annotation(); !strings.Contains(got, dropped) {
		t.Fatalf("the record's annotation %q does not name namespace %s", got, dropped)
	}
	// Whoever may write the annotation (kgen itself, an editor of its
	// namespace) cannot widen kgen's rights with it: the chart keeps only
	// what kgen holds.
	var held map[string][]string
	if err := json.Unmarshal([]byte(annotation()), &held); err != nil {
		t.Fatal(err)
	}
	held[dropped] = append(held[dropped], "secrets", "*")
	held[""] = []string{"secrets", "deployments.apps"}
	tampered, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{"kgen.dev/release": mustJSON(t, held)}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.kube.CoreV1().ConfigMaps(release).Patch(ctx, "kgen-state", types.MergePatchType, tampered, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	upgrade(valuesFor(rulesFor(kept)))
	if _, err := env.kube.RbacV1().ClusterRoles().Get(ctx, "kgen-release", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a release ClusterRole from annotation entries kgen was never granted: %v", err)
	}
	if _, err := env.kube.RbacV1().Roles(dropped).Get(ctx, "kgen", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("kgen's Role in the dropped namespace: %v, want it removed by the new values", err)
	}
	role, err := env.kube.RbacV1().Roles(dropped).Get(ctx, "kgen-release", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the release Role in the dropped namespace: %v", err)
	}
	// patch on the parents comes from the ClusterRole (kgenctl rbac grants
	// it cluster-wide to a rule whose parents may hold the finalizer),
	// which the new values keep; list was only in the Role.
	want := []rbacv1.PolicyRule{{APIGroups: []string{"example.com"}, Resources: []string{"webapps"}, Verbs: []string{"list"}}}
	if !equality.Semantic.DeepEqual(role.Rules, want) {
		t.Errorf("the release Role grants %v, want %v", role.Rules, want)
	}
	if _, err := env.kube.RbacV1().Roles(kept).Get(ctx, "kgen-release", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a release Role where the values grant it all: %v", err)
	}

	// The kubelet updates the ConfigMap volume (the fake one within a
	// second); kgen reads its files every 2 s and releases the parent.
	start := time.Now()
	eventually(t, 90*time.Second, func() (bool, error) {
		err := hasFinalizer(false)(get(t, webappGVR, dropped, "shop"))
		return err == nil, err
	}, "kgen to release the parent in the dropped namespace")
	t.Logf("the parent left out was released %s after the upgrade", time.Since(start).Round(time.Millisecond))
	if get(t, cmGVR, remote, dropped+"-shop") == nil {
		t.Error("the released parent's child was deleted; it stays")
	}
	if err := env.dynamic.Resource(webappGVR).Namespace(dropped).Delete(ctx, "shop", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, webappGVR, dropped, "shop")
	waitFor(t, webappGVR, kept, "shop", hasFinalizer(true))

	eventually(t, 60*time.Second, func() (bool, error) {
		got := annotation()
		return !strings.Contains(got, dropped), fmt.Errorf("annotation %q", got)
	}, "kgen to drop the released scope from its record")
	upgrade(valuesFor(rulesFor(kept)))
	if _, err := env.kube.RbacV1().Roles(dropped).Get(ctx, "kgen-release", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the release Role after kgen released everything and a second upgrade: %v, want it gone", err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// TestHelmNamespaceDeleted (contract §6, "No parent is ever stuck
// Terminating because of kgen"): a team's namespace is deleted while a
// parent there carries kgen's finalizer (its child is in another
// namespace), and kgen's rights on the parent come from its Role in that
// namespace, which the namespace controller deletes too, in no set order.
// The parent still goes, its child with it, and so does the namespace.
// The rule still names it: after a restart, kgen may not list there any
// more, and the rule runs for its other namespace all the same.
func TestHelmNamespaceDeleted(t *testing.T) {
	ctx := t.Context()
	installCRD(t, "examples/webapp/crd.yaml")
	team, kept, remote, release := newNamespace(t), newNamespace(t), newNamespace(t), newNamespace(t)
	startPods(t, release)
	rulesFile := remoteChildRule(t, "teamns", team+", "+kept, remote)
	helmInstall(t, filepath.Join(env.root, "charts/kgen"), release, "-f", generateRBACValues(t, rulesFile), "--set-file", "rules.teamns="+rulesFile)
	t.Cleanup(func() {
		_, _ = env.dynamic.Resource(webappGVR).Namespace(team).Patch(context.Background(), "shop", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	t.Cleanup(func() {
		_, _ = env.dynamic.Resource(webappGVR).Namespace(kept).Patch(context.Background(), "shop", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	create(t, webappGVR, webapp(team, "shop", 1))
	create(t, webappGVR, webapp(kept, "shop", 1))
	waitFor(t, webappGVR, team, "shop", hasFinalizer(true))
	waitFor(t, cmGVR, remote, team+"-shop", nil)
	waitFor(t, cmGVR, remote, kept+"-shop", nil)

	if err := env.kube.CoreV1().Namespaces().Delete(ctx, team, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	eventually(t, 90*time.Second, func() (bool, error) {
		p := get(t, webappGVR, team, "shop")
		if p == nil {
			return true, nil
		}
		return false, fmt.Errorf("the parent is still there, finalizers %v", p.GetFinalizers())
	}, "the parent in the deleted namespace to go")
	t.Logf("the parent went %s after its namespace was deleted", time.Since(start).Round(time.Millisecond))
	waitGone(t, cmGVR, remote, team+"-shop")
	eventually(t, 90*time.Second, func() (bool, error) {
		_, err := env.kube.CoreV1().Namespaces().Get(ctx, team, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Errorf("namespace: %v", err)
	}, "the namespace to go")

	// kgen restarts: its informer of the namespace that is gone cannot
	// list, and must not hold back the rule's other namespace.
	restartPods(t, release, "app.kubernetes.io/name=kgen")
	patchSpec(t, webappGVR, kept, "shop", map[string]any{"image": "nginx:1.28"})
	start = time.Now()
	waitFor(t, cmGVR, remote, kept+"-shop", func(o *unstructured.Unstructured) error { return expect(o, "nginx:1.28", "data", "image") })
	t.Logf("the change of the parent in the other namespace landed %s after it was made", time.Since(start).Round(time.Millisecond))

	// helm upgrade leaves out the Role of the namespace that is gone,
	// rather than failing on it, and says so.
	out, err := runHelm(t, "upgrade", "kgen", filepath.Join(env.root, "charts/kgen"), "--namespace", release, "--wait", "--timeout", "3m", "--reuse-values")
	if err != nil {
		dumpPods(t, release)
		t.Fatalf("helm upgrade after a namespace of the rule was deleted: %v\n%s", err, out)
	}
	if want := "Namespaces that rbac.rules.namespaces names are gone, or being deleted: " + team + "."; !strings.Contains(out, want) {
		t.Errorf("helm upgrade's notes do not say %q:\n%s", want, out)
	}
	patchSpec(t, webappGVR, kept, "shop", map[string]any{"image": "nginx:1.29"})
	waitFor(t, cmGVR, remote, kept+"-shop", func(o *unstructured.Unstructured) error { return expect(o, "nginx:1.29", "data", "image") })

	// The rule still names the namespace that is gone: helm uninstall's
	// hook, which may not list there any more, does not fail on it.
	if out, err := runHelm(t, "uninstall", "kgen", "--namespace", release, "--wait", "--timeout", "3m"); err != nil {
		dumpPods(t, release)
		t.Fatalf("helm uninstall after the rule's namespace was deleted: %v\n%s", err, out)
	}
}

// TestHelmUpgradeWhileANamespaceTerminates: a namespace a rule names is
// being deleted, held Terminating by another controller's finalizer, and
// the namespace controller has deleted kgen's Role there already. helm
// upgrade leaves that Role out, rather than failing on it (the API server
// refuses to create anything in a namespace being deleted), and says so.
func TestHelmUpgradeWhileANamespaceTerminates(t *testing.T) {
	ctx := t.Context()
	chart := filepath.Join(env.root, "charts/kgen")
	installCRD(t, "examples/webapp/crd.yaml")
	team, kept, remote, release := newNamespace(t), newNamespace(t), newNamespace(t), newNamespace(t)
	startPods(t, release)
	rulesFile := remoteChildRule(t, "teamns", team+", "+kept, remote)
	helmInstall(t, chart, release, "-f", generateRBACValues(t, rulesFile), "--set-file", "rules.teamns="+rulesFile)
	held := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held", Namespace: team, Finalizers: []string{"example.com/hold"}}}
	if _, err := env.kube.CoreV1().ConfigMaps(team).Create(ctx, held, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = env.kube.CoreV1().ConfigMaps(team).Patch(context.Background(), "held", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	if err := env.kube.CoreV1().Namespaces().Delete(ctx, team, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, func() (bool, error) {
		_, err := env.kube.RbacV1().Roles(team).Get(ctx, "kgen", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Errorf("kgen's Role in the namespace being deleted: %v", err)
	}, "the namespace controller to delete kgen's Role")
	if ns, err := env.kube.CoreV1().Namespaces().Get(ctx, team, metav1.GetOptions{}); err != nil || ns.DeletionTimestamp == nil {
		t.Fatalf("namespace %s: %v, %v; want it held Terminating", team, ns, err)
	}

	out, err := runHelm(t, "upgrade", "kgen", chart, "--namespace", release, "--wait", "--timeout", "3m", "--reuse-values")
	if err != nil {
		dumpPods(t, release)
		t.Fatalf("helm upgrade while a namespace of the rule is being deleted: %v\n%s", err, out)
	}
	if want := "Namespaces that rbac.rules.namespaces names are gone, or being deleted: " + team + "."; !strings.Contains(out, want) {
		t.Errorf("helm upgrade's notes do not say %q:\n%s", want, out)
	}
	// The rule runs in its other namespace.
	create(t, webappGVR, webapp(kept, "shop", 1))
	t.Cleanup(func() {
		_, _ = env.dynamic.Resource(webappGVR).Namespace(kept).Patch(context.Background(), "shop", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	waitFor(t, cmGVR, remote, kept+"-shop", nil)
}

// TestHelmUpgradeRemovesARule: a helm upgrade removes a rule limited to a
// namespace whose parents hold kgen's finalizer. kgen held patch on them
// cluster-wide (so a deleted namespace never waits on it) and list in the
// namespace's Role; the release grants keep each where it was, the patch
// in a release ClusterRole, and kgen releases the parent, whose child
// stays.
func TestHelmUpgradeRemovesARule(t *testing.T) {
	ctx := t.Context()
	chart := filepath.Join(env.root, "charts/kgen")
	installCRD(t, "examples/webapp/crd.yaml")
	team, remote, other, release := newNamespace(t), newNamespace(t), newNamespace(t), newNamespace(t)
	startPods(t, release)
	removed := remoteChildRule(t, "removed", team, remote)
	helmInstall(t, chart, release, "-f", generateRBACValues(t, removed), "--set-file", "rules.removed="+removed)
	t.Cleanup(func() {
		_, _ = env.dynamic.Resource(webappGVR).Namespace(team).Patch(context.Background(), "shop", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	create(t, webappGVR, webapp(team, "shop", 1))
	waitFor(t, webappGVR, team, "shop", hasFinalizer(true))
	waitFor(t, cmGVR, remote, team+"-shop", nil)

	// The rule is replaced by the example's, in another namespace.
	kept := exampleWebAppRulesIn(t, other)
	if _, err := runHelm(t, "upgrade", "kgen", chart, "--namespace", release, "--wait", "--timeout", "3m",
		"-f", generateRBACValues(t, kept), "--set-file", "rules.webapp="+kept); err != nil {
		dumpPods(t, release)
		t.Fatalf("helm upgrade: %v", err)
	}
	cr, err := env.kube.RbacV1().ClusterRoles().Get(ctx, "kgen-release", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the release ClusterRole: %v", err)
	}
	if want := []rbacv1.PolicyRule{{APIGroups: []string{"example.com"}, Resources: []string{"webapps"}, Verbs: []string{"patch"}}}; !equality.Semantic.DeepEqual(cr.Rules, want) {
		t.Errorf("the release ClusterRole grants %v, want %v", cr.Rules, want)
	}
	role, err := env.kube.RbacV1().Roles(team).Get(ctx, "kgen-release", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the release Role: %v", err)
	}
	if want := []rbacv1.PolicyRule{{APIGroups: []string{"example.com"}, Resources: []string{"webapps"}, Verbs: []string{"list"}}}; !equality.Semantic.DeepEqual(role.Rules, want) {
		t.Errorf("the release Role grants %v, want %v", role.Rules, want)
	}
	eventually(t, 90*time.Second, func() (bool, error) {
		err := hasFinalizer(false)(get(t, webappGVR, team, "shop"))
		return err == nil, err
	}, "kgen to release the removed rule's parent")
	if get(t, cmGVR, remote, team+"-shop") == nil {
		t.Error("the released parent's child was deleted; it stays")
	}
}

// TestHelmUpgradeRemovesAChildKind (contract §8 "Kinds removed from a rule
// are pruned", through a helm upgrade; a live audit): the upgrade removes
// the WebApp example's Service child, the last of its kind, with the RBAC
// kgenctl rbac derives from the new rules, which no longer grants
// anything on Services. The chart keeps, in its release Role, what kgen
// needs to prune them (from the record's annotation
// kgen.dev/release-children), kgen prunes the Service, and the parent
// stays Ready. Once kgen has dropped the scope from its record, the next
// upgrade removes the grant. Before, the Service stayed and the parent
// said Forbidden until the grant was given back by hand.
func TestHelmUpgradeRemovesAChildKind(t *testing.T) {
	ctx := t.Context()
	chart := filepath.Join(env.root, "charts/kgen")
	installCRD(t, "examples/webapp/crd.yaml")
	ns, release := newNamespace(t), newNamespace(t)
	startPods(t, release)
	full := exampleWebAppRulesIn(t, ns)
	helmInstall(t, chart, release, "-f", generateRBACValues(t, full), "--set-file", "rules.webapp="+full)
	create(t, webappGVR, webapp(ns, "shop", 0)) // no Deployment: no pods to wait for
	waitFor(t, svcGVR, ns, "shop", nil)
	waitReason(t, webappGVR, ns, "shop", reconcile.ReasonReady)

	text := mustRead(t, full)
	i, j := strings.Index(text, "  - id: service\n"), strings.Index(text, "  status:\n")
	if i < 0 || j < i {
		t.Fatal("the example's rules no longer have a service child before their status")
	}
	noService := filepath.Join(t.TempDir(), "webapp.yaml")
	if err := os.WriteFile(noService, []byte(text[:i]+text[j:]), 0o644); err != nil {
		t.Fatal(err)
	}
	upgrade := func() {
		t.Helper()
		if _, err := runHelm(t, "upgrade", "kgen", chart, "--namespace", release, "--wait", "--timeout", "3m",
			"-f", generateRBACValues(t, noService), "--set-file", "rules.webapp="+noService); err != nil {
			dumpPods(t, release)
			t.Fatalf("helm upgrade: %v", err)
		}
	}
	upgrade()
	role, err := env.kube.RbacV1().Roles(ns).Get(ctx, "kgen-release", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the release Role: %v", err)
	}
	if !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.Resources, "services") && slices.Contains(r.Verbs, "delete") && slices.Contains(r.Verbs, "list") && slices.Contains(r.Verbs, "watch")
	}) {
		t.Errorf("the release Role grants %v, want list, watch and delete on services", role.Rules)
	}
	waitGone(t, svcGVR, ns, "shop")
	waitReason(t, webappGVR, ns, "shop", reconcile.ReasonReady)
	if get(t, cmGVR, ns, "shop-config") == nil {
		t.Error("the ConfigMap child, still in the rules, is gone")
	}

	eventually(t, 60*time.Second, func() (bool, error) {
		cm, err := env.kube.CoreV1().ConfigMaps(release).Get(ctx, "kgen-state", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got := cm.Annotations["kgen.dev/release-children"]
		return !strings.Contains(got, "services"), fmt.Errorf("annotation %q", got)
	}, "kgen to drop the pruned kind from its record")
	upgrade()
	if _, err := env.kube.RbacV1().Roles(ns).Get(ctx, "kgen-release", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the release Role after kgen pruned everything and a second upgrade: %v, want it gone", err)
	}
}

// TestHelmUpgradeRefusesInvalidRules (contract §7 "An invalid new version
// is not applied", through a helm upgrade; a live audit): an upgrade with
// a rule (given with --set-file, which the values' schema cannot read)
// that does not compile fails, and helm says why, naming the file and the
// expression; the release keeps its rules and its pods, and kgen goes on
// enforcing them. Before, the upgrade succeeded, and only kgen's log said
// the new rules were refused (a pod that restarted then exited).
func TestHelmUpgradeRefusesInvalidRules(t *testing.T) {
	ctx := t.Context()
	ns := newNamespace(t)
	chart := filepath.Join(env.root, "charts/kgen")
	release, kubelet, values := helmInstallWebApp(t, chart, ns)
	create(t, webappGVR, webapp(ns, "shop", 0))
	waitFor(t, cmGVR, ns, "shop-config", nil)
	before := podsOf(t, release, "app.kubernetes.io/name=kgen")

	text := mustRead(t, exampleWebAppRulesIn(t, ns))
	bad := strings.Replace(text, "image: ${parent.spec.image}\n", "image: ${parent.spec.image +}\n", 1)
	if bad == text {
		t.Fatal("the test's edit of the rules did not apply")
	}
	badFile := filepath.Join(t.TempDir(), "webapp.yaml")
	if err := os.WriteFile(badFile, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	args := withRulesFile(t, values, badFile)
	out, err := runHelm(t, append([]string{"upgrade", "kgen", chart, "--namespace", release, "--wait", "--timeout", "2m"}, args...)...)
	if err == nil {
		t.Fatalf("helm upgrade with a rule that does not compile succeeded: %s", out)
	}
	t.Logf("helm upgrade failed: %v", err)
	if !strings.Contains(err.Error(), "kgen-validate") {
		t.Errorf("helm's answer does not name the validate hook: %v\n%s", err, out)
	}
	// What the hook's pod printed, which helm prints on a real cluster
	// (the fake kubelet serves no logs): the file, line and expression.
	if logs := kubelet.outputs(); !strings.Contains(logs, "webapp.yaml:") || !strings.Contains(logs, "${parent.spec.image +}") {
		t.Errorf("the validate hook did not say where the rules are wrong; the pods' output:\n%s", logs)
	}
	cm, err := env.kube.CoreV1().ConfigMaps(release).Get(ctx, "kgen-rules", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(cm.Data["webapp.yaml"], "parent.spec.image +}") {
		t.Error("the refused rules reached kgen's rules ConfigMap")
	}
	if after := podsOf(t, release, "app.kubernetes.io/name=kgen"); len(after) != len(before) {
		t.Errorf("kgen's pods: %d before the refused upgrade, %d after", len(before), len(after))
	}
	// kgen still enforces the rules it has.
	if err := env.kube.CoreV1().ConfigMaps(ns).Delete(ctx, "shop-config", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, cmGVR, ns, "shop-config", nil)
}

// withRulesFile returns the helm arguments of helmInstallWebApp with the
// WebApp rules taken from file instead.
func withRulesFile(t *testing.T, values []string, file string) []string {
	t.Helper()
	args := slices.Clone(values)
	i := slices.Index(args, "--set-file")
	if i < 0 {
		t.Fatalf("no --set-file in %q", args)
	}
	args[i+1] = "rules.webapp=" + file
	return args
}

// remoteChildRule writes a rule for WebApps in namespaces (a YAML list's
// items) whose one child, a ConfigMap, lives in namespace remote: kgen's
// finalizer guards it.
func remoteChildRule(t *testing.T, name, namespaces, remote string) string {
	t.Helper()
	return writeRules(t, fmt.Sprintf(`apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata:
  name: %s
spec:
  parent:
    apiVersion: example.com/v1alpha1
    kind: WebApp
    namespaces: [%s]
  allowCrossNamespace: [%s]
  children:
  - id: remote
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.namespace}-${parent.metadata.name}", namespace: %s}
      data: {image: "${parent.spec.image}"}
`, name, namespaces, remote, remote))
}
