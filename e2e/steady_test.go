//go:build e2e

package e2e

import (
	"fmt"
	"testing"
	"time"
)

// A converged cluster costs kgen nothing: with 20 converged parents, kgen
// sends no write and no GET or LIST in 30 s (its watches stay open).
func TestSteadyState(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 30 s")
	}
	installCRD(t, "examples/webapp/crd.yaml")
	ns := newNamespace(t)
	const user = "kgen-steady"
	config, err := env.cp.UserConfig(user, "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	r := startController(t, config, webappRulesIn(t, ns))
	r.waitReady(t)
	for i := range 20 {
		create(t, webappGVR, webapp(ns, fmt.Sprintf("steady-%02d", i), 2))
	}
	eventually(t, 60*time.Second, func() (bool, error) { return converged(t, ns, 20) }, "20 parents to converge")
	// Let the last status writes land in the cache.
	time.Sleep(2 * time.Second)
	start := time.Now()
	time.Sleep(30 * time.Second)
	counts := map[string]int{}
	for _, e := range auditOf(t, user, start) {
		counts[e.Verb]++
		if e.Verb != "watch" {
			t.Errorf("steady state request: %s %s %s/%s %s", e.Verb, e.ObjectRef.Resource, e.ObjectRef.Namespace, e.ObjectRef.Name, e.ObjectRef.Subresource)
		}
	}
	t.Logf("kgen's requests in 30 s of steady state, by verb: %v", counts)
}
