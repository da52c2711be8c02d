package metricsserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	authenticationclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2/ktesting"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{name: "plain", opts: Options{BindAddress: ":8080"}},
		{name: "secure with everything", opts: Options{BindAddress: ":8443", Secure: true, CertDir: "/certs", Profiling: true}},
		{name: "profiling without secure", opts: Options{BindAddress: ":8080", Profiling: true}, want: "profiling needs secure metrics serving"},
		{name: "certificates without secure", opts: Options{BindAddress: ":8080", CertDir: "/certs"}, want: "a certificate folder needs secure metrics serving"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opts.Validate()
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("Validate() = %v, want %q", err, tt.want)
			}
			if _, newErr := New(tt.opts, prometheus.NewRegistry(), fake.NewClientset()); fmt.Sprint(newErr) != fmt.Sprint(err) {
				t.Errorf("New() = %v, want the error of Validate, %v", newErr, err)
			}
		})
	}
}

// gatherer is a registry with one metric, to find in scrapes.
func gatherer() prometheus.Gatherer {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "test_metric", Help: "A metric of the test."}))
	return reg
}

// start starts a server on a free loopback port until the test ends, and
// returns its base URL.
func start(t *testing.T, s *Server, scheme string) string {
	t.Helper()
	_, tctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(tctx)
	stopped, err := s.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		<-stopped
	})
	return scheme + "://" + s.Addr().String()
}

// A plain server serves /metrics to anyone, and never /debug/pprof.
func TestPlain(t *testing.T) {
	s, err := New(Options{BindAddress: "127.0.0.1:0"}, gatherer(), nil)
	if err != nil {
		t.Fatal(err)
	}
	base := start(t, s, "http")
	for path, want := range map[string]int{"/metrics": http.StatusOK, "/debug/pprof/": http.StatusNotFound} {
		code, body := get(t, http.DefaultClient, base+path, "")
		if code != want {
			t.Errorf("GET %s = %d, want %d", path, code, want)
		}
		if path == "/metrics" && !strings.Contains(body, "test_metric") {
			t.Errorf("GET /metrics has no test_metric:\n%s", body)
		}
	}
}

// An address of "0" serves nothing and needs no client.
func TestOff(t *testing.T) {
	s, err := New(Options{BindAddress: "0", Secure: true}, gatherer(), nil)
	if err != nil {
		t.Fatal(err)
	}
	stopped, err := s.Start(t.Context())
	if err != nil || s.Addr() != nil {
		t.Fatalf("Start() = %v, listening on %v; want nothing served", err, s.Addr())
	}
	<-stopped
}

// reviews is a fake API server's answers to TokenReviews and
// SubjectAccessReviews, counting them.
type reviews struct {
	// forbidden refuses kgen every TokenReview, as the API server does
	// when kgen's RBAC lacks the right.
	forbidden                   bool
	tokens                      map[string]string   // token → user
	allowed                     map[string][]string // user → paths it may get
	tokenReviews, accessReviews atomic.Int32
}

