//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"kgen.dev/kgen/pkg/reconcile"
)

// teamAccount creates the ServiceAccount team in ns, bound in each
// namespace of rules to a Role with those rules, and waits until the API
// server's authorizer lets it do the first. It returns the account's user
// name.
func teamAccount(t *testing.T, ns string, rules map[string][]rbacv1.PolicyRule) string {
	t.Helper()
	ctx := t.Context()
	if _, err := env.kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa := "system:serviceaccount:" + ns + ":team"
	for where, rs := range rules {
		setRole(t, where, rs)
		if _, err := env.kube.RbacV1().RoleBindings(where).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "team"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "team"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "team", Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		r := rs[0]
		waitCan(t, sa, true, authorizationv1.ResourceAttributes{Namespace: where, Verb: r.Verbs[0], Group: r.APIGroups[0], Resource: r.Resources[0]})
	}
	return sa
}

// setRole creates or replaces the Role team in a namespace.
func setRole(t *testing.T, ns string, rules []rbacv1.PolicyRule) {
	t.Helper()
	roles := env.kube.RbacV1().Roles(ns)
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "team"}, Rules: rules}
	if old, err := roles.Get(t.Context(), "team", metav1.GetOptions{}); err == nil {
		role.ResourceVersion = old.ResourceVersion
		if _, err := roles.Update(t.Context(), role, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		return
	}
	if _, err := roles.Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Scenario (contract §7): a rule with spec.serviceAccount must prune a
// child its account may create but not delete. The parent says so on Ready
// (False, Forbidden, naming the child and the account) instead of claiming
// all is well; once the account may delete, the child goes and Ready is
// True again.
func TestRuleServiceAccountPruneForbidden(t *testing.T) {
	const group = "pruneforbid.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	may := func(verbs ...string) []rbacv1.PolicyRule {
		return []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: verbs},
			{APIGroups: []string{group}, Resources: []string{"gadgets/finalizers"}, Verbs: []string{"update"}},
		}
	}
	sa := teamAccount(t, ns, map[string][]rbacv1.PolicyRule{ns: may("get", "create", "patch")})
	startControllerWith(t, controllerOptions{User: "kgen-pruneforbid"}, gadgetRule(t, "pruneforbid", group, fmt.Sprintf(`    namespaces: [%s]
  serviceAccount: {namespace: %s, name: team}
  children:
  - id: secret
    includeWhen: ["${parent.spec.?secret.orValue(false)}"]
    template:
      apiVersion: v1
      kind: Secret
      metadata:
        name: ${parent.metadata.name}
      stringData: {key: value}
`, ns, ns))).waitReady(t)
	create(t, gvr, gadget(group, ns, "g", map[string]any{"secret": true}))
	// The API server's admission refuses an ownerReference that blocks
	// the owner's deletion until its own RESTMapper knows the new CRD's
	// kind, which it learns at its next reset, up to 30 s later; kgen
	// retries every 2 s meanwhile.
	eventually(t, 90*time.Second, func() (bool, error) { return get(t, secretGVR, ns, "g") != nil, errNotYet }, "the first child")
	waitFor(t, gvr, ns, "g", readyIs("True", reconcile.ReasonReady))

	patchSpec(t, gvr, ns, "g", map[string]any{"secret": false})
	waitFor(t, gvr, ns, "g", readyIs("False", reconcile.ReasonForbidden, "child secret", sa))
	if get(t, secretGVR, ns, "g") == nil {
		t.Fatal("the account may not delete the child, and it is gone")
	}

	setRole(t, ns, may("get", "create", "patch", "delete"))
	waitGone(t, secretGVR, ns, "g")
	waitFor(t, gvr, ns, "g", readyIs("True", reconcile.ReasonReady))
}

// Scenario (contract §7): a rule with spec.serviceAccount is removed while
// kgen is stopped, and a parent of it is deleted meanwhile. Its
// cross-namespace child, guarded by kgen's finalizer, must be deleted as
// the rule's account, not with kgen's own rights: a removed rule can do no
// more than its account could. While the account may not delete it, the
// child stays and so does the finalizer; once it may, both go. The
// restarted kgen finds the parent either through a loaded rule of the same
// kind, or through its record of where the removed rule watched.
func TestRuleServiceAccountRemovedDeletesAsAccount(t *testing.T) {
	for name, kind := range map[string]string{"released by another rule of the kind": "Gadget", "known by name alone": "Widget"} {
		t.Run(name, func(t *testing.T) { removedAccountRule(t, strings.ToLower(kind)+".removedsa.example.com", kind) })
	}
}

