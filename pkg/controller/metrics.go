package controller

import (
	"context"
	"errors"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/leaderelection"
	clientmetrics "k8s.io/client-go/tools/metrics"
	"k8s.io/client-go/util/workqueue"

	"kgen.dev/kgen/internal/version"
	"kgen.dev/kgen/pkg/reconcile"
	"kgen.dev/kgen/pkg/watch"
)

// Metrics are the controller's Prometheus metrics. A nil *Metrics records
// nothing.
//
// The reconcile metrics carry the names, labels, help and buckets of
// controller-runtime's (pkg/internal/controller/metrics), so dashboards
// made for controller-runtime operators work with kgen. Their controller
// label is the rule's name: each rule is one of kgen's controllers.
type Metrics struct {
	reconciles    *prometheus.CounterVec   // controller_runtime_reconcile_total{controller,result}
	failed        *prometheus.CounterVec   // controller_runtime_reconcile_errors_total{controller}
	terminal      *prometheus.CounterVec   // controller_runtime_terminal_reconcile_errors_total{controller}
	panics        *prometheus.CounterVec   // controller_runtime_reconcile_panics_total{controller}
	duration      *prometheus.HistogramVec // controller_runtime_reconcile_time_seconds{controller}
	maxWorkers    *prometheus.GaugeVec     // controller_runtime_max_concurrent_reconciles{controller}
	active        *prometheus.GaugeVec     // controller_runtime_active_workers{controller}
	waiting       *prometheus.GaugeVec
	requests      *prometheus.CounterVec
	backoffs      *prometheus.CounterVec
	childBackoffs *prometheus.CounterVec
	childSpaced   *prometheus.CounterVec
	listErrors    *prometheus.CounterVec

	watches *watch.Manager
}

// Results of a reconcile, as controller-runtime labels them. kgen never
// asks for an immediate requeue, so "requeue" stays 0.
const (
	resultSuccess      = "success"
	resultError        = "error"
	resultRequeue      = "requeue"
	resultRequeueAfter = "requeue_after"
)

// reconcileBuckets are controller-runtime's buckets of
// controller_runtime_reconcile_time_seconds.
var reconcileBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
	1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60}

// NewMetrics creates the controller's metrics and registers them, with the
// informer object counts and kgen_build_info, on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "controller_runtime_reconcile_total", Help: "Total number of reconciliations per controller",
		}, []string{"controller", "result"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "controller_runtime_reconcile_errors_total", Help: "Total number of reconciliation errors per controller",
		}, []string{"controller"}),
		terminal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "controller_runtime_terminal_reconcile_errors_total", Help: "Total number of terminal reconciliation errors per controller",
		}, []string{"controller"}),
		panics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "controller_runtime_reconcile_panics_total", Help: "Total number of reconciliation panics per controller",
		}, []string{"controller"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "controller_runtime_reconcile_time_seconds", Help: "Length of time per reconciliation per controller",
			Buckets:                     reconcileBuckets,
			NativeHistogramBucketFactor: 1.1, NativeHistogramMaxBucketNumber: 100, NativeHistogramMinResetDuration: time.Hour,
		}, []string{"controller"}),
		maxWorkers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "controller_runtime_max_concurrent_reconciles", Help: "Maximum number of concurrent reconciles per controller",
		}, []string{"controller"}),
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "controller_runtime_active_workers", Help: "Number of currently used workers per controller",
		}, []string{"controller"}),
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kgen_rule_waiting", Help: "1 while a rule waits for its kinds to be served, else 0.",
		}, []string{"rule"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kgen_api_requests_total", Help: "Requests kgen sent to the API server, by Kubernetes verb (get, list, watch, create, patch, delete, ...) and resource (with its subresource, as in webapps/status).",
		}, []string{"verb", "resource"}),
	}
	m.registerHealth(reg)
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kgen_build_info", Help: "Always 1; its labels say which kgen runs: the release version, the VCS revision and the Go version it was built with.",
	}, []string{"version", "revision", "goversion"})
	buildInfo.WithLabelValues(version.Version, version.Commit(), runtime.Version()).Set(1)
	reg.MustRegister(m.reconciles, m.failed, m.terminal, m.panics, m.duration, m.maxWorkers, m.active,
		m.waiting, m.requests, buildInfo, informerCollector{m})
	return m
}

// addRule starts the series of a rule at zero, as controller-runtime does
// when a controller starts, so dashboards show a rule before its first
// reconcile; workers is how many parents, of any rule, are reconciled at
// once. Calling it again for a rule that changed keeps its counts and its
// busy workers.
func (m *Metrics) addRule(rule string, workers int) {
	if m == nil {
		return
	}
	for _, result := range []string{resultSuccess, resultError, resultRequeue, resultRequeueAfter} {
		m.reconciles.WithLabelValues(rule, result).Add(0)
	}
	m.failed.WithLabelValues(rule).Add(0)
	m.terminal.WithLabelValues(rule).Add(0)
	m.panics.WithLabelValues(rule).Add(0)
	m.maxWorkers.WithLabelValues(rule).Set(float64(workers))
	m.active.WithLabelValues(rule).Add(0)
}

