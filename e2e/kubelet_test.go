//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"kgen.dev/kgen/internal/controlplane"
)

// fakeKubelet runs the pods of kgen's image in one namespace as local
// processes, so that helm install, upgrade, test and uninstall of
// charts/kgen behave here as on a real cluster: Deployments become
// Available and roll, hook Jobs complete, test pods pass or fail. Start it
// with startPods, which also runs the controllers that make pods.
//
// What it simulates, for pods whose container image is kgen/kgenctl (any
// tag or digest):
//   - a Ready Node, and binding pending pods to it, as the scheduler would;
//     pods of other images are left Pending and untouched;
//   - the container, as env.kgenctl (the binary TestMain builds) with the
//     image's entrypoint semantics: command, if set, must be /kgenctl; args
//     default to the image's [run]; $(VAR) references are expanded;
//   - its environment: value, fieldRef (metadata.name, namespace, uid,
//     labels, annotations, spec.nodeName, spec.serviceAccountName,
//     status.podIP, status.hostIP), configMapKeyRef, secretKeyRef, envFrom;
//   - the pod's ServiceAccount: a token from the TokenRequest API bound to
//     the pod (so the audit log names the pod in the user's extra
//     authentication.kubernetes.io/pod-name), in a kubeconfig named by
//     $KUBECONFIG, which kgenctl, like kubectl, prefers to in-cluster config;
//   - volumes: configMap, secret, downwardAPI, projected (with
//     serviceAccountToken) and emptyDir, in a folder per pod laid out as the
//     kubelet's atomic writer does (keys are symlinks through ..data, a
//     symlink to a timestamped folder), and rewritten by swapping ..data
//     within about a second of a ConfigMap or Secret change;
//   - httpGet readiness and liveness probes, at their period but at least
//     every 2 s, with their thresholds; the Ready condition follows;
//   - status: Pending, Running, then Succeeded or Failed with the exit
//     code; restarts (restartPolicy Always, or OnFailure after a failure)
//     after a backoff of 1 s doubling to 10 s;
//   - deletion: SIGTERM, the pod's grace period, SIGKILL, then the pod's
//     deletion with grace 0, as the kubelet finalises a pod.
//
// The shim, the only thing that differs from a real pod: the process sees
// the test machine's file system and network, not a container's. So every
// volume mount path at the start of an argument, of a --flag= value or of
// an env value is rewritten to the pod's folder for that volume (e.g.
// --rules=/etc/kgen/rules); TMPDIR names the emptyDir mounted at /tmp, if
// any; each containerPort gets a free local port, and an argument
// ":PORT" or "HOST:PORT" naming a containerPort is rewritten to it
// (--metrics-bind-address, --health-probe-bind-address), which the probes
// use. A port the container listens on must therefore be a containerPort.
//
// It does not simulate: images (every tag runs env.kgenctl), more than one
// container, init containers, exec, tcpSocket, grpc and startup probes,
// preStop hooks, resources, security contexts (processes run as the test's
// user), pod networking (every pod is 127.0.0.1), the hostname (the test
// machine's), token rotation (tokens last an hour), node pressure.
type fakeKubelet struct {
	kube      kubernetes.Interface
	namespace string
	node      string
	dir       string
	log       *syncBuffer // what the kubelet did, for failed tests

	ctx     context.Context
	cms     corelisters.ConfigMapLister
	secrets corelisters.SecretLister

	mu   sync.Mutex
	pods map[types.UID]*fakePod
	wg   sync.WaitGroup
}

// kgenImage matches the image of kgen, kgen/kgenctl with any tag or digest.
var kgenImage = regexp.MustCompile(`^(docker\.io/)?kgen/kgenctl([:@].*)?$`)

// startPods runs, until the test ends, what makes the pods of a namespace
// run: the controllers of Deployments, ReplicaSets and Jobs, and a fake
// kubelet for the namespace's pods of kgen's image.
func startPods(t *testing.T, namespace string) *fakeKubelet {
	t.Helper()
	startPodControllers(t)
	ctx, cancel := context.WithCancel(context.Background())
	k := &fakeKubelet{
		kube: env.kube, namespace: namespace, node: "kubelet-" + namespace, dir: t.TempDir(),
		log: &syncBuffer{}, ctx: ctx, pods: map[types.UID]*fakePod{},
	}
	if err := k.registerNode(); err != nil {
		cancel()
		t.Fatal(err)
	}
	factory := informers.NewSharedInformerFactoryWithOptions(env.kube, 0, informers.WithNamespace(namespace))
	k.cms = factory.Core().V1().ConfigMaps().Lister()
	k.secrets = factory.Core().V1().Secrets().Lister()
	podInformer := factory.Core().V1().Pods().Informer()
	_, _ = podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.sync(obj.(*corev1.Pod)) },
		UpdateFunc: func(_, obj any) { k.sync(obj.(*corev1.Pod)) },
		// Deleted at once (grace 0, or unbound): stop what still runs.
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				pod = pod.DeepCopy()
				pod.DeletionTimestamp, pod.DeletionGracePeriodSeconds = new(metav1.Now()), new(int64(0))
				k.sync(pod)
			}
		},
	})
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	k.wg.Go(k.refreshVolumes)
	t.Cleanup(func() {
		cancel() // every pod's process is stopped
		k.wg.Wait()
		factory.Shutdown()
		_ = env.kube.CoreV1().Nodes().Delete(context.Background(), k.node, metav1.DeleteOptions{})
		if t.Failed() {
			t.Logf("fake kubelet:\n%s", tailOf(k.log.String(), 4000))
			k.mu.Lock()
			for _, p := range k.pods {
				t.Logf("pod %s:\n%s", p.pod.Name, tailOf(p.output.String(), 6000))
			}
			k.mu.Unlock()
		}
	})
	return k
}

