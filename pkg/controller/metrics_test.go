package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	clientmetrics "k8s.io/client-go/tools/metrics"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"kgen.dev/kgen/internal/golden"
	"kgen.dev/kgen/pkg/reconcile"
	"kgen.dev/kgen/rules"
)

func TestRequestVerb(t *testing.T) {
	tests := []struct{ method, url, verb, resource string }{
		{"GET", "/api/v1/namespaces/ns/configmaps/c", "get", "configmaps"},
		{"GET", "/api/v1/namespaces/ns/configmaps", "list", "configmaps"},
		{"GET", "/api/v1/configmaps?watch=true", "watch", "configmaps"},
		{"GET", "/apis/apps/v1/deployments?labelSelector=a%3Db", "list", "deployments"},
		{"GET", "/apis/apps/v1/namespaces/ns/deployments/d/status", "get", "deployments/status"},
		{"GET", "/api/v1/namespaces", "list", "namespaces"},
		{"GET", "/api/v1/namespaces/ns", "get", "namespaces"},
		{"GET", "/apis", "get", ""},
		{"GET", "/api/v1", "get", ""},
		{"POST", "/api/v1/namespaces/ns/configmaps", "create", "configmaps"},
		{"PATCH", "/apis/example.com/v1/namespaces/ns/webapps/w/status", "patch", "webapps/status"},
		{"PATCH", "/apis/rbac.authorization.k8s.io/v1/clusterroles/r", "patch", "clusterroles"},
		{"PUT", "/api/v1/namespaces/ns/configmaps/c", "update", "configmaps"},
		{"DELETE", "/api/v1/namespaces/ns/configmaps/c", "delete", "configmaps"},
		{"DELETE", "/api/v1/namespaces/ns/configmaps", "deletecollection", "configmaps"},
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.url)
		if err != nil {
			t.Fatal(err)
		}
		if verb, resource := RequestVerb(tt.method, *u); verb != tt.verb || resource != tt.resource {
			t.Errorf("RequestVerb(%s %s) = %s %s, want %s %s", tt.method, tt.url, verb, resource, tt.verb, tt.resource)
		}
	}
}

// controllerRuntimeFamilies are the families, with their label names, that
// dashboards made for controller-runtime operators read (contract §11):
// -update cannot drop them from the golden file unnoticed.
var controllerRuntimeFamilies = map[string]string{
	"controller_runtime_reconcile_total":                 "controller,result",
	"controller_runtime_reconcile_errors_total":          "controller",
	"controller_runtime_terminal_reconcile_errors_total": "controller",
	"controller_runtime_reconcile_panics_total":          "controller",
	"controller_runtime_reconcile_time_seconds":          "controller",
	"controller_runtime_active_workers":                  "controller",
	"controller_runtime_max_concurrent_reconciles":       "controller",
	"workqueue_depth":                                    "controller,name,priority",
	"workqueue_adds_total":                               "controller,name",
	"workqueue_queue_duration_seconds":                   "controller,name",
	"workqueue_work_duration_seconds":                    "controller,name",
	"workqueue_unfinished_work_seconds":                  "controller,name",
	"workqueue_longest_running_processor_seconds":        "controller,name",
	"workqueue_retries_total":                            "controller,name",
	"rest_client_requests_total":                         "code,host,method",
	"leader_election_master_status":                      "name",
	"kgen_build_info":                                    "goversion,revision,version",
}

