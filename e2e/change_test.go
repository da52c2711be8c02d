//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"kgen.dev/kgen/pkg/controller"
	"kgen.dev/kgen/pkg/reconcile"
)

// Contract §6, "Change over time": every later change of a parent, a
// template, the rules or the cluster around them lands whole. Each test
// names its scenario.

// Scenario: a Service port changed from 8080 to 9090 leaves one port, 9090.
// (The child was once created with POST, owned by an Update entry, and
// every apply of the new port failed with two unnamed ports.)
func TestChangeServicePort(t *testing.T) {
	installCRD(t, "examples/webapp/crd.yaml")
	ns := newNamespace(t)
	startController(t, nil, webappRulesIn(t, ns)).waitReady(t)
	create(t, webappGVR, webapp(ns, "shop", 1))
	waitFor(t, svcGVR, ns, "shop", func(o *unstructured.Unstructured) error { return servicePorts(o, 8080) })
	patchSpec(t, webappGVR, ns, "shop", map[string]any{"port": 9090})
	waitFor(t, svcGVR, ns, "shop", func(o *unstructured.Unstructured) error { return servicePorts(o, 9090) })
	waitFor(t, deployGVR, ns, "shop", func(o *unstructured.Unstructured) error {
		c := nested(o, "spec", "template", "spec", "containers").([]any)[0].(map[string]any)
		if ports := c["ports"].([]any); len(ports) != 1 || fmt.Sprint(ports[0].(map[string]any)["containerPort"]) != "9090" {
			return fmt.Errorf("container ports = %v", ports)
		}
		return nil
	})
	waitFor(t, webappGVR, ns, "shop", func(p *unstructured.Unstructured) error {
		if c := readyCondition(p); c == nil || c["reason"] != "ChildNotReady" {
			return fmt.Errorf("Ready = %v, want ChildNotReady (no pods run here)", c)
		}
		return expect(p, int64(2), "status", "observedGeneration")
	})
}

func servicePorts(svc *unstructured.Unstructured, want int64) error {
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	if len(ports) != 1 || fmt.Sprint(ports[0].(map[string]any)["port"]) != fmt.Sprint(want) {
		return fmt.Errorf("ports = %v, want exactly one, %d", ports, want)
	}
	return nil
}

func patchSpec(t *testing.T, gvr schema.GroupVersionResource, ns, name string, spec map[string]any) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"spec": spec})
	if _, err := env.dynamic.Resource(gvr).Namespace(ns).Patch(t.Context(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func patchLabels(t *testing.T, gvr schema.GroupVersionResource, ns, name string, labels map[string]any) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if _, err := env.dynamic.Resource(gvr).Namespace(ns).Patch(t.Context(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// gadgetRule is a rule for the test CRD Gadget with one ConfigMap child;
// body is its children list and status, indented as under spec.
func gadgetRule(t *testing.T, name, group, body string) string {
	return writeRules(t, fmt.Sprintf(`apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata:
  name: %s
spec:
  parent:
    apiVersion: %s/v1
    kind: Gadget
%s`, name, group, body))
}

func gadget(group, ns, name string, spec map[string]any) map[string]any {
	return map[string]any{"apiVersion": group + "/v1", "kind": "Gadget",
		"metadata": map[string]any{"name": name, "namespace": ns}, "spec": spec}
}

// Scenario: a data key and a label removed from a template leave the
// child; another manager's key and label survive.
func TestChangeTemplateRemovesFields(t *testing.T) {
	const group = "remove.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	v1 := gadgetRule(t, "gadget", group, `  children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: ${parent.metadata.name}
        labels: {x: "y"}
      data: {a: "1", b: "2"}
`)
	v2 := gadgetRule(t, "gadget", group, `  children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: ${parent.metadata.name}
      data: {a: "1"}
`)
	first := startController(t, nil, v1)
	first.waitReady(t)
	create(t, gvr, gadget(group, ns, "g", map[string]any{}))
	waitFor(t, cmGVR, ns, "g", func(o *unstructured.Unstructured) error { return expect(o, "2", "data", "b") })
	// Another writer adds a key and a label of its own.
	theirs := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "g", "namespace": ns, "labels": map[string]any{"theirs": "1"}}, "data": map[string]any{"theirs": "1"}}}
	if _, err := env.dynamic.Resource(cmGVR).Namespace(ns).Apply(t.Context(), "g", theirs, metav1.ApplyOptions{FieldManager: "another-writer"}); err != nil {
		t.Fatal(err)
	}
	first.stop()

	startController(t, nil, v2).waitReady(t)
	waitFor(t, cmGVR, ns, "g", func(o *unstructured.Unstructured) error {
		data := o.Object["data"].(map[string]any)
		if _, ok := data["b"]; ok || data["a"] != "1" || data["theirs"] != "1" {
			return fmt.Errorf("data = %v, want a and theirs", data)
		}
		if l := o.GetLabels(); l["x"] != "" || l["theirs"] != "1" {
			return fmt.Errorf("labels = %v, want theirs and no x", l)
		}
		return nil
	})
}

// Scenario: `cpu: 1` and `0.5`, which the server stores as "1" and "500m",
// a sidecar another writer added to the containers, and Deployment status
// churn cost kgen no write, also after a restart (audit log).
func TestChangeNoWriteForServerDifferences(t *testing.T) {
	const group = "norm.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	rulesFile := gadgetRule(t, "norm", group, `  children:
  - id: app
    template:
      apiVersion: apps/v1
      kind: Deployment
      metadata:
        name: ${parent.metadata.name}
      spec:
        replicas: 1
        selector: {matchLabels: {app: "${parent.metadata.name}"}}
        template:
          metadata: {labels: {app: "${parent.metadata.name}"}}
          spec:
            containers:
            - name: app
              image: nginx
              resources:
                requests: {cpu: 0.5, memory: 64Mi}
                limits: {cpu: 1}
`)
	const user = "kgen-norm"
	first := startControllerWith(t, controllerOptions{User: user}, rulesFile)
	first.waitReady(t)
	create(t, gvr, gadget(group, ns, "n", map[string]any{}))
	waitFor(t, deployGVR, ns, "n", nil)
	// Another writer (as a mutating webhook or a sidecar injector) adds a
	// container to the keyed list.
	sidecar := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "n", "namespace": ns},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []any{
			map[string]any{"name": "proxy", "image": "envoy"}}}}}}}
	if _, err := env.dynamic.Resource(deployGVR).Namespace(ns).Apply(t.Context(), "n", sidecar, metav1.ApplyOptions{FieldManager: "injector"}); err != nil {
		t.Fatal(err)
	}
	settle(t, user, ns)

	churn := func(round string) {
		start := time.Now()
		for i := range 5 {
			d := get(t, deployGVR, ns, "n")
			_ = unstructured.SetNestedField(d.Object, int64(i%2), "status", "replicas")
			_ = unstructured.SetNestedField(d.Object, int64(i%2), "status", "updatedReplicas")
			if _, err := env.dynamic.Resource(deployGVR).Namespace(ns).UpdateStatus(t.Context(), d, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond) // let each status change be reconciled on its own
		}
		time.Sleep(2 * time.Second)
		if w := writesOf(t, user, ns, start); len(w) > 0 {
			t.Errorf("%s: kgen wrote %d times during status churn: %v", round, len(w), w)
		}
	}
	churn("after converging")
	d := get(t, deployGVR, ns, "n")
	containers := nested(d, "spec", "template", "spec", "containers").([]any)
	if len(containers) != 2 {
		t.Errorf("containers = %v, want kgen's and the sidecar", containers)
	}
	// A restart forgets what the server answered: the schema alone tells.
	first.stop()
	startControllerWith(t, controllerOptions{User: user}, rulesFile).waitReady(t)
	time.Sleep(2 * time.Second)
	churn("after a restart")
}

// settle waits until kgen's user has made no write in ns for two seconds.
func settle(t *testing.T, user, ns string) {
	t.Helper()
	eventually(t, 60*time.Second, func() (bool, error) {
		w := writesOf(t, user, ns, time.Now().Add(-2*time.Second))
		return len(w) == 0, fmt.Errorf("still writing: %v", w)
	}, "kgen to stop writing")
}

// writesOf returns the writes of a user in a namespace since a time, but
// events, as "verb resource/subresource name".
func writesOf(t *testing.T, user, ns string, since time.Time) []string {
	t.Helper()
	var out []string
	for _, e := range auditOf(t, user, since) {
		if e.ObjectRef.Namespace != ns || !isWrite(e.Verb) || e.ObjectRef.Resource == "events" {
			continue
		}
		r := e.ObjectRef.Resource
		if e.ObjectRef.Subresource != "" {
			r += "/" + e.ObjectRef.Subresource
		}
		out = append(out, e.Verb+" "+r+" "+e.ObjectRef.Name)
	}
	return out
}

const renameRule = `  children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: ${parent.spec.cmName}
      data: {owner: "${parent.metadata.name}"}
`

// Scenario: a rename onto a taken name. The foreign object is left alone,
// the old child stays, and the parent reports Conflict; a later rename onto
// a free name creates the new child and only then deletes the old one.
func TestChangeRenameOntoTakenName(t *testing.T) {
	const group = "rename.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	startController(t, nil, gadgetRule(t, "rename", group, renameRule)).waitReady(t)
	if _, err := env.kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "taken", Namespace: ns}, Data: map[string]string{"theirs": "x"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	create(t, gvr, gadget(group, ns, "r", map[string]any{"cmName": "first"}))
	waitFor(t, cmGVR, ns, "first", nil)

	patchSpec(t, gvr, ns, "r", map[string]any{"cmName": "taken"})
	waitFor(t, gvr, ns, "r", func(p *unstructured.Unstructured) error {
		if c := readyCondition(p); c == nil || c["reason"] != "Conflict" || !strings.Contains(fmt.Sprint(c["message"]), "taken") {
			return fmt.Errorf("Ready = %v, want Conflict naming taken", c)
		}
		return expect(p, int64(2), "status", "observedGeneration")
	})
	if get(t, cmGVR, ns, "first") == nil {
		t.Fatal("the old child was deleted although its replacement could not be created")
	}
	if taken := get(t, cmGVR, ns, "taken"); fmt.Sprint(taken.Object["data"]) != "map[theirs:x]" || len(taken.GetLabels()) > 0 {
		t.Errorf("the foreign object was touched: %v", taken.Object)
	}

	patchSpec(t, gvr, ns, "r", map[string]any{"cmName": "second"})
	waitFor(t, cmGVR, ns, "second", nil)
	waitGone(t, cmGVR, ns, "first")
	waitFor(t, gvr, ns, "r", isReady)
}

// newKeyedCRD creates a namespaced CRD Gadget whose status.conditions is a
// list keyed by type (x-kubernetes-list-type: map), and waits until it is
// served.
func newKeyedCRD(t *testing.T, group string) schema.GroupVersionResource {
	t.Helper()
	return serveCRD(t, gadgetCRD(group, true))
}

// serveCRD creates a CRD of Gadgets at v1, deleted when the test ends, and
// waits until it is served.
func serveCRD(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition) schema.GroupVersionResource {
	t.Helper()
	crds := env.crds.ApiextensionsV1().CustomResourceDefinitions()
	if _, err := crds.Create(t.Context(), crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = crds.Delete(context.Background(), crd.Name, metav1.DeleteOptions{}) })
	gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: "v1", Resource: "gadgets"}
	waitServed(t, gvr)
	return gvr
}

// gadgetCRD is the CRD of a namespaced Gadget with a status subresource;
// its status.conditions is keyed by type (x-kubernetes-list-type: map) when
// keyed, and atomic otherwise.
func gadgetCRD(group string, keyed bool) *apiextensionsv1.CustomResourceDefinition {
	preserve := true
	conditions := apiextensionsv1.JSONSchemaProps{
		Type: "array",
		Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{
			Type: "object", Required: []string{"type", "status"},
			Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"type": {Type: "string"}, "status": {Type: "string"}, "reason": {Type: "string"},
				"message": {Type: "string"}, "observedGeneration": {Type: "integer", Format: "int64"},
				"lastTransitionTime": {Type: "string", Format: "date-time"},
			},
		}},
	}
	if keyed {
		conditions.XListType, conditions.XListMapKeys = new("map"), []string{"type"}
	}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "gadgets." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: "Gadget", ListKind: "GadgetList", Plural: "gadgets", Singular: "gadget"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", XPreserveUnknownFields: &preserve},
						"status": {Type: "object", XPreserveUnknownFields: &preserve, Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"observedGeneration": {Type: "integer", Format: "int64"},
							"conditions":         conditions,
						}},
					},
				}},
			}},
		},
	}
}

// kgenStatusWrite returns how kgen last wrote an object's status: "Apply"
// (server-side apply) or "Update" (a patch), from its managed fields.
func kgenStatusWrite(obj *unstructured.Unstructured) string {
	var op metav1.ManagedFieldsOperationType
	var at time.Time
	for _, mf := range obj.GetManagedFields() {
		if mf.Manager == reconcile.FieldManager && mf.Subresource == "status" && mf.Time != nil && !mf.Time.Time.Before(at) {
			op, at = mf.Operation, mf.Time.Time
		}
	}
	return string(op)
}

// Scenario: the parent's CRD changes under a running rule, making its
// conditions keyed by type. kgen reads the new schema and writes the next
// status by server-side apply of its own condition, where it patched the
// atomic list before: a CRD change reaches kgen without a restart.
func TestChangeCRDSchemaFollowed(t *testing.T) {
	const group = "schema.example.com"
	ns := newNamespace(t)
	crd := gadgetCRD(group, false)
	gvr := serveCRD(t, crd)
	startController(t, nil, gadgetRule(t, "schema", group, `  children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: ${parent.metadata.name}
`)).waitReady(t)
	create(t, gvr, gadget(group, ns, "s", map[string]any{}))
	p := waitFor(t, gvr, ns, "s", isReady)
	if op := kgenStatusWrite(p); op != "Update" {
		t.Fatalf("kgen wrote the status of an atomic conditions list by %q, want a patch (Update)", op)
	}

	// The CRD now keys conditions by type.
	updateCRD(t, crd.Name, func(cur *apiextensionsv1.CustomResourceDefinition) {
		cur.Spec = gadgetCRD(group, true).Spec
	})
	// kgen hears of it within the watcher's settle time; the server
	// publishes the new schema a moment after the update.
	time.Sleep(5 * time.Second)
	patchSpec(t, gvr, ns, "s", map[string]any{"touch": "1"})
	waitFor(t, gvr, ns, "s", func(p *unstructured.Unstructured) error {
		if err := expect(p, int64(2), "status", "observedGeneration"); err != nil {
			return err
		}
		if op := kgenStatusWrite(p); op != "Apply" {
			return fmt.Errorf("kgen wrote the status by %q after the CRD keyed its conditions, want Apply", op)
		}
		return nil
	})
}

// Scenario: a parent CRD without the status subresource gains it in place.
// Its parents get a status from then on, with no restart of kgen and no
// change to a parent (kgen reconciles the parents of the changed group).
func TestChangeCRDGainsStatusSubresource(t *testing.T) {
	const group = "gainstatus.example.com"
	ns := newNamespace(t)
	crd := gadgetCRD(group, true)
	crd.Spec.Versions[0].Subresources = nil
	gvr := serveCRD(t, crd)
	startController(t, nil, gadgetRule(t, "gainstatus", group, `  children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: ${parent.metadata.name}
  status:
    child: ${children.config.metadata.name}
`)).waitReady(t)
	create(t, gvr, gadget(group, ns, "s", map[string]any{}))
	waitFor(t, cmGVR, ns, "s", nil)
	if p := get(t, gvr, ns, "s"); p == nil || p.Object["status"] != nil {
		t.Fatalf("the parent has a status while its CRD has no status subresource: %v", p)
	}

	updateCRD(t, crd.Name, func(cur *apiextensionsv1.CustomResourceDefinition) {
		cur.Spec.Versions[0].Subresources = &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}}
	})
	waitFor(t, gvr, ns, "s", func(p *unstructured.Unstructured) error {
		if c := readyCondition(p); c == nil || c["status"] != "True" {
			return fmt.Errorf("Ready = %v", c)
		}
		return expect(p, "s", "status", "child")
	})
}

// applyCondition has another controller apply one condition to a Gadget's
// status.
func applyCondition(t *testing.T, gvr schema.GroupVersionResource, ns, name, manager string, cond map[string]any, force bool) error {
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": gvr.GroupVersion().String(), "kind": "Gadget",
		"metadata": map[string]any{"name": name, "namespace": ns}, "status": map[string]any{"conditions": []any{cond}}}}
	_, err := env.dynamic.Resource(gvr).Namespace(ns).ApplyStatus(t.Context(), name, obj, metav1.ApplyOptions{FieldManager: manager, Force: force})
	return err
}

// Scenario: another manager's condition on a CRD whose conditions list is
// x-kubernetes-list-type: map stays unchanged and is not co-owned by kgen;
// another writer that keeps changing kgen's Ready condition is reported
// (a Warning event) and not fought in a loop.
func TestChangeStatusOwnership(t *testing.T) {
	const group = "status.example.com"
	ns := newNamespace(t)
	gvr := newKeyedCRD(t, group)
	const user = "kgen-status"
	startControllerWith(t, controllerOptions{User: user}, gadgetRule(t, "status", group, `  children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: ${parent.metadata.name}
`)).waitReady(t)
	create(t, gvr, gadget(group, ns, "s", map[string]any{}))
	synced := map[string]any{"type": "Synced", "status": "True", "reason": "TheirOwn", "message": "written by another controller", "lastTransitionTime": "2026-01-01T00:00:00Z"}
	eventually(t, 30*time.Second, func() (bool, error) {
		err := applyCondition(t, gvr, ns, "s", "other-controller", synced, false)
		return err == nil, err
	}, "the other controller's condition")
	// A parent change makes kgen write its status again.
	patchSpec(t, gvr, ns, "s", map[string]any{"touch": "1"})
	p := waitFor(t, gvr, ns, "s", func(p *unstructured.Unstructured) error {
		if c := readyCondition(p); c == nil || c["status"] != "True" {
			return fmt.Errorf("Ready = %v", c)
		}
		return expect(p, int64(2), "status", "observedGeneration")
	})
	conds, _, _ := unstructured.NestedSlice(p.Object, "status", "conditions")
	if len(conds) != 2 || !slices.ContainsFunc(conds, func(c any) bool { return fmt.Sprint(c) == fmt.Sprint(synced) }) {
		t.Errorf("conditions = %v, want the other controller's unchanged beside Ready", conds)
	}
	for _, mf := range p.GetManagedFields() {
		if mf.Manager == reconcile.FieldManager && strings.Contains(string(mf.FieldsV1.Raw), `"type\":\"Synced\"`) {
			t.Errorf("kgen co-owns the other controller's condition: %s", mf.FieldsV1.Raw)
		}
	}

	// Another writer now fights over Ready: kgen backs off and says so.
	start := time.Now()
	fight, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; fight.Err() == nil; i++ {
			theirs := map[string]any{"type": "Ready", "status": "False", "reason": fmt.Sprint("Theirs", i), "message": "the other controller's view", "lastTransitionTime": "2026-01-01T00:00:00Z"}
			_ = applyCondition(t, gvr, ns, "s", "other-controller", theirs, true)
			time.Sleep(300 * time.Millisecond)
		}
	})
	t.Cleanup(func() { stop(); wg.Wait() })
	waitEvent(t, ns, "s", "StatusContended", 60*time.Second)
	stop()
	wg.Wait()
	statusWrites := 0
	for _, w := range writesOf(t, user, ns, start) {
		if strings.HasPrefix(w, "patch gadgets/status") {
			statusWrites++
		}
	}
	t.Logf("kgen wrote the status %d times before backing off", statusWrites)
	if statusWrites > 5 {
		t.Errorf("kgen wrote the status %d times against another writer, want it to back off after a few", statusWrites)
	}
}

