package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"kgen.dev/kgen/internal/golden"
)

// runKgenctl runs kgenctl with args and returns its stdout and stderr.
func runKgenctl(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := newRootCmd(&out, &errOut)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), errOut.String(), err
}

// noCluster makes sure no kubeconfig can be found, so that a command that
// tried to load one would fail, and that kubectl's environment does not
// change the output formats.
func noCluster(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "missing"))
	t.Setenv("HOME", t.TempDir())
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_MASTER", "")
	t.Setenv("KUBECTL_KYAML", "")
}

// TestRenderExamples renders every example and compares the children with
// the example's rendered.yaml, and the notes on stderr with
// testdata/render/<example>.stderr. An example has the CRD of its parent
// kind (crd.yaml) unless the parent is a built-in kind, and may have
// observed children (observed.yaml) and inputs (input.yaml).
func TestRenderExamples(t *testing.T) {
	noCluster(t)
	// A folder without rules (examples/portal is a program) is no rules example.
	rulesFiles, err := filepath.Glob("../../examples/*/rules.yaml")
	if err != nil || len(rulesFiles) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, rulesFile := range rulesFiles {
		dir := filepath.Dir(rulesFile)
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			args := []string{"render",
				"--rules", filepath.Join(dir, "rules.yaml"),
				"--parent", filepath.Join(dir, "parent.yaml"),
			}
			for _, f := range []struct{ flag, file string }{{"--crd", "crd.yaml"}, {"--observed", "observed.yaml"}, {"--input", "input.yaml"}} {
				if path := filepath.Join(dir, f.file); exists(path) {
					args = append(args, f.flag, path)
				}
			}
			out, notes, err := runKgenctl(t, args...)
			if err != nil {
				t.Fatalf("kgenctl %s: %v", strings.Join(args, " "), err)
			}
			golden.Check(t, filepath.Join(dir, "rendered.yaml"), out)
			golden.Check(t, filepath.Join("testdata", "render", name+".stderr"), notes)
		})
	}
}

