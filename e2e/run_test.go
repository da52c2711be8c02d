//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// kgenProcess is a 'kgenctl run' started by a test.
type kgenProcess struct {
	cmd    *exec.Cmd
	output *syncBuffer
	done   chan struct{}
	err    error
	health string // base URL of /healthz and /readyz
	metric string // base URL of /metrics
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// userKubeconfig writes a kubeconfig for a user in system:masters, so each
// process's requests can be told apart in the audit log.
func userKubeconfig(t *testing.T, user string) string {
	t.Helper()
	path, err := env.cp.WriteKubeconfig(user+".kubeconfig", user, "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// freePort returns a free address for a kgenctl run to listen on. It is
// free when freePort returns, and must stay free until kgenctl binds it: a
// port of the kernel's ephemeral range (what a listen on port 0 gets) may
// meanwhile become the source port of any outgoing connection, which made
// a kgen fail with "address already in use". So it picks a port below
// that range, which only explicit binds use.
func freePort(t *testing.T) string {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 11000 {
				low = n
			}
		}
	}
	for range 200 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(10000+rand.IntN(low-10000)))
		if l, err := net.Listen("tcp", addr); err == nil {
			l.Close()
			return addr
		}
	}
	t.Fatal("no free port below the ephemeral range")
	return ""
}

// startKgen runs 'kgenctl run' as the given user, in system:masters, with
// extra arguments; the test's end stops it with SIGTERM.
func startKgen(t *testing.T, user string, args ...string) *kgenProcess {
	t.Helper()
	return startKgenWith(t, user, userKubeconfig(t, user), args...)
}

// startKgenWith runs 'kgenctl run' with a kubeconfig, naming it user in
// the test's log.
func startKgenWith(t *testing.T, user, kubeconfig string, args ...string) *kgenProcess {
	t.Helper()
	health, metrics := freePort(t), freePort(t)
	all := append([]string{"run", "--kubeconfig", kubeconfig,
		"--health-probe-bind-address", health, "--metrics-bind-address", metrics, "-v", "2"}, args...)
	p := startKgenctl(t, user, all...)
	p.health, p.metric = "http://"+health, metricsScheme(args)+"://"+metrics
	return p
}

// metricsScheme is the scheme kgenctl run with these arguments serves
// /metrics with.
func metricsScheme(args []string) string {
	if slices.Contains(args, "--metrics-secure") || slices.Contains(args, "--metrics-secure=true") {
		return "https"
	}
	return "http"
}

// startKgenctl runs kgenctl with exactly the given arguments; the test's end
// stops it with SIGTERM and, if the test failed, logs the end of its output
// under the given name.
func startKgenctl(t *testing.T, name string, args ...string) *kgenProcess {
	t.Helper()
	p := &kgenProcess{output: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(env.kgenctl, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.output, p.output
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("kgenctl run as %s:\n%s", name, tailOf(p.output.String(), 6000))
		}
	})
	return p
}

func tailOf(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func (p *kgenProcess) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// stop ends the process as a pod's deletion does (SIGTERM), and waits.
func (p *kgenProcess) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done
}

func httpGet(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// newCRD creates a namespaced CRD with a status subresource for a test.
func newCRD(t *testing.T, group, kind, plural string) schema.GroupVersionResource {
	return newScopedCRD(t, group, kind, plural, apiextensionsv1.NamespaceScoped)
}

// newScopedCRD creates a CRD of the given scope, with a status subresource
// and any fields, deleted when the test ends, and waits until it is served.
func newScopedCRD(t *testing.T, group, kind, plural string, scope apiextensionsv1.ResourceScope) schema.GroupVersionResource {
	t.Helper()
	return createCRD(t, crdOf(group, kind, plural, scope, &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: new(true)}))
}

// crdOf returns a CRD of one version, v1, with a status subresource and
// the given schema.
func crdOf(group, kind, plural string, scope apiextensionsv1.ResourceScope, schema *apiextensionsv1.JSONSchemaProps) *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group, Scope: scope,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: kind, ListKind: kind + "List", Plural: plural, Singular: strings.ToLower(kind)},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema:       &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: schema},
			}},
		},
	}
}

