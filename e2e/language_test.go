//go:build e2e

package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/yaml"

	manifestpkg "kgen.dev/kgen/internal/manifest"
	"kgen.dev/kgen/pkg/controller"
	"kgen.dev/kgen/pkg/kinds"
	"kgen.dev/kgen/pkg/reconcile"
	kschema "kgen.dev/kgen/pkg/schema"
	"kgen.dev/kgen/rules"
)

// Contract §8: more of the rule language, on a real control plane. Each
// test names its scenario.

var (
	secretsGVR  = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	saGVR       = schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}
	pvcGVR      = schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}
	stsGVR      = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}
	netpolGVR   = schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"}
	limitsGVR   = schema.GroupVersionResource{Version: "v1", Resource: "limitranges"}
	quotaGVR    = schema.GroupVersionResource{Version: "v1", Resource: "resourcequotas"}
	nsGVR       = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	databaseGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1alpha1", Resource: "databases"}
	globalGVR   = schema.GroupVersionResource{Group: "example.com", Version: "v1alpha1", Resource: "globalapps"}
	platformGVR = schema.GroupVersionResource{Group: "platform.example.com", Version: "v1", Resource: "services"}
)

// languageRule writes a rule for the test CRD Gadget of a group, limited
// to the given namespaces; body is its inputs, children and status,
// indented as under spec.
func languageRule(t *testing.T, name, group string, namespaces []string, body string) string {
	t.Helper()
	return writeRules(t, languageRuleText(name, group, namespaces, body))
}

func languageRuleText(name, group string, namespaces []string, body string) string {
	return fmt.Sprintf(`apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata:
  name: %s
spec:
  parent:
    apiVersion: %s/v1
    kind: Gadget
    namespaces: [%s]
%s`, name, group, strings.Join(namespaces, ", "), body)
}

// waitObserved waits until kgen has acted on the parent's generation.
func waitObserved(t *testing.T, gvr schema.GroupVersionResource, ns, name string) *unstructured.Unstructured {
	t.Helper()
	return waitFor(t, gvr, ns, name, func(p *unstructured.Unstructured) error {
		return expect(p, p.GetGeneration(), "status", "observedGeneration")
	})
}

// waitReason waits until the parent's Ready condition has the reason and
// its message holds every one of msgs.
func waitReason(t *testing.T, gvr schema.GroupVersionResource, ns, name, reason string, msgs ...string) *unstructured.Unstructured {
	t.Helper()
	return waitFor(t, gvr, ns, name, func(p *unstructured.Unstructured) error {
		c := readyCondition(p)
		if c == nil || c["reason"] != reason {
			return fmt.Errorf("Ready = %v, want reason %s", c, reason)
		}
		for _, m := range msgs {
			if !strings.Contains(fmt.Sprint(c["message"]), m) {
				return fmt.Errorf("Ready message %q does not say %q", c["message"], m)
			}
		}
		return nil
	})
}

// sameObjects checks that the objects still exist with the same UIDs:
// nothing deleted or recreated them.
func sameObjects(t *testing.T, gvr schema.GroupVersionResource, objs ...*unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		if now := get(t, gvr, o.GetNamespace(), o.GetName()); now == nil || now.GetUID() != o.GetUID() {
			t.Errorf("%s %s/%s was deleted or recreated", gvr.Resource, o.GetNamespace(), o.GetName())
		}
	}
}

const forEachBody = `  children:
  - id: item
    forEach:
    - x: ${parent.spec.items}
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: ${parent.metadata.name}-${x.lowerAscii()}
      data: {item: "${x}"}
`

// Scenario: a forEach list grows, is reordered and shrinks. Growing
// creates only the new element's object; reordering writes no child (only
// the parent's observedGeneration); shrinking deletes only the object of
// the element that is gone. Two elements that render one name are an
// error on the parent, naming the name, and nothing is deleted.
func TestLanguageForEach(t *testing.T) {
	const group = "foreach.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	const user = "kgen-lang-foreach"
	startControllerWith(t, controllerOptions{User: user}, languageRule(t, "foreach", group, []string{ns}, forEachBody)).waitReady(t)
	items := func(xs ...any) map[string]any { return map[string]any{"items": xs} }
	create(t, gvr, gadget(group, ns, "g", items("a", "b")))
	a, b := waitFor(t, cmGVR, ns, "g-a", nil), waitFor(t, cmGVR, ns, "g-b", nil)

	patchSpec(t, gvr, ns, "g", items("a", "b", "c"))
	c := waitFor(t, cmGVR, ns, "g-c", func(o *unstructured.Unstructured) error { return expect(o, "c", "data", "item") })
	sameObjects(t, cmGVR, a, b)
	waitObserved(t, gvr, ns, "g")

	settle(t, user, ns)
	start := time.Now()
	patchSpec(t, gvr, ns, "g", items("c", "a", "b"))
	waitObserved(t, gvr, ns, "g")
	settle(t, user, ns)
	for _, w := range writesOf(t, user, ns, start) {
		if w != "patch gadgets/status g" {
			t.Errorf("reordering the list wrote %s", w)
		}
	}
	sameObjects(t, cmGVR, a, b, c)

	start = time.Now()
	patchSpec(t, gvr, ns, "g", items("c", "b"))
	waitGone(t, cmGVR, ns, "g-a")
	waitObserved(t, gvr, ns, "g")
	settle(t, user, ns)
	sameObjects(t, cmGVR, b, c)
	for _, w := range writesOf(t, user, ns, start) {
		if strings.Contains(w, "configmaps") && w != "delete configmaps g-a" {
			t.Errorf("shrinking the list wrote %s", w)
		}
	}

	patchSpec(t, gvr, ns, "g", items("c", "b", "B"))
	waitReason(t, gvr, ns, "g", reconcile.ReasonInvalid, "ConfigMap "+ns+"/g-b", "elements 1 and 2")
	sameObjects(t, cmGVR, b, c)
}

