package reconcile

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A parent being deleted, with kgen's finalizer, and a label-spoofed object
// (kgen's labels naming the parent, no ownerReference) in its namespace:
// it is not kgen's (not ownedBy): prune leaves it, and finalize, which
// counted it as left to delete, no longer waits for it (a review found
// the parent stuck Terminating).
func TestSpoofedObjectDoesNotHoldADeletedParent(t *testing.T) {
	h := newHarness(t, appRule)
	h.converge(appParent(nil))
	p := h.api.get(appGVK, "team", "web")
	p.SetFinalizers([]string{Finalizer})
	now := metav1.NewTime(h.now)
	p.SetDeletionTimestamp(&now)
	h.api.add(p)
	h.api.add(childOf(h, cmGVK, "team", "theirs", "gone", false))
	for i := range 3 {
		h.api.resetRequests()
		if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
			t.Fatal(err)
		}
		t.Logf("pass %d writes: %v", i, h.api.writes())
	}
	if got := h.api.get(appGVK, "team", "web"); got != nil && len(got.GetFinalizers()) > 0 {
		t.Error("parent stuck Terminating on kgen's finalizer because of an object that is not its child")
	}
}
