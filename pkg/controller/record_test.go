package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"kgen.dev/kgen/pkg/mapper"
)

var (
	deployments = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	configMaps  = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
)

func TestScopesRoundTrip(t *testing.T) {
	tests := []struct {
		name   string
		value  string
		scopes []ChildScope
		bad    []string
	}{
		{name: "empty", value: ""},
		{name: "every namespace", value: "apps/v1 Deployment\n", scopes: []ChildScope{{GroupVersionKind: deployments}}},
		{name: "sorted, one namespace", value: "apps/v1 Deployment\nv1 ConfigMap team-a\n",
			scopes: []ChildScope{{GroupVersionKind: configMaps, Namespace: "team-a"}, {GroupVersionKind: deployments}}},
		{name: "bad lines are left out", value: "v1 ConfigMap\nnonsense\nv1 ConfigMap a b c\n/x/y Kind\n",
			scopes: []ChildScope{{GroupVersionKind: configMaps}}, bad: []string{"nonsense", "v1 ConfigMap a b c", "/x/y Kind"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, bad := decodeScopes(tt.value)
			sorted := slices.Clone(tt.scopes)
			slices.SortFunc(sorted, compareScopes)
			slices.SortFunc(got, compareScopes)
			if !slices.Equal(got, sorted) || !slices.Equal(bad, tt.bad) {
				t.Errorf("decodeScopes(%q) = %v, %q; want %v, %q", tt.value, got, bad, sorted, tt.bad)
			}
			if len(tt.bad) == 0 && len(tt.scopes) > 0 {
				if enc := encodeScopes(tt.scopes); enc != tt.value {
					t.Errorf("encodeScopes(%v) = %q, want %q", tt.scopes, enc, tt.value)
				}
			}
		})
	}
}

