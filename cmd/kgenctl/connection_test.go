package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// connectionFlags are kubectl's connection flags that every command talking
// to a cluster takes.
var connectionFlags = []string{
	"kubeconfig", "context", "cluster", "user", "namespace", "server", "token",
	"as", "as-group", "as-uid", "as-user-extra", "certificate-authority",
	"client-certificate", "client-key", "insecure-skip-tls-verify",
	"tls-server-name", "request-timeout", "disable-compression",
}

// Commands that talk to a cluster take every connection flag; the offline
// ones take none, so that a connection flag there is an error rather than
// silently ignored.
func TestConnectionFlagsPerCommand(t *testing.T) {
	root := newRootCmd(&strings.Builder{}, &strings.Builder{})
	for _, name := range []string{"run", "gvk-to-gvr", "rbac"} {
		t.Run(name, func(t *testing.T) {
			cmd, _, err := root.Find([]string{name})
			if err != nil {
				t.Fatal(err)
			}
			for _, flag := range connectionFlags {
				if cmd.Flags().Lookup(flag) == nil {
					t.Errorf("kgenctl %s has no --%s", name, flag)
				}
			}
			if f := cmd.Flags().Lookup("namespace"); f != nil && f.Shorthand != "n" {
				t.Errorf("kgenctl %s: --namespace has shorthand %q, want n", name, f.Shorthand)
			}
			if cmd.Flags().Lookup("cache-dir") != nil {
				t.Errorf("kgenctl %s has --cache-dir, which would change nothing", name)
			}
		})
	}
	for _, name := range []string{"render", "validate", "version"} {
		cmd, _, err := root.Find([]string{name})
		if err != nil {
			t.Fatal(err)
		}
		for _, flag := range connectionFlags {
			if cmd.Flags().Lookup(flag) != nil {
				t.Errorf("kgenctl %s, which works offline, has --%s", name, flag)
			}
		}
	}
}

func TestOfflineCommandsRejectConnectionFlags(t *testing.T) {
	noCluster(t)
	for _, args := range [][]string{
		{"render", "--rules", "../../examples/webapp/rules.yaml", "--parent", "../../examples/webapp/parent.yaml", "--kubeconfig", "x"},
		{"render", "--rules", "../../examples/webapp/rules.yaml", "--parent", "../../examples/webapp/parent.yaml", "--context", "x"},
		{"validate", "--rules", "../../examples/webapp/rules.yaml", "--kubeconfig", "x"},
		{"validate", "--rules", "../../examples/webapp/rules.yaml", "-n", "x"},
		{"validate", "--kubeconfig=x", "--rules", "../../examples/webapp/rules.yaml"},
		{"--kubeconfig", "x", "validate", "--rules", "../../examples/webapp/rules.yaml"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			_, _, err := runKgenctl(t, args...)
			if err == nil || !strings.HasPrefix(err.Error(), "unknown flag: ") && !strings.HasPrefix(err.Error(), "unknown shorthand flag: ") {
				t.Fatalf("error = %v, want an unknown flag", err)
			}
		})
	}
}

