package manager

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"kgen.dev/kgen/internal/version"
	"kgen.dev/kgen/pkg/controller"
	"kgen.dev/kgen/pkg/mapper"
	"kgen.dev/kgen/pkg/metricsserver"
	"kgen.dev/kgen/pkg/reconcile"
	"kgen.dev/kgen/pkg/ruleset"
	"kgen.dev/kgen/pkg/schema"
	"kgen.dev/kgen/pkg/shard"
	"kgen.dev/kgen/pkg/watch"
	"kgen.dev/kgen/rules"
)

// Defaults of Options, chosen by measurement (bench/): converging 500
// WebApps took 10.3 s at 200 QPS and 6.6 s at 1000 QPS, the same as with no
// client-side limit, because the API server is then the bottleneck.
// client-go's 5/10 would make kgen, not the server, the limit. The server's
// priority and fairness still protects it.
const (
	DefaultQPS           = 1000
	DefaultBurst         = 2000
	DefaultLeaseDuration = 15 * time.Second
	DefaultLeaseName     = "kgen"
)

// Options configure a Manager. Config and Rules are required; the zero value
// of the others is sensible (no metrics or health server, no leader
// election, the controller's defaults).
type Options struct {
	// Config reaches the API server. New copies it and sets QPS, Burst and
	// the User-Agent on the copy.
	Config *rest.Config
	// Rules are rules to run, fixed for the Manager's life (tests use
	// them); RulePaths and RuleObjects are the rules a user runs, changed
	// live.
	Rules []*rules.Rule
	// RulePaths are rules files and directories, read again when they
	// change (see pkg/ruleset).
	RulePaths []string
	// RuleObjects serves the cluster's Rule objects (rules.kgen.dev).
	RuleObjects bool
	// Workers is how many parents are reconciled at once;
	// controller.DefaultWorkers when zero.
	Workers int
	// QPS and Burst limit requests to the API server; DefaultQPS and
	// DefaultBurst when zero.
	QPS   float32
	Burst int
	// UserAgent names kgen in the API server's logs; "kgen/<version>"
	// when empty.
	UserAgent string
	// Metrics configure the Prometheus /metrics server (and /debug/pprof
	// on it): its address, off when empty or "0", and whether it serves
	// HTTPS to callers the API server authenticates and authorises.
	Metrics metricsserver.Options
	// HealthAddr serves /healthz and /readyz; off when empty or "0".
	HealthAddr string
	// LeaderElection, when enabled, runs the controller only while this
	// process holds a Lease.
	LeaderElection LeaderElection
	// Sharding, when enabled, spreads the parents over every replica
	// started with it (see pkg/shard). It excludes LeaderElection.
	Sharding Sharding
	// RetryInterval is how often rules whose kinds are not served are
	// tried again; controller.DefaultRetryInterval when zero.
	RetryInterval time.Duration
	// Events says which Events kgen records on parents;
	// reconcile.EventsNotable when empty.
	Events reconcile.EventPolicy
	// ManageCRDs creates and updates the CustomResourceDefinition of every
	// rule with spec.parent.schema before the rule starts.
	ManageCRDs bool
	// StateName names the ConfigMap, in kgen's own namespace, where kgen
	// records where each rule made children and watched parents;
	// controller.DefaultRecordName when empty. Two kgens in one namespace
	// need a record each: one's record read by the other names rules the
	// other does not have, whose parents it would release.
	StateName string
}

// LeaderElection configures the Lease a Manager must hold to run.
type LeaderElection struct {
	Enabled bool
	// Namespace of the Lease; the pod's namespace in a cluster, else
	// "default", when empty. It is kgen's own namespace, where it also
	// keeps its record of the rules' child kinds (the ConfigMap
	// controller.DefaultRecordName), with or without leader election.
	Namespace string
	// Name of the Lease; DefaultLeaseName when empty.
	Name string
	// LeaseDuration is how long a Lease lasts without renewal;
	// DefaultLeaseDuration when zero. The renew deadline is two thirds of
	// it.
	LeaseDuration time.Duration
	// Identity names this replica in the Lease; the host name and a random
	// suffix when empty.
	Identity string
}

