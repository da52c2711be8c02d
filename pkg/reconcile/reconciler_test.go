package reconcile

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"kgen.dev/kgen/pkg/mapper"
	"kgen.dev/kgen/pkg/watch"
	"kgen.dev/kgen/rules"
)

// appRule is the rule of these tests: an App gets a ConfigMap (named by
// spec.cmName, included unless spec.config is false, with the labels and
// data of its spec) and a Deployment with CPU quantities the server
// normalises; its status names the ConfigMap.
const appRule = `apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: app}
spec:
  parent: {apiVersion: example.com/v1, kind: App}
  children:
  - id: config
    includeWhen: ["${parent.spec.?config.orValue(true)}"]
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: ${parent.spec.?cmName.orValue(parent.metadata.name + "-config")}
        labels: ${parent.spec.?labels.orValue({})}
      data: ${parent.spec.data}
  - id: deploy
    template:
      apiVersion: apps/v1
      kind: Deployment
      metadata: {name: "${parent.metadata.name}"}
      spec:
        replicas: ${parent.spec.replicas}
        template:
          spec:
            containers:
            - name: app
              image: ${parent.spec.image}
              resources: {requests: {cpu: 0.5}, limits: {cpu: 1}}
  status:
    configName: ${children.config.metadata.name}
`

// clusterRule gives an App a cluster-scoped child, which cannot have an
// ownerReference to it: kgen's finalizer guards it.
const clusterRule = `apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: guarded}
spec:
  parent: {apiVersion: example.com/v1, kind: App}
  children:
  - id: role
    includeWhen: ["${parent.spec.?role.orValue(true)}"]
    template:
      apiVersion: rbac.authorization.k8s.io/v1
      kind: ClusterRole
      metadata: {name: "${parent.metadata.namespace}-${parent.metadata.name}"}
      rules: []
`

func appParent(spec map[string]any) *unstructured.Unstructured {
	if spec == nil {
		spec = map[string]any{}
	}
	base := map[string]any{"image": "nginx", "replicas": int64(1), "data": map[string]any{"a": "1"}}
	for k, v := range spec {
		base[k] = v
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "App",
		"metadata": map[string]any{"name": "web", "namespace": "team", "uid": "uid-parent", "generation": int64(1)},
		"spec":     base,
	}}
	return u
}

// harness runs a Reconciler against a fakeAPI.
type harness struct {
	t      *testing.T
	api    *fakeAPI
	rule   *rules.Rule
	events *record.FakeRecorder
	r      *Reconciler
	now    time.Time
	cfg    Config
}

func newHarness(t *testing.T, ruleDoc string, mutate ...func(*Config)) *harness {
	h := &harness{t: t, api: newFakeAPI(t), rule: parseRule(t, ruleDoc), events: record.NewFakeRecorder(100),
		now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	h.cfg = Config{Client: h.api, Resources: fakeResources{}, Schemas: fakeSchemas{}, Children: storeLister{h.api},
		Writes: watch.NewWrites(), Recorder: h.events, Now: func() time.Time { return h.now },
		ParallelWrites: 1} // in order, so tests can compare the requests
	for _, m := range mutate {
		m(&h.cfg)
	}
	h.r = New(h.cfg)
	return h
}

// restart replaces the Reconciler by a new one, as a restart of kgen does:
// nothing remembered.
func (h *harness) restart() { h.r = New(h.cfg) }

// reconcile reconciles the parent as stored.
func (h *harness) reconcile(parent *unstructured.Unstructured) (Result, error) {
	h.t.Helper()
	stored := h.api.get(appGVK, parent.GetNamespace(), parent.GetName())
	if stored == nil {
		h.api.add(parent)
		stored = h.api.get(appGVK, parent.GetNamespace(), parent.GetName())
	}
	return h.r.Reconcile(context.Background(), h.rule, fakeMappings[appGVK], stored)
}

// converge reconciles until nothing is written, and fails the test if
// that takes more than a few passes.
func (h *harness) converge(parent *unstructured.Unstructured) {
	h.t.Helper()
	for range 4 {
		h.api.resetRequests()
		if _, err := h.reconcile(parent); err != nil {
			h.t.Fatalf("reconcile: %v", err)
		}
		if len(h.api.writes()) == 0 {
			h.drain()
			h.api.resetRequests()
			return
		}
	}
	h.t.Fatalf("still writing after 4 reconciles: %v", h.api.writes())
}

// holdTerminating marks an object as being deleted and held by another
// controller's finalizer, example.com/hold, and returns it.
func (h *harness) holdTerminating(gvk schema.GroupVersionKind, ns, name string) *unstructured.Unstructured {
	obj := h.api.get(gvk, ns, name)
	now := metav1.NewTime(h.now)
	obj.SetDeletionTimestamp(&now)
	obj.SetFinalizers([]string{"example.com/hold"})
	h.api.add(obj)
	return obj
}

// setSpec changes the stored parent's spec and bumps its generation.
func (h *harness) setSpec(spec map[string]any) *unstructured.Unstructured {
	h.t.Helper()
	p := h.api.get(appGVK, "team", "web")
	for k, v := range spec {
		if v == nil {
			delete(p.Object["spec"].(map[string]any), k)
			continue
		}
		p.Object["spec"].(map[string]any)[k] = v
	}
	p.SetGeneration(p.GetGeneration() + 1)
	p.SetResourceVersion("")
	h.api.add(p)
	return p
}

// drain returns the events recorded since the last drain.
func (h *harness) drain() []string {
	var out []string
	for {
		select {
		case e := <-h.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func ready(obj *unstructured.Unstructured) map[string]any {
	c, _ := findCondition(obj.Object["status"].(map[string]any))
	return c
}

func (h *harness) ready() map[string]any {
	return ready(h.api.get(appGVK, "team", "web"))
}

func TestReconcileNewParent(t *testing.T) {
	for _, tt := range []struct {
		policy EventPolicy
		events []string
	}{
		{EventsNotable, nil},
		{EventsAll, []string{"Normal Created Created configmaps team/web-config (child config)", "Normal Created Created deployments.apps team/web (child deploy)"}},
	} {
		t.Run(string(tt.policy), func(t *testing.T) {
			h := newHarness(t, appRule, func(c *Config) { c.Events = tt.policy })
			if _, err := h.reconcile(appParent(nil)); err != nil {
				t.Fatal(err)
			}
			want := []string{"patch configmaps team/web-config", "patch deployments team/web", "patch apps/status team/web"}
			if got := h.api.writes(); !slices.Equal(got, want) {
				t.Errorf("writes = %v, want %v", got, want)
			}
			if got := h.api.calls(); len(got) != len(want) {
				t.Errorf("a new parent's children cost one request each, got %v", got)
			}
			if got := h.drain(); !slices.Equal(got, tt.events) {
				t.Errorf("events = %q, want %q", got, tt.events)
			}
			cm := h.api.get(cmGVK, "team", "web-config")
			if cm == nil || cm.GetLabels()[LabelParentUID] != "uid-parent" || len(cm.GetOwnerReferences()) != 1 {
				t.Fatalf("child = %v", cm)
			}
			status := h.api.get(appGVK, "team", "web").Object["status"].(map[string]any)
			if status["configName"] != "web-config" || status["observedGeneration"] != int64(1) {
				t.Errorf("status = %v", status)
			}
			// Converged: the next reconcile sends nothing at all.
			h.api.resetRequests()
			if _, err := h.reconcile(appParent(nil)); err != nil {
				t.Fatal(err)
			}
			if got := h.api.calls(); len(got) != 0 {
				t.Errorf("a converged parent made requests: %v", got)
			}
		})
	}
}

// The create of a child is a server-side apply that can only create: the
// request carries the create-only resourceVersion, so kgen owns its fields
// with its apply from the first write on.
func TestReconcileCreateIsGuardedApply(t *testing.T) {
	h := newHarness(t, appRule)
	if _, err := h.reconcile(appParent(nil)); err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	if err := json.Unmarshal(h.api.lastBody("patch", ""), &body); err != nil {
		t.Fatal(err)
	}
	if rv := body["metadata"].(map[string]any)["resourceVersion"]; rv != createOnlyResourceVersion {
		t.Errorf("the create's resourceVersion = %v, want %s", rv, createOnlyResourceVersion)
	}
}

func TestReconcileChanges(t *testing.T) {
	tests := []struct {
		name string
		// change is made to the converged cluster.
		change func(h *harness)
		// writes are the requests that change something, in order.
		writes []string
		// events under the default policy.
		events []string
		check  func(t *testing.T, h *harness)
	}{{
		name: "a data key and a label removed from the template",
		change: func(h *harness) {
			h.setSpec(map[string]any{"data": map[string]any{"a": "1"}, "labels": map[string]any{}})
		},
		writes: []string{"patch configmaps team/web-config", "patch apps/status team/web"},
		check: func(t *testing.T, h *harness) {
			cm := h.api.get(cmGVK, "team", "web-config")
			if _, ok := cm.Object["data"].(map[string]any)["b"]; ok {
				t.Errorf("data = %v, want b gone", cm.Object["data"])
			}
			if _, ok := cm.GetLabels()["x"]; ok {
				t.Errorf("labels = %v, want x gone", cm.GetLabels())
			}
		},
	}, {
		name: "drift repaired, naming who changed it",
		change: func(h *harness) {
			cm := h.api.get(cmGVK, "team", "web-config")
			cm.Object["data"].(map[string]any)["a"] = "changed"
			cm.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "kgen", Operation: metav1.ManagedFieldsOperationApply, Time: &metav1.Time{Time: h.now}},
				{Manager: "kubectl-edit", Operation: metav1.ManagedFieldsOperationUpdate, Time: &metav1.Time{Time: h.now.Add(time.Minute)}}})
			h.api.add(cm)
		},
		writes: []string{"patch configmaps team/web-config"},
		events: []string{"Normal Repaired Repaired configmaps team/web-config (child config) (changed by kubectl-edit)"},
		check: func(t *testing.T, h *harness) {
			if got := h.api.get(cmGVK, "team", "web-config").Object["data"].(map[string]any)["a"]; got != "1" {
				t.Errorf("data.a = %v, want it set back to 1", got)
			}
		},
	}, {
		name: "drift repaired, naming the writer of the repaired field, not the latest",
		change: func(h *harness) {
			// kubectl scale writes through a subresource, with no time;
			// kubectl label came after it, and touched no field of the
			// template.
			cm := h.api.get(cmGVK, "team", "web-config")
			cm.Object["data"].(map[string]any)["a"] = "changed"
			fields := func(json string) *metav1.FieldsV1 { return &metav1.FieldsV1{Raw: []byte(json)} }
			cm.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "kgen", Operation: metav1.ManagedFieldsOperationApply, Time: &metav1.Time{Time: h.now}},
				{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "scale", FieldsV1: fields(`{"f:data":{"f:a":{}}}`)},
				{Manager: "kubectl-label", Operation: metav1.ManagedFieldsOperationUpdate, Time: &metav1.Time{Time: h.now.Add(time.Minute)},
					FieldsV1: fields(`{"f:metadata":{"f:labels":{"f:foo":{}}}}`)}})
			h.api.add(cm)
		},
		writes: []string{"patch configmaps team/web-config"},
		events: []string{"Normal Repaired Repaired configmaps team/web-config (child config) (changed by kubectl)"},
	}, {
		name: "drift repaired, naming the writer of the differing field, not a later co-owner of another",
		change: func(h *harness) {
			// helm set kgen's managed-by label to the value kgen applies after kubectl-edit
			// changed data.a: only data.a differs.
			cm := h.api.get(cmGVK, "team", "web-config")
			cm.Object["data"].(map[string]any)["a"] = "changed"
			fields := func(json string) *metav1.FieldsV1 { return &metav1.FieldsV1{Raw: []byte(json)} }
			cm.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "kgen", Operation: metav1.ManagedFieldsOperationApply, Time: &metav1.Time{Time: h.now}},
				{Manager: "kubectl-edit", Operation: metav1.ManagedFieldsOperationUpdate, Time: &metav1.Time{Time: h.now.Add(time.Minute)}, FieldsV1: fields(`{"f:data":{"f:a":{}}}`)},
				{Manager: "helm", Operation: metav1.ManagedFieldsOperationApply, Time: &metav1.Time{Time: h.now.Add(2 * time.Minute)}, FieldsV1: fields(`{"f:metadata":{"f:labels":{"f:app.kubernetes.io/managed-by":{}}}}`)}})
			h.api.add(cm)
		},
		writes: []string{"patch configmaps team/web-config"},
		events: []string{"Normal Repaired Repaired configmaps team/web-config (child config) (changed by kubectl-edit)"},
	}, {
		name: "drift repaired, blaming none of kgen's own managers",
		change: func(h *harness) {
			// A label removed leaves no entry; kgen-shard relabelled the
			// child last.
			cm := h.api.get(cmGVK, "team", "web-config")
			cm.Object["data"].(map[string]any)["a"] = "changed"
			cm.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "kgen", Operation: metav1.ManagedFieldsOperationApply, Time: &metav1.Time{Time: h.now}},
				{Manager: "kgen-shard", Operation: metav1.ManagedFieldsOperationUpdate, Time: &metav1.Time{Time: h.now.Add(time.Minute)}}})
			h.api.add(cm)
		},
		writes: []string{"patch configmaps team/web-config"},
		events: []string{"Normal Repaired Repaired configmaps team/web-config (child config)"},
	}, {
		name: "a deleted child is recreated",
		change: func(h *harness) {
			h.api.mu.Lock()
			delete(h.api.objects, objKey{gvrOf(cmGVK), "team", "web-config"})
			h.api.mu.Unlock()
		},
		writes: []string{"patch configmaps team/web-config"},
		events: []string{"Normal Repaired Repaired configmaps team/web-config (child config): it was deleted, and is created again"},
	}, {
		name: "a child the rule gained is created, not repaired",
		change: func(h *harness) {
			h.rule = parseRule(t, strings.Replace(appRule, "  status:\n", `  - id: extra
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-extra"}
  status:
`, 1))
		},
		writes: []string{"patch configmaps team/web-extra"},
	}, {
		name: "a child created once more after a restart is not taken for repaired",
		change: func(h *harness) {
			h.api.mu.Lock()
			delete(h.api.objects, objKey{gvrOf(cmGVK), "team", "web-config"})
			h.api.mu.Unlock()
			h.restart() // nothing says it existed
		},
		writes: []string{"patch configmaps team/web-config"},
	}, {
		name: "quantities the server stored canonically, and status churn, are no change",
		change: func(h *harness) {
			d := h.api.get(deployGVK, "team", "web")
			c := d.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
			c["resources"] = map[string]any{"requests": map[string]any{"cpu": "500m"}, "limits": map[string]any{"cpu": "1"}}
			c["terminationMessagePath"] = "/dev/termination-log"
			d.Object["status"] = map[string]any{"replicas": int64(1), "observedGeneration": int64(4)}
			h.api.add(d)
			h.restart() // nothing remembered: the schema alone tells
		},
	}, {
		name: "a sidecar another writer added to a keyed list is no change",
		change: func(h *harness) {
			d := h.api.get(deployGVK, "team", "web")
			spec := d.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
			spec["containers"] = append([]any{map[string]any{"name": "proxy", "image": "envoy"}}, spec["containers"].([]any)...)
			h.api.add(d)
			h.restart()
		},
	}, {
		name:   "an excluded child is pruned",
		change: func(h *harness) { h.setSpec(map[string]any{"config": false}) },
		writes: []string{"delete configmaps team/web-config", "patch apps/status team/web"},
		events: []string{"Normal Deleted Deleted configmaps team/web-config (child config): its includeWhen is false"},
	}, {
		name: "a child whose id left the rule is pruned",
		change: func(h *harness) {
			h.api.add(childOf(h, cmGVK, "team", "old", "gone", true))
		},
		writes: []string{"delete configmaps team/old"},
		events: []string{"Normal Deleted Deleted configmaps team/old (child gone): the rule has no child gone any more"},
	}, {
		name: "a label-spoofed object is never pruned",
		change: func(h *harness) {
			// Someone who may patch but not delete it gave an object of
			// theirs kgen's labels; Kubernetes allows an ownerReference
			// here and it has none, so it is not kgen's.
			h.api.add(childOf(h, cmGVK, "team", "theirs", "gone", false))
		},
		check: func(t *testing.T, h *harness) {
			if h.api.get(cmGVK, "team", "theirs") == nil {
				t.Error("the spoofed object was deleted")
			}
		},
	}, {
		name:   "a rename creates the new object before it deletes the old",
		change: func(h *harness) { h.setSpec(map[string]any{"cmName": "second"}) },
		writes: []string{"patch configmaps team/second", "delete configmaps team/web-config", "patch apps/status team/web"},
		events: []string{"Normal Deleted Deleted configmaps team/web-config (child config): the child was renamed to second"},
	}, {
		name: "a rename onto a taken name keeps the old child",
		change: func(h *harness) {
			h.api.add(&unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
				"metadata": map[string]any{"name": "taken", "namespace": "team"}, "data": map[string]any{"theirs": "x"}}})
			h.setSpec(map[string]any{"cmName": "taken"})
		},
		writes: []string{"patch configmaps team/taken", "patch apps/status team/web"},
		events: []string{"Warning Conflict child config: configmaps team/taken exists and is not managed by kgen; kgen leaves it untouched"},
		check: func(t *testing.T, h *harness) {
			if h.api.get(cmGVK, "team", "web-config") == nil {
				t.Error("the old child was deleted")
			}
			if got := h.api.get(cmGVK, "team", "taken").Object["data"]; fmt.Sprint(got) != "map[theirs:x]" {
				t.Errorf("the foreign object changed: %v", got)
			}
			if c := h.ready(); c["reason"] != ReasonConflict {
				t.Errorf("Ready = %v, want Conflict", c)
			}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, appRule)
			h.converge(appParent(map[string]any{"data": map[string]any{"a": "1", "b": "2"}, "labels": map[string]any{"x": "y"}}))
			tt.change(h)
			h.api.resetRequests()
			_, err := h.reconcile(h.api.get(appGVK, "team", "web"))
			if err != nil {
				t.Fatalf("reconcile: %v", err)
			}
			if got := h.api.writes(); !slices.Equal(got, tt.writes) {
				t.Errorf("writes = %q, want %q", got, tt.writes)
			}
			if got := h.drain(); !slices.Equal(got, tt.events) {
				t.Errorf("events = %q, want %q", got, tt.events)
			}
			if tt.check != nil {
				tt.check(t, h)
			}
		})
	}
}