// waitEvent waits for an Event with the reason on an object.
func waitEvent(t *testing.T, ns, name, reason string, timeout time.Duration) corev1.Event {
	t.Helper()
	var found corev1.Event
	eventually(t, timeout, func() (bool, error) {
		list, err := env.kube.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=" + reason})
		if err != nil || len(list.Items) == 0 {
			return false, fmt.Errorf("no %s event on %s: %v", reason, name, err)
		}
		found = list.Items[0]
		return true, nil
	}, "a %s event on %s", reason, name)
	return found
}

// Scenario: a parent relabelled out of its rule's scope loses kgen's
// finalizer, so deleting it later is not stuck.
func TestChangeParentRelabelledOutOfScope(t *testing.T) {
	const group = "scope.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	rulesFile := writeRules(t, fmt.Sprintf(`apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata:
  name: scoped
spec:
  parent:
    apiVersion: %s/v1
    kind: Gadget
    selector: {matchLabels: {tier: web}}
  children:
  - id: role
    template:
      apiVersion: rbac.authorization.k8s.io/v1
      kind: ClusterRole
      metadata:
        name: e2e-${parent.metadata.namespace}-${parent.metadata.name}
      rules: []
`, group))
	startController(t, nil, rulesFile).waitReady(t)
	obj := gadget(group, ns, "out", map[string]any{})
	obj["metadata"].(map[string]any)["labels"] = map[string]any{"tier": "web"}
	create(t, gvr, obj)
	role := "e2e-" + ns + "-out"
	t.Cleanup(func() {
		_ = env.kube.RbacV1().ClusterRoles().Delete(context.Background(), role, metav1.DeleteOptions{})
	})
	waitFor(t, crGVR, "", role, nil)
	waitFor(t, gvr, ns, "out", func(p *unstructured.Unstructured) error {
		if !slices.Contains(p.GetFinalizers(), reconcile.Finalizer) {
			return fmt.Errorf("finalizers = %v", p.GetFinalizers())
		}
		return nil
	})
	patchLabels(t, gvr, ns, "out", map[string]any{"tier": "batch"})
	waitFor(t, gvr, ns, "out", func(p *unstructured.Unstructured) error {
		if slices.Contains(p.GetFinalizers(), reconcile.Finalizer) {
			return fmt.Errorf("finalizers = %v, want kgen's gone", p.GetFinalizers())
		}
		return nil
	})
	if err := env.dynamic.Resource(gvr).Namespace(ns).Delete(t.Context(), "out", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, gvr, ns, "out")
	if get(t, crGVR, "", role) == nil {
		t.Error("the child of a parent that left kgen's scope was deleted")
	}
}

// Scenario: a 403 on one child kind. The rule's parents wait for its
// caches instead of being retried in a loop: kgen's requests stay bounded,
// the rule reports Forbidden, and /readyz stays ready; once allowed, the
// parents converge.
func TestChangeForbiddenChildKind(t *testing.T) {
	const group = "forbid.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	const user = "kgen-forbidden"
	// Everything kgen needs but secrets.
	allowed := []rbacv1.PolicyRule{
		{APIGroups: []string{group}, Resources: []string{"gadgets", "gadgets/status", "gadgets/finalizers"}, Verbs: []string{"get", "list", "watch", "patch", "update"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "create", "patch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
	grant(t, user, allowed)
	config, err := env.cp.UserConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	rulesFile := gadgetRule(t, "forbid", group, `  children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: ${parent.metadata.name}
  - id: secret
    template:
      apiVersion: v1
      kind: Secret
      metadata:
        name: ${parent.metadata.name}
      stringData: {token: "t"}
`)
	for i := range 5 {
		create(t, gvr, gadget(group, ns, fmt.Sprintf("f%d", i), map[string]any{}))
	}
	start := time.Now()
	r := startControllerWith(t, controllerOptions{Config: config}, rulesFile)
	r.waitRule(t, 30*time.Second, "forbid", func(s controller.RuleState) error {
		if !s.Forbidden {
			return fmt.Errorf("state %+v, want Forbidden", s)
		}
		return nil
	})
	time.Sleep(15 * time.Second)
	requests := auditOf(t, user, start)
	t.Logf("%d requests in %s with secrets forbidden", len(requests), time.Since(start).Round(time.Second))
	if len(requests) > 60 {
		t.Errorf("kgen made %d requests in %s while a child kind is forbidden: a busy loop; by request: %s",
			len(requests), time.Since(start).Round(time.Second), requestCounts(requests))
	}
	for _, e := range requests {
		if e.Verb == "create" || e.Verb == "patch" {
			// kgen's own record may be tidied meanwhile: a parent kind
			// of a rule an earlier test removed leaves it once swept.
			record := e.ObjectRef.Resource == "configmaps" && e.ObjectRef.Name == controller.DefaultRecordName
			if e.ObjectRef.Resource != "events" && !record {
				t.Errorf("kgen wrote %s %s/%s before its caches synced", e.Verb, e.ObjectRef.Resource, e.ObjectRef.Name)
			}
		}
	}
	if err := r.ctrl.Ready(); err != nil {
		t.Errorf("Ready() = %v with one rule forbidden, want nil: a failing rule must not make every replica unready", err)
	}
	grant(t, user, append(allowed, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch", "create", "patch", "delete"}}))
	for i := range 5 {
		waitFor(t, secretGVR, ns, fmt.Sprintf("f%d", i), nil)
	}
}

var secretGVR = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

// requestCounts tells how many of the requests had each verb, resource and
// response code, most first, so a failure says which request looped.
func requestCounts(requests []auditEvent) string {
	counts := map[string]int{}
	for _, e := range requests {
		what := e.ObjectRef.Resource
		if what == "" {
			what = e.RequestURI
			if i := strings.IndexByte(what, '?'); i >= 0 {
				what = what[:i]
			}
		}
		counts[fmt.Sprintf("%s %s %d", e.Verb, what, e.ResponseStatus.Code)]++
	}
	keys := slices.Collect(maps.Keys(counts))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(counts[b]-counts[a], strings.Compare(a, b)) })
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%d× %s; ", counts[k], k)
	}
	return b.String()
}

// grant gives a user exactly these cluster-wide rules (replacing what an
// earlier grant gave), and waits until the authorizer has them.
func grant(t *testing.T, user string, rules []rbacv1.PolicyRule) {
	t.Helper()
	name := "e2e-" + user
	ctx := t.Context()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
	if existing, err := env.kube.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{}); err == nil {
		existing.Rules = rules
		if _, err := env.kube.RbacV1().ClusterRoles().Update(ctx, existing, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	} else if _, err := env.kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}}}
	if _, err := env.kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = env.kube.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	last := rules[len(rules)-1]
	waitCan(t, user, true, authorizationAttributes(last))
}

// Scenario: a rule renamed. Its parents keep their children (same UIDs,
// now labelled with the new rule) and never get stuck in Conflict.
func TestChangeRuleRenamed(t *testing.T) {
	const group = "renamed.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	children := `  children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: ${parent.metadata.name}
      data: {k: v}
`
	first := startController(t, nil, gadgetRule(t, "alpha", group, children))
	first.waitReady(t)
	create(t, gvr, gadget(group, ns, "x", map[string]any{}))
	before := waitFor(t, cmGVR, ns, "x", nil)
	first.stop()

	startController(t, nil, gadgetRule(t, "beta", group, children)).waitReady(t)
	waitFor(t, cmGVR, ns, "x", func(o *unstructured.Unstructured) error {
		if o.GetLabels()[reconcile.LabelRule] != "beta" {
			return fmt.Errorf("rule label = %s, want beta", o.GetLabels()[reconcile.LabelRule])
		}
		if o.GetUID() != before.GetUID() {
			return fmt.Errorf("the child was recreated: uid %s, was %s", o.GetUID(), before.GetUID())
		}
		return nil
	})
	waitFor(t, gvr, ns, "x", isReady)
}

// Scenario: a restored parent. Restored from a backup, a parent has a new
// UID and its children carry the old one, whose owner no longer exists:
// the parent adopts them (same objects) instead of reporting Conflict.
func TestChangeRestoredParent(t *testing.T) {
	const group = "restore.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	startController(t, nil, gadgetRule(t, "restore", group, renameRule)).waitReady(t)
	create(t, gvr, gadget(group, ns, "b", map[string]any{"cmName": "b-config"}))
	before := waitFor(t, cmGVR, ns, "b-config", nil)
	// Lose the parent but keep the child, as a backup restore does: the
	// garbage collector orphans the child (drops its ownerReference).
	orphan := metav1.DeletePropagationOrphan
	if err := env.dynamic.Resource(gvr).Namespace(ns).Delete(t.Context(), "b", metav1.DeleteOptions{PropagationPolicy: &orphan}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, gvr, ns, "b")
	waitFor(t, cmGVR, ns, "b-config", func(o *unstructured.Unstructured) error {
		if len(o.GetOwnerReferences()) > 0 {
			return fmt.Errorf("ownerReferences = %v", o.GetOwnerReferences())
		}
		return nil
	})
	restored := create(t, gvr, gadget(group, ns, "b", map[string]any{"cmName": "b-config"}))
	waitFor(t, cmGVR, ns, "b-config", func(o *unstructured.Unstructured) error {
		if o.GetUID() != before.GetUID() {
			return fmt.Errorf("the child was recreated")
		}
		if o.GetLabels()[reconcile.LabelParentUID] != string(restored.GetUID()) {
			return fmt.Errorf("parent-uid = %s, want the restored parent's", o.GetLabels()[reconcile.LabelParentUID])
		}
		if refs := o.GetOwnerReferences(); len(refs) != 1 || refs[0].UID != restored.GetUID() {
			return fmt.Errorf("ownerReferences = %v", refs)
		}
		return nil
	})
	waitFor(t, gvr, ns, "b", isReady)
	waitEvent(t, ns, "b", "Adopted", 10*time.Second)
}

// Scenario: a self-triggering status field. kgen skips the event of its
// own write of a status when the write's answer came first, so a status
// that reads itself is usually written a few times only; either way, and
// when another writer answers each of kgen's writes with one of its own (a
// controller that mirrors the status), the loop is bounded: kgen writes a
// dozen times, then backs off and reports it.
func TestChangeSelfTriggeringStatus(t *testing.T) {
	// The first write, and 11 rewrites in a minute before kgen backs off;
	// one more for a write in flight.
	const loopBound = 13
	const group = "loop.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	const user = "kgen-loop"
	r := startControllerWith(t, controllerOptions{User: user}, gadgetRule(t, "loop", group, `  children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: ${parent.metadata.name}
  status:
    count: ${parent.status.?count.orValue(0) + 1}
`))
	r.waitReady(t)
	start := time.Now()
	statusWrites := func() int {
		n := 0
		for _, w := range writesOf(t, user, ns, start) {
			if strings.HasPrefix(w, "patch gadgets/status") {
				n++
			}
		}
		return n
	}
	create(t, gvr, gadget(group, ns, "l", map[string]any{}))
	waitFor(t, gvr, ns, "l", isReady)
	// kgen does not react to the event of its own write, also when the
	// event comes before the write's answer (it holds the events of a
	// parent being reconciled): with no other writer the status is written
	// once. (count is left out of that write: the parent had no status to
	// read yet.)
	time.Sleep(8 * time.Second)
	if n := statusWrites(); n > 1 {
		t.Errorf("kgen wrote the status %d times with no other writer, want 1: %v", n, writesOf(t, user, ns, start))
	}
	t.Logf("with no other writer, %d status writes", statusWrites())

	// Another writer mirrors every count kgen writes.
	ctx, stopMirror := context.WithCancel(t.Context())
	defer stopMirror()
	go func() {
		for ctx.Err() == nil {
			p, err := env.dynamic.Resource(gvr).Namespace(ns).Get(ctx, "l", metav1.GetOptions{})
			if err != nil {
				return
			}
			count, _, _ := unstructured.NestedInt64(p.Object, "status", "count")
			seen, mirrored, _ := unstructured.NestedInt64(p.Object, "status", "seen")
			if !mirrored || count != seen {
				patch := fmt.Sprintf(`{"status":{"seen":%d}}`, count)
				if _, err := env.dynamic.Resource(gvr).Namespace(ns).Patch(ctx, "l", types.MergePatchType, []byte(patch),
					metav1.PatchOptions{FieldManager: "mirror"}, "status"); err != nil && ctx.Err() == nil {
					t.Logf("mirror: %v", err)
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	waitEvent(t, ns, "l", "StatusLoop", 60*time.Second)
	time.Sleep(3 * time.Second)
	writes := statusWrites()
	t.Logf("%d status writes before kgen backed off", writes)
	if writes > loopBound {
		t.Errorf("kgen wrote a self-triggering status %d times, want at most %d and a backoff", writes, loopBound)
	}
	// The backoff counts in the metrics too (contract §6, "reported").
	backoffs := counter(t, r, "kgen_status_backoffs_total", map[string]string{"rule": "loop", "reason": reconcile.ReasonStatusLoop})
	t.Logf("kgen_status_backoffs_total{rule=loop,reason=StatusLoop} = %v", backoffs)
	if backoffs < 1 {
		t.Errorf("kgen_status_backoffs_total{rule=loop,reason=StatusLoop} = %v after a StatusLoop event, want at least 1", backoffs)
	}
}

// Scenario: the event policy. By default kgen records a drift repair
// (naming who changed the child) and a prune, not the creation of a new
// parent's children; --events=all records those too.
func TestChangeEventPolicy(t *testing.T) {
	const group = "events.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	rulesFile := gadgetRule(t, "events", group, `  children:
  - id: config
    includeWhen: ["${parent.spec.?keep.orValue(true)}"]
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: ${parent.metadata.name}
      data: {k: v}
  - id: extra
    includeWhen: ["${parent.metadata.?labels.?extra.orValue('') == 'yes'}"]
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: ${parent.metadata.name}-extra
`)
	r := startController(t, nil, rulesFile)
	r.waitReady(t)
	create(t, gvr, gadget(group, ns, "e", map[string]any{}))
	waitFor(t, cmGVR, ns, "e", nil)
	// Someone edits kgen's field: kgen sets it back and says who changed it.
	if _, err := env.kube.CoreV1().ConfigMaps(ns).Patch(t.Context(), "e", types.MergePatchType, []byte(`{"data":{"k":"edited"}}`),
		metav1.PatchOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, cmGVR, ns, "e", func(o *unstructured.Unstructured) error { return expect(o, "v", "data", "k") })
	repaired := waitEvent(t, ns, "e", "Repaired", 10*time.Second)
	if !strings.Contains(repaired.Message, "changed by kubectl-edit") {
		t.Errorf("Repaired event = %q, want it to name kubectl-edit", repaired.Message)
	}
	// Someone deletes the child: kgen creates it again and says so.
	if err := env.kube.CoreV1().ConfigMaps(ns).Delete(t.Context(), "e", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() (bool, error) {
		list, err := env.kube.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=e,reason=Repaired"})
		if err != nil {
			return false, err
		}
		for _, e := range list.Items {
			if strings.Contains(e.Message, "it was deleted") {
				return true, nil
			}
		}
		return false, fmt.Errorf("no Repaired event for the deleted child")
	}, "a Repaired event for the deleted child")
	// A child that a label turns on was never deleted: no Repaired event
	// for its creation, though the parent's generation is unchanged.
	if _, err := env.dynamic.Resource(gvr).Namespace(ns).Patch(t.Context(), "e", types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"extra":"yes"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, cmGVR, ns, "e-extra", nil)
	// kgen's events reach the API server in order: once a later one shows,
	// an event for e-extra's creation would show too.
	repairedEvents := func() []corev1.Event {
		list, err := env.kube.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=e,reason=Repaired"})
		if err != nil {
			t.Fatal(err)
		}
		return list.Items
	}
	if err := env.kube.CoreV1().ConfigMaps(ns).Delete(t.Context(), "e", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() (bool, error) {
		for _, e := range repairedEvents() {
			if strings.Contains(e.Message, "/e (child config): it was deleted") && e.Count >= 2 {
				return true, nil
			}
		}
		return false, fmt.Errorf("the second deletion of e is not reported yet")
	}, "a second Repaired event for e")
	for _, e := range repairedEvents() {
		if strings.Contains(e.Message, "e-extra") {
			t.Errorf("Repaired event %q for a child that was only created", e.Message)
		}
	}
	// Deleted, e-extra is repaired.
	if err := env.kube.CoreV1().ConfigMaps(ns).Delete(t.Context(), "e-extra", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() (bool, error) {
		for _, e := range repairedEvents() {
			if strings.Contains(e.Message, "e-extra (child extra): it was deleted") {
				return true, nil
			}
		}
		return false, fmt.Errorf("no Repaired event for the deleted child e-extra")
	}, "a Repaired event for e-extra")
	patchSpec(t, gvr, ns, "e", map[string]any{"keep": false})
	waitGone(t, cmGVR, ns, "e")
	waitEvent(t, ns, "e", "Deleted", 10*time.Second)
	if list, _ := env.kube.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "reason=Created"}); len(list.Items) > 0 {
		t.Errorf("by default kgen recorded Created: %v", list.Items[0].Message)
	}
	r.stop()

	startControllerWith(t, controllerOptions{Events: reconcile.EventsAll}, rulesFile).waitReady(t)
	create(t, gvr, gadget(group, ns, "all", map[string]any{}))
	waitEvent(t, ns, "all", "Created", 30*time.Second)
}

// Scenario: a child an older kgen created with POST (its fields owned by
// an Update entry) loses a field the template no longer sets, and is not
// recreated.
func TestChangeUpgradeFromPOSTCreatedChild(t *testing.T) {
	const group = "legacy.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	parent := create(t, gvr, gadget(group, ns, "old", map[string]any{}))
	// The child as kgen 0.1.0 created it.
	old := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "old", Namespace: ns,
		Labels: map[string]string{reconcile.LabelManagedBy: reconcile.ManagedBy, reconcile.LabelRule: "legacy",
			reconcile.LabelParentUID: string(parent.GetUID()), reconcile.LabelChild: "config"},
		Annotations: map[string]string{reconcile.AnnotationParent: ns + "/old"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: group + "/v1", Kind: "Gadget", Name: "old", UID: parent.GetUID(),
			Controller: new(true), BlockOwnerDeletion: new(true)}}},
		Data: map[string]string{"k": "v", "dropped": "x"}}
	created, err := env.kube.CoreV1().ConfigMaps(ns).Create(t.Context(), old, metav1.CreateOptions{FieldManager: "kgen"})
	if err != nil {
		t.Fatal(err)
	}
	startController(t, nil, gadgetRule(t, "legacy", group, `  children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: ${parent.metadata.name}
      data: {k: v}
`)).waitReady(t)
	waitFor(t, cmGVR, ns, "old", func(o *unstructured.Unstructured) error {
		if _, ok := o.Object["data"].(map[string]any)["dropped"]; ok {
			return fmt.Errorf("data = %v, want dropped gone", o.Object["data"])
		}
		if o.GetUID() != created.GetUID() {
			return fmt.Errorf("recreated")
		}
		for _, mf := range o.GetManagedFields() {
			if mf.Manager == "kgen" && mf.Operation == metav1.ManagedFieldsOperationUpdate {
				return fmt.Errorf("kgen's Update entry is still there")
			}
		}
		return nil
	})
}

// authorizationAttributes is the first request a policy rule allows.
func authorizationAttributes(r rbacv1.PolicyRule) authorizationv1.ResourceAttributes {
	return authorizationv1.ResourceAttributes{Verb: r.Verbs[0], Group: r.APIGroups[0], Resource: r.Resources[0]}
}

// Scenario (contract §11): a label-spoofed foreign object survives a prune.
// Someone who may patch an object but not delete it gives it kgen's labels
// for a parent; when kgen prunes that child it deletes only its own object.
func TestChangeLabelSpoofedObjectSurvivesPrune(t *testing.T) {
	const group = "spoof.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	startController(t, nil, gadgetRule(t, "spoof", group, `  children:
  - id: config
    includeWhen: ["${parent.spec.?keep.orValue(true)}"]
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: ${parent.metadata.name}
`)).waitReady(t)
	parent := create(t, gvr, gadget(group, ns, "p", map[string]any{}))
	waitFor(t, cmGVR, ns, "p", nil)
	spoofed := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "precious", Namespace: ns,
		Labels: map[string]string{reconcile.LabelManagedBy: reconcile.ManagedBy, reconcile.LabelRule: "spoof",
			reconcile.LabelParentUID: string(parent.GetUID()), reconcile.LabelChild: "config"},
		Annotations: map[string]string{reconcile.AnnotationParent: ns + "/p"}},
		Data: map[string]string{"keep": "me"}}
	if _, err := env.kube.CoreV1().ConfigMaps(ns).Create(t.Context(), spoofed, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	patchSpec(t, gvr, ns, "p", map[string]any{"keep": false})
	waitGone(t, cmGVR, ns, "p")
	time.Sleep(2 * time.Second)
	if get(t, cmGVR, ns, "precious") == nil {
		t.Fatal("kgen deleted an object that only carried its labels")
	}
}

// Scenario (contract §6, §7): a rule's namespaces narrowed while kgen runs.
// A parent in a namespace the rule no longer covers loses kgen's finalizer;
// its children stay.
func TestChangeNamespacesNarrowed(t *testing.T) {
	const group = "narrow.example.com"
	a, b := newNamespace(t), newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	doc := func(namespaces string) string {
		return fmt.Sprintf(`apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata:
  name: narrowed
spec:
  parent:
    apiVersion: %s/v1
    kind: Gadget
    namespaces: [%s]
  children:
  - id: role
    template:
      apiVersion: rbac.authorization.k8s.io/v1
      kind: ClusterRole
      metadata:
        name: e2e-${parent.metadata.namespace}-${parent.metadata.name}
      rules: []
`, group, namespaces)
	}
	file := writeRules(t, doc(a+", "+b))
	startController(t, nil, file).waitReady(t)
	for _, ns := range []string{a, b} {
		create(t, gvr, gadget(group, ns, "g", map[string]any{}))
		role := "e2e-" + ns + "-g"
		t.Cleanup(func() {
			_ = env.kube.RbacV1().ClusterRoles().Delete(context.Background(), role, metav1.DeleteOptions{})
		})
		waitFor(t, crGVR, "", role, nil)
		waitFor(t, gvr, ns, "g", func(p *unstructured.Unstructured) error {
			if !slices.Contains(p.GetFinalizers(), reconcile.Finalizer) {
				return fmt.Errorf("finalizers = %v", p.GetFinalizers())
			}
			return nil
		})
	}
	if err := os.WriteFile(file, []byte(doc(a)), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, gvr, b, "g", func(p *unstructured.Unstructured) error {
		if slices.Contains(p.GetFinalizers(), reconcile.Finalizer) {
			return fmt.Errorf("finalizers = %v, want kgen's gone", p.GetFinalizers())
		}
		return nil
	})
	if get(t, crGVR, "", "e2e-"+b+"-g") == nil {
		t.Error("the child of a parent the rule no longer covers was deleted")
	}
	if p := get(t, gvr, a, "g"); !slices.Contains(p.GetFinalizers(), reconcile.Finalizer) {
		t.Errorf("the parent still covered lost its finalizer: %v", p.GetFinalizers())
	}
}

// Scenario (contract §11): a parent cannot make kgen bind cluster-admin.
// A RoleBinding whose roleRef a parent chooses may bind only the roles the
// rule lists in allowBindRoles: anything else is refused before any write
// and reported on the parent, even though kgen here runs with every right.
func TestChangeBindOnlyAllowedRoles(t *testing.T) {
	const group = "bind.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	startController(t, nil, writeRules(t, fmt.Sprintf(`apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata:
  name: binder
spec:
  parent: {apiVersion: %s/v1, kind: Gadget}
  allowBindRoles: [view]
  children:
  - id: binding
    template:
      apiVersion: rbac.authorization.k8s.io/v1
      kind: RoleBinding
      metadata:
        name: ${parent.metadata.name}
      roleRef:
        apiGroup: rbac.authorization.k8s.io
        kind: ClusterRole
        name: ${parent.spec.role}
      subjects:
      - kind: User
        apiGroup: rbac.authorization.k8s.io
        name: ${parent.spec.user}
`, group))).waitReady(t)
	create(t, gvr, gadget(group, ns, "grab", map[string]any{"role": "cluster-admin", "user": "mallory"}))
	waitFor(t, gvr, ns, "grab", func(p *unstructured.Unstructured) error {
		c := readyCondition(p)
		if c == nil || c["reason"] != "InvalidSpec" || !strings.Contains(fmt.Sprint(c["message"]), "allowBindRoles") {
			return fmt.Errorf("Ready = %v, want InvalidSpec naming allowBindRoles", c)
		}
		return nil
	})
	if rb, err := env.kube.RbacV1().RoleBindings(ns).Get(t.Context(), "grab", metav1.GetOptions{}); err == nil {
		t.Fatalf("kgen bound %s for a parent", rb.RoleRef.Name)
	}
	create(t, gvr, gadget(group, ns, "fine", map[string]any{"role": "view", "user": "alice"}))
	waitFor(t, rbGVR, ns, "fine", nil)
}

var rbGVR = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}

// Scenario: parents left their rule while kgen was not running: one was
// relabelled out of the selector, and the rule of another was replaced by
// a rule of the same kind that does not select it. No watch event will
// tell the next kgen; it finds them when the rule starts and releases
// them, so deleting them is not stuck on kgen's finalizer (which guards
// their cluster-scoped children).
func TestChangeParentsLeftWhileStopped(t *testing.T) {
	const group = "leftaway.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	rule := func(name, tier string) string {
		return writeRules(t, fmt.Sprintf(`apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata:
  name: %s
spec:
  parent:
    apiVersion: %s/v1
    kind: Gadget
    selector: {matchLabels: {tier: %s}}
  children:
  - id: role
    template:
      apiVersion: rbac.authorization.k8s.io/v1
      kind: ClusterRole
      metadata:
        name: e2e-${parent.metadata.namespace}-${parent.metadata.name}
      rules: []
`, name, group, tier))
	}
	// Never leave the namespace stuck if the test fails.
	t.Cleanup(func() {
		for _, name := range []string{"relabelled", "ruleless"} {
			_, _ = env.dynamic.Resource(gvr).Namespace(ns).Patch(context.Background(), name, types.MergePatchType,
				[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		}
	})
	web, batch := rule("left-web", "web"), rule("left-batch", "batch")
	first := startController(t, nil, web, batch)
	first.waitReady(t)
	for name, tier := range map[string]string{"relabelled": "web", "ruleless": "batch"} {
		obj := gadget(group, ns, name, map[string]any{})
		obj["metadata"].(map[string]any)["labels"] = map[string]any{"tier": tier}
		create(t, gvr, obj)
		role := "e2e-" + ns + "-" + name
		t.Cleanup(func() {
			_ = env.kube.RbacV1().ClusterRoles().Delete(context.Background(), role, metav1.DeleteOptions{})
		})
		waitFor(t, gvr, ns, name, func(p *unstructured.Unstructured) error {
			if !slices.Contains(p.GetFinalizers(), reconcile.Finalizer) {
				return fmt.Errorf("finalizers = %v", p.GetFinalizers())
			}
			return nil
		})
		waitFor(t, crGVR, "", role, nil)
	}
	first.stop()

	// While kgen is away, one parent is relabelled; and kgen comes back
	// without the rule of the other.
	patchLabels(t, gvr, ns, "relabelled", map[string]any{"tier": "none"})
	second := startController(t, nil, web)
	second.waitReady(t)
	for _, name := range []string{"relabelled", "ruleless"} {
		waitFor(t, gvr, ns, name, func(p *unstructured.Unstructured) error {
			if slices.Contains(p.GetFinalizers(), reconcile.Finalizer) {
				return fmt.Errorf("finalizers = %v, want kgen's released", p.GetFinalizers())
			}
			return nil
		})
		// Its child stays: kgen stopped managing it, it did not delete it.
		waitFor(t, crGVR, "", "e2e-"+ns+"-"+name, nil)
		if err := env.dynamic.Resource(gvr).Namespace(ns).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitGone(t, gvr, ns, name)
	}
}

// hasFinalizer checks that a parent carries kgen's finalizer, or not.
func hasFinalizer(want bool) func(*unstructured.Unstructured) error {
	return func(p *unstructured.Unstructured) error {
		if slices.Contains(p.GetFinalizers(), reconcile.Finalizer) != want {
			return fmt.Errorf("finalizers = %v, want kgen's: %v", p.GetFinalizers(), want)
		}
		return nil
	}
}

// clusterRoleRule is a rule for Gadgets whose child is a ClusterRole: a
// cluster-scoped child of a namespaced parent, which kgen's finalizer
// guards.
func clusterRoleRule(t *testing.T, name, group, namespaces string) string {
	return gadgetRule(t, name, group, fmt.Sprintf(`    namespaces: [%s]
  children:
  - id: role
    template:
      apiVersion: rbac.authorization.k8s.io/v1
      kind: ClusterRole
      metadata:
        name: e2e-${parent.metadata.namespace}-${parent.metadata.name}
      rules: []
`, namespaces))
}

// Scenario (contract §6, issue #10): every rule of a parent kind removed
// while kgen was stopped. No rule of the restarted kgen names the kind, so
// none lists it; kgen's record of where its rules watched their parents
// does. A parent that carries kgen's finalizer loses it (its child stays),
// and one deleted while kgen was away goes, its child that only the
// finalizer guarded deleted first. The kind then leaves the record.
func TestChangeParentsKindLeftWhileStopped(t *testing.T) {
	const group = "kindleft.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	widgets := newCRD(t, group, "Widget", "widgets")
	t.Cleanup(func() {
		for _, name := range []string{"alive", "doomed"} {
			_, _ = env.dynamic.Resource(gvr).Namespace(ns).Patch(context.Background(), name, types.MergePatchType,
				[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			_ = env.kube.RbacV1().ClusterRoles().Delete(context.Background(), "e2e-"+ns+"-"+name, metav1.DeleteOptions{})
		}
	})
	first := startController(t, nil, clusterRoleRule(t, "kindleft", group, ns))
	first.waitReady(t)
	for _, name := range []string{"alive", "doomed"} {
		create(t, gvr, gadget(group, ns, name, map[string]any{}))
		waitFor(t, gvr, ns, name, hasFinalizer(true))
		waitFor(t, crGVR, "", "e2e-"+ns+"-"+name, nil)
	}
	waitRecord(t, metav1.NamespaceDefault, "kindleft"+controller.ParentsKeySuffix, group+"/v1 Gadget "+ns+"\n")
	first.stop()

	// While kgen is away, one parent is deleted (kgen's finalizer holds
	// it); kgen comes back with a rule of another kind only.
	if err := env.dynamic.Resource(gvr).Namespace(ns).Delete(t.Context(), "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	second := startController(t, nil, writeRules(t, fmt.Sprintf(`apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata:
  name: kindleft-widgets
spec:
  parent: {apiVersion: %s/v1, kind: Widget, namespaces: [%s]}
  children:
  - id: config
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: "${parent.metadata.name}"}}
`, group, ns)))
	second.waitReady(t)
	create(t, widgets, map[string]any{"apiVersion": group + "/v1", "kind": "Widget", "metadata": map[string]any{"name": "w", "namespace": ns}})
	waitFor(t, cmGVR, ns, "w", nil)

	waitGone(t, gvr, ns, "doomed")
	waitGone(t, crGVR, "", "e2e-"+ns+"-doomed")
	waitFor(t, gvr, ns, "alive", hasFinalizer(false))
	// Its child stays: kgen stopped managing it, it did not delete it.
	if get(t, crGVR, "", "e2e-"+ns+"-alive") == nil {
		t.Error("the child of a released parent that is not being deleted was deleted")
	}
	if err := env.dynamic.Resource(gvr).Namespace(ns).Delete(t.Context(), "alive", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, gvr, ns, "alive")
	waitRecord(t, metav1.NamespaceDefault, "kindleft"+controller.ParentsKeySuffix, "")
}

// Scenario (contract §6, issue #10): a namespace dropped from a rule's
// namespaces while kgen was stopped. The restarted rule neither watches
// nor sweeps that namespace; kgen's record of where the rule watched its
// parents leads it there once, and the parent there is released (its
// child stays), while the parent still covered keeps kgen's finalizer.
func TestChangeParentsNamespaceLeftWhileStopped(t *testing.T) {
	const group = "nsleft.example.com"
	a, b := newNamespace(t), newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	t.Cleanup(func() {
		for _, ns := range []string{a, b} {
			_, _ = env.dynamic.Resource(gvr).Namespace(ns).Patch(context.Background(), "g", types.MergePatchType,
				[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			_ = env.kube.RbacV1().ClusterRoles().Delete(context.Background(), "e2e-"+ns+"-g", metav1.DeleteOptions{})
		}
	})
	first := startController(t, nil, clusterRoleRule(t, "nsleft", group, a+", "+b))
	first.waitReady(t)
	for _, ns := range []string{a, b} {
		create(t, gvr, gadget(group, ns, "g", map[string]any{}))
		waitFor(t, gvr, ns, "g", hasFinalizer(true))
		waitFor(t, crGVR, "", "e2e-"+ns+"-g", nil)
	}
	first.stop()

	second := startController(t, nil, clusterRoleRule(t, "nsleft", group, a))
	second.waitReady(t)
	waitFor(t, gvr, b, "g", hasFinalizer(false))
	if get(t, crGVR, "", "e2e-"+b+"-g") == nil {
		t.Error("the child of a parent the rule no longer covers was deleted")
	}
	waitRecord(t, metav1.NamespaceDefault, "nsleft"+controller.ParentsKeySuffix, group+"/v1 Gadget "+a+"\n")
	if p := get(t, gvr, a, "g"); !slices.Contains(p.GetFinalizers(), reconcile.Finalizer) {
		t.Errorf("the parent still covered lost its finalizer: %v", p.GetFinalizers())
	}
	if err := env.dynamic.Resource(gvr).Namespace(b).Delete(t.Context(), "g", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, gvr, b, "g")
}

// Scenario (contract §7, audit s5 #3): a parent deleted while kgen was
// stopped, whose rule was removed meanwhile, while another rule of its
// kind (another selector) stays. The restarted kgen finds it through that
// rule, which watches neither the parent nor the kind and namespace of its
// cross-namespace child: kgen's record of where the removed rule made
// children leads it there, so the child only kgen's finalizer guarded is
// deleted before the finalizer goes, and then the parent is gone.
func TestChangeDeletedParentLeftRuleWhileStopped(t *testing.T) {
	const group = "deletedleft.example.com"
	ns, remote := newNamespace(t), newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	t.Cleanup(func() {
		_, _ = env.dynamic.Resource(gvr).Namespace(ns).Patch(context.Background(), "doomed", types.MergePatchType,
			[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	ruleA := gadgetRule(t, "deletedleft-a", group, fmt.Sprintf(`    namespaces: [%s]
    selector: {matchLabels: {tier: a}}
  allowCrossNamespace: [%s]
  children:
  - id: remote
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-remote", namespace: %s}
      data: {x: "1"}
