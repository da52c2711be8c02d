//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"kgen.dev/kgen/pkg/controller"
)

var apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// takeAPIDown makes the API of a CRD's group and version unavailable, the
// way an aggregated API server that is down is: its APIService, no longer
// managed by kube-apiserver, points at a Service that does not exist.
// Discovery then marks the group version stale, and every request for its
// resources answers 503. bringAPIBack, also run when the test ends, deletes
// the APIService, which kube-apiserver makes again for the CRD, served
// locally.
func takeAPIDown(t *testing.T, gvr schema.GroupVersionResource) (bringAPIBack func()) {
	t.Helper()
	name := gvr.Version + "." + gvr.Group
	back := func() {
		err := env.dynamic.Resource(apiServiceGVR).Delete(context.Background(), name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("bring the API %s back: %v", name, err)
		}
	}
	t.Cleanup(back)
	patch := `{"metadata":{"labels":{"kube-aggregator.kubernetes.io/automanaged":null}},` +
		`"spec":{"service":{"name":"not-there","namespace":"default","port":443},"insecureSkipTLSVerify":true}}`
	if _, err := env.dynamic.Resource(apiServiceGVR).Patch(t.Context(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() (bool, error) {
		_, err := env.dynamic.Resource(gvr).List(t.Context(), metav1.ListOptions{Limit: 1})
		return apierrors.IsServiceUnavailable(err), err
	}, "%s to answer 503", gvr)
	return back
}

// Scenario (contract §6: no lost child, no parent stuck, no silent
// failure): the API of a child kind goes down (an aggregated API server
// that is unavailable: its group version is stale in discovery, its
// requests answer 503) while a parent is deleted, and kgen restarts
// meanwhile. The kind is still there, only unreachable, so kgen must not
// take it for a kind that is not served (of which no object can exist):
// the restarted kgen would then finalize the parent as its waiting rule's
// and leave the child only its finalizer guards behind for good. The
// parent stays Terminating, the rule and the parent name the failed
// discovery rather than a kind not served, and once the API is back kgen
// deletes the child, then the parent goes.
func TestChangeChildAPIDown(t *testing.T) {
	const group, childGroup = "apidown.example.com", "apidownchild.example.com"
	ns, remote := newNamespace(t), newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	things := serveCRD(t, gadgetCRD(childGroup, false))
	t.Cleanup(func() {
		_, _ = env.dynamic.Resource(gvr).Namespace(ns).Patch(context.Background(), "p", types.MergePatchType,
			[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	rule := gadgetRule(t, "apidown", group, fmt.Sprintf(`    namespaces: [%s]
  allowCrossNamespace: [%s]
  children:
  - id: thing
    template:
      apiVersion: %s/v1
      kind: Gadget
      metadata: {name: "${parent.metadata.name}-thing", namespace: %s}
      spec: {a: 1}
`, ns, remote, childGroup, remote))
	first := startController(t, nil, rule)
	first.waitReady(t)
	create(t, gvr, gadget(group, ns, "p", map[string]any{}))
	waitFor(t, gvr, ns, "p", hasFinalizer(true))
	waitFor(t, things, remote, "p-thing", nil)

	bringBack := takeAPIDown(t, things)
	if err := env.dynamic.Resource(gvr).Namespace(ns).Delete(t.Context(), "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The running kgen cannot delete the child: the parent says why.
	waitFor(t, gvr, ns, "p", func(p *unstructured.Unstructured) error {
		c := readyCondition(p)
		msg := fmt.Sprint(c["message"])
		if c == nil || c["status"] != "False" || !strings.Contains(msg, childGroup) || strings.Contains(msg, "not served") {
			return fmt.Errorf("Ready = %v, want False naming the unavailable %s, not a kind not served", c, childGroup)
		}
		return nil
	})
	first.stop()

	second := startController(t, nil, rule)
	second.waitRule(t, 30*time.Second, "apidown", func(s controller.RuleState) error {
		if s.Running || s.KindNotServed || !strings.Contains(s.Waiting, childGroup) {
			return fmt.Errorf("state %+v, want waiting on the failed discovery of %s, not on a kind not served", s, childGroup)
		}
		return nil
	})
	// A waiting rule finalizes its deleted parents; this one it must not.
	for range 10 {
		if p := get(t, gvr, ns, "p"); p == nil {
			t.Fatal("the parent went while the API of its child was down: the child only kgen's finalizer guarded is left behind")
		}
		time.Sleep(time.Second)
	}

	bringBack()
	waitGone(t, gvr, ns, "p")
	waitGone(t, things, remote, "p-thing")
}
