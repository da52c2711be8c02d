package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// DefaultControllers are the kube-controller-manager controllers started when
// Config.Controllers is empty: enough for ownerReference cascades and
// namespace deletion, and nothing that would create pods.
var DefaultControllers = []string{"garbage-collector-controller", "namespace-controller"}

// AdminUser is the user name of the admin credentials; it is in system:masters.
const AdminUser = "kgen-admin"

// Config says how to start a control plane. The zero value of every field
// but BinDir is sensible.
type Config struct {
	// BinDir holds etcd, kube-apiserver and kube-controller-manager.
	BinDir string
	// Dir is the working folder for data, certificates, logs and the
	// kubeconfig. Empty means a new temporary folder, removed by Stop.
	Dir string
	// ControllerManager starts kube-controller-manager too.
	ControllerManager bool
	// Controllers are the controllers kube-controller-manager runs;
	// DefaultControllers when empty.
	Controllers []string
	// ControllerManagerArgs are extra kube-controller-manager flags, such
	// as "--kube-api-qps=500".
	ControllerManagerArgs []string
	// Scheduler starts kube-scheduler too, which binds pods to nodes.
	Scheduler bool
	// Kwok starts kwok (sigs.k8s.io/kwok) with the stages in
	// BinDir/kwok-stages.yaml. It plays the kubelet of every Node annotated
	// KwokNodeAnnotation: it keeps the Node ready and runs the pods bound to
	// it, without containers. KwokNode makes such a Node.
	Kwok bool
	// AuditPolicy, when set, is an audit.k8s.io Policy document; the API
	// server then writes its audit log to ControlPlane.AuditLog.
	AuditPolicy []byte
	// APIServerArgs are extra kube-apiserver flags, such as "--v=2".
	APIServerArgs []string
	// StartTimeout bounds how long Start waits for the API server to be
	// ready; a minute when zero.
	StartTimeout time.Duration
}

// ControlPlane is a running local control plane.
type ControlPlane struct {
	// Dir is the working folder.
	Dir string
	// Kubeconfig is the path of a kubeconfig file for the admin user.
	Kubeconfig string
	// AuditLog is the path of the audit log, if Config.AuditPolicy was set.
	AuditLog string
	// URL is the API server's address.
	URL string

	cfg       Config
	ca        *authority
	removeDir bool
	procs     []*process // in start order; stopped in reverse
}

type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  *os.File
}

// Start starts etcd and kube-apiserver (and kube-controller-manager if asked)
// and returns once the API server reports ready. On error, whatever was
// started is stopped again.
func Start(ctx context.Context, cfg Config) (_ *ControlPlane, err error) {
	need := []string{"etcd", "kube-apiserver", "kube-controller-manager"}
	if cfg.Scheduler {
		need = append(need, "kube-scheduler")
	}
	if cfg.Kwok {
		need = append(need, "kwok", kwokStages)
	}
	for _, bin := range need {
		if _, err := os.Stat(filepath.Join(cfg.BinDir, bin)); err != nil {
			return nil, fmt.Errorf("control plane binary %s: %w (run 'hack/tools.sh %s' to build it)", bin, err, strings.TrimSuffix(bin, "-stages.yaml"))
		}
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = time.Minute
	}
	cp := &ControlPlane{Dir: cfg.Dir, cfg: cfg}
	if cp.Dir == "" {
		if cp.Dir, err = os.MkdirTemp("", "kgen-controlplane-"); err != nil {
			return nil, err
		}
		cp.removeDir = true
	} else if err := os.MkdirAll(cp.Dir, 0o755); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, cp.Stop())
		}
	}()
	if cp.ca, err = newAuthority(); err != nil {
		return nil, fmt.Errorf("certificate authority: %w", err)
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	etcdClient, etcdPeer, apiPort := ports[0], ports[1], ports[2]
	cp.URL = "https://127.0.0.1:" + strconv.Itoa(apiPort)

	if err := cp.startEtcd(etcdClient, etcdPeer); err != nil {
		return nil, err
	}
	if err := cp.startAPIServer(ctx, etcdClient, apiPort); err != nil {
		return nil, err
	}
	if cfg.ControllerManager {
		if err := cp.startControllerManager(); err != nil {
			return nil, err
		}
	}
	if cfg.Scheduler {
		if err := cp.startScheduler(); err != nil {
			return nil, err
		}
	}
	if cfg.Kwok {
		if err := cp.startKwok(); err != nil {
			return nil, err
		}
	}
	return cp, nil
}

func (cp *ControlPlane) path(name string) string { return filepath.Join(cp.Dir, name) }