// childOf makes an object marked as a child of the harness's parent, with
// or without the controller ownerReference kgen gives its children.
func childOf(h *harness, gvk schema.GroupVersionKind, ns, name, id string, owned bool) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetLabels(map[string]string{LabelManagedBy: ManagedBy, LabelRule: h.rule.Name, LabelParentUID: "uid-parent", LabelChild: id})
	u.SetAnnotations(map[string]string{AnnotationParent: "team/web"})
	if owned {
		u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "App", Name: "web", UID: "uid-parent", Controller: new(true)}})
	}
	return u
}

// A new child whose create fails leaves the old one, under its old name,
// in place; the error is retried and reported on the parent.
func TestReconcileRenameFails(t *testing.T) {
	for _, tt := range []struct {
		name     string
		err      error
		reason   string
		terminal bool
	}{
		{"server error", apierrors.NewInternalError(errors.New("etcd is down")), ReasonApplyFailed, false},
		{"forbidden", apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "second", errors.New("no")), ReasonForbidden, false},
		{"invalid", apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "second", nil), ReasonInvalid, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, appRule)
			h.converge(appParent(nil))
			h.setSpec(map[string]any{"cmName": "second"})
			h.api.PrependReactor("patch", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
				return a.(clienttesting.PatchAction).GetName() == "second", nil, tt.err
			})
			_, err := h.reconcile(h.api.get(appGVK, "team", "web"))
			if err == nil || errors.Is(err, ErrTerminal) != tt.terminal {
				t.Errorf("err = %v, want terminal %t", err, tt.terminal)
			}
			if h.api.get(cmGVK, "team", "web-config") == nil {
				t.Error("the old child was deleted before its replacement existed")
			}
			if c := h.ready(); c["reason"] != tt.reason {
				t.Errorf("Ready = %v, want reason %s", c, tt.reason)
			}
		})
	}
}

func TestReconcileOwnership(t *testing.T) {
	otherParent := func(name, uid string) *unstructured.Unstructured {
		p := appParent(nil)
		p.SetName(name)
		p.SetUID(types.UID("uid-" + uid))
		return p
	}
	ownedByOther := func(uid string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "web-config", "namespace": "team"}, "data": map[string]any{"a": "old"}}}
		u.SetLabels(map[string]string{LabelManagedBy: ManagedBy, LabelRule: "renamed-away", LabelParentUID: "uid-" + uid, LabelChild: "config"})
		u.SetAnnotations(map[string]string{AnnotationParent: "team/web"})
		u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "App", Name: "web", UID: types.UID("uid-" + uid), Controller: new(true)}})
		return u
	}
	// orphaned is an object kgen let go of, with the mark naming its parent
	// then.
	orphaned := func(name, uid string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "web-config", "namespace": "team"}, "data": map[string]any{"a": "old"}}}
		p := otherParent(name, uid)
		u.SetAnnotations(map[string]string{AnnotationOrphanedFrom: orphanedFrom(p)})
		return u
	}
	tests := []struct {
		name     string
		existing []*unstructured.Unstructured
		reason   string // of Ready, for the config child
		conflict bool
		events   []string
		adopted  bool
		// createOnly makes the child updatePolicy CreateOnly: adopted,
		// its content is kept.
		createOnly bool
	}{{
		name:     "an object that is not kgen's",
		existing: []*unstructured.Unstructured{{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "web-config", "namespace": "team"}}}},
		reason:   ReasonConflict, conflict: true,
		events: []string{"Warning Conflict child config: configmaps team/web-config exists and is not managed by kgen; kgen leaves it untouched"},
	}, {
		name: "a child of another parent that exists",
		existing: []*unstructured.Unstructured{otherParent("web-old", "old"), func() *unstructured.Unstructured {
			u := ownedByOther("old")
			u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "App", Name: "web-old", UID: "uid-old", Controller: new(true)}})
			return u
		}()},
		reason: ReasonConflict, conflict: true,
		events: []string{"Warning Conflict child config: configmaps team/web-config exists and belongs to App team/web-old, which exists; kgen leaves it untouched"},
	}, {
		// Restored from a backup: same name, new UID; the old owner is
		// gone, so the parent that renders the child now adopts it.
		name:     "a child of a parent that no longer exists",
		existing: []*unstructured.Unstructured{ownedByOther("gone")},
		events:   []string{"Normal Adopted Adopted configmaps team/web-config (child config): its owner no longer exists"},
		adopted:  true,
	}, {
		name:     "an object this parent orphaned (deletionPolicy Orphan)",
		existing: []*unstructured.Unstructured{orphaned("web", "parent")},
		events:   []string{"Normal Adopted Adopted configmaps team/web-config (child config): this parent let go of it earlier (deletionPolicy Orphan) and wants it again"},
		adopted:  true,
	}, {
		// The parent deleted and made again (GitOps): a new UID.
		name:     "an object orphaned by a parent that no longer exists",
		existing: []*unstructured.Unstructured{orphaned("web", "gone")},
		events:   []string{"Normal Adopted Adopted configmaps team/web-config (child config): its owner no longer exists"},
		adopted:  true,
	}, {
		// A generated password, which data elsewhere was set up with.
		name:       "a CreateOnly child of a parent that no longer exists",
		existing:   []*unstructured.Unstructured{ownedByOther("gone")},
		events:     []string{"Normal Adopted Adopted configmaps team/web-config (child config, updatePolicy CreateOnly): its owner no longer exists; its content is kept"},
		adopted:    true,
		createOnly: true,
	}, {
		name:       "a CreateOnly object orphaned by a parent that no longer exists",
		existing:   []*unstructured.Unstructured{orphaned("web", "gone")},
		events:     []string{"Normal Adopted Adopted configmaps team/web-config (child config, updatePolicy CreateOnly): its owner no longer exists; its content is kept"},
		adopted:    true,
		createOnly: true,
	}, {
		name:       "a CreateOnly object this parent orphaned",
		existing:   []*unstructured.Unstructured{orphaned("web", "parent")},
		events:     []string{"Normal Adopted Adopted configmaps team/web-config (child config, updatePolicy CreateOnly): this parent let go of it earlier (deletionPolicy Orphan) and wants it again; its content is kept"},
		adopted:    true,
		createOnly: true,
	}, {
		name:     "an object orphaned by another parent that exists",
		existing: []*unstructured.Unstructured{otherParent("web-old", "old"), orphaned("web-old", "old")},
		reason:   ReasonConflict, conflict: true,
		events: []string{"Warning Conflict child config: configmaps team/web-config exists and was orphaned by App team/web-old, which exists; kgen leaves it untouched"},
	}, {
		// Someone else's object whose owner is gone (waiting for the
		// garbage collector, or orphaned on purpose): not kgen's to take.
		name: "an object without kgen's labels whose owner no longer exists",
		existing: []*unstructured.Unstructured{func() *unstructured.Unstructured {
			u := ownedByOther("gone")
			u.SetLabels(nil)
			u.SetAnnotations(nil)
			return u
		}()},
		reason: ReasonConflict, conflict: true,
		events: []string{"Warning Conflict child config: configmaps team/web-config exists and is not managed by kgen; kgen leaves it untouched"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rule := appRule
			if tt.createOnly {
				rule = strings.Replace(appRule, "  - id: config\n", "  - id: config\n    updatePolicy: CreateOnly\n", 1)
			}
			h := newHarness(t, rule)
			h.api.add(tt.existing...)
			res, err := h.reconcile(appParent(nil))
			if err != nil {
				t.Fatal(err)
			}
			if (res.Conflict != "") != tt.conflict {
				t.Errorf("Result.Conflict = %q, want a conflict: %t", res.Conflict, tt.conflict)
			}
			// The controller logs it: it must say what is in the way,
			// and gets the object as read, to watch it.
			if tt.conflict {
				if want, _ := strings.CutPrefix(tt.events[len(tt.events)-1], "Warning Conflict "); res.Conflict != want {
					t.Errorf("Result.Conflict = %q, want %q", res.Conflict, want)
				}
				live := h.api.get(cmGVK, "team", "web-config")
				want := []Blocker{{GVR: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespace: "team", Name: "web-config",
					ResourceVersion: live.GetResourceVersion(), Marks: OwnershipMarks(live)}}
				if !slices.Equal(res.Blockers, want) {
					t.Errorf("Result.Blockers = %+v, want %+v", res.Blockers, want)
				}
			} else if len(res.Blockers) > 0 {
				t.Errorf("Result.Blockers = %+v without a conflict", res.Blockers)
			}
			c := h.ready()
			if tt.reason != "" && c["reason"] != tt.reason {
				t.Errorf("Ready = %v, want %s", c, tt.reason)
			}
			if got := h.drain(); !slices.Equal(got, tt.events) {
				t.Errorf("events = %q, want %q", got, tt.events)
			}
			cm := h.api.get(cmGVK, "team", "web-config")
			if got := cm.GetLabels()[LabelParentUID] == "uid-parent"; got != tt.adopted {
				t.Errorf("adopted = %t, want %t (labels %v)", got, tt.adopted, cm.GetLabels())
			}
			if tt.adopted && (len(cm.GetOwnerReferences()) != 1 || cm.GetOwnerReferences()[0].UID != "uid-parent" || cm.GetUID() != "uid-configmap-web-config") {
				t.Errorf("adopted child: uid %s, ownerReferences %v", cm.GetUID(), cm.GetOwnerReferences())
			}
			if a, _, _ := unstructured.NestedString(cm.Object, "data", "a"); tt.adopted && (a == "old") != tt.createOnly {
				t.Errorf("adopted child's data.a = %q (CreateOnly %t)", a, tt.createOnly)
			}
			if _, marked := cm.GetAnnotations()[AnnotationOrphanedFrom]; tt.adopted && marked {
				t.Errorf("adopted child keeps the orphaned-from mark: %v", cm.GetAnnotations())
			}
			if tt.adopted && cm.GetLabels()[LabelRule] != "app" {
				t.Errorf("adopted child's labels: %v", cm.GetLabels())
			}
			if tt.adopted && tt.createOnly {
				// Adopted, it is the parent's child, and kept.
				h.drain()
				h.api.resetRequests()
				if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
					t.Fatal(err)
				}
				for _, call := range h.api.calls() {
					if strings.HasSuffix(call, "configmaps team/web-config") {
						t.Errorf("the adopted CreateOnly child was written again: %q", h.api.calls())
					}
				}
			}
		})
	}
}