// TestExampleSchemaCRDs checks that an example whose rule describes its
// parent kind with spec.parent.schema has the CRD kgenctl crd prints for it.
func TestExampleSchemaCRDs(t *testing.T) {
	dirs, err := filepath.Glob("../../examples/*")
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, dir := range dirs {
		data, err := os.ReadFile(filepath.Join(dir, "rules.yaml"))
		if err != nil || !strings.Contains(string(data), "    schema:\n") {
			continue
		}
		found++
		t.Run(filepath.Base(dir), func(t *testing.T) {
			out, _, err := runKgenctl(t, "crd", "--rules", filepath.Join(dir, "rules.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join(dir, "crd.yaml"), out)
		})
	}
	if found == 0 {
		t.Error("no example has spec.parent.schema")
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// TestRenderWithoutCRD renders examples without their CRDs: a parent with
// metadata.namespace is taken as namespaced and one without as
// cluster-scoped (contract section 4), so the children are those of
// rendered.yaml, and the notes say what was assumed.
func TestRenderWithoutCRD(t *testing.T) {
	noCluster(t)
	for _, tt := range []struct{ name, rules, parent, observed string }{
		{name: "webapp", rules: "../../examples/webapp/rules.yaml", parent: "../../examples/webapp/parent.yaml"},
		{name: "tenant", rules: "../../examples/tenant/rules.yaml", parent: "../../examples/tenant/parent.yaml", observed: "../../examples/tenant/observed.yaml"},
		{name: "nocrd", rules: "testdata/render/nocrd/rules.yaml", parent: "testdata/render/nocrd/parent.yaml"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{"render", "--rules", tt.rules, "--parent", tt.parent}
			if tt.observed != "" {
				args = append(args, "--observed", tt.observed)
			}
			out, notes, err := runKgenctl(t, args...)
			if err != nil {
				t.Fatalf("kgenctl %s: %v", strings.Join(args, " "), err)
			}
			rendered := filepath.Join(filepath.Dir(tt.parent), "rendered.yaml")
			if tt.name == "nocrd" {
				rendered = filepath.Join("testdata", "render", "nocrd", "rendered.yaml")
			}
			golden.Check(t, rendered, out)
			golden.Check(t, filepath.Join("testdata", "render", "nocrd", tt.name+".stderr"), notes)
		})
	}
}

func TestRender(t *testing.T) {
	noCluster(t)
	webapp := func(extra ...string) []string {
		return append([]string{"render", "--rules", "../../examples/webapp/rules.yaml",
			"--parent", "../../examples/webapp/parent.yaml"}, extra...)
	}
	tests := []struct {
		name    string
		args    []string
		golden  string // stdout, under testdata/render
		wantErr string
	}{
		{
			name:   "json",
			args:   webapp("--crd", "../../examples/webapp/crd.yaml", "-o", "json"),
			golden: "webapp.json",
		},
		{
			name:   "name",
			args:   webapp("--crd", "../../examples/webapp/crd.yaml", "-o", "name"),
			golden: "webapp.name",
		},
		{
			name:   "jsonpath over the List",
			args:   webapp("--crd", "../../examples/webapp/crd.yaml", "-o", `jsonpath={range .items[*]}{.kind} {.metadata.name} {.metadata.labels.kgen\.dev/child}{"\n"}{end}`),
			golden: "webapp.jsonpath",
		},
		{
			// The same children as from the rules file it was applied from.
			name:   "a Rule object read back with kubectl get -o yaml",
			args:   []string{"render", "--rules", "testdata/validate/readback.yaml", "--parent", "../../examples/webapp/parent.yaml", "--crd", "../../examples/webapp/crd.yaml", "-o", "json"},
			golden: "webapp.json",
		},
		{
			name:   "a parent with a UID, and a rules directory",
			args:   []string{"render", "--rules", "testdata/render/rules", "--parent", "testdata/render/team.yaml", "--crd", "testdata/render/crds.yaml"},
			golden: "team.golden.yaml",
		},
		{
			name:    "a CRD without the parent's version",
			args:    []string{"render", "--rules", "testdata/render/nocrd/rules.yaml", "--parent", "testdata/render/nocrd/parent.yaml", "--crd", "testdata/render/nocrd/crd-v2.yaml"},
			wantErr: "rule \"gadgets\": scope of the parent: unknown kind: Gadget.example.com: its CustomResourceDefinition declares versions v2, not v1 (pass its CustomResourceDefinition with --crd)",
		},
		{
			name:    "no rule selects the parent",
			args:    []string{"render", "--rules", "../../examples/webapp/rules.yaml", "--parent", "../../examples/foo/parent.yaml", "--crd", "../../examples/foo/crd.yaml"},
			wantErr: "no rule selects Foo default/example-foo (check the rules' parent kind, selector and namespaces)",
		},
		{
			name:    "observed child of no rule",
			args:    webapp("--crd", "../../examples/webapp/crd.yaml", "--observed", "../../examples/foo/parent.yaml"),
			wantErr: "../../examples/foo/parent.yaml: Foo example-foo: no child of the selected rules has this kind",
		},
		{
			name:    "invalid rules",
			args:    []string{"render", "--rules", "testdata/validate/bad.yaml", "--parent", "../../examples/webapp/parent.yaml"},
			wantErr: "testdata/validate/bad.yaml:11:27: rule \"webapp\": spec.parent.selector.matchLabels.tier: invalid label value",
		},
		{
			name:    "an expression error for this parent",
			args:    []string{"render", "--rules", "../../examples/webapp/rules.yaml", "--parent", "testdata/render/webapp-no-image.yaml", "--crd", "../../examples/webapp/crd.yaml"},
			wantErr: `../../examples/webapp/rules.yaml:22:16: rule "webapp": child "config": template.data.image: ${parent.spec.image}: no such key: image`,
		},
		{
			name:    "unknown output format",
			args:    webapp("-o", "table"),
			wantErr: `unknown output format "table": use one of json, yaml, kyaml, name, jsonpath, jsonpath-as-json, jsonpath-file`,
		},
		{
			name:    "missing flags",
			args:    []string{"render"},
			wantErr: `required flag(s) "parent", "rules" not set`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _, err := runKgenctl(t, tt.args...)
			if tt.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
					t.Fatalf("error:\n%v\nwant one starting with:\n%s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join("testdata", "render", tt.golden), out)
		})
	}
}