`, ns, remote, remote))
	ruleB := gadgetRule(t, "deletedleft-b", group, fmt.Sprintf(`    namespaces: [%s]
    selector: {matchLabels: {tier: b}}
  children:
  - id: config
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: "${parent.metadata.name}"}}
`, ns))
	first := startController(t, nil, ruleA, ruleB)
	first.waitReady(t)
	obj := gadget(group, ns, "doomed", map[string]any{})
	obj["metadata"].(map[string]any)["labels"] = map[string]any{"tier": "a"}
	create(t, gvr, obj)
	waitFor(t, gvr, ns, "doomed", hasFinalizer(true))
	waitFor(t, cmGVR, remote, "doomed-remote", nil)
	waitRecord(t, metav1.NamespaceDefault, "deletedleft-a", "v1 ConfigMap "+remote+"\n")
	first.stop()

	// While kgen is away the parent is deleted (kgen's finalizer holds
	// it), and its rule is removed.
	if err := env.dynamic.Resource(gvr).Namespace(ns).Delete(t.Context(), "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if p := get(t, gvr, ns, "doomed"); p == nil || p.GetDeletionTimestamp() == nil {
		t.Fatalf("the parent is not Terminating on kgen's finalizer: %v", p)
	}
	second := startController(t, nil, ruleB)
	second.waitReady(t)
	waitGone(t, gvr, ns, "doomed")
	if get(t, cmGVR, remote, "doomed-remote") != nil {
		t.Error("the parent went, and the child only kgen's finalizer guarded stays")
	}
}

// Scenario (contract §6, audit s5 #2): a parent deleted while its rule
// waits, because the CRD of one of its child kinds was deleted. No parent
// is ever stuck Terminating because of kgen: the waiting rule still
// finalizes it, deleting its cross-namespace child (a kind that is served)
// and skipping the kind that is not served (nothing of it can exist), then
// releasing the finalizer.
func TestChangeParentDeletedWhileRuleWaits(t *testing.T) {
	const group, childGroup = "waitdel.example.com", "waitdelchild.example.com"
	ns, remote := newNamespace(t), newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	things := serveCRD(t, gadgetCRD(childGroup, false))
	t.Cleanup(func() {
		_, _ = env.dynamic.Resource(gvr).Namespace(ns).Patch(context.Background(), "p", types.MergePatchType,
			[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	kgen := startController(t, nil, gadgetRule(t, "waitdel", group, fmt.Sprintf(`    namespaces: [%s]
  allowCrossNamespace: [%s]
  children:
  - id: remote
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-remote", namespace: %s}
      data: {x: "1"}
  - id: thing
    template:
      apiVersion: %s/v1
      kind: Gadget
      metadata: {name: "${parent.metadata.name}-thing"}
      spec: {a: 1}