func (k *fakeKubelet) logf(format string, args ...any) {
	fmt.Fprintf(k.log, time.Now().Format("15:04:05.000 ")+format+"\n", args...)
}

func (k *fakeKubelet) registerNode() error {
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("16Gi"),
		corev1.ResourcePods: resource.MustParse("110")}
	node, err := k.kube.CoreV1().Nodes().Create(k.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: k.node}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("register node: %w", err)
	}
	node.Status = corev1.NodeStatus{Conditions: []corev1.NodeCondition{ready}, Capacity: capacity, Allocatable: capacity,
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}}
	_, err = k.kube.CoreV1().Nodes().UpdateStatus(k.ctx, node, metav1.UpdateOptions{})
	return err
}

// sync binds a pending pod of kgen's image, starts a bound one, and stops
// one that is being deleted.
func (k *fakeKubelet) sync(pod *corev1.Pod) {
	switch {
	case pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil && isKgenPod(pod):
		err := k.kube.CoreV1().Pods(pod.Namespace).Bind(k.ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: pod.Name, UID: pod.UID},
			Target:     corev1.ObjectReference{Kind: "Node", Name: k.node},
		}, metav1.CreateOptions{})
		k.logf("bind %s: %v", pod.Name, err)
	case pod.Spec.NodeName != k.node:
	default:
		k.mu.Lock()
		defer k.mu.Unlock()
		p := k.pods[pod.UID]
		if p == nil {
			p = &fakePod{k: k, pod: pod, dir: filepath.Join(k.dir, pod.Name+"-"+string(pod.UID)[:8]),
				output: &syncBuffer{}, deleting: make(chan struct{}), ports: map[int32]string{}}
			k.pods[pod.UID] = p
			k.wg.Go(p.run)
		}
		if pod.DeletionTimestamp != nil {
			p.stopOnce.Do(func() {
				p.grace = 30 * time.Second
				if s := pod.DeletionGracePeriodSeconds; s != nil {
					p.grace = time.Duration(*s) * time.Second
				}
				close(p.deleting)
			})
		}
	}
}

func isKgenPod(pod *corev1.Pod) bool {
	return len(pod.Spec.Containers) > 0 && !slices.ContainsFunc(pod.Spec.Containers, func(c corev1.Container) bool {
		return !kgenImage.MatchString(c.Image)
	})
}

// output returns what the processes of a pod wrote, every run of them.
func (k *fakeKubelet) output(podName string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out strings.Builder
	for _, p := range k.pods {
		if p.pod.Name == podName {
			out.WriteString(p.output.String())
		}
	}
	return out.String()
}

// address returns the local address a running pod's containerPort is
// served at, or "".
func (k *fakeKubelet) address(podName string, containerPort int32) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, p := range k.pods {
		if p.pod.Name == podName {
			return p.ports[containerPort]
		}
	}
	return ""
}

// outputs returns what the processes of every pod wrote.
func (k *fakeKubelet) outputs() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out strings.Builder
	for _, p := range k.pods {
		out.WriteString(p.output.String())
	}
	return out.String()
}

// refreshVolumes rewrites the volumes whose ConfigMaps or Secrets changed,
// every second, as the kubelet's periodic sync does (it takes up to a
// minute there).
func (k *fakeKubelet) refreshVolumes() {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-k.ctx.Done():
			return
		case <-tick.C:
		}
		k.mu.Lock()
		pods := slices.Collect(maps.Values(k.pods))
		k.mu.Unlock()
		for _, p := range pods {
			if err := p.writeVolumes(false); err != nil {
				k.logf("refresh the volumes of %s: %v", p.pod.Name, err)
			}
		}
	}
}

// fakePod is one pod the fake kubelet runs.
type fakePod struct {
	k      *fakeKubelet
	pod    *corev1.Pod // as first seen bound; its spec does not change
	dir    string
	output *syncBuffer

	deleting chan struct{} // closed when the pod is being deleted
	stopOnce sync.Once
	grace    time.Duration

	// Set by prepare, then read-only.
	args, env []string
	ports     map[int32]string // containerPort to local address
	token     string

	mu       sync.Mutex
	prepared bool
	written  map[string]map[string][]byte // volume name to the files last written
	status   corev1.PodStatus
}

// errPermanent marks errors that retrying cannot fix; others (a missing
// ConfigMap) are retried, as the kubelet does.
var errPermanent = errors.New("not simulated")