// A child with deletionPolicy Orphan that kgen let go of, and that its
// parent renders again, is taken back: the same object, kgen's marks again,
// an Adopted event, and no Conflict.
func TestReconcileOrphanTakenBack(t *testing.T) {
	h := newHarness(t, strings.Replace(appRule, "  - id: config\n", "  - id: config\n    deletionPolicy: Orphan\n", 1))
	h.converge(appParent(nil))
	uid := h.api.get(cmGVK, "team", "web-config").GetUID()

	h.setSpec(map[string]any{"config": false})
	if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
		t.Fatal(err)
	}
	cm := h.api.get(cmGVK, "team", "web-config")
	if cm == nil || cm.GetLabels()[LabelManagedBy] != "" || cm.GetLabels()[LabelParentUID] != "" {
		t.Fatalf("orphaned child = %v, want it kept without kgen's labels", cm)
	}
	from, ok := parseOrphanedFrom(cm)
	if want := (orphanRef{APIVersion: "example.com/v1", Kind: "App", Namespace: "team", Name: "web", UID: "uid-parent"}); !ok || from != want {
		t.Errorf("orphaned-from = %+v (%t), want %+v", from, ok, want)
	}
	h.drain()

	h.setSpec(map[string]any{"config": true})
	res, err := h.reconcile(h.api.get(appGVK, "team", "web"))
	if err != nil || res.Conflict != "" {
		t.Fatalf("reconcile: %v, conflict %q", err, res.Conflict)
	}
	cm = h.api.get(cmGVK, "team", "web-config")
	if cm.GetUID() != uid || cm.GetLabels()[LabelParentUID] != "uid-parent" || cm.GetLabels()[LabelManagedBy] != ManagedBy {
		t.Errorf("child taken back: uid %s (was %s), labels %v", cm.GetUID(), uid, cm.GetLabels())
	}
	want := "Normal Adopted Adopted configmaps team/web-config (child config): this parent let go of it earlier (deletionPolicy Orphan) and wants it again"
	if got := h.drain(); !slices.Contains(got, want) {
		t.Errorf("events = %q, want %q", got, want)
	}
	if c := h.ready(); c["reason"] == ReasonConflict {
		t.Errorf("Ready = %v", c)
	}
}

// A child kgen created whose create response the cache has not shown yet
// is found by its name and marks, not created twice; one that the cache
// does not hold at all is read once after the create conflicts.
func TestReconcileCacheBehind(t *testing.T) {
	h := newHarness(t, appRule)
	h.converge(appParent(nil))
	h.cfg.Children = emptyLister{}
	h.restart()
	if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
		t.Fatal(err)
	}
	want := []string{"patch configmaps team/web-config", "get configmaps team/web-config", "patch deployments team/web", "get deployments team/web"}
	if got := h.api.calls(); !slices.Equal(got, want) {
		t.Errorf("calls = %q, want %q", got, want)
	}
}

type emptyLister struct{}

func (emptyLister) Children(string, types.UID) []*unstructured.Unstructured { return nil }

func TestReconcileErrors(t *testing.T) {
	tests := []struct {
		name     string
		rule     string // appRule when empty
		atomic   bool   // the parent's conditions are not keyed: a JSON patch
		parent   map[string]any
		inject   func(h *harness)
		terminal bool
		reason   string
		says     string // words of the Ready message
	}{{
		// The finalizer's write changes the parent's resource version,
		// which the status write then tests; a failure for good left
		// the parent with no Ready condition.
		name:   "the API server rejects a child while the finalizer is added",
		rule:   strings.Replace(appRule, "  - id: config\n", "  - id: config\n    deletionPolicy: Orphan\n", 1),
		atomic: true,
		inject: func(h *harness) {
			h.api.PrependReactor("patch", "deployments", func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "Deployment"}, "web", nil)
			})
		},
		terminal: true, reason: ReasonInvalid,
	}, {
		name:     "the parent's data does not render",
		parent:   map[string]any{"replicas": nil},
		terminal: true, reason: ReasonInvalid,
	}, {
		name: "the API server rejects a child",
		inject: func(h *harness) {
			h.api.PrependReactor("patch", "deployments", func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "Deployment"}, "web", nil)
			})
		},
		terminal: true, reason: ReasonInvalid,
	}, {
		// A value that does not fit the kind's schema (a number where a
		// string goes): a 500 the API server gives again for the same
		// object, so the parent's spec is invalid, not a failure to retry.
		name: "the API server cannot type a child's apply",
		inject: func(h *harness) {
			h.api.PrependReactor("patch", "deployments", func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 500,
					Message: "failed to create typed patch object (team/web; apps/v1, Kind=Deployment): .spec.replicas: expected numeric (int or float), got &value.valueUnstructured{Value:\"two\"}"}}
			})
		},
		terminal: true, reason: ReasonInvalid,
		says: `child deploy: create deployments.apps team/web: .spec.replicas: expected numeric (int or float), got "two" (its template: rules.yaml:`,
	}, {
		name: "kgen may not write a child",
		inject: func(h *harness) {
			h.api.PrependReactor("patch", "deployments", func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "web", errors.New("RBAC"))
			})
		},
		reason: ReasonForbidden,
	}, {
		name: "the status write fails",
		inject: func(h *harness) {
			h.api.PrependReactor("patch", "apps", func(a clienttesting.Action) (bool, runtime.Object, error) {
				return a.GetSubresource() == "status", nil, apierrors.NewServiceUnavailable("busy")
			})
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, cmp.Or(tt.rule, appRule), func(c *Config) { c.Schemas = fakeSchemas{atomicConditions: tt.atomic} })
			p := appParent(nil)
			for k, v := range tt.parent {
				if v == nil {
					delete(p.Object["spec"].(map[string]any), k)
				}
			}
			if tt.inject != nil {
				tt.inject(h)
			}
			_, err := h.reconcile(p)
			if err == nil {
				t.Fatal("no error")
			}
			if errors.Is(err, ErrTerminal) != tt.terminal {
				t.Errorf("err = %v; terminal %t, want %t", err, errors.Is(err, ErrTerminal), tt.terminal)
			}
			if tt.reason != "" {
				if c := h.ready(); c["reason"] != tt.reason || !strings.Contains(fmt.Sprint(c["message"]), tt.says) {
					t.Errorf("Ready = %v, want reason %s saying %q", c, tt.reason, tt.says)
				}
			}
		})
	}
}

func TestReconcileFinalizer(t *testing.T) {
	h := newHarness(t, clusterRule)
	if _, err := h.reconcile(appParent(nil)); err != nil {
		t.Fatal(err)
	}
	want := []string{"patch apps team/web", "patch clusterroles team-web", "patch apps/status team/web"}
	if got := h.api.writes(); !slices.Equal(got, want) {
		t.Errorf("writes = %q, want the finalizer first: %q", got, want)
	}
	if p := h.api.get(appGVK, "team", "web"); !slices.Contains(p.GetFinalizers(), Finalizer) {
		t.Fatalf("finalizers = %v", p.GetFinalizers())
	}

	t.Run("released once no child needs it", func(t *testing.T) {
		// A prune that fails keeps the finalizer: the child still needs
		// it.
		failing := true
		h.api.PrependReactor("delete", "clusterroles", func(clienttesting.Action) (bool, runtime.Object, error) {
			if failing {
				return true, nil, apierrors.NewServiceUnavailable("the server is currently unable to handle the request")
			}
			return false, nil, nil
		})
		h.setSpec(map[string]any{"role": false})
		if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err == nil {
			t.Fatal("a failed prune is no error")
		}
		if p := h.api.get(appGVK, "team", "web"); !slices.Contains(p.GetFinalizers(), Finalizer) {
			t.Fatalf("finalizers = %v: kgen's went while its child could not be pruned", p.GetFinalizers())
		}
		failing = false
		h.api.resetRequests()
		if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
			t.Fatal(err)
		}
		// The same reconcile removes the finalizer: no later one would,
		// as nothing changes any more.
		want := []string{"delete clusterroles team-web", "patch apps team/web"}
		if got := h.api.writes(); len(got) < 2 || !slices.Equal(got[:2], want) {
			t.Errorf("writes = %q, want the guarded child pruned, then the finalizer removed: %q", got, want)
		}
		if p := h.api.get(appGVK, "team", "web"); slices.Contains(p.GetFinalizers(), Finalizer) {
			t.Errorf("finalizers = %v, want kgen's removed", p.GetFinalizers())
		}
		h.converge(h.api.get(appGVK, "team", "web"))
		h.setSpec(map[string]any{"role": true})
		h.converge(h.api.get(appGVK, "team", "web"))
	})

	t.Run("a deleted parent's guarded children go, then the finalizer", func(t *testing.T) {
		p := h.api.get(appGVK, "team", "web")
		p.SetFinalizers(append(p.GetFinalizers(), "other.example.com/keep"))
		now := metav1.NewTime(h.now)
		p.SetDeletionTimestamp(&now)
		h.api.add(p)
		h.api.resetRequests()
		if _, err := h.reconcile(p); err != nil {
			t.Fatal(err)
		}
		if got := h.api.writes(); !slices.Equal(got, []string{"delete clusterroles team-web"}) {
			t.Errorf("writes = %q, want only the guarded child deleted", got)
		}
		if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
			t.Fatal(err)
		}
		if got := h.api.get(appGVK, "team", "web").GetFinalizers(); !slices.Equal(got, []string{"other.example.com/keep"}) {
			t.Errorf("finalizers = %v, want only the other controller's", got)
		}
	})
}

