//go:build e2e

package e2e

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"kgen.dev/kgen/pkg/controller"
)

func webapp(ns, name string, replicas int64) map[string]any {
	return map[string]any{
		"apiVersion": "example.com/v1alpha1", "kind": "WebApp",
		"metadata": map[string]any{"name": name, "namespace": ns, "labels": map[string]any{"tier": "web"}},
		"spec":     map[string]any{"image": "nginx:1.27", "port": int64(8080), "replicas": replicas},
	}
}

func nested(obj *unstructured.Unstructured, fields ...string) any {
	v, _, _ := unstructured.NestedFieldNoCopy(obj.Object, fields...)
	return v
}

func expect(obj *unstructured.Unstructured, want any, fields ...string) error {
	if got := nested(obj, fields...); !equality.Semantic.DeepEqual(fmt.Sprint(got), fmt.Sprint(want)) {
		return fmt.Errorf("%s %v = %v, want %v", obj.GetName(), fields, got, want)
	}
	return nil
}

// The WebApp example end to end: children with the right values, labels and
// a controller ownerReference; status with observedGeneration, Ready and the
// rule's fields; Ready turning True once the Deployment reports available.
func TestControllerWebApp(t *testing.T) {
	installCRD(t, "examples/webapp/crd.yaml")
	ns := newNamespace(t)
	startController(t, nil, "e2e/testdata/webapp-rules.yaml").waitReady(t)
	parent := create(t, webappGVR, webapp(ns, "shop", 2))

	cm := waitFor(t, cmGVR, ns, "shop-config", nil)
	if err := expect(cm, "nginx:1.27", "data", "image"); err != nil {
		t.Error(err)
	}
	if err := expect(cm, "8080", "data", "port"); err != nil {
		t.Error(err)
	}
	deploy := waitFor(t, deployGVR, ns, "shop", nil)
	if err := expect(deploy, int64(2), "spec", "replicas"); err != nil {
		t.Error(err)
	}
	waitFor(t, svcGVR, ns, "shop", nil)
	for _, child := range []*unstructured.Unstructured{cm, deploy} {
		l := child.GetLabels()
		if l["app.kubernetes.io/managed-by"] != "kgen" || l["kgen.dev/rule"] != "webapp" {
			t.Errorf("%s labels = %v", child.GetName(), l)
		}
		refs := child.GetOwnerReferences()
		if len(refs) != 1 || refs[0].UID != parent.GetUID() || refs[0].Controller == nil || !*refs[0].Controller ||
			refs[0].BlockOwnerDeletion == nil || !*refs[0].BlockOwnerDeletion || refs[0].Kind != "WebApp" {
			t.Errorf("%s ownerReferences = %+v, want a controller reference to the WebApp", child.GetName(), refs)
		}
	}
	// No pods run here, so the Deployment is not available: Ready is False
	// and says which child and why.
	waitFor(t, webappGVR, ns, "shop", func(p *unstructured.Unstructured) error {
		c := readyCondition(p)
		if c == nil || c["status"] != "False" || c["reason"] != "ChildNotReady" {
			return fmt.Errorf("Ready = %v", c)
		}
		if err := expect(p, int64(1), "status", "observedGeneration"); err != nil {
			return err
		}
		return expect(p, "shop-config", "status", "configName")
	})
	// The Deployment reports its replicas available: Ready turns True.
	deploy = get(t, deployGVR, ns, "shop")
	_ = unstructured.SetNestedField(deploy.Object, int64(2), "status", "availableReplicas")
	_ = unstructured.SetNestedField(deploy.Object, int64(2), "status", "replicas")
	_ = unstructured.SetNestedField(deploy.Object, int64(2), "status", "readyReplicas")
	if _, err := env.dynamic.Resource(deployGVR).Namespace(ns).UpdateStatus(t.Context(), deploy, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, webappGVR, ns, "shop", func(p *unstructured.Unstructured) error {
		if c := readyCondition(p); c == nil || c["status"] != "True" {
			return fmt.Errorf("Ready = %v", c)
		}
		return expect(p, int64(2), "status", "availableReplicas")
	})
	// Creating a new parent's children is the expected outcome, shown by
	// Ready and observedGeneration: by default (--events=notable) it
	// records no event (contract §6).
	events, err := env.kube.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=shop"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		t.Errorf("event %s %s: %s, want none for a new parent", e.Type, e.Reason, e.Message)
	}
}

