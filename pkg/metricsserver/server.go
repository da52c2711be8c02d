package metricsserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	"k8s.io/apiserver/pkg/authentication/request/union"
	"k8s.io/apiserver/pkg/authentication/request/x509"
	tokencache "k8s.io/apiserver/pkg/authentication/token/cache"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"
)

// Where aggregated API servers, and so kgen, find the client CA of the
// cluster: kube-apiserver publishes its --client-ca-file there.
const (
	ClientCANamespace = metav1.NamespaceSystem
	ClientCAConfigMap = "extension-apiserver-authentication"
	clientCAKey       = "client-ca-file"
)

// Files of Options.CertDir, as in a kubernetes.io/tls Secret.
const (
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
)

// Review caching and retries, as controller-runtime's secure metrics
// serving sets them.
const (
	tokenCacheTTL   = time.Minute
	allowCacheTTL   = 5 * time.Minute
	denyCacheTTL    = 30 * time.Second
	reviewTimeout   = 10 * time.Second
	shutdownTimeout = 5 * time.Second
)

// reviewBackoff is how the TokenReview and SubjectAccessReview calls are
// retried: the API server's own default for delegated authentication.
var reviewBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

// Options configure a Server. The zero value serves nothing.
type Options struct {
	// BindAddress is the address to listen on; nothing is served when it
	// is empty or "0".
	BindAddress string
	// Secure serves HTTPS to authenticated and authorised callers only.
	Secure bool
	// CertDir, with Secure, holds the serving certificate and key as
	// CertFile and KeyFile, reloaded when they change. When empty the
	// server makes a self-signed certificate in memory at start.
	CertDir string
	// Profiling serves Go's /debug/pprof; it needs Secure.
	Profiling bool
}

// Validate reports options that do not go together.
func (o Options) Validate() error {
	if o.Profiling && !o.Secure {
		return errors.New("profiling needs secure metrics serving: /debug/pprof is never served without authentication and authorization")
	}
	if o.CertDir != "" && !o.Secure {
		return errors.New("a certificate folder needs secure metrics serving: without it /metrics is plain HTTP")
	}
	return nil
}

func (o Options) off() bool { return o.BindAddress == "" || o.BindAddress == "0" }

// Server serves /metrics, and /debug/pprof when secure and asked. Create it
// with New and start it with Start.
type Server struct {
	opts    Options
	handler http.Handler
	kube    kubernetes.Interface

	mu       sync.Mutex
	listener net.Listener
}

// New checks opts and returns a Server for the metrics of g. A secure
// server reviews callers through kube; it sends no request before Start.
func New(opts Options, g prometheus.Gatherer, kube kubernetes.Interface) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Secure && !opts.off() && kube == nil {
		return nil, errors.New("secure metrics serving needs a Kubernetes client for its reviews")
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	if opts.Profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return &Server{opts: opts, handler: mux, kube: kube}, nil
}

// Addr returns the address the server listens on, once started; nil
// before, or when it serves nothing.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listener == nil {
		return nil
	}
	return s.listener.Addr()
}

// Start listens and serves until ctx is done. It returns once it listens,
// or with the error that keeps it from serving (the address is taken, the
// certificate cannot be read). The returned channel is closed once the
// server, after ctx is done, has finished its requests in flight (for up
// to 5 seconds) and stopped everything it started.
func (s *Server) Start(ctx context.Context) (stopped <-chan struct{}, err error) {
	done := make(chan struct{})
	if s.opts.off() {
		close(done)
		return done, nil
	}
	logger := klog.FromContext(ctx).WithValues("address", s.opts.BindAddress)
	// The certificate and CA reloaders stop with ctx; so does the server,
	// which first lets requests in flight finish.
	var wg sync.WaitGroup
	defer func() {
		if err != nil {
			wg.Wait()
		}
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		if err != nil {
			cancel()
		}
	}()

	handler := s.handler
	var tlsConfig *tls.Config
	if s.opts.Secure {
		if tlsConfig, handler, err = s.secure(ctx, &wg, handler); err != nil {
			return nil, err
		}
	}
	l, err := net.Listen("tcp", s.opts.BindAddress)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", s.opts.BindAddress, err)
	}
	s.mu.Lock()
	s.listener = l
	s.mu.Unlock()
	if tlsConfig != nil {
		l = tls.NewListener(l, tlsConfig)
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       90 * time.Second,
		// Requests in flight outlive ctx until Shutdown's deadline.
		BaseContext: func(net.Listener) context.Context { return klog.NewContext(context.WithoutCancel(ctx), logger) },
		// TLS handshake errors (a port scan, a client that does not trust
		// the certificate) are the client's to see; kgen logs them at -v=4.
		ErrorLog: log.New(logWriter{logger.V(4)}, "", 0),
	}
	wg.Go(func() { _ = srv.Serve(l) })
	wg.Go(func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	})
	go func() {
		wg.Wait()
		cancel()
		close(done)
	}()
	if s.opts.Secure {
		logger.Info("Serving metrics over HTTPS to authenticated and authorized callers", "profiling", s.opts.Profiling)
	} else {
		logger.Info("Serving metrics over plain HTTP to anyone who can connect; use secure metrics serving in a cluster")
	}
	return done, nil
}