// createCRD creates a CRD of one version, deleted when the test ends, and
// waits until that version is served.
func createCRD(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition) schema.GroupVersionResource {
	t.Helper()
	if _, err := env.crds.ApiextensionsV1().CustomResourceDefinitions().Create(t.Context(), crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.crds.ApiextensionsV1().CustomResourceDefinitions().Delete(context.Background(), crd.Name, metav1.DeleteOptions{})
	})
	gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: crd.Spec.Versions[0].Name, Resource: crd.Spec.Names.Plural}
	waitServed(t, gvr)
	return gvr
}

// waitServed waits until a resource can be listed.
func waitServed(t *testing.T, gvr schema.GroupVersionResource) {
	t.Helper()
	eventually(t, 30*time.Second, func() (bool, error) {
		_, err := env.dynamic.Resource(gvr).List(t.Context(), metav1.ListOptions{Limit: 1})
		return err == nil, err
	}, "%s to be served", gvr)
}

func writeRules(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

const probeRules = `apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata:
  name: probe
spec:
  parent:
    apiVersion: probe.example.com/v1
    kind: Probe
  children:
  - id: cm
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: ${parent.metadata.name}-probe
      data:
        value: ${parent.spec.value}
`

// /readyz means "able to work" (contract §6): a rule waiting for its CRD is
// reported by logs and metrics, not by /readyz, which stays 200; /metrics
// serves kgen's and client-go's metric families.
func TestRunReadyzAndMetrics(t *testing.T) {
	ns := newNamespace(t)
	p := startKgen(t, "kgen-probe", "--rules", writeRules(t, probeRules))
	eventually(t, 30*time.Second, func() (bool, error) {
		_, body, err := httpGet(p.metric + "/metrics")
		if err != nil {
			return false, err
		}
		return strings.Contains(body, `kgen_rule_waiting{rule="probe"} 1`), fmt.Errorf("/metrics does not say the rule waits")
	}, "the waiting rule in /metrics")
	if code, body, err := httpGet(p.health + "/readyz"); err != nil || code != http.StatusOK {
		t.Errorf("readyz = %d %q, %v while a rule waits for its CRD; want 200", code, body, err)
	}
	if !strings.Contains(p.output.String(), "Rule is waiting") {
		t.Errorf("the log does not say the rule waits:\n%s", tailOf(p.output.String(), 2000))
	}
	if code, _, err := httpGet(p.health + "/healthz"); err != nil || code != http.StatusOK {
		t.Errorf("healthz = %d, %v; want 200", code, err)
	}
	gvr := newCRD(t, "probe.example.com", "Probe", "probes")
	eventually(t, 30*time.Second, func() (bool, error) {
		code, body, err := httpGet(p.health + "/readyz")
		return err == nil && code == http.StatusOK, fmt.Errorf("readyz = %d %q %v", code, body, err)
	}, "/readyz to turn 200 once the CRD is served and caches synced")
	create(t, gvr, map[string]any{"apiVersion": "probe.example.com/v1", "kind": "Probe",
		"metadata": map[string]any{"name": "p", "namespace": ns}, "spec": map[string]any{"value": "v"}})
	waitFor(t, cmGVR, ns, "p-probe", nil)
	eventually(t, 10*time.Second, func() (bool, error) {
		_, body, err := httpGet(p.metric + "/metrics")
		if err != nil {
			return false, err
		}
		for _, family := range []string{
			// controller-runtime's, per rule (controller="probe").
			`controller_runtime_reconcile_total{controller="probe",result="success"}`,
			`controller_runtime_reconcile_errors_total{controller="probe"}`,
			`controller_runtime_terminal_reconcile_errors_total{controller="probe"}`,
			`controller_runtime_reconcile_panics_total{controller="probe"}`,
			`controller_runtime_reconcile_time_seconds_bucket{controller="probe",le="0.005"}`,
			`controller_runtime_active_workers{controller="probe"}`,
			`controller_runtime_max_concurrent_reconciles{controller="probe"} 8`,
			// client-go's, as controller-runtime labels them.
			`workqueue_depth{controller="kgen",name="kgen",priority=""}`,
			`workqueue_adds_total{controller="kgen",name="kgen"}`,
			`workqueue_queue_duration_seconds_bucket{controller="kgen",name="kgen",le="1e-08"}`,
			`workqueue_work_duration_seconds_bucket{controller="kgen",name="kgen",le="1e-08"}`,
			`workqueue_retries_total{controller="kgen",name="kgen"}`,
			`rest_client_requests_total{code="201",host=`,
			// kgen's own.
			`kgen_build_info{goversion="go`, `kgen_rule_waiting{rule="probe"} 0`,
			`kgen_informer_objects{`, `kgen_api_requests_total{resource="configmaps",verb="patch"}`,
			"go_goroutines", "process_resident_memory_bytes"} {
			if !strings.Contains(body, "\n"+family) {
				return false, fmt.Errorf("/metrics has no %s", family)
			}
		}
		for _, gone := range []string{"kgen_reconcile_total", "kgen_reconcile_duration_seconds", "kgen_reconcile_panics_total"} {
			if strings.Contains(body, "\n"+gone) {
				t.Errorf("/metrics still has %s", gone)
			}
		}
		return true, nil
	}, "/metrics to have controller-runtime's, client-go's and kgen's families")
}

// Invalid rules make run exit non-zero, saying where, before any request.
func TestRunInvalidRules(t *testing.T) {
	start := time.Now()
	bad := writeRules(t, strings.Replace(probeRules, "${parent.spec.value}", "${parent.spec.value +}", 1))
	var out bytes.Buffer
	cmd := exec.Command(env.kgenctl, "run", "--kubeconfig", userKubeconfig(t, "kgen-invalid"), "--rules", bad,
		"--health-probe-bind-address", "0", "--metrics-bind-address", "0")
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("run with invalid rules: %v, want a non-zero exit\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), bad+":17:") || !strings.Contains(out.String(), `"cm"`) {
		t.Errorf("the error should name the file, line and child:\n%s", out.String())
	}
	if reqs := auditOf(t, "kgen-invalid", start); len(reqs) > 0 {
		t.Errorf("run with invalid rules sent %d requests, first %+v", len(reqs), reqs[0])
	}
}

// Leader election: of two replicas only the leader writes; when it is
// killed the other takes over.
func TestRunLeaderElection(t *testing.T) {
	installCRD(t, "examples/webapp/crd.yaml")
	ns := newNamespace(t)
	start := time.Now()
	args := []string{"--rules", filepath.Join(env.root, "e2e/testdata/webapp-rules.yaml"), "--leader-elect",
		"--leader-elect-namespace", ns, "--leader-elect-lease-duration", "4s"}
	procs := map[string]*kgenProcess{"kgen-a": startKgen(t, "kgen-a", args...)}
	procs["kgen-b"] = startKgen(t, "kgen-b", args...)
	create(t, webappGVR, webapp(ns, "first", 1))
	waitFor(t, cmGVR, ns, "first-config", nil)

	// Either replica may win the lease; exactly one may write.
	before := writers(t, ns, start)
	if len(before) != 1 {
		t.Fatalf("want exactly one replica writing children, got %v", before)
	}
	var leaderUser, followerUser string
	for u := range procs {
		if before[u] {
			leaderUser = u
		} else {
			followerUser = u
		}
	}
	// leader_election_master_status says the same.
	for user, want := range map[string]string{leaderUser: "1", followerUser: "0"} {
		eventually(t, 30*time.Second, func() (bool, error) {
			_, body, err := httpGet(procs[user].metric + "/metrics")
			line := `leader_election_master_status{name="kgen"} ` + want
			return err == nil && strings.Contains(body, "\n"+line+"\n"), fmt.Errorf("/metrics has no %s (%v)", line, err)
		}, "%s to report its leadership", user)
	}
	procs[leaderUser].kill()
	killed := time.Now()
	create(t, webappGVR, webapp(ns, "second", 1))
	waitFor(t, cmGVR, ns, "second-config", nil)
	t.Logf("%s took over %s after the leader was killed", followerUser, time.Since(killed).Round(time.Millisecond))
	after := writers(t, ns, killed)
	if !after[followerUser] || len(after) != 1 {
		t.Errorf("after the leader died, writers = %v, want only %s", after, followerUser)
	}
}

// Scenario (contract §7 live changes, §3 "prunes … and nothing else",
// through a failover; a live audit): two replicas with leader election
// serve a rules file; the file changes (a child added, a template value
// changed) and the leader applies it; then the leader is killed. The
// replica that takes over runs the rules the file holds, not those it read
// when it started: it deletes no child the newer rule added and rolls no
// value back. Before, it applied its start's rules until its first poll,
// deleting the ServiceAccounts and writing the old value, then made them
// again.
func TestRunFailoverKeepsRuleChanges(t *testing.T) {
	const group = "failover.example.com"
	ns := newNamespace(t)
	gvr := newScopedCRD(t, group, "Gadget", "gadgets", apiextensionsv1.NamespaceScoped)
	rule := func(value, extra string) string {
		return languageRuleText("failover", group, []string{ns}, `  children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}"}
      data: {v: "`+value+`"}
`+extra)
	}
	file := writeRules(t, rule("1", ""))
	args := []string{"--rules", file, "--rule-objects=false", "--leader-elect",
		"--leader-elect-namespace", ns, "--leader-elect-lease-duration", "4s"}
	users := []string{"kgen-fo-a", "kgen-fo-b"}
	procs := map[string]*kgenProcess{}
	for _, u := range users {
		procs[u] = startKgen(t, u, args...)
	}
	start := time.Now()
	for _, name := range []string{"g1", "g2"} {
		create(t, gvr, gadget(group, ns, name, map[string]any{}))
		waitFor(t, cmGVR, ns, name, nil)
	}
	leader := ""
	eventually(t, 30*time.Second, func() (bool, error) {
		for _, u := range users {
			for _, e := range auditOf(t, u, start) {
				if e.ObjectRef.Namespace == ns && e.ObjectRef.Resource == "configmaps" && isWrite(e.Verb) {
					leader = u
				}
			}
		}
		return leader != "", errors.New("no replica wrote a child")
	}, "the leader to write")

	// The rule changes; the leader applies it.
	if err := os.WriteFile(file, []byte(rule("2", `  - id: account
    template: {apiVersion: v1, kind: ServiceAccount, metadata: {name: "${parent.metadata.name}"}}
`)), 0o644); err != nil {
		t.Fatal(err)
	}
	saGVR := schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}
	uids := map[string]types.UID{}
	for _, name := range []string{"g1", "g2"} {
		sa := waitFor(t, saGVR, ns, name, nil)
		uids[name] = sa.GetUID()
		waitFor(t, cmGVR, ns, name, func(o *unstructured.Unstructured) error {
			if v, _, _ := unstructured.NestedString(o.Object, "data", "v"); v != "2" {
				return fmt.Errorf("data.v = %q", v)
			}
			return nil
		})
	}
	// The other replica has had the time to read the file (it polls every
	// 2 s), and so to apply it, had it followed the file.
	time.Sleep(3 * time.Second)

	procs[leader].kill()
	killed := time.Now()
	other := users[0]
	if other == leader {
		other = users[1]
	}
	create(t, gvr, gadget(group, ns, "g3", map[string]any{}))
	waitFor(t, saGVR, ns, "g3", nil)
	t.Logf("%s took over %s after the leader was killed", other, time.Since(killed).Round(time.Millisecond))
	time.Sleep(3 * time.Second) // and would have read the file by now
	for _, name := range []string{"g1", "g2"} {
		sa := get(t, saGVR, ns, name)
		if sa == nil {
			t.Errorf("ServiceAccount %s, which the newer rule made, is gone after the failover", name)
		} else if sa.GetUID() != uids[name] {
			t.Errorf("ServiceAccount %s, which the newer rule made, was made again after the failover (uid %s, was %s)", name, sa.GetUID(), uids[name])
		}
	}
	for _, e := range auditOf(t, other, killed) {
		if e.ObjectRef.Namespace == ns && isWrite(e.Verb) && e.ObjectRef.Name != "g3" && e.ObjectRef.Resource != "leases" && e.ObjectRef.Resource != "events" {
			t.Errorf("after taking over, %s wrote %s %s %s: the children were up to date with the rules file", other, e.Verb, e.ObjectRef.Resource, e.ObjectRef.Name)
		}
	}
}

