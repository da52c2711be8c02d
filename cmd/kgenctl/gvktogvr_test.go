package main

import (
	"path/filepath"
	"testing"

	"kgen.dev/kgen/internal/golden"
)

// gvk-to-gvr prints one mapping, or a list for an ambiguous reference, in
// every output format.
func TestGVKToGVROutput(t *testing.T) {
	noCluster(t)
	api := newFakeAPI(t)
	kubeconfig := writeKubeconfig(t, api, api.URL)
	tests := []struct {
		ref, format, golden string
	}{
		{"deploy", "table", "deploy.table"},
		{"events", "table", "events.table"},
		{"deploy", "json", "deploy.json"},
		{"events", "json", "events.json"},
		{"Deployment.v1.apps", "yaml", "deploy.yaml"},
		{"ev", "yaml", "events.yaml"},
		{"deploy", "name", "deploy.name"},
		{"events", "name", "events.name"},
		{"cm", "jsonpath={.resource}", "cm.jsonpath"},
		{"events", `jsonpath={range [*]}{.group}{"\t"}{.version}{"\t"}{.resource}{"\n"}{end}`, "events.jsonpath"},
	}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			out, _, err := runKgenctl(t, "gvk-to-gvr", tt.ref, "-o", tt.format, "--kubeconfig", kubeconfig)
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join("testdata", "gvk-to-gvr", tt.golden), out)
		})
	}
}
