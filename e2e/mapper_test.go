//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"kgen.dev/kgen/internal/golden"
	"kgen.dev/kgen/pkg/mapper"
)

func newMapper(t *testing.T) *mapper.Mapper {
	t.Helper()
	m, err := mapper.NewForConfig(env.config)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestMapperBuiltins(t *testing.T) {
	m := newMapper(t)
	tests := []struct {
		refs       []string
		gvr        schema.GroupVersionResource
		kind       string
		namespaced bool
	}{
		{[]string{"apps/v1/Deployment", "Deployment.v1.apps", "deployments.apps", "Deployment", "deployments", "deployment", "deploy"},
			schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, "Deployment", true},
		{[]string{"v1/ConfigMap", "ConfigMap", "configmaps", "cm"},
			schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "ConfigMap", true},
		{[]string{"networking.k8s.io/v1/NetworkPolicy", "NetworkPolicy.v1.networking.k8s.io", "networkpolicies", "netpol"},
			schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"}, "NetworkPolicy", true},
		{[]string{"v1/Endpoints", "Endpoints", "endpoints", "ep"},
			schema.GroupVersionResource{Version: "v1", Resource: "endpoints"}, "Endpoints", true},
		{[]string{"v1/Namespace", "ns"},
			schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, "Namespace", false},
	}
	for _, tt := range tests {
		for _, ref := range tt.refs {
			t.Run(ref, func(t *testing.T) {
				got, err := m.Resolve(ref)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != 1 || got[0].GroupVersionResource() != tt.gvr || got[0].Kind != tt.kind || got[0].Namespaced != tt.namespaced {
					t.Errorf("Resolve(%q) = %+v, want %v kind %s namespaced %t", ref, got, tt.gvr, tt.kind, tt.namespaced)
				}
			})
		}
	}
	got, err := m.ResourceFor(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"})
	if err != nil || !got.HasSubresource("status") || !got.HasSubresource("scale") {
		t.Errorf("ResourceFor(Deployment) = %+v, %v; want status and scale subresources", got, err)
	}
	// Event is served by two groups: both are candidates, core first as
	// kubectl picks it.
	events, err := m.Resolve("Event")
	if err != nil || len(events) != 2 || events[0].Group != "" || events[1].Group != "events.k8s.io" {
		t.Errorf("Resolve(Event) = %+v, %v; want core then events.k8s.io", events, err)
	}
}

func TestMapperIrregularPlural(t *testing.T) {
	installCRD(t, "e2e/testdata/octopus-crd.yaml")
	m := newMapper(t)
	want := schema.GroupVersionResource{Group: "zoo.example.com", Version: "v1", Resource: "octopodes"}
	for _, ref := range []string{"zoo.example.com/v1/Octopus", "Octopus.v1.zoo.example.com", "octopodes.v1.zoo.example.com",
		"octopodes.zoo.example.com", "Octopus", "octopus", "octopodes", "oct", "sea", "zoo.example.com/oct"} {
		t.Run(ref, func(t *testing.T) {
			var got []mapper.Mapping
			eventually(t, 10*time.Second, func() (bool, error) {
				var err error
				got, err = m.Resolve(ref)
				return err == nil, err
			}, "Resolve(%q)", ref)
			if len(got) != 1 || got[0].GroupVersionResource() != want || got[0].Kind != "Octopus" || !got[0].Namespaced {
				t.Errorf("Resolve(%q) = %+v, want %v", ref, got, want)
			}
		})
	}
	// A non-preferred version is resolved when asked for by name.
	got, err := m.Resolve("zoo.example.com/v1beta1/Octopus")
	if err != nil || len(got) != 1 || got[0].Version != "v1beta1" {
		t.Errorf("Resolve(v1beta1) = %+v, %v", got, err)
	}
}

// A CRD created after the mapper cached discovery is found on the next call.
func TestMapperCRDInstalledLater(t *testing.T) {
	m := newMapper(t)
	gvk := schema.GroupVersionKind{Group: "later.example.com", Version: "v1", Kind: "Squid"}
	if _, err := m.ResourceFor(gvk); !errors.Is(err, mapper.ErrNotFound) {
		t.Fatalf("before the CRD: %v, want ErrNotFound", err)
	}
	newScopedCRD(t, "later.example.com", "Squid", "squids", apiextensionsv1.ClusterScoped)
	var got mapper.Mapping
	eventually(t, 30*time.Second, func() (bool, error) {
		var err error
		got, err = m.ResourceFor(gvk)
		return err == nil, err
	}, "the mapper to find Squid")
	if got.Resource != "squids" || got.Namespaced {
		t.Errorf("ResourceFor(Squid) = %+v, want cluster-scoped squids", got)
	}
}

// runKgenctl runs the kgenctl binary against the test control plane.
func runKgenctl(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(t.Context(), env.kgenctl, append([]string{"--kubeconfig", env.cp.Kubeconfig}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

func TestGVKToGVRCommand(t *testing.T) {
	installCRD(t, "e2e/testdata/octopus-crd.yaml")
	t.Run("json", func(t *testing.T) {
		out, stderr, err := runKgenctl(t, "gvk-to-gvr", "octopodes.zoo.example.com", "-o", "json")
		if err != nil {
			t.Fatalf("%v: %s", err, stderr)
		}
		var got map[string]any
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("output is not one JSON object: %v\n%s", err, out)
		}
		want := map[string]any{"group": "zoo.example.com", "version": "v1", "kind": "Octopus", "resource": "octopodes", "namespaced": true}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s = %v, want %v (output %s)", k, got[k], v, out)
			}
		}
	})
	t.Run("ambiguous json is a list", func(t *testing.T) {
		out, stderr, err := runKgenctl(t, "gvk-to-gvr", "events", "-o", "json")
		if err != nil {
			t.Fatalf("%v: %s", err, stderr)
		}
		var got []map[string]any
		if err := json.Unmarshal([]byte(out), &got); err != nil || len(got) != 2 {
			t.Fatalf("want a list of two: %v\n%s", err, out)
		}
	})
	for _, tc := range []struct{ name, ref string }{
		{"deploy", "deploy"}, {"octopus", "Octopus"}, {"events", "events"}, {"configmap", "v1/ConfigMap"},
	} {
		t.Run("table "+tc.name, func(t *testing.T) {
			out, stderr, err := runKgenctl(t, "gvk-to-gvr", tc.ref)
			if err != nil {
				t.Fatalf("%v: %s", err, stderr)
			}
			golden.Check(t, filepath.Join("testdata", "gvk-to-gvr-"+tc.name+".golden"), out)
		})
	}
	t.Run("unknown", func(t *testing.T) {
		_, stderr, err := runKgenctl(t, "gvk-to-gvr", "widgets.nowhere.example.com")
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() == 0 {
			t.Fatalf("want a non-zero exit, got %v", err)
		}
		if !strings.Contains(stderr, "widgets.nowhere.example.com") || !strings.Contains(stderr, "not served") {
			t.Errorf("stderr should say what was not found: %q", stderr)
		}
	})
}
