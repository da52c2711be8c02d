//go:build e2e

package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"kgen.dev/kgen/internal/controlplane"
	manifestpkg "kgen.dev/kgen/internal/manifest"
)

// TestHelmInstall installs charts/kgen with the WebApp example's rules and
// the RBAC that kgenctl rbac generates for them, and kgen runs as the
// chart's pods (through the fake kubelet), with exactly the chart's
// ServiceAccount: kgen reconciles a WebApp with the generated permissions,
// and when one is taken away the parent says so.
func TestHelmInstall(t *testing.T) {
	ctx := t.Context()
	installCRD(t, "examples/webapp/crd.yaml")
	ns, release := newNamespace(t), newNamespace(t)
	kubelet := startPods(t, release)
	rulesFile := exampleWebAppRulesIn(t, ns)
	values := generateRBACValues(t, rulesFile)

	// The chart, as a user installs it.
	// Prometheus's ServiceAccount may read the metrics.
	start := time.Now()
	out, err := runHelm(t, "install", "kgen", filepath.Join(env.root, "charts/kgen"), "--namespace", release,
		"-f", values, "--set-file", "rules.webapp="+rulesFile, "--set", "metrics.readers[0].kind=ServiceAccount",
		"--set", "metrics.readers[0].name=prometheus", "--set", "metrics.readers[0].namespace="+release, "--wait", "--timeout", "3m")
	if err != nil {
		dumpPods(t, release)
		t.Fatalf("helm install: %v", err)
	}
	t.Logf("helm install --wait took %s", time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() { _, _ = runHelm(t, "uninstall", "kgen", "--namespace", release, "--wait") })
	if !strings.Contains(out, "kgen "+chartAppVersion(t)+" is installed as kgen in namespace "+release) || strings.Contains(out, "WARNING") {
		t.Errorf("helm install's notes:\n%s", out)
	}
	manifest, err := runHelm(t, "get", "manifest", "kgen", "--namespace", release)
	if err != nil {
		t.Fatal(err)
	}
	objs := checkInstalled(t, manifest, release)
	for _, want := range []string{"ServiceAccount/" + release + "/kgen", "ConfigMap/" + release + "/kgen-rules",
		"Deployment/" + release + "/kgen", "Service/" + release + "/kgen-metrics", "PodDisruptionBudget/" + release + "/kgen",
		"Role/" + ns + "/kgen", "RoleBinding/" + ns + "/kgen",
		"Role/" + release + "/kgen-leader-election", "RoleBinding/" + release + "/kgen-leader-election",
		"Role/" + release + "/kgen-state", "RoleBinding/" + release + "/kgen-state",
		"ClusterRole/kgen-metrics-auth", "ClusterRoleBinding/kgen-metrics-auth", "RoleBinding/kube-system/kgen-metrics-auth-reader",
		"ClusterRole/kgen-metrics-reader", "ClusterRoleBinding/kgen-metrics-reader",
		"ClusterRole/kgen-discovery", "ClusterRoleBinding/kgen-discovery"} {
		if !slices.Contains(objs, want) {
			t.Errorf("the release has no %s; it has %v", want, objs)
		}
	}
	// Cluster-wide, kgen may only follow Rule objects and the metadata of
	// CRDs and APIServices, review who reads its metrics, read its parent
	// kind's CRD (to check the rule against it) and the rule's namespace
	// (the uninstall hook tells one that is gone); the rules, limited to a
	// namespace, need nothing else there.
	if slices.ContainsFunc(objs, func(s string) bool {
		return strings.HasPrefix(s, "ClusterRole") && !strings.HasSuffix(s, "/kgen-rule-objects") &&
			!strings.HasSuffix(s, "/kgen-discovery") && !strings.Contains(s, "/kgen-metrics-") && !strings.HasSuffix(s, "/kgen")
	}) {
		t.Errorf("rules limited to one namespace got cluster-wide RBAC: %v", objs)
	}
	if cr, err := env.kube.RbacV1().ClusterRoles().Get(ctx, "kgen", metav1.GetOptions{}); err == nil {
		for _, r := range cr.Rules {
			crd := slices.Equal(r.Resources, []string{"customresourcedefinitions"}) && slices.Equal(r.ResourceNames, []string{"webapps.example.com"})
			namespace := slices.Equal(r.Resources, []string{"namespaces"}) && slices.Equal(r.ResourceNames, []string{ns})
			if !crd && !namespace || !slices.Equal(r.Verbs, []string{"get"}) {
				t.Errorf("rules limited to one namespace got cluster-wide RBAC: %v", r)
			}
		}
	}

	// helm --wait saw the pods ready; one of them leads.
	user := "system:serviceaccount:" + release + ":kgen"
	if pods := podsOf(t, release, "app.kubernetes.io/instance=kgen"); len(pods) != 2 {
		t.Errorf("%d pods run, want the chart's 2", len(pods))
	}
	waitLeader(t, release, "kgen")

	// Prometheus scrapes with its token, over HTTPS; kgen reviews it with
	// the chart's RBAC (no request of kgen's is refused, below).
	if _, err := env.kube.CoreV1().ServiceAccounts(release).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "prometheus"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCanGet(t, "system:serviceaccount:"+release+":prometheus", "/metrics", true)
	prometheus := serviceAccountToken(t, release, "prometheus")
	metrics := "https://" + kubelet.address(podsOf(t, release, "app.kubernetes.io/instance=kgen")[0].Name, 8080)
	eventually(t, 30*time.Second, func() (bool, error) {
		code, body, err := httpsGet(metrics+"/metrics", prometheus, nil)
		return err == nil && code == 200 && strings.Contains(body, "\nkgen_build_info"), fmt.Errorf("GET /metrics = %d %v: %s", code, err, tailOf(body, 300))
	}, "Prometheus's ServiceAccount to scrape kgen")
	if code, _, err := httpsGet(metrics+"/metrics", "", nil); err != nil || code != 401 {
		t.Errorf("GET /metrics without credentials = %d %v, want 401", code, err)
	}

	create(t, webappGVR, webapp(ns, "shop", 1))
	for _, child := range []struct {
		gvr  schema.GroupVersionResource
		name string
	}{{cmGVR, "shop-config"}, {deployGVR, "shop"}, {svcGVR, "shop"}} {
		waitFor(t, child.gvr, ns, child.name, func(u *unstructured.Unstructured) error {
			// A blocking ownerReference needs update on webapps/finalizers
			// under OwnerReferencesPermissionEnforcement.
			refs := u.GetOwnerReferences()
			if len(refs) != 1 || refs[0].BlockOwnerDeletion == nil || !*refs[0].BlockOwnerDeletion {
				return fmt.Errorf("ownerReferences = %+v", refs)
			}
			return nil
		})
	}
	waitFor(t, webappGVR, ns, "shop", func(u *unstructured.Unstructured) error {
		if err := expect(u, "shop-config", "status", "configName"); err != nil {
			return err
		}
		return expect(u, 1, "status", "observedGeneration")
	})
	requests := auditOf(t, user, start)
	if len(requests) == 0 {
		t.Fatalf("the audit log has no request of %s", user)
	}
	t.Logf("%s made %d requests", user, len(requests))
	for _, e := range requests {
		if e.ResponseStatus.Code == 403 {
			t.Errorf("with the generated RBAC, kgen was refused %s %s %s/%s (subresource %q)",
				e.Verb, e.ObjectRef.Resource, e.ObjectRef.Namespace, e.ObjectRef.Name, e.ObjectRef.Subresource)
		}
	}

	// Take one permission away: create on configmaps.
	roles := env.kube.RbacV1().Roles(ns)
	role, err := roles.Get(ctx, "kgen", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	role.Rules = withoutVerb(role.Rules, "", "configmaps", "create")
	if _, err := roles.Update(ctx, role, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCan(t, user, false, authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Resource: "configmaps"})
	create(t, webappGVR, webapp(ns, "cart", 1))
	parent := waitFor(t, webappGVR, ns, "cart", func(u *unstructured.Unstructured) error {
		c := readyCondition(u)
		if c == nil || c["reason"] != "Forbidden" {
			return fmt.Errorf("Ready = %v, want reason Forbidden", c)
		}
		return nil
	})
	msg := fmt.Sprint(readyCondition(parent)["message"])
	t.Logf("without create on configmaps, Ready says: %s", msg)
	for _, want := range []string{"child config", "create configmaps " + ns + "/cart-config", `cannot create resource "configmaps"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("the Ready message does not say %q:\n%s", want, msg)
		}
	}
	// The other children are still made: nothing stalls.
	waitFor(t, svcGVR, ns, "cart", nil)
	eventually(t, 30*time.Second, func() (bool, error) {
		logs := kubelet.outputs()
		return strings.Contains(logs, "cart") && strings.Contains(logs, `cannot create resource \"configmaps\"`), errors.New("not in the logs yet")
	}, "the Forbidden error in kgen's logs")
}