// Scenario: inputs. Two parents read two shared ConfigMaps by name, and
// the ConfigMaps of their own namespaces by selector; they are parents of
// two copies of one rule, so the reconcile counter of each tells whether
// the other was reconciled. A change to one input reconciles only the
// parent that reads it: only its child changes, kgen writes nothing else
// (audit log), and the other parent is not reconciled at all. A missing
// named input makes the child wait with Ready=False, reason InputMissing,
// until it exists.
func TestLanguageInputs(t *testing.T) {
	const group = "inputs.example.com"
	ns1, ns2, shared := newNamespace(t), newNamespace(t), newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	configMap := func(ns, name, value string, labels map[string]any) {
		t.Helper()
		create(t, cmGVR, map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": name, "namespace": ns, "labels": labels}, "data": map[string]any{"value": value}})
	}
	configMap(shared, "cm-a", "1", nil)
	configMap(shared, "cm-b", "1", nil)
	configMap(ns1, "x1", "", map[string]any{"e2e.kgen.dev/extra": "true"})
	body := fmt.Sprintf(`  inputs:
  - id: config
    apiVersion: v1
    kind: ConfigMap
    namespace: %s
    name: ${parent.spec.config}
  - id: extras
    apiVersion: v1
    kind: ConfigMap
    selector: {matchLabels: {e2e.kgen.dev/extra: "true"}}
  children:
  - id: out
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-out"}
      data:
        value: ${inputs.config.data.value}
        extras: ${inputs.extras.map(c, c.metadata.name).join(",")}
`, shared)
	const user = "kgen-lang-inputs"
	r := startControllerWith(t, controllerOptions{User: user},
		languageRule(t, "inputs", group, []string{ns1}, body), languageRule(t, "inputs-b", group, []string{ns2}, body))
	r.waitReady(t)
	create(t, gvr, gadget(group, ns1, "a", map[string]any{"config": "cm-a"}))
	create(t, gvr, gadget(group, ns2, "b", map[string]any{"config": "cm-b"}))
	outIs := func(value, extras string) func(*unstructured.Unstructured) error {
		return func(o *unstructured.Unstructured) error {
			if err := expect(o, value, "data", "value"); err != nil {
				return err
			}
			return expect(o, extras, "data", "extras")
		}
	}
	waitFor(t, cmGVR, ns1, "a-out", outIs("1", "x1"))
	outB := waitFor(t, cmGVR, ns2, "b-out", outIs("1", ""))
	waitReason(t, gvr, ns1, "a", reconcile.ReasonReady)
	waitReason(t, gvr, ns2, "b", reconcile.ReasonReady)
	settle(t, user, ns1)
	settle(t, user, ns2)

	// A named input changes: only its reader follows.
	start := time.Now()
	otherReconciles := reconciles(t, r, "inputs-b")
	patchConfigMap(t, shared, "cm-a", map[string]any{"value": "2"})
	waitFor(t, cmGVR, ns1, "a-out", outIs("2", "x1"))
	settle(t, user, ns1)
	if n := reconciles(t, r, "inputs-b"); n != otherReconciles {
		t.Errorf("a parent that does not read the changed input was reconciled %v times", n-otherReconciles)
	}
	if w := writesOf(t, user, ns1, start); !slices.Equal(w, []string{"patch configmaps a-out"}) {
		t.Errorf("after its input changed, kgen wrote %v in the reader's namespace, want only its child", w)
	}
	if w := writesOf(t, user, ns2, start); len(w) > 0 {
		t.Errorf("after another parent's input changed, kgen wrote %v", w)
	}
	sameObjects(t, cmGVR, outB)
	if o := get(t, cmGVR, ns2, "b-out"); o.GetResourceVersion() != outB.GetResourceVersion() {
		t.Error("the child of a parent that does not read the changed input changed")
	}

	// A selector input gains an object: only the parent whose selector
	// reads that namespace follows.
	start = time.Now()
	otherReconciles = reconciles(t, r, "inputs")
	configMap(ns2, "x2", "", map[string]any{"e2e.kgen.dev/extra": "true"})
	waitFor(t, cmGVR, ns2, "b-out", outIs("1", "x2"))
	settle(t, user, ns2)
	if w := writesOf(t, user, ns1, start); len(w) > 0 {
		t.Errorf("after an object another parent's selector reads appeared, kgen wrote %v", w)
	}
	if n := reconciles(t, r, "inputs"); n != otherReconciles {
		t.Errorf("a parent whose selector does not match the new object was reconciled %v times", n-otherReconciles)
	}

	// A named input that does not exist: the child waits.
	create(t, gvr, gadget(group, ns1, "c", map[string]any{"config": "cm-c"}))
	waitReason(t, gvr, ns1, "c", reconcile.ReasonInputMissing, "input config (ConfigMap "+shared+"/cm-c, which does not exist)")
	if get(t, cmGVR, ns1, "c-out") != nil {
		t.Error("a child that reads a missing input was made")
	}
	configMap(shared, "cm-c", "3", nil)
	waitFor(t, cmGVR, ns1, "c-out", outIs("3", "x1"))
	waitReason(t, gvr, ns1, "c", reconcile.ReasonReady)

	// A parent without the field an input's name reads: its rule cannot
	// render it, and it says so (it had no status at all, and was
	// retried for as long as kgen ran); given the field, it converges.
	create(t, gvr, gadget(group, ns1, "d", map[string]any{}))
	waitReason(t, gvr, ns1, "d", reconcile.ReasonInvalid, "spec.inputs[0].name", "no such key: config")
	patchSpec(t, gvr, ns1, "d", map[string]any{"config": "cm-c"})
	waitFor(t, cmGVR, ns1, "d-out", outIs("3", "x1"))
	waitReason(t, gvr, ns1, "d", reconcile.ReasonReady)
}

// Scenario (sections 8 and 11): an input in the parent's own namespace
// (namespace: ${parent.metadata.namespace}) under exactly the RBAC kgenctl
// rbac prints: the input kind is granted, and watched, only in the rule's
// namespaces, and kgen reads the input there and follows its changes with
// no request refused.
func TestLanguageInputInParentNamespace(t *testing.T) {
	const group = "inputns.example.com"
	kgenNS, ns1, ns2 := newNamespace(t), newNamespace(t), newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	file := languageRule(t, "input-ns", group, []string{ns1, ns2}, `  inputs:
  - id: config
    apiVersion: v1
    kind: ConfigMap
    namespace: ${parent.metadata.namespace}
    name: ${parent.spec.config}
  children:
  - id: out
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-out"}
      data:
        value: ${inputs.config.data.value}
`)
	if _, err := env.kube.CoreV1().ServiceAccounts(kgenNS).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "kgen"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	manifests, err := kgenctl(t, "rbac", "--rules", file, "--offline=false", "--kubeconfig", env.cp.Kubeconfig, "-n", kgenNS, "--name", "kgen-"+kgenNS, "--leader-elect=false")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifestpkg.Decode(strings.NewReader(manifests))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() != "ClusterRole" {
			continue
		}
		rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
		for _, r := range rules {
			if res, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "resources"); slices.Contains(res, "configmaps") {
				t.Errorf("ClusterRole %s grants configmaps in every namespace: %v", o.GetName(), r)
			}
		}
	}
	applyManifest(t, manifests)
	user := "system:serviceaccount:" + kgenNS + ":kgen"
	waitCan(t, user, true, authorizationv1.ResourceAttributes{Verb: "watch", Resource: "configmaps", Namespace: ns2})
	waitCan(t, user, false, authorizationv1.ResourceAttributes{Verb: "watch", Resource: "configmaps", Namespace: kgenNS})

	start := time.Now()
	startKgenWith(t, "input-ns", serviceAccountKubeconfig(t, kgenNS, "kgen"), "--rules", file, "--rule-objects=false", "-n", kgenNS)
	for _, ns := range []string{ns1, ns2} {
		create(t, cmGVR, map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "settings", "namespace": ns}, "data": map[string]any{"value": ns}})
		create(t, gvr, gadget(group, ns, "g", map[string]any{"config": "settings"}))
		waitFor(t, cmGVR, ns, "g-out", func(o *unstructured.Unstructured) error { return expect(o, ns, "data", "value") })
	}
	patchConfigMap(t, ns2, "settings", map[string]any{"value": "changed"})
	waitFor(t, cmGVR, ns2, "g-out", func(o *unstructured.Unstructured) error { return expect(o, "changed", "data", "value") })
	waitReason(t, gvr, ns2, "g", reconcile.ReasonReady)
	for _, e := range auditOf(t, user, start) {
		if e.deniedByRBAC() {
			t.Errorf("kgen's request was refused: %s %s %s/%s", e.Verb, e.ObjectRef.Resource, e.ObjectRef.Namespace, e.ObjectRef.Name)
		}
	}
}

func patchConfigMap(t *testing.T, ns, name string, data map[string]any) {
	t.Helper()
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "namespace": ns}, "data": data}}
	if _, err := env.dynamic.Resource(cmGVR).Namespace(ns).Apply(t.Context(), name, obj, metav1.ApplyOptions{FieldManager: "e2e", Force: true}); err != nil {
		t.Fatal(err)
	}
}

// notKgens checks that an object no longer carries kgen's marks: its
// labels, annotations and an ownerReference to the parent; only the
// orphaned-from mark, naming the parent, is left.
func notKgens(parent types.UID) func(*unstructured.Unstructured) error {
	return func(o *unstructured.Unstructured) error {
		for k := range o.GetLabels() {
			if strings.HasPrefix(k, "kgen.dev/") || k == reconcile.LabelManagedBy {
				return fmt.Errorf("labels = %v, want kgen's gone", o.GetLabels())
			}
		}
		for k, v := range o.GetAnnotations() {
			if k == reconcile.AnnotationOrphanedFrom {
				if !strings.Contains(v, `"uid":"`+string(parent)+`"`) {
					return fmt.Errorf("annotation %s = %s, want it to name the parent %s", k, v, parent)
				}
				continue
			}
			if strings.HasPrefix(k, "kgen.dev/") {
				return fmt.Errorf("annotations = %v, want kgen's gone", o.GetAnnotations())
			}
		}
		if _, ok := o.GetAnnotations()[reconcile.AnnotationOrphanedFrom]; !ok {
			return fmt.Errorf("annotations = %v, want %s", o.GetAnnotations(), reconcile.AnnotationOrphanedFrom)
		}
		for _, ref := range o.GetOwnerReferences() {
			if ref.UID == parent {
				return fmt.Errorf("ownerReferences = %v", o.GetOwnerReferences())
			}
		}
		return nil
	}
}