// removeRule deletes every series of a rule that was removed.
func (m *Metrics) removeRule(rule string) {
	if m == nil {
		return
	}
	for _, v := range []*prometheus.MetricVec{m.reconciles.MetricVec, m.failed.MetricVec, m.terminal.MetricVec, m.panics.MetricVec,
		m.duration.MetricVec, m.maxWorkers.MetricVec, m.active.MetricVec} {
		v.DeletePartialMatch(prometheus.Labels{"controller": rule})
	}
	m.waiting.DeleteLabelValues(rule)
}

// working counts a worker as busy with a parent of the rule until the
// returned function is called.
func (m *Metrics) working(rule string) (done func()) {
	if m == nil {
		return func() {}
	}
	g := m.active.WithLabelValues(rule)
	g.Inc()
	return g.Dec
}

// observe records a reconcile of a parent of the rule that started at
// start and ended with err; see reconciled, which also tells requeues.
func (m *Metrics) observe(rule string, start time.Time, err error) {
	m.reconciled(rule, start, reconcile.Result{}, err)
}

// reconciled records a reconcile of a parent of the rule that started at
// start and returned result and err. As controller-runtime counts them, an
// error (here also a Conflict) is result "error" and counts in the errors
// total; a terminal one (reconcile.ErrTerminal: not retried) counts in the
// terminal total too.
func (m *Metrics) reconciled(rule string, start time.Time, result reconcile.Result, err error) {
	if m == nil {
		return
	}
	label := resultSuccess
	switch {
	case err != nil || result.Conflict != "":
		// A Conflict is a failure too: the parent's children are not
		// what the rule says, and it is retried with backoff.
		label = resultError
		m.failed.WithLabelValues(rule).Inc()
		if errors.Is(err, reconcile.ErrTerminal) {
			m.terminal.WithLabelValues(rule).Inc()
		}
	case result.RequeueAfter > 0 || result.Again:
		// Each is queued again after a delay (processNextWorkItem).
		label = resultRequeueAfter
	}
	m.reconciles.WithLabelValues(rule, label).Inc()
	m.duration.WithLabelValues(rule).Observe(time.Since(start).Seconds())
}

// panicked counts a recovered panic whose rule is not known: its
// controller label is empty. panickedIn names the rule.
func (m *Metrics) panicked() { m.panickedIn("") }

// panickedIn counts a recovered panic in a reconcile of a parent of the
// rule.
func (m *Metrics) panickedIn(rule string) {
	if m != nil {
		m.panics.WithLabelValues(rule).Inc()
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

// informerCollector reports the informers' object counts and sync states
// when scraped, by resource, namespace and selector. Informers that share
// those (a rule's input of its parents' kind and namespace, which caches
// every label, beside its parents' informer; two versions of one
// resource) are one series: a registry refuses a scrape with two series of
// one name and labels (a live audit: /metrics answered 500 with such a
// rule loaded).
type informerCollector struct{ m *Metrics }

var (
	informerObjects = prometheus.NewDesc("kgen_informer_objects", "Objects in the caches of the informers of a resource, namespace and selector.", []string{"resource", "namespace", "selector"}, nil)
	informerSynced  = prometheus.NewDesc("kgen_informer_synced", "1 once every informer of a resource, namespace and selector has synced.", []string{"resource", "namespace", "selector"}, nil)
)

func (c informerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- informerObjects
	ch <- informerSynced
}

func (c informerCollector) Collect(ch chan<- prometheus.Metric) {
	if c.m.watches == nil {
		return
	}
	type series struct{ resource, namespace, selector string }
	objects, synced := map[series]int{}, map[series]bool{}
	for _, s := range c.m.watches.Stats() {
		k := series{s.Key.GVR.GroupResource().String(), s.Key.Namespace, s.Key.Selector}
		all, seen := synced[k]
		objects[k] += s.Objects
		synced[k] = s.Synced && (all || !seen)
	}
	for k, n := range objects {
		v := 0.0
		if synced[k] {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(informerObjects, prometheus.GaugeValue, float64(n), k.resource, k.namespace, k.selector)
		ch <- prometheus.MustNewConstMetric(informerSynced, prometheus.GaugeValue, v, k.resource, k.namespace, k.selector)
	}
}

var registerGlobal sync.Once

// RegisterGlobalMetrics routes client-go's process-wide metrics (REST client
// requests, work queues, leader election) to m's registry, with the names
// and labels controller-runtime gives them. client-go allows this once per
// process; later calls do nothing.
func RegisterGlobalMetrics(reg prometheus.Registerer, m *Metrics) {
	registerGlobal.Do(func() {
		workqueue.SetProvider(newQueueMetrics(reg))
		leaderelection.SetProvider(newLeaderMetrics(reg))
		// controller-runtime's names, labels and buckets; it registers the
		// latency histogram only on request, kgen always.
		latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "rest_client_request_duration_seconds", Help: "Request latency in seconds. Broken down by verb and host.",
			Buckets:                     []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0},
			NativeHistogramBucketFactor: 1.1, NativeHistogramMaxBucketNumber: 100, NativeHistogramMinResetDuration: time.Hour,
		}, []string{"verb", "host"})
		results := prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rest_client_requests_total", Help: "Number of HTTP requests, partitioned by status code, method, and host.",
		}, []string{"code", "method", "host"})
		reg.MustRegister(latency, results)
		clientmetrics.Register(clientmetrics.RegisterOpts{
			RequestLatency: latencyAdapter{latency, m},
			RequestResult:  resultAdapter{results},
		})
	})
}