// A child whose deletionPolicy changes from Orphan to Delete gets its
// ownerReference back, and the finalizer that guarded it goes in the same
// reconcile (no later reconcile would come: nothing else changes). Back to
// Orphan, the ownerReference goes and the finalizer comes first.
func TestFinalizerFollowsDeletionPolicy(t *testing.T) {
	orphan := strings.Replace(appRule, "  - id: config\n", "  - id: config\n    deletionPolicy: Orphan\n", 1)
	h := newHarness(t, orphan)
	h.converge(appParent(nil))
	owned := func() bool { return hasOwner(h.api.get(cmGVK, "team", "web-config"), "uid-parent") }
	finalized := func() bool { return slices.Contains(h.api.get(appGVK, "team", "web").GetFinalizers(), Finalizer) }
	if owned() || !finalized() {
		t.Fatalf("Orphan: ownerReference %t, finalizer %t; want none and kgen's", owned(), finalized())
	}

	h.rule = parseRule(t, appRule)
	if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
		t.Fatal(err)
	}
	if !owned() || finalized() {
		t.Errorf("Delete: ownerReference %t, finalizer %t; want the ownerReference and no finalizer", owned(), finalized())
	}
	h.converge(h.api.get(appGVK, "team", "web"))

	h.rule = parseRule(t, orphan)
	h.api.resetRequests()
	if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
		t.Fatal(err)
	}
	if got := h.api.writes(); len(got) == 0 || got[0] != "patch apps team/web" {
		t.Errorf("writes = %q, want the finalizer first", got)
	}
	if owned() || !finalized() {
		t.Errorf("Orphan again: ownerReference %t, finalizer %t; want none and kgen's", owned(), finalized())
	}
}

// A cluster-scoped child whose kind changes to a namespaced one that waits
// for another child: the old object is kept (left as it is), and only the
// finalizer guards it, so the finalizer stays, and no reconcile removes
// and adds it again (a review found a7a3612 did).
func TestFinalizerKeptForOldKindWhileItsReplacementWaits(t *testing.T) {
	h := newHarness(t, clusterRule)
	h.converge(appParent(nil))
	if p := h.api.get(appGVK, "team", "web"); !slices.Contains(p.GetFinalizers(), Finalizer) {
		t.Fatalf("finalizers = %v", p.GetFinalizers())
	}
	to := strings.Replace(clusterRule, "      apiVersion: rbac.authorization.k8s.io/v1\n      kind: ClusterRole\n      metadata: {name: \"${parent.metadata.namespace}-${parent.metadata.name}\"}\n      rules: []\n",
		"      apiVersion: v1\n      kind: Secret\n      metadata: {name: \"${children.extra.metadata.name + '-s'}\"}\n  - id: extra\n    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {name: extra}\n", 1)
	if to == clusterRule {
		t.Fatal("rule unchanged")
	}
	h.rule = parseRule(t, to)
	h.api.PrependReactor("patch", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.(clienttesting.PatchAction).GetName() == "extra" {
			return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "extra", nil)
		}
		return false, nil, nil
	})
	for i := range 3 {
		h.api.resetRequests()
		_, err := h.reconcile(h.api.get(appGVK, "team", "web"))
		t.Logf("reconcile %d: err=%v writes=%q", i, err, h.api.writes())
		if h.api.get(crGVK, "", "team-web") == nil {
			t.Fatal("the ClusterRole is gone")
		}
		if got := h.api.writes(); slices.Contains(got, "patch apps team/web") {
			t.Errorf("reconcile %d: writes = %q: the finalizer was written", i, got)
		}
		if p := h.api.get(appGVK, "team", "web"); !slices.Contains(p.GetFinalizers(), Finalizer) {
			t.Errorf("reconcile %d: finalizers = %v: kgen's removed while the cluster-scoped ClusterRole (no ownerReference) still exists", i, p.GetFinalizers())
		}
	}
}

// An apply refused as invalid because of what another writer set in the
// live object (an entry of a keyed list whose key it changed, which the
// apply keeps as that writer's, clashing with the template's) is a
// Conflict naming that writer, not an invalid template; an apply refused
// where no other writer has fields is the template's, as before.
func TestApplyClashesWithAnotherWriter(t *testing.T) {
	invalid := apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "Deployment"}, "web", field.ErrorList{
		field.Duplicate(field.NewPath("spec", "template", "spec", "containers").Index(1).Child("name"), "app")})
	for _, tt := range []struct {
		name     string
		other    string // a manager with fields in the containers, if any
		conflict bool
	}{
		{name: "another writer's entry", other: "kubectl-patch", conflict: true},
		{name: "no other writer there", other: ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, appRule)
			h.converge(appParent(nil))
			d := h.api.get(deployGVK, "team", "web")
			if tt.other != "" {
				d.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: tt.other, Operation: metav1.ManagedFieldsOperationUpdate,
					FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"other\"}":{".":{},"f:name":{}}}}}}}`)}}})
			}
			// A field of the Deployment drifted: kgen repairs it.
			_ = unstructured.SetNestedField(d.Object, int64(5), "spec", "replicas")
			h.api.add(d)
			h.api.PrependReactor("patch", "deployments", func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, invalid
			})
			res, err := h.reconcile(h.api.get(appGVK, "team", "web"))
			c := h.ready()
			if !tt.conflict {
				if err == nil || c["reason"] != ReasonInvalid || !strings.Contains(fmt.Sprint(c["message"]), "(its template: ") {
					t.Errorf("reconcile: %v, Ready %v; want the template's error", err, c)
				}
				return
			}
			if err != nil {
				t.Fatalf("reconcile: %v; want a Conflict, not an error", err)
			}
			want := "the live object's spec.template.spec.containers holds what kubectl-patch set, which kgen does not remove"
			if c["reason"] != ReasonConflict || !strings.Contains(fmt.Sprint(c["message"]), want) || !strings.Contains(res.Conflict, want) {
				t.Errorf("Ready = %v, Result.Conflict %q; want a Conflict saying %q", c, res.Conflict, want)
			}
			if evs := h.drain(); !slices.ContainsFunc(evs, func(e string) bool { return strings.HasPrefix(e, "Warning Conflict ") }) {
				t.Errorf("events = %q, want a Warning Conflict", evs)
			}
		})
	}
}

// A parent that left every rule (relabelled) is released: kgen's finalizer
// goes, its children stay.
func TestRelease(t *testing.T) {
	h := newHarness(t, clusterRule)
	h.converge(appParent(nil))
	p := h.api.get(appGVK, "team", "web")
	if err := h.r.Release(context.Background(), h.rule, fakeMappings[appGVK], p, storeLister{h.api}.Children("", "uid-parent")); err != nil {
		t.Fatal(err)
	}
	if got := h.api.get(appGVK, "team", "web").GetFinalizers(); len(got) != 0 {
		t.Errorf("finalizers = %v", got)
	}
	if h.api.get(crGVK, "", "team-web") == nil {
		t.Error("a released parent's child was deleted")
	}
}

// A release that finds the parent gone, or another object of its name
// (another rule of its kind released it first, and it was being deleted),
// is done, not a failure counted against the rule: the apply pinned to the
// parent's UID is refused, and a read shows why. A refusal while the
// parent is still there is a failure.
func TestReleaseOfAParentThatWent(t *testing.T) {
	for _, tc := range []struct {
		name    string
		replace bool // another object of its name, else none
		wantErr bool
	}{{name: "gone"}, {name: "another object of its name", replace: true}, {name: "still there", wantErr: true}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, clusterRule)
			h.converge(appParent(nil))
			p := h.api.get(appGVK, "team", "web")
			switch {
			case tc.replace:
				other := p.DeepCopy()
				other.SetUID("uid-another")
				h.api.add(other)
			case !tc.wantErr:
				if err := h.api.Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "apps"}).Namespace("team").Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			h.api.PrependReactor("patch", "apps", func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "example.com", Resource: "apps"}, "web", errors.New("uid mismatch"))
			})
			err := h.r.Release(context.Background(), h.rule, fakeMappings[appGVK], p, nil)
			if (err != nil) != tc.wantErr {
				t.Errorf("Release() = %v, want an error: %v", err, tc.wantErr)
			}
		})
	}
}

// kgen writes only its own part of the status: where conditions are keyed
// by type it applies only its Ready condition; where they are not, a JSON
// patch replaces only that condition, guarded by the resourceVersion read.
func TestStatusWritesOnlyReady(t *testing.T) {
	other := map[string]any{"type": "Synced", "status": "True", "reason": "Other", "message": "theirs", "lastTransitionTime": "2026-01-01T00:00:00Z"}
	for _, atomic := range []bool{false, true} {
		t.Run(fmt.Sprintf("atomic=%t", atomic), func(t *testing.T) {
			h := newHarness(t, appRule, func(c *Config) { c.Schemas = fakeSchemas{atomicConditions: atomic} })
			p := appParent(nil)
			p.Object["status"] = map[string]any{"conditions": []any{other}}
			if _, err := h.reconcile(p); err != nil {
				t.Fatal(err)
			}
			body := string(h.api.lastBody("patch", "status"))
			if strings.Contains(body, "Synced") {
				t.Errorf("kgen's status write carries another controller's condition: %s", body)
			}
			if atomic && (!strings.Contains(body, `"op":"test","path":"/metadata/resourceVersion"`) || !strings.Contains(body, `"path":"/status/conditions/-"`)) {
				t.Errorf("JSON patch = %s", body)
			}
			conds := h.api.get(appGVK, "team", "web").Object["status"].(map[string]any)["conditions"].([]any)
			if len(conds) != 2 || fmt.Sprint(conds[0]) != fmt.Sprint(other) {
				t.Errorf("conditions = %v, want Synced untouched and Ready added", conds)
			}
		})
	}
}

// Another writer that keeps changing kgen's Ready condition is not fought
// in a loop: after a few rounds kgen reports it and stops writing for a
// while.
func TestStatusContended(t *testing.T) {
	h := newHarness(t, appRule)
	h.converge(appParent(nil))
	writes := 0
	for round := range 6 {
		p := h.api.get(appGVK, "team", "web")
		status := p.Object["status"].(map[string]any)
		_, i := findCondition(status)
		status["conditions"].([]any)[i].(map[string]any)["status"] = "Unknown"
		status["conditions"].([]any)[i].(map[string]any)["reason"] = fmt.Sprint("TheirsRound", round)
		h.api.add(p)
		h.api.resetRequests()
		res, err := h.reconcile(p)
		if err != nil {
			t.Fatal(err)
		}
		writes += len(h.api.writes())
		h.now = h.now.Add(10 * time.Second)
		if round == 5 && res.RequeueAfter == 0 {
			t.Errorf("round %d: no backoff", round)
		}
	}
	if writes != 2 {
		t.Errorf("kgen rewrote its status %d times against another writer, want 2 before backing off", writes)
	}
	if got := h.drain(); len(got) != 1 || !strings.HasPrefix(got[0], "Warning StatusContended") {
		t.Errorf("events = %q, want one StatusContended warning", got)
	}
}

// A status that changes with every write of itself is backed off after
// more than 10 writes in a minute with nothing else changed.
func TestStatusLoop(t *testing.T) {
	loop := strings.Replace(appRule, "    configName: ${children.config.metadata.name}\n",
		"    configName: ${children.config.metadata.name}\n    count: ${parent.status.?count.orValue(0) + 1}\n", 1)
	h := newHarness(t, loop)
	h.api.add(appParent(nil))
	// Two reconciles: children created, then their status read.
	for range 2 {
		if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
			t.Fatal(err)
		}
	}
	statusWrites := 0
	for range 20 {
		h.api.resetRequests()
		res, err := h.reconcile(h.api.get(appGVK, "team", "web"))
		if err != nil {
			t.Fatal(err)
		}
		statusWrites += len(h.api.writes())
		h.now = h.now.Add(time.Second)
		if res.RequeueAfter > 0 {
			break
		}
	}
	if statusWrites != loopAfter {
		t.Errorf("status writes before backing off = %d, want %d", statusWrites, loopAfter)
	}
	if got := h.drain(); len(got) != 1 || !strings.HasPrefix(got[0], "Warning StatusLoop") {
		t.Errorf("events = %q, want one StatusLoop warning", got)
	}

	// Within the backoff, the same rule writes nothing; the rule fixed
	// writes at once (a live audit: a fixed rule's parents kept their
	// looping status until each backoff ran out, up to minutes).
	h.api.resetRequests()
	if res, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil || res.RequeueAfter == 0 || len(h.api.writes()) > 0 {
		t.Errorf("within the backoff: %+v, %v, writes %q", res, err, h.api.writes())
	}
	// A child changed by someone else (its controller, say) does not
	// end it: such a child would end every backoff of a real loop.
	cm := h.api.get(cmGVK, "team", "web-config")
	cm.SetResourceVersion(cm.GetResourceVersion() + "1")
	h.api.add(cm)
	h.api.resetRequests()
	if res, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil || res.RequeueAfter == 0 || len(h.api.writes()) > 0 {
		t.Errorf("within the backoff, after a child changed: %+v, %v, writes %q", res, err, h.api.writes())
	}
	h.rule = parseRule(t, strings.Replace(loop, "${parent.status.?count.orValue(0) + 1}", "${0}", 1))
	h.api.resetRequests()
	if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
		t.Fatal(err)
	}
	if len(h.api.writes()) != 1 {
		t.Errorf("the fixed rule's status was not written within the backoff: writes %q", h.api.writes())
	}
	if status := h.api.get(appGVK, "team", "web").Object["status"].(map[string]any); status["count"] != int64(0) {
		t.Errorf("status.count = %v after the rule was fixed, want 0", status["count"])
	}
}

// A child an older kgen created with POST has its fields owned by an
// Update entry: before kgen first applies it, that ownership moves to
// kgen's apply entry, so a field the template drops is removed.
func TestReconcileUpgradesOwnership(t *testing.T) {
	h := newHarness(t, appRule)
	h.converge(appParent(nil))
	cm := h.api.get(cmGVK, "team", "web-config")
	cm.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "kgen", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{"f:a":{}}}`)}}})
	h.api.add(cm)
	h.setSpec(map[string]any{"data": map[string]any{"a": "2"}})
	h.api.resetRequests()
	if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
		t.Fatal(err)
	}
	want := []string{"get configmaps team/web-config", "patch configmaps team/web-config", "patch configmaps team/web-config", "patch apps/status team/web"}
	if got := h.api.calls(); !slices.Equal(got, want) {
		t.Errorf("calls = %q, want %q", got, want)
	}
}