func (p *fakePod) run() {
	k := p.k
	select {
	case <-p.deleting: // deleted before it ran
		p.finalise()
		return
	default:
	}
	c := p.pod.Spec.Containers[0]
	p.status = corev1.PodStatus{Phase: corev1.PodPending, HostIP: "127.0.0.1", PodIP: "127.0.0.1",
		HostIPs: []corev1.HostIP{{IP: "127.0.0.1"}}, PodIPs: []corev1.PodIP{{IP: "127.0.0.1"}}, StartTime: new(metav1.Now()),
		ContainerStatuses: []corev1.ContainerStatus{{Name: c.Name, Image: c.Image, ImageID: "fake://kgenctl",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}}
	p.setConditions(false)
	p.report()
	for {
		err := p.prepare()
		if err == nil {
			break
		}
		k.logf("prepare %s: %v", p.pod.Name, err)
		if errors.Is(err, errPermanent) {
			p.status.Phase, p.status.Reason, p.status.Message = corev1.PodFailed, "NotSimulated", err.Error()
			p.report()
			p.waitDeletion()
			return
		}
		select {
		case <-k.ctx.Done():
			return
		case <-p.deleting:
			p.finalise()
			return
		case <-time.After(time.Second):
		}
	}
	backoff := time.Second
	for {
		code, why := p.runContainer()
		if why != "" { // stopped: deleted, or the test ended
			if why == "deleted" {
				p.finalise()
			}
			return
		}
		policy := p.pod.Spec.RestartPolicy
		if policy == corev1.RestartPolicyNever || (policy == corev1.RestartPolicyOnFailure && code == 0) {
			p.status.Phase = corev1.PodSucceeded
			if code != 0 {
				p.status.Phase = corev1.PodFailed
			}
			p.setConditions(false)
			p.report()
			p.waitDeletion()
			return
		}
		cs := &p.status.ContainerStatuses[0]
		cs.LastTerminationState, cs.RestartCount = cs.State, cs.RestartCount+1
		cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
			Message: fmt.Sprintf("back-off %s restarting failed container", backoff)}}
		p.report()
		select {
		case <-k.ctx.Done():
			return
		case <-p.deleting:
			p.finalise()
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// runContainer runs the container's process once, with its probes, until
// it exits (its exit code), the pod is deleted ("deleted"), or the test
// ends ("stopped").
func (p *fakePod) runContainer() (int, string) {
	k, c := p.k, p.pod.Spec.Containers[0]
	cmd := exec.Command(env.kgenctl, p.args...)
	cmd.Dir, cmd.Env = p.dir, p.env
	cmd.Stdout, cmd.Stderr = p.output, p.output
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cs := &p.status.ContainerStatuses[0]
	fmt.Fprintf(p.output, "=== %s: start %d: kgenctl %s\n", time.Now().Format("15:04:05.000"), cs.RestartCount, strings.Join(p.args, " "))
	if err := cmd.Start(); err != nil {
		k.logf("start %s: %v", p.pod.Name, err)
		return 128, ""
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	started := metav1.Now()
	p.status.Phase = corev1.PodRunning
	cs.ContainerID = fmt.Sprintf("fake://%d", cmd.Process.Pid)
	cs.Started, cs.Ready = new(true), c.ReadinessProbe == nil
	cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}
	p.setConditions(cs.Ready)
	p.report()
	k.logf("started %s: pid %d", p.pod.Name, cmd.Process.Pid)

	stop := func(grace time.Duration) {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(grace):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	readiness, liveness := newProber(c.ReadinessProbe, p, false), newProber(c.LivenessProbe, p, true)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	why := ""
loop:
	for {
		select {
		case <-exited:
			break loop
		case <-p.deleting:
			stop(p.grace)
			why = "deleted"
			break loop
		case <-k.ctx.Done():
			stop(5 * time.Second)
			why = "stopped"
			break loop
		case now := <-tick.C:
			if ready, changed := readiness.probe(now, started.Time); changed {
				cs.Ready = ready
				p.setConditions(ready)
				p.report()
			}
			if alive, changed := liveness.probe(now, started.Time); changed && !alive {
				k.logf("liveness probe of %s failed: %s", p.pod.Name, liveness.last)
				stop(time.Duration(ptrOr(p.pod.Spec.TerminationGracePeriodSeconds, 30)) * time.Second)
				break loop
			}
		}
	}
	code := cmd.ProcessState.ExitCode()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	k.logf("%s exited with %d (%s)", p.pod.Name, code, why)
	fmt.Fprintf(p.output, "=== %s: exit code %d\n", time.Now().Format("15:04:05.000"), code)
	cs.Ready = false
	cs.Started = new(false)
	cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: int32(code), Reason: reason,
		StartedAt: started, FinishedAt: metav1.Now(), ContainerID: cs.ContainerID}}
	p.setConditions(false)
	if why == "" {
		p.report()
	}
	return code, why
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// waitDeletion waits, once the container will not run again, for the pod's
// deletion, then finalises it.
func (p *fakePod) waitDeletion() {
	select {
	case <-p.k.ctx.Done():
	case <-p.deleting:
		p.finalise()
	}
}

// finalise deletes the pod with grace 0, as the kubelet does once its
// containers have stopped.
func (p *fakePod) finalise() {
	if p.status.Phase != corev1.PodSucceeded {
		p.status.Phase = corev1.PodFailed
	}
	p.report()
	err := p.k.kube.CoreV1().Pods(p.pod.Namespace).Delete(p.k.ctx, p.pod.Name,
		metav1.DeleteOptions{GracePeriodSeconds: new(int64(0)), Preconditions: &metav1.Preconditions{UID: &p.pod.UID}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		err = nil
	}
	p.k.logf("finalised %s: %v", p.pod.Name, err)
}

// setConditions sets the pod's conditions, keeping the transition time of
// those that did not change.
func (p *fakePod) setConditions(ready bool) {
	status := func(b bool) corev1.ConditionStatus {
		if b {
			return corev1.ConditionTrue
		}
		return corev1.ConditionFalse
	}
	running := p.status.Phase == corev1.PodRunning
	want := []corev1.PodCondition{
		{Type: corev1.PodReadyToStartContainers, Status: status(p.prepared)},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue},
		{Type: corev1.ContainersReady, Status: status(ready && running)},
		{Type: corev1.PodReady, Status: status(ready && running)},
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
	}
	for i := range want {
		want[i].LastTransitionTime = metav1.Now()
		for _, old := range p.status.Conditions {
			if old.Type == want[i].Type && old.Status == want[i].Status {
				want[i].LastTransitionTime = old.LastTransitionTime
			}
		}
	}
	p.status.Conditions = want
}

// report writes the pod's status.
func (p *fakePod) report() {
	patch, err := json.Marshal(map[string]any{"status": p.status})
	if err == nil {
		_, err = p.k.kube.CoreV1().Pods(p.pod.Namespace).Patch(p.k.ctx, p.pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	}
	if err != nil && p.k.ctx.Err() == nil && !apierrors.IsNotFound(err) {
		p.k.logf("status of %s: %v", p.pod.Name, err)
	}
}

// prepare makes what the container needs: its volumes, identity, ports,
// arguments and environment.
func (p *fakePod) prepare() error {
	c := p.pod.Spec.Containers[0]
	switch {
	case len(p.pod.Spec.Containers) > 1 || len(p.pod.Spec.InitContainers) > 0:
		return fmt.Errorf("%w: more than one container", errPermanent)
	case len(c.Command) > 0 && !slices.Equal(c.Command, []string{"/kgenctl"}):
		return fmt.Errorf("%w: command %q: the image has only /kgenctl", errPermanent, c.Command)
	}
	if err := os.MkdirAll(filepath.Join(p.dir, "volumes"), 0o755); err != nil {
		return err
	}
	if ptrOr(p.pod.Spec.AutomountServiceAccountToken, true) && p.token == "" {
		token, err := p.k.kube.CoreV1().ServiceAccounts(p.pod.Namespace).CreateToken(p.k.ctx, p.pod.Spec.ServiceAccountName,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600)),
				BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.pod.Name, UID: p.pod.UID}}},
			metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("token of service account %s: %w", p.pod.Spec.ServiceAccountName, err)
		}
		p.token = token.Status.Token
	}
	if err := p.writeVolumes(true); err != nil {
		return err
	}
	var err error
	for _, port := range c.Ports {
		if p.ports[port.ContainerPort] == "" {
			p.ports[port.ContainerPort], err = localAddress()
			if err != nil {
				return err
			}
		}
	}
	vars, err := p.environment(c)
	if err != nil {
		return err
	}
	expand := func(s string) string {
		return expandVars(s, func(name string) (string, bool) {
			i := slices.IndexFunc(vars, func(kv string) bool { return strings.HasPrefix(kv, name+"=") })
			if i < 0 {
				return "", false
			}
			return strings.TrimPrefix(vars[i], name+"="), true
		})
	}
	args := c.Args
	if len(c.Command) == 0 && len(args) == 0 {
		args = []string{"run"} // the image's CMD
	}
	p.args = nil
	for _, a := range args {
		p.args = append(p.args, p.rewriteArg(expand(a)))
	}
	p.env = nil
	for _, kv := range vars {
		name, value, _ := strings.Cut(kv, "=")
		p.env = append(p.env, name+"="+p.rewritePath(expand(value)))
	}
	if p.token != "" {
		kubeconfig := filepath.Join(p.dir, "kubeconfig")
		config := clientcmdapi.NewConfig()
		config.Clusters["cluster"] = &clientcmdapi.Cluster{Server: env.cp.URL, CertificateAuthorityData: env.cp.CAData()}
		config.AuthInfos["pod"] = &clientcmdapi.AuthInfo{Token: p.token}
		config.Contexts["pod"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "pod", Namespace: p.pod.Namespace}
		config.CurrentContext = "pod"
		if err := clientcmd.WriteToFile(*config, kubeconfig); err != nil {
			return err
		}
		p.env = append(p.env, "KUBECONFIG="+kubeconfig)
	}
	for _, m := range c.VolumeMounts {
		if m.MountPath == "/tmp" {
			p.env = append(p.env, "TMPDIR="+p.hostPath(m))
		}
	}
	p.mu.Lock()
	p.prepared = true
	p.mu.Unlock()
	return nil
}

