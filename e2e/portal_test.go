//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	manifestpkg "kgen.dev/kgen/internal/manifest"
)

// portalApp is the portal's JSON for one app, as its users read it.
type portalApp struct {
	Name               string         `json:"name"`
	Ready              bool           `json:"ready"`
	Reason             string         `json:"reason"`
	Message            string         `json:"message"`
	ObservedGeneration int64          `json:"observedGeneration"`
	Generation         int64          `json:"generation"`
	Spec               map[string]any `json:"spec"`
	Status             map[string]any `json:"status"`
}

// portalError is the portal's JSON for an error.
type portalError struct {
	Error  string `json:"error"`
	Causes []struct {
		Field   string `json:"field"`
		Message string `json:"message"`
	} `json:"causes"`
}

// TestPortal runs examples/portal as a user would (the binary, a kubeconfig,
// the ServiceAccount of its rbac.yaml) next to kgen with the WebApp
// example's rules, and drives it over HTTP: the portal writes the parent,
// kgen its children, and the portal reports the parent's Ready condition.
func TestPortal(t *testing.T) {
	ctx := t.Context()
	installCRD(t, "examples/webapp/crd.yaml")
	ns := newNamespace(t)
	startController(t, nil, exampleWebAppRulesIn(t, ns)).waitReady(t)

	// The portal's identity, from its rbac.yaml, may do what the portal
	// does with WebApps, and nothing else.
	createManifest(t, "examples/portal/rbac.yaml", ns)
	user := "system:serviceaccount:" + ns + ":kgen-portal"
	for _, verb := range []string{"get", "list", "create", "patch"} {
		waitCan(t, user, true, authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: "example.com", Resource: "webapps"})
	}
	for _, attrs := range []authorizationv1.ResourceAttributes{
		{Namespace: ns, Verb: "create", Resource: "configmaps"},
		{Namespace: ns, Verb: "create", Group: "apps", Resource: "deployments"},
		{Namespace: ns, Verb: "get", Resource: "secrets"},
		{Namespace: ns, Verb: "delete", Group: "example.com", Resource: "webapps"},
		{Namespace: ns, Verb: "update", Group: "example.com", Resource: "webapps"},
		{Namespace: ns, Verb: "patch", Group: "example.com", Resource: "webapps", Subresource: "status"},
		{Namespace: "default", Verb: "create", Group: "example.com", Resource: "webapps"},
	} {
		waitCan(t, user, false, attrs)
	}

	start := time.Now()
	portal := startPortal(t, serviceAccountKubeconfig(t, ns, "kgen-portal"), "--namespace", ns)
	eventually(t, 30*time.Second, func() (bool, error) {
		code, body, err := httpGet(portal.url + "/apps")
		return err == nil && code == http.StatusOK, fmt.Errorf("GET /apps = %d %s %v", code, body, err)
	}, "the portal to serve")

	// Create: 201, and kgen makes the children.
	code, body := postApp(t, portal.url, `{"name": "shop", "image": "nginx:1.27", "replicas": 2, "port": 8080}`)
	if code != http.StatusCreated {
		t.Fatalf("POST /apps = %d, want 201:\n%s", code, body)
	}
	if app := decodeJSON[portalApp](t, body); app.Name != "shop" || app.Spec["image"] != "nginx:1.27" {
		t.Errorf("POST /apps answered %+v", app)
	}
	parent := waitFor(t, webappGVR, ns, "shop", nil)
	if l := parent.GetLabels(); l["tier"] != "web" {
		t.Errorf("the WebApp's labels = %v, want tier=web, which the rule selects", l)
	}
	var managers []string
	for _, m := range parent.GetManagedFields() {
		managers = append(managers, m.Manager+"/"+string(m.Operation))
	}
	if !slices.Contains(managers, "kgen-portal/Apply") || slices.Contains(managers, "kgen-portal/Update") {
		t.Errorf("managedFields = %v, want the portal's fields written by server-side apply only", managers)
	}
	waitFor(t, cmGVR, ns, "shop-config", func(o *unstructured.Unstructured) error { return expect(o, "nginx:1.27", "data", "image") })
	waitFor(t, deployGVR, ns, "shop", func(o *unstructured.Unstructured) error { return expect(o, int64(2), "spec", "replicas") })
	waitFor(t, svcGVR, ns, "shop", nil)

	// No pods run here: kgen reports the Deployment not ready, and the
	// portal says so.
	waitApp(t, portal.url, "shop", func(a portalApp) error {
		if a.Ready || a.Reason != "ChildNotReady" || a.Generation != 1 || a.ObservedGeneration != 1 {
			return fmt.Errorf("ready=%t reason=%s generation=%d observedGeneration=%d, want false ChildNotReady 1 1", a.Ready, a.Reason, a.Generation, a.ObservedGeneration)
		}
		if !strings.Contains(a.Message, "deployment") || a.Status["configName"] != "shop-config" {
			return fmt.Errorf("message %q, status %v", a.Message, a.Status)
		}
		return nil
	})

	// Update: 200, and the Deployment follows the new image.
	code, body = postApp(t, portal.url, `{"name": "shop", "image": "nginx:1.28", "replicas": 2, "port": 8080}`)
	if code != http.StatusOK {
		t.Fatalf("POST /apps again = %d, want 200:\n%s", code, body)
	}
	waitFor(t, deployGVR, ns, "shop", func(o *unstructured.Unstructured) error {
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		if len(containers) != 1 || containers[0].(map[string]any)["image"] != "nginx:1.28" {
			return fmt.Errorf("containers = %v, want one running nginx:1.28", containers)
		}
		return nil
	})
	waitApp(t, portal.url, "shop", func(a portalApp) error {
		if a.Generation != 2 || a.ObservedGeneration != 2 || a.Reason != "ChildNotReady" {
			return fmt.Errorf("generation=%d observedGeneration=%d reason=%s, want 2 2 ChildNotReady", a.Generation, a.ObservedGeneration, a.Reason)
		}
		return nil
	})

	// Bad requests are refused, naming the field, and reach no API.
	for _, bad := range []struct{ body, field string }{
		{`{"name": "Shop", "image": "nginx", "port": 80}`, "name"},
		{`{"name": "shop", "image": "", "port": 80}`, "image"},
		{`{"name": "shop", "image": "nginx", "replicas": -1, "port": 80}`, "replicas"},
		{`{"name": "shop", "image": "nginx", "port": 0}`, "port"},
		{`{"name": "shop", "image": "nginx", "port": 80, "colour": "blue"}`, "colour"},
		{`{"name": "shop", "image": "nginx", "port": "80"}`, "port"},
	} {
		code, body := postApp(t, portal.url, bad.body)
		e := decodeJSON[portalError](t, body)
		if code != http.StatusBadRequest || len(e.Causes) != 1 || e.Causes[0].Field != bad.field || !strings.Contains(e.Error, bad.field+": ") {
			t.Errorf("POST %s = %d %s, want 400 naming %s", bad.body, code, body, bad.field)
		}
	}
	if code, body, err := httpGet(portal.url + "/apps/nothing"); err != nil || code != http.StatusNotFound ||
		decodeJSON[portalError](t, body).Error != `app "nothing" not found in namespace `+ns {
		t.Errorf("GET /apps/nothing = %d %s %v, want 404 saying so", code, body, err)
	}

	// The list and the page show the app.
	code, body, err := httpGet(portal.url + "/apps")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /apps = %d %s %v", code, body, err)
	}
	if list := decodeJSON[struct{ Items []portalApp }](t, body); len(list.Items) != 1 || list.Items[0].Name != "shop" {
		t.Errorf("GET /apps = %s, want the one app", body)
	}
	resp, err := http.Get(portal.url + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Errorf("GET / = %d %s %v", resp.StatusCode, resp.Header.Get("Content-Type"), err)
	}
	for _, want := range []string{`<form id="app-form">`, `name="image"`, "<td>shop</td><td>nginx:1.28</td>"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the page has no %q:\n%s", want, page)
		}
	}

	// The Deployment reports its replicas available: kgen turns Ready
	// True, and so does the portal.
	deploy := get(t, deployGVR, ns, "shop")
	for _, f := range []string{"availableReplicas", "replicas", "readyReplicas"} {
		_ = unstructured.SetNestedField(deploy.Object, int64(2), "status", f)
	}
	if _, err := env.dynamic.Resource(deployGVR).Namespace(ns).UpdateStatus(ctx, deploy, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitApp(t, portal.url, "shop", func(a portalApp) error {
		if !a.Ready || a.Reason != "Ready" {
			return fmt.Errorf("ready=%t reason=%s message=%q, want ready", a.Ready, a.Reason, a.Message)
		}
		return nil
	})

	// Everything the portal asked of the API server was about WebApps in
	// its namespace, and allowed.
	requests := auditOf(t, user, start)
	verbs := map[string]bool{}
	for _, e := range requests {
		verbs[e.Verb] = true
		if e.ObjectRef.Resource != "webapps" || e.ObjectRef.Namespace != ns || e.ResponseStatus.Code == http.StatusForbidden {
			t.Errorf("the portal sent %s %s %s/%s (subresource %q): %d", e.Verb, e.ObjectRef.Resource,
				e.ObjectRef.Namespace, e.ObjectRef.Name, e.ObjectRef.Subresource, e.ResponseStatus.Code)
		}
	}
	if !verbs["patch"] || !verbs["get"] || !verbs["list"] {
		t.Errorf("the portal's requests had the verbs %v, want get, list and patch (its applies)", verbs)
	}

	// SIGTERM: the portal shuts down cleanly.
	portal.stop(t)
}