// latencyAdapter records request latency by HTTP method (client-go calls it
// verb) and host, as controller-runtime does, and counts requests by
// Kubernetes verb and resource in kgen_api_requests_total: client-go shows
// the URL, and so the Kubernetes verb, only to this metric.
type latencyAdapter struct {
	h *prometheus.HistogramVec
	m *Metrics
}

func (a latencyAdapter) Observe(_ context.Context, method string, u url.URL, latency time.Duration) {
	verb, resource := RequestVerb(method, u)
	a.h.WithLabelValues(method, u.Host).Observe(latency.Seconds())
	if a.m != nil {
		a.m.requests.WithLabelValues(verb, resource).Inc()
	}
}

type resultAdapter struct{ c *prometheus.CounterVec }

func (a resultAdapter) Increment(_ context.Context, code, method, host string) {
	a.c.WithLabelValues(code, method, host).Inc()
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

// queueMetrics is a workqueue.MetricsProvider backed by Prometheus, with
// controller-runtime's names, help, buckets and labels: name and
// controller are both the queue's name ("kgen"), and workqueue_depth has
// an empty priority label (kgen's queue has no priorities).
type queueMetrics struct {
	depth, unfinished, longest *prometheus.GaugeVec
	adds, retries              *prometheus.CounterVec
	latency, work              *prometheus.HistogramVec
}

func newQueueMetrics(reg prometheus.Registerer) *queueMetrics {
	histogram := func(name, help string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "workqueue", Name: name, Help: help,
			Buckets:                     prometheus.ExponentialBuckets(10e-9, 10, 12),
			NativeHistogramBucketFactor: 1.1, NativeHistogramMaxBucketNumber: 100, NativeHistogramMinResetDuration: time.Hour,
		}, []string{"name", "controller"})
	}
	labels := []string{"name", "controller"}
	q := &queueMetrics{
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "workqueue", Name: "depth",
			Help: "Current depth of workqueue by workqueue and priority"}, []string{"name", "controller", "priority"}),
		adds: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: "workqueue", Name: "adds_total",
			Help: "Total number of adds handled by workqueue"}, labels),
		latency: histogram("queue_duration_seconds", "How long in seconds an item stays in workqueue before being requested"),
		work:    histogram("work_duration_seconds", "How long in seconds processing an item from workqueue takes."),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "workqueue", Name: "unfinished_work_seconds",
			Help: "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. " +
				"Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases."}, labels),
		longest: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "workqueue", Name: "longest_running_processor_seconds",
			Help: "How many seconds has the longest running processor for workqueue been running."}, labels),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: "workqueue", Name: "retries_total",
			Help: "Total number of items added to the workqueue with a non-zero delay (rate-limited requeues, explicit RequeueAfter or AddAfter calls)"}, labels),
	}
	reg.MustRegister(q.depth, q.adds, q.latency, q.work, q.unfinished, q.longest, q.retries)
	return q
}

func (q *queueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return q.depth.WithLabelValues(name, name, "")
}
func (q *queueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return q.adds.WithLabelValues(name, name)
}
func (q *queueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return q.latency.WithLabelValues(name, name)
}
func (q *queueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return q.work.WithLabelValues(name, name)
}
func (q *queueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.unfinished.WithLabelValues(name, name)
}
func (q *queueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.longest.WithLabelValues(name, name)
}
func (q *queueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return q.retries.WithLabelValues(name, name)
}

// leaderMetrics is a leaderelection.MetricsProvider backed by Prometheus:
// leader_election_master_status{name} is 1 while this process holds the
// Lease called name, and 0 while it waits for it.
type leaderMetrics struct{ status *prometheus.GaugeVec }

func newLeaderMetrics(reg prometheus.Registerer) leaderMetrics {
	l := leaderMetrics{prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "leader_election_master_status",
		Help: "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.",
	}, []string{"name"})}
	reg.MustRegister(l.status)
	return l
}

func (l leaderMetrics) NewLeaderMetric() leaderelection.LeaderMetric { return l }
func (l leaderMetrics) On(name string)                               { l.status.WithLabelValues(name).Set(1) }
func (l leaderMetrics) Off(name string)                              { l.status.WithLabelValues(name).Set(0) }
func (l leaderMetrics) SlowpathExercised(string)                     {}
