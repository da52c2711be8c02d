package ruleset

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr/funcr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/openapi/openapitest"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"kgen.dev/kgen/pkg/controller"
	"kgen.dev/kgen/pkg/mapper"
	kschema "kgen.dev/kgen/pkg/schema"
	"kgen.dev/kgen/pkg/watch"
	"kgen.dev/kgen/rules"
)

// served maps the kinds a fake cluster serves to their resources.
type served map[schema.GroupVersionKind]mapper.Mapping

func (s served) ResourceFor(gvk schema.GroupVersionKind) (mapper.Mapping, error) {
	if m, ok := s[gvk]; ok {
		return m, nil
	}
	return mapper.Mapping{}, &mapper.NotFoundError{Ref: gvk.String()}
}

var (
	appGVK     = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "App"}
	serveApps  = served{appGVK: {Group: "example.com", Version: "v1", Kind: "App", Resource: "apps", Namespaced: true}}
	appCRDYAML = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: apps.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {kind: App, listKind: AppList, plural: apps, singular: app}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              image: {type: string}
`
)

// serveBuiltins serves ConfigMaps.
var serveBuiltins = served{{Version: "v1", Kind: "ConfigMap"}: {Version: "v1", Kind: "ConfigMap", Resource: "configmaps", Namespaced: true}}

// published are the OpenAPI v3 documents of a real API server (core/v1,
// apps/v1, batch/v1) that client-go embeds for tests.
var published = kschema.New(openapitest.NewEmbeddedFileClient())

// failingTypes cannot read any published schema.
type failingTypes struct{}

func (failingTypes) Prefetch(...schema.GroupVersionKind) error { return errors.New("forbidden") }
func (failingTypes) Type(schema.GroupVersionKind) (*kschema.Type, error) {
	return nil, errors.New("forbidden")
}

func appCRD(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(appCRDYAML), &obj.Object); err != nil {
		t.Fatal(err)
	}
	return obj
}

func fakeClient(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{CRDGVR: "CustomResourceDefinitionList"}, objs...)
}

// appRule is a rule on App whose ConfigMap's data reads expr.
func appRule(t *testing.T, name, expr string) *rules.Rule {
	t.Helper()
	rs, err := rules.Parse("rules.yaml", []byte(ruleDoc(name, expr)), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return rs[0]
}

func ruleDoc(name, expr string) string {
	return `apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: ` + name + `}
spec:
  parent: {apiVersion: example.com/v1, kind: App, namespaces: [` + name + `]}
  children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: x}
      data: {v: "${` + expr + `}"}
