package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"kgen.dev/kgen/internal/controlplane"
	"kgen.dev/kgen/pkg/kinds"
	"kgen.dev/kgen/rules"
)

var (
	webappGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1alpha1", Resource: "webapps"}
	cmGVR     = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	deployGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	svcGVR    = schema.GroupVersionResource{Version: "v1", Resource: "services"}
	eventGVR  = schema.GroupVersionResource{Version: "v1", Resource: "events"}
)

type options struct {
	sizes       []int
	out         string
	steady      time.Duration
	loaders     int
	timeout     time.Duration
	profileSize int
	profileAPI  bool
	keep        bool
	floor       bool
	raw         bool
	repeat      int
	kgenArgs    []string
	kgenEnv     []string
	writeCosts  int
	pods        bool
	podsSize    int
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	o := options{}
	sizes := flag.String("sizes", "500,2000,5000", "comma-separated numbers of parents (empty: none, e.g. with -pods)")
	flag.StringVar(&o.out, "out", "bench/results", "folder for the results")
	flag.DurationVar(&o.steady, "steady", time.Minute, "how long to count steady-state requests")
	flag.IntVar(&o.loaders, "loaders", 16, "goroutines creating and patching objects")
	flag.DurationVar(&o.timeout, "timeout", 15*time.Minute, "limit for one phase")
	flag.IntVar(&o.profileSize, "profile", 2000, "N whose convergence is CPU-profiled (0: none)")
	flag.BoolVar(&o.profileAPI, "profile-apiserver", false, "also CPU-profile the API server in each phase of the profiled N")
	flag.IntVar(&o.repeat, "repeat", 1, "runs of each N; the report gives every run and, for more than one, the median and range of the ratios")
	flag.BoolVar(&o.raw, "raw", true, "also measure the raw client (off only to look into kgen alone: the ratios need it)")
	flag.BoolVar(&o.floor, "floor", true, "also measure a loader that makes kgen's writes directly (the floor for any controller with kgen's contract)")
	flag.BoolVar(&o.pods, "pods", false, "also measure kgen's steady state with running pods: kube-scheduler, the Deployment controllers and kwok (built by 'hack/tools.sh kube-scheduler kwok') run them")
	flag.IntVar(&o.podsSize, "pods-size", 200, "N of the -pods phase; its parents run 3 pods each")
	flag.IntVar(&o.writeCosts, "write-costs", 0, "instead of the phases, measure what N writes of each kind kgen could make cost the API server (0: off)")
	flag.BoolVar(&o.keep, "keep", false, "keep the working folder (control plane and kgen logs) and print its path")
	kgenEnv := flag.String("kgen-env", "", "extra environment for kgenctl run, as space-separated NAME=VALUE (for tuning)")
	replot := flag.Bool("replot", false, "only rewrite the report and plots from the results.json in -out (with -shards, those of -shards)")
	kgenArgs := flag.String("kgen-args", "", "extra flags for kgenctl run, space-separated (for tuning; the results are meant for the defaults)")
	shards := flag.String("shards", "", "comma-separated numbers of replicas to run with kgenctl run --shards (0: one without it), measured instead of the kgen/raw/floor comparison; results in bench/results/shards unless -out is given")
	flag.Parse()
	var replicas []int
	if *shards != "" {
		for _, s := range strings.Split(*shards, ",") {
			k, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || k < 0 {
				return fmt.Errorf("bad -shards %q", *shards)
			}
			replicas = append(replicas, k)
		}
		outSet := false
		flag.Visit(func(f *flag.Flag) { outSet = outSet || f.Name == "out" })
		if !outSet {
			o.out = filepath.Join(o.out, "shards")
		}
	}
	o.kgenArgs = strings.Fields(*kgenArgs)
	o.kgenEnv = strings.Fields(*kgenEnv)
	for _, s := range strings.FieldsFunc(*sizes, func(r rune) bool { return r == ',' }) {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return fmt.Errorf("bad -sizes %q", *sizes)
		}
		o.sizes = append(o.sizes, n)
	}
	if o.pods && o.podsSize <= 0 {
		return fmt.Errorf("bad -pods-size %d", o.podsSize)
	}
	if *replot {
		data, err := os.ReadFile(filepath.Join(o.out, "results.json"))
		if err != nil {
			return err
		}
		if len(replicas) > 0 {
			rep := &shardReport{}
			if err := json.Unmarshal(data, rep); err != nil {
				return err
			}
			return rep.write(o.out)
		}
		rep := &report{}
		if err := json.Unmarshal(data, rep); err != nil {
			return err
		}
		return rep.write(o.out)
	}
	ctx := context.Background()
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	bin, err := controlplane.BinDir(root)
	if err != nil {
		return err
	}
	if o.pods {
		// The same folder: hack/tools.sh builds these two only when named.
		if _, err := controlplane.BinDir(root, "kube-scheduler", "kwok"); err != nil {
			return err
		}
	}
	tmp, err := os.MkdirTemp("", "kgen-bench-")
	if err != nil {
		return err
	}
	if o.keep {
		logf("working folder: %s", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	kgenctl := filepath.Join(tmp, "kgenctl")
	if out, err := exec.Command("go", "build", "-o", kgenctl, "./cmd/kgenctl").CombinedOutput(); err != nil {
		return fmt.Errorf("build kgenctl: %v: %s", err, out)
	}
	b := &bench{opts: o, bin: bin, kgenctl: kgenctl, tmp: tmp}
	defer b.stopControlPlane()
	if err := b.freshControlPlane(ctx, false); err != nil {
		return err
	}
	if len(replicas) > 0 {
		rep, err := b.runShards(ctx, replicas)
		if err != nil {
			return err
		}
		return rep.write(o.out)
	}
	// Before the run, so the commit is that of the code measured.
	machine := b.machine(ctx)
	if o.writeCosts > 0 {
		costs, err := b.measureWriteCosts(ctx, o.writeCosts)
		if err != nil {
			return err
		}
		return writeCostsReport(o.out, costs, machine)
	}
	var results []*result
	for _, n := range o.sizes {
		for run := 1; run <= max(o.repeat, 1); run++ {
			r, err := b.measure(ctx, n, run)
			if err != nil {
				return fmt.Errorf("N=%d run %d: %w", n, run, err)
			}
			results = append(results, r)
			fmt.Println(r.summary())
		}
	}
	var pods *podsResult
	if o.pods {
		if pods, err = b.measurePods(ctx, o.podsSize); err != nil {
			return fmt.Errorf("pods, N=%d: %w", o.podsSize, err)
		}
		fmt.Println(pods.summary())
	}
	report := newReport(results, pods, machine)
	return report.write(o.out)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

type bench struct {
	opts    options
	bin     string // the control plane's binaries
	cp      *controlplane.ControlPlane
	started int // control planes started so far
	kgenctl string
	tmp     string

	dyn       dynamic.Interface // the loader: no client-side rate limit
	admin     *http.Client      // for the API server's /debug/pprof
	kube      kubernetes.Interface
	rule      *rules.Rule
	rulesFile string
	crd       *unstructured.Unstructured // the WebApp CRD
	scope     *kinds.Static              // for rendering offline
}

// freshControlPlane stops the running control plane, if any, and starts a
// new one, set up for a phase. Every phase runs on its own: in one
// long-lived control plane the API server's CPU time for the same work
// drifted by up to 30% from run to run, more than the differences measured.
// With pods, it also runs what makes a Deployment's pods run: the
// Deployment and ReplicaSet controllers, kube-scheduler and kwok.
func (b *bench) freshControlPlane(ctx context.Context, pods bool) error {
	b.stopControlPlane()
	b.started++
	logf("starting control plane %d", b.started)
	cfg := controlplane.Config{BinDir: b.bin, Dir: filepath.Join(b.tmp, fmt.Sprintf("cp-%d", b.started))}
	if pods {
		cfg.ControllerManager, cfg.Scheduler, cfg.Kwok = true, true, true
		// The node lifecycle controller removes the not-ready taint the API
		// server gives a new Node once kwok has made it ready.
		cfg.Controllers = append([]string{"deployment-controller", "replicaset-controller",
			"serviceaccount-controller", "node-lifecycle-controller"}, controlplane.DefaultControllers...)
		// At its default of 20 requests a second, kube-controller-manager
		// took most of the time to the steady state; the rollout's speed is
		// not what the phase measures.
		cfg.ControllerManagerArgs = []string{"--kube-api-qps=500", "--kube-api-burst=500"}
	}
	cp, err := controlplane.Start(ctx, cfg)
	if err != nil {
		return err
	}
	b.cp = cp
	return b.setup(ctx)
}

func (b *bench) stopControlPlane() {
	if b.cp == nil {
		return
	}
	_ = b.cp.Stop()
	if !b.opts.keep {
		_ = os.RemoveAll(b.cp.Dir)
	}
	b.cp = nil
}

func (b *bench) setup(ctx context.Context) error {
	loader, err := b.cp.UserConfig("bench-loader", "system:masters")
	if err != nil {
		return err
	}
	// A negative QPS turns client-go's rate limiter off: the loader is
	// limited only by the API server.
	loader.QPS, loader.Burst = -1, 0
	b.dyn = dynamic.NewForConfigOrDie(loader)
	if b.admin, err = rest.HTTPClientFor(loader); err != nil {
		return err
	}
	b.kube = kubernetes.NewForConfigOrDie(loader)
	crd := &apiextensionsv1.CustomResourceDefinition{}
	data, err := os.ReadFile("examples/webapp/crd.yaml")
	if err != nil {
		return err
	}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		return err
	}
	b.crd = &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &b.crd.Object); err != nil {
		return err
	}
	crds := apiextensions.NewForConfigOrDie(loader)
	if _, err := crds.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		return err
	}
	// The Rule kind too, as the chart installs it: without it, kgen (which
	// serves Rule objects by default) polls discovery for it every 5 s, and
	// those requests are not what a steady state costs in a real install.
	rule := &apiextensionsv1.CustomResourceDefinition{}
	if data, err = os.ReadFile("charts/kgen/crds/rules.kgen.dev.yaml"); err != nil {
		return err
	}
	if err := yaml.UnmarshalStrict(data, rule); err != nil {
		return err
	}
	if _, err := crds.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, rule, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := b.dyn.Resource(webappGVR).List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, nil
	}); err != nil {
		return fmt.Errorf("WebApp CRD not served: %w", err)
	}
	// The example rule without its namespace limit, so each phase can have a
	// namespace of its own.
	data, err = os.ReadFile("examples/webapp/rules.yaml")
	if err != nil {
		return err
	}
	text := strings.Replace(string(data), "    namespaces: [team-a]\n", "", 1)
	b.rulesFile = filepath.Join(b.tmp, "rules.yaml")
	if err := os.WriteFile(b.rulesFile, []byte(text), 0o644); err != nil {
		return err
	}
	loaded, err := rules.Load([]string{b.rulesFile}, rules.Options{})
	if err != nil {
		return err
	}
	b.rule = loaded[0]
	b.scope = kinds.NewStatic()
	if err := b.scope.AddCRD(b.crd); err != nil {
		return err
	}
	return b.warmUp(ctx)
}

