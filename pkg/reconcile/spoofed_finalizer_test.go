package reconcile

import "testing"

// An object that merely carries kgen's marks for a parent (no ownerReference
// where one belongs) is not the parent's child: it does not keep kgen's
// finalizer on the parent (a review found 5018b82 counted it).
func TestSpoofedObjectDoesNotKeepTheFinalizer(t *testing.T) {
	h := newHarness(t, appRule)
	h.converge(appParent(nil))
	p := h.api.get(appGVK, "team", "web")
	p.SetFinalizers([]string{Finalizer})
	h.api.add(p)
	h.api.add(childOf(h, cmGVK, "team", "theirs", "gone", false))
	for i := range 2 {
		h.api.resetRequests()
		if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
			t.Fatal(err)
		}
		t.Logf("pass %d writes: %v finalizers=%v", i, h.api.writes(), h.api.get(appGVK, "team", "web").GetFinalizers())
	}
	if len(h.api.get(appGVK, "team", "web").GetFinalizers()) > 0 {
		t.Error("finalizer kept for an object that is not the parent's (MakePlan ignores it, remaining does not)")
	}
}
