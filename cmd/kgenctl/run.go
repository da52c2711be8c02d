package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"kgen.dev/kgen/internal/version"
	"kgen.dev/kgen/pkg/controller"
	"kgen.dev/kgen/pkg/manager"
	"kgen.dev/kgen/pkg/metricsserver"
	"kgen.dev/kgen/pkg/reconcile"
	"kgen.dev/kgen/pkg/shard"
)

type runOptions struct {
	rules         []string
	ruleObjects   bool
	workers       int
	qps           float32
	burst         int
	metricsAddr   string
	metricsSecure bool
	metricsCerts  string
	healthAddr    string
	leaderElect   bool
	leaderElectNS string
	leaderElectID string
	stateName     string
	leaseDuration time.Duration
	shards        bool
	shardID       string
	logFormat     string
	verbosity     int
	profiling     bool
	events        string
	manageCRDs    bool
}

func newRunCmd(errOut io.Writer) *cobra.Command {
	o := &runOptions{}
	var kube *kubeFlags // kubectl's connection flags, added below
	cmd := &cobra.Command{
		Use:   "run [--rules PATH ...] [--rule-objects=false]",
		Short: "Run the controller until SIGINT or SIGTERM",
		Long: `Run the controller: watch the rules' parents and children and keep the children
equal to the templates with server-side apply.

The rules are the rules files given with --rules and, unless
--rule-objects=false, the cluster's Rule objects (rules.kgen.dev). Both are
followed live: a changed file takes effect within seconds (a ConfigMap
volume's update included), a Rule object at once; an invalid new version is
reported and the previous one keeps running. A Rule object whose name a file
rule has is shadowed by the file.

The rules files are loaded and checked first; invalid rules exit non-zero
before kgen contacts the cluster. Rules whose kinds are not served yet wait
(see the kgen_rule_waiting metric and the Rule's status) and start once
their CRDs appear. A rule whose parent kind is a CRD starts only once its
expressions fit the CRD's schema (as "kgenctl validate --crd" checks);
with --manage-crds, kgen creates and updates the CRD of every rule that
describes its parent kind with spec.parent.schema.

kgen records, in the ConfigMap kgen-state of its namespace
(--leader-elect-namespace), where each rule may have made children, so
that children of kinds a rule no longer has are pruned, also after a
restart.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), errOut, kube)
		},
	}
	kube = addKubeFlags(cmd)
	cmd.Flags().Lookup("namespace").Usage = "the default of --leader-elect-namespace; kgen still watches every namespace its rules select"
	f := cmd.Flags()
	f.StringArrayVar(&o.rules, "rules", nil, "rules file or directory of *.yaml/*.yml (repeatable); read again when it changes")
	f.BoolVar(&o.ruleObjects, "rule-objects", true, "also serve the cluster's Rule objects (rules.kgen.dev)")
	f.IntVar(&o.workers, "workers", controller.DefaultWorkers, "parents reconciled at once")
	f.Float32Var(&o.qps, "kube-api-qps", manager.DefaultQPS, "steady requests per second to the API server")
	f.IntVar(&o.burst, "kube-api-burst", manager.DefaultBurst, "request burst to the API server")
	f.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "address of the Prometheus /metrics endpoint; 0 turns it off")
	f.BoolVar(&o.metricsSecure, "metrics-secure", false, "serve /metrics over HTTPS, only to callers the API server authenticates (token or client certificate) and authorizes (get on the non-resource URL /metrics)")
	f.StringVar(&o.metricsCerts, "metrics-cert-dir", "", "folder with tls.crt and tls.key for --metrics-secure, reloaded when they change (default: a self-signed certificate made at start)")
	f.StringVar(&o.healthAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz; 0 turns it off")
	f.BoolVar(&o.leaderElect, "leader-elect", false, "run only while holding a coordination.k8s.io Lease, so several replicas can run")
	f.StringVar(&o.leaderElectNS, "leader-elect-namespace", "", "kgen's namespace: of the Lease and of the ConfigMap kgen-state (default: -n/--namespace, else the kubeconfig context's namespace, else the pod's in a cluster, else default)")
	f.StringVar(&o.leaderElectID, "leader-elect-id", manager.DefaultLeaseName, "name of the Lease")
	f.StringVar(&o.stateName, "state-configmap", controller.DefaultRecordName, "name of the ConfigMap, in kgen's namespace, where kgen records where each rule made children and watched parents; two kgens in one namespace need one each")
	f.DurationVar(&o.leaseDuration, "leader-elect-lease-duration", manager.DefaultLeaseDuration, "how long a Lease lasts without renewal")
	f.BoolVar(&o.shards, "shards", false, "spread the parents over every replica run with --shards, each holding the Lease kgen-shard-<id> in --leader-elect-namespace (excludes --leader-elect)")
	f.StringVar(&o.shardID, "shard-id", "", "this replica's shard id with --shards: the value of the kgen.dev/shard label on its parents and children (default: $POD_NAME, else the host name)")
	f.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	f.IntVarP(&o.verbosity, "v", "v", 0, "log verbosity (2 logs every child write)")
	f.StringVar(&o.events, "events", string(reconcile.EventsNotable), "which Events to record on parents: notable (Warnings, and Normal events for drift repairs, deletions and adoptions), all (also Created and Updated), warnings, or none")
	f.BoolVar(&o.profiling, "profiling", false, "serve Go's /debug/pprof endpoints on the metrics address; needs --metrics-secure")
	f.BoolVar(&o.manageCRDs, "manage-crds", false, "create and update, with server-side apply, the CustomResourceDefinition of every rule with spec.parent.schema before the rule starts (needs create and patch on those CRDs: kgenctl rbac --manage-crds)")
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
	if o.profiling && !o.metricsSecure {
		return errors.New("--profiling needs --metrics-secure: /debug/pprof is never served without authentication and authorization")
	}
	if o.metricsCerts != "" && !o.metricsSecure {
		return errors.New("--metrics-cert-dir needs --metrics-secure: without it /metrics is plain HTTP")
	}
	if o.leaderElect && o.shards {
		return errors.New("--leader-elect and --shards are exclusive: with --shards every replica works, each on its own parents; with --leader-elect one replica works")
	}
	if o.shardID != "" && !o.shards {
		return errors.New("--shard-id needs --shards")
	}
	if o.shards {
		if o.shardID == "" {
			if o.shardID = os.Getenv("POD_NAME"); o.shardID == "" {
				o.shardID, _ = os.Hostname()
			}
		}
		if err := shard.ValidateID(o.shardID); err != nil {
			return fmt.Errorf("--shard-id: %w", err)
		}
	}
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGCPercent)
	}

	events, err := reconcile.ParseEventPolicy(o.events)
	if err != nil {
		return err
	}
	if len(o.rules) == 0 && !o.ruleObjects {
		return errors.New("no rules: give --rules, or serve Rule objects (--rule-objects)")
	}
	config, err := kube.restConfig()
	if err != nil {
		return err
	}
	if o.leaderElectNS == "" {
		if o.leaderElectNS, err = kube.namespace(); err != nil {
			return err
		}
	}
	// In a pod (the chart passes POD_NAME) kgen is named after it in its
	// Lease and its User-Agent, so the Lease and the API server's audit
	// log say which replica did what.
	var userAgent, identity string
	if pod := os.Getenv("POD_NAME"); pod != "" {
		userAgent = "kgen/" + version.Version + " (" + pod + ")"
		identity = pod + "_" + uuid.NewString()
	}
	m, err := manager.New(manager.Options{
		Config: config, RulePaths: o.rules, RuleObjects: o.ruleObjects, Workers: o.workers, QPS: o.qps, Burst: o.burst, UserAgent: userAgent,
		Metrics: metricsserver.Options{
			BindAddress: o.metricsAddr, Secure: o.metricsSecure, CertDir: o.metricsCerts, Profiling: o.profiling,
		},
		HealthAddr: o.healthAddr, Events: events, ManageCRDs: o.manageCRDs, StateName: o.stateName,
		LeaderElection: manager.LeaderElection{
			Enabled: o.leaderElect, Namespace: o.leaderElectNS, Name: o.leaderElectID, LeaseDuration: o.leaseDuration, Identity: identity,
		},
		Sharding: manager.Sharding{Enabled: o.shards, ID: o.shardID, Namespace: o.leaderElectNS, LeaseDuration: o.leaseDuration},
	})
	if err != nil {
		return err
	}
	return m.Run(ctx)
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