// Sharding configures a replica of a sharded kgen.
type Sharding struct {
	Enabled bool
	// ID names the replica's shard (see shard.ValidateID); required when
	// Enabled.
	ID string
	// Namespace holds the shards' Leases; as LeaderElection.Namespace
	// when empty.
	Namespace string
	// LeaseDuration is how long a shard's Lease lasts without renewal;
	// DefaultLeaseDuration when zero. A replica that goes has its parents
	// reconciled by the others within two of them.
	LeaseDuration time.Duration
}

// Manager is a wired kgen. Create it with New and start it with Run.
type Manager struct {
	opts       Options
	kube       kubernetes.Interface
	registry   *prometheus.Registry
	metrics    *metricsserver.Server
	ctrl       *controller.Controller
	recorder   record.EventRecorder
	broadcast  record.EventBroadcaster
	restConfig *rest.Config
	// rules is the live set of rules, when RulePaths or RuleObjects.
	rules *ruleset.Set
	// kinds follows the cluster's CRDs and APIServices for the mapper,
	// the controller and the rules.
	kinds *mapper.Watcher
	// shard is this replica's shard, when Sharding is enabled.
	shard *shard.Shard
	// forgetKinds drops what the mapper and the schema source know, to be
	// read again: what a standby learned while it checked rules files may
	// have changed since, and only a running replica follows changes.
	forgetKinds func()

	// state is "running", "standby" or why the controller is not running
	// yet; it decides readiness.
	state atomic.Value
}