`, ns, remote, remote, childGroup)))
	kgen.waitReady(t)
	create(t, gvr, gadget(group, ns, "p", map[string]any{}))
	waitFor(t, gvr, ns, "p", hasFinalizer(true))
	waitFor(t, cmGVR, remote, "p-remote", nil)
	waitFor(t, things, ns, "p-thing", nil)

	if err := env.crds.ApiextensionsV1().CustomResourceDefinitions().Delete(t.Context(), "gadgets."+childGroup, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	kgen.waitRule(t, 60*time.Second, "waitdel", func(s controller.RuleState) error {
		if s.Running || !s.KindNotServed {
			return fmt.Errorf("state %+v, want waiting for a kind not served", s)
		}
		return nil
	})
	if err := env.dynamic.Resource(gvr).Namespace(ns).Delete(t.Context(), "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, func() (bool, error) {
		if p := get(t, gvr, ns, "p"); p != nil {
			return false, fmt.Errorf("parent still there, finalizers %v", p.GetFinalizers())
		}
		return true, nil
	}, "the parent deleted while its rule waits to go")
	if get(t, cmGVR, remote, "p-remote") != nil {
		t.Error("the parent went, and the child only kgen's finalizer guarded stays")
	}
}

// Scenario (contract §3 Ready, §6 "Failures are visible", through a change
// while kgen is stopped; a live audit): the CRD of a child kind is deleted
// while kgen is stopped, taking the children with it. The restarted kgen's
// rule waits for the kind, and once it has waited 30 s its parent says so:
// Ready False, reason KindNotServed, naming the kind. Before, the parent
// kept Ready=True while its child did not exist. The CRD back, the child
// is made again and the parent is Ready.
func TestChangeChildKindGoneWhileStopped(t *testing.T) {
	const group, childGroup = "kindgone.example.com", "kindgonechild.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	crd := gadgetCRD(childGroup, false)
	things := serveCRD(t, crd)
	rules := gadgetRule(t, "kindgone", group, fmt.Sprintf(`    namespaces: [%s]
  children:
  - id: thing
    template:
      apiVersion: %s/v1
      kind: Gadget
      metadata: {name: "${parent.metadata.name}-thing"}
      spec: {a: 1}