// kgen is a running 'kgenctl run'.
type kgen struct {
	cmd     *exec.Cmd
	metrics string       // base URL of /metrics and /debug/pprof
	client  *http.Client // authenticated for them
	log     *os.File
	once    sync.Once
	// sampled holds the highest anonymous and file-backed RSS seen by
	// sampling /proc every rssEvery: the kernel keeps a peak of the
	// total only (VmHWM), and the RSS target needs the parts.
	mu       sync.Mutex
	peakAnon int64
	peakFile int64
	done     chan struct{}
}

// rssEvery is how often the bench samples kgen's RSS by kind.
const rssEvery = 100 * time.Millisecond

// startKgen starts kgenctl run with its log in the working folder under
// logName.
func (b *bench) startKgen(ctx context.Context, logName string) (*kgen, error) {
	return b.startKgenNamed(ctx, strings.TrimSuffix(logName, ".log"))
}

// startKgenNamed starts 'kgenctl run' logging to name.log, with extra flags
// beyond the bench's, and waits until it is ready.
func (b *bench) startKgenNamed(ctx context.Context, name string, extra ...string) (*kgen, error) {
	kubeconfig, err := b.cp.WriteKubeconfig("kgen.kubeconfig", "kgen", "system:masters")
	if err != nil {
		return nil, err
	}
	metrics, health := freeAddr(), freeAddr()
	log, err := os.Create(filepath.Join(b.tmp, name+".log"))
	if err != nil {
		return nil, err
	}
	// Default flags, as users run kgen; only addresses and profiling differ.
	// Profiling needs secure metrics serving, as the chart runs kgen.
	args := append([]string{"run", "--rules", b.rulesFile, "--kubeconfig", kubeconfig,
		"--metrics-bind-address", metrics, "--health-probe-bind-address", health, "--metrics-secure", "--profiling"}, b.opts.kgenArgs...)
	args = append(args, extra...)
	client, err := b.metricsClient()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(b.kgenctl, args...)
	cmd.Env = append(os.Environ(), b.opts.kgenEnv...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	k := &kgen{cmd: cmd, metrics: "https://" + metrics, client: client, log: log, done: make(chan struct{})}
	go k.sampleRSS()
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		resp, err := http.Get("http://" + health + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		k.stop()
		return nil, fmt.Errorf("kgen not ready: %w", err)
	}
	// Ready does not wait for the metrics port to know the cluster's client
	// CA (it loads it in the background): until it does, a scrape with the
	// bench's client certificate gets 401.
	var scrapeErr error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, scrapeErr = k.scrape()
		return scrapeErr == nil, nil
	})
	if err != nil {
		k.stop()
		return nil, fmt.Errorf("kgen's metrics: %w: %w", scrapeErr, err)
	}
	return k, nil
}