// A recorded scope is pruned when the rule no longer covers it: another
// group and kind, or a namespace the rule no longer watches. A version
// change of the same kind covers it.
func TestUncovered(t *testing.T) {
	cm := func(ns string) ChildScope { return ChildScope{GroupVersionKind: configMaps, Namespace: ns} }
	deploy := ChildScope{GroupVersionKind: deployments}
	deployV2 := ChildScope{GroupVersionKind: deployments.GroupKind().WithVersion("v2")}
	tests := []struct {
		name              string
		recorded, current []ChildScope
		want              []ChildScope
	}{
		{name: "nothing recorded", current: []ChildScope{deploy}},
		{name: "the same", recorded: []ChildScope{deploy, cm("")}, current: []ChildScope{cm(""), deploy}},
		{name: "a kind left", recorded: []ChildScope{deploy, cm("")}, current: []ChildScope{cm("")}, want: []ChildScope{deploy}},
		{name: "the last kind left", recorded: []ChildScope{deploy}, want: []ChildScope{deploy}},
		{name: "another version", recorded: []ChildScope{deploy}, current: []ChildScope{deployV2}},
		{name: "a namespace left", recorded: []ChildScope{cm("a"), cm("b")}, current: []ChildScope{cm("a")}, want: []ChildScope{cm("b")}},
		{name: "every namespace covers one", recorded: []ChildScope{cm("a")}, current: []ChildScope{cm("")}},
		{name: "one namespace does not cover every one", recorded: []ChildScope{cm("")}, current: []ChildScope{cm("a")}, want: []ChildScope{cm("")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := uncovered(tt.recorded, tt.current); !slices.Equal(got, tt.want) {
				t.Errorf("uncovered() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestConfigMapRecord(t *testing.T) {
	ctx := context.Background()
	deploy := []ChildScope{{GroupVersionKind: deployments}}
	cm := []ChildScope{{GroupVersionKind: configMaps, Namespace: "team-a"}}
	tests := []struct {
		name     string
		existing map[string]string // the ConfigMap's data; nil when it does not exist
		rule     string
		scopes   []ChildScope
		want     map[string]string // the data after Save; nil when there is no ConfigMap
	}{
		{name: "created", rule: "web", scopes: deploy, want: map[string]string{"web": "apps/v1 Deployment\n"}},
		{name: "a key added, others kept", existing: map[string]string{"db": "v1 Secret\n"}, rule: "web", scopes: deploy,
			want: map[string]string{"db": "v1 Secret\n", "web": "apps/v1 Deployment\n"}},
		{name: "a key changed", existing: map[string]string{"web": "apps/v1 Deployment\n"}, rule: "web", scopes: cm,
			want: map[string]string{"web": "v1 ConfigMap team-a\n"}},
		{name: "a key removed", existing: map[string]string{"web": "apps/v1 Deployment\n", "db": "v1 Secret\n"}, rule: "web",
			want: map[string]string{"db": "v1 Secret\n"}},
		{name: "nothing to remove", rule: "web"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var objs []runtime.Object
			if tt.existing != nil {
				objs = append(objs, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: DefaultRecordName, Namespace: "kgen"}, Data: tt.existing})
			}
			client := fake.NewClientset(objs...)
			r := &ConfigMapRecord{Client: client.CoreV1(), Namespace: "kgen"}
			existing, _ := decodeScopes(tt.existing[tt.rule])
			if _, err := r.Update(ctx, tt.rule, tt.scopes, minus(existing, tt.scopes)); err != nil {
				t.Fatalf("Update() = %v", err)
			}
			got, err := client.CoreV1().ConfigMaps("kgen").Get(ctx, DefaultRecordName, metav1.GetOptions{})
			switch {
			case tt.want == nil && apierrors.IsNotFound(err):
				return
			case err != nil:
				t.Fatal(err)
			}
			if !mapsEqual(got.Data, tt.want) {
				t.Errorf("data = %v, want %v", got.Data, tt.want)
			}
			loaded, err := r.Load(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(loaded.Children[tt.rule], tt.scopes) {
				t.Errorf("Load().Children[%s] = %v, want %v", tt.rule, loaded.Children[tt.rule], tt.scopes)
			}
		})
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// Every request names the ConfigMap (RBAC grants it by resourceNames), and
// errors say which ConfigMap and why.
func TestConfigMapRecordRequests(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	var names []string
	client.PrependReactor("*", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if n, ok := a.(interface{ GetName() string }); ok {
			names = append(names, a.GetVerb()+" "+n.GetName())
		} else {
			names = append(names, a.GetVerb())
		}
		return false, nil, nil
	})
	r := &ConfigMapRecord{Client: client.CoreV1(), Namespace: "kgen"}
	if _, err := r.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Update(ctx, "web", []ChildScope{{GroupVersionKind: deployments}}, nil); err != nil {
		t.Fatal(err)
	}
	// Loaded; then read (missing), created by an apply, and written
	// pinned to the apply's answer.
	want := []string{"get kgen-state", "get kgen-state", "patch kgen-state", "patch kgen-state"}
	if !slices.Equal(names, want) {
		t.Errorf("requests = %v, want %v", names, want)
	}

	client.PrependReactor("get", "configmaps", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, DefaultRecordName, errors.New("no"))
	})
	if _, err := r.Load(ctx); err == nil || !strings.Contains(err.Error(), "kgen/kgen-state") || !apierrors.IsForbidden(err) {
		t.Errorf("Load() = %v, want a forbidden error naming the ConfigMap", err)
	}
}

// A rule's parent scopes have their own key, which a write of its child
// scopes leaves alone, and which Load returns as parents only.
func TestConfigMapRecordParents(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	r := &ConfigMapRecord{Client: client.CoreV1(), Namespace: "kgen"}
	gadgetsIn := []ChildScope{{GroupVersionKind: gadgetKind, Namespace: "team-a"}, {GroupVersionKind: gadgetKind, Namespace: "team-b"}}
	if _, err := r.UpdateParents(ctx, "web", gadgetsIn, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Update(ctx, "web", []ChildScope{{GroupVersionKind: deployments}}, nil); err != nil {
		t.Fatal(err)
	}
	cm, err := client.CoreV1().ConfigMaps("kgen").Get(ctx, DefaultRecordName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"web":         "apps/v1 Deployment\n",
		"web_parents": "example.com/v1 Gadget team-a\nexample.com/v1 Gadget team-b\n",
	}
	if !mapsEqual(cm.Data, want) {
		t.Errorf("data = %v, want %v", cm.Data, want)
	}
	loaded, err := r.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := loaded.Parents["web"]; !slices.Equal(got, gadgetsIn) || len(loaded.Parents) != 1 {
		t.Errorf("Load().Parents = %v, want web: %v", loaded.Parents, gadgetsIn)
	}
	if len(loaded.Children) != 1 || len(loaded.Children["web"]) != 1 {
		t.Errorf("Load().Children = %v, want web's Deployment alone", loaded.Children)
	}
	if _, err := r.UpdateParents(ctx, "web", nil, gadgetsIn); err != nil {
		t.Fatal(err)
	}
	if loaded, err = r.Load(ctx); err != nil || len(loaded.Parents) != 0 || len(loaded.Children) != 1 {
		t.Errorf("Load() = %+v, %v after the parents were removed, want web's children alone", loaded, err)
	}
}

// The running version of a rule has a key of its own, with its document,
// which Load reads apart from the scopes; "" removes it, and a write of
// what the key holds makes no request.
func TestConfigMapRecordRunning(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	r := &ConfigMapRecord{Client: client.CoreV1(), Namespace: "kgen"}
	if err := r.UpdateRunning(ctx, "web", "", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().ConfigMaps("kgen").Get(ctx, DefaultRecordName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("removing a version from a missing record made it: %v", err)
	}
	if _, err := r.Update(ctx, "web", []ChildScope{{GroupVersionKind: deployments}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := r.UpdateRunning(ctx, "web", "sha256:1", []byte(`{"kind":"Rule"}`)); err != nil {
		t.Fatal(err)
	}
	if err := r.UpdateRunning(ctx, "api", "sha256:2", nil); err != nil {
		t.Fatal(err)
	}
	loaded, err := r.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"web": "sha256:1", "api": "sha256:2"}; !mapsEqual(loaded.Running, want) {
		t.Errorf("Load().Running = %v, want %v", loaded.Running, want)
	}
	if len(loaded.Documents) != 1 || string(loaded.Documents["web"]) != `{"kind":"Rule"}` {
		t.Errorf("Load().Documents = %q, want web's alone", loaded.Documents)
	}
	if len(loaded.Children) != 1 || len(loaded.Children["web"]) != 1 {
		t.Errorf("Load().Children = %v, want web's Deployment alone", loaded.Children)
	}
	before := len(client.Actions())
	if err := r.UpdateRunning(ctx, "web", "sha256:1", []byte(`{"kind":"Rule"}`)); err != nil {
		t.Fatal(err)
	}
	if writes := slices.DeleteFunc(client.Actions()[before:], func(a clienttesting.Action) bool { return a.GetVerb() == "get" }); len(writes) > 0 {
		t.Errorf("recording the version the record holds wrote %v", writes)
	}
	if err := r.UpdateRunning(ctx, "web", "", nil); err != nil {
		t.Fatal(err)
	}
	if loaded, err = r.Load(ctx); err != nil || !mapsEqual(loaded.Running, map[string]string{"api": "sha256:2"}) {
		t.Errorf("Load() = %+v, %v after web's version was removed", loaded, err)
	}
}

// Two replicas write one rule's key: each adds its scopes and removes only
// those it removes, on what the ConfigMap holds when it writes; a write
// pinned to a resource version another writer changed meanwhile is
// refused (409) and made again on a fresh read, so neither undoes the
// other.
func TestConfigMapRecordWritersDoNotUndoEachOther(t *testing.T) {
	ctx := context.Background()
	secrets := ChildScope{GroupVersionKind: schema.GroupVersionKind{Version: "v1", Kind: "Secret"}, Namespace: "team-a"}
	deploy := ChildScope{GroupVersionKind: deployments}
	cm := ChildScope{GroupVersionKind: configMaps, Namespace: "team-a"}
	client := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: DefaultRecordName, Namespace: "kgen", ResourceVersion: "1"},
		Data: map[string]string{"web": encodeScopes([]ChildScope{cm, deploy})}})
	a := &ConfigMapRecord{Client: client.CoreV1(), Namespace: "kgen"}
	// Replica b writes between a's read and a's write: b removes the
	// ConfigMap scope it found empty and adds Secrets.
	configmaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	raced := false
	var writes int
	client.PrependReactor("patch", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
		writes++
		if !raced {
			raced = true
			cur, err := client.Tracker().Get(configmaps, "kgen", DefaultRecordName)
			if err != nil {
				return true, nil, err
			}
			b := cur.(*corev1.ConfigMap).DeepCopy()
			b.Data["web"] = encodeScopes([]ChildScope{deploy, secrets})
			b.ResourceVersion = "2"
			if err := client.Tracker().Update(configmaps, b, "kgen"); err != nil {
				return true, nil, err
			}
		}
		// The API server refuses a patch pinned to another resource
		// version than the object's (the fake client does not).
		var patch struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(a.(clienttesting.PatchAction).GetPatch(), &patch); err != nil {
			return true, nil, err
		}
		cur, err := client.Tracker().Get(configmaps, "kgen", DefaultRecordName)
		if err != nil {
			return true, nil, err
		}
		if rv := cur.(*corev1.ConfigMap).ResourceVersion; patch.Metadata.ResourceVersion != "" && patch.Metadata.ResourceVersion != rv {
			return true, nil, apierrors.NewConflict(configmaps.GroupResource(), DefaultRecordName, fmt.Errorf("resourceVersion %q, not %q", rv, patch.Metadata.ResourceVersion))
		}
		return false, nil, nil
	})
	// a removes the Deployment scope it found empty.
	got, err := a.Update(ctx, "web", nil, []ChildScope{deploy})
	if err != nil {
		t.Fatal(err)
	}
	if want := []ChildScope{secrets}; !slices.Equal(got, want) {
		t.Errorf("Update() = %v, want %v: b's change kept, a's made", got, want)
	}
	loaded, err := a.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []ChildScope{secrets}; !slices.Equal(loaded.Children["web"], want) {
		t.Errorf("recorded %v, want %v", loaded.Children["web"], want)
	}
	if writes != 2 {
		t.Errorf("%d writes, want 2: one refused, one made on a fresh read", writes)
	}
	// Nothing to change: no write.
	if _, err := a.Update(ctx, "web", []ChildScope{secrets}, []ChildScope{deploy}); err != nil || writes != 2 {
		t.Errorf("Update() of what is recorded: %v, %d writes, want none", err, writes-2)
	}
}

// Every write keeps ReleaseAnnotation true: the parent resources the
// record holds, by namespace, which the chart keeps list and patch on
// through an upgrade that takes them from the rules; and
// ReleaseChildrenAnnotation, the child resources, which it keeps list,
// watch, delete and patch on. A kind no longer served is left out; a kind
// that cannot be mapped for now leaves the annotation as it was.
func TestConfigMapRecordReleaseAnnotation(t *testing.T) {
	ctx := context.Background()
	widgetKind := schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}
	goneKind := schema.GroupVersionKind{Group: "gone.example.com", Version: "v1", Kind: "Gone"}
	flakyKind := schema.GroupVersionKind{Group: "flaky.example.com", Version: "v1", Kind: "Flaky"}
	resource := func(gvk schema.GroupVersionKind) (schema.GroupResource, error) {
		switch gvk {
		case goneKind:
			return schema.GroupResource{}, fmt.Errorf("kind %s: %w", gvk, mapper.ErrNotFound)
		case flakyKind:
			return schema.GroupResource{}, errors.New("discovery failed")
		}
		return schema.GroupResource{Group: gvk.Group, Resource: strings.ToLower(gvk.Kind) + "s"}, nil
	}
	in := func(gvk schema.GroupVersionKind, ns string) ChildScope {
		return ChildScope{GroupVersionKind: gvk, Namespace: ns}
	}
	type step struct {
		children    bool // Update, not UpdateParents
		running     bool // UpdateRunning(rule, ""): the rule was removed
		rule        string
		add, remove []ChildScope
	}
	tests := []struct {
		name     string
		existing map[string]string // the ConfigMap's data; nil when it does not exist
		before   string            // the annotation before
		noMapper bool
		steps    []step
		load     bool   // Load after the steps
		want     string // "" when there is no annotation
		children string // ReleaseChildrenAnnotation's value, "" when there is none
		// beforeChildren is ReleaseChildrenAnnotation before.
		beforeChildren string
	}{{
		name:  "parents by namespace",
		steps: []step{{rule: "web", add: []ChildScope{in(gadgetKind, "team-a"), in(gadgetKind, "team-b")}}, {rule: "db", add: []ChildScope{in(widgetKind, "team-b"), in(widgetKind, "")}}},
		want:  `{"":["widgets.example.com"],"team-a":["gadgets.example.com"],"team-b":["gadgets.example.com","widgets.example.com"]}`,
	}, {
		name:     "a narrowed rule keeps the namespace until it is swept",
		existing: map[string]string{"web_parents": "example.com/v1 Gadget team-a\nexample.com/v1 Gadget team-b\n"},
		before:   `{"team-a":["gadgets.example.com"],"team-b":["gadgets.example.com"]}`,
		steps:    []step{{rule: "web", remove: []ChildScope{in(gadgetKind, "team-b")}}},
		want:     `{"team-a":["gadgets.example.com"]}`,
	}, {
		name:     "the last parent scope removes it",
		existing: map[string]string{"web_parents": "example.com/v1 Gadget team-a\n", "web": "apps/v1 Deployment\n", "web_running": "sha256:1"},
		before:   `{"team-a":["gadgets.example.com"]}`,
		steps:    []step{{rule: "web", remove: []ChildScope{in(gadgetKind, "team-a")}}},
		children: `{"":["deployments.apps"]}`,
	}, {
		name:     "a record written before it gains it with the next write",
		existing: map[string]string{"web_parents": "example.com/v1 Gadget team-a\n"},
		steps:    []step{{rule: "web", add: []ChildScope{in(gadgetKind, "team-a")}}},
		want:     `{"team-a":["gadgets.example.com"]}`,
	}, {
		name:     "a record written before it gains it when it is read",
		existing: map[string]string{"web_parents": "example.com/v1 Gadget team-a\n", "db_parents": "example.com/v1 Widget\n"},
		load:     true,
		want:     `{"":["widgets.example.com"],"team-a":["gadgets.example.com"]}`,
	}, {
		name:     "a stale one is mended when it is read",
		existing: map[string]string{"web_parents": "example.com/v1 Gadget team-a\n"},
		before:   `{"team-a":["gadgets.example.com"],"team-b":["gadgets.example.com"]}`,
		load:     true,
		want:     `{"team-a":["gadgets.example.com"]}`,
	}, {
		name:     "child scopes of rules that run are in the children's",
		existing: map[string]string{"web_running": "sha256:1", "db_running": "sha256:2"},
		steps:    []step{{children: true, rule: "web", add: []ChildScope{in(deployments, "team-a")}}, {children: true, rule: "db", add: []ChildScope{in(widgetKind, "")}}, {children: true, rule: "gone", add: []ChildScope{in(gadgetKind, "team-c")}}},
		children: `{"":["widgets.example.com"],"team-a":["deployments.apps"]}`,
	}, {
		name:           "a rule removed takes its children out of it",
		existing:       map[string]string{"web": "apps/v1 Deployment team-a\n", "web_running": "sha256:1", "db": "example.com/v1 Widget\n", "db_running": "sha256:2"},
		beforeChildren: `{"":["widgets.example.com"],"team-a":["deployments.apps"]}`,
		steps:          []step{{running: true, rule: "db"}},
		children:       `{"team-a":["deployments.apps"]}`,
	}, {
		name:           "the children's goes with the last child scope",
		existing:       map[string]string{"web": "apps/v1 Deployment team-a\n", "web_running": "sha256:1"},
		beforeChildren: `{"team-a":["deployments.apps"]}`,
		steps:          []step{{children: true, rule: "web", remove: []ChildScope{in(deployments, "team-a")}}},
	}, {
		name:  "a kind not served is left out",
		steps: []step{{rule: "web", add: []ChildScope{in(gadgetKind, "team-a"), in(goneKind, "team-a")}}},
		want:  `{"team-a":["gadgets.example.com"]}`,
	}, {
		name:     "a kind not mapped for now keeps what it said of its group there; the rest is written",
		existing: map[string]string{"web_parents": "example.com/v1 Gadget team-a\nflaky.example.com/v1 Flaky team-b\n"},
		before:   `{"team-b":["flakies.flaky.example.com","other.example.com"]}`,
		steps:    []step{{rule: "web", add: []ChildScope{in(gadgetKind, "team-c"), in(flakyKind, "team-d")}}},
		want:     `{"team-a":["gadgets.example.com"],"team-b":["flakies.flaky.example.com"],"team-c":["gadgets.example.com"]}`,
	}, {
		name:     "without a mapper it is left alone",
		noMapper: true,
		existing: map[string]string{"web_parents": "example.com/v1 Gadget team-a\n"},
		before:   `{"team-a":["gadgets.example.com"]}`,
		steps:    []step{{rule: "web", remove: []ChildScope{in(gadgetKind, "team-a")}}},
		want:     `{"team-a":["gadgets.example.com"]}`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var objs []runtime.Object
			if tt.existing != nil {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: DefaultRecordName, Namespace: "kgen"}, Data: tt.existing}
				cm.Annotations = map[string]string{}
				if tt.before != "" {
					cm.Annotations[ReleaseAnnotation] = tt.before
				}
				if tt.beforeChildren != "" {
					cm.Annotations[ReleaseChildrenAnnotation] = tt.beforeChildren
				}
				objs = append(objs, cm)
			}
			client := fake.NewClientset(objs...)
			r := &ConfigMapRecord{Client: client.CoreV1(), Namespace: "kgen", Resource: resource}
			if tt.noMapper {
				r.Resource = nil
			}
			for _, s := range tt.steps {
				if s.running {
					if err := r.UpdateRunning(ctx, s.rule, "", nil); err != nil {
						t.Fatal(err)
					}
					continue
				}
				update := r.UpdateParents
				if s.children {
					update = r.Update
				}
				if _, err := update(ctx, s.rule, s.add, s.remove); err != nil {
					t.Fatal(err)
				}
			}
			if tt.load {
				if _, err := r.Load(ctx); err != nil {
					t.Fatal(err)
				}
			}
			cm, err := client.CoreV1().ConfigMaps("kgen").Get(ctx, DefaultRecordName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got, ok := cm.Annotations[ReleaseAnnotation]
			if got != tt.want || ok != (tt.want != "") {
				t.Errorf("annotation = %q (set: %v), want %q", got, ok, tt.want)
			}
			if !tt.noMapper {
				if got, ok := cm.Annotations[ReleaseChildrenAnnotation]; got != tt.children || ok != (tt.children != "") {
					t.Errorf("children's annotation = %q (set: %v), want %q", got, ok, tt.children)
				}
			}
			if got != "" && !json.Valid([]byte(got)) {
				t.Errorf("annotation %q is not JSON", got)
			}
		})
	}
}
