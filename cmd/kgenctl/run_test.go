package main

import (
	"strings"
	"testing"
)

// Flags that do not go together fail before kgen reads the rules or looks
// for a cluster.
func TestRunFlagConflicts(t *testing.T) {
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
		{name: "leader election and shards", args: []string{"--leader-elect", "--shards", "--shard-id", "a"},
			want: "--leader-elect and --shards are exclusive"},
		{name: "a shard id without shards", args: []string{"--shard-id", "a"},
			want: "--shard-id needs --shards"},
		{name: "a shard id that cannot be a label value", args: []string{"--shards", "--shard-id", "Kgen_One"},
			want: `--shard-id: shard id "Kgen_One" does not make a valid Lease name`},
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
