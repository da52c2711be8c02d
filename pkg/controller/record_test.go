package controller

import (
	"context"
	"errors"
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
			if err := r.Save(ctx, tt.rule, tt.scopes); err != nil {
				t.Fatalf("Save() = %v", err)
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
	if err := r.Save(ctx, "web", []ChildScope{{GroupVersionKind: deployments}}); err != nil {
		t.Fatal(err)
	}
	want := []string{"get kgen-state", "patch kgen-state", "patch kgen-state", "patch kgen-state"}
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
	if err := r.SaveParents(ctx, "web", gadgetsIn); err != nil {
		t.Fatal(err)
	}
	if err := r.Save(ctx, "web", []ChildScope{{GroupVersionKind: deployments}}); err != nil {
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
	if err := r.SaveParents(ctx, "web", nil); err != nil {
		t.Fatal(err)
	}
	if loaded, err = r.Load(ctx); err != nil || len(loaded.Parents) != 0 || len(loaded.Children) != 1 {
		t.Errorf("Load() = %+v, %v after the parents were removed, want web's children alone", loaded, err)
	}
}