// stop ends kgen with SIGTERM; it is safe to call more than once.
func (k *kgen) stop() {
	k.once.Do(func() {
		close(k.done)
		_ = k.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = k.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = k.cmd.Process.Kill()
			<-done
		}
		k.log.Close()
	})
}

// memory returns kgen's peak and current RSS in bytes, from /proc.
func (k *kgen) memory() (peak, current int64, err error) {
	fields, err := procStatus(k.cmd.Process.Pid)
	if err != nil {
		return 0, 0, err
	}
	return fields["VmHWM:"], fields["VmRSS:"], nil
}

// sampleRSS keeps the highest RssAnon and RssFile of kgen until it stops.
func (k *kgen) sampleRSS() {
	tick := time.NewTicker(rssEvery)
	defer tick.Stop()
	for {
		select {
		case <-k.done:
			return
		case <-tick.C:
		}
		fields, err := procStatus(k.cmd.Process.Pid)
		if err != nil {
			continue
		}
		k.mu.Lock()
		k.peakAnon, k.peakFile = max(k.peakAnon, fields["RssAnon:"]), max(k.peakFile, fields["RssFile:"])
		k.mu.Unlock()
	}
}

// sampledRSS returns the highest anonymous and file-backed RSS sampled.
func (k *kgen) sampledRSS() (anon, file int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.peakAnon, k.peakFile
}

