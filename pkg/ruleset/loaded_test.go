package ruleset

import (
	"context"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"

	"kgen.dev/kgen/rules"
)

// Loaded turns true only once the set with every Rule object of the first
// list was handed to Apply: a controller told earlier that every rule is
// loaded took the Rule objects' rules, which it did not have yet, for
// removed ones, and deleted their running versions from kgen's record
// (known since session 22). Here Apply holds the first full set while the
// test asks.
func TestLoadedOnceTheFullSetIsHandedOver(t *testing.T) {
	web := ruleObject(t, ruleDoc("web", "parent.spec.image"), "uid-web", 1, nil)
	web.SetAPIVersion("kgen.dev/v1alpha1")
	web.SetKind("Rule")
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{CRDGVR: "CustomResourceDefinitionList", RuleGVR: "RuleList"})
	client.PrependReactor("list", "rules", func(clienttesting.Action) (bool, runtime.Object, error) {
		l := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "kgen.dev/v1alpha1", "kind": "RuleList", "metadata": map[string]any{"resourceVersion": "1"}}}
		l.Items = []unstructured.Unstructured{*web}
		return true, l, nil
	})
	handing := make(chan struct{})
	release := make(chan struct{})
	s, err := New(Config{Objects: true, Client: client, Resources: &blip{}, RetryInterval: 10 * time.Millisecond,
		Progress: progress{Running: true, Synced: true}, Apply: func(rs []*rules.Rule) {
			if slices.ContainsFunc(rs, func(r *rules.Rule) bool { return r.Name == "web" }) {
				close(handing)
				<-release
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)
	select {
	case <-handing:
	case <-time.After(10 * time.Second):
		t.Fatal("the set with the Rule object web was never handed over")
	}
	if s.Loaded() {
		t.Error("Loaded() = true while the set with every Rule object is still being handed over")
	}
	close(release)
	for deadline := time.Now().Add(10 * time.Second); !s.Loaded(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Loaded() = false after the full set was handed over")
		}
	}
}
