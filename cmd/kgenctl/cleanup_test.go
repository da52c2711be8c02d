package main

import (
	"strings"
	"testing"
)

// Bad arguments of cleanup and check are refused before the cluster is
// contacted (noCluster would make that fail differently).
func TestCleanupAndCheckArguments(t *testing.T) {
	noCluster(t)
	tests := []struct {
		args []string
		want string
	}{
		{args: []string{"cleanup", "--rules", "../../examples/webapp/rules.yaml", "--stop-deployment", "kgen"}, want: `--stop-deployment "kgen": want NAMESPACE/NAME`},
		{args: []string{"cleanup", "--rules", "../../examples/webapp/rules.yaml", "--stop-deployment", "a/b/c"}, want: `want NAMESPACE/NAME`},
		{args: []string{"cleanup", "--rules", "testdata/validate/bad.yaml"}, want: "bad.yaml:"},
		{args: []string{"cleanup", "--rule-objects=false"}, want: "no rules: give --rules, or release the parents of the Rule objects (--rule-objects)"},
		{args: []string{"check", "--deployment", "/kgen"}, want: `--deployment "/kgen": want NAMESPACE/NAME`},
		{args: []string{"check", "--deployment", "ns/kgen", "--lease", "kgen"}, want: `--lease "kgen": want NAMESPACE/NAME`},
		{args: []string{"check"}, want: `required flag(s) "deployment" not set`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, _, err := runKgenctl(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}