// Scenario: deletionPolicy Orphan. The child never has an ownerReference;
// when its includeWhen turns false, and when its parent is deleted, it
// stays, without kgen's labels and annotations, and the garbage collector
// leaves it alone.
func TestLanguageOrphan(t *testing.T) {
	const group = "orphan.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	startController(t, nil, languageRule(t, "orphan", group, []string{ns}, `  children:
  - id: kept
    deletionPolicy: Orphan
    includeWhen: ["${parent.spec.keep}"]
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-kept"}
      data: {a: "1"}
`)).waitReady(t)

	// Pruned: includeWhen turns false.
	p1 := create(t, gvr, gadget(group, ns, "p1", map[string]any{"keep": true}))
	kept := waitFor(t, cmGVR, ns, "p1-kept", func(o *unstructured.Unstructured) error {
		if o.GetLabels()[reconcile.LabelManagedBy] != reconcile.ManagedBy || len(o.GetOwnerReferences()) > 0 {
			return fmt.Errorf("labels %v, ownerReferences %v: want kgen's labels and no ownerReference", o.GetLabels(), o.GetOwnerReferences())
		}
		return nil
	})
	waitFor(t, gvr, ns, "p1", func(p *unstructured.Unstructured) error {
		if !slices.Contains(p.GetFinalizers(), reconcile.Finalizer) {
			return fmt.Errorf("finalizers = %v, want kgen's: it lets the child go when the parent goes", p.GetFinalizers())
		}
		return nil
	})
	patchSpec(t, gvr, ns, "p1", map[string]any{"keep": false})
	waitFor(t, cmGVR, ns, "p1-kept", notKgens(p1.GetUID()))
	sameObjects(t, cmGVR, kept)
	waitEvent(t, ns, "p1", reconcile.EventOrphaned, 30*time.Second)

	// The parent deleted.
	p2 := create(t, gvr, gadget(group, ns, "p2", map[string]any{"keep": true}))
	kept2 := waitFor(t, cmGVR, ns, "p2-kept", nil)
	create(t, cmGVR, map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "p2-owned", "namespace": ns,
		"ownerReferences": []any{map[string]any{"apiVersion": group + "/v1", "kind": "Gadget", "name": "p2", "uid": string(p2.GetUID())}}}})
	waitFor(t, gvr, ns, "p2", func(p *unstructured.Unstructured) error {
		if !slices.Contains(p.GetFinalizers(), reconcile.Finalizer) {
			return fmt.Errorf("finalizers = %v", p.GetFinalizers())
		}
		return nil
	})
	if err := env.dynamic.Resource(gvr).Namespace(ns).Delete(t.Context(), "p2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, gvr, ns, "p2")
	waitFor(t, cmGVR, ns, "p2-kept", notKgens(p2.GetUID()))
	// Once the garbage collector has deleted an object p2 owned, it has
	// handled p2's deletion: the child it let go is still there. (It
	// learns a new CRD's kind from discovery, which may take a while.)
	eventually(t, 2*time.Minute, func() (bool, error) {
		return get(t, cmGVR, ns, "p2-owned") == nil, nil
	}, "the garbage collector to delete an object the deleted parent owned")
	sameObjects(t, cmGVR, kept2)
}

// Scenario (contract §6 and §8): a child's deletionPolicy changes from
// Orphan to Delete in the rules file while kgen runs. The child gets its
// ownerReference, and kgen's finalizer, which guarded it only while it
// had none, leaves the parent (before, it stayed until the parent next
// changed); back to Orphan, the finalizer returns and the ownerReference
// goes.
func TestLanguageOrphanThenDelete(t *testing.T) {
	const group = "orphandelete.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	body := func(policy string) string {
		return languageRuleText("orphan-delete", group, []string{ns}, `  children:
  - id: kept
    deletionPolicy: `+policy+`
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-kept"}
      data: {a: "1"}
`)
	}
	path := writeRules(t, body("Orphan"))
	startController(t, nil, path).waitReady(t)
	p := create(t, gvr, gadget(group, ns, "p", map[string]any{}))
	state := func(owned, finalized bool) {
		t.Helper()
		waitFor(t, cmGVR, ns, "p-kept", func(o *unstructured.Unstructured) error {
			if got := slices.ContainsFunc(o.GetOwnerReferences(), func(r metav1.OwnerReference) bool { return r.UID == p.GetUID() }); got != owned {
				return fmt.Errorf("ownerReferences %v, want the parent's: %t", o.GetOwnerReferences(), owned)
			}
			return nil
		})
		waitFor(t, gvr, ns, "p", hasFinalizer(finalized))
	}
	state(false, true)
	if err := os.WriteFile(path, []byte(body("Delete")), 0o644); err != nil {
		t.Fatal(err)
	}
	state(true, false)
	if err := os.WriteFile(path, []byte(body("Orphan")), 0o644); err != nil {
		t.Fatal(err)
	}
	state(false, true)
}

// Scenario: an Orphan child kgen let go of is wanted again. The parent that
// orphaned it takes the same object back when its includeWhen turns true
// again, and a parent deleted and made again under its name (a new UID, as
// GitOps does) adopts the child the deleted one left: no Conflict.
func TestChangeOrphanWantedAgain(t *testing.T) {
	const group = "orphanback.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	startController(t, nil, languageRule(t, "orphanback", group, []string{ns}, `  children:
  - id: kept
    deletionPolicy: Orphan
    includeWhen: ["${parent.spec.keep}"]
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-kept"}
      data: {a: "1"}
`)).waitReady(t)
	ours := func(parent types.UID) func(*unstructured.Unstructured) error {
		return func(o *unstructured.Unstructured) error {
			if o.GetLabels()[reconcile.LabelParentUID] != string(parent) || o.GetLabels()[reconcile.LabelManagedBy] != reconcile.ManagedBy {
				return fmt.Errorf("labels = %v, want kgen's for parent %s", o.GetLabels(), parent)
			}
			if _, ok := o.GetAnnotations()[reconcile.AnnotationOrphanedFrom]; ok {
				return fmt.Errorf("annotations = %v, want the orphaned-from mark gone", o.GetAnnotations())
			}
			return nil
		}
	}
	notConflict := func(p *unstructured.Unstructured) error {
		if c := readyCondition(p); c == nil || c["status"] != "True" || fmt.Sprint(nested(p, "status", "observedGeneration")) != fmt.Sprint(p.GetGeneration()) {
			return fmt.Errorf("Ready = %v, observedGeneration %v of %d: want True and current", c, nested(p, "status", "observedGeneration"), p.GetGeneration())
		}
		return nil
	}

	p := create(t, gvr, gadget(group, ns, "p", map[string]any{"keep": true}))
	kept := waitFor(t, cmGVR, ns, "p-kept", ours(p.GetUID()))
	patchSpec(t, gvr, ns, "p", map[string]any{"keep": false})
	waitFor(t, cmGVR, ns, "p-kept", notKgens(p.GetUID()))
	patchSpec(t, gvr, ns, "p", map[string]any{"keep": true})
	waitFor(t, cmGVR, ns, "p-kept", ours(p.GetUID()))
	waitFor(t, gvr, ns, "p", notConflict)
	sameObjects(t, cmGVR, kept)
	waitEvent(t, ns, "p", reconcile.EventAdopted, 30*time.Second)

	// Deleted and made again under the same name.
	if err := env.dynamic.Resource(gvr).Namespace(ns).Delete(t.Context(), "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, gvr, ns, "p")
	waitFor(t, cmGVR, ns, "p-kept", notKgens(p.GetUID()))
	again := create(t, gvr, gadget(group, ns, "p", map[string]any{"keep": true}))
	waitFor(t, cmGVR, ns, "p-kept", ours(again.GetUID()))
	waitFor(t, gvr, ns, "p", notConflict)
	sameObjects(t, cmGVR, kept)
}

// Scenario: updatePolicy CreateOnly. A Secret with randomString(16) is
// created once; changes to its parent do not write it; deleted, it is
// created again with a new value.
func TestLanguageCreateOnly(t *testing.T) {
	const group = "createonly.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	const user = "kgen-lang-createonly"
	startControllerWith(t, controllerOptions{User: user}, languageRule(t, "createonly", group, []string{ns}, `  children:
  - id: password
    updatePolicy: CreateOnly
    template:
      apiVersion: v1
      kind: Secret
      metadata: {name: "${parent.metadata.name}-password"}
      stringData:
        password: ${randomString(16)}
        owner: ${parent.spec.owner}
`)).waitReady(t)
	field := func(s *unstructured.Unstructured, key string) string {
		enc, _, _ := unstructured.NestedString(s.Object, "data", key)
		dec, err := base64.StdEncoding.DecodeString(enc)
		if err != nil {
			t.Fatal(err)
		}
		return string(dec)
	}
	create(t, gvr, gadget(group, ns, "c", map[string]any{"owner": "a"}))
	first := waitFor(t, secretsGVR, ns, "c-password", nil)
	pw := field(first, "password")
	if len(pw) != 16 || field(first, "owner") != "a" {
		t.Fatalf("password %q (%d characters), owner %q", pw, len(pw), field(first, "owner"))
	}
	waitObserved(t, gvr, ns, "c")
	settle(t, user, ns)

	start := time.Now()
	patchSpec(t, gvr, ns, "c", map[string]any{"owner": "b"})
	waitObserved(t, gvr, ns, "c")
	settle(t, user, ns)
	if now := get(t, secretsGVR, ns, "c-password"); now.GetResourceVersion() != first.GetResourceVersion() {
		t.Errorf("the CreateOnly child was written after its parent changed: owner %q", field(now, "owner"))
	}
	for _, w := range writesOf(t, user, ns, start) {
		if strings.Contains(w, "secrets") {
			t.Errorf("kgen wrote the CreateOnly child: %s", w)
		}
	}

	if err := env.kube.CoreV1().Secrets(ns).Delete(t.Context(), "c-password", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	again := waitFor(t, secretsGVR, ns, "c-password", func(s *unstructured.Unstructured) error {
		if s.GetUID() == first.GetUID() {
			return fmt.Errorf("not deleted yet")
		}
		return nil
	})
	pw2 := field(again, "password")
	if len(pw2) != 16 || pw2 == pw || field(again, "owner") != "b" {
		t.Errorf("recreated with password %q (was %q), owner %q: want a new 16-character password and owner b", pw2, pw, field(again, "owner"))
	}

	// The parent restored from a backup (section 6): a new UID, and the
	// Secret, orphaned by the garbage collector, is adopted as it is.
	// kgen used to apply its template, with a new password.
	orphan := metav1.DeletePropagationOrphan
	if err := env.dynamic.Resource(gvr).Namespace(ns).Delete(t.Context(), "c", metav1.DeleteOptions{PropagationPolicy: &orphan}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, gvr, ns, "c")
	restored := create(t, gvr, gadget(group, ns, "c", map[string]any{"owner": "d"}))
	adopted := waitFor(t, secretsGVR, ns, "c-password", func(s *unstructured.Unstructured) error {
		if refs := s.GetOwnerReferences(); len(refs) != 1 || refs[0].UID != restored.GetUID() {
			return fmt.Errorf("ownerReferences = %v", refs)
		}
		return nil
	})
	if adopted.GetUID() != again.GetUID() || field(adopted, "password") != pw2 || field(adopted, "owner") != "b" {
		t.Errorf("adopted: uid %s (was %s), password %q (was %q), owner %q (was b): want the object as it was",
			adopted.GetUID(), again.GetUID(), field(adopted, "password"), pw2, field(adopted, "owner"))
	}
	waitEvent(t, ns, "c", "Adopted", 10*time.Second)
	waitObserved(t, gvr, ns, "c")
}

// recordOf returns what kgen's record (the ConfigMap kgen-state in its
// namespace) holds for a rule.
func recordOf(t *testing.T, ns, rule string) string {
	t.Helper()
	cm, err := env.kube.CoreV1().ConfigMaps(ns).Get(t.Context(), controller.DefaultRecordName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return cm.Data[rule]
}

func waitRecord(t *testing.T, ns, rule, want string) {
	t.Helper()
	eventually(t, 60*time.Second, func() (bool, error) {
		got := recordOf(t, ns, rule)
		return got == want, fmt.Errorf("record of rule %s = %q, want %q", rule, got, want)
	}, "kgen's record of rule %s", rule)
}

const removedKindV1 = `  children:
  - id: config
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: "${parent.metadata.name}"}}
  - id: account
    template: {apiVersion: v1, kind: ServiceAccount, metadata: {name: "${parent.metadata.name}"}}