// What the server made of kgen's last write of a template is remembered: a
// normalisation the schema does not explain costs no second write.
func TestReconcileRemembersNormalisation(t *testing.T) {
	h := newHarness(t, appRule)
	h.api.PrependReactor("patch", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
		// As a mutating webhook would: after kgen's apply, the server
		// spells a value differently.
		handled, obj, err := h.api.react(a)
		if u, ok := obj.(*unstructured.Unstructured); ok && err == nil {
			u.Object["data"].(map[string]any)["a"] = "one"
			h.api.add(u)
		}
		return handled, obj, err
	})
	if _, err := h.reconcile(appParent(nil)); err != nil {
		t.Fatal(err)
	}
	h.api.resetRequests()
	if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
		t.Fatal(err)
	}
	if got := h.api.writes(); len(got) != 0 {
		t.Errorf("writes = %q, want none for a difference the server made", got)
	}
}

// A parent's children are written together: every write happens, whatever
// their order.
func TestReconcileWritesChildrenTogether(t *testing.T) {
	h := newHarness(t, appRule, func(c *Config) { c.ParallelWrites = 4 })
	if _, err := h.reconcile(appParent(nil)); err != nil {
		t.Fatal(err)
	}
	got := h.api.writes()
	slices.Sort(got)
	want := []string{"patch apps/status team/web", "patch configmaps team/web-config", "patch deployments team/web"}
	if !slices.Equal(got, want) {
		t.Errorf("writes = %q, want %q", got, want)
	}
}

// A rule with spec.serviceAccount writes its children as that account, and
// reads them as kgen: the account needs only the write verbs. Here the
// account may not get ConfigMaps; an object found under the child's name
// (a create conflict) is read as kgen and adopted all the same.
func TestReconcileServiceAccountReadsAsKgen(t *testing.T) {
	var asAccount []string
	h := newHarness(t, strings.Replace(appRule, "spec:\n", "spec:\n  serviceAccount: {namespace: team, name: deployer}\n", 1), func(c *Config) {
		c.Impersonate = func(sa rules.ServiceAccount) (dynamic.Interface, error) {
			imp := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
			imp.PrependReactor("*", "*", c.Client.(*fakeAPI).react)
			imp.PrependReactor("*", "*", func(action clienttesting.Action) (bool, runtime.Object, error) {
				asAccount = append(asAccount, action.GetVerb()+" "+action.GetResource().Resource)
				if action.GetVerb() == "get" {
					return true, nil, apierrors.NewForbidden(action.GetResource().GroupResource(), "", errors.New("no get for "+sa.Name))
				}
				return false, nil, nil
			})
			return imp, nil
		}
	})
	gone := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "web-config", "namespace": "team"}, "data": map[string]any{"a": "old"}}}
	gone.SetLabels(map[string]string{LabelManagedBy: ManagedBy, LabelRule: "app", LabelParentUID: "uid-gone", LabelChild: "config"})
	gone.SetAnnotations(map[string]string{AnnotationParent: "team/web"})
	gone.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "App", Name: "web", UID: "uid-gone", Controller: new(true)}})
	h.api.add(gone)
	if _, err := h.reconcile(appParent(nil)); err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(asAccount, func(s string) bool { return strings.HasPrefix(s, "get ") }) {
		t.Errorf("requests as the ServiceAccount = %v, want writes only", asAccount)
	}
	if !slices.Contains(asAccount, "patch configmaps") {
		t.Errorf("requests as the ServiceAccount = %v, want the ConfigMap applied as it", asAccount)
	}
	if cm := h.api.get(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, "team", "web-config"); cm.GetLabels()[LabelParentUID] != "uid-parent" {
		t.Errorf("the ConfigMap was not adopted: labels %v", cm.GetLabels())
	}
}

// A child that reads another child is rendered once that one is observed.
// The watch event of kgen's own create wakes no parent, so the reconcile
// that creates the first asks to be run again (Result.Again); once the
// second exists, nothing waits and nothing asks.
func TestReconcileAgainForDependentChild(t *testing.T) {
	dependent := strings.Replace(appRule, "  - id: deploy\n    template:\n      apiVersion: apps/v1\n      kind: Deployment\n      metadata: {name: \"${parent.metadata.name}\"}\n",
		"  - id: deploy\n    template:\n      apiVersion: apps/v1\n      kind: Deployment\n      metadata: {name: \"${parent.metadata.name}\", annotations: {config: \"${children.config.metadata.name}\"}}\n", 1)
	if dependent == appRule {
		t.Fatal("the test's rule did not change")
	}
	h := newHarness(t, dependent)
	res, err := h.reconcile(appParent(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Again {
		t.Error("Again = false after creating the child another waits for")
	}
	if h.api.get(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, "team", "web") != nil {
		t.Fatal("the dependent child was created before the child it reads was observed")
	}
	res, err = h.reconcile(appParent(nil))
	if err != nil {
		t.Fatal(err)
	}
	if res.Again {
		t.Error("Again = true once nothing waits")
	}
	if h.api.get(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, "team", "web") == nil {
		t.Error("the dependent child was not created once the child it reads was observed")
	}
	// Converged: no reconcile asks for another.
	if res, err = h.reconcile(appParent(nil)); err != nil || res.Again {
		t.Errorf("converged: Again = %v, err = %v", res.Again, err)
	}
}

// unavailableResources maps the kinds of these tests but one, whose API is
// down (mapper.ErrUnavailable).
type unavailableResources struct{ down schema.GroupVersionKind }

func (u unavailableResources) ResourceFor(gvk schema.GroupVersionKind) (mapper.Mapping, error) {
	if gvk == u.down {
		return mapper.Mapping{}, &mapper.UnavailableError{Ref: gvk.String(), Failed: map[schema.GroupVersion]error{
			gvk.GroupVersion(): errors.New("stale GroupVersion discovery"),
		}}
	}
	return fakeResources{}.ResourceFor(gvk)
}

// A deleted parent whose guarded child cannot be deleted keeps kgen's
// finalizer, and its Ready condition and a Warning event say why; once the
// delete succeeds, the finalizer goes.
func TestFinalizeDeleteFails(t *testing.T) {
	for _, tt := range []struct {
		name string
		// fail makes the delete of the child fail, until the returned
		// func is called.
		fail   func(h *harness) (heal func())
		says   string
		reason string
	}{{
		name: "the API answers 503",
		fail: func(h *harness) func() {
			failing := true
			h.api.PrependReactor("delete", "clusterroles", func(clienttesting.Action) (bool, runtime.Object, error) {
				if failing {
					return true, nil, apierrors.NewServiceUnavailable("the server is currently unable to handle the request")
				}
				return false, nil, nil
			})
			return func() { failing = false }
		},
		says:   "delete clusterroles.rbac.authorization.k8s.io team-web: the server is currently unable to handle the request",
		reason: ReasonDeleteFailed,
	}, {
		name: "the rule's ServiceAccount may not delete it",
		fail: func(h *harness) func() {
			failing := true
			h.api.PrependReactor("delete", "clusterroles", func(clienttesting.Action) (bool, runtime.Object, error) {
				if failing {
					return true, nil, apierrors.NewForbidden(gvrOf(crGVK).GroupResource(), "team-web", errors.New(`User "system:serviceaccount:team:writer" cannot delete resource`))
				}
				return false, nil, nil
			})
			return func() { failing = false }
		},
		says:   `User "system:serviceaccount:team:writer" cannot delete resource`,
		reason: ReasonForbidden,
	}, {
		name: "the kind's API is unavailable in discovery",
		fail: func(h *harness) func() {
			h.cfg.Resources = unavailableResources{down: crGVK}
			h.r = New(h.cfg)
			return func() { h.cfg.Resources = fakeResources{}; h.r = New(h.cfg) }
		},
		says:   "delete ClusterRole team-web (child role):",
		reason: ReasonDeleteFailed,
	}} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, clusterRule)
			h.converge(appParent(nil))
			p := h.api.get(appGVK, "team", "web")
			now := metav1.NewTime(h.now)
			p.SetDeletionTimestamp(&now)
			h.api.add(p)
			heal := tt.fail(h)
			for range 2 {
				if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err == nil || !strings.Contains(err.Error(), tt.says) {
					t.Fatalf("reconcile error = %v, want one saying %q", err, tt.says)
				}
			}
			p = h.api.get(appGVK, "team", "web")
			if !slices.Contains(p.GetFinalizers(), Finalizer) {
				t.Fatalf("finalizers = %v: kgen's went while its child could not be deleted", p.GetFinalizers())
			}
			if h.api.get(crGVK, "", "team-web") == nil {
				t.Fatal("the child is gone")
			}
			c := ready(p)
			if c["status"] != "False" || c["reason"] != tt.reason || !strings.Contains(fmt.Sprint(c["message"]), tt.says) {
				t.Errorf("Ready = %v, want False %s saying %q", c, tt.reason, tt.says)
			}
			// The event's reason is the condition's.
			if evs := h.drain(); !slices.ContainsFunc(evs, func(e string) bool { return strings.HasPrefix(e, "Warning "+tt.reason+" ") }) {
				t.Errorf("events = %q, want a Warning %s", evs, tt.reason)
			}

			heal()
			for range 2 {
				if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
					t.Fatal(err)
				}
			}
			if h.api.get(crGVK, "", "team-web") != nil {
				t.Error("the guarded child was not deleted once it could be")
			}
			if got := h.api.get(appGVK, "team", "web").GetFinalizers(); slices.Contains(got, Finalizer) {
				t.Errorf("finalizers = %v, want kgen's removed", got)
			}
		})
	}
}

// A child kgen must prune and may not (the rule's ServiceAccount lacks
// delete) makes the parent Ready False, reason Forbidden, naming the child
// and the account; not a Warning event alone under a Ready that says all
// is well. Once the delete is allowed the child goes and Ready is True.
func TestPruneFailsOnReady(t *testing.T) {
	h := newHarness(t, clusterRule)
	h.converge(appParent(nil))
	if c := h.ready(); c["status"] != "True" {
		t.Fatalf("Ready = %v before the change", c)
	}
	failing := true
	h.api.PrependReactor("delete", "clusterroles", func(clienttesting.Action) (bool, runtime.Object, error) {
		if failing {
			return true, nil, apierrors.NewForbidden(gvrOf(crGVK).GroupResource(), "team-web", errors.New(`User "system:serviceaccount:team:writer" cannot delete resource`))
		}
		return false, nil, nil
	})
	h.setSpec(map[string]any{"role": false})
	if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err == nil {
		t.Fatal("no error from a prune the API server refused")
	}
	c := h.ready()
	if c["status"] != "False" || c["reason"] != ReasonForbidden || !strings.Contains(fmt.Sprint(c["message"]), "child role:") ||
		!strings.Contains(fmt.Sprint(c["message"]), "system:serviceaccount:team:writer") {
		t.Errorf("Ready = %v, want False Forbidden naming child role and the account", c)
	}
	failing = false
	for range 3 {
		if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
			t.Fatal(err)
		}
	}
	if h.api.get(crGVK, "", "team-web") != nil {
		t.Error("the child was not pruned once it could be")
	}
	if c := h.ready(); c["status"] != "True" {
		t.Errorf("Ready = %v once the prune succeeded, want True", c)
	}
}