// secure returns the TLS configuration and the handler, wrapped in
// authentication and authorization, of a secure server. The certificate and
// CA reloaders it starts run in wg until ctx is done.
func (s *Server) secure(ctx context.Context, wg *sync.WaitGroup, next http.Handler) (*tls.Config, http.Handler, error) {
	logger := klog.FromContext(ctx)
	serving, err := s.servingCert(ctx, wg)
	if err != nil {
		return nil, nil, err
	}
	clientCA := s.clientCA(ctx, wg)

	tlsConfig := &tls.Config{
		MinVersion: tls.VersionTLS12,
		// HTTP/1.1 only, as kubebuilder's scaffold serves metrics: a
		// scrape needs nothing of HTTP/2, which has had denial-of-service
		// flaws of its own (CVE-2023-44487, CVE-2023-39325).
		NextProtos: []string{"http/1.1"},
	}
	// Client certificates first, then tokens, as the API server's
	// delegating authenticator orders them (see review.go).
	var authns []authenticator.Request
	var caProvider dynamiccertificates.CAContentProvider
	if clientCA != nil {
		caProvider = clientCA
		authns = append(authns, x509.NewDynamic(clientCA.VerifyOptions, x509.CommonNameUserConversion))
		// Ask for a certificate without requiring one: the authenticator
		// checks it, and tokens still work.
		tlsConfig.ClientAuth = tls.RequestClientCert
	}
	tokens := &tokenReviewer{client: s.kube.AuthenticationV1().TokenReviews(), backoff: reviewBackoff, timeout: reviewTimeout}
	authns = append(authns, bearertoken.New(tokencache.New(tokens, false, tokenCacheTTL, tokenCacheTTL)))
	authn := group.NewAuthenticatedGroupAdder(union.New(authns...))
	authz := newAccessReviewer(s.kube.AuthorizationV1().SubjectAccessReviews(), reviewBackoff, reviewTimeout, allowCacheTTL, denyCacheTTL)

	certs := dynamiccertificates.NewDynamicServingCertificateController(tlsConfig, caProvider, serving, nil, nil)
	serving.AddListener(certs)
	if clientCA != nil {
		clientCA.AddListener(certs)
	}
	if err := certs.RunOnce(); err != nil {
		return nil, nil, fmt.Errorf("metrics serving certificate: %w", err)
	}
	wg.Go(func() { certs.Run(1, ctx.Done()) })
	tlsConfig.GetConfigForClient = certs.GetConfigForClient
	logger.V(1).Info("Metrics callers are reviewed by the API server", "clientCertificates", clientCA != nil, "certificate", serving.Name())
	return tlsConfig, withAuth(authn, authz, next), nil
}

// servingCert returns the server's certificate: from CertDir, reloaded in
// wg when its files change, or self-signed.
func (s *Server) servingCert(ctx context.Context, wg *sync.WaitGroup) (dynamiccertificates.CertKeyContentProvider, error) {
	if dir := s.opts.CertDir; dir != "" {
		files, err := dynamiccertificates.NewDynamicServingContentFromFiles("metrics", filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile))
		if err != nil {
			return nil, fmt.Errorf("metrics serving certificate in %s: %w", dir, err)
		}
		wg.Go(func() { files.Run(ctx, 1) })
		return files, nil
	}
	host, _ := os.Hostname()
	var dns []string
	if host != "" {
		dns = []string{host}
	}
	cert, key, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, dns)
	if err != nil {
		return nil, fmt.Errorf("self-signed metrics serving certificate: %w", err)
	}
	return dynamiccertificates.NewStaticCertKeyContent("self-signed", cert, key)
}

