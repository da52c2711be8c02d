package reconcile

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
)

// Claim is what kgen may do with an object found where one of a parent's
// children should be.
type Claim int

const (
	// ClaimOurs: the object is the parent's child.
	ClaimOurs Claim = iota
	// ClaimAdopt: it is marked as the child of a parent that no longer
	// exists; kgen adopts it.
	ClaimAdopt
	// ClaimConflict: it is not kgen's to take; kgen leaves it untouched
	// and the parent reports a Conflict.
	ClaimConflict
)

// Whose tells, for kgenctl explain, what the Reconciler would do with obj,
// an object found at the name of one of parent's children, and for a
// conflict, why, as the parent's Conflict condition says it:
// "configmaps team/web-config exists and is not managed by kgen". It reads
// the owner that obj names, as the Reconciler does, with client.
func Whose(ctx context.Context, client dynamic.Interface, res Resources, obj, parent *unstructured.Unstructured) (Claim, string) {
	// The Reconciler's owner reads only through Client and Resources.
	r := &Reconciler{cfg: Config{Client: client, Resources: res}}
	who := r.owner(ctx, obj, parent)
	switch who {
	case ownerThis:
		return ClaimOurs, ""
	case ownerGone, ownerOrphaned:
		return ClaimAdopt, ""
	}
	ref := obj.GetName()
	if m, err := res.ResourceFor(obj.GroupVersionKind()); err == nil {
		ref = describeObject(m, obj)
	}
	return ClaimConflict, fmt.Sprintf("%s exists and %s", ref, who)
}