// createManifest creates the objects of a YAML file of the repository in
// namespace ns, in place of the namespace team-a that the file names.
func createManifest(t *testing.T, file, ns string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(env.root, file))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(data), "namespace: team-a", "namespace: "+ns)
	if text == string(data) {
		t.Fatalf("%s no longer names the namespace team-a", file)
	}
	objs, err := manifestpkg.Decode(strings.NewReader(text))
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	m := newMapper(t)
	for _, obj := range objs {
		mapping, err := m.ResourceFor(obj.GroupVersionKind())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := env.dynamic.Resource(mapping.GroupVersionResource()).Namespace(ns).Create(t.Context(), obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: create %s %s: %v", file, obj.GetKind(), obj.GetName(), err)
		}
	}
}

// serviceAccountKubeconfig writes a kubeconfig with a token of the
// ServiceAccount, from the TokenRequest API, as a pod of it would have.
func serviceAccountKubeconfig(t *testing.T, ns, name string) string {
	t.Helper()
	token, err := env.kube.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	config := clientcmdapi.NewConfig()
	config.Clusters["e2e"] = &clientcmdapi.Cluster{Server: env.cp.URL, CertificateAuthorityData: env.cp.CAData()}
	config.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token.Status.Token}
	config.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: name}
	config.CurrentContext = "e2e"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*config, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// portalProcess is examples/portal running as a subprocess.