// Without rules or RBAC values the chart serves Rule objects, and its
// notes say how to add one and what is missing. Without Rule objects
// either, kgen would have nothing to run: the chart refuses to install.
func TestHelmInstallWithoutRules(t *testing.T) {
	release := newNamespace(t)
	chart := filepath.Join(env.root, "charts/kgen")
	out, err := runHelm(t, "install", "kgen", chart, "--namespace", release, "--dry-run=client")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"every Rule object of the\ncluster", "kubectl apply -f rules.yaml", "kubectl get rules", "reason Forbidden",
		"kgenctl rbac --rules", "WARNING: rbac.rules is empty"} {
		if !strings.Contains(out, want) {
			t.Errorf("the notes do not say %q:\n%s", want, out)
		}
	}
	out, err = runHelm(t, "install", "kgen", chart, "--namespace", release, "--dry-run=client", "--set", "ruleObjects.enabled=false")
	if err == nil || !strings.Contains(err.Error(), "no rules: ruleObjects.enabled is false and neither rules nor existingRulesConfigMap is set") {
		t.Errorf("helm install without rules or Rule objects: %v\n%s", err, out)
	}
}

// exampleWebAppRulesIn returns the WebApp example's rules file with its
// namespace limit set to ns instead of team-a.
func exampleWebAppRulesIn(t *testing.T, ns string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(env.root, "examples/webapp/rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(data), "namespaces: [team-a]", "namespaces: ["+ns+"]", 1)
	if text == string(data) {
		t.Fatal("examples/webapp/rules.yaml no longer limits the rule to team-a")
	}
	path := filepath.Join(t.TempDir(), "webapp.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// generateRBACValues runs kgenctl rbac -o helm-values on the rules offline
// (from the CRD file), with extra flags, and checks that the cluster's
// discovery gives the same.
func generateRBACValues(t *testing.T, rulesFile string, extra ...string) string {
	t.Helper()
	offline, err := kgenctl(t, append([]string{"rbac", "--rules", rulesFile, "--crd", filepath.Join(env.root, "examples/webapp/crd.yaml"), "-o", "helm-values"}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	online, err := kgenctl(t, append([]string{"rbac", "--rules", rulesFile, "--offline=false", "--kubeconfig", env.cp.Kubeconfig, "-o", "helm-values"}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	if online != offline {
		t.Errorf("kgenctl rbac through discovery:\n%s\ndiffers from offline:\n%s", online, offline)
	}
	path := filepath.Join(t.TempDir(), "rbac-values.yaml")
	if err := os.WriteFile(path, []byte(offline), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func kgenctl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(env.kgenctl, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("kgenctl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// runHelm runs the helm that hack/tools.sh builds against the test control
// plane as its admin, with a helm home of its own; it returns stdout.
func runHelm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin, err := controlplane.BinDir(env.root)
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(bin, "helm"), append(args, "--kubeconfig", env.cp.Kubeconfig)...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// checkInstalled checks that every object of a release's manifest exists,
// and returns them as Kind/namespace/name.
func checkInstalled(t *testing.T, manifest, release string) []string {
	t.Helper()
	m := newMapper(t)
	var out []string
	objs, err := manifestpkg.Decode(strings.NewReader(manifest))
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range objs {
		mapping, err := m.ResourceFor(obj.GroupVersionKind())
		if err != nil {
			t.Fatal(err)
		}
		ns := ""
		if mapping.Namespaced {
			if ns = obj.GetNamespace(); ns == "" {
				ns = release
			}
		}
		if get(t, mapping.GroupVersionResource(), ns, obj.GetName()) == nil {
			t.Errorf("%s %s/%s of the release does not exist", obj.GetKind(), ns, obj.GetName())
		}
		out = append(out, obj.GetKind()+"/"+strings.TrimPrefix(ns+"/", "/")+obj.GetName())
	}
	return out
}

// waitCan waits until the API server's authorizer answers want to whether
// user may do what attrs say.
func waitCan(t *testing.T, user string, want bool, attrs authorizationv1.ResourceAttributes) {
	t.Helper()
	eventually(t, 10*time.Second, func() (bool, error) {
		review, err := env.kube.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: []string{"system:serviceaccounts", "system:authenticated"}, ResourceAttributes: &attrs},
		}, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return review.Status.Allowed == want, nil
	}, "%s to be allowed=%t to %s %s in %s", user, want, attrs.Verb, attrs.Resource, attrs.Namespace)
}

// withoutVerb returns rules with verb no longer granted on the resource.
func withoutVerb(rules []rbacv1.PolicyRule, group, resource, verb string) []rbacv1.PolicyRule {
	var out []rbacv1.PolicyRule
	for _, r := range rules {
		if !slices.Contains(r.APIGroups, group) || !slices.Contains(r.Resources, resource) {
			out = append(out, r)
			continue
		}
		if others := slices.DeleteFunc(slices.Clone(r.Resources), func(s string) bool { return s == resource }); len(others) > 0 {
			rest := r
			rest.Resources = others
			out = append(out, rest)
		}
		less := r
		less.Resources = []string{resource}
		less.Verbs = slices.DeleteFunc(slices.Clone(r.Verbs), func(s string) bool { return s == verb })
		out = append(out, less)
	}
	return out
}

// chartAppVersion returns the appVersion of charts/kgen.
func chartAppVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(env.root, "charts/kgen/Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(data, &chart); err != nil {
		t.Fatal(err)
	}
	return chart.AppVersion
}

// waitLeader waits until a replica holds the Lease, and returns its identity.
func waitLeader(t *testing.T, namespace, name string) string {
	t.Helper()
	var holder string
	eventually(t, 60*time.Second, func() (bool, error) {
		lease, err := env.kube.CoordinationV1().Leases(namespace).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if lease.Spec.HolderIdentity != nil {
			holder = *lease.Spec.HolderIdentity
		}
		return holder != "", nil
	}, "a replica to hold the Lease %s/%s", namespace, name)
	return holder
}