// A rule with spec.serviceAccount marks its children with the account, and
// a child is deleted as that account even once the rule is gone (known by
// name alone, its parent released, or released by another loaded rule of
// the kind): a removed rule can do no more than its account may (contract
// section 7). The account may not delete here, so
// the child stays and the parent keeps kgen's finalizer.
func TestReleaseDeletesAsTheRemovedRulesAccount(t *testing.T) {
	var asAccount []string
	h := newHarness(t, strings.Replace(clusterRule, "spec:\n", "spec:\n  serviceAccount: {namespace: team, name: deployer}\n", 1), func(c *Config) {
		c.Impersonate = func(sa rules.ServiceAccount) (dynamic.Interface, error) {
			imp := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
			imp.PrependReactor("*", "*", c.Client.(*fakeAPI).react)
			imp.PrependReactor("*", "*", func(action clienttesting.Action) (bool, runtime.Object, error) {
				asAccount = append(asAccount, sa.Name+": "+action.GetVerb()+" "+action.GetResource().Resource)
				if action.GetVerb() == "delete" {
					return true, nil, apierrors.NewForbidden(action.GetResource().GroupResource(), "", errors.New(sa.Name+" may not delete"))
				}
				return false, nil, nil
			})
			return imp, nil
		}
	})
	h.converge(appParent(nil))
	child := h.api.get(crGVK, "", "team-web")
	if got := child.GetAnnotations()[AnnotationServiceAccount]; got != "team/deployer" {
		t.Fatalf("the child's %s = %q, want team/deployer", AnnotationServiceAccount, got)
	}

	p := h.api.get(appGVK, "team", "web")
	now := metav1.NewTime(h.now)
	p.SetDeletionTimestamp(&now)
	h.api.add(p)
	removed := &rules.Rule{Name: h.rule.Name}
	err := h.r.Release(context.Background(), removed, fakeMappings[appGVK], h.api.get(appGVK, "team", "web"), []*unstructured.Unstructured{child})
	if !apierrors.IsForbidden(err) {
		t.Errorf("Release = %v, want the account's Forbidden", err)
	}
	if !slices.Contains(asAccount, "deployer: delete clusterroles") {
		t.Errorf("requests as the account = %q, want the delete made as it", asAccount)
	}
	if h.api.get(crGVK, "", "team-web") == nil {
		t.Error("the child was deleted with kgen's own rights")
	}
	if !slices.Contains(h.api.get(appGVK, "team", "web").GetFinalizers(), Finalizer) {
		t.Error("the finalizer went while the child it guards stays")
	}

	// A loaded rule of the same kind, without an account, that releases
	// the parent the removed rule had, deletes its child as the account
	// too, not with kgen's rights.
	asAccount = nil
	other := parseRule(t, strings.Replace(clusterRule, "name: guarded", "name: other", 1))
	err = h.r.Release(context.Background(), other, fakeMappings[appGVK], h.api.get(appGVK, "team", "web"), []*unstructured.Unstructured{child})
	if !apierrors.IsForbidden(err) || !slices.Contains(asAccount, "deployer: delete clusterroles") {
		t.Errorf("Release by another loaded rule = %v, requests as the account %q; want the delete made as it", err, asAccount)
	}
	if h.api.get(crGVK, "", "team-web") == nil {
		t.Error("another rule deleted the child with kgen's own rights")
	}

	// A loaded rule that names no account any more acts on its own
	// children with the rights it has now, kgen's, whatever the child's
	// mark says.
	asAccount = nil
	err = h.r.Release(context.Background(), parseRule(t, clusterRule), fakeMappings[appGVK], h.api.get(appGVK, "team", "web"), []*unstructured.Unstructured{child})
	if err != nil || len(asAccount) != 0 {
		t.Errorf("Release by a loaded rule without an account = %v, requests as an account %q; want it done as kgen", err, asAccount)
	}
	if h.api.get(crGVK, "", "team-web") != nil {
		t.Error("the child stays")
	}
}

// A child id renamed in the rule (or ids that swap names, or a parent that
// moves to a rule whose ids differ) keeps its object: the child of that
// kind and name that is this parent's is taken as it is and relabelled in
// place, never deleted as the old id's prune while the new id creates it
// again (contract sections 3 and 6). A CreateOnly child is not even
// relabelled: it is never written again.
func TestChildIDRenamedKeepsTheObject(t *testing.T) {
	renamed := strings.Replace(strings.Replace(appRule, "  - id: config\n", "  - id: settings\n", 1), "children.config.", "children.settings.", 1)
	swapped := strings.Replace(strings.Replace(strings.Replace(appRule, "  - id: deploy\n", "  - id: other\n", 1),
		`name: ${parent.spec.?cmName.orValue(parent.metadata.name + "-config")}`, `name: ${parent.metadata.name + "-one"}`, 1),
		"      apiVersion: apps/v1\n      kind: Deployment\n      metadata: {name: \"${parent.metadata.name}\"}\n",
		"      apiVersion: v1\n      kind: ConfigMap\n      metadata: {name: \"${parent.metadata.name}-two\"}\n", 1)
	for _, tc := range []struct {
		name     string
		from, to string
		// writes are the requests after the change; uids the ConfigMaps
		// whose object must stay.
		writes []string
		keep   []string
		// configName is what the status, which reads children.<id>,
		// says after that one reconcile: the object under its new id.
		configName string
	}{{
		name: "renamed id", from: appRule, to: renamed,
		writes:     []string{"patch configmaps team/web-config"},
		keep:       []string{"web-config"},
		configName: "web-config",
	}, {
		// Its reader, the Deployment, reads it under the new id at once;
		// its label follows by a patch of kgen's marks alone (OpMarks),
		// its content kept.
		name: "renamed id of a CreateOnly child",
		from: strings.NewReplacer("  - id: config\n", "  - id: config\n    updatePolicy: CreateOnly\n",
			`metadata: {name: "${parent.metadata.name}"}`, `metadata: {name: "${parent.metadata.name}", annotations: {config: "${children.config.metadata.name}"}}`).Replace(appRule),
		to: strings.NewReplacer("  - id: config\n", "  - id: settings\n    updatePolicy: CreateOnly\n", "children.config.", "children.settings.",
			`metadata: {name: "${parent.metadata.name}"}`, `metadata: {name: "${parent.metadata.name}", annotations: {config: "${children.settings.metadata.name}"}}`).Replace(appRule),
		writes:     []string{"patch configmaps team/web-config"},
		keep:       []string{"web-config"},
		configName: "web-config",
	}, {
		// The status reads children.config, which was web-one's id and
		// is now web-two's: it must read web-two at once.
		name:       "two ids swap names",
		from:       swapped,
		to:         strings.NewReplacer(`"-one"`, `"-two"`, `"${parent.metadata.name}-two"`, `"${parent.metadata.name}-one"`).Replace(swapped),
		writes:     []string{"patch configmaps team/web-two", "patch configmaps team/web-one"},
		keep:       []string{"web-one", "web-two"},
		configName: "web-two",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.from)
			h.converge(appParent(nil))
			uids := map[string]types.UID{}
			for _, name := range tc.keep {
				uids[name] = h.api.get(cmGVK, "team", name).GetUID()
			}
			h.rule = parseRule(t, tc.to)
			h.api.resetRequests()
			if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
				t.Fatal(err)
			}
			var writes []string
			for _, w := range h.api.writes() {
				if !strings.Contains(w, "/status ") {
					writes = append(writes, w)
				}
			}
			if !slices.Equal(writes, tc.writes) {
				t.Errorf("writes = %q, want %q", writes, tc.writes)
			}
			for name, uid := range uids {
				if o := h.api.get(cmGVK, "team", name); o == nil || o.GetUID() != uid {
					t.Errorf("ConfigMap %s is gone or another object: %v", name, o)
				}
			}
			for _, ev := range h.drain() {
				if strings.Contains(ev, "Deleted") || strings.Contains(ev, "Repaired") {
					t.Errorf("event %q", ev)
				}
			}
			if got, _, _ := unstructured.NestedString(h.api.get(appGVK, "team", "web").Object, "status", "configName"); got != tc.configName {
				t.Errorf("status.configName = %q after the change, want %q", got, tc.configName)
			}
			h.converge(h.api.get(appGVK, "team", "web"))
			// The status reads the renamed child, CreateOnly too.
			if c := h.ready(); c["status"] != "True" {
				t.Errorf("Ready = %v after the rename, want True", c)
			}
		})
	}
}

// A child being deleted but held by someone else's finalizer is not ready:
// the parent's Ready says so, instead of all children being applied and
// ready; kgen writes nothing to it, and creates it again once it is gone.
func TestChildBeingDeletedIsNotReady(t *testing.T) {
	h := newHarness(t, appRule)
	h.converge(appParent(nil))
	cm := h.holdTerminating(cmGVK, "team", "web-config")
	// The template's data changes too: still nothing is written to it.
	h.setSpec(map[string]any{"data": map[string]any{"a": "changed"}})
	h.api.resetRequests()
	if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
		t.Fatal(err)
	}
	c := h.ready()
	if c["status"] != "False" || !strings.Contains(fmt.Sprint(c["message"]), "child config is being deleted (finalizers: example.com/hold)") {
		t.Errorf("Ready = %v, want False saying child config is being deleted", c)
	}
	var toChild []string
	for _, w := range h.api.writes() {
		if strings.Contains(w, "configmaps") {
			toChild = append(toChild, w)
		}
	}
	// The one request is the create that finds it (it is not in the
	// plan's view), refused.
	if len(toChild) > 1 {
		t.Errorf("writes to the child being deleted: %q, want the refused create alone", toChild)
	}
	if o := h.api.get(cmGVK, "team", "web-config"); o == nil || o.GetUID() != cm.GetUID() || fmt.Sprint(o.Object["data"]) != fmt.Sprint(cm.Object["data"]) {
		t.Errorf("the child being deleted changed: %v", o)
	}
}

// An id renamed while a new child takes the old id, at another name, and
// the renamed child reads the new one: while the renamed child waits for
// it, its object (still labelled with the old id) is kept as the renamed
// child's, not taken as a superseded object of the new child and deleted.
func TestRenamedIDWaitingKeepsTheObject(t *testing.T) {
	h := newHarness(t, appRule)
	h.converge(appParent(nil))
	uid := h.api.get(cmGVK, "team", "web-config").GetUID()
	to := strings.Replace(appRule, "  - id: config\n    includeWhen: [\"${parent.spec.?config.orValue(true)}\"]\n    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata:\n",
		"  - id: config\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: \"${parent.metadata.name}-new\"}}\n"+
			"  - id: settings\n    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata:\n        annotations: {reads: \"${children.config.metadata.name}\"}\n", 1)
	if to == appRule {
		t.Fatal("the rule did not change")
	}
	h.rule = parseRule(t, to)
	for range 3 {
		if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
			t.Fatal(err)
		}
		if o := h.api.get(cmGVK, "team", "web-config"); o == nil || o.GetUID() != uid {
			t.Fatalf("the renamed child's object is gone or another: %v", o)
		}
	}
	if got := h.api.get(cmGVK, "team", "web-config").GetLabels()[LabelChild]; got != "settings" {
		t.Errorf("the renamed child's object is labelled %q, want settings", got)
	}
	if h.api.get(cmGVK, "team", "web-new") == nil {
		t.Error("the new child was not created")
	}
}

