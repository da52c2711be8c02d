// Package metricsserver serves kgen's Prometheus /metrics, either over plain
// HTTP to anyone who can reach the port, or, secure, over HTTPS to callers
// the Kubernetes API server vouches for, as controller-runtime's secure
// metrics serving and aggregated API servers do:
//
//   - the server's certificate is self-signed, made in memory at start, or
//     read from a folder's tls.crt and tls.key and reloaded when they change;
//   - a caller authenticates with a bearer token (checked with a TokenReview)
//     or a client certificate signed by the cluster's client CA (read from
//     the ConfigMap kube-system/extension-apiserver-authentication and
//     followed as it changes);
//   - the caller must be authorised for the request's verb on its
//     non-resource URL (a SubjectAccessReview: get on /metrics).
//
// Answers of both reviews are cached (a token for a minute, an allowed
// request for five minutes, a refused one for 30 seconds), so Prometheus
// scraping every 30 seconds costs the API server about one review a minute.
//
// Go's /debug/pprof handlers are served only by a secure server: the
// profiles show memory contents and cost CPU, so they are never open to
// whoever reaches the port.
//
// The package knows nothing of flags or of what the metrics are; the caller
// passes a prometheus.Gatherer.
package metricsserver
