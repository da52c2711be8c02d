//go:build e2e

package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// typedStatusCRD is the CRD of a Gadget whose status keeps no unknown
// fields: its conditions, observedGeneration and, with child, a string
// field child.
func typedStatusCRD(group string, child bool) *apiextensionsv1.CustomResourceDefinition {
	crd := gadgetCRD(group, true)
	status := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"]
	status.XPreserveUnknownFields = nil
	status.Properties["touched"] = apiextensionsv1.JSONSchemaProps{Type: "string"}
	if child {
		status.Properties["child"] = apiextensionsv1.JSONSchemaProps{Type: "string"}
	}
	crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"] = status
	return crd
}

// Scenario: a rule's status fields must fit its parent's status schema. A
// Rule object with a status field the parent's CRD does not declare is not
// accepted, naming spec.status.<field>. A running rule whose parent's CRD
// later loses a status field the rule writes leaves no stale Ready on its
// parents: each says Ready False naming the field, and the Rule does not
// count it among its ready parents. The rule's other status field, which
// the schema still has, keeps following the parent.
func TestChangeStatusFieldRejected(t *testing.T) {
	const group = "statusfield.example.com"
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	ns := newNamespace(t)
	crd := typedStatusCRD(group, true)
	gvr := serveCRD(t, crd)
	startControllerWith(t, controllerOptions{RuleObjects: true})

	applyRule(t, gadgetRuleDoc("statusfield-unknown", group, "Gadget", ns+"-other", configChild("c")+"  status:\n    mode: api\n"))
	waitRuleStatus(t, "statusfield-unknown", accepted("False", "spec.status.mode", `the status schema of `+group+`/v1 Gadget has no field "mode"`, "its fields: child, conditions, observedGeneration, touched"))

	applyRule(t, gadgetRuleDoc("statusfield", group, "Gadget", ns, configChild("c")+
		"  status:\n    child: ${children.config.metadata.name}\n    touched: ${parent.spec.?touch.orValue(\"no\")}\n"))
	waitRuleStatus(t, "statusfield", accepted("True"))
	create(t, gvr, gadget(group, ns, "g", map[string]any{}))
	waitFor(t, gvr, ns, "g", func(p *unstructured.Unstructured) error {
		if c := readyCondition(p); c == nil || c["status"] != "True" {
			return fmt.Errorf("Ready = %v", c)
		}
		if err := expect(p, "no", "status", "touched"); err != nil {
			return err
		}
		return expect(p, "g", "status", "child")
	})
	waitRuleStatus(t, "statusfield", counts(1, 1))

	// The CRD loses status.child; the API server drops it from what it
	// serves once the new schema is in effect.
	updateCRD(t, crd.Name, func(cur *apiextensionsv1.CustomResourceDefinition) {
		cur.Spec = typedStatusCRD(group, false).Spec
	})
	waitFor(t, gvr, ns, "g", func(p *unstructured.Unstructured) error {
		if v, found, _ := unstructured.NestedFieldNoCopy(p.Object, "status", "child"); found {
			return fmt.Errorf("status.child = %v, want it pruned by the new schema", v)
		}
		return nil
	})
	// A change of the parent makes kgen write its status again.
	patchSpec(t, gvr, ns, "g", map[string]any{"touch": "1"})
	waitFor(t, gvr, ns, "g", func(p *unstructured.Unstructured) error {
		c := readyCondition(p)
		if c == nil || c["status"] != "False" || c["reason"] != "InvalidSpec" || c["observedGeneration"] != int64(2) {
			return fmt.Errorf("Ready = %v, want False, InvalidSpec, for generation 2", c)
		}
		if msg := fmt.Sprint(c["message"]); !strings.Contains(msg, "status.child") || strings.Contains(msg, "status.touched") {
			return fmt.Errorf("Ready message %q does not name status.child alone", msg)
		}
		return expect(p, "1", "status", "touched")
	})
	waitRuleStatus(t, "statusfield", counts(1, 0))
}

