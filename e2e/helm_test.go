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

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"kgen.dev/kgen/internal/controlplane"
	manifestpkg "kgen.dev/kgen/internal/manifest"
)

// TestHelmInstall installs charts/kgen with the WebApp example's rules and
// the RBAC that kgenctl rbac generates for them, then runs kgenctl as the
// chart's Deployment would (its arguments, its ServiceAccount's token, and
// nothing else): kgen reconciles a WebApp with exactly the generated
// permissions, and when one is taken away the parent says so.
//
// No pod runs here (there is no kubelet or scheduler), so kgenctl runs on
// the test's machine with the identity the pod would have.
func TestHelmInstall(t *testing.T) {
	ctx := t.Context()
	installCRD(t, "examples/webapp/crd.yaml")
	ns, release := newNamespace(t), newNamespace(t)
	rulesFile := exampleWebAppRulesIn(t, ns)
	values := generateRBACValues(t, rulesFile)

	// The chart, as a user installs it.
	// Prometheus's ServiceAccount may read the metrics.
	out, err := runHelm(t, "install", "kgen", filepath.Join(env.root, "charts/kgen"), "--namespace", release,
		"-f", values, "--set-file", "rules.webapp="+rulesFile, "--set", "metrics.readers[0].kind=ServiceAccount",
		"--set", "metrics.readers[0].name=prometheus", "--set", "metrics.readers[0].namespace="+release)
	if err != nil {
		t.Fatalf("helm install: %v", err)
	}
	t.Cleanup(func() { _, _ = runHelm(t, "uninstall", "kgen", "--namespace", release) })
	if !strings.Contains(out, "kgen 0.1.0 is installed as kgen in namespace "+release) || strings.Contains(out, "WARNING") {
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
		"ClusterRole/kgen-metrics-auth", "ClusterRoleBinding/kgen-metrics-auth", "RoleBinding/kube-system/kgen-metrics-auth-reader",
		"ClusterRole/kgen-metrics-reader", "ClusterRoleBinding/kgen-metrics-reader"} {
		if !slices.Contains(objs, want) {
			t.Errorf("the release has no %s; it has %v", want, objs)
		}
	}
	// Secure metrics need cluster-wide reviews; the rules need nothing
	// cluster-wide.
	if slices.Contains(objs, "ClusterRole/kgen") || slices.Contains(objs, "ClusterRoleBinding/kgen") {
		t.Errorf("rules limited to one namespace got cluster-wide RBAC: %v", objs)
	}

	// kgenctl as the pod would run it, once the API server's authorizer has
	// seen the new bindings.
	user := "system:serviceaccount:" + release + ":kgen"
	waitCan(t, user, true, authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Resource: "configmaps"})
	waitCan(t, user, true, authorizationv1.ResourceAttributes{Namespace: release, Verb: "create", Group: "coordination.k8s.io", Resource: "leases"})
	start := time.Now()
	p := startLikePod(t, release, ns)
	eventually(t, 60*time.Second, func() (bool, error) {
		lease, err := env.kube.CoordinationV1().Leases(release).Get(ctx, "kgen", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "", nil
	}, "kgen to hold its Lease in %s", release)
	eventually(t, 30*time.Second, func() (bool, error) {
		code, body, err := httpGet(p.health + "/readyz")
		return code == 200, fmt.Errorf("readyz %d %s %v", code, body, err)
	}, "kgen to be ready")

	// Prometheus scrapes with its token, over HTTPS; kgen reviews it with
	// the chart's RBAC (no request of kgen's is refused, below).
	if _, err := env.kube.CoreV1().ServiceAccounts(release).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "prometheus"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCanGet(t, "system:serviceaccount:"+release+":prometheus", "/metrics", true)
	prometheus := serviceAccountToken(t, release, "prometheus")
	if !strings.HasPrefix(p.metric, "https://") {
		t.Errorf("the chart's kgen serves metrics at %s, want HTTPS", p.metric)
	}
	eventually(t, 30*time.Second, func() (bool, error) {
		code, body, err := httpsGet(p.metric+"/metrics", prometheus, nil)
		return err == nil && code == 200 && strings.Contains(body, "\nkgen_build_info"), fmt.Errorf("GET /metrics = %d %v: %s", code, err, tailOf(body, 300))
	}, "Prometheus's ServiceAccount to scrape kgen")
	if code, _, err := httpsGet(p.metric+"/metrics", "", nil); err != nil || code != 401 {
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
		logs := p.output.String()
		return strings.Contains(logs, "cart") && strings.Contains(logs, `cannot create resource \"configmaps\"`), errors.New("not in the logs yet")
	}, "the Forbidden error in kgen's logs")
}

