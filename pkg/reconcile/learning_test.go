package reconcile

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// LearningKind tells the admission refusal of an owner whose kind the API
// server has not learned yet from other refusals, also when several
// children's errors are joined, and failure reports it as a passing
// failure, not a lack of rights.
func TestLearningKind(t *testing.T) {
	secrets := schema.GroupResource{Resource: "secrets"}
	learning := apierrors.NewForbidden(secrets, "g", errors.New(
		`cannot set blockOwnerDeletion in this case because cannot find RESTMapping for APIVersion example.com/v1 Kind Gadget: no matches for kind "Gadget" in version "example.com/v1"`))
	rbac := apierrors.NewForbidden(secrets, "g", errors.New(`User "kgen" cannot create resource "secrets" in API group "" in the namespace "team"`))
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"the refusal", learning, true},
		{"wrapped", fmt.Errorf("create secrets team/g: %w", learning), true},
		{"joined after another failure", errors.Join(fmt.Errorf("apply: %w", apierrors.NewInternalError(errors.New("etcd"))), fmt.Errorf("create: %w", learning)), true},
		{"joined, wrapped again", fmt.Errorf("children: %w", errors.Join(rbac, learning)), true},
		{"a lack of rights", rbac, false},
		{"joined failures without it", errors.Join(rbac, apierrors.NewInternalError(errors.New("etcd"))), false},
		{"the text in an error of another kind", errors.New("cannot find RESTMapping"), false},
		{"nil", nil, false},
	} {
		if got := LearningKind(tt.err); got != tt.want {
			t.Errorf("%s: LearningKind = %v, want %v", tt.name, got, tt.want)
		}
	}
	reason, msg := failure(nil, "secret", "secrets team/g", "create", fmt.Errorf("create: %w", learning))
	if reason != ReasonApplyFailed || !strings.Contains(msg, "has not learned the kind yet") {
		t.Errorf("failure = %s %q, want %s and a word that it passes", reason, msg, ReasonApplyFailed)
	}
	if reason, _ := failure(nil, "secret", "secrets team/g", "create", rbac); reason != ReasonForbidden {
		t.Errorf("failure of a lack of rights = %s, want %s", reason, ReasonForbidden)
	}
}

// The API server's refusal of a new object in a namespace being deleted,
// or of a kind whose CRD is, is not a lack of rights (a live audit: both
// read as Forbidden on the parents, as if kgen's RBAC were wrong).
func TestBeingDeletedIsNotForbidden(t *testing.T) {
	cms := schema.GroupResource{Resource: "configmaps"}
	ns := apierrors.NewForbidden(cms, "x", errors.New("unable to create new content in namespace shared because it is being terminated"))
	ns.ErrStatus.Details.Causes = append(ns.ErrStatus.Details.Causes, metav1.StatusCause{Type: corev1.NamespaceTerminatingCause, Message: "namespace shared is being terminated", Field: "metadata.namespace"})
	crd := apierrors.NewForbidden(schema.GroupResource{Group: "example.com", Resource: "things"}, "x", errors.New("create not allowed while custom resource definition is terminating"))
	rbac := apierrors.NewForbidden(cms, "x", errors.New(`User "kgen" cannot create resource "configmaps" in API group "" in the namespace "team"`))
	for _, tt := range []struct {
		name string
		err  error
		want string
	}{
		{"namespace being deleted", fmt.Errorf("apply: %w", ns), ReasonApplyFailed},
		{"CRD being deleted", crd, ReasonApplyFailed},
		{"joined with another failure", errors.Join(apierrors.NewInternalError(errors.New("etcd")), crd), ReasonApplyFailed},
		{"a lack of rights", rbac, ReasonForbidden},
	} {
		reason, msg := failure(nil, "config", "configmaps shared/x", "apply", tt.err)
		if reason != tt.want {
			t.Errorf("%s: reason %s (%s), want %s", tt.name, reason, msg, tt.want)
		}
		if tt.want == ReasonApplyFailed && !strings.Contains(msg, "not a lack of rights") {
			t.Errorf("%s: message %q does not say it is not a lack of rights", tt.name, msg)
		}
	}
}