`
}

// newObjectSet returns a Set of Rule objects over a fake cluster that
// serves the App kind, whose controller reports every rule running with
// synced caches.
func newObjectSet(t *testing.T) *Set {
	t.Helper()
	s, err := New(Config{Objects: true, Client: fakeClient(appCRD(t)), Resources: serveApps,
		CRDs:     &CRDs{Client: fakeClient(appCRD(t)), Resources: serveApps},
		Progress: progress{Running: true, Synced: true}, Apply: func([]*rules.Rule) {}})
	if err != nil {
		t.Fatal(err)
	}
	s.loaded.Store(true) // as once the first list of Rule objects is observed
	return s
}

// ruleObject returns the Rule object of doc, as the API server has it:
// with a UID, a generation and, unless nil, a status.
func ruleObject(t *testing.T, doc, uid string, gen int64, status map[string]any) *unstructured.Unstructured {
	t.Helper()
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
		t.Fatal(err)
	}
	obj.SetUID(types.UID(uid))
	obj.SetGeneration(gen)
	if status != nil {
		obj.Object["status"] = status
	}
	return obj
}

func TestCRDsCheck(t *testing.T) {
	forbidden := func(a clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(CRDGVR.GroupResource(), "apps.example.com", errors.New("no"))
	}
	failing := func(a clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("try later")
	}
	tests := []struct {
		name      string
		expr      string
		kind      string // the parent kind; App when empty
		served    served
		crd       bool
		reactor   clienttesting.ReactionFunc
		schema    string // the rule's spec.parent.schema
		manage    bool
		types     Types     // the published schemas
		replace   [2]string // a change to the rule's document
		wantType  string    // a *TypeError containing this
		wantOther bool      // another error
	}{
		{name: "fits", expr: "parent.spec.image", served: serveApps, crd: true},
		{name: "typo", expr: "parent.spec.imgae", served: serveApps, crd: true,
			wantType: `CustomResourceDefinition apps.example.com): rules.yaml:12:31: rule "r": child "config": template.data.v: ${parent.spec.imgae}: parent.spec has no field "imgae"`},
		{name: "not served yet", expr: "parent.spec.imgae", served: served{}, crd: true},
		{name: "served, but not by a CRD", expr: "parent.spec.imgae", served: serveApps},
		{name: "a built-in kind", expr: "parent.spec.imgae", kind: "ConfigMap", served: serveApps},
		{name: "the CRD may not be read", expr: "parent.spec.imgae", served: serveApps, crd: true, reactor: forbidden},
		{name: "the server fails", expr: "parent.spec.imgae", served: serveApps, crd: true, reactor: failing, wantOther: true},
		// With --manage-crds, the served CRD may be the previous version's.
		{name: "a managed CRD", expr: "parent.spec.size", schema: "{image: string, size: string}", manage: true, served: serveApps, crd: true},
		{name: "the same, unmanaged", expr: "parent.spec.size", schema: "{image: string, size: string}", served: serveApps, crd: true,
			wantType: `parent.spec has no field "size"`},

		// With the published schemas: children, and built-in parents.
		{name: "published: fits", expr: "parent.spec.image", served: serveApps, crd: true, types: published},
		{name: "published: a child's typo", expr: "parent.spec.image", served: serveApps, crd: true, types: published,
			replace:  [2]string{"data: {v:", "dataa: {v:"},
			wantType: `CustomResourceDefinition apps.example.com): rules.yaml:12:7: rule "r": child "config": template.dataa: the schema of v1 ConfigMap has no field "dataa" here: did you mean "data"?`},
		{name: "published: a type mismatch, no CRD", expr: "parent.spec.replicas", served: serveApps, types: published,
			replace:  [2]string{"data: {v:", "immutable: {v:"},
			wantType: `the rule does not fit the schemas of its kinds: rules.yaml:12:18: rule "r": child "config": template.immutable: the schema of v1 ConfigMap wants a boolean here, not a mapping`},
		{name: "published: a built-in parent", expr: "parent.dta.x", kind: "ConfigMap", served: serveBuiltins, types: published,
			wantType: `parent has no field "dta" in the schema of v1 ConfigMap: did you mean "data"?`},
		{name: "published: a built-in parent fits", expr: "parent.data.x", kind: "ConfigMap", served: serveBuiltins, types: published},
		{name: "published: a managed CRD's own schema is not used", expr: "parent.spec.size", schema: "{image: string, size: string}", manage: true, served: serveApps, crd: true, types: published},
		{name: "published: unreadable", expr: "parent.spec.image", served: serveApps, crd: true, types: failingTypes{},
			replace: [2]string{"data: {v:", "dataa: {v:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := ruleDoc("r", tt.expr)
			if tt.kind != "" {
				doc = strings.Replace(doc, "apiVersion: example.com/v1, kind: App", "apiVersion: v1, kind: "+tt.kind, 1)
			}
			if tt.schema != "" {
				doc = strings.Replace(doc, "namespaces: [r]}", "namespaces: [r], schema: "+tt.schema+"}", 1)
			}
			if tt.replace[0] != "" {
				doc = strings.Replace(doc, tt.replace[0], tt.replace[1], 1)
			}
			rs, err := rules.Parse("rules.yaml", []byte(doc), rules.Options{})
			if err != nil {
				t.Fatal(err)
			}
			var objs []runtime.Object
			if tt.crd {
				objs = append(objs, appCRD(t))
			}
			client := fakeClient(objs...)
			if tt.reactor != nil {
				client.PrependReactor("get", "customresourcedefinitions", tt.reactor)
			}
			c := &CRDs{Client: client, Resources: tt.served, Manage: tt.manage, Types: tt.types}
			err = c.Check(context.Background(), rs[0])
			var te *TypeError
			switch {
			case tt.wantType != "":
				if !errors.As(err, &te) || !strings.Contains(err.Error(), tt.wantType) {
					t.Errorf("Check() = %v, want a TypeError containing\n%s", err, tt.wantType)
				}
			case tt.wantOther:
				if err == nil || errors.As(err, &te) {
					t.Errorf("Check() = %v, want an error that is not a TypeError", err)
				}
			case err != nil:
				t.Errorf("Check() = %v, want nil", err)
			}
		})
	}
}

// With Manage, the CRD of a rule with spec.parent.schema is applied with
// server-side apply by kgen, once per version of the rule while its kind is
// served; without, or without a schema, nothing is written.
func TestCRDsPrepare(t *testing.T) {
	withSchema := func(t *testing.T, field string) *rules.Rule {
		doc := strings.Replace(ruleDoc("r", "parent.spec.image"), "namespaces: [r]}", "namespaces: [r], schema: {image: string, "+field+": integer}}", 1)
		rs, err := rules.Parse("rules.yaml", []byte(doc), rules.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return rs[0]
	}
	tests := []struct {
		name    string
		manage  bool
		schema  bool
		served  served
		applies int
	}{
		{name: "managed", manage: true, schema: true, served: serveApps, applies: 1},
		{name: "not served yet: applied at every try", manage: true, schema: true, served: served{}, applies: 2},
		{name: "not managed", schema: true, served: serveApps},
		{name: "no schema", manage: true, served: serveApps},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fakeClient()
			var applied []*unstructured.Unstructured
			client.PrependReactor("patch", "customresourcedefinitions", func(a clienttesting.Action) (bool, runtime.Object, error) {
				p := a.(clienttesting.PatchAction)
				opts := p.GetPatchType()
				if opts != types.ApplyPatchType {
					t.Errorf("patch type %s, want apply", opts)
				}
				obj := &unstructured.Unstructured{}
				if err := obj.UnmarshalJSON(p.GetPatch()); err != nil {
					t.Fatal(err)
				}
				applied = append(applied, obj)
				return true, obj, nil
			})
			c := &CRDs{Client: client, Resources: tt.served, Manage: tt.manage}
			rule := appRule(t, "r", "parent.spec.image")
			if tt.schema {
				rule = withSchema(t, "replicas")
			}
			for range 2 {
				if err := c.Prepare(context.Background(), rule); err != nil {
					t.Fatal(err)
				}
			}
			if len(applied) != tt.applies {
				t.Fatalf("applied %d times, want %d", len(applied), tt.applies)
			}
			if tt.applies == 0 {
				return
			}
			if applied[0].GetName() != "apps.example.com" {
				t.Errorf("applied %s", applied[0].GetName())
			}
			// A new version of the rule updates it.
			applied = nil
			if err := c.Prepare(context.Background(), withSchema(t, "size")); err != nil {
				t.Fatal(err)
			}
			if len(applied) != 1 {
				t.Fatalf("a new version of the rule applied %d times, want 1", len(applied))
			}
			if !strings.Contains(mustJSON(t, applied[0]), `"size"`) {
				t.Errorf("the new version's CRD lacks its new field: %s", mustJSON(t, applied[0]))
			}
		})
	}
}

func mustJSON(t *testing.T, obj *unstructured.Unstructured) string {
	t.Helper()
	b, err := obj.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A rules file edited to a version that does not fit the served CRD is not
// applied: the previous version keeps running and the error is reported. A
// rule that does not fit does not start (Admit), for files as for Rule
// objects, whose status then says Accepted False with the field path.
func TestSetTypeChecks(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	file := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(file, []byte(ruleDoc("r", "parent.spec.image")), 0o644); err != nil {
		t.Fatal(err)
	}
	var sets [][]*rules.Rule
	s, err := New(Config{Paths: []string{file}, Objects: true, Client: fakeClient(appCRD(t)), Resources: serveApps,
		CRDs: &CRDs{Client: fakeClient(appCRD(t)), Resources: serveApps}, Apply: func(rs []*rules.Rule) { sets = append(sets, rs) }})
	if err != nil {
		t.Fatal(err)
	}
	s.loaded.Store(true) // as once the first list of Rule objects is observed
	first := s.Rules()[0]
	if err := s.Admit(ctx, first, false); err != nil {
		t.Fatalf("Admit() = %v for a rule that fits", err)
	}

	if err := os.WriteFile(file, []byte(ruleDoc("r", "parent.spec.imgae")), 0o644); err != nil {
		t.Fatal(err)
	}
	if s.readFiles(ctx) {
		t.Error("a file edited to a version that does not fit was taken")
	}
	if !strings.Contains(s.fileErr, `parent.spec has no field "imgae"`) {
		t.Errorf("the files' error = %q, want it to name the field", s.fileErr)
	}
	if s.Rules()[0] != first {
		t.Error("the previous version no longer runs")
	}

	// A version that does not fit when it starts (the CRD came later, or
	// changed) waits, and says why.
	bad := appRule(t, "r", "parent.spec.imgae")
	err = s.Admit(ctx, bad, false)
	var te *TypeError
	if !errors.As(err, &te) || !strings.Contains(err.Error(), "rules.yaml:12:31") {
		t.Errorf("Admit() = %v, want a TypeError naming the line", err)
	}

	// A Rule object that was never valid: the sweeps of parents that no
	// rule selects wait, as it may select them.
	broken := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(ruleDoc("broken", "parent.spec.imgae")), &broken.Object); err != nil {
		t.Fatal(err)
	}
	broken.SetUID("u0")
	broken.SetGeneration(1)
	s.loaded.Store(true)
	s.recompute(ctx) // the first set with every Rule object, handed over
	if !s.Settled() {
		t.Fatal("Settled() = false with every rule valid")
	}
	if s.observe(ctx, broken, false) {
		t.Fatal("an invalid Rule object was taken")
	}
	if s.Settled() {
		t.Error("Settled() = true while a Rule object was never valid")
	}
	if !s.observe(ctx, broken, true) || !s.Settled() {
		t.Error("Settled() = false once the invalid Rule object was deleted")
	}

	// A Rule object: the field path in the object.
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(ruleDoc("obj", "parent.spec.imgae")), &obj.Object); err != nil {
		t.Fatal(err)
	}
	obj.SetUID("u1")
	obj.SetGeneration(1)
	// Not served when it was created: taken, and checked when it starts.
	s.cfg.CRDs.Resources = served{}
	if !s.observe(ctx, obj, false) {
		t.Fatal("a valid Rule object was not taken")
	}
	s.recompute(ctx)
	s.cfg.CRDs.Resources = serveApps
	err = s.Admit(ctx, s.objects["obj"].rule, false)
	if !errors.As(err, &te) || !strings.Contains(err.Error(), `spec.children[0].template.data.v: ${parent.spec.imgae}: parent.spec has no field "imgae"`) {
		t.Errorf("Admit() = %v, want a TypeError with the field path", err)
	}
	s.mu.Lock()
	status := s.statusLocked("obj", s.objects["obj"])
	s.mu.Unlock()
	acc := status["conditions"].([]any)[0].(map[string]any)
	if acc["status"] != "False" || acc["reason"] != ReasonInvalid || !strings.Contains(acc["message"].(string), "spec.children[0].template.data.v") {
		t.Errorf("Accepted = %v, want False, Invalid, naming the field", acc)
	}
	// A new generation that does not fit is not taken while the CRD is
	// served.
	obj2 := obj.DeepCopy()
	obj2.SetGeneration(2)
	if s.observe(ctx, obj2, false) {
		t.Error("a new version that does not fit was taken")
	}
	if s.objects["obj"].err == nil {
		t.Error("the object's error is not reported")
	}
}

// progress is a Progress that knows one state for every rule.
type progress controller.RuleState

func (p progress) State(string) (controller.RuleState, bool) { return controller.RuleState(p), true }

// A rule that runs without its record of child kinds is Ready, and its
// message says what kgen cannot do meanwhile, and why.
func TestStatusRecordError(t *testing.T) {
	ctx := context.Background()
	s, err := New(Config{Objects: true, Client: fakeClient(appCRD(t)), Resources: serveApps,
		Progress: progress{Running: true, Synced: true, RecordError: `configmaps "kgen-state" is forbidden`}, Apply: func([]*rules.Rule) {}})
	if err != nil {
		t.Fatal(err)
	}
	s.loaded.Store(true) // as once the first list of Rule objects is observed
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(ruleDoc("obj", "parent.spec.image")), &obj.Object); err != nil {
		t.Fatal(err)
	}
	obj.SetUID("u1")
	obj.SetGeneration(1)
	if !s.observe(ctx, obj, false) {
		t.Fatal("a valid Rule object was not taken")
	}
	s.recompute(ctx)
	s.mu.Lock()
	status := s.statusLocked("obj", s.objects["obj"])
	s.mu.Unlock()
	ready := status["conditions"].([]any)[1].(map[string]any)
	if msg, _ := ready["message"].(string); ready["status"] != "True" || !strings.Contains(msg, "while kgen is stopped may not be pruned") || !strings.Contains(msg, "forbidden") {
		t.Errorf("Ready = %v, want True, saying what may not be pruned and why", ready)
	}
}

// A rule whose caches have not synced says which, and why: the reason
// follows the typed state (Forbidden only when a list was refused), not
// the error's text, and the message names each informer and its error.
func TestStatusUnsyncedCaches(t *testing.T) {
	gadgets := watch.Key{GVR: schema.GroupVersionResource{Group: "example.com", Version: "v2", Resource: "gadgets"}, Namespace: "ns"}
	secrets := watch.Key{GVR: schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, Namespace: "ns"}
	webhook := errors.New(`conversion webhook for example.com/v1, Kind=Gadget failed: Post "https://127.0.0.1:1/convert": dial tcp 127.0.0.1:1: connect: connection refused`)
	refused := apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "", errors.New("no RBAC"))
	for _, tc := range []struct {
		name      string
		state     progress
		ready     string // "False" if empty
		reason    string
		want, not []string
	}{
		{name: "not listed yet", state: progress{Running: true, Unsynced: []controller.UnsyncedCache{{Resource: gadgets}}},
			reason: "Waiting", want: []string{"syncing", "example.com/v2, Resource=gadgets in ns"}},
		{name: "a list fails", state: progress{Running: true, Unsynced: []controller.UnsyncedCache{{Resource: gadgets, Err: webhook}, {Resource: secrets}}},
			reason: "Waiting", want: []string{"gadgets in ns: conversion webhook", "connection refused"}, not: []string{"secrets"}},
		{name: "text that says forbidden is not Forbidden", state: progress{Running: true, Unsynced: []controller.UnsyncedCache{{Resource: gadgets, Err: errors.New("webhook: forbidden by policy")}}},
			reason: "Waiting", want: []string{"forbidden by policy"}},
		{name: "a list is refused", state: progress{Running: true, Forbidden: true, Unsynced: []controller.UnsyncedCache{{Resource: secrets, Err: refused}}},
			reason: "Forbidden", want: []string{"v1, Resource=secrets in ns", "no RBAC"}},
		// After the caches synced: the rule runs, on caches that miss
		// every change since, and says so.
		{name: "a watch is refused after the caches synced", state: progress{Running: true, Synced: true, Forbidden: true,
			Stale: []controller.UnsyncedCache{{Resource: secrets, Err: refused}}},
			reason: "Forbidden", want: []string{"does not see changes", "v1, Resource=secrets in ns", "no RBAC"}, not: []string{"not synced"}},
		{name: "a watch fails after the caches synced", state: progress{Running: true, Synced: true,
			Stale: []controller.UnsyncedCache{{Resource: gadgets, Err: webhook}}},
			reason: "Waiting", want: []string{"does not see changes", "gadgets in ns: conversion webhook"}},
		{name: "a stale cache in a namespace that is gone", state: progress{Running: true, Synced: true,
			Stale: []controller.UnsyncedCache{{Resource: secrets, Err: refused, NamespaceGone: "does not exist"}}},
			ready: "True", reason: "Running", want: []string{"but not in namespace ns, which does not exist"}},
		// A namespace the rule names is gone, and kgen's grants with it:
		// the rule runs in its other namespaces, and says so.
		{name: "a list is refused in a namespace that is gone", state: progress{Running: true, Synced: true,
			Unsynced: []controller.UnsyncedCache{{Resource: secrets, Err: refused, NamespaceGone: "does not exist"}}},
			ready: "True", reason: "Running", want: []string{"the rule runs, but not in namespace ns, which does not exist (/v1, Resource=secrets in ns: ", "no RBAC"}, not: []string{"finalizer"}},
		// With sharding: the rule runs here, but another replica may not
		// list a kind of it, and its parents wait.
		{name: "another shard may not list", state: progress{Running: true, Synced: true,
			Shards: []controller.ShardState{{Shard: "b", Reason: "Forbidden", Message: "caches not synced, as lists or watches fail: secrets: forbidden"}}},
			reason: "Forbidden", want: []string{"does not run on every replica", "on shard b (Forbidden): caches not synced", "secrets: forbidden"}},
		{name: "the gravest reason of the other shards", state: progress{Running: true, Synced: true,
			Shards: []controller.ShardState{{Shard: "a", Reason: "Waiting", Message: "its caches are syncing"}, {Shard: "b", Reason: "Forbidden"}}},
			reason: "Forbidden", want: []string{"on shard a (Waiting): its caches are syncing", "on shard b (Forbidden): its log says why"}},
		{name: "this replica's own problem comes first", state: progress{Running: true, Forbidden: true, Unsynced: []controller.UnsyncedCache{{Resource: secrets, Err: refused}},
			Shards: []controller.ShardState{{Shard: "b", Reason: "Waiting", Message: "its caches are syncing"}}},
			reason: "Forbidden", want: []string{"no RBAC"}, not: []string{"shard b"}},
		{name: "a list is refused in a namespace being deleted", state: progress{Running: true, Synced: true,
			Unsynced: []controller.UnsyncedCache{{Resource: secrets, Err: refused, NamespaceGone: "is being deleted"}}},
			ready: "True", reason: "Running", want: []string{"but not in namespace ns, which is being deleted", "parents there that hold kgen's finalizer kgen.dev/cleanup keep it"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s, err := New(Config{Objects: true, Client: fakeClient(appCRD(t)), Resources: serveApps, Progress: tc.state, Apply: func([]*rules.Rule) {}})
			if err != nil {
				t.Fatal(err)
			}
			s.loaded.Store(true) // as once the first list of Rule objects is observed
			obj := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(ruleDoc("obj", "parent.spec.image")), &obj.Object); err != nil {
				t.Fatal(err)
			}
			obj.SetUID("u1")
			obj.SetGeneration(1)
			if !s.observe(ctx, obj, false) {
				t.Fatal("a valid Rule object was not taken")
			}
			s.recompute(ctx)
			s.mu.Lock()
			status := s.statusLocked("obj", s.objects["obj"])
			s.mu.Unlock()
			ready := status["conditions"].([]any)[1].(map[string]any)
			msg, _ := ready["message"].(string)
			if tc.ready == "" {
				tc.ready = "False"
			}
			if ready["status"] != tc.ready || ready["reason"] != tc.reason {
				t.Errorf("Ready = %v, want %s, %s", ready, tc.ready, tc.reason)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q does not say %q", msg, w)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(msg, w) {
					t.Errorf("message %q says %q", msg, w)
				}
			}
		})
	}
}

// A running rule is checked again when a CRD of its kinds changes: one
// that no longer fits keeps running, and its Rule object says Accepted
// False, naming the field path and the expression; the CRD changed back,
// Accepted is True again. A file rule is only logged.
func TestSetRecheck(t *testing.T) {
	ctx := context.Background()
	crds := fakeClient(appCRD(t))
	s, err := New(Config{Objects: true, Client: fakeClient(), Resources: serveApps,
		CRDs: &CRDs{Client: crds, Resources: serveApps}, Apply: func([]*rules.Rule) {}})
	if err != nil {
		t.Fatal(err)
	}
	s.loaded.Store(true) // as once the first list of Rule objects is observed
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(ruleDoc("obj", "parent.spec.image")), &obj.Object); err != nil {
		t.Fatal(err)
	}
	obj.SetUID("u1")
	obj.SetGeneration(1)
	if !s.observe(ctx, obj, false) {
		t.Fatal("a valid Rule object was not taken")
	}
	s.recompute(ctx)
	rule := s.objects["obj"].rule
	if err := s.Admit(ctx, rule, false); err != nil {
		t.Fatalf("Admit() = %v for a rule that fits", err)
	}
	acceptedIs := func(want string, words ...string) {
		t.Helper()
		s.mu.Lock()
		status := s.statusLocked("obj", s.objects["obj"])
		s.mu.Unlock()
		acc := status["conditions"].([]any)[0].(map[string]any)
		if acc["status"] != want {
			t.Fatalf("Accepted = %v, want %s", acc, want)
		}
		for _, w := range words {
			if !strings.Contains(acc["message"].(string), w) {
				t.Errorf("Accepted message %q does not say %q", acc["message"], w)
			}
		}
	}
	acceptedIs("True")
	setCRD := func(field string) {
		t.Helper()
		crd := appCRD(t)
		props := crd.Object["spec"].(map[string]any)["versions"].([]any)[0].(map[string]any)["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any)["properties"].(map[string]any)["spec"].(map[string]any)
		props["properties"] = map[string]any{field: map[string]any{"type": "string"}}
		if _, err := crds.Resource(CRDGVR).Update(ctx, crd, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	setCRD("imageRef")
	s.Recheck(ctx, rule)
	acceptedIs("False", `spec.children[0].template.data.v: ${parent.spec.image}`, "keeps running")
	setCRD("image")
	s.Recheck(ctx, rule)
	acceptedIs("True")

	// The CRD cannot be read: what is known stands.
	setCRD("imageRef")
	s.Recheck(ctx, rule)
	crds.PrependReactor("get", "customresourcedefinitions", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("try later")
	})
	s.Recheck(ctx, rule)
	acceptedIs("False", "keeps running")
}

// Editing one rule of a file with several keeps the others as they run
// (the same *rules.Rule), so the controller neither restarts them nor
// reconciles their parents (contract section 7): also a rule that only
// moved, or whose comments changed, which was read again and reconciled
// every parent it had.
func TestSetFileEditKeepsOtherRules(t *testing.T) {
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "rules.yaml")
	write := func(docs ...string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(strings.Join(docs, "---\n")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(ruleDoc("a", "parent.spec.image"), ruleDoc("b", "parent.spec.image"), ruleDoc("c", "parent.spec.image"))
	s, err := New(Config{Paths: []string{file}, Client: fakeClient(appCRD(t)), Resources: serveApps,
		CRDs: &CRDs{Client: fakeClient(appCRD(t)), Resources: serveApps}})
	if err != nil {
		t.Fatal(err)
	}
	byName := func() map[string]*rules.Rule {
		out := map[string]*rules.Rule{}
		for _, r := range s.Rules() {
			out[r.Name] = r
		}
		return out
	}
	before := byName()

	write(ruleDoc("a", "parent.spec.image"), ruleDoc("b", "parent.spec.image + '-2'"), ruleDoc("c", "parent.spec.image"))
	if !s.readFiles(ctx) {
		t.Fatal("the edit was not taken")
	}
	s.recompute(ctx)
	after := byName()
	if after["b"] == before["b"] {
		t.Error("the edited rule b was kept")
	}
	for _, name := range []string{"a", "c"} {
		if after[name] != before[name] {
			t.Errorf("rule %s, not edited, was replaced by a new version", name)
		}
	}

	// A new rule at the top of the file, b gains a comment: a, b and c
	// moved, and are kept.
	write(ruleDoc("new", "parent.spec.image"), ruleDoc("a", "parent.spec.image"), "# b's comment\n"+ruleDoc("b", "parent.spec.image + '-2'")+"# one more line\n", ruleDoc("c", "parent.spec.image"))
	if !s.readFiles(ctx) {
		t.Fatal("the edit was not taken")
	}
	s.recompute(ctx)
	moved := byName()
	if moved["new"] == nil {
		t.Fatal("the new rule was not taken")
	}
	for _, name := range []string{"a", "b", "c"} {
		if moved[name] != after[name] {
			t.Errorf("rule %s, which only moved in the file, was replaced by a new version", name)
		}
	}
	// c, moved, is edited: its new version is taken.
	write(ruleDoc("new", "parent.spec.image"), ruleDoc("a", "parent.spec.image"), ruleDoc("b", "parent.spec.image + '-2'"), ruleDoc("c", "parent.spec.image + '-3'"))
	if !s.readFiles(ctx) {
		t.Fatal("the edit was not taken")
	}
	s.recompute(ctx)
	if byName()["c"] == moved["c"] {
		t.Error("the edited rule c was kept")
	}
}

// A rules directory whose last file is removed (a ConfigMap mounted there
// emptied, as when moving to Rule objects) holds no rules: its rules stop
// rather than run on as if the directory were broken, and a kgen started
// on the empty directory starts.
func TestSetDirectoryEmptied(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	file := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(file, []byte(ruleDoc("a", "parent.spec.image")), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Paths: []string{dir}, Client: fakeClient(appCRD(t)), Resources: serveApps, CRDs: &CRDs{Client: fakeClient(appCRD(t)), Resources: serveApps}}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(s.Rules()); n != 1 {
		t.Fatalf("%d rules, want 1", n)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	// Empty at one read, as when a file is removed and written again: the
	// rules keep running.
	if s.readFiles(ctx) {
		t.Fatal("a directory empty at one read stopped its rules")
	}
	if n := len(s.Rules()); n != 1 {
		t.Fatalf("%d rules after one empty read, want 1", n)
	}
	if !s.readFiles(ctx) {
		t.Fatal("the removal of the last file was not taken")
	}
	s.recompute(ctx)
	if rs := s.Rules(); len(rs) != 0 || s.fileErr != "" {
		t.Errorf("rules %v, files' error %q; want none and none", rs, s.fileErr)
	}
	if _, err := New(cfg); err != nil {
		t.Errorf("New on the empty directory: %v", err)
	}
	cfg.Paths = []string{filepath.Join(dir, "missing")}
	if _, err := New(cfg); err == nil {
		t.Error("New on a directory that does not exist: no error")
	}
}

// A Rule object that conflicts with another (both may select the same
// parents) is Accepted=False and does not run; once the other is deleted it
// runs, and its status says so: Accepted=True, Ready "the rule runs",
// not a previous version that never was.
func TestStatusConflictResolved(t *testing.T) {
	var logged []string
	ctx := klog.NewContext(context.Background(), funcr.New(func(_, args string) { logged = append(logged, args) }, funcr.Options{}))
	s, err := New(Config{Objects: true, Client: fakeClient(appCRD(t)), Resources: serveApps,
		Progress: progress{Running: true, Synced: true}, Apply: func([]*rules.Rule) {}})
	if err != nil {
		t.Fatal(err)
	}
	s.loaded.Store(true) // as once the first list of Rule objects is observed
	ruleObject := func(name, uid string) *unstructured.Unstructured {
		obj := &unstructured.Unstructured{}
		// Both watch the namespace "team".
		if err := yaml.Unmarshal([]byte(strings.Replace(ruleDoc(name, "parent.spec.image"), "namespaces: ["+name+"]", "namespaces: [team]", 1)), &obj.Object); err != nil {
			t.Fatal(err)
		}
		obj.SetUID(types.UID(uid))
		obj.SetGeneration(1)
		return obj
	}
	conditions := func(name string) (accepted, ready map[string]any) {
		s.mu.Lock()
		defer s.mu.Unlock()
		c := s.statusLocked(name, s.objects[name])["conditions"].([]any)
		return c[0].(map[string]any), c[1].(map[string]any)
	}
	first, second := ruleObject("first", "u1"), ruleObject("second", "u2")
	for _, o := range []*unstructured.Unstructured{first, second} {
		if !s.observe(ctx, o, false) {
			t.Fatalf("Rule %s, valid in itself, was not taken", o.GetName())
		}
		s.recompute(ctx)
	}
	if acc, ready := conditions("second"); acc["status"] != "False" || !strings.Contains(fmt.Sprint(acc["message"]), `rule "first"`) || ready["status"] != "False" {
		t.Errorf("the conflicting rule: Accepted = %v, Ready = %v; want both False, naming rule first", acc, ready)
	}
	// The log says it once, not at every recompute while it lasts.
	s.recompute(ctx)
	var conflicts []string
	for _, l := range logged {
		if strings.Contains(l, "conflicts with another rule") {
			conflicts = append(conflicts, l)
		}
	}
	if len(conflicts) != 1 || !strings.Contains(conflicts[0], `"rule"="second"`) || !strings.Contains(conflicts[0], `rule \"first\"`) {
		t.Errorf("logged %q, want one line naming rule second and the rule it conflicts with", conflicts)
	}

	if !s.observe(ctx, first, true) {
		t.Fatal("the deleted Rule was not taken")
	}
	s.recompute(ctx)
	if got := s.applied["second"]; got == nil || got != s.objects["second"].rule {
		t.Fatal("the rule does not run once the rule it conflicted with is gone")
	}
	acc, ready := conditions("second")
	if acc["status"] != "True" {
		t.Errorf("Accepted = %v once the conflict is gone, want True", acc)
	}
	if ready["status"] != "True" || ready["message"] != "the rule runs" {
		t.Errorf("Ready = %v, want True, the rule runs", ready)
	}
}