// procStatus returns the sizes of /proc/PID/status, in bytes, by their
// name with its colon.
func procStatus(pid int) (map[string]int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 3 && fields[2] == "kB" {
			kb, _ := strconv.ParseInt(fields[1], 10, 64)
			out[fields[0]] = kb << 10
		}
	}
	return out, nil
}

// heapAfterGC forces a garbage collection in kgen (pprof's heap endpoint
// does with gc=1) and returns the bytes of live heap objects after it.
func (k *kgen) heapAfterGC() (int64, error) {
	resp, err := k.client.Get(k.metrics + "/debug/pprof/heap?gc=1")
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	m, err := k.scrape()
	if err != nil {
		return 0, err
	}
	logf("after GC: heap objects %s, heap spans in use %s", mib(int64(m.value("go_memstats_heap_alloc_bytes", nil))), mib(int64(m.value("go_memstats_heap_inuse_bytes", nil))))
	return int64(m.value("go_memstats_heap_alloc_bytes", nil)), nil
}

// saveHeapProfile writes kgen's heap profile to path.
func (k *kgen) saveHeapProfile(path string) error {
	resp, err := k.client.Get(k.metrics + "/debug/pprof/heap")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// profile writes a CPU profile of kgen over d to path, in the background.
func (k *kgen) profile(path string, d time.Duration) <-chan error {
	return cpuProfile(k.client, k.metrics, path, d)
}

// scrape reads kgen's /metrics.
func (k *kgen) scrape() (metrics, error) { return scrape(k.client, k.metrics) }

// metricsClient returns a client for kgen's secure metrics port: a client
// certificate of a system:masters user, which kgen authenticates through
// the cluster's client CA; kgen's own certificate is self-signed.
func (b *bench) metricsClient() (*http.Client, error) {
	config, err := b.cp.UserConfig("bench-scraper", "system:masters")
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(config.CertData, config.KeyData)
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		InsecureSkipVerify: true, // kgen's self-signed certificate, on loopback
		Certificates:       []tls.Certificate{cert},
	}}}, nil
}

