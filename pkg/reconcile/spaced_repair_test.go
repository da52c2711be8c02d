package reconcile

import (
	"strings"
	"testing"
	"time"
)

// A review found: while a child's updates are spaced, Ready carries the spacing
// note on Keep steps, held updates and made updates (fada8d4), but not on
// a reconcile that repairs the child (someone else set a field back): the
// message flips to "all children are applied and ready" for that one
// reconcile and back to the note at the next one, each a status write.
func TestSpacedNoteKeptOnRepair(t *testing.T) {
	follow := strings.Replace(appRule, "      data: ${parent.spec.data}\n",
		"      data: {n: \"${string(children.deploy.?status.?n.orValue(0))}\"}\n", 1)
	h := newHarness(t, follow)
	h.converge(appParent(nil))
	var res Result
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
	h.now = h.now.Add(res.RequeueAfter)
	if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
		t.Fatal(err)
	}
	want := "all children are ready; child config is updated at most once every 10s, as it follows its inputs or other children more than 10 times a minute"
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