// A CRD the API server refuses (a scope that cannot change) is applied
// again with backoff, not at every try to start the rule; meanwhile the
// rule waits with the same error. A new version of the rule is applied at
// once, and one that succeeds ends the backoff.
func TestCRDsPrepareBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client := fakeClient()
		var applies []time.Duration
		refuse := true
		start := time.Now()
		client.PrependReactor("patch", "customresourcedefinitions", func(a clienttesting.Action) (bool, runtime.Object, error) {
			applies = append(applies, time.Since(start))
			if refuse {
				return true, nil, apierrors.NewInvalid(schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}, "apps.example.com",
					field.ErrorList{field.Invalid(field.NewPath("spec", "scope"), "Cluster", "field is immutable")})
			}
			obj := &unstructured.Unstructured{}
			err := obj.UnmarshalJSON(a.(clienttesting.PatchAction).GetPatch())
			return true, obj, err
		})
		c := &CRDs{Client: client, Resources: served{}, Manage: true}
		withSchema := func(field string) *rules.Rule {
			doc := strings.Replace(ruleDoc("r", "parent.spec.image"), "namespaces: [r]}", "namespaces: [r], schema: {image: string, "+field+": integer}}", 1)
			rs, err := rules.Parse("rules.yaml", []byte(doc), rules.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return rs[0]
		}
		rule := withSchema("replicas")
		// The controller tries a waiting rule every 5 s: for 5 minutes.
		for range 60 {
			if err := c.Prepare(context.Background(), rule); err == nil || !strings.Contains(err.Error(), "field is immutable") {
				t.Fatalf("Prepare: %v, want the API server's refusal", err)
			}
			time.Sleep(5 * time.Second)
		}
		want := []time.Duration{0, 5 * time.Second, 15 * time.Second, 35 * time.Second, 75 * time.Second, 155 * time.Second}
		if fmt.Sprint(applies) != fmt.Sprint(want) {
			t.Errorf("applied at %v, want %v", applies, want)
		}
		// A new version is applied at once.
		refuse = false
		applies = nil
		start = time.Now()
		if err := c.Prepare(context.Background(), withSchema("size")); err != nil {
			t.Fatalf("Prepare of a new version: %v", err)
		}
		if len(applies) != 1 {
			t.Errorf("a new version of the rule applied %d times, want 1 at once", len(applies))
		}
	})
}