// environment returns the container's environment as NAME=value, before
// the shim's rewriting.
func (p *fakePod) environment(c corev1.Container) ([]string, error) {
	var out []string
	for _, from := range c.EnvFrom {
		var data map[string]string
		switch {
		case from.ConfigMapRef != nil:
			cm, err := p.k.cms.ConfigMaps(p.pod.Namespace).Get(from.ConfigMapRef.Name)
			if err != nil && !ptrOr(from.ConfigMapRef.Optional, false) {
				return nil, err
			}
			if cm != nil {
				data = cm.Data
			}
		case from.SecretRef != nil:
			s, err := p.k.secrets.Secrets(p.pod.Namespace).Get(from.SecretRef.Name)
			if err != nil && !ptrOr(from.SecretRef.Optional, false) {
				return nil, err
			}
			if s != nil {
				data = map[string]string{}
				for key, v := range s.Data {
					data[key] = string(v)
				}
			}
		}
		for _, key := range slices.Sorted(maps.Keys(data)) {
			out = append(out, from.Prefix+key+"="+data[key])
		}
	}
	for _, e := range c.Env {
		value := e.Value
		if src := e.ValueFrom; src != nil {
			var err error
			switch {
			case src.FieldRef != nil:
				value, err = p.field(src.FieldRef.FieldPath)
			case src.ConfigMapKeyRef != nil:
				value, err = p.configMapKey(src.ConfigMapKeyRef.Name, src.ConfigMapKeyRef.Key, ptrOr(src.ConfigMapKeyRef.Optional, false))
			case src.SecretKeyRef != nil:
				value, err = p.secretKey(src.SecretKeyRef.Name, src.SecretKeyRef.Key, ptrOr(src.SecretKeyRef.Optional, false))
			default:
				err = fmt.Errorf("%w: env %s: valueFrom %+v", errPermanent, e.Name, src)
			}
			if err != nil {
				return nil, err
			}
		}
		out = append(out, e.Name+"="+value)
	}
	return out, nil
}