`

const removedKindV2 = `  children:
  - id: config
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: "${parent.metadata.name}"}}
`

// Scenario: a kind removed from a rule while kgen was stopped (the last
// child of its kind). The restarted kgen finds its children through its
// record and prunes them, from every parent; the kind then leaves the
// record. The other child is left alone.
func TestLanguageRemovedKindAfterRestart(t *testing.T) {
	const group = "removed.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	file := languageRule(t, "removed-kind", group, []string{ns}, removedKindV1)
	first := startController(t, nil, file)
	first.waitReady(t)
	create(t, gvr, gadget(group, ns, "r1", nil))
	create(t, gvr, gadget(group, ns, "r2", nil))
	var configs []*unstructured.Unstructured
	for _, name := range []string{"r1", "r2"} {
		configs = append(configs, waitFor(t, cmGVR, ns, name, nil))
		waitFor(t, saGVR, ns, name, nil)
	}
	// The harness's kgen keeps its record in "default".
	waitRecord(t, metav1.NamespaceDefault, "removed-kind", "v1 ConfigMap "+ns+"\nv1 ServiceAccount "+ns+"\n")
	first.stop()

	if err := os.WriteFile(file, []byte(languageRuleText("removed-kind", group, []string{ns}, removedKindV2)), 0o644); err != nil {
		t.Fatal(err)
	}
	second := startController(t, nil, file)
	second.waitReady(t)
	waitGone(t, saGVR, ns, "r1")
	waitGone(t, saGVR, ns, "r2")
	waitRecord(t, metav1.NamespaceDefault, "removed-kind", "v1 ConfigMap "+ns+"\n")
	second.waitRule(t, 30*time.Second, "removed-kind", func(s controller.RuleState) error {
		if len(s.Pruning) > 0 {
			return fmt.Errorf("still pruning %v", s.Pruning)
		}
		return nil
	})
	sameObjects(t, cmGVR, configs...)
}

// Scenario (contract §8, audit s10): while kgen is stopped, a rule is
// renamed and loses a kind in the same edit. The restarted kgen learns from
// its record that the old name watched these parents and made children of
// that kind: they are pruned from every parent; the child the rule still
// makes stays, the same object.
func TestLanguageRemovedKindOfRenamedRule(t *testing.T) {
	const group = "renamedkind.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	file := languageRule(t, "renamed-kind", group, []string{ns}, removedKindV1)
	first := startController(t, nil, file)
	first.waitReady(t)
	create(t, gvr, gadget(group, ns, "n1", nil))
	config := waitFor(t, cmGVR, ns, "n1", nil)
	waitFor(t, saGVR, ns, "n1", nil)
	waitRecord(t, metav1.NamespaceDefault, "renamed-kind", "v1 ConfigMap "+ns+"\nv1 ServiceAccount "+ns+"\n")
	first.stop()

	if err := os.WriteFile(file, []byte(languageRuleText("renamed-kind2", group, []string{ns}, removedKindV2)), 0o644); err != nil {
		t.Fatal(err)
	}
	second := startController(t, nil, file)
	second.waitReady(t)
	waitGone(t, saGVR, ns, "n1")
	sameObjects(t, cmGVR, config)
}

// Scenario: a kind removed from a rule while kgen runs (the rules file is
// edited): its children are pruned, the other child stays.
func TestLanguageRemovedKindLive(t *testing.T) {
	const group = "removedlive.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	file := languageRule(t, "removed-kind-live", group, []string{ns}, removedKindV1)
	startController(t, nil, file).waitReady(t)
	create(t, gvr, gadget(group, ns, "l", nil))
	config := waitFor(t, cmGVR, ns, "l", nil)
	waitFor(t, saGVR, ns, "l", nil)
	if err := os.WriteFile(file, []byte(languageRuleText("removed-kind-live", group, []string{ns}, removedKindV2)), 0o644); err != nil {
		t.Fatal(err)
	}
	waitGone(t, saGVR, ns, "l")
	waitRecord(t, metav1.NamespaceDefault, "removed-kind-live", "v1 ConfigMap "+ns+"\n")
	sameObjects(t, cmGVR, config)
}

// Scenario: a typo in a parent field, ${parent.spec.imgae}. kgenctl
// validate --crd rejects it naming the field. kgenctl run, which learns
// the CRD from the cluster, does not start the rule: its log names the
// field, the parent gets no children, and a Rule object with the typo
// says Accepted=False with the field path. A Rule object's new version
// with the typo is not applied: its previous version keeps running.
func TestLanguageTypo(t *testing.T) {
	installCRD(t, "examples/webapp/crd.yaml")
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	nsFile, nsObject := newNamespace(t), newNamespace(t)
	typo := func(doc string) string {
		out := strings.Replace(doc, "image: ${parent.spec.image}", "image: ${parent.spec.imgae}", 1)
		if out == doc {
			t.Fatal("the example no longer reads parent.spec.image")
		}
		return out
	}
	file := writeRules(t, typo(exampleRuleIn(t, "typo", nsFile)))

	out, err := exec.Command(env.kgenctl, "validate", "--rules", file, "--crd", filepath.Join(env.root, "examples/webapp/crd.yaml")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), `template.data.image: ${parent.spec.imgae}: parent.spec has no field "imgae"`) || !strings.Contains(string(out), `did you mean "image"?`) {
		t.Errorf("kgenctl validate --crd: %v\n%s", err, out)
	}

	p := startKgen(t, "kgen-typo", "--rules", file)
	create(t, webappGVR, webapp(nsFile, "shop", 1))
	eventually(t, 30*time.Second, func() (bool, error) {
		log := p.output.String()
		return strings.Contains(log, "Rule does not start") && strings.Contains(log, `template.data.image: ${parent.spec.imgae}: parent.spec has no field \"imgae\"`), fmt.Errorf("not logged yet")
	}, "kgenctl run to log that the rule does not fit its CRD")

	good := exampleRuleIn(t, "typo-object", nsObject)
	applyRule(t, typo(good))
	waitRuleStatus(t, "typo-object", accepted("False", "spec.children[0].template.data.image", "${parent.spec.imgae}", `did you mean "image"`))
	create(t, webappGVR, webapp(nsObject, "shop", 1))
	if get(t, cmGVR, nsObject, "shop-config") != nil {
		t.Errorf("a Rule object with a typo made a child")
	}

	// Fixed, it runs; a new version with the typo again is not applied.
	fixed := time.Now().Truncate(time.Second)
	applyRule(t, good)
	waitRuleStatus(t, "typo-object", accepted("True"))
	waitFor(t, cmGVR, nsObject, "shop-config", func(o *unstructured.Unstructured) error {
		if o.GetCreationTimestamp().Time.Before(fixed) {
			t.Errorf("the child was made at %s, before the rule was fixed at %s", o.GetCreationTimestamp(), fixed)
		}
		return nil
	})
	// kgen has reconciled WebApps since the file's rule was refused: that
	// rule still made nothing.
	if get(t, cmGVR, nsFile, "shop-config") != nil {
		t.Errorf("the rules file's rule with a typo made a child")
	}
	applyRule(t, typo(good))
	waitRuleStatus(t, "typo-object", accepted("False", "parent.spec.imgae"))
	create(t, webappGVR, webapp(nsObject, "after", 1))
	waitFor(t, cmGVR, nsObject, "after-config", func(o *unstructured.Unstructured) error { return expect(o, "nginx:1.27", "data", "image") })
}

