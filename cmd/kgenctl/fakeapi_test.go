package main

import (
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// fakeAPI is an API server that serves discovery for ConfigMaps and
// Deployments and records what it was asked.
type fakeAPI struct {
	*httptest.Server
	mu       sync.Mutex
	requests []*http.Request
	// hang makes every request wait until the client gives up.
	hang bool
	// refuse, when set, is the Status every request is answered with.
	refuse *metav1.Status
}

func newFakeAPI(t *testing.T) *fakeAPI {
	t.Helper()
	f := &fakeAPI{}
	docs := map[string]any{
		"/api": map[string]any{"kind": "APIVersions", "versions": []string{"v1"}},
		"/apis": map[string]any{"kind": "APIGroupList", "apiVersion": "v1", "groups": []any{
			map[string]any{
				"name": "apps", "versions": []any{map[string]any{"groupVersion": "apps/v1", "version": "v1"}},
				"preferredVersion": map[string]any{"groupVersion": "apps/v1", "version": "v1"},
			},
			map[string]any{
				"name": "events.k8s.io", "versions": []any{map[string]any{"groupVersion": "events.k8s.io/v1", "version": "v1"}},
				"preferredVersion": map[string]any{"groupVersion": "events.k8s.io/v1", "version": "v1"},
			},
		}},
		"/api/v1": map[string]any{"kind": "APIResourceList", "groupVersion": "v1", "resources": []any{
			map[string]any{"name": "configmaps", "singularName": "configmap", "namespaced": true, "kind": "ConfigMap",
				"verbs": []string{"get", "list"}, "shortNames": []string{"cm"}},
			map[string]any{"name": "events", "singularName": "event", "namespaced": true, "kind": "Event",
				"verbs": []string{"get", "list"}, "shortNames": []string{"ev"}},
		}},
		"/apis/events.k8s.io/v1": map[string]any{"kind": "APIResourceList", "groupVersion": "events.k8s.io/v1", "resources": []any{
			map[string]any{"name": "events", "singularName": "event", "namespaced": true, "kind": "Event",
				"verbs": []string{"get", "list"}, "shortNames": []string{"ev"}},
		}},
		"/apis/apps/v1": map[string]any{"kind": "APIResourceList", "groupVersion": "apps/v1", "resources": []any{
			map[string]any{"name": "deployments", "singularName": "deployment", "namespaced": true, "kind": "Deployment",
				"verbs": []string{"get", "list"}, "shortNames": []string{"deploy"}, "categories": []string{"all"}},
			map[string]any{"name": "deployments/status", "namespaced": true, "kind": "Deployment", "verbs": []string{"get"}},
		}},
	}
	f.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.requests = append(f.requests, r.Clone(r.Context()))
		hang, refuse := f.hang, f.refuse
		f.mu.Unlock()
		if hang {
			<-r.Context().Done()
			return
		}
		if refuse != nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(int(refuse.Code))
			_ = json.NewEncoder(w).Encode(refuse)
			return
		}
		doc, ok := docs[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(doc)
	}))
	// Ask for a client certificate, to record it; a client without one is
	// served all the same.
	f.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	f.StartTLS()
	t.Cleanup(f.Close)
	return f
}

func (f *fakeAPI) seen() []*http.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests)
}

// caFile writes the fake API server's CA certificate to a file.
func (f *fakeAPI) caFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ca.crt")
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.Certificate().Raw})
	if err := os.WriteFile(path, cert, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeKubeconfig writes a kubeconfig with a context per server, the first
// one current, each with its own token, namespace and the CA of ca.
func writeKubeconfig(t *testing.T, ca *fakeAPI, servers ...string) string {
	t.Helper()
	config := clientcmdapi.NewConfig()
	for i, server := range servers {
		name := string(rune('a' + i))
		config.Clusters[name] = &clientcmdapi.Cluster{Server: server}
		if ca != nil {
			config.Clusters[name].CertificateAuthority = ca.caFile(t)
		}
		config.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: "token-" + name}
		config.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name, Namespace: "ns-" + name}
	}
	config.CurrentContext = "a"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*config, path); err != nil {
		t.Fatal(err)
	}
	return path
}
