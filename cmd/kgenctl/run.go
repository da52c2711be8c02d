package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"kgen.dev/kgen/internal/version"
	"kgen.dev/kgen/pkg/controller"
	"kgen.dev/kgen/pkg/mapper"
	"kgen.dev/kgen/pkg/watch"
	"kgen.dev/kgen/rules"
)

// Defaults of kgenctl run's client rate limits, chosen by measurement
// (bench/): converging 500 WebApps took 10.3 s at 200 QPS and 6.6 s at 1000
// QPS, the same as with no client-side limit, because the API server is
// then the bottleneck. client-go's 5/10 would make kgen, not the server, the
// limit. The server's priority and fairness still protects it.
const (
	defaultQPS   = 1000
	defaultBurst = 2000
)

type runOptions struct {
	rules         []string
	workers       int
	qps           float32
	burst         int
	metricsAddr   string
	healthAddr    string
	leaderElect   bool
	leaderElectNS string
	leaderElectID string
	leaseDuration time.Duration
	logFormat     string
	verbosity     int
	profiling     bool
}

func newRunCmd(errOut io.Writer, kube *kubeFlags) *cobra.Command {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run --rules PATH [--rules PATH ...]",
		Short: "Run the controller for the given rules until SIGINT or SIGTERM",
		Long: `Run the controller: watch the rules' parents and children and keep the children
equal to the templates with server-side apply.

The rules are loaded and checked first; invalid rules exit non-zero before
kgen contacts the cluster. Rules whose kinds are not served yet wait (see
/readyz and the kgen_rule_waiting metric) and start once their CRDs appear.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), errOut, kube)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.rules, "rules", nil, "rules file or directory of *.yaml/*.yml (repeatable)")
	f.IntVar(&o.workers, "workers", controller.DefaultWorkers, "parents reconciled at once")
	f.Float32Var(&o.qps, "kube-api-qps", defaultQPS, "steady requests per second to the API server")
	f.IntVar(&o.burst, "kube-api-burst", defaultBurst, "request burst to the API server")
	f.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "address of the Prometheus /metrics endpoint; 0 turns it off")
	f.StringVar(&o.healthAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz; 0 turns it off")
	f.BoolVar(&o.leaderElect, "leader-elect", false, "run only while holding a coordination.k8s.io Lease, so several replicas can run")
	f.StringVar(&o.leaderElectNS, "leader-elect-namespace", "", "namespace of the Lease (default: the pod's namespace in-cluster, else default)")
	f.StringVar(&o.leaderElectID, "leader-elect-id", "kgen", "name of the Lease")
	f.DurationVar(&o.leaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long a Lease lasts without renewal")
	f.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	f.IntVarP(&o.verbosity, "v", "v", 0, "log verbosity (2 logs every child write)")
	f.BoolVar(&o.profiling, "profiling", false, "serve Go's /debug/pprof endpoints on the metrics address")
	_ = cmd.MarkFlagRequired("rules")
	return cmd
}

// defaultGCPercent is kgen's GOGC unless the environment sets one. kgen's
// memory is mostly its informer caches, which live as long as it does; with
// Go's default of 100 the heap grows to twice them before a collection.
// Measured by make bench at 5000 parents (20,000 cached objects): peak RSS
// fell from 258 to 153 MiB, and convergence took 71.7 s against 70.5 s,
// within the run-to-run spread. GOMEMLIMIT works as usual on top of it.
const defaultGCPercent = 50

func (o *runOptions) run(ctx context.Context, errOut io.Writer, kube *kubeFlags) error {
	logger, err := newLogger(errOut, o.logFormat, o.verbosity)
	if err != nil {
		return err
	}
	ctx = klog.NewContext(ctx, logger)
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGCPercent)
	}

	// Rules first: bad rules never reach the cluster.
	loaded, err := rules.Load(o.rules, rules.Options{})
	if err != nil {
		return err
	}
	config, err := kube.restConfig()
	if err != nil {
		return err
	}
	config.QPS, config.Burst = o.qps, o.burst
	config.UserAgent = "kgen/" + version.Version
	kubeClient, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	dynClient, err := dynamic.NewForConfig(config)
	if err != nil {
		return err
	}
	restClient, err := watch.NewRESTClient(config)
	if err != nil {
		return err
	}
	m := mapper.New(kubeClient.Discovery())

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := controller.NewMetrics(reg)
	controller.RegisterGlobalMetrics(reg, metrics)

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kubeClient.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kgen"})

	ctrl := controller.New(controller.Config{
		Rules: loaded, Client: dynClient, REST: restClient, Mapper: m, Recorder: recorder, Workers: o.workers, Metrics: metrics,
	})

	// readiness: nil when ready. Before the controller runs it is not;
	// a replica waiting for the lease is ready as a standby.
	var state atomic.Value
	state.Store("starting")
	ready := func() error {
		switch s := state.Load().(string); s {
		case "running":
			return ctrl.Ready()
		case "standby":
			return nil
		default:
			return errors.New(s)
		}
	}
	var servers sync.WaitGroup
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		stopServing()
		servers.Wait()
	}()
	if err := serve(serveCtx, &servers, o.metricsAddr, metricsMux(reg, o.profiling)); err != nil {
		return err
	}
	if err := serve(serveCtx, &servers, o.healthAddr, healthMux(ready)); err != nil {
		return err
	}

	runController := func(ctx context.Context) {
		state.Store("running")
		if err := ctrl.Run(ctx); err != nil {
			logger.Error(err, "Controller failed")
		}
	}
	if !o.leaderElect {
		runController(ctx)
		return nil
	}
	return o.runWithLeaderElection(ctx, kubeClient, &state, runController)
}

func (o *runOptions) runWithLeaderElection(ctx context.Context, client kubernetes.Interface, state *atomic.Value, run func(context.Context)) error {
	logger := klog.FromContext(ctx)
	ns := o.leaderElectNS
	if ns == "" {
		ns = "default"
		if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
			ns = strings.TrimSpace(string(b))
		}
	}
	host, _ := os.Hostname()
	id := host + "_" + uuid.NewString()
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: o.leaderElectID},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	state.Store("standby")
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
		LeaseDuration:   o.leaseDuration,
		RenewDeadline:   o.leaseDuration * 2 / 3,
		RetryPeriod:     o.leaseDuration / 7,
		ReleaseOnCancel: true,
		Name:            o.leaderElectID,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leading context.Context) {
				started.Store(true)
				defer close(ran)
				logger.Info("Became leader", "lease", ns+"/"+o.leaderElectID, "identity", id)
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

func metricsMux(reg *prometheus.Registry, profiling bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
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

// newLogger returns the logger for kgenctl run, writing text (klog's
// format) or JSON, and routes client-go's own klog output to it.
func newLogger(w io.Writer, format string, verbosity int) (logr.Logger, error) {
	setKlogVerbosity(verbosity)
	switch format {
	case "json":
		h := slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.Level(-verbosity)})
		logger := logr.FromSlogHandler(h)
		klog.SetLogger(logger)
		return logger, nil
	case "text", "":
		// klog writes text to standard error, as w is for kgenctl.
		return klog.Background(), nil
	default:
		return logr.Logger{}, fmt.Errorf("unknown --log-format %q: use text or json", format)
	}
}
