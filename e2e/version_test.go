//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// twoVersionCRD is crdOf's CRD served at v1 (stored) and v2, with no
// conversion: the same objects read at either version.
func twoVersionCRD(group, kind, plural string) *apiextensionsv1.CustomResourceDefinition {
	crd := crdOf(group, kind, plural, apiextensionsv1.NamespaceScoped, &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: new(true)})
	v2 := crd.Spec.Versions[0]
	v2.Name, v2.Storage = "v2", false
	crd.Spec.Versions = append(crd.Spec.Versions, v2)
	return crd
}

// Scenario: an API migration, as users make when a kind's new version is
// served (policy/v1beta1 to v1, a CRD's v1 to v2). A rule's child kind, and
// then its parent kind, move to another version of the same kind. The
// objects are the same at either version: no child is deleted or
// re-created, each keeps its UID, its owner reference follows the parent's
// version, and a change of the parent made at its new version lands on the
// children.
func TestChangeAPIVersions(t *testing.T) {
	const group = "versions.example.com"
	const user = "kgen-versions"
	ns := newNamespace(t)
	gadgets := createCRD(t, twoVersionCRD(group, "Gadget", "gadgets"))
	widgets := createCRD(t, twoVersionCRD(group, "Widget", "widgets"))
	for _, r := range []string{"gadgets", "widgets"} {
		waitServed(t, schema.GroupVersionResource{Group: group, Version: "v2", Resource: r})
	}
	doc := func(parentVersion, childVersion string) string {
		return fmt.Sprintf(`apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: versions}
spec:
  parent: {apiVersion: %[1]s/%[2]s, kind: Gadget, namespaces: [%[4]s]}
  children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}"}
      data: {size: "${parent.spec.size}"}
  - id: widget
    template:
      apiVersion: %[1]s/%[3]s
      kind: Widget
      metadata: {name: "${parent.metadata.name}"}
      spec: {size: "${parent.spec.size}", version: %[3]s}
`, group, parentVersion, childVersion, ns)
	}
	file := writeRules(t, doc("v1", "v1"))
	startControllerWith(t, controllerOptions{User: user}, file)
	create(t, gadgets, gadget(group, ns, "g", map[string]any{"size": "s"}))
	widgetsV2 := schema.GroupVersionResource{Group: group, Version: "v2", Resource: "widgets"}
	widget := waitFor(t, widgets, ns, "g", func(o *unstructured.Unstructured) error { return expect(o, "s", "spec", "size") })
	config := waitFor(t, cmGVR, ns, "g", nil)
	waitFor(t, gadgets, ns, "g", isReady)
	start := time.Now()

	// kept checks that the children are the ones first made.
	kept := func(step string) {
		t.Helper()
		for _, c := range []struct {
			gvr schema.GroupVersionResource
			uid string
		}{{widgetsV2, string(widget.GetUID())}, {cmGVR, string(config.GetUID())}} {
			if o := get(t, c.gvr, ns, "g"); o == nil || string(o.GetUID()) != c.uid {
				t.Errorf("%s: %s g is gone or another object (want UID %s): %v", step, c.gvr.Resource, c.uid, o)
			}
		}
	}

	// The child kind moves to v2.
	if err := os.WriteFile(file, []byte(doc("v1", "v2")), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, widgets, ns, "g", func(o *unstructured.Unstructured) error { return expect(o, "v2", "spec", "version") })
	settle(t, user, ns)
	kept("child kind at v2")

	// The parent kind moves to v2, and the parent changes there.
	if err := os.WriteFile(file, []byte(doc("v2", "v2")), 0o644); err != nil {
		t.Fatal(err)
	}
	gadgetsV2 := schema.GroupVersionResource{Group: group, Version: "v2", Resource: "gadgets"}
	// The new version of the rule runs once it has moved the owner
	// references to v2 (see below).
	waitFor(t, widgetsV2, ns, "g", func(o *unstructured.Unstructured) error {
		if refs := o.GetOwnerReferences(); len(refs) != 1 || refs[0].APIVersion != group+"/v2" {
			return fmt.Errorf("ownerReferences = %+v", refs)
		}
		return nil
	})
	p := get(t, gadgetsV2, ns, "g")
	_ = unstructured.SetNestedField(p.Object, "m", "spec", "size")
	if _, err := env.dynamic.Resource(gadgetsV2).Namespace(ns).Update(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, widgets, ns, "g", func(o *unstructured.Unstructured) error { return expect(o, "m", "spec", "size") })
	waitFor(t, cmGVR, ns, "g", func(o *unstructured.Unstructured) error { return expect(o, "m", "data", "size") })
	waitFor(t, gadgetsV2, ns, "g", func(o *unstructured.Unstructured) error {
		if err := isReady(o); err != nil {
			return err
		}
		return expect(o, o.GetGeneration(), "status", "observedGeneration")
	})
	settle(t, user, ns)
	kept("parent kind at v2")
	// The owner reference names the version the rule now reads, so the
	// garbage collector still finds the parent once v1 is no longer served.
	for _, gvr := range []schema.GroupVersionResource{widgetsV2, cmGVR} {
		refs := get(t, gvr, ns, "g").GetOwnerReferences()
		if len(refs) != 1 || refs[0].APIVersion != group+"/v2" {
			t.Errorf("%s g: ownerReferences = %+v, want one to %s/v2", gvr.Resource, refs, group)
		}
	}

	// v1 is no longer served: the rule, which reads v2, goes on; the
	// record of where it watched its parents at v1 does not stop it.
	for _, name := range []string{"gadgets." + group, "widgets." + group} {
		updateCRD(t, name, func(crd *apiextensionsv1.CustomResourceDefinition) {
			crd.Spec.Versions[0].Served, crd.Spec.Versions[0].Storage = false, false
			crd.Spec.Versions[1].Storage = true
		})
	}
	eventually(t, 30*time.Second, func() (bool, error) {
		_, err := env.dynamic.Resource(gadgets).Namespace(ns).List(t.Context(), metav1.ListOptions{Limit: 1})
		return err != nil, fmt.Errorf("v1 still served")
	}, "v1 to be no longer served")
	p = get(t, gadgetsV2, ns, "g")
	_ = unstructured.SetNestedField(p.Object, "l", "spec", "size")
	if _, err := env.dynamic.Resource(gadgetsV2).Namespace(ns).Update(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, widgetsV2, ns, "g", func(o *unstructured.Unstructured) error { return expect(o, "l", "spec", "size") })
	settle(t, user, ns)
	kept("v1 no longer served")
	create(t, gadgetsV2, map[string]any{"apiVersion": group + "/v2", "kind": "Gadget",
		"metadata": map[string]any{"name": "h", "namespace": ns}, "spec": map[string]any{"size": "xl"}})
	waitFor(t, widgetsV2, ns, "h", func(o *unstructured.Unstructured) error { return expect(o, "xl", "spec", "size") })

	for _, w := range writesOf(t, user, ns, start) {
		if (strings.HasPrefix(w, "delete ") || strings.HasPrefix(w, "create ")) && strings.HasSuffix(w, " g") {
			t.Errorf("kgen wrote %q while only the versions changed", w)
		}
	}
}