// Updates, drift and other managers: a parent change propagates, a deleted
// child comes back, a changed managed field is set back, and fields of other
// managers are left alone.
func TestControllerDrift(t *testing.T) {
	installCRD(t, "examples/webapp/crd.yaml")
	ns := newNamespace(t)
	startController(t, nil, "e2e/testdata/webapp-rules.yaml").waitReady(t)
	create(t, webappGVR, webapp(ns, "drift", 1))
	waitFor(t, cmGVR, ns, "drift-config", nil)
	cms := env.kube.CoreV1().ConfigMaps(ns)

	t.Run("parent update propagates", func(t *testing.T) {
		patch := []byte(`{"spec":{"image":"nginx:1.28","replicas":3}}`)
		if _, err := env.dynamic.Resource(webappGVR).Namespace(ns).Patch(t.Context(), "drift", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, cmGVR, ns, "drift-config", func(o *unstructured.Unstructured) error { return expect(o, "nginx:1.28", "data", "image") })
		waitFor(t, deployGVR, ns, "drift", func(o *unstructured.Unstructured) error { return expect(o, int64(3), "spec", "replicas") })
		waitFor(t, webappGVR, ns, "drift", func(o *unstructured.Unstructured) error { return expect(o, int64(2), "status", "observedGeneration") })
	})
	t.Run("deleted child is recreated", func(t *testing.T) {
		old := get(t, cmGVR, ns, "drift-config")
		if err := cms.Delete(t.Context(), "drift-config", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, cmGVR, ns, "drift-config", func(o *unstructured.Unstructured) error {
			if o.GetUID() == old.GetUID() {
				return fmt.Errorf("still the old object")
			}
			return nil
		})
	})
	t.Run("changed managed field is set back; other managers' fields stay", func(t *testing.T) {
		patch := []byte(`{"data":{"image":"evil:latest","extra":"kept"},"metadata":{"labels":{"team":"blue"}}}`)
		if _, err := cms.Patch(t.Context(), "drift-config", types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "someone-else"}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, cmGVR, ns, "drift-config", func(o *unstructured.Unstructured) error {
			if err := expect(o, "nginx:1.28", "data", "image"); err != nil {
				return err
			}
			if err := expect(o, "kept", "data", "extra"); err != nil {
				return err
			}
			return expect(o, "blue", "metadata", "labels", "team")
		})
	})
}