// A CreateOnly child is never written again, also when a reconcile finds
// it by a way other than the plan's: the record of kgen's own create while
// the cache does not show it yet, or a create that conflicts because
// someone took its ownerReference away (which is given back, alone).
func TestCreateOnlyNeverWrittenAgain(t *testing.T) {
	rule := strings.Replace(appRule, "  - id: config\n", "  - id: config\n    updatePolicy: CreateOnly\n", 1)
	for _, tt := range []struct {
		name  string
		apply func(h *harness)
	}{{
		name: "the cache behind its create",
		apply: func(h *harness) {
			h.cfg.Children = emptyLister{}
			h.restart()
		},
	}, {
		name: "its ownerReference removed",
		apply: func(h *harness) {
			cm := h.api.get(cmGVK, "team", "web-config")
			cm.SetOwnerReferences(nil)
			h.api.add(cm)
		},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, rule)
			h.converge(appParent(nil))
			tt.apply(h)
			h.drain()
			p := h.setSpec(map[string]any{"data": map[string]any{"a": "changed"}})
			if _, err := h.reconcile(p); err != nil {
				t.Fatal(err)
			}
			cm := h.api.get(cmGVK, "team", "web-config")
			if a, _, _ := unstructured.NestedString(cm.Object, "data", "a"); a != "1" {
				t.Errorf("the CreateOnly child was written: data.a = %q, want 1", a)
			}
			if refs := cm.GetOwnerReferences(); len(refs) != 1 || refs[0].UID != "uid-parent" {
				t.Errorf("ownerReferences = %v, want the parent's", refs)
			}
		})
	}
}

// A child whose kind changes while its replacement waits for another child
// keeps its object, which no reader takes for the child.
func TestChildKindChangedWhileItsReplacementWaits(t *testing.T) {
	h := newHarness(t, appRule)
	h.converge(appParent(nil))
	uid := h.api.get(cmGVK, "team", "web-config").GetUID()
	to := strings.Replace(appRule, "      apiVersion: v1\n      kind: ConfigMap\n      metadata:\n        name: ${parent.spec.?cmName.orValue(parent.metadata.name + \"-config\")}\n",
		"      apiVersion: v1\n      kind: Secret\n      metadata:\n        name: ${children.extra.metadata.name + \"-s\"}\n", 1)
	to = strings.Replace(to, "  - id: deploy\n", "  - id: extra\n    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {name: extra}\n  - id: deploy\n", 1)
	if to == appRule {
		t.Fatal("the rule did not change")
	}
	h.rule = parseRule(t, to)
	h.api.PrependReactor("patch", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.(clienttesting.PatchAction).GetName() == "extra" {
			return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "extra", nil)
		}
		return false, nil, nil
	})
	for range 2 {
		_, _ = h.reconcile(h.api.get(appGVK, "team", "web"))
		if o := h.api.get(cmGVK, "team", "web-config"); o == nil || o.GetUID() != uid {
			t.Fatalf("the ConfigMap was deleted while the Secret that replaces it waits: %v", o)
		}
	}
}

// The object of a child's old kind, kept while the new one cannot be
// created (its name is taken), is not the child to its readers: they keep
// waiting, and the parent is not woken for them again and again.
func TestChildKindChangedReadersWait(t *testing.T) {
	base := strings.Replace(appRule, "      metadata: {name: \"${parent.metadata.name}\"}\n",
		"      metadata: {name: \"${parent.metadata.name}\", annotations: {cfg: \"${children.config.metadata.name}\"}}\n", 1)
	if base == appRule {
		t.Fatal("no reader")
	}
	h := newHarness(t, base)
	h.converge(appParent(nil))
	h.rule = parseRule(t, strings.Replace(base, "      apiVersion: v1\n      kind: ConfigMap\n", "      apiVersion: v1\n      kind: Secret\n", 1))
	h.api.add(&unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": "web-config", "namespace": "team"}}})
	for range 2 {
		res, err := h.reconcile(h.api.get(appGVK, "team", "web"))
		if err != nil {
			t.Fatal(err)
		}
		if res.Conflict == "" || res.Again {
			t.Errorf("Result = %+v, want a Conflict and no Again", res)
		}
	}
	if h.api.get(cmGVK, "team", "web-config") == nil {
		t.Error("the ConfigMap was deleted while its replacement's name is taken")
	}
}

// A child whose kind changes is replaced as a renamed child is: the object
// of the old kind is deleted only once the new one exists, and stays while
// the new one cannot be created.
func TestChildKindChangedKeepsTheOldUntilTheNewExists(t *testing.T) {
	h := newHarness(t, appRule)
	h.converge(appParent(nil))
	uid := h.api.get(cmGVK, "team", "web-config").GetUID()
	to := strings.Replace(appRule, "      apiVersion: v1\n      kind: ConfigMap\n", "      apiVersion: v1\n      kind: Secret\n", 1)
	if to == appRule {
		t.Fatal("the rule did not change")
	}
	h.rule = parseRule(t, to)
	refuse := true
	h.api.PrependReactor("patch", "secrets", func(clienttesting.Action) (bool, runtime.Object, error) {
		if !refuse {
			return false, nil, nil
		}
		return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "Secret"}, "web-config", nil)
	})
	_, err := h.reconcile(h.api.get(appGVK, "team", "web"))
	if err == nil {
		t.Fatal("no error for the refused Secret")
	}
	if o := h.api.get(cmGVK, "team", "web-config"); o == nil || o.GetUID() != uid {
		t.Fatalf("the ConfigMap was deleted before the Secret that replaces it existed: %v", o)
	}
	if c := h.ready(); c["reason"] != ReasonInvalid {
		t.Errorf("Ready = %v, want %s", c, ReasonInvalid)
	}
	h.drain()
	refuse = false
	if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
		t.Fatal(err)
	}
	if h.api.get(secretGVK, "team", "web-config") == nil {
		t.Fatal("the Secret was not created")
	}
	if o := h.api.get(cmGVK, "team", "web-config"); o != nil {
		t.Errorf("the ConfigMap of the old kind stays: %v", o)
	}
	want := "Normal Deleted Deleted configmaps team/web-config (child config): its kind is no longer the child's; it is replaced by Secret web-config"
	if got := h.drain(); !slices.Contains(got, want) {
		t.Errorf("events = %q, want %q", got, want)
	}
}

// A reader of a child held Terminating waits for it, and is not woken to
// wait again (Result.Again), which would requeue the parent for as long
// as the finalizer holds.
func TestReaderOfChildBeingDeletedIsNotWoken(t *testing.T) {
	reads := strings.Replace(appRule, `metadata: {name: "${parent.metadata.name}"}`,
		`metadata: {name: "${parent.metadata.name}", annotations: {config: "${children.config.metadata.name}"}}`, 1)
	h := newHarness(t, reads)
	h.converge(appParent(nil))
	h.holdTerminating(cmGVK, "team", "web-config")
	res, err := h.reconcile(h.api.get(appGVK, "team", "web"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Again {
		t.Error("Again = true: the reader of the child being deleted was woken")
	}
}

// A child renamed onto the object of a child that waits (it reads another
// child, missing for now) does not take that object: the waiting child
// did not render, so no check of two children rendering one object saw
// it, and taking it would overwrite a child that is still wanted and
// delete the renamed child's old object (audit finding). It is an error
// of the parent, as two children rendering one object are, and nothing is
// written.
func TestRenameOntoAWaitingChildsObject(t *testing.T) {
	const collide = `apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: app}
spec:
  parent: {apiVersion: example.com/v1, kind: App}
  children:
  - id: a
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name + '-' + parent.spec.?an.orValue('a')}"}
      data: {owner: a}
  - id: gate
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-gate"}
      data: {v: "1"}
  - id: b
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-b"}
      data: {owner: b, v: "${children.gate.data.v}"}
`
	h := newHarness(t, collide)
	h.converge(appParent(nil))
	b := h.api.get(cmGVK, "team", "web-b")
	a := h.api.get(cmGVK, "team", "web-a")
	if b == nil || a == nil {
		t.Fatalf("children web-a and web-b: %v, %v", a, b)
	}
	// gate goes (so b waits for it), and a is renamed onto b's object.
	if err := h.api.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace("team").Delete(context.Background(), "web-gate", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.setSpec(map[string]any{"an": "b"})
	h.api.resetRequests()
	_, err := h.reconcile(h.api.get(appGVK, "team", "web"))
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `child "a" renders ConfigMap team/web-b, the object of child "b"`) {
		t.Errorf("reconcile = %v, want an invalid spec naming both children", err)
	}
	if got := h.api.get(cmGVK, "team", "web-b"); got == nil || got.GetUID() != b.GetUID() || got.GetLabels()[LabelChild] != "b" || fmt.Sprint(got.Object["data"]) != fmt.Sprint(b.Object["data"]) {
		t.Errorf("b's object was changed: %v", got)
	}
	if h.api.get(cmGVK, "team", "web-a") == nil {
		t.Error("a's old object was deleted")
	}
	for _, w := range h.api.writes() {
		if strings.Contains(w, "configmaps") {
			t.Errorf("a write to a child: %s", w)
		}
	}
	if c := h.ready(); c["reason"] != ReasonInvalid {
		t.Errorf("Ready = %v, want %s", c, ReasonInvalid)
	}
}

// refInputs reads inputs as the controller does: their names are evaluated
// with the parent (an expression that fails is the rule's error for this
// parent, a RenderError), and none of them exists.
type refInputs struct{}

func (refInputs) Inputs(rule *rules.Rule, parent *unstructured.Unstructured) (map[string][]*unstructured.Unstructured, error) {
	if _, err := rule.InputRefs(parent, namespacedKinds{}); err != nil {
		return nil, &RenderError{Rule: rule.Name, Err: err}
	}
	return map[string][]*unstructured.Unstructured{}, nil
}

type namespacedKinds struct{}

func (namespacedKinds) Namespaced(schema.GroupVersionKind) (bool, error) { return true, nil }

// An input whose name does not evaluate for a parent (a field the parent
// lacks) is on the parent's Ready condition and in an event, and is not
// retried until the parent or the rule changes, as a child's template that
// does not evaluate: an audit saw such a parent keep no status and be
// retried for as long as kgen ran.
func TestInputNameDoesNotEvaluate(t *testing.T) {
	rule := strings.Replace(appRule, "  children:\n", `  inputs:
  - {id: shared, apiVersion: v1, kind: ConfigMap, name: "${parent.spec.inputName}"}
  children:
`, 1)
	h := newHarness(t, rule, func(c *Config) { c.Inputs = refInputs{} })
	_, err := h.reconcile(appParent(nil))
	if !errors.Is(err, ErrTerminal) {
		t.Fatalf("err = %v, want a terminal error", err)
	}
	c := h.ready()
	if c["reason"] != ReasonInvalid || !strings.Contains(fmt.Sprint(c["message"]), "spec.inputs[0].name") {
		t.Errorf("Ready = %v, want reason %s naming spec.inputs[0].name", c, ReasonInvalid)
	}
	if events := h.drain(); len(events) != 1 || !strings.Contains(events[0], "Warning "+ReasonInvalid) {
		t.Errorf("events = %q, want one Warning %s", events, ReasonInvalid)
	}
	// Fixed by the parent: the rule's children are made.
	_, err = h.reconcile(h.setSpec(map[string]any{"inputName": "shared"}))
	if err != nil {
		t.Fatalf("after the parent gained spec.inputName: %v", err)
	}
	if h.api.get(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, "team", "web-config") == nil {
		t.Error("no ConfigMap once the input's name evaluates")
	}
}

// A status field that reads a child's status follows it, but a child whose
// status changes many times a second does not make kgen write the parent's
// status as often: after more than 10 writes in a minute they come at most
// one per followSpacing, the last value lands, and a new generation of the
// parent is written at once. None of it is a failure: no event.
func TestStatusFollowsChildAtBoundedRate(t *testing.T) {
	follow := strings.Replace(appRule, "    configName: ${children.config.metadata.name}\n",
		"    configName: ${children.config.metadata.name}\n    n: ${children.deploy.?status.?n.orValue(0)}\n", 1)
	for _, tc := range []struct {
		name      string
		every     time.Duration // the child's status changes this often
		changes   int
		wantWrite int
	}{
		// With the write of the first reconcile, 11 writes in the
		// first 2 s; then at 6.8 s, 11.8 s and 16.8 s.
		{"five a second", 200 * time.Millisecond, 100, 13},
		// Never more than 10 in a minute: every change is followed.
		{"every ten seconds", 10 * time.Second, 20, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, follow)
			h.converge(appParent(nil))
			writes := 0
			var last Result
			for i := 1; i <= tc.changes; i++ {
				d := h.api.get(deployGVK, "team", "web")
				d.Object["status"] = map[string]any{"n": int64(i)}
				d.SetResourceVersion("") // a new one, as the server gives
				h.api.add(d)
				h.api.resetRequests()
				res, err := h.reconcile(h.api.get(appGVK, "team", "web"))
				if err != nil {
					t.Fatal(err)
				}
				writes += len(h.api.writes())
				if len(h.api.writes()) == 0 && res.RequeueAfter <= 0 {
					t.Fatalf("change %d: status not written and no requeue", i)
				}
				last = res
				h.now = h.now.Add(tc.every)
			}
			if writes != tc.wantWrite {
				t.Errorf("status writes for %d changes of the child = %d, want %d", tc.changes, writes, tc.wantWrite)
			}
			// The requeue that was asked for writes the last value.
			h.now = h.now.Add(last.RequeueAfter - tc.every)
			if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
				t.Fatal(err)
			}
			if n, _, _ := unstructured.NestedInt64(h.api.get(appGVK, "team", "web").Object, "status", "n"); n != int64(tc.changes) {
				t.Errorf("status.n = %d after the requeue, want the last value %d", n, tc.changes)
			}
			if got := h.drain(); len(got) != 0 {
				t.Errorf("events = %q, want none", got)
			}
		})
	}
	// A rollout: the Ready message names the available replicas, so it
	// changes with each; those messages may be held, the turn to True is
	// not.
	t.Run("Ready turning True not held", func(t *testing.T) {
		rollout := strings.Replace(appRule, "  - id: deploy\n", "  - id: deploy\n    readyWhen: [\"${self.status.?availableReplicas.orValue(0) >= parent.spec.replicas}\"]\n", 1)
		h := newHarness(t, rollout)
		p := appParent(nil)
		p.Object["spec"].(map[string]any)["replicas"] = int64(30)
		h.converge(p)
		held := false
		for i := int64(1); i <= 30; i++ {
			d := h.api.get(deployGVK, "team", "web")
			d.Object["status"] = map[string]any{"availableReplicas": i}
			d.SetResourceVersion("")
			h.api.add(d)
			res, err := h.reconcile(h.api.get(appGVK, "team", "web"))
			if err != nil {
				t.Fatal(err)
			}
			held = held || res.RequeueAfter > 0
			h.now = h.now.Add(200 * time.Millisecond)
		}
		if !held {
			t.Error("no message of the rollout was held: the test does not reach the limit")
		}
		if c := h.ready(); c["status"] != "True" {
			t.Errorf("Ready = %v right after the last replica became available, want True", c)
		}
	})
	t.Run("new generation not held", func(t *testing.T) {
		h := newHarness(t, follow)
		h.converge(appParent(nil))
		held := false
		for i := 1; i <= 20 && !held; i++ {
			d := h.api.get(deployGVK, "team", "web")
			d.Object["status"] = map[string]any{"n": int64(i)}
			d.SetResourceVersion("") // a new one, as the server gives
			h.api.add(d)
			res, err := h.reconcile(h.api.get(appGVK, "team", "web"))
			if err != nil {
				t.Fatal(err)
			}
			held = res.RequeueAfter > 0
			h.now = h.now.Add(100 * time.Millisecond)
		}
		if !held {
			t.Fatal("the status was never held")
		}
		h.setSpec(map[string]any{"replicas": int64(3)})
		h.api.resetRequests()
		if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
			t.Fatal(err)
		}
		if got := h.ready()["observedGeneration"]; got != int64(2) {
			t.Errorf("Ready observedGeneration = %v right after the spec change, want 2", got)
		}
	})
}

