//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"kgen.dev/kgen/pkg/reconcile"
)

// moveRules are two rules of one parent kind, selecting parents by the
// value of one label (rules that may select the same parent do not load). Both make the child shared (one name, other data); only
// move-a makes a ClusterRole (which needs kgen's finalizer on the parent)
// and a ConfigMap NAME-a; only move-b makes a Secret NAME-b. Neither rule
// watches the other's extra kind.
const moveRules = `apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata:
  name: move-a
spec:
  parent:
    apiVersion: %[1]s/v1
    kind: Gadget
    namespaces: [%[2]s]
    selector: {matchLabels: {tier: a}}
  children:
  - id: shared
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-shared"}
      data: {from: a}
  - id: onlya
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-a"}
      data: {from: a}
  - id: role
    template:
      apiVersion: rbac.authorization.k8s.io/v1
      kind: ClusterRole
      metadata: {name: "e2e-move-${parent.metadata.namespace}-${parent.metadata.name}"}
      rules: []
---
apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata:
  name: move-b
spec:
  parent:
    apiVersion: %[1]s/v1
    kind: Gadget
    namespaces: [%[2]s]
    selector: {matchLabels: {tier: b}}
  children:
  - id: shared
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-shared"}
      data: {from: b}
  - id: onlyb
    template:
      apiVersion: v1
      kind: Secret
      metadata: {name: "${parent.metadata.name}-b"}
      stringData: {from: b}
`

// Scenario: a parent moved from one rule to another by relabelling it
// (§6, "Identity survives routine operations"), and back. The new rule's
// children are made; the old rule's that the new one does not make are
// pruned, also of a kind the new rule does not watch; the child both make
// (same id, same name) is taken over, not deleted and recreated; the
// parent's finalizer follows the new rule; the parent ends Ready, never
// stuck in Conflict; kgen's writes for a move are bounded.
func TestChangeParentMovedBetweenRules(t *testing.T) {
	const group = "move.example.com"
	const user = "kgen-move"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	startControllerWith(t, controllerOptions{User: user}, writeRules(t, fmt.Sprintf(moveRules, group, ns))).waitReady(t)
	role := "e2e-move-" + ns + "-m"
	t.Cleanup(func() {
		_ = env.kube.RbacV1().ClusterRoles().Delete(context.Background(), role, metav1.DeleteOptions{})
	})

	obj := gadget(group, ns, "m", map[string]any{})
	obj["metadata"].(map[string]any)["labels"] = map[string]any{"tier": "a"}
	parent := create(t, gvr, obj)
	shared := waitFor(t, cmGVR, ns, "m-shared", dataFrom("a"))
	waitFor(t, cmGVR, ns, "m-a", nil)
	waitFor(t, crGVR, "", role, nil)
	waitParent(t, gvr, ns, "m", true)
	settle(t, user, ns)

	move := func(step string, labels map[string]any, to string) []string {
		t.Helper()
		start := time.Now()
		patchLabels(t, gvr, ns, "m", labels)
		waitFor(t, cmGVR, ns, "m-shared", func(o *unstructured.Unstructured) error {
			if o.GetUID() != shared.GetUID() {
				return fmt.Errorf("%s: the shared child was recreated: uid %s, was %s", step, o.GetUID(), shared.GetUID())
			}
			if got := o.GetLabels()[reconcile.LabelRule]; got != to {
				return fmt.Errorf("%s: rule label = %s, want %s", step, got, to)
			}
			if got := o.GetLabels()[reconcile.LabelParentUID]; got != string(parent.GetUID()) {
				return fmt.Errorf("%s: parent-uid = %s, want %s", step, got, parent.GetUID())
			}
			return dataFrom(strings.TrimPrefix(to, "move-"))(o)
		})
		if to == "move-b" {
			waitFor(t, secretGVR, ns, "m-b", nil)
			waitGone(t, cmGVR, ns, "m-a")
			waitGone(t, crGVR, "", role)
		} else {
			waitFor(t, cmGVR, ns, "m-a", nil)
			waitFor(t, crGVR, "", role, nil)
			waitGone(t, secretGVR, ns, "m-b")
		}
		waitParent(t, gvr, ns, "m", to == "move-a")
		settle(t, user, ns)
		var writes []string
		for _, e := range auditOf(t, user, start) {
			ours := e.ObjectRef.Namespace == ns || e.ObjectRef.Resource == "clusterroles" && e.ObjectRef.Name == role
			if !ours || !isWrite(e.Verb) || e.ObjectRef.Resource == "events" {
				continue
			}
			r := e.ObjectRef.Resource
			if e.ObjectRef.Subresource != "" {
				r += "/" + e.ObjectRef.Subresource
			}
			w := e.Verb + " " + r + " " + e.ObjectRef.Name
			if e.ObjectRef.Resource == "configmaps" && e.ObjectRef.Name == "m-shared" && (e.Verb == "create" || e.Verb == "delete") {
				t.Errorf("%s: the shared child was written by %s", step, w)
			}
			writes = append(writes, w)
		}
		t.Logf("%s: %d writes: %v", step, len(writes), writes)
		// Per move at most: the shared child's apply, the new child's
		// apply, the old children's deletes (two), the finalizer, the
		// status; with one retry each for the races of two rules' caches.
		if len(writes) > 12 {
			t.Errorf("%s: %d writes, want at most 12: %v", step, len(writes), writes)
		}
		return writes
	}
	move("a to b", map[string]any{"tier": "b"}, "move-b")
	move("b to a", map[string]any{"tier": "a"}, "move-a")

}