// TestMetricFamilies scrapes a registry built as the manager builds it,
// after a few observations of each kind, and compares every family's name,
// type and label names with testdata/metrics.golden.
func TestMetricFamilies(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	RegisterGlobalMetrics(reg, m)

	m.addRule("webapp", 8)
	m.working("webapp")()
	m.reconciled("webapp", time.Now(), reconcile.Result{}, nil)
	m.reconciled("webapp", time.Now(), reconcile.Result{RequeueAfter: time.Second}, nil)
	m.reconciled("webapp", time.Now(), reconcile.Result{}, reconcile.Terminal(errors.New("bad spec")))
	m.panickedIn("webapp")
	m.setWaiting("webapp", false)

	queue := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "kgen"})
	queue.Add("a")
	item, _ := queue.Get()
	queue.Done(item)
	queue.AddRateLimited("b")
	queue.ShutDown()

	u, _ := url.Parse("https://10.0.0.1:6443/api/v1/namespaces/ns/configmaps/c")
	clientmetrics.RequestLatency.Observe(t.Context(), "GET", *u, time.Millisecond)
	clientmetrics.RequestResult.Increment(t.Context(), "200", "GET", u.Host)

	// A new elector reports that it does not lead yet.
	if _, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: "ns", Name: "kgen"},
			Client:     fake.NewClientset().CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: "test"},
		},
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second, Name: "kgen",
		Callbacks: leaderelection.LeaderCallbacks{OnStartedLeading: func(context.Context) {}, OnStoppedLeading: func() {}},
	}); err != nil {
		t.Fatal(err)
	}

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	var lines []string
	for _, f := range families {
		labels := map[string]bool{}
		for _, metric := range f.GetMetric() {
			for _, l := range metric.GetLabel() {
				labels[l.GetName()] = true
			}
		}
		got[f.GetName()] = strings.Join(slices.Sorted(maps.Keys(labels)), ",")
		lines = append(lines, fmt.Sprintf("%s %s {%s}", f.GetName(), strings.ToLower(f.GetType().String()), got[f.GetName()]))
	}
	golden.Check(t, filepath.Join("testdata", "metrics.golden"), strings.Join(lines, "\n")+"\n")
	for name, want := range controllerRuntimeFamilies {
		if labels, ok := got[name]; !ok || labels != want {
			t.Errorf("family %s has labels {%s} (present: %t), want {%s} as controller-runtime", name, labels, ok, want)
		}
	}
}

// A reconcile counts as controller-runtime counts it.
func TestReconciled(t *testing.T) {
	tests := []struct {
		name                    string
		result                  reconcile.Result
		err                     error
		label                   string
		errorCount, terminalCnt float64
	}{
		{name: "done", label: "success"},
		{name: "look again later", result: reconcile.Result{RequeueAfter: time.Minute}, label: "requeue_after"},
		{name: "a child waits for one just written", result: reconcile.Result{Again: true}, label: "requeue_after"},
		{name: "an object in the way", result: reconcile.Result{Conflict: "configmaps ns/taken exists"}, label: "error", errorCount: 1},
		{name: "retried error", err: errors.New("conflict"), label: "error", errorCount: 1},
		{name: "terminal error", err: fmt.Errorf("child x: %w", reconcile.Terminal(errors.New("bad"))), label: "error", errorCount: 1, terminalCnt: 1},
		{name: "an error wins over a requeue", result: reconcile.Result{RequeueAfter: time.Minute}, err: errors.New("boom"), label: "error", errorCount: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewMetrics(prometheus.NewRegistry())
			m.addRule("r", 4)
			m.reconciled("r", time.Now(), tt.result, tt.err)
			for _, result := range []string{"success", "error", "requeue", "requeue_after"} {
				want := 0.0
				if result == tt.label {
					want = 1
				}
				if got := testutil.ToFloat64(m.reconciles.WithLabelValues("r", result)); got != want {
					t.Errorf("reconcile_total{result=%q} = %v, want %v", result, got, want)
				}
			}
			if got := testutil.ToFloat64(m.failed.WithLabelValues("r")); got != tt.errorCount {
				t.Errorf("reconcile_errors_total = %v, want %v", got, tt.errorCount)
			}
			if got := testutil.ToFloat64(m.terminal.WithLabelValues("r")); got != tt.terminalCnt {
				t.Errorf("terminal_reconcile_errors_total = %v, want %v", got, tt.terminalCnt)
			}
			if got := testutil.CollectAndCount(m.duration); got != 1 {
				t.Errorf("reconcile_time_seconds has %d series, want 1", got)
			}
		})
	}
}

