//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"kgen.dev/kgen/pkg/reconcile"
)

// collideBody is a rule body whose children one and two are both
// ConfigMaps; two's name is the argument.
func collideBody(name string) string {
	return `  children:
  - id: one
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-x"}
      data: {from: one}
  - id: two
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "` + name + `"}
      data: {from: two}
`
}

// Scenario: two child ids render one object by expressions that differ as
// written and agree once rendered. (Each id applied the ConfigMap as its
// own, ~160 times a second, while the parent said Ready=True.) kgenctl
// validate refuses the ids when their names are written alike; render
// refuses the parent; kgen run makes the parent say InvalidSpec naming both
// ids, and writes no ConfigMap at all. Once the rule is fixed, both
// ConfigMaps are made and the parent is ready.
func TestChangeChildIdsCollide(t *testing.T) {
	const group = "collide.example.com"
	const user = "kgen-collide"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")

	alike := writeRules(t, languageRuleText("collide", group, []string{ns}, collideBody("${parent.metadata.name}-x")))
	if out, err := exec.Command(env.kgenctl, "validate", "--rules", alike).CombinedOutput(); err == nil || !strings.Contains(string(out), `child "two": template.metadata.name: renders the same ConfigMap as child "one"`) {
		t.Errorf("kgenctl validate of two ids with one name as written: %v\n%s", err, out)
	}

	file := languageRule(t, "collide", group, []string{ns}, collideBody("${parent.metadata.name + '-x'}"))
	if out, err := exec.Command(env.kgenctl, "validate", "--rules", file).CombinedOutput(); err != nil {
		t.Fatalf("kgenctl validate: %v\n%s", err, out)
	}
	parentFile := filepath.Join(t.TempDir(), "parent.yaml")
	if err := os.WriteFile(parentFile, []byte(fmt.Sprintf("apiVersion: %s/v1\nkind: Gadget\nmetadata: {name: g, namespace: %s}\nspec: {}\n", group, ns)), 0o644); err != nil {
		t.Fatal(err)
	}
	wantErr := fmt.Sprintf(`children "one" and "two" both render ConfigMap %s/g-x`, ns)
	cmd := exec.Command(env.kgenctl, "render", "--rules", file, "--parent", parentFile)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), wantErr) || strings.Contains(stdout.String(), "kind: ConfigMap") {
		t.Errorf("kgenctl render: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}

	startControllerWith(t, controllerOptions{User: user}, file).waitReady(t)
	start := time.Now()
	create(t, gvr, gadget(group, ns, "g", map[string]any{}))
	// The message says where the second child is in the rules file.
	waitReason(t, gvr, ns, "g", reconcile.ReasonInvalid, file+":", wantErr)
	// No write loop: over a few seconds (a loop made hundreds of writes a
	// second), kgen writes the parent's status and no ConfigMap.
	time.Sleep(5 * time.Second)
	var configMaps, others []string
	for _, w := range writesOf(t, user, ns, start) {
		if strings.Contains(w, " configmaps ") {
			configMaps = append(configMaps, w)
		} else {
			others = append(others, w)
		}
	}
	if len(configMaps) > 0 {
		t.Errorf("kgen wrote the ConfigMap %d times: %q", len(configMaps), configMaps)
	}
	if len(others) > 2 {
		t.Errorf("kgen wrote %d times: %q", len(others), others)
	}
	if get(t, cmGVR, ns, "g-x") != nil {
		t.Errorf("ConfigMap g-x exists")
	}

	// Fixed, both ConfigMaps are made and the parent is ready.
	if err := os.WriteFile(file, []byte(languageRuleText("collide", group, []string{ns}, collideBody("${parent.metadata.name}-y"))), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, cmGVR, ns, "g-x", func(o *unstructured.Unstructured) error { return expect(o, "one", "data", "from") })
	waitFor(t, cmGVR, ns, "g-y", func(o *unstructured.Unstructured) error { return expect(o, "two", "data", "from") })
	waitFor(t, gvr, ns, "g", func(p *unstructured.Unstructured) error {
		if c := readyCondition(p); c == nil || c["status"] != "True" {
			return fmt.Errorf("Ready = %v, want True", c)
		}
		return nil
	})
}