// writers returns which of the two replicas' users wrote objects in ns
// (other than leases and events) since a time.
func writers(t *testing.T, ns string, since time.Time) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, user := range []string{"kgen-a", "kgen-b"} {
		for _, e := range auditOf(t, user, since) {
			if e.ObjectRef.Namespace == ns && isWrite(e.Verb) && e.ObjectRef.Resource != "leases" && e.ObjectRef.Resource != "events" {
				out[user] = true
			}
		}
	}
	return out
}

func isWrite(verb string) bool {
	switch verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// SIGKILL during a bulk create of 100 parents, then a restart: kgen
// converges to exactly the desired children, nothing duplicated or orphaned.
func TestRunKilledDuringBulkCreate(t *testing.T) {
	installCRD(t, "examples/webapp/crd.yaml")
	ns := newNamespace(t)
	args := []string{"--rules", filepath.Join(env.root, "e2e/testdata/webapp-rules.yaml")}
	first := startKgen(t, "kgen-kill", args...)
	const parents = 100
	var wg sync.WaitGroup
	names := make(chan int, parents)
	for i := range parents {
		names <- i
	}
	close(names)
	for range 16 {
		wg.Go(func() {
			for i := range names {
				create(t, webappGVR, webapp(ns, fmt.Sprintf("bulk-%03d", i), 1))
			}
		})
	}
	// Kill kgen in the middle of its work: once some children exist.
	eventually(t, 60*time.Second, func() (bool, error) {
		list, err := env.kube.CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "kgen.dev/rule=webapp"})
		if err != nil {
			return false, err
		}
		return len(list.Items) >= 20, fmt.Errorf("%d children so far", len(list.Items))
	}, "kgen to make some children")
	first.kill()
	wg.Wait()
	startKgen(t, "kgen-kill", args...)

	eventually(t, 120*time.Second, func() (bool, error) {
		return converged(t, ns, parents)
	}, "every parent to have exactly its three children")
}

