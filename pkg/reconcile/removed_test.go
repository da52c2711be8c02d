package reconcile

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Removed names what kgen's last apply set and the template no longer
// does: a map key, a keyed list's entry (once, by its key), a set's value,
// a whole map; not what the template still sets, nor another manager's
// fields.
func TestRemoved(t *testing.T) {
	live := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment"}}
	live.SetManagedFields([]metav1.ManagedFieldsEntry{{
		Manager: FieldManager, Operation: metav1.ManagedFieldsOperationApply, FieldsType: "FieldsV1",
		FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{"f:app":{},"f:old":{}}},` +
			`"f:spec":{"f:replicas":{},"f:template":{"f:spec":{"f:containers":{` +
			`"k:{\"name\":\"app\"}":{".":{},"f:image":{},"f:name":{},"f:ports":{"k:{\"containerPort\":8080,\"protocol\":\"TCP\"}":{".":{},"f:containerPort":{}}}},` +
			`"k:{\"name\":\"main\"}":{".":{},"f:image":{},"f:name":{},"f:ports":{"k:{\"containerPort\":80,\"protocol\":\"TCP\"}":{".":{},"f:containerPort":{}}}},` +
			`"k:{\"name\":\"side\"}":{".":{},"f:ports":{"k:{\"containerPort\":7070,\"protocol\":\"TCP\"}":{".":{},"f:containerPort":{}}}}}}},` +
			`"f:strategy":{"f:type":{}},"f:finalizers":{"v:\"a\"":{},"v:\"b\"":{}}}}`)},
	}, {
		Manager: "kubectl-edit", Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1",
		FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:paused":{}}}`)},
	}})
	desired := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"labels": map[string]any{"app": "x"}},
		"spec": map[string]any{"replicas": int64(2), "finalizers": []any{"a"},
			"template": map[string]any{"spec": map[string]any{"containers": []any{
				// Its port changed 80 to 81: the old one is named by
				// the key fields the template sets, as Differences
				// names the new one ("[containerPort=81]"), not with
				// the protocol the server defaulted.
				map[string]any{"name": "main", "image": "x", "ports": []any{map[string]any{"containerPort": int64(81)}}},
				map[string]any{"name": "app", "image": "y", "ports": []any{map[string]any{"containerPort": int64(9090), "protocol": "TCP"}}},
				// A key field the template leaves out, which the server
				// defaults, matches: nothing of this one is removed.
				map[string]any{"name": "side", "image": "z", "ports": []any{map[string]any{"containerPort": int64(7070)}}},
			}}}},
	}}
	want := []string{
		"metadata.labels.old",
		"spec.finalizers",
		"spec.strategy",
		"spec.template.spec.containers[name=app].ports[containerPort=8080,protocol=TCP]",
		"spec.template.spec.containers[name=main].ports[containerPort=80]",
	}
	if got := Removed(desired, live); !slices.Equal(got, want) {
		t.Errorf("Removed() = %q, want %q", got, want)
	}
	live.SetManagedFields(nil)
	if got := Removed(desired, live); len(got) != 0 {
		t.Errorf("Removed() without managed fields = %q, want none", got)
	}
}