// field resolves a downward-API field path.
func (p *fakePod) field(path string) (string, error) {
	pod := p.pod
	if key, ok := strings.CutPrefix(path, "metadata.labels['"); ok {
		return pod.Labels[strings.TrimSuffix(key, "']")], nil
	}
	if key, ok := strings.CutPrefix(path, "metadata.annotations['"); ok {
		return pod.Annotations[strings.TrimSuffix(key, "']")], nil
	}
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return p.k.node, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP", "status.hostIP":
		return "127.0.0.1", nil
	}
	return "", fmt.Errorf("%w: field %s", errPermanent, path)
}

func (p *fakePod) configMapKey(name, key string, optional bool) (string, error) {
	cm, err := p.k.cms.ConfigMaps(p.pod.Namespace).Get(name)
	if err == nil {
		if v, ok := cm.Data[key]; ok {
			return v, nil
		}
		err = fmt.Errorf("configmap %s has no key %s", name, key)
	}
	if optional {
		return "", nil
	}
	return "", err
}

func (p *fakePod) secretKey(name, key string, optional bool) (string, error) {
	s, err := p.k.secrets.Secrets(p.pod.Namespace).Get(name)
	if err == nil {
		if v, ok := s.Data[key]; ok {
			return string(v), nil
		}
		err = fmt.Errorf("secret %s has no key %s", name, key)
	}
	if optional {
		return "", nil
	}
	return "", err
}

// expandVars expands $(NAME) as Kubernetes does in args and env values: a
// name that is not defined is left as it is, and $$ is a literal $.
func expandVars(s string, lookup func(string) (string, bool)) string {
	var out strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			out.WriteByte(s[i])
			continue
		}
		if s[i+1] == '$' {
			out.WriteByte('$')
			i++
			continue
		}
		if end := strings.IndexByte(s[i:], ')'); s[i+1] == '(' && end > 0 {
			if v, ok := lookup(s[i+2 : i+end]); ok {
				out.WriteString(v)
				i += end
				continue
			}
		}
		out.WriteByte(s[i])
	}
	return out.String()
}

// hostPath is where a volume mount is on the test machine.
func (p *fakePod) hostPath(m corev1.VolumeMount) string {
	return filepath.Join(p.dir, "volumes", m.Name, m.SubPath)
}

// rewritePath rewrites a value that starts with a mount path.
func (p *fakePod) rewritePath(value string) string {
	mounts := slices.Clone(p.pod.Spec.Containers[0].VolumeMounts)
	slices.SortFunc(mounts, func(a, b corev1.VolumeMount) int { return len(b.MountPath) - len(a.MountPath) })
	for _, m := range mounts {
		if value == m.MountPath || strings.HasPrefix(value, strings.TrimSuffix(m.MountPath, "/")+"/") {
			return p.hostPath(m) + strings.TrimPrefix(value, m.MountPath)
		}
	}
	return value
}

var addressArg = regexp.MustCompile(`^([0-9.]*|\[::\]|localhost):([0-9]+)$`)

// rewriteArg applies the shim to one argument, or to the value of a
// --flag=value argument.
func (p *fakePod) rewriteArg(arg string) string {
	prefix, value := "", arg
	if strings.HasPrefix(arg, "-") {
		flag, v, ok := strings.Cut(arg, "=")
		if !ok {
			return arg
		}
		prefix, value = flag+"=", v
	}
	if m := addressArg.FindStringSubmatch(value); m != nil {
		port, _ := strconv.Atoi(m[2])
		if local := p.ports[int32(port)]; local != "" {
			return prefix + local
		}
	}
	return prefix + p.rewritePath(value)
}

