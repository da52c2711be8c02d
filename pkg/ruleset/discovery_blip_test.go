package ruleset

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"

	"kgen.dev/kgen/pkg/mapper"
	"kgen.dev/kgen/rules"
)

// blip serves App and Rule, but its first lookup of Rule fails as discovery
// of kgen.dev/v1alpha1 did (a 429 or a timeout while kgen starts).
type blip struct{ calls atomic.Int32 }

func (b *blip) ResourceFor(gvk schema.GroupVersionKind) (mapper.Mapping, error) {
	if gvk == RuleGVK {
		if b.calls.Add(1) == 1 {
			return mapper.Mapping{}, &mapper.UnavailableError{Ref: gvk.String(),
				Failed: map[schema.GroupVersion]error{gvk.GroupVersion(): errors.New("the server is currently unable to handle the request")}}
		}
		return mapper.Mapping{Group: "kgen.dev", Version: "v1alpha1", Kind: "Rule", Resource: "rules"}, nil
	}
	return serveApps.ResourceFor(gvk)
}

// kgen restarts with web running (its status records it) and a-new, which
// overlaps it and never ran (rejected). The first discovery of the Rule kind
// fails once. a-new must never be handed to the controller: it would run
// alone and take web's parents (the audit of 2f274fc).
func TestDiscoveryBlipAtStartDoesNotRunRejectedRule(t *testing.T) {
	web := ruleObject(t, ruleDoc("web", "parent.spec.image"), "uid-web", 1, nil)
	web.Object["status"] = map[string]any{"running": map[string]any{"generation": int64(1), "spec": web.Object["spec"]}}
	web.SetAPIVersion("kgen.dev/v1alpha1")
	web.SetKind("Rule")
	aNew := ruleObject(t, strings.Replace(ruleDoc("a-new", "parent.spec.image"), "namespaces: [a-new]", "namespaces: [web]", 1), "uid-a", 1, nil)
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{CRDGVR: "CustomResourceDefinitionList", RuleGVR: "RuleList"})
	client.PrependReactor("list", "rules", func(clienttesting.Action) (bool, runtime.Object, error) {
		l := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "kgen.dev/v1alpha1", "kind": "RuleList", "metadata": map[string]any{"resourceVersion": "1"}}}
		l.Items = []unstructured.Unstructured{*aNew, *web} // as the API server lists them: by name
		return true, l, nil
	})
	var mu sync.Mutex
	var sets [][]string
	s, err := New(Config{Objects: true, Client: client, Resources: &blip{}, RetryInterval: 100 * time.Millisecond,
		Progress: progress{Running: true, Synced: true}, Apply: func(rs []*rules.Rule) {
			var names []string
			for _, r := range rs {
				names = append(names, r.Name)
			}
			mu.Lock()
			sets = append(sets, names)
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)
	// Until web runs: the Rule objects were read after the blip.
	runsWeb := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(sets) > 0 && slices.Contains(sets[len(sets)-1], "web")
	}
	for deadline := time.Now().Add(10 * time.Second); !runsWeb(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("web was never handed to the controller; sets handed over: %v", sets)
		}
	}
	cancel()
	mu.Lock()
	defer mu.Unlock()
	for _, set := range sets {
		for _, n := range set {
			if n == "a-new" {
				t.Fatalf("the rejected Rule a-new was handed to the controller; sets handed over: %v", sets)
			}
		}
	}
}