func (cp *ControlPlane) startEtcd(clientPort, peerPort int) error {
	client := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peer := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	_, err := cp.run("etcd",
		"--name=default",
		"--data-dir="+cp.path("etcd"),
		"--listen-client-urls="+client,
		"--advertise-client-urls="+client,
		"--listen-peer-urls="+peer,
		"--initial-advertise-peer-urls="+peer,
		"--initial-cluster=default="+peer,
		// Tests and benchmarks keep no data worth an fsync; the API
		// server's own limits, not the disk, should be what is measured.
		"--unsafe-no-fsync=true",
		"--quota-backend-bytes=8589934592",
		"--log-level=warn",
	)
	return err
}

func (cp *ControlPlane) startAPIServer(ctx context.Context, etcdPort, port int) error {
	serverCert, serverKey, err := cp.ca.issue("kube-apiserver", nil,
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}, true)
	if err != nil {
		return err
	}
	if err := writeFiles(cp.Dir, map[string][]byte{
		"ca.crt": cp.ca.certPEM, "apiserver.crt": serverCert, "apiserver.key": serverKey,
	}); err != nil {
		return err
	}
	if err := writeServiceAccountKey(cp.path("sa.key")); err != nil {
		return err
	}
	args := []string{
		"--etcd-servers=http://127.0.0.1:" + strconv.Itoa(etcdPort),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + cp.path("apiserver-certs"),
		"--tls-cert-file=" + cp.path("apiserver.crt"),
		"--tls-private-key-file=" + cp.path("apiserver.key"),
		"--client-ca-file=" + cp.path("ca.crt"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + cp.path("sa.key"),
		"--service-account-signing-key-file=" + cp.path("sa.key"),
		// kubeadm's default: room for the benchmark's thousands of Services.
		"--service-cluster-ip-range=10.96.0.0/12",
		"--allow-privileged=true",
		"--enable-priority-and-fairness=true",
	}
	if len(cp.cfg.AuditPolicy) > 0 {
		cp.AuditLog = cp.path("audit.log")
		if err := os.WriteFile(cp.path("audit-policy.yaml"), cp.cfg.AuditPolicy, 0o600); err != nil {
			return err
		}
		args = append(args,
			"--audit-policy-file="+cp.path("audit-policy.yaml"),
			"--audit-log-path="+cp.AuditLog,
			"--audit-log-format=json",
			"--audit-log-mode=blocking",
		)
	}
	args = append(args, cp.cfg.APIServerArgs...)
	proc, err := cp.run("kube-apiserver", args...)
	if err != nil {
		return err
	}
	if cp.Kubeconfig, err = cp.WriteKubeconfig("kubeconfig", AdminUser, "system:masters"); err != nil {
		return err
	}
	return cp.waitReady(ctx, proc)
}

// waitReady polls /readyz until the API server says ok, it exits, or the
// start timeout passes.
func (cp *ControlPlane) waitReady(ctx context.Context, proc *process) error {
	config, err := cp.RESTConfig()
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cp.cfg.StartTimeout)
	defer cancel()
	var last error
	for {
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && bytes.Equal(bytes.TrimSpace(body), []byte("ok")) {
			return nil
		}
		last = err
		select {
		case <-proc.done:
			return fmt.Errorf("kube-apiserver exited: %v; its log: %s", proc.err, tail(cp.path("kube-apiserver.log")))
		case <-ctx.Done():
			return fmt.Errorf("kube-apiserver not ready after %s: %v; its log: %s", cp.cfg.StartTimeout, last, tail(cp.path("kube-apiserver.log")))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (cp *ControlPlane) startControllerManager() error {
	// Real clusters give each controller its own service account; here one
	// identity with every right keeps the set-up small.
	kubeconfig, err := cp.WriteKubeconfig("controller-manager.kubeconfig", "system:kube-controller-manager", "system:masters")
	if err != nil {
		return err
	}
	controllers := cp.cfg.Controllers
	if len(controllers) == 0 {
		controllers = DefaultControllers
	}
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--controllers=" + strings.Join(controllers, ","),
		"--leader-elect=false",
		"--secure-port=0",
		"--service-account-private-key-file=" + cp.path("sa.key"),
		"--root-ca-file=" + cp.path("ca.crt"),
	}
	_, err = cp.run("kube-controller-manager", append(args, cp.cfg.ControllerManagerArgs...)...)
	return err
}

func (cp *ControlPlane) startScheduler() error {
	kubeconfig, err := cp.WriteKubeconfig("scheduler.kubeconfig", "system:kube-scheduler", "system:masters")
	if err != nil {
		return err
	}
	_, err = cp.run("kube-scheduler",
		"--kubeconfig="+kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
	)
	return err
}

// kwokStages is the file in BinDir with the stages kwok plays; hack/tools.sh
// writes it from kwok's module: the ones kwokctl uses by default.
const kwokStages = "kwok-stages.yaml"

// KwokNodeAnnotation marks the Nodes that kwok plays the kubelet of; its
// value is "fake".
const KwokNodeAnnotation = "kwok.x-k8s.io/node"

func (cp *ControlPlane) startKwok() error {
	kubeconfig, err := cp.WriteKubeconfig("kwok.kubeconfig", "kwok", "system:masters")
	if err != nil {
		return err
	}
	_, err = cp.run("kwok",
		"--kubeconfig="+kubeconfig,
		"--config="+filepath.Join(cp.cfg.BinDir, kwokStages),
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector="+KwokNodeAnnotation+"=fake",
		// Room for a pod address each: the default /24 has 254.
		"--cidr=10.0.0.0/16",
		// As kwokctl: the heartbeat stage renews a Lease, as a kubelet does.
		"--node-lease-duration-seconds=40",
	)
	return err
}

// KwokNode returns a Node for kwok to play, ready for pods pods (none of
// them requests more than the Node's 1000 CPUs and 1 TiB), with no taint.
func KwokNode(name string, pods int) *corev1.Node {
	resources := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("1000"),
		corev1.ResourceMemory: resource.MustParse("1Ti"),
		corev1.ResourcePods:   *resource.NewQuantity(int64(pods), resource.DecimalSI),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{corev1.LabelHostname: name, corev1.LabelOSStable: "linux"},
			Annotations: map[string]string{KwokNodeAnnotation: "fake"},
		},
		Status: corev1.NodeStatus{Capacity: resources, Allocatable: resources},
	}
}

