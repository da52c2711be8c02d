package reconcile

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// Whose judges an object in a child's place as the Reconciler does (see
// TestReconcileOwnership): kgen's own, adoptable, or in the way.
func TestWhose(t *testing.T) {
	owned := func(owner string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "web-config", "namespace": "team"}}}
		u.SetLabels(map[string]string{LabelManagedBy: ManagedBy, LabelParentUID: "uid-" + owner, LabelChild: "config"})
		u.SetAnnotations(map[string]string{AnnotationParent: "team/" + owner})
		u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "App", Name: owner, UID: types.UID("uid-" + owner), Controller: new(true)}})
		return u
	}
	orphanedBy := func(p *unstructured.Unstructured) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "web-config", "namespace": "team"}}}
		u.SetAnnotations(map[string]string{AnnotationOrphanedFrom: orphanedFrom(p)})
		return u
	}
	other := appParent(nil)
	other.SetName("other")
	other.SetUID("uid-other")
	parent := appParent(nil)
	parent.SetUID("uid-web")
	tests := []struct {
		name  string
		obj   *unstructured.Unstructured
		claim Claim
		why   string
	}{
		{"the parent's child", owned("web"), ClaimOurs, ""},
		{"a child of a parent that is gone", owned("gone"), ClaimAdopt, ""},
		{"a child of a parent that exists", owned("other"), ClaimConflict, "configmaps team/web-config exists and belongs to App team/other, which exists"},
		{"an object the parent orphaned", orphanedBy(parent), ClaimAdopt, ""},
		{"an object another parent orphaned", orphanedBy(other), ClaimConflict, "configmaps team/web-config exists and was orphaned by App team/other, which exists"},
		{"an object that is not kgen's", &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "web-config", "namespace": "team"}}}, ClaimConflict, "configmaps team/web-config exists and is not managed by kgen"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newFakeAPI(t)
			api.add(other)
			claim, why := Whose(t.Context(), api, fakeResources{}, tt.obj, parent)
			if claim != tt.claim || why != tt.why {
				t.Errorf("Whose = %d, %q; want %d, %q", claim, why, tt.claim, tt.why)
			}
			if w := api.writes(); len(w) > 0 {
				t.Errorf("Whose wrote: %q", w)
			}
		})
	}
}