// With --manage-crds, two Rule objects that describe one parent kind with
// different schemas conflict: the later does not run, and says why.
// Without it, both run (the schema only types their expressions).
func TestManagedCRDsConflict(t *testing.T) {
	for _, manage := range []bool{true, false} {
		t.Run(fmt.Sprintf("manage=%t", manage), func(t *testing.T) {
			ctx := context.Background()
			s, err := New(Config{Objects: true, Client: fakeClient(appCRD(t)), Resources: serveApps,
				CRDs:     &CRDs{Client: fakeClient(appCRD(t)), Resources: serveApps, Manage: manage},
				Progress: progress{Running: true, Synced: true}, Apply: func([]*rules.Rule) {}})
			if err != nil {
				t.Fatal(err)
			}
			s.loaded.Store(true)
			for _, r := range []struct{ name, schema string }{{"one", "{image: string}"}, {"two", "{image: string, size: integer}"}} {
				doc := strings.Replace(ruleDoc(r.name, "parent.spec.image"), "namespaces: ["+r.name+"]}", "namespaces: ["+r.name+"], schema: "+r.schema+"}", 1)
				s.observe(ctx, ruleObject(t, doc, "uid-"+r.name, 1, nil), false)
			}
			s.recompute(ctx)
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.applied["one"] == nil || (s.applied["two"] == nil) != manage {
				t.Errorf("one runs: %t, two runs: %t; want one, and two only without --manage-crds", s.applied["one"] != nil, s.applied["two"] != nil)
			}
			if c := s.objects["two"].conflict; manage && (c == nil || !strings.Contains(c.Error(), `rule "one"`)) {
				t.Errorf("two's conflict: %v, want one naming rule one", c)
			}
		})
	}
}