// Without rules or RBAC values the chart still renders, and its notes say
// what is missing.
func TestHelmInstallWithoutRules(t *testing.T) {
	release := newNamespace(t)
	out, err := runHelm(t, "install", "kgen", filepath.Join(env.root, "charts/kgen"), "--namespace", release, "--dry-run=client")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"WARNING: no rules were given", "kgenctl rbac --rules", "WARNING: rbac.rules is empty"} {
		if !strings.Contains(out, want) {
			t.Errorf("the notes do not say %q:\n%s", want, out)
		}
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
// (from the CRD file) and checks that the cluster's discovery gives the same.
func generateRBACValues(t *testing.T, rulesFile string) string {
	t.Helper()
	offline, err := kgenctl(t, "rbac", "--rules", rulesFile, "--crd", filepath.Join(env.root, "examples/webapp/crd.yaml"), "-o", "helm-values")
	if err != nil {
		t.Fatal(err)
	}
	online, err := kgenctl(t, "rbac", "--rules", rulesFile, "--offline=false", "--kubeconfig", env.cp.Kubeconfig, "-o", "helm-values")
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

// startLikePod runs kgenctl with the arguments of the chart's Deployment, as
// its ServiceAccount: a token from the TokenRequest API, and the rules read
// back from the chart's ConfigMap. Only the addresses it listens on change.
func startLikePod(t *testing.T, release, ns string) *kgenProcess {
	t.Helper()
	ctx := t.Context()
	deploy, err := env.kube.AppsV1().Deployments(release).Get(ctx, "kgen", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := deploy.Spec.Template.Spec
	token, err := env.kube.CoreV1().ServiceAccounts(release).CreateToken(ctx, pod.ServiceAccountName,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	config := clientcmdapi.NewConfig()
	config.Clusters["e2e"] = &clientcmdapi.Cluster{Server: env.cp.URL, CertificateAuthorityData: env.cp.CAData()}
	config.AuthInfos["kgen"] = &clientcmdapi.AuthInfo{Token: token.Status.Token}
	config.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "kgen"}
	config.CurrentContext = "e2e"
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*config, kubeconfig); err != nil {
		t.Fatal(err)
	}
	rulesDir := rulesVolume(t, release, pod)
	health, metrics := freePort(t), freePort(t)
	c := pod.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "run" {
		t.Fatalf("the Deployment does not run kgenctl run: %q", c.Args)
	}
	// The image's entrypoint is kgenctl, so the arguments are kgenctl's.
	var args []string
	for _, a := range c.Args {
		switch {
		case a == "--rules=/etc/kgen/rules":
			a = "--rules=" + rulesDir
		case strings.HasPrefix(a, "--metrics-bind-address="):
			a = "--metrics-bind-address=" + metrics
		case strings.HasPrefix(a, "--health-probe-bind-address="):
			a = "--health-probe-bind-address=" + health
		}
		args = append(args, a)
	}
	p := startKgenctl(t, "the chart's ServiceAccount", append(args, "--kubeconfig", kubeconfig)...)
	p.health, p.metric = "http://"+health, metricsScheme(args)+"://"+metrics
	return p
}

// rulesVolume writes the files of the ConfigMap that the pod mounts at
// /etc/kgen/rules into a folder, and returns the folder.
func rulesVolume(t *testing.T, namespace string, pod corev1.PodSpec) string {
	t.Helper()
	var volume string
	for _, m := range pod.Containers[0].VolumeMounts {
		if m.MountPath == "/etc/kgen/rules" {
			volume = m.Name
		}
	}
	var configMap string
	for _, v := range pod.Volumes {
		if v.Name == volume && v.ConfigMap != nil {
			configMap = v.ConfigMap.Name
		}
	}
	if configMap == "" {
		t.Fatalf("the pod mounts no ConfigMap at /etc/kgen/rules: %+v", pod.Volumes)
	}
	cm, err := env.kube.CoreV1().ConfigMaps(namespace).Get(t.Context(), configMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, text := range cm.Data {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
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