type portalProcess struct {
	cmd    *exec.Cmd
	output *syncBuffer
	done   chan struct{}
	err    error
	url    string
}

// startPortal builds examples/portal and runs it with a kubeconfig and more
// arguments; the test's end stops it, if stop did not.
func startPortal(t *testing.T, kubeconfig string, args ...string) *portalProcess {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "portal")
	build := exec.Command("go", "build", "-o", bin, "./examples/portal")
	build.Dir = env.root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build examples/portal: %v\n%s", err, out)
	}
	addr := freePort(t)
	p := &portalProcess{output: &syncBuffer{}, done: make(chan struct{}), url: "http://" + addr}
	p.cmd = exec.Command(bin, append([]string{"--kubeconfig", kubeconfig, "--listen", addr, "-v", "2"}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.output, p.output
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("examples/portal:\n%s", tailOf(p.output.String(), 6000))
		}
	})
	return p
}

// stop sends SIGTERM and checks that the portal exits 0, saying it shut down.
func (p *portalProcess) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the portal did not exit within 30s of SIGTERM")
	}
	if p.err != nil || !strings.Contains(p.output.String(), `"Shut down"`) {
		t.Errorf("after SIGTERM the portal exited with %v; its output:\n%s", p.err, tailOf(p.output.String(), 2000))
	}
}

// postApp posts a body to the portal's /apps and returns the answer.
func postApp(t *testing.T, base, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(base+"/apps", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(data)
}

// waitApp polls GET /apps/{name} until check accepts the app.
func waitApp(t *testing.T, base, name string, check func(portalApp) error) {
	t.Helper()
	eventually(t, 30*time.Second, func() (bool, error) {
		code, body, err := httpGet(base + "/apps/" + name)
		if err != nil {
			return false, err
		}
		if code != http.StatusOK {
			return false, fmt.Errorf("GET /apps/%s = %d %s", name, code, body)
		}
		var app portalApp
		if err := json.Unmarshal([]byte(body), &app); err != nil {
			return false, err
		}
		if err := check(app); err != nil {
			return false, err
		}
		return true, nil
	}, "the portal's app %s", name)
}

func decodeJSON[T any](t *testing.T, body string) T {
	t.Helper()
	var out T
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Errorf("decode %T from %q: %v", out, body, err)
	}
	return out
}