// With --manage-crds, a new version of a rule whose schema changes the
// type of a field of the CRD served now is not applied: the objects that
// hold the field could no longer be written, their status neither (an
// audit saw every status write fail, and Ready stay as it was). Other
// changes are applied.
func TestCRDsPrepareRefusesTypeChange(t *testing.T) {
	// SCHEMA, or SCHEMA|EXPR with a status field size of that expression
	// (a string field otherwise).
	withSchema := func(t *testing.T, schema string) *rules.Rule {
		schema, status, _ := strings.Cut(schema, "|")
		if status == "" {
			status = "parent.metadata.name"
		}
		doc := strings.Replace(ruleDoc("r", "parent.spec.image"), "namespaces: [r]}", "namespaces: [r], schema: {"+schema+"}}", 1) +
			"  status: {size: \"${" + status + "}\"}\n"
		rs, err := rules.Parse("rules.yaml", []byte(doc), rules.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return rs[0]
	}
	const was = `image: string, replicas: integer, size: integer, tags: "[]string"`
	for _, tc := range []struct {
		name, schema string
		refused      string // what the error names; "" when applied
	}{
		{"a field added", was + ", zone: string", ""},
		{"a field removed", `image: string, replicas: integer, tags: "[]string"`, ""},
		{"an integer becomes a number", `image: string, replicas: integer, size: number, tags: "[]string"`, ""},
		{"a string becomes an integer", `image: integer, replicas: integer, size: integer, tags: "[]string"`, "spec.image from string to integer"},
		{"a list's items change type", `image: string, replicas: integer, size: integer, tags: "[]integer"`, "spec.tags[*] from string to integer"},
		{"a status field's expression changes type", was + "|size(parent.spec.image)", "the rule's status fields (spec.status) change the type of status.size from string to integer"},
		{"an integer becomes a string", `image: string, replicas: string, size: integer, tags: "[]string"`, "spec.replicas from integer to string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fakeClient()
			live, err := withSchema(t, was).CRD()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := client.Resource(CRDGVR).Create(context.Background(), live, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			applies := 0
			client.PrependReactor("patch", "customresourcedefinitions", func(a clienttesting.Action) (bool, runtime.Object, error) {
				applies++
				return true, live, nil
			})
			c := &CRDs{Client: client, Resources: serveApps, Manage: true}
			err = c.Prepare(context.Background(), withSchema(t, tc.schema))
			switch {
			case tc.refused == "" && (err != nil || applies != 1):
				t.Errorf("error %v, %d applies; want it applied", err, applies)
			case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused) || applies != 0):
				t.Errorf("error %v, %d applies; want it refused, naming %q", err, applies, tc.refused)
			}
		})
	}
}