// writeVolumes writes every volume of the pod whose files changed, as the
// kubelet's atomic writer does: the files go to a new timestamped folder,
// then the ..data symlink is swapped to it in one rename.
// Only prepare writes them first (initial); later calls update them.
func (p *fakePod) writeVolumes(initial bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !initial && !p.prepared {
		return nil
	}
	if p.written == nil {
		p.written = map[string]map[string][]byte{}
	}
	for _, v := range p.pod.Spec.Volumes {
		dir := filepath.Join(p.dir, "volumes", v.Name)
		if v.EmptyDir != nil {
			if err := os.MkdirAll(dir, 0o777); err != nil {
				return err
			}
			continue
		}
		files, err := p.volumeFiles(v)
		if err != nil {
			return fmt.Errorf("volume %s: %w", v.Name, err)
		}
		if old, ok := p.written[v.Name]; ok && maps.EqualFunc(old, files, bytes.Equal) {
			continue
		}
		if err := atomicWrite(dir, files); err != nil {
			return fmt.Errorf("volume %s: %w", v.Name, err)
		}
		if _, ok := p.written[v.Name]; ok {
			p.k.logf("updated volume %s of %s", v.Name, p.pod.Name)
		}
		p.written[v.Name] = files
	}
	return nil
}

// volumeFiles returns the files of a volume, by path.
func (p *fakePod) volumeFiles(v corev1.Volume) (map[string][]byte, error) {
	files := map[string][]byte{}
	switch {
	case v.ConfigMap != nil:
		return files, p.addConfigMap(files, v.ConfigMap.Name, v.ConfigMap.Items, ptrOr(v.ConfigMap.Optional, false))
	case v.Secret != nil:
		return files, p.addSecret(files, v.Secret.SecretName, v.Secret.Items, ptrOr(v.Secret.Optional, false))
	case v.DownwardAPI != nil:
		return files, p.addDownwardAPI(files, v.DownwardAPI.Items)
	case v.Projected != nil:
		for _, s := range v.Projected.Sources {
			var err error
			switch {
			case s.ConfigMap != nil:
				err = p.addConfigMap(files, s.ConfigMap.Name, s.ConfigMap.Items, ptrOr(s.ConfigMap.Optional, false))
			case s.Secret != nil:
				err = p.addSecret(files, s.Secret.Name, s.Secret.Items, ptrOr(s.Secret.Optional, false))
			case s.DownwardAPI != nil:
				err = p.addDownwardAPI(files, s.DownwardAPI.Items)
			case s.ServiceAccountToken != nil:
				files[s.ServiceAccountToken.Path] = []byte(p.token)
			default:
				err = fmt.Errorf("%w: projected source %+v", errPermanent, s)
			}
			if err != nil {
				return nil, err
			}
		}
		return files, nil
	}
	return nil, fmt.Errorf("%w: volume %s's type", errPermanent, v.Name)
}

func addItems(files map[string][]byte, data map[string][]byte, items []corev1.KeyToPath) error {
	if len(items) == 0 {
		maps.Copy(files, data)
		return nil
	}
	for _, item := range items {
		v, ok := data[item.Key]
		if !ok {
			return fmt.Errorf("no key %s", item.Key)
		}
		files[item.Path] = v
	}
	return nil
}

func (p *fakePod) addConfigMap(files map[string][]byte, name string, items []corev1.KeyToPath, optional bool) error {
	cm, err := p.k.cms.ConfigMaps(p.pod.Namespace).Get(name)
	if apierrors.IsNotFound(err) && optional {
		return nil
	}
	if err != nil {
		return fmt.Errorf("configmap %s: %w", name, err)
	}
	data := maps.Clone(cm.BinaryData)
	if data == nil {
		data = map[string][]byte{}
	}
	for key, v := range cm.Data {
		data[key] = []byte(v)
	}
	return addItems(files, data, items)
}

func (p *fakePod) addSecret(files map[string][]byte, name string, items []corev1.KeyToPath, optional bool) error {
	s, err := p.k.secrets.Secrets(p.pod.Namespace).Get(name)
	if apierrors.IsNotFound(err) && optional {
		return nil
	}
	if err != nil {
		return fmt.Errorf("secret %s: %w", name, err)
	}
	return addItems(files, s.Data, items)
}

func (p *fakePod) addDownwardAPI(files map[string][]byte, items []corev1.DownwardAPIVolumeFile) error {
	for _, item := range items {
		if item.FieldRef == nil {
			return fmt.Errorf("%w: downward API item %s", errPermanent, item.Path)
		}
		v, err := p.field(item.FieldRef.FieldPath)
		if err != nil {
			return err
		}
		files[item.Path] = []byte(v)
	}
	return nil
}

// atomicWrite makes dir hold exactly files, laid out as the kubelet's
// AtomicWriter does, so a reader sees the old or the new files, never a mix.
func atomicWrite(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tsDir, err := os.MkdirTemp(dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		return err
	}
	for path, data := range files {
		file := filepath.Join(tsDir, path)
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(file, data, 0o644); err != nil {
			return err
		}
	}
	if err := os.Chmod(tsDir, 0o755); err != nil {
		return err
	}
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	tmp := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(filepath.Base(tsDir), tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		return err
	}
	// The user-visible names: a symlink through ..data for each top-level
	// name; names no longer in the volume go.
	top := map[string]bool{}
	for path := range files {
		top[strings.SplitN(path, "/", 2)[0]] = true
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "..") && !top[e.Name()] {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	for name := range top {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			return err
		}
	}
	if old != "" && old != filepath.Base(tsDir) {
		return os.RemoveAll(filepath.Join(dir, old))
	}
	return nil
}

// prober runs one httpGet probe on its schedule and counts its results
// against the thresholds.
type prober struct {
	spec             *corev1.Probe
	url              string
	next             time.Time
	ok               bool
	successes, fails int32
	last             string
}