`, ns, childGroup))
	first := startKgen(t, "kgen-kindgone", "--rules", rules, "--rule-objects=false")
	create(t, gvr, gadget(group, ns, "p", map[string]any{}))
	waitFor(t, things, ns, "p-thing", nil)
	waitReason(t, gvr, ns, "p", reconcile.ReasonReady)
	first.stop()

	if err := env.crds.ApiextensionsV1().CustomResourceDefinitions().Delete(t.Context(), crd.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, func() (bool, error) {
		_, err := env.crds.ApiextensionsV1().CustomResourceDefinitions().Get(t.Context(), crd.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Errorf("CRD still there: %v", err)
	}, "the child kind's CRD to go")
	startKgen(t, "kgen-kindgone", "--rules", rules, "--rule-objects=false")
	eventually(t, 90*time.Second, func() (bool, error) {
		c := readyCondition(get(t, gvr, ns, "p"))
		ok := c != nil && c["status"] == "False" && c["reason"] == "KindNotServed" && strings.Contains(fmt.Sprint(c["message"]), childGroup)
		return ok, fmt.Errorf("Ready = %v, want False, KindNotServed, naming %s", c, childGroup)
	}, "the parent to say its rule waits for the child kind")

	serveCRD(t, gadgetCRD(childGroup, false))
	waitFor(t, things, ns, "p-thing", nil)
	waitReason(t, gvr, ns, "p", reconcile.ReasonReady)
}

// Scenario: another writer re-keys an entry of a keyed list that kgen set
// (kubectl edit turns the Service port 8080 into 9090). The new entry is
// theirs, and fields other managers set are never removed, so kgen's apply
// of its 8080 beside their 9090 is refused (two ports named http): the
// parent says Conflict with the server's reason, naming the field and the
// writer (not InvalidSpec, which blamed the template), their port stays,
// and once they undo the edit the child converges with no restart and no
// change of the parent (docs/controller.md).
func TestChangeOtherWriterRekeysPort(t *testing.T) {
	installCRD(t, "examples/webapp/crd.yaml")
	ns := newNamespace(t)
	startController(t, nil, webappRulesIn(t, ns)).waitReady(t)
	create(t, webappGVR, webapp(ns, "shop", 1))
	waitFor(t, svcGVR, ns, "shop", func(o *unstructured.Unstructured) error { return servicePorts(o, 8080) })
	waitFor(t, webappGVR, ns, "shop", func(p *unstructured.Unstructured) error {
		if c := readyCondition(p); c == nil || c["reason"] != "ChildNotReady" {
			return fmt.Errorf("Ready = %v, want ChildNotReady (no pods run here)", c)
		}
		return nil
	})

	edit := func(port int) {
		t.Helper()
		patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"ports": []any{
			map[string]any{"name": "http", "port": port, "targetPort": "http", "protocol": "TCP"},
		}}})
		if _, err := env.dynamic.Resource(svcGVR).Namespace(ns).Patch(t.Context(), "shop", types.MergePatchType, patch,
			metav1.PatchOptions{FieldManager: "kubectl-edit"}); err != nil {
			t.Fatal(err)
		}
	}
	edit(9090)
	waitFor(t, webappGVR, ns, "shop", func(p *unstructured.Unstructured) error {
		c := readyCondition(p)
		if c == nil || c["reason"] != "Conflict" || !strings.Contains(fmt.Sprint(c["message"]), "child service") ||
			!strings.Contains(fmt.Sprint(c["message"]), "the live object's spec.ports holds what kubectl-edit set") {
			return fmt.Errorf("Ready = %v, want a Conflict naming child service, spec.ports and kubectl-edit", c)
		}
		return nil
	})
	// Their port is never removed by kgen.
	if err := servicePorts(get(t, svcGVR, ns, "shop"), 9090); err != nil {
		t.Fatal(err)
	}

	edit(8080)
	waitFor(t, svcGVR, ns, "shop", func(o *unstructured.Unstructured) error { return servicePorts(o, 8080) })
	waitFor(t, webappGVR, ns, "shop", func(p *unstructured.Unstructured) error {
		if c := readyCondition(p); c == nil || c["reason"] != "ChildNotReady" {
			return fmt.Errorf("Ready = %v, want ChildNotReady again once the edit is undone", c)
		}
		return nil
	})
}

// Scenario (contract §6, audit s10): a rule removed while kgen could not
// release its parents (here: kgen stopped, and never started again, as when
// an upgrade took the grant away with the rule). kgenctl cleanup, given
// only the rules that remain, finds the removed rule's parents through
// kgen's record and releases them; its child stays.
func TestCleanupReleasesRecordedParents(t *testing.T) {
	const group = "cleanrecord.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	removed := clusterRoleRule(t, "cleanrecord", group, ns)
	t.Cleanup(func() {
		_ = env.kube.RbacV1().ClusterRoles().Delete(context.Background(), "e2e-"+ns+"-g", metav1.DeleteOptions{})
		_, _ = env.dynamic.Resource(gvr).Namespace(ns).Patch(context.Background(), "g", types.MergePatchType,
			[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	r := startController(t, nil, removed)
	r.waitReady(t)
	create(t, gvr, gadget(group, ns, "g", map[string]any{}))
	waitFor(t, gvr, ns, "g", hasFinalizer(true))
	waitFor(t, crGVR, "", "e2e-"+ns+"-g", nil)
	waitRecord(t, metav1.NamespaceDefault, "cleanrecord"+controller.ParentsKeySuffix, group+"/v1 Gadget "+ns+"\n")
	r.stop()

	// The rules that remain: another kind's.
	remaining := writeRules(t, fmt.Sprintf(`apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: cleanrecord-other}
