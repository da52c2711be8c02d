package controller

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientmetrics "k8s.io/client-go/tools/metrics"
	"k8s.io/client-go/util/workqueue"

	"kgen.dev/kgen/pkg/reconcile"
	"kgen.dev/kgen/pkg/watch"
)

// Metrics are the controller's Prometheus metrics. A nil *Metrics records
// nothing.
type Metrics struct {
	reconciles *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	panics     prometheus.Counter
	waiting    *prometheus.GaugeVec
	requests   *prometheus.CounterVec
	backoffs   *prometheus.CounterVec
	listErrors *prometheus.CounterVec

	watches *watch.Manager
}

// NewMetrics creates the controller's metrics and registers them, with the
// informer object counts, on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kgen_reconcile_total", Help: "Reconciles of parents, by rule and result: success, error (retried) or terminal (the parent or rule must change first).",
		}, []string{"rule", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "kgen_reconcile_duration_seconds", Help: "Time to reconcile one parent, by rule.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"rule"}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kgen_reconcile_panics_total", Help: "Reconciles that panicked (recovered and retried).",
		}),
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kgen_rule_waiting", Help: "1 while a rule waits for its kinds to be served, else 0.",
		}, []string{"rule"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kgen_api_requests_total", Help: "Requests kgen sent to the API server, by Kubernetes verb (get, list, watch, create, patch, delete, ...) and resource (with its subresource, as in webapps/status).",
		}, []string{"verb", "resource"}),
	}
	m.registerHealth(reg)
	reg.MustRegister(m.reconciles, m.duration, m.panics, m.waiting, m.requests, informerCollector{m})
	return m
}

func (m *Metrics) observe(rule string, start time.Time, err error) {
	if m == nil {
		return
	}
	result := "success"
	switch {
	case errors.Is(err, reconcile.ErrTerminal):
		result = "terminal"
	case err != nil:
		result = "error"
	}
	m.reconciles.WithLabelValues(rule, result).Inc()
	m.duration.WithLabelValues(rule).Observe(time.Since(start).Seconds())
}

func (m *Metrics) panicked() {
	if m != nil {
		m.panics.Inc()
	}
}

func (m *Metrics) setWaiting(rule string, waiting bool) {
	if m == nil {
		return
	}
	v := 0.0
	if waiting {
		v = 1
	}
	m.waiting.WithLabelValues(rule).Set(v)
}

// informerCollector reports each informer's object count and sync state
// when scraped.
type informerCollector struct{ m *Metrics }

var (
	informerObjects = prometheus.NewDesc("kgen_informer_objects", "Objects in an informer's cache.", []string{"resource", "namespace", "selector"}, nil)
	informerSynced  = prometheus.NewDesc("kgen_informer_synced", "1 once an informer has synced.", []string{"resource", "namespace", "selector"}, nil)
)

func (c informerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- informerObjects
	ch <- informerSynced
}

func (c informerCollector) Collect(ch chan<- prometheus.Metric) {
	if c.m.watches == nil {
		return
	}
	for _, s := range c.m.watches.Stats() {
		labels := []string{s.Key.GVR.GroupResource().String(), s.Key.Namespace, s.Key.Selector}
		ch <- prometheus.MustNewConstMetric(informerObjects, prometheus.GaugeValue, float64(s.Objects), labels...)
		synced := 0.0
		if s.Synced {
			synced = 1
		}
		ch <- prometheus.MustNewConstMetric(informerSynced, prometheus.GaugeValue, synced, labels...)
	}
}

var registerGlobal sync.Once

// RegisterGlobalMetrics routes client-go's process-wide metrics (REST client
// requests, work queues) to m's registry. client-go allows this once per
// process; later calls do nothing.
func RegisterGlobalMetrics(reg prometheus.Registerer, m *Metrics) {
	registerGlobal.Do(func() {
		provider := newQueueMetrics(reg)
		workqueue.SetProvider(provider)
		latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "rest_client_request_duration_seconds", Help: "Request latency by Kubernetes verb.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}, []string{"verb"})
		results := prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rest_client_requests_total", Help: "Requests by HTTP method and response code.",
		}, []string{"code", "method"})
		reg.MustRegister(latency, results)
		clientmetrics.Register(clientmetrics.RegisterOpts{
			RequestLatency: latencyAdapter{latency, m},
			RequestResult:  resultAdapter{results},
		})
	})
}