// New builds the clients, mapper, metrics, event recorder and controller.
// It sends no request: that starts with Run.
func New(opts Options) (*Manager, error) {
	if opts.Config == nil {
		return nil, errors.New("manager: no client configuration")
	}
	if err := opts.Metrics.Validate(); err != nil {
		return nil, err
	}
	if opts.LeaderElection.Enabled && opts.Sharding.Enabled {
		return nil, errors.New("leader election and sharding are exclusive: with sharding every replica works, on its own parents")
	}
	if opts.QPS == 0 {
		opts.QPS = DefaultQPS
	}
	if opts.Burst == 0 {
		opts.Burst = DefaultBurst
	}
	if opts.UserAgent == "" {
		opts.UserAgent = "kgen/" + version.Version
	}
	config := rest.CopyConfig(opts.Config)
	timeoutExceptWatches(config)
	config.QPS, config.Burst = opts.QPS, opts.Burst
	config.UserAgent = opts.UserAgent
	kube, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	restClient, err := watch.NewRESTClient(config)
	if err != nil {
		return nil, err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := controller.NewMetrics(reg)
	controller.RegisterGlobalMetrics(reg, metrics)
	metricsServer, err := metricsserver.New(opts.Metrics, reg, kube)
	if err != nil {
		return nil, err
	}

	broadcaster := record.NewBroadcaster(record.WithCorrelatorOptions(record.CorrelatorOptions{SpamKeyFunc: eventSpamKey}))
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kgen"})

	m := &Manager{opts: opts, kube: kube, registry: reg, metrics: metricsServer, recorder: recorder, broadcast: broadcaster, restConfig: config}
	var sharding controller.Sharding
	if opts.Sharding.Enabled {
		meta, err := metadata.NewForConfig(config)
		if err != nil {
			return nil, err
		}
		duration := opts.Sharding.LeaseDuration
		if duration == 0 {
			duration = DefaultLeaseDuration
		}
		m.shard, err = shard.New(shard.Config{
			ID: opts.Sharding.ID, Namespace: opts.namespace(), LeaseDuration: duration,
			Kube: kube, Metadata: meta, Registerer: reg, Publish: m.publishCounts,
		})
		if err != nil {
			return nil, err
		}
		sharding = m.shard
	}
	resources := mapper.New(kube.Discovery())
	// The schemas the server publishes: the controller compares objects
	// by them, and rules are checked against them (and the parent kinds'
	// CRDs) when they start; one Source reads each document once for both.
	// With ManageCRDs kgen applies the parent kinds' CRDs.
	schemas := schema.New(kube.Discovery().OpenAPIV3())
	crds := &ruleset.CRDs{Client: dyn, Resources: resources, Manage: opts.ManageCRDs, Types: schemas}
	// Without a ruleset (rules handed in as Options.Rules alone) a rule
	// that does not fit its CRD waits, whether or not the record says
	// it ran before.
	admit := func(ctx context.Context, rule *rules.Rule, _ bool) error { return crds.Check(ctx, rule) }
	var recheck func(context.Context, *rules.Rule)
	initial := opts.Rules
	record := &controller.ConfigMapRecord{Client: kube.CoreV1(), Namespace: opts.namespace(), Name: opts.StateName, Resource: controller.GroupResourceOf(resources)}
	if len(opts.RulePaths) > 0 || opts.RuleObjects {
		var writesStatus func(string) bool
		if m.shard != nil {
			writesStatus = m.writesRuleStatus
		}
		set, err := ruleset.New(ruleset.Config{
			Paths: opts.RulePaths, Objects: opts.RuleObjects, Client: dyn, Resources: resources,
			RetryInterval: opts.RetryInterval,
			Apply: func(rs []*rules.Rule) {
				all := append(slices.Clone(opts.Rules), rs...)
				crds.Forget(all)
				m.ctrl.SetRules(all)
			},
			Progress:     progress{m},
			WritesStatus: writesStatus,
			CRDs:         crds,
			Ran: func(ctx context.Context) (map[string]ruleset.Ran, error) {
				recorded, err := record.Load(ctx)
				if err != nil {
					return nil, err
				}
				ran := map[string]ruleset.Ran{}
				for name, version := range recorded.Running {
					ran[name] = ruleset.Ran{Version: version, Document: recorded.Documents[name]}
				}
				return ran, nil
			},
		})
		if err != nil {
			return nil, err
		}
		m.rules = set
		admit, recheck = set.Admit, set.Recheck
		// A rejected rules file is otherwise only in the log (a live
		// audit: nothing a platform team alerts on changed).
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "kgen_rules_files_invalid",
			Help: "Rules files whose latest version kgen does not run because it is invalid (the previous valid version keeps running; the log says why).",
		}, func() float64 { return float64(set.InvalidFiles()) }))
		initial = append(slices.Clone(opts.Rules), set.Rules()...)
	}
	if len(initial) == 0 && !opts.RuleObjects {
		return nil, errors.New("no rules to run: give rules files, or serve Rule objects")
	}
	m.ctrl = controller.New(controller.Config{
		Rules: initial, Client: dyn, REST: restClient, Mapper: resources,
		Recorder: recorder, Workers: opts.Workers, RetryInterval: opts.RetryInterval, Metrics: metrics,
		Schemas: schemas, Events: opts.Events, Sharding: sharding,
		Impersonate: impersonator(config),
		Record:      record,
		Prepare:     crds.Prepare, Admit: admit, Recheck: recheck, SchemaDefaults: opts.ManageCRDs,
		RulesLoaded: func() bool { return m.rules == nil || m.rules.Settled() },
	})
	meta, err := metadata.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	m.forgetKinds = func() {
		resources.Reset()
		schemas.ForgetGroup("*")
	}
	m.kinds = mapper.NewWatcher(resources, meta)
	m.kinds.Subscribe(m.ctrl.KindsChanged)
	if m.rules != nil {
		m.kinds.Subscribe(m.rules.KindsChanged)
	}
	m.state.Store("starting")
	return m, nil
}

// Controller returns the manager's controller.
func (m *Manager) Controller() *controller.Controller { return m.ctrl }

// Registry returns the Prometheus registry /metrics serves.
func (m *Manager) Registry() *prometheus.Registry { return m.registry }

// Ready returns nil when the manager is ready to work: its controller runs
// and is ready, or it is a standby waiting for the Lease. A shard is not
// ready until it holds its Lease.
func (m *Manager) Ready() error {
	switch s := m.state.Load().(string); s {
	case "running":
		return m.ctrl.Ready()
	case "standby":
		return nil
	default:
		return errors.New(s)
	}
}