// Active workers count up and down per rule; a removed rule leaves no
// series behind, and the other rules keep theirs.
func TestWorkersAndRemovedRules(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.addRule("a", 8)
	m.addRule("b", 8)
	doneA1, doneA2, doneB := m.working("a"), m.working("a"), m.working("b")
	if got := testutil.ToFloat64(m.active.WithLabelValues("a")); got != 2 {
		t.Errorf("active_workers{a} = %v, want 2", got)
	}
	m.addRule("a", 8) // the rule changed while two workers are busy with it
	if got := testutil.ToFloat64(m.active.WithLabelValues("a")); got != 2 {
		t.Errorf("active_workers{a} = %v after the rule changed, want 2", got)
	}
	doneA1()
	doneB()
	if got := testutil.ToFloat64(m.active.WithLabelValues("a")); got != 1 {
		t.Errorf("active_workers{a} = %v after one finished, want 1", got)
	}
	doneA2()
	if got := testutil.ToFloat64(m.maxWorkers.WithLabelValues("b")); got != 8 {
		t.Errorf("max_concurrent_reconciles{b} = %v, want 8", got)
	}
	for _, rule := range []string{"a", "b"} {
		m.setWaiting(rule, true)
		m.reconciled(rule, time.Now(), reconcile.Result{}, nil)
		m.panickedIn(rule)
	}
	m.removeRule("a")
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, f := range families {
		for _, metric := range f.GetMetric() {
			for _, l := range metric.GetLabel() {
				if l.GetName() == "controller" || l.GetName() == "rule" {
					seen[l.GetValue()]++
					if l.GetValue() == "a" {
						t.Errorf("%s still has a series of the removed rule: %v", f.GetName(), metric.GetLabel())
					}
				}
			}
		}
	}
	// b: 4 results, errors, terminal, panics, time, max, active, waiting.
	if seen["b"] != 11 {
		t.Errorf("rule b has %d series, want 11", seen["b"])
	}
}

// A key of a rule whose caches have not synced (it may not list a child
// kind) is not reconciled, and not counted as a reconcile: a live audit
// saw a rule that could not run show 20 successful reconciles.
func TestUnsyncedRuleCountsNoReconcile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client, m := fakeCluster(gadgetWith("g1", false, false))
		client.PrependReactor("list", "configmaps", func(clienttesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(cmResource.GroupResource(), "", errors.New("no RBAC"))
		})
		metrics := NewMetrics(prometheus.NewRegistry())
		c := New(Config{Rules: []*rules.Rule{gadgetRule(t, configChild)}, Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100), Metrics: metrics})
		ctx := activateRule(t, c)
		synctest.Wait()
		if s, _ := c.State("r"); s.Synced {
			t.Fatal("the rule synced without listing its child kind")
		}
		if _, err := c.reconcileKey(ctx, Key{Rule: "r", Namespace: "ns", Name: "g1"}); err != nil {
			t.Fatal(err)
		}
		if n := reconcilesOf(metrics); n != 0 {
			t.Errorf("%d reconciles counted for a rule that cannot reconcile, want 0", n)
		}
	})
}

// A rule whose input is of its parents' kind and namespace has two
// informers of one resource, namespace and selector: the scrape reports
// them as one series (a live audit: /metrics answered 500, "collected
// metric … was collected before with the same name and label values").
func TestInformerMetricsOfSharedKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rs, err := rules.Parse("rules.yaml", []byte(`apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: r}
spec:
  parent: {apiVersion: example.com/v1, kind: Gadget, namespaces: [ns]}
  inputs:
  - {id: defaults, apiVersion: example.com/v1, kind: Gadget, name: defaults, namespace: ns}
  children:
`+configChild), rules.Options{})
		if err != nil {
			t.Fatal(err)
		}
		client, m := fakeCluster(gadgetWith("g1", false, false))
		reg := prometheus.NewRegistry()
		c := New(Config{Rules: rs, Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100), Metrics: NewMetrics(reg)})
		activateRule(t, c)
		waitState(t, c, "the rule to sync", func(s RuleState) bool { return s.Synced })
		families, err := reg.Gather()
		if err != nil {
			t.Fatalf("scrape: %v", err)
		}
		found := false
		for _, f := range families {
			if f.GetName() != "kgen_informer_objects" {
				continue
			}
			for _, metric := range f.GetMetric() {
				labels := map[string]string{}
				for _, l := range metric.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["resource"] == "gadgets.example.com" && labels["namespace"] == "ns" && labels["selector"] == "" {
					found = true
					if got := metric.GetGauge().GetValue(); got != 2 {
						t.Errorf("kgen_informer_objects of Gadgets in ns = %v, want 2 (the parents' informer and the input's, one Gadget each)", got)
					}
				}
			}
		}
		if !found {
			t.Error("no series of the Gadgets in ns")
		}
	})
}