// latencyAdapter records request latency, and counts requests by Kubernetes
// verb: client-go shows the URL, and so the verb, only to this metric.
type latencyAdapter struct {
	h *prometheus.HistogramVec
	m *Metrics
}

func (a latencyAdapter) Observe(_ context.Context, method string, u url.URL, latency time.Duration) {
	verb, resource := RequestVerb(method, u)
	a.h.WithLabelValues(verb).Observe(latency.Seconds())
	if a.m != nil {
		a.m.requests.WithLabelValues(verb, resource).Inc()
	}
}

type resultAdapter struct{ c *prometheus.CounterVec }

func (a resultAdapter) Increment(_ context.Context, code, method, _ string) {
	a.c.WithLabelValues(code, method).Inc()
}

// RequestVerb turns an HTTP method and URL into the Kubernetes verb (get,
// list, watch, create, update, patch, delete or deletecollection) and the
// resource, with its subresource if any ("webapps/status"). Requests outside
// the resource API (discovery) have the lower-cased method and an empty
// resource.
func RequestVerb(method string, u url.URL) (verb, resource string) {
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	// /api/v1/... or /apis/group/version/...
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return strings.ToLower(method), ""
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:] // namespaces/NS/resource/...
	}
	resource = parts[0]
	if len(parts) >= 3 {
		resource += "/" + parts[2]
	}
	collection := len(parts) == 1
	switch method {
	case "GET":
		if w := u.Query().Get("watch"); w == "true" || w == "1" {
			return "watch", resource
		}
		if collection {
			return "list", resource
		}
		return "get", resource
	case "POST":
		return "create", resource
	case "PUT":
		return "update", resource
	case "PATCH":
		return "patch", resource
	case "DELETE":
		if collection {
			return "deletecollection", resource
		}
		return "delete", resource
	}
	return strings.ToLower(method), resource
}

// queueMetrics is a workqueue.MetricsProvider backed by Prometheus.
type queueMetrics struct {
	depth, unfinished, longest *prometheus.GaugeVec
	adds, retries              *prometheus.CounterVec
	latency, work              *prometheus.HistogramVec
}

func newQueueMetrics(reg prometheus.Registerer) *queueMetrics {
	buckets := prometheus.ExponentialBuckets(1e-6, 10, 10)
	q := &queueMetrics{
		depth:      prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "workqueue", Name: "depth", Help: "Current depth of the work queue."}, []string{"name"}),
		adds:       prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: "workqueue", Name: "adds_total", Help: "Adds handled by the work queue."}, []string{"name"}),
		latency:    prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: "workqueue", Name: "queue_duration_seconds", Help: "Seconds an item waits in the queue before being processed.", Buckets: buckets}, []string{"name"}),
		work:       prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: "workqueue", Name: "work_duration_seconds", Help: "Seconds processing an item takes.", Buckets: buckets}, []string{"name"}),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "workqueue", Name: "unfinished_work_seconds", Help: "Seconds of work in progress not yet observed by work_duration."}, []string{"name"}),
		longest:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "workqueue", Name: "longest_running_processor_seconds", Help: "Seconds the longest running processor has been running."}, []string{"name"}),
		retries:    prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: "workqueue", Name: "retries_total", Help: "Retries handled by the work queue."}, []string{"name"}),
	}
	reg.MustRegister(q.depth, q.adds, q.latency, q.work, q.unfinished, q.longest, q.retries)
	return q
}

func (q *queueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return q.depth.WithLabelValues(name)
}
func (q *queueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return q.adds.WithLabelValues(name)
}
func (q *queueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return q.latency.WithLabelValues(name)
}
func (q *queueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return q.work.WithLabelValues(name)
}
func (q *queueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.unfinished.WithLabelValues(name)
}
func (q *queueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.longest.WithLabelValues(name)
}
func (q *queueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return q.retries.WithLabelValues(name)
}