// removedAccountRule runs TestRuleServiceAccountRemovedDeletesAsAccount in
// a group of its own, the restarted kgen with a rule of kind otherKind.
func removedAccountRule(t *testing.T, group, otherKind string) {
	ns, remote := newNamespace(t), newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	if otherKind != "Gadget" {
		newCRD(t, group, otherKind, strings.ToLower(otherKind)+"s")
	}
	t.Cleanup(func() {
		_, _ = env.dynamic.Resource(gvr).Namespace(ns).Patch(context.Background(), "doomed", types.MergePatchType,
			[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	may := func(verbs ...string) []rbacv1.PolicyRule {
		return []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: verbs}}
	}
	sa := teamAccount(t, ns, map[string][]rbacv1.PolicyRule{
		remote: may("get", "create", "patch"),
		ns:     {{APIGroups: []string{group}, Resources: []string{"gadgets/finalizers"}, Verbs: []string{"update"}}},
	})
	rule := "removedsa-" + strings.ToLower(otherKind)
	withAccount := gadgetRule(t, rule, group, fmt.Sprintf(`    namespaces: [%s]
    selector: {matchLabels: {tier: doomed}}
  serviceAccount: {namespace: %s, name: team}
  allowCrossNamespace: [%s]
  children:
  - id: remote
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}", namespace: %s}
      data: {x: "1"}
`, ns, ns, remote, remote))
	// Another rule keeps the restarted kgen busy with something.
	other := writeRules(t, fmt.Sprintf(`apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: %s-other}
spec:
  parent:
    apiVersion: %s/v1
    kind: %s
    namespaces: [%s]
    selector: {matchLabels: {tier: other}}
%s`, rule, group, otherKind, ns, configChild("x")))
	const user = "kgen-removedsa"
	first := startControllerWith(t, controllerOptions{User: user}, withAccount, other)
	first.waitReady(t)
	doomed := gadget(group, ns, "doomed", map[string]any{})
	doomed["metadata"].(map[string]any)["labels"] = map[string]any{"tier": "doomed"}
	create(t, gvr, doomed)
	waitFor(t, gvr, ns, "doomed", hasFinalizer(true))
	waitFor(t, cmGVR, remote, "doomed", func(o *unstructured.Unstructured) error {
		if got := o.GetAnnotations()[reconcile.AnnotationServiceAccount]; got != ns+"/team" {
			return fmt.Errorf("%s = %q, want %s/team", reconcile.AnnotationServiceAccount, got, ns)
		}
		return nil
	})
	waitRecord(t, metav1.NamespaceDefault, rule, "v1 ConfigMap "+remote+"\n")
	first.stop()

	if err := env.dynamic.Resource(gvr).Namespace(ns).Delete(t.Context(), "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	second := startControllerWith(t, controllerOptions{User: user}, other)
	second.waitReady(t)
	eventually(t, 30*time.Second, func() (bool, error) {
		for _, e := range auditOf(t, user, start) {
			if e.Verb == "delete" && e.ObjectRef.Resource == "configmaps" && e.ObjectRef.Namespace == remote {
				return true, nil
			}
		}
		return false, errNotYet
	}, "kgen's delete of the removed rule's child")
	time.Sleep(2 * time.Second)
	for _, e := range auditOf(t, user, start) {
		if e.Verb == "delete" && e.ObjectRef.Resource == "configmaps" && e.ObjectRef.Namespace == remote &&
			(e.ImpersonatedUser == nil || e.ImpersonatedUser.Username != sa) {
			t.Errorf("kgen deleted configmaps/%s/%s as itself, want as %s", remote, e.ObjectRef.Name, sa)
		}
	}
	if get(t, cmGVR, remote, "doomed") == nil {
		t.Fatal("the child the account may not delete is gone")
	}
	if p := get(t, gvr, ns, "doomed"); p == nil || !slices.Contains(p.GetFinalizers(), reconcile.Finalizer) {
		t.Fatalf("kgen's finalizer left while the child it guards stays: %v", p)
	}

	setRole(t, remote, may("get", "create", "patch", "delete"))
	waitGone(t, cmGVR, remote, "doomed")
	waitGone(t, gvr, ns, "doomed")
}