// clientCA returns the cluster's client CA, followed in wg as it changes,
// or nil when kgen may not read it or the cluster does not publish it: then
// only tokens authenticate.
func (s *Server) clientCA(ctx context.Context, wg *sync.WaitGroup) *dynamiccertificates.ConfigMapCAController {
	logger := klog.FromContext(ctx)
	// One read first, so a cluster that does not publish the CA, or RBAC
	// that does not let kgen read it, is one log line and not an informer
	// failing forever.
	if _, err := s.kube.CoreV1().ConfigMaps(ClientCANamespace).Get(ctx, ClientCAConfigMap, metav1.GetOptions{}); err != nil {
		logger.Info("Client certificates are not accepted on the metrics port, only tokens", "configMap", ClientCANamespace+"/"+ClientCAConfigMap, "err", err)
		return nil
	}
	ca, err := dynamiccertificates.NewDynamicCAFromConfigMapController("metrics-client-ca", ClientCANamespace, ClientCAConfigMap, clientCAKey, s.kube)
	if err != nil {
		logger.Info("Client certificates are not accepted on the metrics port, only tokens", "err", err)
		return nil
	}
	wg.Go(func() { ca.Run(ctx, 1) })
	return ca
}

// withAuth serves next only to callers authn authenticates and authz
// allows the request's verb (the lower-cased HTTP method) on its path, as
// the API server authorises a non-resource URL.
func withAuth(authn authenticator.Request, authz authorizer.Authorizer, next http.Handler) http.Handler {
	failures := &everyMinute{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		logger := klog.FromContext(r.Context())
		res, ok, err := authn.AuthenticateRequest(r)
		if !ok && errors.Is(err, errReview) {
			// Answered 401, the caller would look for the fault in its
			// own credentials. Any bearer token gets here while the
			// reviews fail: an error line a minute at most.
			if failures.log() {
				logger.Error(err, "Could not authenticate a metrics request", "path", r.URL.Path, "remote", r.RemoteAddr)
			} else {
				logger.V(2).Info("Could not authenticate a metrics request", "path", r.URL.Path, "remote", r.RemoteAddr, "err", err)
			}
			http.Error(w, "authentication failed: "+errReview.Error()+"; see kgen's log", http.StatusInternalServerError)
			return
		}
		if err != nil || !ok {
			logger.V(2).Info("Refused an unauthenticated metrics request", "path", r.URL.Path, "remote", r.RemoteAddr, "err", err)
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		attrs := authorizer.AttributesRecord{User: res.User, Verb: strings.ToLower(r.Method), Path: r.URL.Path}
		decision, reason, err := authz.Authorize(r.Context(), attrs)
		if err != nil {
			// As for authentication: once a minute at most.
			if failures.log() {
				logger.Error(err, "Could not authorize a metrics request", "user", res.User.GetName(), "path", r.URL.Path)
			} else {
				logger.V(2).Info("Could not authorize a metrics request", "user", res.User.GetName(), "path", r.URL.Path, "err", err)
			}
			http.Error(w, "authorization failed: kgen could not review the request; see kgen's log", http.StatusInternalServerError)
			return
		}
		if decision != authorizer.DecisionAllow {
			logger.V(2).Info("Refused an unauthorized metrics request", "user", res.User.GetName(), "path", r.URL.Path, "reason", reason)
			http.Error(w, fmt.Sprintf("forbidden: user %q cannot %s path %q", res.User.GetName(), attrs.Verb, attrs.Path), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// everyMinute says yes at most once a minute.
type everyMinute struct{ last atomic.Int64 }

func (e *everyMinute) log() bool {
	now, last := time.Now().UnixNano(), e.last.Load()
	return now-last >= int64(time.Minute) && e.last.CompareAndSwap(last, now)
}

// logWriter turns the lines net/http logs into log entries.
type logWriter struct{ logger klog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.logger.Info(strings.TrimSpace(string(p)))
	return len(p), nil
}
