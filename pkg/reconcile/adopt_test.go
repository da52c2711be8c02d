package reconcile

import (
	"bytes"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// An adopted child (restored from a backup: the restorer's Update entry
// owns its fields too) whose follow-up patch of its managed fields fails
// is owed it: the next reconcile, which no longer adopts it (the child is
// this parent's now), takes kgen's fields from the restorer all the same.
func TestAdoptionTakesCoOwnedFieldsAfterAFailure(t *testing.T) {
	h := newHarness(t, appRule)
	restored := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "web-config", "namespace": "team"}, "data": map[string]any{"a": "old"}}}
	restored.SetLabels(map[string]string{LabelManagedBy: ManagedBy, LabelRule: "app", LabelParentUID: "uid-gone", LabelChild: "config"})
	restored.SetAnnotations(map[string]string{AnnotationParent: "team/web"})
	restored.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "App", Name: "web", UID: "uid-gone", Controller: new(true)}})
	h.api.add(restored)
	velero := metav1.ManagedFieldsEntry{Manager: "velero-server", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", FieldsType: "FieldsV1",
		FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{".":{},"f:a":{}}}`)}}
	kgen := metav1.ManagedFieldsEntry{Manager: FieldManager, Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1", FieldsType: "FieldsV1",
		FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{"f:a":{}}}`)}}
	failJSONPatch := true
	h.api.PrependReactor("patch", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
		p := a.(clienttesting.PatchAction)
		switch p.GetPatchType() {
		case types.JSONPatchType:
			if failJSONPatch {
				return true, nil, apierrors.NewServiceUnavailable("etcd leader changed")
			}
			return false, nil, nil
		case types.ApplyPatchType:
			handled, obj, err := h.api.react(a)
			if err != nil {
				return handled, obj, err
			}
			// As the API server keeps them: the restorer's Update entry and
			// kgen's apply entry both own data.a.
			u := obj.(*unstructured.Unstructured)
			if len(u.GetManagedFields()) == 0 {
				u.SetManagedFields([]metav1.ManagedFieldsEntry{velero, kgen})
				h.api.mu.Lock()
				h.api.objects[objKey{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "team", "web-config"}] = u.DeepCopy()
				h.api.mu.Unlock()
			}
			return true, u, nil
		}
		return false, nil, nil
	})
	if _, err := h.reconcile(appParent(nil)); err == nil || !strings.Contains(err.Error(), "etcd leader changed") {
		t.Fatalf("reconcile = %v, want the failed managedFields patch", err)
	}
	if c := h.ready(); c["reason"] != ReasonApplyFailed {
		t.Errorf("Ready = %v, want ApplyFailed (not the template's fault)", c)
	}
	failJSONPatch = false
	if _, err := h.reconcile(appParent(nil)); err != nil {
		t.Fatal(err)
	}
	cm := h.api.get(cmGVK, "team", "web-config")
	for _, e := range cm.GetManagedFields() {
		if e.Manager != "velero-server" {
			continue
		}
		s := &fieldpath.Set{}
		_ = s.FromJSON(bytes.NewReader(e.FieldsV1.Raw))
		if s.Has(fieldpath.MakePathOrDie("data", "a")) {
			t.Errorf("after the failed follow-up patch and one more reconcile, velero-server still co-owns data.a: a later template that drops it would not remove it (managedFields %v)", cm.GetManagedFields())
		}
	}
}