// client returns a Kubernetes client that reads objs and sends reviews to
// r, over HTTP: the reviews then go through client-go's encoding as they do
// to an API server (review_test.go tests the reviewers with reactors).
func (r *reviews) client(t *testing.T, objs ...runtime.Object) kubernetes.Interface {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /apis/authentication.k8s.io/v1/tokenreviews", func(w http.ResponseWriter, req *http.Request) {
		r.tokenReviews.Add(1)
		if r.forbidden {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,`+
				`"message":"tokenreviews.authentication.k8s.io is forbidden: User \"kgen\" cannot create resource \"tokenreviews\""}`)
			return
		}
		var review authenticationv1.TokenReview
		if err := decodeReview(req, &review); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if user, ok := r.tokens[review.Spec.Token]; ok {
			review.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: user}}
		} else {
			review.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		writeJSON(w, &review)
	})
	mux.HandleFunc("POST /apis/authorization.k8s.io/v1/subjectaccessreviews", func(w http.ResponseWriter, req *http.Request) {
		r.accessReviews.Add(1)
		var review authorizationv1.SubjectAccessReview
		if err := decodeReview(req, &review); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		attrs := review.Spec.NonResourceAttributes
		review.Status.Allowed = attrs != nil && attrs.Verb == "get" && review.Spec.ResourceAttributes == nil &&
			slices.Contains(r.allowed[review.Spec.User], attrs.Path)
		writeJSON(w, &review)
	})
	api := httptest.NewServer(mux)
	t.Cleanup(api.Close)
	config := &rest.Config{Host: api.URL}
	return splitClient{
		Clientset: fake.NewClientset(objs...),
		authn:     authenticationclient.NewForConfigOrDie(config),
		authz:     authorizationclient.NewForConfigOrDie(config),
	}
}

type splitClient struct {
	*fake.Clientset
	authn authenticationclient.AuthenticationV1Interface
	authz authorizationclient.AuthorizationV1Interface
}

func (c splitClient) AuthenticationV1() authenticationclient.AuthenticationV1Interface {
	return c.authn
}
func (c splitClient) AuthorizationV1() authorizationclient.AuthorizationV1Interface { return c.authz }

// decodeReview decodes a review as client-go's typed clients send it: as
// protobuf by default, or JSON.
func decodeReview(req *http.Request, into runtime.Object) error {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return err
	}
	_, _, err = scheme.Codecs.UniversalDeserializer().Decode(body, nil, into)
	return err
}

func writeJSON(w http.ResponseWriter, obj any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(obj)
}

// A secure server lets in only callers the API server authenticates, by
// token or by a client certificate of the cluster's CA, and authorises for
// get on the path; it caches the reviews.
func TestSecure(t *testing.T) {
	clusterCA, otherCA := newCA(t, "cluster-ca"), newCA(t, "other-ca")
	r := &reviews{
		tokens: map[string]string{"reader-token": "reader", "nobody-token": "nobody"},
		allowed: map[string][]string{
			"reader":      {"/metrics", "/debug/pprof/"},
			"cert-reader": {"/metrics"},
		},
	}
	kube := r.client(t, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ClientCANamespace, Name: ClientCAConfigMap},
		Data:       map[string]string{"client-ca-file": string(clusterCA.certPEM)},
	})
	s, err := New(Options{BindAddress: "127.0.0.1:0", Secure: true, Profiling: true}, gatherer(), kube)
	if err != nil {
		t.Fatal(err)
	}
	base := start(t, s, "https")

	// The self-signed certificate is not trusted by anyone; the test, like
	// Prometheus with insecureSkipVerify, does not check it.
	plain := httpsClient(nil)
	// The client CA is read by an informer: wait for a client certificate
	// to work before the table.
	certReader := httpsClient(clusterCA.client(t, "cert-reader"))
	if err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		code, _ := get(t, certReader, base+"/metrics", "")
		return code == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("a client certificate of the cluster's CA was not accepted: %v", err)
	}

	tests := []struct {
		name   string
		client *http.Client
		token  string
		path   string
		want   int
	}{
		{name: "no credentials", client: plain, path: "/metrics", want: http.StatusUnauthorized},
		{name: "a token the API server does not know", client: plain, token: "forged", path: "/metrics", want: http.StatusUnauthorized},
		{name: "a user without the permission", client: plain, token: "nobody-token", path: "/metrics", want: http.StatusForbidden},
		{name: "a user allowed to get /metrics", client: plain, token: "reader-token", path: "/metrics", want: http.StatusOK},
		{name: "a client certificate of the cluster's CA", client: certReader, path: "/metrics", want: http.StatusOK},
		{name: "a client certificate of another CA", client: httpsClient(otherCA.client(t, "cert-reader")), path: "/metrics", want: http.StatusUnauthorized},
		{name: "profiling without credentials", client: plain, path: "/debug/pprof/", want: http.StatusUnauthorized},
		{name: "profiling as a user allowed only /metrics", client: certReader, path: "/debug/pprof/", want: http.StatusForbidden},
		{name: "profiling as a user allowed it", client: plain, token: "reader-token", path: "/debug/pprof/", want: http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := get(t, tt.client, base+tt.path, tt.token)
			if code != tt.want {
				t.Errorf("GET %s = %d %q, want %d", tt.path, code, body, tt.want)
			}
			if code == http.StatusOK && tt.path == "/metrics" && !strings.Contains(body, "test_metric") {
				t.Errorf("GET /metrics has no test_metric:\n%s", body)
			}
		})
	}

	// Scraping again is answered from the caches.
	tokens, accesses := r.tokenReviews.Load(), r.accessReviews.Load()
	for range 3 {
		if code, _ := get(t, plain, base+"/metrics", "reader-token"); code != http.StatusOK {
			t.Fatalf("GET /metrics again = %d", code)
		}
	}
	if got := r.tokenReviews.Load() - tokens; got != 0 {
		t.Errorf("3 more scrapes sent %d TokenReviews, want 0 (cached)", got)
	}
	if got := r.accessReviews.Load() - accesses; got != 0 {
		t.Errorf("3 more scrapes sent %d SubjectAccessReviews, want 0 (cached)", got)
	}

	// HTTP/1.1 only.
	resp, err := plain.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Proto != "HTTP/1.1" {
		t.Errorf("protocol %s, want HTTP/1.1", resp.Proto)
	}
}

// Without the cluster's client CA (kgen may not read it), tokens still
// work and client certificates do not.
func TestSecureWithoutClientCA(t *testing.T) {
	ca := newCA(t, "cluster-ca")
	r := &reviews{tokens: map[string]string{"reader-token": "reader"}, allowed: map[string][]string{"reader": {"/metrics"}, "cert-reader": {"/metrics"}}}
	s, err := New(Options{BindAddress: "127.0.0.1:0", Secure: true}, gatherer(), r.client(t))
	if err != nil {
		t.Fatal(err)
	}
	base := start(t, s, "https")
	if code, body := get(t, httpsClient(nil), base+"/metrics", "reader-token"); code != http.StatusOK {
		t.Errorf("with a token: %d %q, want 200", code, body)
	}
	if code, _ := get(t, httpsClient(ca.client(t, "cert-reader")), base+"/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("with a client certificate: %d, want 401", code)
	}
}

// A token kgen cannot review (its RBAC lacks the right) is kgen's fault,
// not the caller's: 500 with what went wrong, not 401.
func TestReviewFailureIsNotTheCallers(t *testing.T) {
	r := &reviews{forbidden: true, tokens: map[string]string{"reader-token": "reader"}, allowed: map[string][]string{"reader": {"/metrics"}}}
	s, err := New(Options{BindAddress: "127.0.0.1:0", Secure: true}, gatherer(), r.client(t))
	if err != nil {
		t.Fatal(err)
	}
	base := start(t, s, "https")
	code, body := get(t, httpsClient(nil), base+"/metrics", "reader-token")
	if code != http.StatusInternalServerError || !strings.Contains(body, "kgen could not review the caller") {
		t.Errorf("GET /metrics = %d %q, want 500 saying kgen could not review the caller", code, body)
	}
	if code, _ := get(t, httpsClient(nil), base+"/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("without a token: %d, want 401", code)
	}
}

// The serving certificate comes from CertDir, and a new one written there
// is served without a restart.
func TestCertDir(t *testing.T) {
	dir := t.TempDir()
	roots := writeServingCert(t, dir, "first.example")
	r := &reviews{tokens: map[string]string{"reader-token": "reader"}, allowed: map[string][]string{"reader": {"/metrics"}}}
	s, err := New(Options{BindAddress: "127.0.0.1:0", Secure: true, CertDir: dir}, gatherer(), r.client(t))
	if err != nil {
		t.Fatal(err)
	}
	base := start(t, s, "https")
	verifying := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "first.example"}}}
	if code, body := get(t, verifying, base+"/metrics", "reader-token"); code != http.StatusOK {
		t.Fatalf("with the certificate of %s: %d %q", dir, code, body)
	}

	writeServingCert(t, dir, "second.example")
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return servedName(t, base) == "second.example", nil
	}); err != nil {
		t.Fatalf("the new certificate in %s was not served; still %s", dir, servedName(t, base))
	}
}

func TestCertDirMissing(t *testing.T) {
	dir := t.TempDir()
	s, err := New(Options{BindAddress: "127.0.0.1:0", Secure: true, CertDir: dir}, gatherer(), (&reviews{}).client(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Start(t.Context()); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, CertFile)) {
		t.Errorf("Start() = %v, want an error naming %s", err, filepath.Join(dir, CertFile))
	}
}

func get(t *testing.T, c *http.Client, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// httpsClient trusts any server certificate and presents cert, if any,
// also when the server names other CAs (Go's client would send none).
func httpsClient(cert *tls.Certificate) *http.Client {
	config := &tls.Config{InsecureSkipVerify: true}
	if cert != nil {
		config.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: config}}
}

// servedName returns the first DNS name of the certificate the server
// presents.
func servedName(t *testing.T, base string) string {
	t.Helper()
	conn, err := tls.Dial("tcp", strings.TrimPrefix(base, "https://"), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	names := conn.ConnectionState().PeerCertificates[0].DNSNames
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// writeServingCert writes a self-signed certificate for host into dir and
// returns a pool that trusts it.
func writeServingCert(t *testing.T, dir, host string) *x509.CertPool {
	t.Helper()
	cert, key, err := certutil.GenerateSelfSignedCertKey(host, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Key first: the reloader reads both when either changes.
	for name, data := range map[string][]byte{KeyFile: key, CertFile: cert} {
		tmp := filepath.Join(dir, "."+name)
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(cert) {
		t.Fatal("no certificate in the generated PEM")
	}
	return roots
}

// authority is a test certificate authority for client certificates.
type authority struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

func newCA(t *testing.T, name string) *authority {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &authority{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// client returns a client certificate for user, signed by the authority.
func (a *authority) client(t *testing.T, user string) *tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: user},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