// profileAPIServer writes a CPU profile of the API server over d to path,
// in the background, if -profile-apiserver is set and n is the profiled N
// (first run only);
// otherwise it returns nil.
func (b *bench) profileAPIServer(n, run int, phase string, d time.Duration) <-chan error {
	if !b.opts.profileAPI || n != b.opts.profileSize || run != 1 {
		return nil
	}
	return cpuProfile(b.admin, b.cp.URL, filepath.Join(b.opts.out, fmt.Sprintf("apiserver-cpu-%s-%d.pprof", phase, n)), d)
}

// cpuProfile fetches a CPU profile over d from the pprof handlers at base
// and writes it to path, in the background.
func cpuProfile(client *http.Client, base, path string, d time.Duration) <-chan error {
	done := make(chan error, 1)
	go func() {
		resp, err := client.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, int(d.Seconds())))
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		if _, err := buf.ReadFrom(resp.Body); err != nil {
			done <- err
			return
		}
		done <- os.WriteFile(path, buf.Bytes(), 0o644)
	}()
	return done
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// machine describes where the benchmark ran.
func (b *bench) machine(ctx context.Context) map[string]string {
	m := map[string]string{"cpus": strconv.Itoa(runtime.NumCPU()), "go": runtime.Version()}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(line, "model name") {
				m["cpu"] = strings.TrimSpace(strings.SplitN(line, ":", 2)[1])
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		fields := strings.Fields(strings.SplitN(string(data), "\n", 2)[0])
		if len(fields) >= 2 {
			kb, _ := strconv.ParseInt(fields[1], 10, 64)
			m["memory"] = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
		}
	}
	if v, err := b.kube.Discovery().ServerVersion(); err == nil {
		m["kube-apiserver"] = v.GitVersion
	}
	if out, err := exec.CommandContext(ctx, "git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		m["commit"] = strings.TrimSpace(string(out))
		if st, _ := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output(); len(st) > 0 {
			m["commit"] += " (with uncommitted changes)"
		}
	}
	m["date"] = time.Now().UTC().Format(time.RFC3339)
	if len(b.opts.kgenArgs) > 0 {
		m["kgen flags beyond the defaults"] = strings.Join(b.opts.kgenArgs, " ")
	}
	if len(b.opts.kgenEnv) > 0 {
		m["kgen environment"] = strings.Join(b.opts.kgenEnv, " ")
	}
	return m
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