// Scenario: a status field dropped from a rule leaves the parent's status,
// whether kgen writes it with a JSON patch (conditions not keyed) or with
// a server-side apply (keyed); the rule's other field, and a field another
// writer set, stay.
func TestChangeStatusFieldRemoved(t *testing.T) {
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	startControllerWith(t, controllerOptions{RuleObjects: true})
	for _, keyed := range []bool{false, true} {
		t.Run(fmt.Sprintf("keyed=%t", keyed), func(t *testing.T) {
			group := fmt.Sprintf("statusdrop%t.example.com", keyed)
			ns := newNamespace(t)
			gvr := serveCRD(t, gadgetCRD(group, keyed))
			name := fmt.Sprintf("statusdrop-%t", keyed)
			applyRule(t, gadgetRuleDoc(name, group, "Gadget", ns, configChild("c")+
				"  status:\n    configName: ${children.config.metadata.name}\n    url: http://${parent.metadata.name}\n"))
			create(t, gvr, gadget(group, ns, "g", map[string]any{}))
			waitFor(t, gvr, ns, "g", func(p *unstructured.Unstructured) error {
				if c := readyCondition(p); c == nil || c["status"] != "True" {
					return fmt.Errorf("Ready = %v", c)
				}
				return expect(p, "http://g", "status", "url")
			})
			// Another controller's field and condition, written the way
			// it would: an update of the status it read.
			p := get(t, gvr, ns, "g")
			conditions, _, _ := unstructured.NestedSlice(p.Object, "status", "conditions")
			conditions = append(conditions, map[string]any{"type": "Synced", "status": "True", "reason": "Theirs",
				"message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"})
			_ = unstructured.SetNestedSlice(p.Object, conditions, "status", "conditions")
			_ = unstructured.SetNestedField(p.Object, "kept", "status", "theirs")
			if _, err := env.dynamic.Resource(gvr).Namespace(ns).UpdateStatus(t.Context(), p,
				metav1.UpdateOptions{FieldManager: "other-controller"}); err != nil {
				t.Fatal(err)
			}

			applyRule(t, gadgetRuleDoc(name, group, "Gadget", ns, configChild("c")+
				"  status:\n    configName: ${children.config.metadata.name}\n"))
			waitFor(t, gvr, ns, "g", func(p *unstructured.Unstructured) error {
				if v, found, _ := unstructured.NestedFieldNoCopy(p.Object, "status", "url"); found {
					return fmt.Errorf("status.url = %v, want it gone with the rule's field", v)
				}
				if err := expect(p, "g", "status", "configName"); err != nil {
					return err
				}
				if err := expect(p, "kept", "status", "theirs"); err != nil {
					return err
				}
				if c := conditionOf(p, "Synced"); c == nil || c["reason"] != "Theirs" {
					return fmt.Errorf("the other controller's condition = %v, want it kept", c)
				}
				if c := readyCondition(p); c == nil || c["status"] != "True" {
					return fmt.Errorf("Ready = %v", c)
				}
				return nil
			})
		})
	}
}

