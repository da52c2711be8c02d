//go:build e2e

package e2e

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kgen.dev/kgen/internal/golden"
)

// kgenctlAs runs kgenctl with exactly the given arguments, no kubeconfig
// but the one they name, and a home and environment of its own.
func kgenctlAs(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(t.Context(), env.kgenctl, args...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "KUBECONFIG=", "KUBERNETES_SERVICE_HOST=")
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

func wantExitError(t *testing.T, err error, stderr string) {
	t.Helper()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("want a non-zero exit, got %v; stderr:\n%s", err, stderr)
	}
}

// --as impersonates as kubectl's does: the API server sees the request as
// made by the impersonated user, authenticated as the kubeconfig's.
func TestCLIImpersonation(t *testing.T) {
	admin := userKubeconfig(t, "cli-impersonator")
	start := time.Now()
	out, stderr, err := kgenctlAs(t, "gvk-to-gvr", "deploy", "--kubeconfig", admin, "--as", "someone", "--as-group", "devs")
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	golden.Check(t, filepath.Join("testdata", "gvk-to-gvr-deploy.golden"), out)
	reqs := auditOf(t, "cli-impersonator", start)
	if len(reqs) == 0 {
		t.Fatal("the audit log has no request of cli-impersonator")
	}
	for _, e := range reqs {
		if e.ImpersonatedUser == nil || e.ImpersonatedUser.Username != "someone" || !slices.Contains(e.ImpersonatedUser.Groups, "devs") {
			t.Errorf("%s %s was made as %+v, want someone in devs impersonated by cli-impersonator", e.Verb, e.RequestURI, e.ImpersonatedUser)
		}
	}
}

// Without the right to impersonate, --as fails as kubectl's does: the API
// server's Forbidden, and a non-zero exit.
func TestCLIImpersonationForbidden(t *testing.T) {
	path, err := env.cp.WriteKubeconfig("cli-nobody.kubeconfig", "cli-nobody")
	if err != nil {
		t.Fatal(err)
	}
	// Discovery itself is open to every authenticated user.
	if _, stderr, err := kgenctlAs(t, "gvk-to-gvr", "deploy", "--kubeconfig", path); err != nil {
		t.Fatalf("without --as: %v: %s", err, stderr)
	}
	_, stderr, err := kgenctlAs(t, "gvk-to-gvr", "deploy", "--kubeconfig", path, "--as", "someone")
	wantExitError(t, err, stderr)
	// The API server's own words, which client-go's discovery client loses
	// (kubectl says "Error from server (Forbidden): unknown").
	for _, want := range []string{"Error from server (Forbidden): ", `User "cli-nobody" cannot impersonate`} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr:\n%s\nwant it to contain:\n%s", stderr, want)
		}
	}
}

// --server and --token work without any kubeconfig: a ServiceAccount's
// token from the TokenRequest API resolves kinds (discovery is open to
// authenticated users), and the API server sees the ServiceAccount.
func TestCLIServerAndToken(t *testing.T) {
	ns := newNamespace(t)
	ctx := t.Context()
	if _, err := env.kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "resolver"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var tr *authenticationv1.TokenRequest
	eventually(t, 30*time.Second, func() (bool, error) {
		var err error
		tr, err = env.kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "resolver", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		return err == nil, err
	}, "a token for the ServiceAccount")
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, env.cp.CAData(), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, stderr, err := kgenctlAs(t, "gvk-to-gvr", "deploy", "--server", env.cp.URL, "--certificate-authority", ca, "--token", tr.Status.Token)
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	golden.Check(t, filepath.Join("testdata", "gvk-to-gvr-deploy.golden"), out)
	if reqs := auditOf(t, "system:serviceaccount:"+ns+":resolver", start); len(reqs) == 0 {
		t.Error("the audit log has no request of the ServiceAccount")
	}

	// A token the API server does not accept is its Unauthorized, in
	// kubectl's words.
	_, stderr, err = kgenctlAs(t, "gvk-to-gvr", "deploy", "--server", env.cp.URL, "--certificate-authority", ca, "--token", "not-a-token")
	wantExitError(t, err, stderr)
	if !strings.Contains(stderr, "error: You must be logged in to the server (") {
		t.Errorf("stderr should say, as kubectl, that the server wants credentials:\n%s", stderr)
	}
}

// -n is accepted and changes nothing in resolving a kind; a bad
// --request-timeout fails before any request; -o name and -o jsonpath print
// a live resolution.
func TestCLIConnectionAndOutputFlags(t *testing.T) {
	installCRD(t, "e2e/testdata/octopus-crd.yaml")
	kubeconfig := userKubeconfig(t, "cli-flags")
	run := func(t *testing.T, args ...string) string {
		t.Helper()
		out, stderr, err := kgenctlAs(t, append([]string{"--kubeconfig", kubeconfig}, args...)...)
		if err != nil {
			t.Fatalf("kgenctl %s: %v: %s", strings.Join(args, " "), err, stderr)
		}
		return out
	}
	t.Run("-n", func(t *testing.T) {
		golden.Check(t, filepath.Join("testdata", "gvk-to-gvr-deploy.golden"), run(t, "gvk-to-gvr", "deploy", "-n", "kube-system"))
	})
	t.Run("--request-timeout", func(t *testing.T) {
		start := time.Now()
		_, stderr, err := kgenctlAs(t, "gvk-to-gvr", "deploy", "--kubeconfig", userKubeconfig(t, "cli-timeout"), "--request-timeout", "soon")
		wantExitError(t, err, stderr)
		if !strings.Contains(stderr, `invalid --request-timeout "soon"`) {
			t.Errorf("stderr should name the flag and value:\n%s", stderr)
		}
		if reqs := auditOf(t, "cli-timeout", start); len(reqs) > 0 {
			t.Errorf("a bad --request-timeout still sent %d requests", len(reqs))
		}
		if out := run(t, "gvk-to-gvr", "deploy", "-o", "name", "--request-timeout", "30s"); out != "deployments.apps\n" {
			t.Errorf("with a good --request-timeout: %q", out)
		}
	})
	for _, tt := range []struct{ ref, format, want string }{
		{"deploy", "name", "deployments.apps\n"},
		{"cm", "name", "configmaps\n"},
		{"events", "name", "events\nevents.events.k8s.io\n"},
		{"oct", "jsonpath={.group}/{.version}/{.resource} {.namespaced}", "zoo.example.com/v1/octopodes true"},
		{"events", "jsonpath={[*].group}", " events.k8s.io"},
	} {
		t.Run(tt.ref+" -o "+tt.format, func(t *testing.T) {
			if out := run(t, "gvk-to-gvr", tt.ref, "-o", tt.format); out != tt.want {
				t.Errorf("output %q, want %q", out, tt.want)
			}
		})
	}
}

// kgenctl run's -n is the namespace of its Lease when
// --leader-elect-namespace is not given.
func TestRunLeaderElectionNamespace(t *testing.T) {
	ns := newNamespace(t)
	startKgen(t, "kgen-lease-ns", "--rules", writeRules(t, probeRules), "--leader-elect", "-n", ns)
	eventually(t, 60*time.Second, func() (bool, error) {
		lease, err := env.kube.CoordinationV1().Leases(ns).Get(t.Context(), "kgen", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "", nil
	}, "kgenctl run -n %s to hold the Lease kgen there", ns)
}