// converged checks that ns holds exactly the children of its WebApps: one
// ConfigMap, Deployment and Service each, owned by a live parent.
func converged(t *testing.T, ns string, parents int) (bool, error) {
	list, err := env.dynamic.Resource(webappGVR).Namespace(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		return false, err
	}
	if len(list.Items) != parents {
		return false, fmt.Errorf("%d parents", len(list.Items))
	}
	uids := map[string]string{}
	for _, p := range list.Items {
		uids[string(p.GetUID())] = p.GetName()
		if g, _, _ := unstructured.NestedInt64(p.Object, "status", "observedGeneration"); g != p.GetGeneration() {
			return false, fmt.Errorf("parent %s: observedGeneration %d", p.GetName(), g)
		}
		// No pods run here, so a converged WebApp waits for its Deployment.
		if c := readyCondition(&p); c == nil || c["reason"] != "ChildNotReady" {
			return false, fmt.Errorf("parent %s: Ready = %v", p.GetName(), c)
		}
	}
	for _, gvr := range []schema.GroupVersionResource{cmGVR, deployGVR, svcGVR} {
		children, err := env.dynamic.Resource(gvr).Namespace(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=kgen"})
		if err != nil {
			return false, err
		}
		perParent := map[string]int{}
		for _, c := range children.Items {
			uid := c.GetLabels()["kgen.dev/parent-uid"]
			if _, ok := uids[uid]; !ok {
				return false, fmt.Errorf("%s %s is an orphan (parent uid %s)", gvr.Resource, c.GetName(), uid)
			}
			perParent[uid]++
		}
		for uid, name := range uids {
			if perParent[uid] != 1 {
				return false, fmt.Errorf("parent %s has %d %s", name, perParent[uid], gvr.Resource)
			}
		}
	}
	return true, nil
}

// Every failed reconcile is logged at the default verbosity, with the
// parent and the cause (contract §6); it is also on the parent's Ready
// condition.
func TestRunLogsFailures(t *testing.T) {
	const group = "logs.example.com"
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	rulesFile := gadgetRule(t, "logs", group, `  children:
  - id: svc
    template:
      apiVersion: v1
      kind: Service
      metadata:
        name: ${parent.metadata.name}
      spec:
        ports: [{port: "${parent.spec.port}"}]
`)
	health, metrics := freePort(t), freePort(t)
	p := startKgenctl(t, "kgen-logs", "run", "--kubeconfig", userKubeconfig(t, "kgen-logs"), "--rules", rulesFile,
		"--health-probe-bind-address", health, "--metrics-bind-address", metrics)
	create(t, gvr, gadget(group, ns, "bad-port", map[string]any{"port": 0}))
	waitFor(t, gvr, ns, "bad-port", func(o *unstructured.Unstructured) error {
		if c := readyCondition(o); c == nil || c["reason"] != "InvalidSpec" {
			return fmt.Errorf("Ready = %v, want InvalidSpec", c)
		}
		return nil
	})
	eventually(t, 10*time.Second, func() (bool, error) {
		out := p.output.String()
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "Reconcile failed") && strings.Contains(line, "bad-port") && strings.Contains(line, "Invalid value") {
				return true, nil
			}
		}
		return false, fmt.Errorf("no log line names the failure:\n%s", tailOf(out, 3000))
	}, "the failure in the log at the default verbosity")
}