// applyManifest creates the objects of a YAML stream, deleting them when
// the test ends.
func applyManifest(t *testing.T, text string) {
	t.Helper()
	objs, err := manifestpkg.Decode(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	m := newMapper(t)
	for _, obj := range objs {
		mapping, err := m.ResourceFor(obj.GroupVersionKind())
		if err != nil {
			t.Fatal(err)
		}
		ri := env.dynamic.Resource(mapping.GroupVersionResource())
		if !mapping.Namespaced {
			if _, err := ri.Create(t.Context(), obj, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create %s %s: %v", obj.GetKind(), obj.GetName(), err)
			}
			t.Cleanup(func() { _ = ri.Delete(context.Background(), obj.GetName(), metav1.DeleteOptions{}) })
			continue
		}
		if _, err := ri.Namespace(obj.GetNamespace()).Create(t.Context(), obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s %s/%s: %v", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
		}
	}
}

// Scenario: kgenctl run --manage-crds, as a ServiceAccount with exactly
// the RBAC kgenctl rbac --manage-crds prints. kgen creates the CRD of a
// rule with spec.parent.schema (its defaults apply to parents), updates it
// when the rule's schema changes, and keeps its record of child kinds in
// its namespace, all without a refused request.
func TestLanguageManageCRDs(t *testing.T) {
	const group = "managed.example.com"
	const crdName = "widgets." + group
	ns := newNamespace(t)
	t.Cleanup(func() {
		_ = env.crds.ApiextensionsV1().CustomResourceDefinitions().Delete(context.Background(), crdName, metav1.DeleteOptions{})
	})
	rule := func(schemaFields, data string) string {
		return fmt.Sprintf(`apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata:
  name: managed
spec:
  parent:
    apiVersion: %s/v1
    kind: Widget
    namespaces: [%s]
    schema:
      image: string | required=true
      replicas: integer | default=1 minimum=0
%s  children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}"}
      data:
        image: ${parent.spec.image}
        replicas: ${string(parent.spec.replicas)}
%s  status:
    image: ${parent.spec.image}
`, group, ns, schemaFields, data)
	}
	file := writeRules(t, rule("", ""))

	// kgen's ServiceAccount and exactly the RBAC kgenctl rbac prints.
	if _, err := env.kube.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "kgen"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	manifests, err := kgenctl(t, "rbac", "--rules", file, "--manage-crds", "-n", ns, "--name", "kgen-"+ns, "--leader-elect=false")
	if err != nil {
		t.Fatal(err)
	}
	applyManifest(t, manifests)
	user := "system:serviceaccount:" + ns + ":kgen"
	waitCan(t, user, true, authorizationv1.ResourceAttributes{Verb: "patch", Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions", Name: crdName})

	start := time.Now()
	p := startKgenWith(t, "managed", serviceAccountKubeconfig(t, ns, "kgen"), "--rules", file, "--manage-crds", "--rule-objects=false", "-n", ns)
	var crd *apiextensionsv1.CustomResourceDefinition
	eventually(t, 60*time.Second, func() (bool, error) {
		crd, err = env.crds.ApiextensionsV1().CustomResourceDefinitions().Get(t.Context(), crdName, metav1.GetOptions{})
		return err == nil, err
	}, "kgen to create the CRD")
	widgets := schema.GroupVersionResource{Group: group, Version: "v1", Resource: "widgets"}
	eventually(t, 30*time.Second, func() (bool, error) {
		_, err := env.dynamic.Resource(widgets).Namespace(ns).List(t.Context(), metav1.ListOptions{})
		return err == nil, err
	}, "widgets to be served")
	create(t, widgets, map[string]any{"apiVersion": group + "/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w", "namespace": ns}, "spec": map[string]any{"image": "nginx"}})
	waitFor(t, cmGVR, ns, "w", func(o *unstructured.Unstructured) error { return expect(o, "1", "data", "replicas") })
	waitFor(t, widgets, ns, "w", func(p *unstructured.Unstructured) error { return expect(p, "nginx", "status", "image") })
	if got := recordOf(t, ns, "managed"); got != "v1 ConfigMap "+ns+"\n" {
		t.Errorf("record = %q", got)
	}

	// A new field in the rule's schema: kgen updates the CRD.
	if err := os.WriteFile(file, []byte(rule("      size: string | default=\"m\"\n", "        size: ${parent.spec.size}\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() (bool, error) {
		crd, err = env.crds.ApiextensionsV1().CustomResourceDefinitions().Get(t.Context(), crdName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_, ok := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["size"]
		return ok, fmt.Errorf("the CRD has no spec.size yet")
	}, "kgen to update the CRD")
	// The server defaults the new field once it serves the new schema, but
	// a watch opened before sends objects decoded (and pruned) by the old
	// one until it is reopened. kgen sets the schema's defaults as the
	// server does, so the new version of the rule reads the field at once,
	// with no change of the parent, and the parent never turns InvalidSpec
	// ("no such key: size", with a Warning, until kgen listed it again:
	// an audit saw every parent flap).
	waitFor(t, cmGVR, ns, "w", func(o *unstructured.Unstructured) error { return expect(o, "m", "data", "size") })
	time.Sleep(time.Second) // events are recorded asynchronously
	warnings, err := env.kube.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=w,type=Warning"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range warnings.Items {
		t.Errorf("Warning %s on the parent after the CRD gained a defaulted field: %s", e.Reason, e.Message)
	}

	// A field's type changed: the parents that hold it could no longer be
	// written, their status neither (every status write failed, and their
	// Ready stayed as it was, when kgen applied it). kgen does not apply
	// it, says why, and the previous version keeps running.
	if err := os.WriteFile(file, []byte(strings.Replace(rule("      size: string | default=\"m\"\n", "        size: ${parent.spec.size}\n"),
		"replicas: integer | default=1 minimum=0", "replicas: string | default=\"1\"", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() (bool, error) {
		ok := strings.Contains(p.output.String(), "changes the type of spec.replicas from integer to string")
		return ok, errors.New("no such log line yet")
	}, "kgen to refuse the type change")
	crd, err = env.crds.ApiextensionsV1().CustomResourceDefinitions().Get(t.Context(), crdName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["replicas"].Type; got != "integer" {
		t.Errorf("spec.replicas of the CRD is of type %q, want integer still", got)
	}
	patchSpec(t, widgets, ns, "w", map[string]any{"image": "nginx:changed"})
	waitFor(t, widgets, ns, "w", func(p *unstructured.Unstructured) error { return expect(p, "nginx:changed", "status", "image") })

	// What kgenctl rbac printed was enough: the authorizer refused nothing.
	// (The child's first create may be refused by the server's admission
	// for up to 30 s after the CRD is served; kgen retries it.)
	allowed := 0
	for _, e := range auditOf(t, user, start) {
		if e.deniedByRBAC() {
			t.Errorf("kgen's request was refused: %s %s %s/%s", e.Verb, e.ObjectRef.Resource, e.ObjectRef.Namespace, e.ObjectRef.Name)
		}
		if e.Annotations["authorization.k8s.io/decision"] == "allow" {
			allowed++
		}
	}
	if allowed == 0 {
		t.Error("no request of kgen's has an authorization decision in the audit log: the check above cannot see a refusal")
	}
}

// The four examples of §8 end to end, applied as Rule objects with their
// CRDs: a parent of each gets its children, and follows a change of what
// its children are made from.
func TestLanguageExamples(t *testing.T) {
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	for _, crd := range []string{"database", "regions", "shared-config"} {
		installCRD(t, "examples/"+crd+"/crd.yaml")
	}
	startControllerWith(t, controllerOptions{RuleObjects: true})
	for _, name := range []string{"database", "namespace-defaults", "regions", "shared-config"} {
		applyRule(t, mustRead(t, filepath.Join(env.root, "examples", name, "rules.yaml")))
	}
	for _, name := range []string{"database", "namespace-defaults", "regions", "shared-config"} {
		waitRuleStatus(t, name, func(o *unstructured.Unstructured) error {
			if c := conditionOf(o, "Ready"); c == nil || c["status"] != "True" {
				return fmt.Errorf("Ready = %v", c)
			}
			return nil
		})
	}

	// A new version of the database: the StatefulSet follows, the
	// CreateOnly password is not written, and the Orphan claim outlives
	// the Database.
	t.Run("database", func(t *testing.T) {
		ns := newNamespace(t)
		db := create(t, databaseGVR, map[string]any{"apiVersion": "example.com/v1alpha1", "kind": "Database",
			"metadata": map[string]any{"name": "orders", "namespace": ns}, "spec": map[string]any{"version": "17.2", "storage": "1Gi"}})
		password := waitFor(t, secretsGVR, ns, "orders-password", nil)
		if pw, _, _ := unstructured.NestedString(password.Object, "data", "password"); len(pw) == 0 {
			t.Error("the password Secret has no password")
		}
		claim := waitFor(t, pvcGVR, ns, "orders-data", func(o *unstructured.Unstructured) error {
			if len(o.GetOwnerReferences()) > 0 || o.GetAnnotations()[reconcile.AnnotationDeletionPolicy] != "Orphan" {
				return fmt.Errorf("ownerReferences %v, annotations %v: an Orphan child has no owner", o.GetOwnerReferences(), o.GetAnnotations())
			}
			return nil
		})
		waitFor(t, svcGVR, ns, "orders", nil)
		image := func(want string) func(*unstructured.Unstructured) error {
			return func(o *unstructured.Unstructured) error {
				if env := fmt.Sprint(container0(o)["env"]); !strings.Contains(env, "name:orders-password") {
					return fmt.Errorf("env = %s, want the password Secret's", env)
				}
				if got := container0(o)["image"]; got != want {
					return fmt.Errorf("image = %v, want %s", got, want)
				}
				return nil
			}
		}
		waitFor(t, stsGVR, ns, "orders", image("postgres:17.2"))
		waitFor(t, databaseGVR, ns, "orders", func(p *unstructured.Unstructured) error {
			return expect(p, "orders."+ns+".svc:5432", "status", "endpoint")
		})

		patchSpec(t, databaseGVR, ns, "orders", map[string]any{"version": "17.3"})
		waitFor(t, stsGVR, ns, "orders", image("postgres:17.3"))
		waitObserved(t, databaseGVR, ns, "orders")
		if now := get(t, secretsGVR, ns, "orders-password"); now == nil || now.GetResourceVersion() != password.GetResourceVersion() {
			t.Error("the CreateOnly password was written when the Database changed")
		}
		sameObjects(t, pvcGVR, claim)

		if err := env.dynamic.Resource(databaseGVR).Namespace(ns).Delete(t.Context(), "orders", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitGone(t, databaseGVR, ns, "orders")
		waitFor(t, pvcGVR, ns, "orders-data", notKgens(db.GetUID()))
		sameObjects(t, pvcGVR, claim)
	})

	// A built-in, cluster-scoped parent: a Namespace gets its defaults when
	// it is labelled with a team, and they follow its labels.
	t.Run("namespace-defaults", func(t *testing.T) {
		other := newNamespace(t)
		name := fmt.Sprintf("e2e-team-%d", time.Now().UnixNano()%1000000)
		create(t, nsGVR, map[string]any{"apiVersion": "v1", "kind": "Namespace",
			"metadata": map[string]any{"name": name, "labels": map[string]any{"team": "checkout", "tier": "large"}}})
		t.Cleanup(func() { _ = env.kube.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}) })
		quota := func(cpu string) func(*unstructured.Unstructured) error {
			return func(o *unstructured.Unstructured) error {
				if err := expect(o, cpu, "spec", "hard", "requests.cpu"); err != nil {
					return err
				}
				if refs := o.GetOwnerReferences(); len(refs) != 1 || refs[0].Kind != "Namespace" || refs[0].Name != name {
					return fmt.Errorf("ownerReferences = %v, want the Namespace", refs)
				}
				return nil
			}
		}
		deny := waitFor(t, netpolGVR, name, "default-deny", nil)
		limits := waitFor(t, limitsGVR, name, "defaults", nil)
		waitFor(t, quotaGVR, name, "team-checkout", quota("16"))
		// A Namespace without the label is not even in kgen's cache.
		if get(t, netpolGVR, other, "default-deny") != nil {
			t.Error("a Namespace without a team label got the defaults")
		}

		// Another tier resizes the quota; another team renames it: the new
		// one is made, the old one pruned, the rest left alone.
		patchLabels(t, nsGVR, "", name, map[string]any{"tier": nil})
		waitFor(t, quotaGVR, name, "team-checkout", quota("4"))
		patchLabels(t, nsGVR, "", name, map[string]any{"team": "payments"})
		waitFor(t, quotaGVR, name, "team-payments", quota("4"))
		waitGone(t, quotaGVR, name, "team-checkout")
		sameObjects(t, netpolGVR, deny)
		sameObjects(t, limitsGVR, limits)

		// Labelled later, a Namespace gets the defaults then.
		patchLabels(t, nsGVR, "", other, map[string]any{"team": "search"})
		waitFor(t, netpolGVR, other, "default-deny", nil)
		waitFor(t, quotaGVR, other, "team-search", nil)
	})

	// forEach over regions × tiers: a region removed prunes its
	// Deployments, a tier scaled from 0 adds one per region, and the
	// others stay as they were.
	t.Run("regions", func(t *testing.T) {
		ns := newNamespace(t)
		create(t, globalGVR, map[string]any{"apiVersion": "example.com/v1alpha1", "kind": "GlobalApp",
			"metadata": map[string]any{"name": "shop", "namespace": ns},
			"spec":     map[string]any{"image": "nginx:1.27", "regions": []any{"eu-west-1", "us-east-1"}, "tiers": map[string]any{"web": int64(3), "api": int64(2), "batch": int64(0)}}})
		var names []string
		deployments := map[string]*unstructured.Unstructured{}
		for _, region := range []string{"eu-west-1", "us-east-1"} {
			for _, tier := range []string{"api", "web"} {
				name := "shop-" + region + "-" + tier
				names = append(names, name)
				deployments[name] = waitFor(t, deployGVR, ns, name, nil)
			}
			if get(t, deployGVR, ns, "shop-"+region+"-batch") != nil {
				t.Errorf("a tier with 0 replicas got a Deployment in %s", region)
			}
		}
		waitFor(t, cmGVR, ns, "shop-directory", func(o *unstructured.Unstructured) error {
			return expect(o, strings.Join(names, "\n"), "data", "deployments")
		})
		waitFor(t, globalGVR, ns, "shop", func(p *unstructured.Unstructured) error { return expect(p, int64(4), "status", "deployments") })

		patchSpec(t, globalGVR, ns, "shop", map[string]any{"regions": []any{"us-east-1"}, "tiers": map[string]any{"batch": int64(1)}})
		waitFor(t, deployGVR, ns, "shop-us-east-1-batch", func(o *unstructured.Unstructured) error { return expect(o, int64(1), "spec", "replicas") })
		waitGone(t, deployGVR, ns, "shop-eu-west-1-api")
		waitGone(t, deployGVR, ns, "shop-eu-west-1-web")
		waitFor(t, cmGVR, ns, "shop-directory", func(o *unstructured.Unstructured) error {
			return expect(o, "shop-us-east-1-api\nshop-us-east-1-batch\nshop-us-east-1-web", "data", "deployments")
		})
		waitFor(t, globalGVR, ns, "shop", func(p *unstructured.Unstructured) error { return expect(p, int64(3), "status", "deployments") })
		if get(t, deployGVR, ns, "shop-eu-west-1-batch") != nil {
			t.Error("a region removed from the list got a Deployment")
		}
		sameObjects(t, deployGVR, deployments["shop-us-east-1-api"], deployments["shop-us-east-1-web"])
	})

	// Inputs: the parent waits for the platform's defaults, then follows
	// changes of the defaults and of which registry Secrets are labelled.
	t.Run("shared-config", func(t *testing.T) {
		ns, other := newNamespace(t), newNamespace(t)
		if _, err := env.kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "platform"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = env.kube.CoreV1().Namespaces().Delete(context.Background(), "platform", metav1.DeleteOptions{})
		})
		input := strings.NewReplacer("namespace: shop", "namespace: "+ns, "namespace: other", "namespace: "+other).
			Replace(mustRead(t, filepath.Join(env.root, "examples/shared-config/input.yaml")))
		objs, err := manifestpkg.Decode(strings.NewReader(input))
		if err != nil {
			t.Fatal(err)
		}
		// The parent first: it waits for the platform's defaults.
		create(t, platformGVR, map[string]any{"apiVersion": "platform.example.com/v1", "kind": "Service",
			"metadata": map[string]any{"name": "checkout", "namespace": ns}, "spec": map[string]any{"image": "checkout:2.3.1"}})
		waitReason(t, platformGVR, ns, "checkout", reconcile.ReasonInputMissing, "input defaults")
		for _, obj := range objs {
			gvr := cmGVR
			if obj.GetKind() == "Secret" {
				gvr = secretsGVR
			}
			create(t, gvr, obj.Object)
		}
		deployment := func(replicas int64, pullSecrets string) func(*unstructured.Unstructured) error {
			return func(o *unstructured.Unstructured) error {
				if err := expect(o, replicas, "spec", "replicas"); err != nil {
					return err
				}
				pull, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "imagePullSecrets")
				if fmt.Sprint(pull) != pullSecrets {
					return fmt.Errorf("imagePullSecrets = %v, want %s", pull, pullSecrets)
				}
				if image := container0(o)["image"]; image != "registry.example.com/checkout:2.3.1" {
					return fmt.Errorf("image = %v", image)
				}
				return nil
			}
		}
		waitFor(t, deployGVR, ns, "checkout", deployment(2, "[map[name:registry-mirror] map[name:registry-pull]]"))
		waitFor(t, platformGVR, ns, "checkout", func(p *unstructured.Unstructured) error { return expect(p, "info", "status", "logLevel") })

		patchConfigMap(t, "platform", "platform-defaults", map[string]any{"replicas": "3", "logLevel": "debug"})
		waitFor(t, deployGVR, ns, "checkout", deployment(3, "[map[name:registry-mirror] map[name:registry-pull]]"))
		waitFor(t, platformGVR, ns, "checkout", func(p *unstructured.Unstructured) error { return expect(p, "debug", "status", "logLevel") })
		patchLabels(t, secretsGVR, ns, "registry-mirror", map[string]any{"kgen.example.com/registry": nil})
		waitFor(t, deployGVR, ns, "checkout", deployment(3, "[map[name:registry-pull]]"))
	})
}

// container0 returns the first container of a workload's pod template.
func container0(o *unstructured.Unstructured) map[string]any {
	containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	if len(containers) == 0 {
		return nil
	}
	c, _ := containers[0].(map[string]any)
	return c
}

// Scenario: children that do not fit their kinds' schemas, which the API
// server publishes: a typo (spec.replcas) in a Deployment, and a string
// into its integer spec.replicas. kgenctl run does not start those rules
// and logs the rule, child and field path with the file and line, while a
// correct rule of the same file runs; a Rule object with the typo says
// Accepted=False, reason Invalid, with the field path.
func TestLanguageChildSchema(t *testing.T) {
	installCRD(t, "examples/webapp/crd.yaml")
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	nsTypo, nsType, nsGood, nsObject := newNamespace(t), newNamespace(t), newNamespace(t), newNamespace(t)
	change := func(doc, from, to string) string {
		out := strings.Replace(doc, from, to, 1)
		if out == doc {
			t.Fatalf("the example no longer has %q", from)
		}
		return out
	}
	replicas := "replicas: ${parent.spec.replicas}"
	file := writeRules(t, strings.Join([]string{
		change(exampleRuleIn(t, "child-typo", nsTypo), replicas, "replcas: ${parent.spec.replicas}"),
		change(exampleRuleIn(t, "child-type", nsType), replicas, "replicas: ${parent.spec.image}"),
		exampleRuleIn(t, "child-good", nsGood),
	}, "\n---\n"))

	p := startKgen(t, "kgen-child-schema", "--rules", file)
	for _, ns := range []string{nsTypo, nsType, nsGood} {
		create(t, webappGVR, webapp(ns, "shop", 1))
	}
	// The good rule runs.
	waitFor(t, deployGVR, nsGood, "shop", nil)
	eventually(t, 60*time.Second, func() (bool, error) {
		log := p.output.String()
		for _, want := range []string{
			file + `:33:9: rule \"child-typo\": child \"deployment\": template.spec.replcas: the schema of apps/v1 Deployment has no field \"replcas\" here: did you mean \"replicas\"?`,
			`: rule \"child-type\": child \"deployment\": template.spec.replicas: ${parent.spec.image}: the schema of apps/v1 Deployment wants an integer here, but the expression's type is string`,
		} {
			if !strings.Contains(log, want) {
				return false, fmt.Errorf("not logged yet: %s", want)
			}
		}
		return true, nil
	}, "kgenctl run to log the children that do not fit")
	for _, ns := range []string{nsTypo, nsType} {
		if get(t, cmGVR, ns, "shop-config") != nil || get(t, deployGVR, ns, "shop") != nil {
			t.Errorf("a rule whose child does not fit its schema made children in %s", ns)
		}
	}

	applyRule(t, change(exampleRuleIn(t, "child-typo-object", nsObject), replicas, "replcas: ${parent.spec.replicas}"))
	o := waitRuleStatus(t, "child-typo-object", accepted("False", "spec.children[1].template.spec.replcas", `has no field "replcas"`, `did you mean "replicas"?`))
	if reason := conditionOf(o, "Accepted")["reason"]; reason != "Invalid" {
		t.Errorf("Accepted reason = %v, want Invalid", reason)
	}
}

// Every example's rules fit the schemas this API server publishes for
// their children's kinds and built-in parent kinds (and their CRDs, for
// their other parents): the checks of kgenctl run reject none of them, and
// a built-in parent (examples/namespace-defaults) is type-checked.
func TestLanguageExamplesFitPublishedSchemas(t *testing.T) {
	disco, err := discovery.NewDiscoveryClientForConfig(env.config)
	if err != nil {
		t.Fatal(err)
	}
	published := kschema.New(disco.OpenAPIV3())
	types := func(gvk schema.GroupVersionKind) (*kschema.Type, bool) {
		tp, err := published.Type(gvk)
		return tp, err == nil && tp != nil
	}
	files, _ := filepath.Glob(filepath.Join(env.root, "examples/*/rules.yaml"))
	if len(files) == 0 {
		t.Fatal("no examples")
	}
	checked := 0
	for _, f := range files {
		static := kinds.NewStatic()
		if data, err := os.ReadFile(filepath.Join(filepath.Dir(f), "crd.yaml")); err == nil {
			for _, doc := range strings.Split(string(data), "\n---") {
				crd := &unstructured.Unstructured{}
				if err := yaml.Unmarshal([]byte(doc), &crd.Object); err != nil || len(crd.Object) == 0 {
					continue
				}
				if err := static.AddCRD(crd); err != nil {
					t.Fatal(err)
				}
			}
		}
		rs, err := rules.Load([]string{f}, rules.Options{Schemas: static.Schema, Types: types})
		if err != nil {
			t.Errorf("%s: %v", f, err)
		}
		for _, r := range rs {
			if _, builtin := kinds.Builtin(r.Parent.GroupVersionKind.GroupKind()); builtin && !r.Parent.TypeChecked {
				t.Errorf("%s: rule %q on the built-in kind %s was not type-checked against its published schema", f, r.Name, r.Parent.GroupVersionKind.Kind)
			}
			for _, c := range r.Children {
				if tp, _ := types(c.GroupVersionKind); tp != nil {
					checked++
				}
			}
		}
	}
	if checked == 0 {
		t.Error("no child of the examples was checked against a published schema")
	}
}

// numGadgets is the scene of the tests of a CRD changed while kgen is
// stopped: Gadgets whose spec has x, and num while the CRD has it, and a
// rule whose ConfigMap child reads both.
type numGadgets struct {
	t         *testing.T
	group, ns string
	gvr       schema.GroupVersionResource
}

func newNumGadgets(t *testing.T, group string) *numGadgets {
	g := &numGadgets{t: t, group: group, ns: newNamespace(t)}
	g.gvr = createCRD(t, crdOf(group, "Gadget", "gadgets", apiextensionsv1.NamespaceScoped, numSchema(true)))
	return g
}

// numSchema is the Gadgets' schema, with spec.num or without.
func numSchema(num bool) *apiextensionsv1.JSONSchemaProps {
	spec := map[string]apiextensionsv1.JSONSchemaProps{"x": {Type: "string"}}
	if num {
		spec["num"] = apiextensionsv1.JSONSchemaProps{Type: "integer"}
	}
	return &apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"spec":   {Type: "object", Properties: spec},
		"status": {Type: "object", XPreserveUnknownFields: new(true)},
	}}
}