// includeWhen turning false deletes that child and nothing else.
func TestControllerIncludeWhen(t *testing.T) {
	installCRD(t, "examples/webapp/crd.yaml")
	ns := newNamespace(t)
	startController(t, nil, "e2e/testdata/webapp-rules.yaml").waitReady(t)
	create(t, webappGVR, webapp(ns, "scale", 1))
	waitFor(t, deployGVR, ns, "scale", nil)
	// Something of the user's in the same namespace, with kgen's labels'
	// look-alike, must survive the prune.
	bystander, err := env.kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: "bystander", Labels: map[string]string{"kgen.dev/rule": "webapp"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"spec":{"replicas":0}}`)
	if _, err := env.dynamic.Resource(webappGVR).Namespace(ns).Patch(t.Context(), "scale", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, deployGVR, ns, "scale")
	for _, name := range []string{"scale-config", bystander.Name} {
		if get(t, cmGVR, ns, name) == nil {
			t.Errorf("configmap %s was deleted; only the Deployment should be", name)
		}
	}
	if get(t, svcGVR, ns, "scale") == nil {
		t.Error("the Service was deleted; only the Deployment should be")
	}
}

// An object kgen did not create is never taken over: it stays as it is and
// the parent's Ready condition reports the conflict.
func TestControllerConflict(t *testing.T) {
	installCRD(t, "examples/webapp/crd.yaml")
	ns := newNamespace(t)
	theirs, err := env.kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "taken-config"}, Data: map[string]string{"image": "mine"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	startController(t, nil, "e2e/testdata/webapp-rules.yaml").waitReady(t)
	create(t, webappGVR, webapp(ns, "taken", 1))
	waitFor(t, webappGVR, ns, "taken", func(p *unstructured.Unstructured) error {
		c := readyCondition(p)
		if c == nil || c["status"] != "False" || c["reason"] != "Conflict" {
			return fmt.Errorf("Ready = %v, want False/Conflict", c)
		}
		return nil
	})
	after, err := env.kube.CoreV1().ConfigMaps(ns).Get(t.Context(), "taken-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != theirs.ResourceVersion || len(after.Labels) != 0 || len(after.OwnerReferences) != 0 {
		t.Errorf("the user's ConfigMap was modified: %+v", after.ObjectMeta)
	}
	// The other children are still made.
	waitFor(t, deployGVR, ns, "taken", nil)
}

// A parent of a CRD with an irregular plural, with children in its
// namespace, in another namespace and cluster-scoped: deleting the parent
// removes them all (the garbage collector the first, kgen's finalizer the
// others).
func TestControllerParentDeletion(t *testing.T) {
	installCRD(t, "e2e/testdata/octopus-crd.yaml")
	ns := newNamespace(t)
	if _, err := env.kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kgen-e2e-shared"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	startController(t, nil, "e2e/testdata/octopus-rules.yaml").waitReady(t)
	create(t, octopusGVR, map[string]any{
		"apiVersion": "zoo.example.com/v1", "kind": "Octopus",
		"metadata": map[string]any{"name": "otto", "namespace": ns},
		"spec":     map[string]any{"arms": int64(8)},
	})
	waitFor(t, cmGVR, ns, "otto-arms", func(o *unstructured.Unstructured) error { return expect(o, "8", "data", "arms") })
	role := "octopus-" + ns + "-otto"
	waitFor(t, crGVR, "", role, nil)
	waitFor(t, cmGVR, "kgen-e2e-shared", ns+"-otto", nil)
	waitFor(t, octopusGVR, ns, "otto", func(o *unstructured.Unstructured) error {
		for _, f := range o.GetFinalizers() {
			if f == "kgen.dev/cleanup" {
				return nil
			}
		}
		return fmt.Errorf("finalizers = %v", o.GetFinalizers())
	})
	if err := env.dynamic.Resource(octopusGVR).Namespace(ns).Delete(t.Context(), "otto", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitGone(t, crGVR, "", role)
	waitGone(t, cmGVR, "kgen-e2e-shared", ns+"-otto")
	waitGone(t, octopusGVR, ns, "otto")
	t.Logf("kgen deleted the children it owns and released the parent in %s", time.Since(start))
	// The garbage collector notices a CRD installed while it runs only at
	// its next discovery sync, so this can take half a minute.
	waitGone(t, cmGVR, ns, "otto-arms")
	t.Logf("the garbage collector deleted the owned child after %s", time.Since(start))
}

// A rule whose CRD is installed after kgen started waits, then works. While
// it waits, kgen asks the API server nothing: it follows the cluster's CRDs,
// and learns of the new one at once.
func TestControllerCRDInstalledLater(t *testing.T) {
	ns := newNamespace(t)
	user := "kgen-later-" + ns
	r := startControllerWith(t, controllerOptions{User: user, RuleObjects: true}, "e2e/testdata/later-rules.yaml")
	r.waitRule(t, 10*time.Second, r.rules[0], waitingRule)
	// A rule waiting for its CRD does not make kgen unready (contract §6).
	if err := r.ctrl.Ready(); err != nil {
		t.Errorf("Ready() = %v while the only rule waits for its CRD, want nil", err)
	}
	// The harness retries waiting rules every 500 ms: polling discovery
	// would show here. Rule objects are served too, so kgen waits for the
	// Rule CRD as well if it is not installed.
	time.Sleep(2 * time.Second)
	since := time.Now()
	time.Sleep(5 * time.Second)
	for _, e := range auditOf(t, user, since) {
		t.Errorf("kgen sent %s %s while it waited for a CRD, want no request", e.Verb, e.RequestURI)
	}
	start := time.Now()
	installCRD(t, "e2e/testdata/later-crd.yaml")
	r.waitReady(t)
	t.Logf("the rule ran %s after its CRD was installed", time.Since(start).Round(time.Millisecond))
	create(t, laterGVR, map[string]any{
		"apiVersion": "later.example.com/v1", "kind": "Cuttlefish",
		"metadata": map[string]any{"name": "sepia", "namespace": ns},
		"spec":     map[string]any{"colour": "blue"},
	})
	waitFor(t, cmGVR, ns, "sepia", func(o *unstructured.Unstructured) error { return expect(o, "blue", "data", "colour") })
}

// A CRD deleted under a running rule stops the rule's informers cleanly: the
// rule waits again, and starts once the CRD is back.
func TestControllerCRDDeleted(t *testing.T) {
	ns := newNamespace(t)
	gvr := newCRD(t, "gone.example.com", "Nautilus", "nautili")
	rulesFile := writeRules(t, `apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata:
  name: nautilus
spec:
  parent:
    apiVersion: gone.example.com/v1
    kind: Nautilus
  children:
  - id: shell
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: ${parent.metadata.name}-shell
      data:
        chambers: ${string(parent.spec.chambers)}
`)
	r := startController(t, nil, rulesFile)
	r.waitReady(t)
	crd := "nautili.gone.example.com"
	if err := env.crds.ApiextensionsV1().CustomResourceDefinitions().Delete(t.Context(), crd, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r.waitRule(t, 60*time.Second, "nautilus", waitingRule)
	waitGone(t, crdGVR, "", crd)
	newCRD(t, "gone.example.com", "Nautilus", "nautili")
	r.waitReady(t)
	create(t, gvr, map[string]any{"apiVersion": "gone.example.com/v1", "kind": "Nautilus",
		"metadata": map[string]any{"name": "pompilius", "namespace": ns}, "spec": map[string]any{"chambers": int64(30)}})
	waitFor(t, cmGVR, ns, "pompilius-shell", func(o *unstructured.Unstructured) error { return expect(o, "30", "data", "chambers") })
}

// waitingRule accepts a rule that waits for its kinds to be served.
func waitingRule(s controller.RuleState) error {
	if s.Running || s.Waiting == "" {
		return fmt.Errorf("state %+v, want the rule waiting for its kind", s)
	}
	return nil
}