// waitingRules is a rule whose kind is never served: kgen waits for it and
// needs no permission on any kind.
const waitingRules = `apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata:
  name: waiting
spec:
  parent:
    apiVersion: never.example.com/v1
    kind: Never
  children:
  - id: cm
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: ${parent.metadata.name}
`

// With --metrics-secure, /metrics is HTTPS and only for callers the API
// server authenticates (ServiceAccount tokens, client certificates of the
// cluster's CA) and allows to get /metrics; /debug/pprof likewise. kgen
// runs as a user with only the RBAC the docs name for it.
func TestRunSecureMetrics(t *testing.T) {
	ctx := t.Context()
	ns := newNamespace(t)
	start := time.Now()
	const kgenUser = "kgen-secure-metrics"
	// What docs/install.md says kgen needs to review callers.
	bind(t, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ns + "-kgen-auth"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: kgenUser}}})
	if _, err := env.kube.RbacV1().RoleBindings("kube-system").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-kgen-auth-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "extension-apiserver-authentication-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: kgenUser}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.kube.RbacV1().RoleBindings("kube-system").Delete(context.Background(), ns+"-kgen-auth-reader", metav1.DeleteOptions{})
	})
	// What it names for following CRDs and APIServices.
	discovery := newClusterRole(t, ns+"-kgen-discovery",
		rbacv1.PolicyRule{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: []string{"list", "watch"}},
		rbacv1.PolicyRule{APIGroups: []string{"apiregistration.k8s.io"}, Resources: []string{"apiservices"}, Verbs: []string{"list", "watch"}})
	bind(t, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: discovery},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: discovery},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: kgenUser}}})
	// A reader of /metrics: a ServiceAccount and a user with a client
	// certificate, both bound to a ClusterRole as the chart's
	// metrics-reader; another ServiceAccount without it.
	reader := newClusterRole(t, ns+"-metrics-reader", rbacv1.PolicyRule{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}})
	for _, sa := range []string{"prometheus", "nobody"} {
		if _, err := env.kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	certUser := ns + "-scraper"
	bind(t, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: reader},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reader},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "prometheus", Namespace: ns},
			{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: certUser}}})
	prometheus, nobody := serviceAccountToken(t, ns, "prometheus"), serviceAccountToken(t, ns, "nobody")
	scraperCert, adminCert := clientCert(t, certUser), clientCert(t, "pprof-admin", "system:masters")
	waitCanGet(t, "system:serviceaccount:"+ns+":prometheus", "/metrics", true)
	waitCanGet(t, certUser, "/metrics", true)

	kubeconfig, err := env.cp.WriteKubeconfig(kgenUser+".kubeconfig", kgenUser)
	if err != nil {
		t.Fatal(err)
	}
	p := startKgenWith(t, kgenUser, kubeconfig, "--rules", writeRules(t, waitingRules), "--rule-objects=false", "--metrics-secure", "--profiling")
	if !strings.HasPrefix(p.metric, "https://") {
		t.Fatalf("metrics at %s, want https", p.metric)
	}
	eventually(t, 30*time.Second, func() (bool, error) {
		code, body, err := httpsGet(p.metric+"/metrics", "", nil)
		return err == nil && code == http.StatusUnauthorized, fmt.Errorf("GET /metrics without credentials = %d %q %v", code, body, err)
	}, "kgen to refuse an unauthenticated scrape")

	tests := []struct {
		name  string
		path  string
		token string
		cert  *tls.Certificate
		want  int
	}{
		{name: "a ServiceAccount without the RBAC", path: "/metrics", token: nobody, want: http.StatusForbidden},
		{name: "a token the API server never issued", path: "/metrics", token: "forged", want: http.StatusUnauthorized},
		{name: "a ServiceAccount bound to the reader role", path: "/metrics", token: prometheus, want: http.StatusOK},
		{name: "a client certificate of a user bound to the reader role", path: "/metrics", cert: scraperCert, want: http.StatusOK},
		{name: "profiling without credentials", path: "/debug/pprof/", want: http.StatusUnauthorized},
		{name: "profiling as a reader of /metrics only", path: "/debug/pprof/", token: prometheus, want: http.StatusForbidden},
		{name: "profiling as a cluster admin", path: "/debug/pprof/", cert: adminCert, want: http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A client certificate works once kgen has read the cluster's
			// client CA.
			eventually(t, 30*time.Second, func() (bool, error) {
				code, body, err := httpsGet(p.metric+tt.path, tt.token, tt.cert)
				if err != nil || code != tt.want {
					return false, fmt.Errorf("GET %s = %d %v, want %d: %s", tt.path, code, err, tt.want, tailOf(body, 300))
				}
				if code == http.StatusOK && tt.path == "/metrics" {
					for _, family := range []string{"kgen_build_info", `kgen_rule_waiting{rule="waiting"} 1`, "go_goroutines"} {
						if !strings.Contains(body, "\n"+family) {
							t.Errorf("/metrics has no %s", family)
						}
					}
				}
				return true, nil
			}, "GET %s to answer %d", tt.path, tt.want)
		})
	}
	// kgen had every permission it needed: none of its requests was refused.
	for _, e := range auditOf(t, kgenUser, start) {
		if e.ResponseStatus.Code == http.StatusForbidden {
			t.Errorf("kgen was refused %s %s %s/%s", e.Verb, e.ObjectRef.Resource, e.ObjectRef.Namespace, e.ObjectRef.Name)
		}
	}
}