// The connection flags reach the API server as kubectl's do: the kubeconfig
// as found by kubectl, --context choosing in it, --server and --token
// overriding it, --as, --as-group, --as-uid and --as-user-extra
// impersonating, --request-timeout on every request, --client-certificate
// and --client-key presenting a certificate, --tls-server-name checking the
// server's, --disable-compression asking for no gzip.
func TestConnectionFlags(t *testing.T) {
	noCluster(t)
	api := newFakeAPI(t)
	other := newFakeAPI(t)
	kubeconfig := writeKubeconfig(t, api, other.URL, api.URL)
	certFile, keyFile := writeClientCert(t, "jane-cert")
	tests := []struct {
		name       string
		env        string // $KUBECONFIG
		args       []string
		token      string
		user       string
		groups     []string
		uid        string
		extra      []string // Impersonate-Extra-Scopes
		cert       string   // the common name of the client certificate presented
		noGzip     bool     // no Accept-Encoding: gzip
		timeout    string   // of each request; client-go's discovery default is 32s
		notToOther bool
	}{
		{
			name: "the context chosen", args: []string{"--kubeconfig", kubeconfig, "--context", "b"},
			token: "token-b", timeout: "32s",
		},
		{
			name: "$KUBECONFIG", env: kubeconfig, args: []string{"--context=b", "-n", "elsewhere"},
			token: "token-b", timeout: "32s",
		},
		{
			name: "--server and --token without a kubeconfig", args: []string{"--server", api.URL, "--certificate-authority", api.caFile(t), "--token", "secret"},
			token: "secret", timeout: "32s",
		},
		{
			name: "--server and --token override the kubeconfig", args: []string{"--kubeconfig", kubeconfig, "-s", api.URL, "--token", "secret"},
			token: "secret", timeout: "32s",
		},
		{
			name: "--cluster and --user choose in the kubeconfig", args: []string{"--kubeconfig", kubeconfig, "--cluster", "b", "--user", "b"},
			token: "token-b", timeout: "32s",
		},
		{
			name: "impersonation", args: []string{"--kubeconfig", kubeconfig, "--context", "b", "--as", "jane", "--as-group", "devs", "--as-group", "ops"},
			token: "token-b", user: "jane", groups: []string{"devs", "ops"}, timeout: "32s",
		},
		{
			name: "request timeout", args: []string{"--kubeconfig", kubeconfig, "--context", "b", "--request-timeout", "5s"},
			token: "token-b", timeout: "5s",
		},
		{
			name: "impersonating a UID and extras, an entry without = ignored",
			args: []string{"--kubeconfig", kubeconfig, "--context", "b", "--as", "jane", "--as-uid", "1234",
				"--as-user-extra", "scopes=read", "--as-user-extra", "scopes=write", "--as-user-extra", "junk"},
			token: "token-b", user: "jane", uid: "1234", extra: []string{"read", "write"}, timeout: "32s",
		},
		{
			name:  "a client certificate",
			args:  []string{"--kubeconfig", kubeconfig, "--context", "b", "--client-certificate", certFile, "--client-key", keyFile},
			token: "token-b", cert: "jane-cert", timeout: "32s",
		},
		{
			name:  "the server's name for its certificate",
			args:  []string{"--server", "https://" + api.Listener.Addr().String(), "--certificate-authority", api.caFile(t), "--tls-server-name", "example.com", "--token", "secret"},
			token: "secret", timeout: "32s",
		},
		{
			name:  "no compression",
			args:  []string{"--kubeconfig", kubeconfig, "--context", "b", "--disable-compression"},
			token: "token-b", noGzip: true, timeout: "32s",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env != "" {
				t.Setenv("KUBECONFIG", tt.env)
			}
			before := len(api.seen())
			out, _, err := runKgenctl(t, append([]string{"gvk-to-gvr", "deploy", "-o", "name"}, tt.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			if out != "deployments.apps\n" {
				t.Errorf("output = %q, want deployments.apps", out)
			}
			seen := api.seen()[before:]
			if len(seen) == 0 {
				t.Fatal("the API server was not asked")
			}
			for _, r := range seen {
				if got := r.Header.Get("Authorization"); got != "Bearer "+tt.token {
					t.Errorf("%s: Authorization = %q, want Bearer %s", r.URL.Path, got, tt.token)
				}
				if got := r.Header.Get("Impersonate-User"); got != tt.user {
					t.Errorf("%s: Impersonate-User = %q, want %q", r.URL.Path, got, tt.user)
				}
				if got := r.Header.Values("Impersonate-Group"); !slices.Equal(got, tt.groups) {
					t.Errorf("%s: Impersonate-Group = %q, want %q", r.URL.Path, got, tt.groups)
				}
				if got := r.URL.Query().Get("timeout"); got != tt.timeout {
					t.Errorf("%s: timeout = %q, want %q", r.URL.Path, got, tt.timeout)
				}
				if got := r.Header.Get("Impersonate-Uid"); got != tt.uid {
					t.Errorf("%s: Impersonate-Uid = %q, want %q", r.URL.Path, got, tt.uid)
				}
				if got := r.Header.Values("Impersonate-Extra-Scopes"); !slices.Equal(got, tt.extra) {
					t.Errorf("%s: Impersonate-Extra-Scopes = %q, want %q", r.URL.Path, got, tt.extra)
				}
				var cert string
				if peers := r.TLS.PeerCertificates; len(peers) > 0 {
					cert = peers[0].Subject.CommonName
				}
				if cert != tt.cert {
					t.Errorf("%s: client certificate %q, want %q", r.URL.Path, cert, tt.cert)
				}
				if gzip := r.Header.Get("Accept-Encoding") == "gzip"; gzip == tt.noGzip {
					t.Errorf("%s: Accept-Encoding = %q with --disable-compression=%t", r.URL.Path, r.Header.Get("Accept-Encoding"), tt.noGzip)
				}
			}
		})
	}
	if n := len(other.seen()); n > 0 {
		t.Errorf("the kubeconfig's current context was asked %d times, though every test chose another", n)
	}
}

// --request-timeout bounds each request: an API server that never answers
// fails the command once it passes, not after client-go's 32s default.
func TestRequestTimeoutBoundsRequests(t *testing.T) {
	noCluster(t)
	api := newFakeAPI(t)
	api.hang = true
	start := time.Now()
	_, _, err := runKgenctl(t, "gvk-to-gvr", "deploy", "--server", api.URL, "--insecure-skip-tls-verify", "--request-timeout", "1s")
	if err == nil {
		t.Fatal("want an error from an API server that does not answer")
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("took %s with --request-timeout 1s", took)
	}
}

func TestConnectionFlagErrors(t *testing.T) {
	noCluster(t)
	api := newFakeAPI(t)
	kubeconfig := writeKubeconfig(t, nil, "https://127.0.0.1:1")
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{
			name:    "a bad --request-timeout",
			args:    []string{"--kubeconfig", kubeconfig, "--request-timeout", "soon"},
			wantErr: `invalid --request-timeout "soon": want a duration with a unit (30s, 2m) or whole seconds; 0 means no timeout`,
		},
		{
			name:    "a negative --request-timeout",
			args:    []string{"--kubeconfig", kubeconfig, "--request-timeout", "-1"},
			wantErr: `invalid --request-timeout "-1"`,
		},
		{
			name:    "no such context",
			args:    []string{"--kubeconfig", kubeconfig, "--context", "nope"},
			wantErr: `context "nope" does not exist`,
		},
		{
			name:    "no such kubeconfig",
			args:    []string{"--kubeconfig", filepath.Join(t.TempDir(), "missing")},
			wantErr: `stat `,
		},
		{
			name:    "a certificate not for --tls-server-name",
			args:    []string{"--server", api.URL, "--certificate-authority", api.caFile(t), "--tls-server-name", "wrong.example"},
			wantErr: `discovery: Get "` + api.URL + `/api?timeout=32s": tls: failed to verify certificate: x509: certificate is valid for example.com, *.example.com, not wrong.example`,
		},
		{
			name:    "nothing names a cluster",
			args:    []string{"--as", "jane"},
			wantErr: errNoCluster.Error(),
		},
		{
			name:    "an unknown output format, before any request",
			args:    []string{"--kubeconfig", kubeconfig, "-o", "wide"},
			wantErr: `unknown output format "wide": use one of table, name, json, yaml, kyaml, jsonpath, jsonpath-as-json, jsonpath-file`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := runKgenctl(t, append([]string{"gvk-to-gvr", "deploy"}, tt.args...)...)
			if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
				t.Fatalf("error:\n%v\nwant one starting with:\n%s", err, tt.wantErr)
			}
		})
	}
}

// namespace is the namespace kubectl would use: -n, else the context's,
// else (out of a cluster) default. kgenctl run takes it as the default of
// --leader-elect-namespace (see the e2e test TestRunLeaderElectionNamespace).
func TestNamespace(t *testing.T) {
	noCluster(t)
	kubeconfig := writeKubeconfig(t, nil, "https://127.0.0.1:1", "https://127.0.0.1:2")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--kubeconfig", kubeconfig}, "ns-a"},
		{[]string{"--kubeconfig", kubeconfig, "--context", "b"}, "ns-b"},
		{[]string{"--kubeconfig", kubeconfig, "-n", "team"}, "team"},
		{[]string{"--server", "https://127.0.0.1:1"}, "default"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			cmd := &cobra.Command{Use: "test"}
			kube := addKubeFlags(cmd)
			if err := cmd.ParseFlags(tt.args); err != nil {
				t.Fatal(err)
			}
			got, err := kube.namespace()
			if err != nil || got != tt.want {
				t.Errorf("namespace() = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// writeClientCert writes a self-signed client certificate for cn and its key.
func writeClientCert(t *testing.T, cn string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
