//go:build e2e

package e2e

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"

	"kgen.dev/kgen/internal/controlplane"
	"kgen.dev/kgen/pkg/kinds"
)

// The built-in kinds table that kgenctl rbac and render use offline is what
// a kube-apiserver serving every API version really serves: same kinds,
// same plurals, scopes and status subresources. The shared control plane
// serves only the default versions, so this test starts one of its own with
// every alpha and beta API on.
func TestBuiltinKindsMatchDiscovery(t *testing.T) {
	bin, err := controlplane.BinDir(env.root)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := controlplane.Start(t.Context(), controlplane.Config{
		BinDir: bin,
		Dir:    filepath.Join(t.TempDir(), "all-apis"),
		APIServerArgs: []string{
			"--runtime-config=api/all=true",
			"--feature-gates=AllAlpha=true,AllBeta=true",
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	config, err := cp.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	_, lists, err := discovery.NewDiscoveryClientForConfigOrDie(config).ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	served := map[schema.GroupKind]kinds.Resource{}
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		subresources := map[string][]string{}
		for _, r := range list.APIResources {
			if name, sub, ok := strings.Cut(r.Name, "/"); ok {
				subresources[name] = append(subresources[name], sub)
			}
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") {
				continue
			}
			gk := schema.GroupKind{Group: gv.Group, Kind: r.Kind}
			got := kinds.Resource{Resource: r.Name, Namespaced: r.Namespaced, Status: slices.Contains(subresources[r.Name], "status")}
			if prev, ok := served[gk]; ok && prev != got {
				t.Errorf("%s is served differently by two versions: %+v and %+v (the table cannot say both)", gk, prev, got)
			}
			served[gk] = got
		}
	}
	table := kinds.Builtins()
	var fix []string
	for gk, got := range served {
		if want, ok := table[gk]; !ok || want != got {
			t.Errorf("the API server serves %s as %+v; the table says %+v (known: %t)", gk, got, want, ok)
			fix = append(fix, line(gk, got))
		}
	}
	for gk := range table {
		if _, ok := served[gk]; !ok {
			t.Errorf("the table has %s, which the API server does not serve", gk)
		}
	}
	if len(fix) > 0 {
		slices.Sort(fix)
		t.Logf("lines for pkg/kinds/kinds.go:\n%s", strings.Join(fix, "\n"))
	}
}

func line(gk schema.GroupKind, r kinds.Resource) string {
	s := fmt.Sprintf("{Group: %q, Kind: %q}: {Resource: %q", gk.Group, gk.Kind, r.Resource)
	if r.Namespaced {
		s += ", Namespaced: true"
	}
	if r.Status {
		s += ", Status: true"
	}
	return s + "},"
}