spec:
  parent: {apiVersion: v1, kind: ConfigMap, namespaces: [%s], selector: {matchLabels: {none: none}}}
%s`, ns, strings.Replace(configChild("x"), "${parent.metadata.name}", "other-${parent.metadata.name}", 1)))
	admin := userKubeconfig(t, "kgen-cleanrecord")
	without, err := kgenctl(t, "cleanup", "--kubeconfig", admin, "--rules", remaining, "--rule-objects=false", "--state-configmap=", "-n", metav1.NamespaceDefault)
	if err != nil {
		t.Fatal(err)
	}
	if p := get(t, gvr, ns, "g"); p == nil || hasFinalizer(true)(p) != nil {
		t.Fatalf("kgenctl cleanup without the record released the parent of a rule it was not given:\n%s", without)
	}
	out, err := kgenctl(t, "cleanup", "--kubeconfig", admin, "--rules", remaining, "--rule-objects=false", "-n", metav1.NamespaceDefault)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "released gadgets."+group+" "+ns+"/g") {
		t.Errorf("kgenctl cleanup says:\n%s\nwant it to release %s/g", out, ns)
	}
	waitFor(t, gvr, ns, "g", hasFinalizer(false))
	if get(t, crGVR, "", "e2e-"+ns+"-g") == nil {
		t.Error("kgenctl cleanup deleted the child")
	}
}

// Scenario (contract §3, §6; audit s10): a child id renamed in the rules
// file while kgen runs. The object stays (same UID), relabelled in place:
// kgen neither deletes it as the old id's prune nor creates it again.
func TestChangeChildIDRenamed(t *testing.T) {
	const group = "idrename.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	file := gadgetRule(t, "idrename", group, fmt.Sprintf("    namespaces: [%s]\n%s", ns, configChild("v")))
	startController(t, nil, file).waitReady(t)
	create(t, gvr, gadget(group, ns, "g", map[string]any{}))
	before := waitFor(t, cmGVR, ns, "g", nil)
	start := time.Now()
	if err := os.WriteFile(file, []byte(strings.Replace(mustRead(t, file), "  - id: config\n", "  - id: settings\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	after := waitFor(t, cmGVR, ns, "g", func(o *unstructured.Unstructured) error {
		if id := o.GetLabels()[reconcile.LabelChild]; id != "settings" {
			return fmt.Errorf("%s = %q, want settings", reconcile.LabelChild, id)
		}
		return nil
	})
	if after.GetUID() != before.GetUID() {
		t.Errorf("the child is another object: UID %s, was %s", after.GetUID(), before.GetUID())
	}
	time.Sleep(2 * time.Second)
	if o := get(t, cmGVR, ns, "g"); o == nil || o.GetUID() != before.GetUID() {
		t.Errorf("the child was deleted after its relabel: %v", o)
	}
	evs, err := env.kube.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.CreationTimestamp.After(start.Add(-time.Second)) && (e.Reason == reconcile.EventDeleted || e.Reason == reconcile.EventRepaired || e.Reason == reconcile.EventCreated) {
			t.Errorf("event %s: %s", e.Reason, e.Message)
		}
	}
}

// Scenario (contract §3; audit s10): a child deleted while another
// controller's finalizer holds it. The parent is not Ready while it is
// being deleted, and once it is gone kgen creates it again and the parent
// is Ready.
func TestChangeChildHeldByFinalizer(t *testing.T) {
	const group = "heldchild.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	startController(t, nil, gadgetRule(t, "heldchild", group, fmt.Sprintf("    namespaces: [%s]\n%s", ns, configChild("v")))).waitReady(t)
	create(t, gvr, gadget(group, ns, "g", map[string]any{}))
	old := waitFor(t, cmGVR, ns, "g", nil)
	waitFor(t, gvr, ns, "g", readyIs("True", reconcile.ReasonReady))
	cms := env.dynamic.Resource(cmGVR).Namespace(ns)
	if _, err := cms.Patch(t.Context(), "g", types.MergePatchType, []byte(`{"metadata":{"finalizers":["example.com/hold"]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = cms.Patch(context.Background(), "g", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	if err := cms.Delete(t.Context(), "g", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, gvr, ns, "g", readyIs("False", reconcile.ReasonNotReady, "child config is being deleted"))

	if _, err := cms.Patch(t.Context(), "g", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, cmGVR, ns, "g", func(o *unstructured.Unstructured) error {
		if o.GetUID() == old.GetUID() {
			return errNotYet
		}
		return nil
	})
	waitFor(t, gvr, ns, "g", readyIs("True", reconcile.ReasonReady))
}

// Scenario: a CRD gains a default for the field a template reads. A parent
// that lacked the field, and was InvalidSpec for it, gets the default from
// the API server, which applies a CRD's defaults when it reads an object;
// kgen's cache held the parent as the old schema made it, and a watch that
// resumes does not send it again. Parents are created right after the CRD
// changes, so that events come through the watch opened before: then the
// reflector resumed the watch instead of listing, and the parent stayed
// InvalidSpec until the next change of the CRD.
func TestChangeCRDDefaultReachesCachedParents(t *testing.T) {
	const group = "crddefault.example.com"
	ns := newNamespace(t)
	props := func(withDefault bool) map[string]apiextensionsv1.JSONSchemaProps {
		port := apiextensionsv1.JSONSchemaProps{Type: "integer"}
		if withDefault {
			port.Default = &apiextensionsv1.JSON{Raw: []byte("8080")}
		}
		return map[string]apiextensionsv1.JSONSchemaProps{"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"port": port}}}
	}
	crd := crdOf(group, "App", "apps", apiextensionsv1.NamespaceScoped, &apiextensionsv1.JSONSchemaProps{Type: "object", Properties: props(false)})
	crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"] = apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: new(true)}
	gvr := createCRD(t, crd)
	startController(t, nil, writeRules(t, `apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: crd-default}
spec:
  parent: {apiVersion: `+group+`/v1, kind: App, namespaces: [`+ns+`]}
  children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}"}
      data:
        port: ${string(parent.spec.port)}
`)).waitReady(t)
	app := func(name string) map[string]any {
		return map[string]any{"apiVersion": group + "/v1", "kind": "App", "metadata": map[string]any{"name": name, "namespace": ns}, "spec": map[string]any{}}
	}
	create(t, gvr, app("before"))
	waitReason(t, gvr, ns, "before", reconcile.ReasonInvalid, "port")

	updateCRD(t, crd.Name, func(live *apiextensionsv1.CustomResourceDefinition) {
		live.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = props(true)["spec"]
	})
	changed := time.Now()
	for i := range 10 {
		create(t, gvr, app(fmt.Sprintf("after-%d", i)))
		time.Sleep(100 * time.Millisecond)
	}
	eventually(t, 90*time.Second, func() (bool, error) {
		o := get(t, cmGVR, ns, "before")
		if o == nil {
			return false, errNotYet
		}
		err := expect(o, "8080", "data", "port")
		return err == nil, err
	}, "the parent that lacked the field to get the CRD's new default")
	t.Logf("the parent's child has the default %s after the CRD changed", time.Since(changed).Round(time.Millisecond))
	waitReason(t, gvr, ns, "before", reconcile.ReasonReady)
}

// CRD changes in a row (contract section 6: a change of the cluster
// around kgen lands whole): a parent edited right after each change is
// followed at once, and a new default reaches a cached parent that lacks
// the field. kgen used to make the informers list again through their
// reflector, which waits a backoff before each list that doubles with
// every relist within two minutes, with the watch down meanwhile: edits
// after the third change waited up to 30 s.
//
// Only the first default can reach the parent: kgen's first write of it
// (its status) stores the defaulted field, as any write does.
func TestCRDChangesInARowKeepFollowing(t *testing.T) {
	const group = "crdrow.example.com"
	ns := newNamespace(t)
	// port 0: no default; spare, which no rule reads, changes each time.
	spec := func(port, spare int) apiextensionsv1.JSONSchemaProps {
		props := apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"port":  {Type: "integer"},
			"size":  {Type: "integer"},
			"spare": {Type: "integer", Default: &apiextensionsv1.JSON{Raw: fmt.Appendf(nil, "%d", spare)}},
		}}
		if port != 0 {
			props.Properties["port"] = apiextensionsv1.JSONSchemaProps{Type: "integer", Default: &apiextensionsv1.JSON{Raw: fmt.Appendf(nil, "%d", port)}}
		}
		return props
	}
	crd := crdOf(group, "App", "apps", apiextensionsv1.NamespaceScoped, &apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"spec":   spec(0, 0),
		"status": {Type: "object", XPreserveUnknownFields: new(true)},
	}})
	gvr := createCRD(t, crd)
	startController(t, nil, writeRules(t, `apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: crd-row}
spec:
  parent: {apiVersion: `+group+`/v1, kind: App, namespaces: [`+ns+`]}
  children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}"}
      data:
        port: ${string(parent.spec.port)}
        size: ${string(parent.spec.size)}
`)).waitReady(t)
	// bare lacks the port, which only the API server's default gives it
	// when the object is read; edited has its own.
	create(t, gvr, map[string]any{"apiVersion": group + "/v1", "kind": "App", "metadata": map[string]any{"name": "bare", "namespace": ns},
		"spec": map[string]any{"size": int64(1)}})
	create(t, gvr, map[string]any{"apiVersion": group + "/v1", "kind": "App", "metadata": map[string]any{"name": "edited", "namespace": ns},
		"spec": map[string]any{"size": int64(0), "port": int64(1)}})
	child := func(name, field, want string) func() (bool, error) {
		return func() (bool, error) {
			o := get(t, cmGVR, ns, name)
			if o == nil {
				return false, errNotYet
			}
			err := expect(o, want, "data", field)
			return err == nil, err
		}
	}
	eventually(t, 60*time.Second, child("edited", "size", "0"), "the first child")
	waitReason(t, gvr, ns, "bare", reconcile.ReasonInvalid, "port")

	var slowest time.Duration
	for i := 1; i <= 10; i++ {
		updateCRD(t, crd.Name, func(live *apiextensionsv1.CustomResourceDefinition) {
			live.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec(8080, i)
		})
		// By then kgen has heard of the change (a second after it) and
		// used to have stopped watching for its relist.
		time.Sleep(1500 * time.Millisecond)
		patchSpec(t, gvr, ns, "edited", map[string]any{"size": int64(i)})
		edited := time.Now()
		eventually(t, 90*time.Second, child("edited", "size", fmt.Sprint(i)), "the edit after CRD change %d", i)
		took := time.Since(edited)
		t.Logf("the edit after CRD change %d was followed after %s", i, took.Round(time.Millisecond))
		slowest = max(slowest, took)
		if i == 1 {
			eventually(t, 90*time.Second, child("bare", "port", "8080"), "the new default to reach the parent that lacked it")
			t.Logf("the new default reached the parent's child after %s", time.Since(edited).Round(time.Millisecond))
		}
		time.Sleep(1500 * time.Millisecond) // each change is a relist of its own
	}
	if slowest > 3*time.Second {
		t.Errorf("an edit after a CRD change was followed after %s, want at most 3 s", slowest.Round(time.Millisecond))
	}
}

