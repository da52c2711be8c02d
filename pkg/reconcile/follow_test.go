package reconcile

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// cmParentRule copies a ConfigMap parent's data into a ConfigMap child.
// Core kinds such as ConfigMap and Secret have no metadata.generation: the
// API server never sets or bumps it on them.
const cmParentRule = `apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: copy}
spec:
  parent: {apiVersion: v1, kind: ConfigMap, selector: {matchLabels: {copy: "yes"}}}
  children:
  - id: copy
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-copy"}
      data: ${parent.data}
`

// A parent of a kind without metadata.generation (ConfigMap, Secret)
// edited more than 10 times in a minute: each edit is a change of the
// parent, applied at once, and no loop is told (a review: with the
// generation standing for the parent's content, the 12th edit was held,
// with a ChildFollowSpaced Warning).
func TestChildFollowParentWithoutGenerationNotHeld(t *testing.T) {
	h := newHarness(t, cmParentRule)
	parent := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "settings", "namespace": "team", "uid": "uid-settings", "labels": map[string]any{"copy": "yes"}},
		"data":     map[string]any{"v": "0"},
	}}
	h.api.add(parent)
	reconcile := func() Result {
		t.Helper()
		p := h.api.get(cmGVK, "team", "settings")
		res, err := h.r.Reconcile(context.Background(), h.rule, fakeMappings[cmGVK], p)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	reconcile()
	for i := 1; i <= 15; i++ {
		h.now = h.now.Add(time.Second)
		p := h.api.get(cmGVK, "team", "settings")
		p.Object["data"] = map[string]any{"v": fmt.Sprint(i)} // a user's edit: no generation on a ConfigMap
		p.SetResourceVersion("")
		h.api.add(p)
		res := reconcile()
		got, _, _ := unstructured.NestedString(h.api.get(cmGVK, "team", "settings-copy").Object, "data", "v")
		if got != fmt.Sprint(i) {
			t.Fatalf("edit %d of the parent's data: child data.v = %q (RequeueAfter %v), want %d applied at once", i, got, res.RequeueAfter, i)
		}
	}
	for _, e := range h.drain() {
		if strings.Contains(e, ReasonChildFollowSpaced) {
			t.Errorf("event %q for a parent that changed each time", e)
		}
	}
}

// spacedReady is the Ready message of the parent of spacedChild.
const spacedReady = "all children are ready; child config is updated at most once every 10s, as it follows its inputs or other children more than 10 times a minute"

// spacedChild returns a parent whose child config follows its Deployment's
// status.n, after 12 changes of it 100 ms apart: the 12th update of the
// child is held (spaced), and res asks for a look when the spacing ends.
func spacedChild(t *testing.T) (h *harness, res Result) {
	t.Helper()
	follow := strings.Replace(appRule, "      data: ${parent.spec.data}\n",
		"      data: {n: \"${string(children.deploy.?status.?n.orValue(0))}\"}\n", 1)
	h = newHarness(t, follow)
	h.converge(appParent(nil))
	for i := 1; i <= 12; i++ {
		d := h.api.get(deployGVK, "team", "web")
		d.Object["status"] = map[string]any{"n": int64(i)}
		d.SetResourceVersion("")
		h.api.add(d)
		var err error
		if res, err = h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
			t.Fatal(err)
		}
		h.now = h.now.Add(100 * time.Millisecond)
	}
	return h, res
}

// While a child's updates are spaced, the parent's Ready condition stays
// True but does not claim every child applied (a review: it said "all
// children are applied and ready" while an update was held): it names the
// spaced child, and says the same whether this reconcile held an update or
// made one, so that it is not rewritten every spacing.
func TestChildFollowSpacedReady(t *testing.T) {
	h, res := spacedChild(t)
	n, _, _ := unstructured.NestedString(h.api.get(cmGVK, "team", "web-config").Object, "data", "n")
	if n == "12" || res.RequeueAfter <= 0 {
		t.Fatalf("setup: the 12th update was not held (data.n %s, RequeueAfter %v)", n, res.RequeueAfter)
	}
	want := spacedReady
	if c := h.ready(); c["status"] != "True" || c["message"] != want {
		t.Errorf("Ready = %v %q while child config is held at data.n=%s (template renders 12), want True %q", c["status"], c["message"], n, want)
	}
	// The spacing over, the held value is written: the message stays.
	h.now = h.now.Add(res.RequeueAfter)
	if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := unstructured.NestedString(h.api.get(cmGVK, "team", "web-config").Object, "data", "n"); n != "12" {
		t.Errorf("data.n = %s after the spacing, want 12", n)
	}
	if c := h.ready(); c["status"] != "True" || c["message"] != want {
		t.Errorf("Ready = %v %q after a spaced update was made, want True %q", c["status"], c["message"], want)
	}
	// What it follows goes quiet: the parent is looked at again once the
	// window has passed, and Ready no longer says the child is spaced (a
	// live check: it did, minutes after the input stopped changing).
	res, err := h.reconcile(h.api.get(appGVK, "team", "web"))
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > time.Minute {
		t.Errorf("RequeueAfter = %v while the child is spaced, want a look within the minute its updates are counted in", res.RequeueAfter)
	}
	h.now = h.now.Add(time.Minute)
	if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
		t.Fatal(err)
	}
	if c := h.ready(); c["status"] != "True" || c["message"] != "all children are applied and ready" {
		t.Errorf("Ready = %v %q a minute after the child's last change, want True, all children applied", c["status"], c["message"])
	}
}

// While a child's updates are spaced, Ready carries the spacing
// note also on a reconcile that repairs the child (someone else set a
// field back); a review found it flipped to "all children are applied and
// ready" for that one reconcile and back at the next, each a status write.
func TestSpacedNoteKeptOnRepair(t *testing.T) {
	h, res := spacedChild(t)
	h.now = h.now.Add(res.RequeueAfter)
	if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
		t.Fatal(err)
	}
	want := spacedReady
	if c := h.ready(); c["message"] != want {
		t.Fatalf("setup: Ready %q, want %q", c["message"], want)
	}
	// Someone sets the child's data back; kgen repairs it, 1 s later.
	h.now = h.now.Add(time.Second)
	cm := h.api.get(cmGVK, "team", "web-config")
	cm.Object["data"] = map[string]any{"n": "edited"}
	cm.SetResourceVersion("")
	h.api.add(cm)
	if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
		t.Fatal(err)
	}
	if n := h.api.get(cmGVK, "team", "web-config").Object["data"].(map[string]any)["n"]; n != "12" {
		t.Fatalf("setup: child not repaired (data.n %v)", n)
	}
	if c := h.ready(); c["message"] != want {
		t.Errorf("Ready %q after a repair of the still-spaced child, want %q (the next Keep reconcile says it again: a flip)", c["message"], want)
	}
	h.now = h.now.Add(time.Second)
	if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
		t.Fatal(err)
	}
	if c := h.ready(); c["message"] != want {
		t.Errorf("Ready %q at the next reconcile, want %q", c["message"], want)
	}
}