// newProber returns the prober of a probe (which may be nil: then always
// ok), in state initial until its thresholds say otherwise.
func newProber(probe *corev1.Probe, p *fakePod, initial bool) *prober {
	pr := &prober{spec: probe, ok: true}
	if probe == nil || probe.HTTPGet == nil {
		return pr
	}
	pr.ok = initial
	port := probe.HTTPGet.Port
	var number int32
	for _, cp := range p.pod.Spec.Containers[0].Ports {
		if (port.Type == intstr.String && cp.Name == port.StrVal) || (port.Type == intstr.Int && cp.ContainerPort == port.IntVal) {
			number = cp.ContainerPort
		}
	}
	scheme := strings.ToLower(string(probe.HTTPGet.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	pr.url = scheme + "://" + p.ports[number] + probe.HTTPGet.Path
	return pr
}

// probe runs the probe if it is due, and returns its state and whether
// that changed.
func (pr *prober) probe(now, started time.Time) (ok, changed bool) {
	p := pr.spec
	if p == nil || p.HTTPGet == nil || now.Before(pr.next) || now.Before(started.Add(time.Duration(p.InitialDelaySeconds)*time.Second)) {
		return pr.ok, false
	}
	period := time.Duration(max(p.PeriodSeconds, 1)) * time.Second
	pr.next = now.Add(min(period, 2*time.Second))
	client := &http.Client{Timeout: time.Duration(max(p.TimeoutSeconds, 1)) * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // as the kubelet's probes
	resp, err := client.Get(pr.url)
	success := err == nil && resp.StatusCode >= 200 && resp.StatusCode < 400
	if err == nil {
		pr.last = resp.Status
		resp.Body.Close()
	} else {
		pr.last = err.Error()
	}
	if success {
		pr.successes, pr.fails = pr.successes+1, 0
	} else {
		pr.successes, pr.fails = 0, pr.fails+1
	}
	was := pr.ok
	switch {
	case success && pr.successes >= max(p.SuccessThreshold, 1):
		pr.ok = true
	case !success && pr.fails >= max(p.FailureThreshold, 3):
		pr.ok = false
	}
	return pr.ok, pr.ok != was
}

// podControllers is kube-controller-manager with the controllers that make
// pods, which the shared control plane leaves out so that no other test
// has pods.
var podControllers = []string{"deployment-controller", "replicaset-controller", "job-controller",
	"root-ca-certificate-publisher-controller"}

// startPodControllers runs a second kube-controller-manager, with
// podControllers, until the test ends.
func startPodControllers(t *testing.T) {
	t.Helper()
	bin, err := controlplane.BinDir(env.root)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := userKubeconfig(t, "system:kube-controller-manager-pods")
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, env.cp.CAData(), 0o600); err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	cmd := exec.Command(filepath.Join(bin, "kube-controller-manager"), "--kubeconfig="+kubeconfig,
		"--controllers="+strings.Join(podControllers, ","), "--root-ca-file="+ca,
		"--leader-elect=false", "--secure-port=0")
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("kube-controller-manager (pods):\n%s", tailOf(out.String(), 3000))
		}
	})
}

// handedOut are the addresses localAddress returned: the port of a
// listener closed at once may come back for the next one before the first
// pod binds it (two replicas of one Deployment, started together, were
// given one health-probe port, and one crashed on "address already in
// use" for the rest of a test).
var handedOut sync.Map

// localAddress returns a free local address, 127.0.0.1:PORT, one it has
// not returned before.
func localAddress() (string, error) {
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		addr := l.Addr().String()
		l.Close()
		if _, taken := handedOut.LoadOrStore(addr, true); !taken {
			return addr, nil
		}
	}
	return "", errors.New("no free local port that was not handed out before")
}

