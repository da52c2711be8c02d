package reconcile

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// 'kubectl delete --cascade=orphan': the API server marks the parent
// deleted, and the garbage collector takes the children's ownerReferences
// off, to keep them. A reconcile from a cache that shows the orphaned
// child but not yet the parent's deletion must not give the
// ownerReference back: the garbage collector would then delete the child
// with the parent (it did, in a live audit, 1 in 8 deletes).
func TestOrphaningDeleteKeepsTheChild(t *testing.T) {
	for _, tc := range []struct{ name, rule string }{
		{"Apply", appRule},
		{"CreateOnly", strings.Replace(appRule, "  - id: config\n", "  - id: config\n    updatePolicy: CreateOnly\n", 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.rule)
			h.converge(appParent(nil))
			stale := h.api.get(appGVK, "team", "web") // as the cache still shows it
			p := stale.DeepCopy()
			now := metav1.NewTime(h.now)
			p.SetDeletionTimestamp(&now)
			p.SetFinalizers([]string{metav1.FinalizerOrphanDependents})
			h.api.add(p)
			for _, gvk := range []struct{ kind, name string }{{"ConfigMap", "web-config"}, {"Deployment", "web"}} {
				obj := h.api.get(cmGVK, "team", gvk.name)
				if gvk.kind == "Deployment" {
					obj = h.api.get(deployGVK, "team", gvk.name)
				}
				obj.SetOwnerReferences(nil)
				h.api.add(obj)
			}
			h.api.resetRequests()
			if _, err := h.r.Reconcile(context.Background(), h.rule, fakeMappings[appGVK], stale); err != nil {
				t.Fatal(err)
			}
			// Each is tried as a create (the cache does not show it as
			// the parent's), which the API server refuses: nothing more.
			want := []string{"patch configmaps team/web-config", "patch deployments team/web"}
			var got []string
			for _, w := range h.api.writes() {
				if strings.Contains(w, "configmaps") || strings.Contains(w, "deployments") {
					got = append(got, w)
				}
			}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("writes of the children = %v, want only the refused creates %v", got, want)
			}
			for _, obj := range []*unstructured.Unstructured{h.api.get(cmGVK, "team", "web-config"), h.api.get(deployGVK, "team", "web")} {
				if len(obj.GetOwnerReferences()) > 0 {
					t.Errorf("orphaned child %s got an ownerReference back: %v", obj.GetName(), obj.GetOwnerReferences())
				}
			}
		})
	}
}