// Scenario (contract §6, rules cannot trigger themselves; §7, a changed
// rule's parents are reconciled once): a status field that reads the
// parent's status (a counter of reconciles) is written once per reconcile
// something else caused, also through a change of its rule. During the
// handover both versions of the rule watch the parents; kgen's own status
// write must be its own to both, not another writer's to one of them, or
// the counter runs until kgen backs off with StatusLoop.
func TestChangeRuleWithStatusReadingStatus(t *testing.T) {
	const group = "statuscount.example.com"
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	ns := newNamespace(t)
	gvr := serveCRD(t, gadgetCRD(group, true))
	startControllerWith(t, controllerOptions{RuleObjects: true})
	rule := func(value string) string {
		return gadgetRuleDoc("statuscount", group, "Gadget", ns, configChild(value)+
			"  status:\n    count: ${parent.?status.?count.orValue(0) + 1}\n")
	}
	applyRule(t, rule("one"))
	create(t, gvr, gadget(group, ns, "g", map[string]any{}))
	count := func() int64 {
		v, _, _ := unstructured.NestedInt64(get(t, gvr, ns, "g").Object, "status", "count")
		return v
	}
	// settled waits until the counter stayed put for 3 s, and returns it.
	settled := func() int64 {
		t.Helper()
		last, since := count(), time.Now()
		eventually(t, time.Minute, func() (bool, error) {
			if now := count(); now != last {
				last, since = now, time.Now()
			}
			return last > 0 && time.Since(since) > 3*time.Second, fmt.Errorf("count %d, status %v", last, get(t, gvr, ns, "g").Object["status"])
		}, "the counter to settle")
		return last
	}
	waitFor(t, cmGVR, ns, "g", func(o *unstructured.Unstructured) error { return expect(o, "one", "data", "value") })
	before := settled()

	applyRule(t, rule("two"))
	waitFor(t, cmGVR, ns, "g", func(o *unstructured.Unstructured) error { return expect(o, "two", "data", "value") })
	after := settled()
	// The change is reconciled once, and the child's write may bring one
	// more; a loop brings ten or more.
	if after-before > 3 {
		t.Errorf("the counter went from %d to %d through one change of the rule, want at most 3 more", before, after)
	}
	list, err := env.kube.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=g,reason=StatusLoop"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) > 0 {
		t.Errorf("kgen backed off a loop of its own: %s", list.Items[0].Message)
	}
}

// Scenario: a rule's status field reads a child that another writer
// changes five times a second, for 20 s. The parent's status follows, but
// not at the writer's rate: after more than 10 writes in a minute kgen
// writes it at most once every 5 s, the last value lands, and no Warning
// is recorded (nothing failed).
func TestChangeStatusFollowsBusyChild(t *testing.T) {
	const group = "statusfollow.example.com"
	const user = "kgen-status-follow"
	ns := newNamespace(t)
	gvr := serveCRD(t, gadgetCRD(group, true))
	rulesFile := gadgetRule(t, "statusfollow", group, configChild("one")+
		"  status:\n    other: ${children.config.data.?other.orValue(\"\")}\n")
	startControllerWith(t, controllerOptions{User: user}, rulesFile)
	create(t, gvr, gadget(group, ns, "g", map[string]any{}))
	waitFor(t, gvr, ns, "g", isReady)

	start := time.Now()
	last := ""
	cms := env.kube.CoreV1().ConfigMaps(ns)
	// What the parent says at 8 s and at 16 s: it keeps following.
	var at8, at16 int64 = -1, -1
	shown := func() int64 {
		v, _, _ := unstructured.NestedString(get(t, gvr, ns, "g").Object, "status", "other")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return -1
		}
		return n
	}
	for i := 0; time.Since(start) < 20*time.Second; i++ {
		last = fmt.Sprint(i)
		patch := fmt.Sprintf(`{"data":{"other":%q}}`, last)
		if _, err := cms.Patch(t.Context(), "g", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		switch {
		case at8 < 0 && time.Since(start) > 8*time.Second:
			at8 = shown()
		case at16 < 0 && time.Since(start) > 16*time.Second:
			at16 = shown()
		}
		time.Sleep(200 * time.Millisecond)
	}
	if at16 <= at8 {
		t.Errorf("status.other was %d at 8 s and %d at 16 s: the parent's status stopped following its child", at8, at16)
	}
	waitFor(t, gvr, ns, "g", func(o *unstructured.Unstructured) error {
		return expect(o, last, "status", "other")
	})
	statusWrites := 0
	for _, w := range writesOf(t, user, ns, start) {
		if w == "patch gadgets/status g" {
			statusWrites++
		}
	}
	t.Logf("%d status writes for %s changes of the child in 20 s", statusWrites, last)
	// 11 at once, then one every 5 s; two more for the clock's slack.
	if statusWrites > 11+4+2 {
		t.Errorf("kgen wrote the parent's status %d times in 20 s, following every change of its child", statusWrites)
	}
	list, err := env.kube.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=g,type=Warning"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		t.Errorf("Warning %s: %s", e.Reason, e.Message)
	}
}