// --profiling without --metrics-secure makes run exit non-zero, saying
// why, before any request.
func TestRunProfilingNeedsSecureMetrics(t *testing.T) {
	start := time.Now()
	var out bytes.Buffer
	cmd := exec.Command(env.kgenctl, "run", "--kubeconfig", userKubeconfig(t, "kgen-profiling"), "--rules", writeRules(t, probeRules),
		"--profiling", "--health-probe-bind-address", "0", "--metrics-bind-address", freePort(t))
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("run --profiling: %v, want a non-zero exit\n%s", err, out.String())
	}
	if want := "--profiling needs --metrics-secure"; !strings.Contains(out.String(), want) {
		t.Errorf("the error does not say %q:\n%s", want, out.String())
	}
	if reqs := auditOf(t, "kgen-profiling", start); len(reqs) > 0 {
		t.Errorf("run --profiling sent %d requests, first %+v", len(reqs), reqs[0])
	}
}

// httpsGet gets url over HTTPS, trusting kgen's self-signed certificate,
// with a bearer token and a client certificate if given.
func httpsGet(url, token string, cert *tls.Certificate) (int, string, error) {
	config := &tls.Config{InsecureSkipVerify: true}
	if cert != nil {
		config.Certificates = []tls.Certificate{*cert}
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: config}, Timeout: 30 * time.Second}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// clientCert returns a client certificate for a user and groups, signed by
// the control plane's client CA.
func clientCert(t *testing.T, user string, groups ...string) *tls.Certificate {
	t.Helper()
	config, err := env.cp.UserConfig(user, groups...)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(config.CertData, config.KeyData)
	if err != nil {
		t.Fatal(err)
	}
	return &cert
}