// Run serves metrics and health, records events, and runs the controller
// (under leader election, or the shard's Lease, when enabled) until ctx is
// done. It returns an error if a server cannot listen or the Lease is
// lost.
func (m *Manager) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	m.broadcast.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: m.kube.CoreV1().Events("")})
	defer m.broadcast.Shutdown()

	var servers sync.WaitGroup
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		stopServing()
		servers.Wait()
	}()
	metricsStopped, err := m.metrics.Start(serveCtx)
	if err != nil {
		return err
	}
	servers.Go(func() { <-metricsStopped })
	if err := serve(serveCtx, &servers, m.opts.HealthAddr, healthMux(m.Ready)); err != nil {
		return err
	}

	if m.rules != nil {
		// Every replica follows the rules files, also while it waits
		// for the Lease: it takes over with what they hold then.
		servers.Go(func() { m.rules.FollowFiles(serveCtx) })
	}
	runController := func(ctx context.Context) {
		m.state.Store("running")
		var wg sync.WaitGroup
		wg.Go(func() { m.kinds.Run(ctx) })
		if m.rules != nil {
			// What the files hold now, not at the last poll, checked
			// against the cluster's kinds now, not as this replica
			// read them while it waited (a CRD may have gained the
			// field a new version of a file reads): the controller
			// starts with it.
			m.forgetKinds()
			m.rules.ReadFiles(ctx)
			// A file rule that does not fit its kinds runs the version
			// that ran before, as a running kgen keeps it.
			m.rules.RestoreFiles(ctx)
			// Only the leader follows Rule objects: it writes the
			// Rules' status. With sharding every replica does, and each
			// Rule's status is written by one of them
			// (writesRuleStatus).
			wg.Go(func() { m.rules.RunObjects(ctx) })
		}
		if err := m.ctrl.Run(ctx); err != nil {
			logger.Error(err, "Controller failed")
		}
		wg.Wait()
	}
	switch {
	case m.shard != nil:
		m.state.Store("waiting for the shard's Lease")
		return m.shard.Run(ctx, runController)
	case m.opts.LeaderElection.Enabled:
		return m.runWithLeaderElection(ctx, runController)
	}
	runController(ctx)
	return nil
}

func (m *Manager) runWithLeaderElection(ctx context.Context, run func(context.Context)) error {
	logger := klog.FromContext(ctx)
	le := m.opts.LeaderElection
	ns := m.opts.namespace()
	name := le.Name
	if name == "" {
		name = DefaultLeaseName
	}
	duration := le.LeaseDuration
	if duration == 0 {
		duration = DefaultLeaseDuration
	}
	id := le.Identity
	if id == "" {
		host, _ := os.Hostname()
		id = host + "_" + uuid.NewString()
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: name},
		Client:     m.kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	m.state.Store("standby")
	lost := false
	// The Lease is released only after the controller has finished its work
	// in flight, so the next leader never writes while this one still does:
	// SIGTERM (ctx) stops the controller first, and only then the election.
	leCtx, cancelLE := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelLE()
	var started atomic.Bool
	ran := make(chan struct{})
	go func() {
		<-ctx.Done()
		if started.Load() {
			<-ran
		}
		cancelLE()
	}()
	leaderelection.RunOrDie(leCtx, leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   duration,
		RenewDeadline:   duration * 2 / 3,
		RetryPeriod:     duration / 7,
		ReleaseOnCancel: true,
		// Name labels leader_election_master_status (see
		// controller.RegisterGlobalMetrics).
		Name: name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leading context.Context) {
				started.Store(true)
				defer close(ran)
				logger.Info("Became leader", "lease", ns+"/"+name, "identity", id)
				runCtx, stop := context.WithCancel(leading) // a lost lease stops it
				defer stop()
				defer context.AfterFunc(ctx, stop)() // so does SIGTERM
				run(runCtx)
			},
			OnStoppedLeading: func() {
				if ctx.Err() == nil {
					lost = true
				}
			},
			OnNewLeader: func(identity string) {
				if identity != id {
					logger.Info("Another replica leads", "leader", identity)
				}
			},
		},
	})
	if lost {
		// Another replica may already be writing: stop rather than risk
		// two writers.
		return errors.New("lost the leader lease")
	}
	return nil
}