// run starts one binary with its output in a log file in Dir.
func (cp *ControlPlane) run(name string, args ...string) (*process, error) {
	log, err := os.Create(cp.path(name + ".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(cp.cfg.BinDir, name), args...)
	cmd.Stdout, cmd.Stderr = log, log
	// The control plane must not outlive the test or program that started
	// it, even when that one is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{}), log: log}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	cp.procs = append(cp.procs, p)
	return p, nil
}

// Stop stops every process, the last started first, and removes the working
// folder if Start made it.
func (cp *ControlPlane) Stop() error {
	var errs []error
	for i := len(cp.procs) - 1; i >= 0; i-- {
		p := cp.procs[i]
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		p.log.Close()
	}
	cp.procs = nil
	if cp.removeDir {
		errs = append(errs, os.RemoveAll(cp.Dir))
	}
	return errors.Join(errs...)
}

// PIDs returns the process id of each running binary by name ("etcd",
// "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"),
// for measuring them.
func (cp *ControlPlane) PIDs() map[string]int {
	pids := map[string]int{}
	for _, p := range cp.procs {
		pids[p.name] = p.cmd.Process.Pid
	}
	return pids
}

// RESTConfig returns a client configuration for the admin user.
func (cp *ControlPlane) RESTConfig() (*rest.Config, error) {
	return clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
}

// CAData returns the PEM certificate of the authority that signed the API
// server's serving certificate, for clients that authenticate otherwise
// (such as with a ServiceAccount token).
func (cp *ControlPlane) CAData() []byte { return cp.ca.certPEM }

// UserConfig returns a client configuration that authenticates as the given
// user and groups, with a client certificate signed by the control plane's
// authority. RBAC decides what that user may do.
func (cp *ControlPlane) UserConfig(user string, groups ...string) (*rest.Config, error) {
	cert, key, err := cp.ca.issue(user, groups, nil, nil, false)
	if err != nil {
		return nil, err
	}
	return &rest.Config{
		Host: cp.URL,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: cp.ca.certPEM, CertData: cert, KeyData: key,
		},
	}, nil
}

// WriteKubeconfig writes a kubeconfig file named name in Dir for the given
// user and groups, and returns its path.
func (cp *ControlPlane) WriteKubeconfig(name, user string, groups ...string) (string, error) {
	cert, key, err := cp.ca.issue(user, groups, nil, nil, false)
	if err != nil {
		return "", err
	}
	config := clientcmdapi.NewConfig()
	config.Clusters["local"] = &clientcmdapi.Cluster{Server: cp.URL, CertificateAuthorityData: cp.ca.certPEM}
	config.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	config.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: user}
	config.CurrentContext = "local"
	path := cp.path(name)
	return path, clientcmd.WriteToFile(*config, path)
}

// freePorts asks the kernel for n distinct free loopback ports.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// tail returns the end of a log file, for error messages.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	const max = 4000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}