// serviceAccountToken returns a token of a ServiceAccount from the
// TokenRequest API, as a pod would have.
func serviceAccountToken(t *testing.T, ns, name string) string {
	t.Helper()
	token, err := env.kube.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return token.Status.Token
}

// newClusterRole creates a ClusterRole, deleted when the test ends, and
// returns its name.
func newClusterRole(t *testing.T, name string, rules ...rbacv1.PolicyRule) string {
	t.Helper()
	if _, err := env.kube.RbacV1().ClusterRoles().Create(t.Context(), &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.kube.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// bind creates a ClusterRoleBinding, deleted when the test ends.
func bind(t *testing.T, b *rbacv1.ClusterRoleBinding) {
	t.Helper()
	if _, err := env.kube.RbacV1().ClusterRoleBindings().Create(t.Context(), b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), b.Name, metav1.DeleteOptions{})
	})
}

// waitCanGet waits until the API server's authorizer answers want to
// whether user may get a non-resource URL.
func waitCanGet(t *testing.T, user, path string, want bool) {
	t.Helper()
	eventually(t, 10*time.Second, func() (bool, error) {
		review, err := env.kube.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: []string{"system:authenticated"},
				NonResourceAttributes: &authorizationv1.NonResourceAttributes{Verb: "get", Path: path}},
		}, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return review.Status.Allowed == want, nil
	}, "%s to be allowed=%t to get %s", user, want, path)
}