// A version of a Rule object that ran before starts although it no
// longer fits its kinds' schemas (a CRD changed while kgen was stopped),
// reported as a running rule is after such a change: the latest version
// when its status records it as running, or the recorded version when
// the latest does not fit either; a file rule when the controller's record
// says this version ran. One that never ran still waits (a live audit: a
// restarted kgen left the parents of such a rule unreconciled, Ready=True
// of their old generation).
func TestAdmitWhatRanBefore(t *testing.T) {
	ctx := context.Background()
	s, err := New(Config{Objects: true, Client: fakeClient(appCRD(t)), Resources: serveApps,
		CRDs:  &CRDs{Client: fakeClient(appCRD(t)), Resources: serveApps},
		Apply: func([]*rules.Rule) {}})
	if err != nil {
		t.Fatal(err)
	}
	s.loaded.Store(true)
	var te *TypeError
	if err := s.Admit(ctx, appRule(t, "file", "parent.spec.imgae"), false); !errors.As(err, &te) {
		t.Errorf("Admit() = %v for a file rule that never ran, want a TypeError", err)
	}
	if err := s.Admit(ctx, appRule(t, "file", "parent.spec.imgae"), true); err != nil {
		t.Errorf("Admit() = %v for a file rule whose version ran, want it to start", err)
	}

	// generation 3; running is the generation status.running records
	// (0: none), runningField the field that version reads.
	object := func(name string, running int64, runningField string) *unstructured.Unstructured {
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(ruleDoc(name, "parent.spec.imgae")), &obj.Object); err != nil {
			t.Fatal(err)
		}
		obj.SetUID(types.UID("u-" + name))
		obj.SetGeneration(3)
		if running > 0 {
			ran := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(ruleDoc(name, runningField)), &ran.Object); err != nil {
				t.Fatal(err)
			}
			_ = unstructured.SetNestedField(obj.Object, running, "status", "running", "generation")
			_ = unstructured.SetNestedField(obj.Object, ran.Object["spec"], "status", "running", "spec")
		}
		return obj
	}
	// Observed with the CRD served, as at a restart.
	for _, tc := range []struct {
		obj    *unstructured.Unstructured
		starts bool
		// accepted is what Accepted's message says: of the latest
		// version, which runs, or does not
		accepted string
	}{
		{object("latest-ran", 3, "parent.spec.imgae"), true, "the rule keeps running"},
		{object("older-ran", 2, "parent.spec.imaeg"), true, `${parent.spec.imgae}: parent.spec has no field "imgae"`},
		{object("never", 0, ""), false, ""},
	} {
		name := tc.obj.GetName()
		s.observe(ctx, tc.obj, false)
		s.recompute(ctx)
		s.mu.Lock()
		rule := s.applied[name]
		s.mu.Unlock()
		if !tc.starts {
			if rule != nil {
				t.Errorf("%s: a version that never ran and does not fit is handed to the controller", name)
			}
			continue
		}
		if rule == nil {
			t.Errorf("%s: no version is handed to the controller", name)
			continue
		}
		if err := s.Admit(ctx, rule, false); err != nil {
			t.Errorf("%s: Admit() = %v for the version that ran, want it to start", name, err)
		}
		s.mu.Lock()
		acc := s.statusLocked(name, s.objects[name])["conditions"].([]any)[0].(map[string]any)
		s.mu.Unlock()
		if acc["status"] != "False" || !strings.Contains(fmt.Sprint(acc["message"]), tc.accepted) {
			t.Errorf("%s: Accepted = %v, want False, saying %q", name, acc, tc.accepted)
		}
	}
}