func healthMux(ready func() error) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// serve listens on addr (unless it is "0" or empty) and serves h until ctx
// is done.
func serve(ctx context.Context, wg *sync.WaitGroup, addr string, h http.Handler) error {
	if addr == "" || addr == "0" {
		return nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	wg.Go(func() { _ = srv.Serve(l) })
	wg.Go(func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	})
	return nil
}

// namespace is kgen's own namespace, of its Leases and its record:
// LeaderElection.Namespace or Sharding.Namespace (the same flag), else the
// pod's namespace in a cluster, else "default".
func (o Options) namespace() string {
	for _, ns := range []string{o.LeaderElection.Namespace, o.Sharding.Namespace} {
		if ns != "" {
			return ns
		}
	}
	if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
		return strings.TrimSpace(string(b))
	}
	return metav1.NamespaceDefault
}

// progress lets the rule set read the controller's state of each rule.
type progress struct{ m *Manager }

// impersonator returns clients that act as a ServiceAccount, one per
// ServiceAccount, made on first use: every write of the children of a rule
// with spec.serviceAccount goes through one.
func impersonator(config *rest.Config) func(rules.ServiceAccount) (dynamic.Interface, error) {
	var mu sync.Mutex
	clients := map[rules.ServiceAccount]dynamic.Interface{}
	return func(sa rules.ServiceAccount) (dynamic.Interface, error) {
		mu.Lock()
		defer mu.Unlock()
		if c, ok := clients[sa]; ok {
			return c, nil
		}
		if as := config.Impersonate.UserName; as != "" {
			// Kubernetes impersonates one identity per request: acting
			// as the account would drop --as, and the credential
			// underneath would be checked for impersonate instead of
			// the user kgen runs as, who may not.
			return nil, fmt.Errorf("kgen runs as %s (--as), and cannot act as %s on top of that: a request impersonates one identity; run kgen with %s's own credentials to use a rule's serviceAccount", as, sa.UserName(), as)
		}
		c := rest.CopyConfig(config)
		// The API server gives an impersonated ServiceAccount its groups
		// (system:serviceaccounts and system:serviceaccounts:NAMESPACE).
		c.Impersonate = rest.ImpersonationConfig{UserName: sa.UserName()}
		client, err := dynamic.NewForConfig(c)
		if err != nil {
			return nil, err
		}
		clients[sa] = client
		return client, nil
	}
}

// State returns the controller's state of a rule; with sharding, its
// parent counts are those of every live shard, and Shards says where else
// it does not run.
func (p progress) State(rule string) (controller.RuleState, bool) {
	st, ok := p.m.ctrl.State(rule)
	if !ok || p.m.shard == nil {
		return st, ok
	}
	for _, published := range p.m.shard.Published(annotationParents) {
		var counts map[string][2]int
		if json.Unmarshal([]byte(published), &counts) == nil {
			st.Parents += counts[rule][0]
			st.ReadyParents += counts[rule][1]
		}
	}
	for id, published := range p.m.shard.Published(annotationNotReady) {
		var notReady map[string][2]string
		if json.Unmarshal([]byte(published), &notReady) == nil {
			nr, ok := notReady[rule]
			if !ok {
				nr, ok = notReady[leftOut]
			}
			if ok {
				st.Shards = append(st.Shards, controller.ShardState{Shard: id, Reason: nr[0], Message: nr[1]})
			}
		}
	}
	slices.SortFunc(st.Shards, func(a, b controller.ShardState) int { return strings.Compare(a.Shard, b.Shard) })
	return st, true
}

const (
	// annotationParents is the annotation on a shard's Lease that holds
	// its parent counts per rule, as JSON: {"rule": [parents,
	// readyParents]}.
	annotationParents = "kgen.dev/parents"
	// annotationNotReady is the annotation on a shard's Lease that says
	// which rules do not run there, or whose caches have not synced, as
	// JSON: {"rule": [reason, message]}. The shard that writes a Rule's
	// status reports them: a replica that may not list a kind of the rule
	// keeps its parents waiting, and nothing else would say so.
	annotationNotReady = "kgen.dev/not-ready"
	// maxPublishedMessage bounds each message in annotationNotReady, and
	// maxNotReadyBytes the whole annotation (see notReadyAnnotation).
	maxPublishedMessage = 1024
	maxNotReadyBytes    = 32 << 10
)

