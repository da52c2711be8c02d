package main

import (
	"path/filepath"
	"testing"

	"kgen.dev/kgen/internal/golden"
)

func TestValidate(t *testing.T) {
	noCluster(t)
	tests := []struct {
		name   string
		args   []string
		golden string // under testdata/validate: stdout, or the error and a newline
	}{
		{name: "valid", args: []string{"--rules", "../../examples/webapp/rules.yaml", "--rules", "testdata/render/rules"}, golden: "valid.txt"},
		{name: "every error listed", args: []string{"--rules", "testdata/validate/bad.yaml"}, golden: "bad.txt"},
		{name: "missing file", args: []string{"--rules", "testdata/validate/missing.yaml"}, golden: "missing.txt"},
		{name: "typed with the CRD", args: []string{"--rules", "testdata/validate/typo.yaml", "--crd", "../../examples/webapp/crd.yaml"}, golden: "typo.txt"},
		{name: "a child kind's CRD", args: []string{"--rules", "testdata/validate/child-crd.yaml", "--crd", "../../examples/webapp/crd.yaml"}, golden: "child-crd.txt"},
		{name: "untyped without it", args: []string{"--rules", "testdata/validate/typo.yaml"}, golden: "typo-untyped.txt"},
		// A rules document is a valid Rule object and the reverse: what
		// kubectl get -o yaml prints of Rule objects is a rules file.
		{name: "a Rule object read back", args: []string{"--rules", "testdata/validate/readback.yaml", "--crd", "../../examples/webapp/crd.yaml"}, golden: "readback.txt"},
		{name: "Rule objects read back as a List", args: []string{"--rules", "testdata/validate/readback-list.yaml"}, golden: "readback-list.txt"},
		{name: "an unknown field in a read-back spec", args: []string{"--rules", "testdata/validate/readback-typo.yaml"}, golden: "readback-typo.txt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _, err := runKgenctl(t, append([]string{"validate"}, tt.args...)...)
			if err != nil {
				out += "Error: " + err.Error() + "\n"
			}
			golden.Check(t, filepath.Join("testdata", "validate", tt.golden), out)
		})
	}
}