// Scenario: a restored child. A backup restore creates the parent (a new
// UID) and its child again, the child with POST by the restoring tool,
// which then owns every field of it. The parent adopts the child; a later
// template that drops a data key removes it from the child (contract §6,
// "Template changes land whole"), while a key only the restorer set (one
// another writer had added before the backup) stays.
func TestChangeRestoredChild(t *testing.T) {
	const group = "restorechild.example.com"
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	startControllerWith(t, controllerOptions{RuleObjects: true})
	template := func(keys string) string {
		return `  children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-config"}
      data: {` + keys + `}
`
	}
	applyRule(t, gadgetRuleDoc("restorechild", group, "Gadget", ns, template(`a: "1", b: "2"`)))
	create(t, gvr, gadget(group, ns, "r", map[string]any{}))
	waitFor(t, cmGVR, ns, "r-config", func(o *unstructured.Unstructured) error { return expect(o, "2", "data", "b") })
	if _, err := env.dynamic.Resource(cmGVR).Namespace(ns).Patch(t.Context(), "r-config", types.MergePatchType,
		[]byte(`{"data":{"theirs":"kept"}}`), metav1.PatchOptions{FieldManager: "someone"}); err != nil {
		t.Fatal(err)
	}
	backup := waitFor(t, cmGVR, ns, "r-config", func(o *unstructured.Unstructured) error { return expect(o, "kept", "data", "theirs") })

	// The disaster: parent and child are gone.
	orphan := metav1.DeletePropagationOrphan
	if err := env.dynamic.Resource(gvr).Namespace(ns).Delete(t.Context(), "r", metav1.DeleteOptions{PropagationPolicy: &orphan}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, gvr, ns, "r")
	if err := env.dynamic.Resource(cmGVR).Namespace(ns).Delete(t.Context(), "r-config", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, cmGVR, ns, "r-config")

	// The restore, as Velero does it: the child as it was, less what the
	// server sets and its ownerReference (its owner's UID is gone).
	restored := backup.DeepCopy()
	for _, f := range []string{"uid", "resourceVersion", "creationTimestamp", "managedFields", "ownerReferences"} {
		unstructured.RemoveNestedField(restored.Object, "metadata", f)
	}
	if _, err := env.dynamic.Resource(cmGVR).Namespace(ns).Create(t.Context(), restored, metav1.CreateOptions{FieldManager: "velero-server"}); err != nil {
		t.Fatal(err)
	}
	parent := create(t, gvr, gadget(group, ns, "r", map[string]any{}))
	waitFor(t, cmGVR, ns, "r-config", func(o *unstructured.Unstructured) error {
		if o.GetLabels()[reconcile.LabelParentUID] != string(parent.GetUID()) {
			return fmt.Errorf("parent-uid = %s, want the restored parent's", o.GetLabels()[reconcile.LabelParentUID])
		}
		return nil
	})
	waitEvent(t, ns, "r", "Adopted", 10*time.Second)

	// The template drops b.
	applyRule(t, gadgetRuleDoc("restorechild", group, "Gadget", ns, template(`a: "1"`)))
	waitFor(t, cmGVR, ns, "r-config", func(o *unstructured.Unstructured) error {
		if _, has := o.GetLabels()[reconcile.LabelParentUID]; !has {
			return fmt.Errorf("labels %v", o.GetLabels())
		}
		data, _, _ := unstructured.NestedStringMap(o.Object, "data")
		if want := map[string]string{"a": "1", "theirs": "kept"}; !maps.Equal(data, want) {
			return fmt.Errorf("data = %v, want %v", data, want)
		}
		return nil
	})
}

// Scenario: a child reads a field of another child that is not set yet
// (observed state another writer fills in, as a controller fills a
// Deployment's status.availableReplicas). It waits for it, saying so, and
// a change of the parent meanwhile still reaches the other child; once the
// field is set, the waiting child is made.
func TestChangeWhileAChildFieldIsNotSet(t *testing.T) {
	const group = "notset.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	startController(t, nil, gadgetRule(t, "notset", group, `  children:
  - id: source
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-source"}
      data: {image: "${parent.spec.image}"}
  - id: reader
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-reader"}
      data: {token: "${children.source.data.token}"}
`)).waitReady(t)
	create(t, gvr, gadget(group, ns, "n", map[string]any{"image": "web:1"}))
	waiting := func(p *unstructured.Unstructured) error {
		c := readyCondition(p)
		if c == nil || c["status"] != "False" || c["reason"] != "WaitingForDependency" ||
			!strings.Contains(fmt.Sprint(c["message"]), "child reader is waiting for children.source.data.token (not set yet)") {
			return fmt.Errorf("Ready = %v", c)
		}
		return nil
	}
	waitFor(t, gvr, ns, "n", waiting)
	waitFor(t, cmGVR, ns, "n-source", func(o *unstructured.Unstructured) error { return expect(o, "web:1", "data", "image") })

	patchSpec(t, gvr, ns, "n", map[string]any{"image": "web:2"})
	waitFor(t, cmGVR, ns, "n-source", func(o *unstructured.Unstructured) error { return expect(o, "web:2", "data", "image") })
	waitFor(t, gvr, ns, "n", waiting)
	if get(t, cmGVR, ns, "n-reader") != nil {
		t.Fatal("the reader was made before the field it reads was set")
	}

	// Another writer sets the field.
	if _, err := env.dynamic.Resource(cmGVR).Namespace(ns).Patch(t.Context(), "n-source", types.MergePatchType,
		[]byte(`{"data":{"token":"t0k3n"}}`), metav1.PatchOptions{FieldManager: "issuer"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, cmGVR, ns, "n-reader", func(o *unstructured.Unstructured) error { return expect(o, "t0k3n", "data", "token") })
	waitFor(t, gvr, ns, "n", isReady)
}

// Scenario (a live audit): a child reads an item of a list another
// writer fills in, a LoadBalancer Service's
// status.loadBalancer.ingress[0].ip. It waits for it, and a change of the
// parent meanwhile reaches the Service; before, the render failed as the
// rule's error (InvalidSpec) and the Service kept its old port.
func TestChangeWhileAListItemOfAChildIsNotSet(t *testing.T) {
	const group = "notsetitem.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	startController(t, nil, gadgetRule(t, "notsetitem", group, `  children:
  - id: service
    template:
      apiVersion: v1
      kind: Service
      metadata: {name: "${parent.metadata.name}"}
      spec:
        type: LoadBalancer
        selector: {app: "${parent.metadata.name}"}
        ports: [{name: http, port: "${parent.spec.port}"}]
  - id: endpoint
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-endpoint"}
      data: {ENDPOINT: "${children.service.status.loadBalancer.ingress[0].ip}:${string(parent.spec.port)}"}
`)).waitReady(t)
	create(t, gvr, gadget(group, ns, "lb", map[string]any{"port": int64(9090)}))
	waiting := func(p *unstructured.Unstructured) error {
		c := readyCondition(p)
		if c == nil || c["status"] != "False" || c["reason"] != "WaitingForDependency" ||
			!strings.Contains(fmt.Sprint(c["message"]), "child endpoint is waiting for children.service.status.loadBalancer.ingress[0].ip (not set yet)") {
			return fmt.Errorf("Ready = %v", c)
		}
		return nil
	}
	svcGVR := schema.GroupVersionResource{Version: "v1", Resource: "services"}
	port := func(want int64) func(*unstructured.Unstructured) error {
		return func(o *unstructured.Unstructured) error {
			ports, _, _ := unstructured.NestedSlice(o.Object, "spec", "ports")
			if len(ports) != 1 || ports[0].(map[string]any)["port"] != want {
				return fmt.Errorf("ports = %v, want one of port %d", ports, want)
			}
			return nil
		}
	}
	waitFor(t, svcGVR, ns, "lb", port(9090))
	waitFor(t, gvr, ns, "lb", waiting)

	patchSpec(t, gvr, ns, "lb", map[string]any{"port": int64(9091)})
	waitFor(t, svcGVR, ns, "lb", port(9091))
	waitFor(t, gvr, ns, "lb", waiting)

	// The load balancer's controller (none runs here) sets the address.
	if _, err := env.dynamic.Resource(svcGVR).Namespace(ns).Patch(t.Context(), "lb", types.MergePatchType,
		[]byte(`{"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.7"}]}}}`), metav1.PatchOptions{FieldManager: "lb-controller"}, "status"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, cmGVR, ns, "lb-endpoint", func(o *unstructured.Unstructured) error { return expect(o, "192.0.2.7:9091", "data", "ENDPOINT") })
	waitFor(t, gvr, ns, "lb", isReady)
}

// Scenario: a rule whose only child is CreateOnly is renamed, and kgen
// restarted twice. The child, whose content is never written again, is
// the same object; the parent is still the renamed rule's: it follows its
// own changes, and it is deleted without getting stuck.
func TestChangeRuleRenamedCreateOnly(t *testing.T) {
	const group = "renamedonce.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	children := `  children:
  - id: secret
    updatePolicy: CreateOnly
    template:
      apiVersion: v1
      kind: Secret
      metadata:
        name: ${parent.metadata.name}
      stringData: {password: "${randomString(12)}"}
