package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"kgen.dev/kgen/internal/golden"
)

// Every -o format prints as kubectl prints it: kubectl's formats, names
// compared without regard to case for json, yaml, kyaml and name, no
// managedFields in json, yaml and kyaml (templates see them), missing keys
// in templates allowed, and kubectl's errors for a template that is
// missing or does not parse.
func TestOutputFormats(t *testing.T) {
	noCluster(t)
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "ConfigMap",
		"metadata": map[string]any{
			"name": "shop", "namespace": "team-a",
			"labels":        map[string]any{"app": "shop"},
			"managedFields": []any{map[string]any{"manager": "kgen", "operation": "Apply", "apiVersion": "v1"}},
		},
		"data": map[string]any{"image": "nginx", "replicas": "2"},
	}}
	tests := []struct {
		format  string
		golden  string // stdout, under testdata/output
		wantErr string
	}{
		{format: "json", golden: "json"},
		{format: "JSON", golden: "json"},
		{format: "yaml", golden: "yaml"},
		{format: "Yaml", golden: "yaml"},
		{format: "kyaml", golden: "kyaml"},
		{format: "name", golden: "name"},
		{format: "NAME", golden: "name"},
		{format: "", golden: "name"},
		{format: "jsonpath={.metadata.name}", golden: "jsonpath"},
		{format: "jsonpath={.metadata.nothing}", golden: "empty"},
		{format: "jsonpath={.metadata.managedFields[*].manager} {.metadata.labels}", golden: "jsonpath-fields"},
		{format: "jsonpath-as-json={.metadata.managedFields[*].manager}", golden: "jsonpath-as-json"},
		{format: "jsonpath-file=testdata/output/name.jsonpath", golden: "file"},
		{format: "jsonpath", wantErr: "template format specified but no template given"},
		{format: "jsonpath=", wantErr: "template format specified but no template given"},
		{format: "go-template={{.metadata.name}}", wantErr: `output format "go-template": kgenctl prints no Go templates (they would make its binary, which is also the operator's, 60% larger); use jsonpath=TEMPLATE`},
		{format: "templatefile=testdata/output/name.jsonpath", wantErr: `output format "templatefile": kgenctl prints no Go templates (they would make its binary, which is also the operator's, 60% larger); use jsonpath-file=FILE`},
		{format: "jsonpath={.metadata", wantErr: "error parsing jsonpath {.metadata, unclosed action"},
		{format: "jsonpath-file=testdata/output/missing", wantErr: "error reading --template testdata/output/missing, open testdata/output/missing: no such file or directory"},
		{format: "JSONPATH={.metadata.name}", wantErr: `unknown output format "JSONPATH={.metadata.name}": use one of json, yaml, kyaml, name, jsonpath, jsonpath-as-json, jsonpath-file`},
		{format: "wide", wantErr: `unknown output format "wide": use one of json, yaml, kyaml, name, jsonpath, jsonpath-as-json, jsonpath-file`},
	}
	for _, tt := range tests {
		t.Run(tt.format, func(t *testing.T) {
			cmd := &cobra.Command{Use: "test"}
			output := addOutputFlag(cmd, "yaml")
			if err := cmd.ParseFlags([]string{"-o", tt.format}); err != nil {
				t.Fatal(err)
			}
			p, err := output.printer()
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error:\n%v\nwant:\n%s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := p.PrintObj(obj.DeepCopy(), &out); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join("testdata", "output", tt.golden), out.String())
		})
	}
}

// KUBECTL_KYAML=false takes kyaml out of the formats, as for kubectl.
func TestOutputFormatsEnvironment(t *testing.T) {
	noCluster(t)
	t.Setenv("KUBECTL_KYAML", "false")
	cmd := &cobra.Command{Use: "test"}
	output := addOutputFlag(cmd, "yaml", "helm-values")
	const want = "helm-values, json, yaml, name, jsonpath, jsonpath-as-json, jsonpath-file"
	if usage := cmd.Flags().Lookup("output").Usage; !strings.Contains(usage, want) {
		t.Errorf("usage of -o: %s\nwant it to list: %s", usage, want)
	}
	if err := cmd.ParseFlags([]string{"-o", "kyaml"}); err != nil {
		t.Fatal(err)
	}
	if _, err := output.printer(); err == nil || err.Error() != `unknown output format "kyaml": use one of `+want {
		t.Errorf("error = %v, want an unknown output format listing %s", err, want)
	}
}