// rule is the rule's text, with extra data entries of the child.
func (g *numGadgets) rule(name, extra string) string {
	return languageRuleText(name, g.group, []string{g.ns}, `  children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: ${parent.metadata.name}
      data:
        next: ${string(parent.spec.num + 1)}
        x: ${parent.spec.x}
`+extra)
}

// setNum gives the CRD spec.num, or takes it away.
func (g *numGadgets) setNum(num bool) {
	g.t.Helper()
	updateCRD(g.t, "gadgets."+g.group, func(crd *apiextensionsv1.CustomResourceDefinition) {
		crd.Spec.Versions[0].Schema.OpenAPIV3Schema = numSchema(num)
	})
}

// create makes parent g, and waits until it is Ready.
func (g *numGadgets) create() {
	g.t.Helper()
	create(g.t, g.gvr, gadget(g.group, g.ns, "g", map[string]any{"x": "a", "num": int64(1)}))
	g.waitData("map[next:2 x:a]")
	waitReason(g.t, g.gvr, g.ns, "g", reconcile.ReasonReady)
}

// dropNum takes spec.num from the CRD, and changes parent g.
func (g *numGadgets) dropNum() {
	g.t.Helper()
	g.setNum(false)
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"x": "b"}})
	if _, err := env.dynamic.Resource(g.gvr).Namespace(g.ns).Patch(g.t.Context(), "g", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		g.t.Fatal(err)
	}
}

