package reconcile

import (
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clienttesting "k8s.io/client-go/testing"
)

// An apply refused for an invalid value of the template's is the
// template's error (InvalidSpec), also where another manager has fields
// next to it (kube-controller-manager's annotation): only a duplicate,
// which another writer's kept entry makes, is a Conflict.
func TestInvalidTemplateIsNotAConflict(t *testing.T) {
	invalid := apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "Deployment"}, "web", field.ErrorList{
		field.Invalid(field.NewPath("metadata", "annotations"), "bad key!", "name part must consist of alphanumeric characters")})
	h := newHarness(t, appRule)
	h.converge(appParent(nil))
	d := h.api.get(deployGVK, "team", "web")
	d.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate,
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:annotations":{"f:deployment.kubernetes.io/revision":{}}}}`)}}})
	_ = unstructured.SetNestedField(d.Object, int64(5), "spec", "replicas")
	h.api.add(d)
	h.api.PrependReactor("patch", "deployments", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, invalid
	})
	res, err := h.reconcile(h.api.get(appGVK, "team", "web"))
	if c := h.ready(); c["reason"] != ReasonInvalid {
		t.Errorf("err=%v Conflict=%q Ready.reason=%v: an invalid template is reported as a Conflict with kube-controller-manager", err, res.Conflict, c["reason"])
	}
}