// publishCounts returns what a shard publishes on its Lease: its parent
// counts of the rules of the rule set, and the rules that do not run
// here. Both annotations are always there: a Lease keeps an annotation
// no renewal sets.
func (m *Manager) publishCounts() map[string]string {
	counts := map[string][2]int{}
	notReady := map[string][2]string{}
	if m.rules != nil {
		for _, r := range m.rules.Rules() {
			st, ok := m.ctrl.State(r.Name)
			if !ok {
				continue
			}
			if st.Parents > 0 {
				counts[r.Name] = [2]int{st.Parents, st.ReadyParents}
			}
			if reason, msg := ruleset.NotReady(st); reason != "" {
				notReady[r.Name] = [2]string{reason, msg}
			}
		}
	}
	c, _ := json.Marshal(counts)
	return map[string]string{annotationParents: string(c), annotationNotReady: notReadyAnnotation(notReady)}
}

// notReadyAnnotation returns the JSON of annotationNotReady, within
// maxNotReadyBytes: a Lease's annotations hold 256 KiB in all, and a
// renewal the API server refuses loses the Lease. Each message is cut to
// maxPublishedMessage; when that is still too much (hundreds of rules
// waiting at once), the messages go and the reasons stay, and past that
// the rules that do not fit are left out, in name order (each replica's
// log says it all).
func notReadyAnnotation(notReady map[string][2]string) string {
	cut := map[string][2]string{}
	for name, nr := range notReady {
		if len(nr[1]) > maxPublishedMessage {
			nr[1] = strings.ToValidUTF8(nr[1][:maxPublishedMessage], "") + "…"
		}
		cut[name] = nr
	}
	if b, _ := json.Marshal(cut); len(b) <= maxNotReadyBytes {
		return string(b)
	}
	// The gravest first (Forbidden needs a person), then by name; room is
	// kept for the entry that says how many were left out.
	names := slices.SortedFunc(maps.Keys(cut), func(a, b string) int {
		return cmp.Or(ruleset.Gravity(cut[b][0])-ruleset.Gravity(cut[a][0]), strings.Compare(a, b))
	})
	reasons := map[string][2]string{}
	size, room := 2, 128
	for i, name := range names {
		entry, _ := json.Marshal(map[string][2]string{name: {cut[name][0], ""}})
		if size += len(entry) - 1; size > maxNotReadyBytes-room {
			reasons[leftOut] = [2]string{ruleset.ReasonWaiting, fmt.Sprintf("%d rules do not run there; its Lease holds the state of only some of them, its log says all", len(names)-i)}
			break
		}
		reasons[name] = [2]string{cut[name][0], ""}
	}
	b, _ := json.Marshal(reasons)
	return string(b)
}

// leftOut is the entry of annotationNotReady that stands for the rules
// left out of it: no rule is named "…". A reader takes every rule the
// annotation does not name as not running there, for that reason.
const leftOut = "…"

// writesRuleStatus says whether this shard writes a Rule object's status:
// the shard the ring gives the Rule does.
func (m *Manager) writesRuleStatus(rule string) bool {
	return m.shard.Owner(shard.Key(ruleset.RuleGVR.GroupResource(), "", rule)) == m.shard.ID()
}

// eventSpamKey is client-go's key of the events' rate limit, which lets
// each source record a burst of 25 events of one type about one object,
// then one every 5 minutes, with the event's reason added. kgen records a
// Warning per failing child on every retry: with client-go's key, four
// children refused on a parent's first retries spent its budget within
// seconds, and a failure of another kind that came next (DeleteFailed, a
// Conflict) was never recorded. Each reason now has its own budget; there
// are a dozen reasons, so the limit still holds.
func eventSpamKey(e *corev1.Event) string {
	return strings.Join([]string{e.Source.Component, e.Source.Host, e.InvolvedObject.Kind, e.InvolvedObject.Namespace,
		e.InvolvedObject.Name, string(e.InvolvedObject.UID), e.InvolvedObject.APIVersion, e.Type, e.Reason}, "")
}