// restoreNum gives the CRD spec.num again, sets it on parent g, and waits
// until g converges with its child's data.
func (g *numGadgets) restoreNum(data string) {
	g.t.Helper()
	g.setNum(true)
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"num": int64(5)}})
	eventually(g.t, 30*time.Second, func() (bool, error) {
		_, err := env.dynamic.Resource(g.gvr).Namespace(g.ns).Patch(g.t.Context(), "g", types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			return false, err
		}
		o := get(g.t, g.gvr, g.ns, "g")
		n, _, _ := unstructured.NestedInt64(o.Object, "spec", "num")
		return n == 5, fmt.Errorf("spec.num = %d", n)
	}, "the parent to keep spec.num")
	g.waitData(data)
	waitReason(g.t, g.gvr, g.ns, "g", reconcile.ReasonReady)
}

// waitData waits until the child of parent g holds data.
func (g *numGadgets) waitData(data string) {
	g.t.Helper()
	waitFor(g.t, cmGVR, g.ns, "g", func(o *unstructured.Unstructured) error {
		if d := o.Object["data"]; fmt.Sprint(d) != data {
			return fmt.Errorf("data %v", d)
		}
		return nil
	})
}

// Scenario (contract §6 "Failures are visible", §7, §8 typed expressions,
// through a change of a CRD while kgen is stopped; a live audit): a Rule
// reads parent.spec.num; while kgen is stopped the CRD loses the field,
// and a parent changes. The restarted kgen runs the version that ran
// before (its status records it), as it keeps running a rule through such
// a change while it runs: the parent says its render fails (InvalidSpec,
// naming the field), the Rule says Accepted=False and that it keeps
// running, and once the CRD has the field again the parent converges.
// Before, the rule did not start, and the parent kept Ready=True of its
// old generation.
func TestLanguageCRDChangedWhileStopped(t *testing.T) {
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	g := newNumGadgets(t, "stoppedcrd.example.com")
	applyRule(t, g.rule("stopped-crd", ""))
	first := startKgen(t, "kgen-stopped-crd")
	g.create()
	waitRuleStatus(t, "stopped-crd", func(o *unstructured.Unstructured) error {
		if gen, _, _ := unstructured.NestedInt64(o.Object, "status", "running", "generation"); gen != o.GetGeneration() {
			return fmt.Errorf("status.running.generation = %d", gen)
		}
		return nil
	})
	first.stop()

	g.dropNum()
	second := startKgen(t, "kgen-stopped-crd")
	waitReason(t, g.gvr, g.ns, "g", reconcile.ReasonInvalid, "num")
	waitRuleStatus(t, "stopped-crd", accepted("False", "num", "the rule keeps running"))
	if log := second.output.String(); !strings.Contains(log, "it keeps running") {
		t.Errorf("the log does not say the rule keeps running although it no longer fits its CRD:\n%s", tailOf(log, 3000))
	}

	// The field back, and set: the parent converges.
	g.restoreNum("map[next:6 x:b]")
}

