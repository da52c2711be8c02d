package main

import (
	"strings"
	"testing"
)

// Metrics flags that do not go together fail before kgen reads the rules or
// looks for a cluster.
func TestRunMetricsFlags(t *testing.T) {
	noCluster(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "profiling without secure metrics", args: []string{"--profiling"},
			want: "--profiling needs --metrics-secure: /debug/pprof is never served without authentication and authorization"},
		{name: "a certificate folder without secure metrics", args: []string{"--metrics-cert-dir", "/certs"},
			want: "--metrics-cert-dir needs --metrics-secure"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := runKgenctl(t, append([]string{"run", "--rules", "testdata/validate/missing.yaml"}, tt.args...)...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("kgenctl run %s: %v, want an error saying %q", strings.Join(tt.args, " "), err, tt.want)
			}
		})
	}
}
