package ruleset

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"

	"kgen.dev/kgen/rules"
)

// The Rule kind is served but kgen may not list Rule objects (403): a change
// of a --rules file must still take effect (contract §7: within 10 s).
func TestFileChangeAppliedWhileRuleListFails(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(file, []byte(ruleDoc("web", "parent.spec.image")), 0o644); err != nil {
		t.Fatal(err)
	}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{CRDGVR: "CustomResourceDefinitionList", RuleGVR: "RuleList"})
	client.PrependReactor("list", "rules", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(RuleGVR.GroupResource(), "", errors.New("no"))
	})
	res := served{appGVK: serveApps[appGVK], RuleGVK: {Group: "kgen.dev", Version: "v1alpha1", Kind: "Rule", Resource: "rules"}}
	var mu sync.Mutex
	var got []*rules.Rule
	s, err := New(Config{Paths: []string{dir}, Objects: true, Client: client, Resources: res, Poll: 50 * time.Millisecond,
		Progress: progress{Running: true, Synced: true}, Apply: func(rs []*rules.Rule) { mu.Lock(); got = rs; mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	first := s.Rules()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)
	time.Sleep(200 * time.Millisecond)
	if err := os.WriteFile(file, []byte(ruleDoc("web", "parent.metadata.name")), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		edited := len(got) == 1 && got[0].Name == "web" && len(first) == 1 && got[0] != first[0]
		mu.Unlock()
		if edited {
			return // the new version of web
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("the changed rules file was never handed to Apply (Loaded=%t)", s.Loaded())
}