// podsOf returns the pods of a namespace that match a label selector.
func podsOf(t *testing.T, namespace, selector string) []corev1.Pod {
	t.Helper()
	list, err := env.kube.CoreV1().Pods(namespace).List(t.Context(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// restartPods deletes the pods of a namespace that match a label
// selector, and waits until one of their replacements is ready.
func restartPods(t *testing.T, namespace, selector string) {
	t.Helper()
	old := map[string]bool{}
	for _, p := range podsOf(t, namespace, selector) {
		old[p.Name] = true
		if err := env.kube.CoreV1().Pods(namespace).Delete(t.Context(), p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if len(old) == 0 {
		t.Fatalf("no pod of %s in %s to restart", selector, namespace)
	}
	eventually(t, 2*time.Minute, func() (bool, error) {
		for _, p := range podsOf(t, namespace, selector) {
			for _, c := range p.Status.Conditions {
				if !old[p.Name] && c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					return true, nil
				}
			}
		}
		return false, fmt.Errorf("no new pod of %s is ready", selector)
	}, "the pods of %s to run again", selector)
}

// dumpPods logs the pods of a namespace as YAML status, for a failed wait.
func dumpPods(t *testing.T, namespace string) {
	t.Helper()
	for _, p := range podsOf(t, namespace, "") {
		b, _ := yaml.Marshal(p.Status)
		t.Logf("pod %s (node %q, deleting %v):\n%s", p.Name, p.Spec.NodeName, p.DeletionTimestamp != nil, b)
	}
}

// The fake kubelet runs a pod of kgen's image with its arguments, env and
// volumes, reports how it ended, swaps a ConfigMap volume's files when the
// ConfigMap changes, and leaves pods of other images alone.
func TestFakeKubelet(t *testing.T) {
	ctx := t.Context()
	ns := newNamespace(t)
	k := startPods(t, ns)
	rulesText, err := os.ReadFile(filepath.Join(env.root, "examples/webapp/rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cm, err := env.kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "rules"},
		Data: map[string]string{"webapp.yaml": string(rulesText)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	newPod := func(name, image string, args ...string) {
		t.Helper()
		restart := corev1.RestartPolicyNever
		if name == "restarted" {
			restart = corev1.RestartPolicyOnFailure
		}
		_, err := env.kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{
				RestartPolicy: restart,
				Containers: []corev1.Container{{Name: "c", Image: image, Args: args,
					Env:          []corev1.EnvVar{{Name: "RULES", Value: "/etc/kgen/rules"}, {Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
					VolumeMounts: []corev1.VolumeMount{{Name: "rules", MountPath: "/etc/kgen/rules"}}}},
				Volumes: []corev1.Volume{{Name: "rules", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "rules"}}}}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	newPod("valid", "kgen/kgenctl:0.0.1", "validate", "--rules=$(RULES)")
	newPod("invalid", "kgen/kgenctl@sha256:0123", "validate", "--rules", "/etc/kgen/rules/missing-$(POD).yaml")
	newPod("other", "nginx:1.27", "whatever")
	newPod("restarted", "kgen/kgenctl", "validate", "--rules=/etc/kgen/rules/missing.yaml")
	phase := func(name string, want corev1.PodPhase) *corev1.Pod {
		t.Helper()
		var pod *corev1.Pod
		eventually(t, 60*time.Second, func() (bool, error) {
			pod, err = env.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return pod.Status.Phase == want, fmt.Errorf("phase %s", pod.Status.Phase)
		}, "pod %s to be %s", name, want)
		return pod
	}
	phase("valid", corev1.PodSucceeded)
	if out := k.output("valid"); !strings.Contains(out, "1 rule is valid: webapp") {
		t.Errorf("the valid pod's output:\n%s", out)
	}
	invalid := phase("invalid", corev1.PodFailed)
	if s := invalid.Status.ContainerStatuses[0].State.Terminated; s == nil || s.ExitCode != 1 {
		t.Errorf("the invalid pod's container state: %+v", invalid.Status.ContainerStatuses[0].State)
	}
	if out := k.output("invalid"); !strings.Contains(out, "missing-invalid.yaml") {
		t.Errorf("the invalid pod's output does not name the file its args name:\n%s", out)
	}
	eventually(t, 60*time.Second, func() (bool, error) {
		pod, err := env.kube.CoreV1().Pods(ns).Get(ctx, "restarted", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		cs := pod.Status.ContainerStatuses
		if len(cs) == 0 || cs[0].RestartCount < 2 || cs[0].LastTerminationState.Terminated == nil || pod.Status.Phase != corev1.PodRunning {
			return false, fmt.Errorf("phase %s, container %+v", pod.Status.Phase, cs)
		}
		return cs[0].LastTerminationState.Terminated.ExitCode == 1, fmt.Errorf("last state %+v", cs[0].LastTerminationState)
	}, "a failing OnFailure pod to be restarted")
	if other, err := env.kube.CoreV1().Pods(ns).Get(ctx, "other", metav1.GetOptions{}); err != nil || other.Spec.NodeName != "" {
		t.Errorf("a pod of another image was bound: %v %v", other.Spec.NodeName, err)
	}

	// The ConfigMap's files are symlinks through ..data, which is swapped.
	var dir string
	k.mu.Lock()
	for _, p := range k.pods {
		if p.pod.Name == "valid" {
			dir = filepath.Join(p.dir, "volumes", "rules")
		}
	}
	k.mu.Unlock()
	target, err := os.Readlink(filepath.Join(dir, "webapp.yaml"))
	if err != nil || target != "..data/webapp.yaml" {
		t.Fatalf("webapp.yaml links to %q (%v), want ..data/webapp.yaml", target, err)
	}
	before, _ := os.Readlink(filepath.Join(dir, "..data"))
	cm.Data = map[string]string{"other.yaml": "# changed"}
	if _, err := env.kube.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() (bool, error) {
		data, err := os.ReadFile(filepath.Join(dir, "other.yaml"))
		return err == nil && string(data) == "# changed", err
	}, "the volume to show the ConfigMap's change")
	after, _ := os.Readlink(filepath.Join(dir, "..data"))
	if _, err := os.Lstat(filepath.Join(dir, "webapp.yaml")); !os.IsNotExist(err) || after == before || !strings.HasPrefix(after, "..20") {
		t.Errorf("..data went from %s to %s; webapp.yaml: %v", before, after, err)
	}
	if _, err := os.Stat(filepath.Join(dir, before)); !os.IsNotExist(err) {
		t.Errorf("the old files %s are still there: %v", before, err)
	}

	// A deleted pod is finalised.
	if err := env.kube.CoreV1().Pods(ns).Delete(ctx, "valid", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() (bool, error) {
		_, err := env.kube.CoreV1().Pods(ns).Get(ctx, "valid", metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	}, "the deleted pod to be gone")
}
