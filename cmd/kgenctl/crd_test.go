package main

import (
	"path/filepath"
	"strings"
	"testing"

	"kgen.dev/kgen/internal/golden"
)

func TestCRD(t *testing.T) {
	noCluster(t)
	tests := []struct {
		name    string
		args    []string
		golden  string // under testdata/crd
		wantErr string
	}{
		{name: "yaml", args: []string{"--rules", "testdata/crd/rules.yaml"}, golden: "crd.yaml"},
		{name: "json", args: []string{"--rules", "testdata/crd/rules.yaml", "-o", "json"}, golden: "crd.json"},
		{name: "no schema", args: []string{"--rules", "../../examples/webapp/rules.yaml"}, wantErr: "no rule has spec.parent.schema"},
		{name: "bad output", args: []string{"--rules", "testdata/crd/rules.yaml", "-o", "table"}, wantErr: `unknown output format "table": use one of`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _, err := runKgenctl(t, append([]string{"crd"}, tt.args...)...)
			if tt.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one starting with %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join("testdata", "crd", tt.golden), out)
		})
	}
}