// Rules that would be unsafe are rejected when kgen starts, naming the
// field, before any request: a child in a namespace outside the rule's
// allowCrossNamespace list (contract §11), and a status field that reads
// what changes with every write (contract §6).
func TestRunRejectsUnsafeRules(t *testing.T) {
	for _, tt := range []struct {
		name, spec, want string
	}{{
		name: "cross-namespace outside the list",
		spec: `  allowCrossNamespace: [shared]
  children:
  - id: cm
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: x, namespace: kube-system}
`,
		want: "metadata.namespace",
	}, {
		name: "allowCrossNamespace true",
		spec: `  allowCrossNamespace: true
  children:
  - id: cm
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: x}
`,
		want: "allowCrossNamespace",
	}, {
		name: "self-triggering status",
		spec: `  children:
  - id: cm
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: x}
  status:
    version: ${parent.metadata.resourceVersion}
`,
		want: "resourceVersion",
	}} {
		t.Run(tt.name, func(t *testing.T) {
			user := "kgen-unsafe-" + strings.ReplaceAll(tt.name, " ", "-")
			start := time.Now()
			file := writeRules(t, "apiVersion: kgen.dev/v1alpha1\nkind: Rule\nmetadata: {name: unsafe}\nspec:\n  parent: {apiVersion: v1, kind: Namespace}\n"+tt.spec)
			var out bytes.Buffer
			cmd := exec.Command(env.kgenctl, "run", "--kubeconfig", userKubeconfig(t, user), "--rules", file,
				"--health-probe-bind-address", "0", "--metrics-bind-address", "0")
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() == 0 {
				t.Fatalf("run: %v, want a non-zero exit\n%s", err, out.String())
			}
			if !strings.Contains(out.String(), file+":") || !strings.Contains(out.String(), tt.want) {
				t.Errorf("the error should name the file and %s:\n%s", tt.want, out.String())
			}
			if reqs := auditOf(t, user, start); len(reqs) > 0 {
				t.Errorf("run with unsafe rules sent %d requests", len(reqs))
			}
		})
	}
}