`
	first := startController(t, nil, gadgetRule(t, "alpha", group, children))
	first.waitReady(t)
	create(t, gvr, gadget(group, ns, "x", map[string]any{}))
	secretGVR := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	before := waitFor(t, secretGVR, ns, "x", nil)
	waitFor(t, gvr, ns, "x", isReady)
	first.stop()

	for i, step := range []string{"renamed", "restarted"} {
		r := startController(t, nil, gadgetRule(t, "beta", group, children))
		r.waitReady(t)
		p := get(t, gvr, ns, "x")
		_ = unstructured.SetNestedField(p.Object, fmt.Sprint(i), "spec", "round")
		if _, err := env.dynamic.Resource(gvr).Namespace(ns).Update(t.Context(), p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, gvr, ns, "x", func(o *unstructured.Unstructured) error {
			if err := isReady(o); err != nil {
				return fmt.Errorf("%s: %w", step, err)
			}
			return expect(o, o.GetGeneration(), "status", "observedGeneration")
		})
		if s := get(t, secretGVR, ns, "x"); s == nil || s.GetUID() != before.GetUID() {
			t.Fatalf("%s: the CreateOnly child was deleted or recreated: %v", step, s)
		}
		r.stop()
	}
	startController(t, nil, gadgetRule(t, "beta", group, children)).waitReady(t)
	if err := env.dynamic.Resource(gvr).Namespace(ns).Delete(t.Context(), "x", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, gvr, ns, "x")
}

// Scenario (contract §8 per-child lifecycle, through a change of the rule;
// an audit lost three generated passwords this way): CreateOnly Secrets
// with generated passwords, one per user. Their child turns from Delete to
// Orphan: the passwords lose their ownerReference, so the one whose user
// goes stays, and so do the others when their parent is deleted, each
// the same object with the same password. Back from Orphan to Delete, a
// password gets its ownerReference and goes with its parent.
func TestChangeCreateOnlyDeletionPolicy(t *testing.T) {
	const group = "onceorphan.example.com"
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	rule := func(policy string) string {
		return gadgetRuleDoc("passwords", group, "Gadget", ns, `  children:
  - id: pw
    updatePolicy: CreateOnly
    deletionPolicy: `+policy+`
    forEach: [{u: "${parent.spec.users}"}]
    template:
      apiVersion: v1
      kind: Secret
      metadata: {name: "${parent.metadata.name}-pw-${u}"}
      stringData: {password: "${randomString(12)}"}
`)
	}
	startControllerWith(t, controllerOptions{RuleObjects: true})
	applyRule(t, rule("Delete"))
	waitRuleStatus(t, "passwords", readyIs("True", "Running"))
	create(t, gvr, gadget(group, ns, "x", map[string]any{"users": []any{"a", "b", "c"}}))
	owned := func(want bool) func(*unstructured.Unstructured) error {
		return func(o *unstructured.Unstructured) error {
			ref := metav1.GetControllerOf(o)
			orphan := o.GetAnnotations()["kgen.dev/deletion-policy"] == "Orphan"
			if (ref != nil) != want || orphan == want {
				return fmt.Errorf("%s: controller %v, deletion-policy annotation %t; want an ownerReference: %t", o.GetName(), ref, orphan, want)
			}
			return nil
		}
	}
	passwords := map[string]*unstructured.Unstructured{}
	for _, u := range []string{"a", "b", "c"} {
		passwords[u] = waitFor(t, secretGVR, ns, "x-pw-"+u, owned(true))
	}
	waitFor(t, gvr, ns, "x", isReady)

	applyRule(t, rule("Orphan"))
	for _, u := range []string{"a", "b", "c"} {
		waitFor(t, secretGVR, ns, "x-pw-"+u, owned(false))
	}
	same := func(u string, s *unstructured.Unstructured) {
		t.Helper()
		now := get(t, secretGVR, ns, s.GetName())
		if now == nil || now.GetUID() != s.GetUID() || fmt.Sprint(now.Object["data"]) != fmt.Sprint(s.Object["data"]) {
			t.Errorf("password of user %s: %v, want the same object and data as %v", u, now, s.Object["data"])
		}
	}
	patchSpec(t, gvr, ns, "x", map[string]any{"users": []any{"a", "c"}})
	waitFor(t, secretGVR, ns, "x-pw-b", func(o *unstructured.Unstructured) error {
		if o.GetLabels()["kgen.dev/parent-uid"] != "" {
			return fmt.Errorf("x-pw-b still carries kgen's labels %v", o.GetLabels())
		}
		return nil
	})
	same("b", passwords["b"])
	x := get(t, gvr, ns, "x")
	create(t, cmGVR, map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "x-owned", "namespace": ns,
		"ownerReferences": []any{map[string]any{"apiVersion": group + "/v1", "kind": "Gadget", "name": "x", "uid": string(x.GetUID())}}}})
	if err := env.dynamic.Resource(gvr).Namespace(ns).Delete(t.Context(), "x", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, gvr, ns, "x")
	// Once the garbage collector has deleted an object x owned, it has
	// handled x's deletion. (It learns a new CRD's kind from discovery,
	// which may take a while.)
	eventually(t, 2*time.Minute, func() (bool, error) {
		return get(t, cmGVR, ns, "x-owned") == nil, nil
	}, "the garbage collector to delete an object the deleted parent owned")
	for _, u := range []string{"a", "b", "c"} {
		same(u, passwords[u])
	}

	create(t, gvr, gadget(group, ns, "y", map[string]any{"users": []any{"a"}}))
	kept := waitFor(t, secretGVR, ns, "y-pw-a", owned(false))
	applyRule(t, rule("Delete"))
	waitFor(t, secretGVR, ns, "y-pw-a", owned(true))
	same("a", kept)
	// Its prune deletes it now. (With its ownerReference, the garbage
	// collector would delete it with its parent, once it knows the new
	// CRD's kind: at its next discovery, up to 30 s after.)
	patchSpec(t, gvr, ns, "y", map[string]any{"users": []any{}})
	waitGone(t, secretGVR, ns, "y-pw-a")
}

// Scenario (contract §6 "Renames never lose the old child first", through
// one rule edit; a soak audit): a child's id and name change together, and
// its new name is taken by an object that is not the parent's. The old
// object stays (it was pruned as the object of an id the rule no longer
// has, leaving the parent without the child and its Deployment pointing
// at nothing), the parent reports Conflict; once the object in the way is
// deleted, the new child is made and the old one goes.
func TestChangeRenamedIdIntoTakenName(t *testing.T) {
	const group = "renametaken.example.com"
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	rule := func(id, suffix string) string {
		return gadgetRuleDoc("renametaken", group, "Gadget", ns, `  children:
  - id: `+id+`
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-`+suffix+`"}
      data: {k: v}
`)
	}
	startControllerWith(t, controllerOptions{RuleObjects: true})
	applyRule(t, rule("config", "cfg"))
	create(t, gvr, gadget(group, ns, "r", map[string]any{}))
	old := waitFor(t, cmGVR, ns, "r-cfg", nil)
	waitFor(t, gvr, ns, "r", isReady)
	create(t, cmGVR, map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "r-config", "namespace": ns}, "data": map[string]any{"owner": "human"}})

	applyRule(t, rule("settings", "config"))
	waitReason(t, gvr, ns, "r", reconcile.ReasonConflict, "r-config")
	time.Sleep(2 * time.Second) // a prune would have followed the Conflict at once
	if now := get(t, cmGVR, ns, "r-cfg"); now == nil || now.GetUID() != old.GetUID() {
		t.Fatalf("the old child is gone while its replacement's name is taken: %v", now)
	}
	if err := env.kube.CoreV1().ConfigMaps(ns).Delete(t.Context(), "r-config", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, cmGVR, ns, "r-config", func(o *unstructured.Unstructured) error { return expect(o, "v", "data", "k") })
	waitGone(t, cmGVR, ns, "r-cfg")
	waitFor(t, gvr, ns, "r", isReady)
}

// Scenario: another writer that sets a field of a child back whenever kgen
// repairs it (an autoscaler on a Deployment's replicas, a second
// controller with another idea of the object). Each of its writes is
// drift, and each repair wakes the other writer: without a bound, the two
// controllers write the object back and forth at API speed for as long as
// both run. kgen repairs a few times, then stops repairing that child for
// a while and says so (a ChildContended Warning naming the writer and the
// field, the parent's Ready condition, a metric), as it does for a
// contended status (contract §6: it never fights another writer in a
// loop). A change of the template still lands at once.
func TestChangeChildFoughtOver(t *testing.T) {
	const group = "fight.example.com"
	const user = "kgen-fight"
	// 3 repairs before the backoff, and one write in flight.
	const repairBound = 4
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	r := startControllerWith(t, controllerOptions{User: user}, gadgetRule(t, "fight", group, `  children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: ${parent.metadata.name}
      data:
        k: ${parent.spec.?k.orValue("v")}
        other: o
`))
	r.waitReady(t)
	create(t, gvr, gadget(group, ns, "f", map[string]any{}))
	waitFor(t, cmGVR, ns, "f", func(o *unstructured.Unstructured) error { return expect(o, "v", "data", "k") })
	waitFor(t, gvr, ns, "f", isReady)

	start := time.Now()
	childWrites := func() int {
		n := 0
		for _, w := range writesOf(t, user, ns, start) {
			if w == "patch configmaps f" {
				n++
			}
		}
		return n
	}
	ctx, stopFighter := context.WithCancel(t.Context())
	defer stopFighter()
	fights := 0
	var fighter sync.WaitGroup
	fighter.Go(func() {
		for ctx.Err() == nil {
			cm, err := env.kube.CoreV1().ConfigMaps(ns).Get(ctx, "f", metav1.GetOptions{})
			if err == nil && cm.Data["k"] != "theirs" {
				if _, err := env.kube.CoreV1().ConfigMaps(ns).Patch(ctx, "f", types.MergePatchType, []byte(`{"data":{"k":"theirs"}}`),
					metav1.PatchOptions{FieldManager: "fighter"}); err == nil {
					fights++
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	contended := waitEvent(t, ns, "f", reconcile.ReasonChildContended, 30*time.Second)
	for _, want := range []string{"fighter", "data.k", "child config"} {
		if !strings.Contains(contended.Message, want) {
			t.Errorf("%s event %q does not name %q", reconcile.ReasonChildContended, contended.Message, want)
		}
	}
	waitFor(t, gvr, ns, "f", func(p *unstructured.Unstructured) error {
		if c := readyCondition(p); c["reason"] != reconcile.ReasonChildContended || !strings.Contains(fmt.Sprint(c["message"]), "fighter") {
			return fmt.Errorf("Ready = %v, want reason %s naming the other writer", c, reconcile.ReasonChildContended)
		}
		return nil
	})
	time.Sleep(10 * time.Second) // the fight would go on meanwhile
	stopFighter()
	fighter.Wait()
	writes := childWrites()
	t.Logf("kgen wrote the fought-over child %d times, the other writer %d times", writes, fights)
	if writes > repairBound {
		t.Errorf("kgen wrote the child %d times against a writer that sets it back, want at most %d and a backoff", writes, repairBound)
	}
	if n := counter(t, r, "kgen_child_backoffs_total", map[string]string{"rule": "fight"}); n < 1 {
		t.Errorf("kgen_child_backoffs_total{rule=fight} = %v after a %s event, want at least 1", n, reconcile.ReasonChildContended)
	}
	// The other writer's value stays while kgen backs off...
	if cm := get(t, cmGVR, ns, "f"); nested(cm, "data", "k") != "theirs" {
		t.Errorf("data.k = %v during the backoff, want the other writer's value", nested(cm, "data", "k"))
	}
	// ...but a change of the parent that changes the child lands at once.
	patchSpec(t, gvr, ns, "f", map[string]any{"k": "w"})
	waitFor(t, cmGVR, ns, "f", func(o *unstructured.Unstructured) error { return expect(o, "w", "data", "k") })
	waitFor(t, gvr, ns, "f", isReady)
}
