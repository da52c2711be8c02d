//go:build e2e

package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"kgen.dev/kgen/internal/controlplane"
)

// env is the control plane every test shares, and clients for it.
var env struct {
	cp      *controlplane.ControlPlane
	config  *rest.Config
	kube    kubernetes.Interface
	dynamic dynamic.Interface
	crds    apiextensions.Interface
	// kgenctl is the path of a kgenctl binary built for these tests.
	kgenctl string
	// root is the repository's top folder.
	root string
}

func TestMain(m *testing.M) {
	flag.Parse()
	code, err := setup(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e setup:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func setup(m *testing.M) (int, error) {
	ctx := context.Background()
	root, err := filepath.Abs("..")
	if err != nil {
		return 0, err
	}
	env.root = root
	bin, err := controlplane.BinDir(root)
	if err != nil {
		return 0, err
	}
	tmp, err := os.MkdirTemp("", "kgen-e2e-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(tmp)
	env.kgenctl = filepath.Join(tmp, "kgenctl")
	build := exec.Command("go", "build", "-o", env.kgenctl, "./cmd/kgenctl")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return 0, fmt.Errorf("build kgenctl: %w", err)
	}
	start := time.Now()
	cp, err := controlplane.Start(ctx, controlplane.Config{
		BinDir:            bin,
		Dir:               filepath.Join(tmp, "controlplane"),
		ControllerManager: true,
		AuditPolicy:       auditPolicy,
		// As OpenShift and other hardened clusters do: setting
		// blockOwnerDeletion on a child then needs update on the parent's
		// finalizers, which kgenctl rbac must grant (TestHelmInstall).
		APIServerArgs: []string{"--enable-admission-plugins=OwnerReferencesPermissionEnforcement"},
	})
	if err != nil {
		return 0, err
	}
	defer cp.Stop()
	fmt.Fprintf(os.Stderr, "e2e: control plane ready in %s at %s\n", time.Since(start).Round(time.Millisecond), cp.URL)
	env.cp = cp
	if env.config, err = cp.RESTConfig(); err != nil {
		return 0, err
	}
	env.config.QPS, env.config.Burst = 200, 400
	env.kube = kubernetes.NewForConfigOrDie(env.config)
	env.dynamic = dynamic.NewForConfigOrDie(env.config)
	env.crds = apiextensions.NewForConfigOrDie(env.config)
	code := m.Run()
	if code != 0 {
		// Keep the control plane's logs where CI prints them.
		if dst := os.Getenv("KGEN_E2E_ARTIFACTS"); dst != "" {
			_ = exec.Command("cp", "-r", cp.Dir, dst).Run()
		}
	}
	return code, nil
}

// auditPolicy records every request's metadata (user, verb, resource), so
// tests can count what a client really sent.
var auditPolicy = []byte(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
`)

// installCRD creates the CRD in the file (relative to the repository root)
// unless it exists, waits until it is established, and returns it.
func installCRD(t *testing.T, file string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(env.root, file))
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	ctx := t.Context()
	_, err = env.crds.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create CRD %s: %v", crd.Name, err)
	}
	eventually(t, 30*time.Second, func() (bool, error) {
		got, err := env.crds.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				crd = got
				return true, nil
			}
		}
		return false, nil
	}, "CRD %s established", crd.Name)
	return crd
}

// updateCRD changes the named CRD with change, from its live version, and
// tries again until the API server takes the update (another writer, such
// as the API server's own status controller, may have changed it since the
// read).
func updateCRD(t *testing.T, name string, change func(*apiextensionsv1.CustomResourceDefinition)) {
	t.Helper()
	crds := env.crds.ApiextensionsV1().CustomResourceDefinitions()
	eventually(t, 30*time.Second, func() (bool, error) {
		crd, err := crds.Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		change(crd)
		_, err = crds.Update(t.Context(), crd, metav1.UpdateOptions{})
		return err == nil, err
	}, "the CRD %s to be updated", name)
}

// eventually polls cond every 100ms until it returns true, and fails the
// test with the last error it returned if timeout passes first. The error
// only explains a false; it does not stop the polling.
func eventually(t *testing.T, timeout time.Duration, cond func() (bool, error), format string, args ...any) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		ok, err := cond()
		last = err
		return ok, nil
	})
	if err != nil {
		t.Fatalf("waited %s for %s; last error: %v", timeout, fmt.Sprintf(format, args...), last)
	}
}
