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
// testdata/render/<example>.stderr.
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
				"--crd", filepath.Join(dir, "crd.yaml"),
			}
			if observed := filepath.Join(dir, "observed.yaml"); exists(observed) {
				args = append(args, "--observed", observed)
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

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
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
			name:   "a parent with a UID, and a rules directory",
			args:   []string{"render", "--rules", "testdata/render/rules", "--parent", "testdata/render/team.yaml", "--crd", "testdata/render/crds.yaml"},
			golden: "team.golden.yaml",
		},
		{
			name:    "no CRD for the parent",
			args:    webapp(),
			wantErr: "rule \"webapp\": scope of the parent: unknown kind: kind WebApp (apiVersion example.com/v1alpha1) is not a built-in kind and no CustomResourceDefinition for it was given (pass its CustomResourceDefinition with --crd)",
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
			wantErr: `unknown output format "table": use one of json, yaml, kyaml, name, go-template, go-template-file, template, templatefile, jsonpath, jsonpath-as-json, jsonpath-file`,
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