// Scenario (as TestLanguageCRDChangedWhileStopped, for a rules file): a
// file rule reads parent.spec.num; while kgen is stopped the CRD loses the
// field, and a parent changes. kgen's record holds the version of the rule
// that ran, so the restarted kgen runs it: the parent says its render
// fails (InvalidSpec, naming the field) and the log that the rule keeps
// running; once the CRD has the field again the parent converges. Before,
// a file rule did not start, and its parent kept Ready=True of its old
// generation. A version of the file edited while kgen was stopped, which
// never ran, does not start past the same error.
func TestLanguageFileRuleCRDChangedWhileStopped(t *testing.T) {
	g := newNumGadgets(t, "stoppedfile.example.com")
	file := writeRules(t, g.rule("stopped-file", ""))
	args := []string{"--rules", file, "--rule-objects=false"}
	first := startKgen(t, "kgen-stopped-file", args...)
	g.create()
	eventually(t, 30*time.Second, func() (bool, error) {
		v := recordOf(t, metav1.NamespaceDefault, "stopped-file"+controller.RunningKeySuffix)
		return strings.HasPrefix(v, "sha256:"), fmt.Errorf("recorded version %q", v)
	}, "the record to hold the running version")
	first.stop()

	g.dropNum()
	second := startKgen(t, "kgen-stopped-file", args...)
	waitReason(t, g.gvr, g.ns, "g", reconcile.ReasonInvalid, "num")
	eventually(t, 30*time.Second, func() (bool, error) {
		return strings.Contains(second.output.String(), "it keeps running"), errors.New("no line says so")
	}, "the log to say the rule keeps running although it no longer fits its CRD")
	second.stop()

	// Edited while stopped: this version never ran, and does not start
	// (the version that ran runs in its place, see
	// TestLanguageFileRuleRestartKeepsVersionThatRan).
	if err := os.WriteFile(file, []byte(g.rule("stopped-file", "        y: ${parent.spec.x}\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	third := startKgen(t, "kgen-stopped-file", args...)
	eventually(t, 60*time.Second, func() (bool, error) {
		return strings.Contains(third.output.String(), "has no field"), errors.New("no line says why")
	}, "the log to say why the edited rule does not start")
	if cm := get(t, cmGVR, g.ns, "g"); cm == nil || cm.Object["data"].(map[string]any)["y"] != nil {
		t.Fatalf("the edited version, which never ran and does not fit the CRD, wrote the child: %v", cm)
	}

	// The field back, and set: the parent converges, with the edit.
	g.restoreNum("map[next:6 x:b y:b]")
}

// Scenario (contract §7 "the previous valid version keeps running", a live
// audit of a helm upgrade): a file rule runs; while kgen is stopped the
// file changes to a version that does not fit the parent kind's CRD (it
// reads a field the CRD lacks: kubectl and helm take it, only the cluster
// can tell). kgen starts: the version that ran, which its record holds,
// runs in its place: a deleted child is made again, a parent's change is
// followed, and the log says why. Before, the rule waited, and nothing
// repaired its children. Fixed, the file's version runs.
func TestLanguageFileRuleRestartKeepsVersionThatRan(t *testing.T) {
	g := newNumGadgets(t, "restorefile.example.com")
	file := writeRules(t, g.rule("restore-file", ""))
	args := []string{"--rules", file, "--rule-objects=false"}
	first := startKgen(t, "kgen-restore-file", args...)
	g.create()
	eventually(t, 30*time.Second, func() (bool, error) {
		v := recordOf(t, metav1.NamespaceDefault, "restore-file"+controller.RunningKeySuffix)
		doc := recordOf(t, metav1.NamespaceDefault, "restore-file"+controller.DocumentKeySuffix)
		return strings.HasPrefix(v, "sha256:") && strings.Contains(doc, `"name":"restore-file"`), fmt.Errorf("recorded %q and %q", v, doc)
	}, "the record to hold the running version and its document")
	first.stop()

	if err := os.WriteFile(file, []byte(g.rule("restore-file", "        y: ${parent.spec.imgae}\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	second := startKgen(t, "kgen-restore-file", args...)
	eventually(t, 30*time.Second, func() (bool, error) {
		out := second.output.String()
		return strings.Contains(out, "runs instead") && strings.Contains(out, "imgae"), errors.New("no line says so")
	}, "the log to say the version that ran runs instead, and why")
	if err := env.kube.CoreV1().ConfigMaps(g.ns).Delete(t.Context(), "g", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	g.waitData("map[next:2 x:a]")
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"x": "c"}})
	if _, err := env.dynamic.Resource(g.gvr).Namespace(g.ns).Patch(t.Context(), "g", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	g.waitData("map[next:2 x:c]")
	waitReason(t, g.gvr, g.ns, "g", reconcile.ReasonReady)

	// The file fixed: its version runs.
	if err := os.WriteFile(file, []byte(g.rule("restore-file", "        y: ${parent.spec.x}\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	g.waitData("map[next:2 x:c y:c]")
}

// Scenario (contract §6 "Rules cannot trigger themselves", §8 inputs,
// through a rule change; a live audit): a rule's child exists; the rule
// then reads the child through an input, counting in its own data. kgen
// refuses the input (the parent says InvalidSpec, naming it and how to
// read the child) and writes the child no more. Before, each write of the
// child changed the input, and kgen wrote it again: 400 writes a second,
// with no event.
func TestLanguageInputOfOwnChildRefused(t *testing.T) {
	const group = "owninput.example.com"
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	applyRule(t, languageRuleText("owninput", group, []string{ns}, `  children:
  - id: counter
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-cnt"}
      data: {a: x}
`))
	startKgen(t, "kgen-owninput")
	create(t, gvr, gadget(group, ns, "g", map[string]any{}))
	waitReason(t, gvr, ns, "g", reconcile.ReasonReady)

	applyRule(t, languageRuleText("owninput", group, []string{ns}, `  inputs:
  - {id: mine, apiVersion: v1, kind: ConfigMap, name: "${parent.metadata.name}-cnt", namespace: "${parent.metadata.namespace}"}
  children:
  - id: counter
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-cnt"}
      data:
        a: x
        count: ${string(int(inputs.mine.?data.?count.orValue("0")) + 1)}
`))
	waitReason(t, gvr, ns, "g", reconcile.ReasonInvalid, "input mine is ConfigMap "+ns+"/g-cnt, which kgen writes", "children.counter")
	before := get(t, cmGVR, ns, "g-cnt")
	time.Sleep(3 * time.Second)
	after := get(t, cmGVR, ns, "g-cnt")
	if after.GetResourceVersion() != before.GetResourceVersion() {
		t.Errorf("the child was written while the rule read it as an input: data %v, resourceVersion %s then %s", after.Object["data"], before.GetResourceVersion(), after.GetResourceVersion())
	}
	if _, found := after.Object["data"].(map[string]any)["count"]; found {
		t.Errorf("the child was written from its own input: data %v", after.Object["data"])
	}

	// The child is renamed, and its new object copies the old one's data
	// through the input (a live audit: the old object, which kgen no longer
	// writes, was still refused as one it writes, and the rename never
	// happened). The old object is pruned once the new one exists; the
	// reader then waits for its input.
	applyRule(t, languageRuleText("owninput", group, []string{ns}, `  inputs:
  - {id: mine, apiVersion: v1, kind: ConfigMap, name: "${parent.metadata.name}-cnt", namespace: "${parent.metadata.namespace}"}
  children:
  - id: counter
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-cnt2"}
      data: {copied: "${inputs.mine.data.a}"}
`))
	waitFor(t, cmGVR, ns, "g-cnt2", func(o *unstructured.Unstructured) error { return expect(o, "x", "data", "copied") })
	waitGone(t, cmGVR, ns, "g-cnt")
	waitReason(t, gvr, ns, "g", reconcile.ReasonInputMissing, "input mine")
	if got := get(t, cmGVR, ns, "g-cnt2"); got == nil {
		t.Error("the renamed child was pruned while it waits for its input")
	}
}

// Scenario: two parents whose children read each other through a selector
// input (each parent's child is the other's input, and counts one more
// than it): a loop no load-time check can see, which kgen ran at the API
// server's speed. After more than 10 updates of a child in a minute kgen
// updates it at most every 10 s and says so (a ChildFollowSpaced Warning);
// fixing the rule lands at once, and then nothing is written.
func TestLanguageInputsLoopAcrossParentsSpaced(t *testing.T) {
	const group = "inputloop.example.com"
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	looping := languageRuleText("inputloop", group, []string{ns}, `  inputs:
  - id: peers
    apiVersion: v1
    kind: ConfigMap
    namespace: ${parent.metadata.namespace}
    selector: {matchLabels: {e2e.kgen.dev/loop: peer}}
  children:
  - id: counter
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: "${parent.metadata.name}-cnt"
        labels: {e2e.kgen.dev/loop: peer}
      data:
        count: '${inputs.peers.size() == 0 ? "1" : string(int(inputs.peers[0].?data.?count.orValue("0")) + 1)}'
`)
	applyRule(t, looping)
	startKgen(t, "kgen-inputloop")
	create(t, gvr, gadget(group, ns, "a", map[string]any{}))
	create(t, gvr, gadget(group, ns, "b", map[string]any{}))
	ev := waitEvent(t, ns, "a", reconcile.ReasonChildFollowSpaced, time.Minute)
	if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, "child counter") {
		t.Errorf("event %s %q, want a Warning naming child counter", ev.Type, ev.Message)
	}
	readyHas := func(msg string) {
		t.Helper()
		waitFor(t, gvr, ns, "a", func(p *unstructured.Unstructured) error {
			if c := readyCondition(p); c["status"] != "True" || !strings.Contains(fmt.Sprint(c["message"]), msg) {
				return fmt.Errorf("Ready = %v, want True saying %q", c, msg)
			}
			return nil
		})
	}
	readyHas("child counter is updated at most once every 10s")
	count := func() int {
		t.Helper()
		cm := get(t, cmGVR, ns, "a-cnt")
		n, err := strconv.Atoi(fmt.Sprint(cm.Object["data"].(map[string]any)["count"]))
		if err != nil {
			t.Fatalf("a-cnt data %v: %v", cm.Object["data"], err)
		}
		return n
	}
	// Spaced, the loop goes on, slowly: a-cnt is updated about every
	// 10 s, each time to b-cnt's count plus one.
	before := count()
	time.Sleep(25 * time.Second)
	after := count()
	t.Logf("a-cnt's count went from %d to %d in 25 s", before, after)
	if after <= before || after-before > 12 {
		t.Errorf("a-cnt's count went from %d to %d in 25 s, want it to go on slowly (a few updates)", before, after)
	}

	// The rule fixed: both children follow at once, spaced or not.
	applyRule(t, strings.Replace(looping, `'${inputs.peers.size() == 0 ? "1" : string(int(inputs.peers[0].?data.?count.orValue("0")) + 1)}'`, `'${string(inputs.peers.size())}'`, 1))
	for _, name := range []string{"a-cnt", "b-cnt"} {
		waitFor(t, cmGVR, ns, name, func(cm *unstructured.Unstructured) error {
			return expect(cm, "1", "data", "count")
		})
	}
	readyHas("all children are applied and ready")
	fixed := get(t, cmGVR, ns, "a-cnt").GetResourceVersion()
	time.Sleep(5 * time.Second)
	if now := get(t, cmGVR, ns, "a-cnt"); now.GetResourceVersion() != fixed {
		t.Errorf("a-cnt written after the rule was fixed: data %v", now.Object["data"])
	}
}
