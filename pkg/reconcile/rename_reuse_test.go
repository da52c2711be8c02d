package reconcile

import (
	"strings"
	"testing"
)

// An id renamed ("config" to "settings", same object web-config) while
// the old id is used again by a new child that reads the renamed one: the
// new "config" waits for children.settings, which has no object until
// settings takes web-config. So settings takes it, though "config" waits,
// and config renders at the next pass; refusing it, as a92fb70 did for
// every waiting child's object (a review found), left the parent
// InvalidSpec for good.
func TestRenamedIDReusedByAChildThatReadsIt(t *testing.T) {
	h := newHarness(t, appRule)
	h.converge(appParent(nil))
	uid := h.api.get(cmGVK, "team", "web-config").GetUID()
	to := strings.Replace(appRule, "  - id: config\n    includeWhen: [\"${parent.spec.?config.orValue(true)}\"]\n    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata:\n",
		"  - id: config\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: \"${parent.metadata.name}-new\", annotations: {reads: \"${children.settings.metadata.name}\"}}}\n"+
			"  - id: settings\n    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata:\n", 1)
	if to == appRule {
		t.Fatal("the rule did not change")
	}
	h.rule = parseRule(t, to)
	for i := range 3 {
		if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
			t.Fatalf("reconcile %d: %v", i, err)
		}
	}
	if o := h.api.get(cmGVK, "team", "web-config"); o == nil || o.GetUID() != uid || o.GetLabels()[LabelChild] != "settings" {
		t.Errorf("web-config = %v, want the old object labelled settings", o)
	}
	if h.api.get(cmGVK, "team", "web-new") == nil {
		t.Error("the new config child was not created")
	}
}
