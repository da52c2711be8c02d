package charts

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"kgen.dev/kgen/internal/golden"
	"kgen.dev/kgen/internal/manifest"
	"kgen.dev/kgen/rules"
)

var helmOnce struct {
	sync.Once
	path string
	err  error
}

// helmBinary returns the helm that hack/tools.sh builds (once, then cached),
// or the one in $KGEN_TOOLS_BIN.
func helmBinary(t *testing.T) string {
	t.Helper()
	helmOnce.Do(func() {
		if dir := os.Getenv("KGEN_TOOLS_BIN"); dir != "" {
			helmOnce.path = filepath.Join(dir, "helm")
			return
		}
		var stdout, stderr bytes.Buffer
		cmd := exec.Command("../hack/tools.sh", "helm")
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			helmOnce.err = errors.New("hack/tools.sh helm: " + err.Error() + ": " + stderr.String())
			return
		}
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		helmOnce.path = filepath.Join(lines[len(lines)-1], "helm")
	})
	if helmOnce.err != nil {
		t.Fatal(helmOnce.err)
	}
	return helmOnce.path
}

// helm runs helm with a home of its own and returns its stdout; stderr is
// part of the error.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(helmBinary(t), args...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home, "KUBECONFIG="+filepath.Join(home, "none"))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), errors.New(err.Error() + ": " + stderr.String())
	}
	return stdout.String(), nil
}

// The values files the tests render the chart with: the defaults, and every
// knob turned with the WebApp example's rules and generated RBAC.
var valueSets = []struct {
	name string
	args []string
}{
	{name: "default"},
	{name: "custom", args: []string{
		"-f", "../examples/webapp/rbac-values.yaml",
		"--set-file", "rules.webapp=../examples/webapp/rules.yaml",
		"-f", "testdata/custom-values.yaml",
	}},
}

func TestLint(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			out, err := helm(t, append([]string{"lint", "kgen", "--strict"}, vs.args...)...)
			if err != nil {
				t.Fatalf("helm lint: %v\n%s", err, out)
			}
		})
	}
}

// TestTemplate renders the chart and compares it with
// testdata/<values>.golden.yaml, then checks what must hold of every
// rendering: a restricted pod, no wildcard in RBAC, valid rules.
func TestTemplate(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			out, err := helm(t, append([]string{"template", "kgen", "kgen", "--namespace", "kgen-system"}, vs.args...)...)
			if err != nil {
				t.Fatalf("helm template: %v", err)
			}
			golden.Check(t, filepath.Join("testdata", vs.name+".golden.yaml"), out)
			objs := decode(t, out)
			checkObjects(t, objs)
		})
	}
}

// checkObjects checks the chart's invariants on rendered objects.
func checkObjects(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
		if o.GetLabels()["app.kubernetes.io/name"] != "kgen" || o.GetLabels()["app.kubernetes.io/instance"] == "" {
			t.Errorf("%s %s lacks the app.kubernetes.io labels: %v", o.GetKind(), o.GetName(), o.GetLabels())
		}
		switch o.GetKind() {
		case "Deployment":
			checkDeployment(t, o)
		case "ClusterRole", "Role":
			var role rbacv1.ClusterRole
			convert(t, o, &role)
			for _, r := range role.Rules {
				for _, s := range slices.Concat(r.APIGroups, r.Resources, r.Verbs) {
					if s == "*" {
						t.Errorf("%s %s grants a wildcard: %+v", o.GetKind(), o.GetName(), r)
					}
				}
			}
		case "ConfigMap":
			var cm corev1.ConfigMap
			convert(t, o, &cm)
			for file, text := range cm.Data {
				if _, err := rules.Parse(file, []byte(text), rules.Options{}); err != nil {
					t.Errorf("ConfigMap %s: %s does not hold valid rules: %v\n%s", cm.Name, file, err, text)
				}
			}
		}
	}
	for _, kind := range []string{"Deployment", "ServiceAccount", "ConfigMap", "Service", "PodDisruptionBudget", "Role", "RoleBinding"} {
		if kinds[kind] == 0 {
			t.Errorf("no %s rendered", kind)
		}
	}
}

func checkDeployment(t *testing.T, o *unstructured.Unstructured) {
	t.Helper()
	var d appsv1.Deployment
	convert(t, o, &d)
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("Deployment has %d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
		t.Error("the pod does not require a non-root user")
	}
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Fatal("the container has no securityContext")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("the container allows privilege escalation")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("the container's root file system is writable")
	case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
		t.Error("the container may run as root")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}):
		t.Error("the container keeps capabilities")
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Error("the container has no RuntimeDefault seccomp profile")
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Error("no liveness probe on /healthz")
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Error("no readiness probe on /readyz")
	}
	if !slices.Contains(c.Args, "--rules=/etc/kgen/rules") || c.Args[0] != "run" {
		t.Errorf("the container does not run kgenctl run with the mounted rules: %q", c.Args)
	}
	if !slices.Contains(c.Args, "--leader-elect=true") || !slices.Contains(c.Args, "--leader-elect-namespace=kgen-system") {
		t.Errorf("leader election is not on in the release namespace: %q", c.Args)
	}
	if c.Resources.Requests.Memory().IsZero() {
		t.Error("no memory request")
	}
}

func TestTemplateErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{
			name: "a wildcard verb",
			args: []string{"--set", "rbac.extraRules[0].apiGroups[0]=", "--set", "rbac.extraRules[0].resources[0]=pods", "--set", "rbac.extraRules[0].verbs[0]=*"},
			want: `rbac.extraRules[0].verbs holds "*": kgen never needs a wildcard`,
		},
		{
			name: "a wildcard resource in a namespace's Role",
			args: []string{"--set", "rbac.rules.namespaces.team-a[0].apiGroups[0]=apps", "--set", "rbac.rules.namespaces.team-a[0].resources[0]=*", "--set", "rbac.rules.namespaces.team-a[0].verbs[0]=get"},
			want: `rbac.rules.namespaces.team-a[0].resources holds "*"`,
		},
		{
			name: "a misspelt value",
			args: []string{"--set", "rbac.rule=x"},
			want: "additional properties 'rule' not allowed",
		},
		{
			name: "a policy rule without verbs",
			args: []string{"--set", "rbac.extraRules[0].resources[0]=pods"},
			want: "missing property 'verbs'",
		},
		{
			name: "a bad log format",
			args: []string{"--set", "controller.logFormat=xml"},
			want: "/controller/logFormat",
		},
		{
			name: "profiling without secure metrics",
			args: []string{"--set", "metrics.secure=false", "--set", "controller.extraArgs[0]=--profiling"},
			want: "--profiling in controller.extraArgs needs metrics.secure",
		},
		{
			name: "a metrics certificate without secure metrics",
			args: []string{"--set", "metrics.secure=false", "--set", "metrics.certSecret=tls"},
			want: "metrics.certSecret needs metrics.secure",
		},
		{
			name: "a metrics reader ServiceAccount without a namespace",
			args: []string{"--set", "metrics.readers[0].kind=ServiceAccount", "--set", "metrics.readers[0].name=prometheus"},
			want: "metrics.readers: a ServiceAccount needs a namespace",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := helm(t, append([]string{"template", "kgen", "kgen"}, tt.args...)...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("helm template error = %v, want one containing %q", err, tt.want)
			}
		})
	}
	// The escape hatch says it is one.
	out, err := helm(t, "template", "kgen", "kgen", "--set", "rbac.allowWildcards=true",
		"--set", "rbac.extraRules[0].apiGroups[0]=", "--set", "rbac.extraRules[0].resources[0]=pods", "--set", "rbac.extraRules[0].verbs[0]=*")
	if err != nil || !strings.Contains(out, "kind: ClusterRole") {
		t.Errorf("rbac.allowWildcards=true: %v", err)
	}
}

// Metrics are secure by default: kgen runs with --metrics-secure and the
// RBAC its reviews need, and the ServiceMonitor scrapes over HTTPS with a
// token. Turned off, none of that is rendered.
func TestMetricsSecurity(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		secure bool
	}{
		{name: "default", secure: true},
		{name: "off", args: []string{"--set", "metrics.secure=false"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := helm(t, append([]string{"template", "kgen", "kgen", "--namespace", "kgen-system", "--set", "metrics.serviceMonitor.enabled=true"}, tt.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			names := map[string]*unstructured.Unstructured{}
			for _, o := range decode(t, out) {
				names[o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName()] = o
			}
			var d appsv1.Deployment
			convert(t, names["Deployment/kgen-system/kgen"], &d)
			if got := slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--metrics-secure"); got != tt.secure {
				t.Errorf("--metrics-secure in the arguments: %t, want %t", got, tt.secure)
			}
			for _, name := range []string{"ClusterRole//kgen-metrics-auth", "ClusterRoleBinding//kgen-metrics-auth",
				"RoleBinding/kube-system/kgen-metrics-auth-reader", "ClusterRole//kgen-metrics-reader"} {
				if _, ok := names[name]; ok != tt.secure {
					t.Errorf("%s rendered: %t, want %t", name, ok, tt.secure)
				}
			}
			if !tt.secure {
				if strings.Contains(out, "scheme: https") {
					t.Error("the ServiceMonitor scrapes over HTTPS, but kgen serves plain HTTP")
				}
				return
			}
			var auth rbacv1.ClusterRole
			convert(t, names["ClusterRole//kgen-metrics-auth"], &auth)
			want := []rbacv1.PolicyRule{
				{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
				{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
			}
			if fmt.Sprint(auth.Rules) != fmt.Sprint(want) {
				t.Errorf("kgen-metrics-auth grants %v, want %v", auth.Rules, want)
			}
			var reader rbacv1.RoleBinding
			convert(t, names["RoleBinding/kube-system/kgen-metrics-auth-reader"], &reader)
			if reader.RoleRef.Name != "extension-apiserver-authentication-reader" || reader.Subjects[0].Name != "kgen" {
				t.Errorf("kgen-metrics-auth-reader binds %+v to %+v", reader.RoleRef, reader.Subjects)
			}
			endpoints, _, _ := unstructured.NestedSlice(names["ServiceMonitor/kgen-system/kgen"].Object, "spec", "endpoints")
			endpoint := endpoints[0].(map[string]any)
			if endpoint["scheme"] != "https" || endpoint["bearerTokenFile"] != "/var/run/secrets/kubernetes.io/serviceaccount/token" ||
				fmt.Sprint(endpoint["tlsConfig"]) != "map[insecureSkipVerify:true]" {
				t.Errorf("the ServiceMonitor's endpoint does not scrape over HTTPS with a token: %v", endpoint)
			}
		})
	}
}

func decode(t *testing.T, stream string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := manifest.Decode(strings.NewReader(stream))
	if err != nil {
		t.Fatalf("%v\n%s", err, stream)
	}
	return objs
}

// convert decodes an object strictly into a typed one, so a misspelt field
// in a template fails.
func convert(t *testing.T, o *unstructured.Unstructured, into any) {
	t.Helper()
	j, err := o.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(j, into); err != nil {
		t.Errorf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
}