// A CreateOnly child (a generated password) whose deletionPolicy changes
// gets kgen's marks rewritten by one merge patch, and never its content:
// changed to Orphan, it loses the parent's ownerReference (so neither its
// prune nor its parent's deletion deletes it); changed to Delete, it gets
// it back, and its prune deletes it. An audit lost three generated
// passwords this way: the marks stayed as they were at creation.
func TestCreateOnlyFollowsDeletionPolicy(t *testing.T) {
	createOnly := strings.Replace(appRule, "  - id: config\n", "  - id: config\n    updatePolicy: CreateOnly\n", 1)
	orphan := strings.Replace(createOnly, "    updatePolicy: CreateOnly\n", "    updatePolicy: CreateOnly\n    deletionPolicy: Orphan\n", 1)
	for _, tc := range []struct {
		name, from, to string
		owned          bool // the ownerReference after the change
		pruned         bool // whether the prune deletes it
	}{
		{"Delete to Orphan", createOnly, orphan, false, false},
		{"Orphan to Delete", orphan, createOnly, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.from)
			h.converge(appParent(nil))
			before := h.api.get(cmGVK, "team", "web-config")
			// A parent change CreateOnly does not follow, with the rule's.
			p := h.api.get(appGVK, "team", "web")
			p.Object["spec"].(map[string]any)["data"] = map[string]any{"a": "2"}
			h.api.add(p)
			h.rule = parseRule(t, tc.to)
			h.api.resetRequests()
			if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
				t.Fatal(err)
			}
			var writes []string
			for _, w := range h.api.writes() {
				if strings.Contains(w, "configmaps") {
					writes = append(writes, w)
				}
			}
			if !slices.Equal(writes, []string{"patch configmaps team/web-config"}) {
				t.Errorf("writes of the child = %q, want one patch of its marks", writes)
			}
			after := h.api.get(cmGVK, "team", "web-config")
			if after.GetUID() != before.GetUID() || !reflect.DeepEqual(after.Object["data"], before.Object["data"]) {
				t.Errorf("child after the change = %v, want the same object and data as %v", after.Object, before.Object)
			}
			if got := hasOwner(after, "uid-parent"); got != tc.owned {
				t.Errorf("ownerReference to the parent: %t, want %t", got, tc.owned)
			}
			if got := after.GetAnnotations()[AnnotationDeletionPolicy] == "Orphan"; got == tc.owned {
				t.Errorf("annotation %s = %q with the ownerReference %t", AnnotationDeletionPolicy, after.GetAnnotations()[AnnotationDeletionPolicy], tc.owned)
			}
			h.converge(h.api.get(appGVK, "team", "web"))
			h.api.resetRequests()
			if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
				t.Fatal(err)
			}
			if w := h.api.writes(); len(w) > 0 {
				t.Errorf("writes once converged = %q, want none", w)
			}

			// Pruned (the parent no longer wants it).
			p = h.api.get(appGVK, "team", "web")
			p.Object["spec"].(map[string]any)["config"] = false
			h.api.add(p)
			h.converge(h.api.get(appGVK, "team", "web"))
			left := h.api.get(cmGVK, "team", "web-config")
			if (left == nil) != tc.pruned {
				t.Errorf("after its prune the child exists: %t, want %t", left != nil, !tc.pruned)
			}
			if left != nil && (hasOwner(left, "uid-parent") || !reflect.DeepEqual(left.Object["data"], before.Object["data"])) {
				t.Errorf("orphaned child = %v, want no ownerReference and its data kept", left.Object)
			}
		})
	}
}

// With SchemaDefaults (kgenctl run --manage-crds, whose CRDs are made from
// the rules' schemas), a parent read before its CRD gained a defaulted
// field is read with the default, as the API server serves it now;
// without, the served CRD is someone else's, and the rule's schema says
// nothing of what the server defaults.
func TestSchemaDefaults(t *testing.T) {
	doc := strings.Replace(appRule, "  parent: {apiVersion: example.com/v1, kind: App}\n",
		"  parent: {apiVersion: example.com/v1, kind: App, schema: {image: string, replicas: integer, data: 'map[string]string', config: boolean, cmName: string, labels: 'map[string]string', size: 'string | default=m'}}\n", 1)
	doc = strings.Replace(doc, "      data: ${parent.spec.data}\n", "      data: {size: \"${parent.spec.size}\"}\n", 1)
	if doc == appRule {
		t.Fatal("rule unchanged")
	}
	for _, defaults := range []bool{true, false} {
		t.Run(fmt.Sprint(defaults), func(t *testing.T) {
			h := newHarness(t, doc, func(c *Config) { c.SchemaDefaults = defaults })
			_, err := h.reconcile(appParent(nil))
			cm := h.api.get(cmGVK, "team", "web-config")
			switch {
			case defaults && (err != nil || cm == nil || cm.Object["data"].(map[string]any)["size"] != "m"):
				t.Errorf("with defaults: error %v, child %v; want size m", err, cm)
			case !defaults && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "no such key: size")):
				t.Errorf("without: error %v; want no such key", err)
			}
		})
	}
}

// A child whose id and name change in one rule edit, where the new name is
// taken by an object that is not the parent's: the old object is kept (it
// was pruned as "the rule has no child config any more", leaving the parent
// without the child: a soak audit), and the parent is in Conflict; once
// the object in the way goes, the new child is made and the old one
// pruned.
func TestRenamedIdIntoATakenNameKeepsTheOldChild(t *testing.T) {
	h := newHarness(t, appRule)
	h.converge(appParent(nil))
	old := h.api.get(cmGVK, "team", "web-config")
	renamed := strings.NewReplacer("  - id: config\n", "  - id: settings\n", "children.config.", "children.settings.",
		`name: ${parent.spec.?cmName.orValue(parent.metadata.name + "-config")}`, `name: ${parent.metadata.name + "-settings"}`).Replace(appRule)
	h.rule = parseRule(t, renamed)
	theirs := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "web-settings", "namespace": "team", "uid": "uid-theirs"}, "data": map[string]any{"owner": "human"}}}
	h.api.add(theirs)
	res, err := h.reconcile(h.api.get(appGVK, "team", "web"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Conflict == "" {
		t.Errorf("Result = %+v, want a Conflict", res)
	}
	if got := h.api.get(cmGVK, "team", "web-config"); got == nil || got.GetUID() != old.GetUID() {
		t.Fatalf("the old child is gone while its replacement's name is taken: %v", got)
	}
	if got := h.api.get(cmGVK, "team", "web-settings"); got.GetUID() != "uid-theirs" || got.Object["data"].(map[string]any)["owner"] != "human" {
		t.Errorf("the object in the way was written: %v", got.Object)
	}
	// The object in the way goes.
	if err := h.api.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace("team").Delete(context.Background(), "web-settings", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.converge(h.api.get(appGVK, "team", "web"))
	if h.api.get(cmGVK, "team", "web-settings") == nil || h.api.get(cmGVK, "team", "web-config") != nil {
		t.Errorf("after the object in the way went: web-settings %v, web-config %v; want the new child and the old one pruned",
			h.api.get(cmGVK, "team", "web-settings") != nil, h.api.get(cmGVK, "team", "web-config") != nil)
	}
}

// The object of a removed id waits only for a child of its kind that has
// no object yet (a renamed id's replacement): a child of its kind that
// exists and waits (here, for an input that is missing) does not hold it,
// and a removed id is pruned as §8 says; one that has no object yet (a
// renamed id) does.
func TestRemovedIdWaitsOnlyForAReplacement(t *testing.T) {
	extra := "  - id: extra\n    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {name: \"${parent.metadata.name}-extra\"}\n      data: {n: \"DATA\"}\n"
	base := strings.Replace(appRule, "  - id: deploy\n", strings.Replace(extra, "DATA", "1", 1)+"  - id: deploy\n", 1)
	// A child that reads an input waits for it: the harness reads none.
	waits := `${inputs.shared.data.n}`
	withInput := func(rule string) string {
		return strings.Replace(rule, "  children:\n", "  inputs:\n  - {id: shared, apiVersion: v1, kind: ConfigMap, name: shared}\n  children:\n", 1)
	}
	for _, tc := range []struct {
		name   string
		to     string // the rule after the edit: config removed, or renamed
		pruned bool   // whether web-config goes
	}{
		{"removed while a child of its kind that exists waits",
			strings.Replace(strings.Replace(base, "data: {n: \"1\"}", "data: {n: \""+waits+"\"}", 1), "children.config.", "children.extra.", 1), true},
		{"renamed to an id that waits, with no object yet",
			strings.Replace(strings.Replace(base, "  - id: config\n", "  - id: settings\n", 1), "children.config.", "children.extra.", 1), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, base)
			h.converge(appParent(nil))
			if h.api.get(cmGVK, "team", "web-config") == nil || h.api.get(cmGVK, "team", "web-extra") == nil {
				t.Fatal("not converged")
			}
			to := tc.to
			if !tc.pruned {
				// settings renders web-config2, and waits for the input.
				to = strings.Replace(to, `name: ${parent.spec.?cmName.orValue(parent.metadata.name + "-config")}`, `name: "${parent.metadata.name}-config2"`, 1)
				to = strings.Replace(to, "      data: ${parent.spec.data}\n", "      data: {n: \""+waits+"\"}\n", 1)
			} else {
				to = strings.Replace(to, strings.Split(to[strings.Index(to, "  - id: config\n"):], "  - id: extra\n")[0], "", 1)
			}
			h.rule = parseRule(t, withInput(to))
			if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil && !errors.Is(err, ErrTerminal) {
				t.Fatal(err)
			}
			if gone := h.api.get(cmGVK, "team", "web-config") == nil; gone != tc.pruned {
				t.Errorf("web-config pruned: %t, want %t", gone, tc.pruned)
			}
		})
	}
}