// dataFrom checks a ConfigMap's data.from.
func dataFrom(want string) func(*unstructured.Unstructured) error {
	return func(o *unstructured.Unstructured) error {
		if got, _, _ := unstructured.NestedString(o.Object, "data", "from"); got != want {
			return fmt.Errorf("data.from = %q, want %q", got, want)
		}
		return nil
	}
}

// waitParent waits until a parent is Ready with kgen's finalizer or without.
func waitParent(t *testing.T, gvr schema.GroupVersionResource, ns, name string, finalizer bool) {
	t.Helper()
	waitFor(t, gvr, ns, name, func(p *unstructured.Unstructured) error {
		if c := readyCondition(p); c == nil || c["status"] != "True" {
			return fmt.Errorf("Ready = %v", c)
		}
		if got := slices.Contains(p.GetFinalizers(), reconcile.Finalizer); got != finalizer {
			return fmt.Errorf("finalizers = %v, want kgen's: %v", p.GetFinalizers(), finalizer)
		}
		return nil
	})
}

// Scenario (contract §3 "prunes ... nothing else", §7 "A rule that is
// removed stops being enforced: its children stay", through a change of
// the rules; a live audit): a rule lets its parents go, by changing its
// parent kind (team d) or by being deleted (teams e and f; in f another
// Gadget rule selects other parents), and a new rule with other kinds of
// children then selects those parents. The first rule's ServiceAccounts
// stay in every namespace, also once another rule is removed later.
// Before, the new rule deleted them where another rule happened to watch
// ServiceAccounts (the first rule itself in team d, an unrelated one in
// team e), and left them where none did; and (a live check of that fix)
// where another rule of the kind watched the namespace, the removal of
// any rule later had them pruned.
func TestChangeReleasedParentsChildrenStay(t *testing.T) {
	const group = "released.example.com"
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	d, e, f := newNamespace(t), newNamespace(t), newNamespace(t)
	gadgets := newCRD(t, group, "Gadget", "gadgets")
	newCRD(t, group, "Widget", "widgets")
	saChild := `  children:
  - id: sa
    template:
      apiVersion: v1
      kind: ServiceAccount
      metadata:
        name: ${parent.metadata.name}-sa
`
	// A Gadget rule of the parents labelled tier: TIER in one namespace.
	selecting := func(name, ns, tier, body string) string {
		return fmt.Sprintf(`apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: %s}
spec:
  parent: {apiVersion: %s/v1, kind: Gadget, namespaces: [%s], selector: {matchLabels: {tier: %s}}}
%s`, name, group, ns, tier, body)
	}
	p := startKgen(t, "kgen-released")
	applyRule(t, gadgetRuleDoc("first-d", group, "Gadget", d, saChild))
	applyRule(t, gadgetRuleDoc("first-e", group, "Gadget", e, saChild))
	// A rule of another parent kind that watches ServiceAccounts in team e.
	applyRule(t, gadgetRuleDoc("widgets-e", group, "Widget", e, saChild))
	// In team f, another Gadget rule, of other parents.
	applyRule(t, selecting("first-f", f, "web", saChild))
	applyRule(t, selecting("other-f", f, "other", configChild("o")))
	sas := map[string]*unstructured.Unstructured{}
	for _, ns := range []string{d, e, f} {
		obj := gadget(group, ns, "p", map[string]any{})
		obj["metadata"].(map[string]any)["labels"] = map[string]any{"tier": "web"}
		create(t, gadgets, obj)
		sas[ns] = waitFor(t, saGVR, ns, "p-sa", nil)
		waitReason(t, gadgets, ns, "p", reconcile.ReasonReady)
	}
	removed := func(rule string) {
		t.Helper()
		eventually(t, 30*time.Second, func() (bool, error) {
			for _, line := range strings.Split(p.output.String(), "\n") {
				if strings.Contains(line, `"Rule removed"`) && strings.Contains(line, `rule="`+rule+`"`) {
					return true, nil
				}
			}
			return false, errors.New("not logged yet")
		}, "kgen to remove rule %s", rule)
	}
	kept := func(when string) {
		t.Helper()
		time.Sleep(3 * time.Second) // a prune would follow the create within the same reconcile
		for _, ns := range []string{d, e, f} {
			if sa := get(t, saGVR, ns, "p-sa"); sa == nil || sa.GetUID() != sas[ns].GetUID() {
				t.Errorf("%s, namespace %s: the released parent's ServiceAccount p-sa is gone (or another object): %v", when, ns, sa)
			}
		}
	}

	// first-d now selects Widgets; first-e and first-f are deleted. Each
	// lets its Gadget go: its finalizer is removed, its ServiceAccount
	// stays.
	applyRule(t, gadgetRuleDoc("first-d", group, "Widget", d, saChild))
	for _, rule := range []string{"first-e", "first-f"} {
		if err := env.dynamic.Resource(ruleGVR).Delete(t.Context(), rule, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitRuleStatus(t, "first-d", readyIs("True", "Running"))
	// kgen has removed them before the new rules come: a rule that takes
	// the parents over in the same change is a rename, and prunes.
	removed("first-e")
	removed("first-f")

	// A new rule selects the Gadgets, with a ConfigMap.
	for _, ns := range []string{d, e, f} {
		applyRule(t, selecting("second-"+ns, ns, "web", configChild("v")))
		waitFor(t, cmGVR, ns, "p", nil)
		waitReason(t, gadgets, ns, "p", reconcile.ReasonReady)
	}
	kept("after the new rules")

	// Another rule removed later leads no rule to prune them either.
	if err := env.dynamic.Resource(ruleGVR).Delete(t.Context(), "other-f", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	removed("other-f")
	kept("after another rule of the kind was removed")
}
