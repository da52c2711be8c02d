package charts

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"kgen.dev/kgen/internal/golden"
	"kgen.dev/kgen/internal/manifest"
	"kgen.dev/kgen/pkg/cleanup"
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
	{name: "sharding", args: []string{
		"-f", "../examples/webapp/rbac-shards-values.yaml",
		"--set-file", "rules.webapp=../examples/webapp/rules.yaml",
		"--set", "sharding.enabled=true", "--set", "leaderElection.enabled=false", "--set", "replicaCount=3",
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

// checkObjects checks the chart's invariants on rendered objects, rendered
// in the namespace kgen-system.
func checkObjects(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	kinds := map[string]int{}
	var selector labels.Selector
	var shards bool // the Deployment runs kgenctl run --shards
	type leaseGrant struct {
		role string // kind namespace/name
		rule rbacv1.PolicyRule
		only bool // the role grants nothing but Leases
	}
	var leaseGrants []leaseGrant
	hookPods := map[string]map[string]string{} // hook or test pods: their labels
	for _, o := range objs {
		kinds[o.GetKind()]++
		hook := o.GetAnnotations()["helm.sh/hook"]
		if o.GetLabels()["app.kubernetes.io/instance"] == "" || o.GetLabels()["app.kubernetes.io/part-of"] != "kgen" {
			t.Errorf("%s %s lacks the app.kubernetes.io labels: %v", o.GetKind(), o.GetName(), o.GetLabels())
		}
		if o.GetKind() != "Pod" && o.GetLabels()["app.kubernetes.io/name"] != "kgen" {
			t.Errorf("%s %s is not labelled app.kubernetes.io/name=kgen: %v", o.GetKind(), o.GetName(), o.GetLabels())
		}
		switch o.GetKind() {
		case "Deployment":
			var d appsv1.Deployment
			convert(t, o, &d)
			checkDeployment(t, &d)
			var err error
			if selector, err = metav1.LabelSelectorAsSelector(d.Spec.Selector); err != nil {
				t.Fatal(err)
			}
			shards = slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--shards")
		case "Job":
			var job batchv1.Job
			convert(t, o, &job)
			// The cleanup before an uninstall, the stop of writers
			// that would run beside the new ones before an upgrade or a
			// rollback (see checkWriters), and the validation of the
			// rules before an upgrade.
			if hook != "pre-delete" && hook != "pre-upgrade,pre-rollback" && hook != "pre-upgrade" || !strings.Contains(o.GetAnnotations()["helm.sh/hook-delete-policy"], "hook-succeeded") {
				t.Errorf("Job %s is not a pre-delete, pre-upgrade and pre-rollback, or pre-upgrade hook deleted once it succeeded: %v", o.GetName(), o.GetAnnotations())
			}
			checkRestricted(t, "Job "+o.GetName(), &job.Spec.Template.Spec)
			hookPods["Job "+o.GetName()] = job.Spec.Template.Labels
		case "Pod":
			var pod corev1.Pod
			convert(t, o, &pod)
			if hook != "test" {
				t.Errorf("Pod %s is not a test hook: %v", o.GetName(), o.GetAnnotations())
			}
			checkRestricted(t, "Pod "+o.GetName(), &pod.Spec)
			hookPods["Pod "+o.GetName()] = pod.Labels
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
			for _, r := range role.Rules {
				if slices.Contains(r.Resources, "leases") {
					only := !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return !slices.Equal(r.Resources, []string{"leases"}) })
					leaseGrants = append(leaseGrants, leaseGrant{role: o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName(), rule: r, only: only})
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
	// Leases are granted only in the release namespace, by name; but create,
	// which RBAC cannot limit by name, and, for shards, whose Leases are
	// named after pods unknown in advance, the shards' Role: only Leases,
	// and only when the pods run as shards.
	for _, g := range leaseGrants {
		switch {
		case !strings.HasPrefix(g.role, "Role kgen-system/"):
			t.Errorf("%s grants %v on Leases outside the release namespace", g.role, g.rule.Verbs)
		case len(g.rule.ResourceNames) > 0, slices.Equal(g.rule.Verbs, []string{"create"}):
		case !shards:
			t.Errorf("%s grants %v on every Lease, and the pods are no shards", g.role, g.rule.Verbs)
		case !g.only:
			t.Errorf("%s grants %v on every Lease, and more than Leases", g.role, g.rule.Verbs)
		}
	}
	for _, kind := range []string{"Deployment", "ServiceAccount", "Service", "PodDisruptionBudget", "Role", "RoleBinding", "Pod"} {
		if kinds[kind] == 0 {
			t.Errorf("no %s rendered", kind)
		}
	}
	// The cleanup hook waits for the Deployment's pods to go: it must not
	// count itself, nor may the Service or the PodDisruptionBudget.
	for name, l := range hookPods {
		if selector == nil || selector.Matches(labels.Set(l)) {
			t.Errorf("the pods of %s match the Deployment's selector %v: %v", name, selector, l)
		}
	}
}

func checkDeployment(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	pod := d.Spec.Template.Spec
	checkRestricted(t, "Deployment "+d.Name, &pod)
	c := pod.Containers[0]
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Error("no liveness probe on /healthz")
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Error("no readiness probe on /readyz")
	}
	if c.Args[0] != "run" {
		t.Errorf("the container does not run kgenctl run: %q", c.Args)
	}
	// The rules: the mounted files, Rule objects, or both.
	files := slices.Contains(c.Args, "--rules=/etc/kgen/rules")
	mounted := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "rules" && m.MountPath == "/etc/kgen/rules" })
	if files != mounted {
		t.Errorf("--rules=/etc/kgen/rules is given (%t) but the rules volume is mounted there (%t): %q %+v", files, mounted, c.Args, c.VolumeMounts)
	}
	if !files && !slices.Contains(c.Args, "--rule-objects=true") {
		t.Errorf("kgen runs neither rules files nor Rule objects: %q", c.Args)
	}
	// kgen follows the rules live: nothing in the pod template may
	// depend on them, or a change of the rules would roll the pods.
	for k := range d.Spec.Template.Annotations {
		if strings.HasPrefix(k, "checksum/") {
			t.Errorf("the pod template carries %s: a change of the rules would roll the pods", k)
		}
	}
	// One writer per parent: a leader, or the parent's shard, with their
	// Leases in the release namespace.
	if slices.Contains(c.Args, "--leader-elect=true") == slices.Contains(c.Args, "--shards") || !slices.Contains(c.Args, "--leader-elect-namespace=kgen-system") {
		t.Errorf("neither leader election nor sharding is on, in the release namespace: %q", c.Args)
	}
	// One new pod at a time, an old one gone only once it is ready.
	if s := d.Spec.Strategy; s.RollingUpdate == nil || s.RollingUpdate.MaxSurge.String() != "1" || s.RollingUpdate.MaxUnavailable.String() != "0" {
		t.Errorf("strategy %+v, want a rolling update with maxSurge 1 and maxUnavailable 0", s)
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "POD_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name"
	}) {
		t.Errorf("the container is not told its pod's name: %+v", c.Env)
	}
	if c.Resources.Requests.Memory().IsZero() {
		t.Error("no memory request")
	}
}

// checkRestricted checks that a pod is restricted, as the Pod Security
// Standards' restricted profile asks.
func checkRestricted(t *testing.T, what string, pod *corev1.PodSpec) {
	t.Helper()
	if len(pod.Containers) != 1 {
		t.Fatalf("%s has %d containers, want 1", what, len(pod.Containers))
	}
	c := pod.Containers[0]
	if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
		t.Errorf("%s: the pod does not require a non-root user", what)
	}
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Errorf("%s: the container has no securityContext", what)
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Errorf("%s: the container allows privilege escalation", what)
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Errorf("%s: the container's root file system is writable", what)
	case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
		t.Errorf("%s: the container may run as root", what)
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}):
		t.Errorf("%s: the container keeps capabilities", what)
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("%s: the container has no RuntimeDefault seccomp profile", what)
	}
	if c.Resources.Limits.Memory().IsZero() {
		t.Errorf("%s: no memory limit", what)
	}
}

// TestTemplateVariants checks what a few values change in the rendering.
func TestTemplateVariants(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		check func(t *testing.T, objs map[string]*unstructured.Unstructured)
	}{{
		name: "a writer flag in extraArgs is one of the writer arguments",
		args: []string{"--set-json", `controller.extraArgs=["--leader-elect-id=custom","--v=3"]`},
		check: func(t *testing.T, objs map[string]*unstructured.Unstructured) {
			if got := objs["Deployment/kgen"].GetAnnotations()["kgen.dev/writers"]; !strings.Contains(got, "--leader-elect-id=custom") || strings.Contains(got, "--v=3") {
				t.Errorf("kgen.dev/writers = %q, want --leader-elect-id=custom and not --v=3", got)
			}
		},
	}, {
		name: "one replica without leader election is recreated, never rolled",
		args: []string{"--set", "replicaCount=1", "--set", "leaderElection.enabled=false"},
		check: func(t *testing.T, objs map[string]*unstructured.Unstructured) {
			var d appsv1.Deployment
			convert(t, objs["Deployment/kgen"], &d)
			if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType || d.Spec.Strategy.RollingUpdate != nil {
				t.Errorf("strategy %+v, want Recreate", d.Spec.Strategy)
			}
			if objs["Role/kgen-leader-election"] != nil {
				t.Error("a leader-election Role without leader election")
			}
			var pod corev1.Pod
			convert(t, objs["Pod/kgen-test"], &pod)
			if want := []string{"check", "--deployment=kgen-system/kgen", "--wait=60s"}; !slices.Equal(pod.Spec.Containers[0].Args, want) {
				t.Errorf("the test pod runs %q, want %q", pod.Spec.Containers[0].Args, want)
			}
		},
	}, {
		name: "sharding: every pod a shard, with the shards' Leases and no leader election",
		args: []string{"--set", "sharding.enabled=true", "--set", "leaderElection.enabled=false", "--set", "replicaCount=3", "--set", "sharding.leaseDuration=10s"},
		check: func(t *testing.T, objs map[string]*unstructured.Unstructured) {
			var d appsv1.Deployment
			convert(t, objs["Deployment/kgen"], &d)
			if d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || d.Spec.Strategy.RollingUpdate == nil ||
				d.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue() != 0 || d.Spec.Strategy.RollingUpdate.MaxSurge.IntValue() != 1 {
				t.Errorf("strategy %+v, want one pod at a time", d.Spec.Strategy)
			}
			args := d.Spec.Template.Spec.Containers[0].Args
			for _, want := range []string{"--shards", "--leader-elect=false", "--leader-elect-namespace=kgen-system", "--leader-elect-lease-duration=10s"} {
				if !slices.Contains(args, want) {
					t.Errorf("kgen runs %q, without %s", args, want)
				}
			}
			if !slices.ContainsFunc(d.Spec.Template.Spec.Containers[0].Env, func(e corev1.EnvVar) bool {
				return e.Name == "POD_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name"
			}) {
				t.Error("the pods do not get POD_NAME, their shard id")
			}
			if objs["Role/kgen-leader-election"] != nil {
				t.Error("a leader-election Role with sharding")
			}
			var role rbacv1.Role
			convert(t, objs["Role/kgen-shards"], &role)
			want := []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
				Verbs: []string{"get", "list", "watch", "create", "update", "delete"}}}
			if role.Namespace != "kgen-system" || !reflect.DeepEqual(role.Rules, want) {
				t.Errorf("the shards' Role in %s grants %+v, want %+v in kgen-system", role.Namespace, role.Rules, want)
			}
			var binding rbacv1.RoleBinding
			convert(t, objs["RoleBinding/kgen-shards"], &binding)
			if binding.RoleRef.Name != "kgen-shards" || len(binding.Subjects) != 1 || binding.Subjects[0].Name != "kgen" {
				t.Errorf("the shards' RoleBinding binds %+v to %+v", binding.RoleRef, binding.Subjects)
			}
			var pod corev1.Pod
			convert(t, objs["Pod/kgen-test"], &pod)
			if want := []string{"check", "--deployment=kgen-system/kgen", "--wait=60s"}; !slices.Equal(pod.Spec.Containers[0].Args, want) {
				t.Errorf("the test pod runs %q, want %q", pod.Spec.Containers[0].Args, want)
			}
		},
	}, {
		name: "cleanup disabled, no cleanup hook",
		args: []string{"--set", "cleanup.enabled=false"},
		check: func(t *testing.T, objs map[string]*unstructured.Unstructured) {
			if objs["Job/kgen-cleanup"] != nil || objs["Role/kgen-cleanup"] != nil {
				t.Error("a cleanup hook with cleanup.enabled=false")
			}
		},
	}, {
		name: "Rule objects only, by default",
		check: func(t *testing.T, objs map[string]*unstructured.Unstructured) {
			var d appsv1.Deployment
			convert(t, objs["Deployment/kgen"], &d)
			pod := d.Spec.Template.Spec
			if args := pod.Containers[0].Args; !slices.Contains(args, "--rule-objects=true") || slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--rules") }) {
				t.Errorf("kgen runs %q, want Rule objects and no --rules", args)
			}
			if slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.ConfigMap != nil }) || objs["ConfigMap/kgen-rules"] != nil {
				t.Errorf("a rules ConfigMap without rules: volumes %+v", pod.Volumes)
			}
			checkRuleObjectsRBAC(t, objs, "kgen")
			var job batchv1.Job
			convert(t, objs["Job/kgen-cleanup"], &job)
			want := []string{"cleanup", "--rule-objects=true", "--stop-deployment=kgen-system/kgen", "--state-configmap=kgen-state", "--timeout=3m"}
			if got := job.Spec.Template.Spec.Containers[0].Args; !slices.Equal(got, want) {
				t.Errorf("the cleanup hook runs %q, want %q", got, want)
			}
			if v := job.Spec.Template.Spec.Volumes; len(v) != 0 {
				t.Errorf("the cleanup hook mounts %+v without rules files", v)
			}
		},
	}, {
		name: "rules of the values without Rule objects",
		args: []string{"--set", "ruleObjects.enabled=false", "--set-file", "rules.webapp=../examples/webapp/rules.yaml"},
		check: func(t *testing.T, objs map[string]*unstructured.Unstructured) {
			var d appsv1.Deployment
			convert(t, objs["Deployment/kgen"], &d)
			if args := d.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--rule-objects=false") || !slices.Contains(args, "--rules=/etc/kgen/rules") {
				t.Errorf("kgen runs %q, want the rules files and no Rule objects", args)
			}
			for name, o := range objs {
				if strings.HasSuffix(name, "-rule-objects") {
					t.Errorf("%s without Rule objects: %v", name, o)
				}
			}
			var job batchv1.Job
			convert(t, objs["Job/kgen-cleanup"], &job)
			want := []string{"cleanup", "--rules=/etc/kgen/rules", "--rule-objects=false", "--stop-deployment=kgen-system/kgen", "--state-configmap=kgen-state", "--timeout=3m"}
			if got := job.Spec.Template.Spec.Containers[0].Args; !slices.Equal(got, want) {
				t.Errorf("the cleanup hook runs %q, want %q", got, want)
			}
		},
	}, {
		name: "RBAC left to the user: no Rule objects ClusterRole",
		args: []string{"--set", "rbac.create=false"},
		check: func(t *testing.T, objs map[string]*unstructured.Unstructured) {
			for name := range objs {
				if strings.HasPrefix(name, "ClusterRole") {
					t.Errorf("%s with rbac.create=false", name)
				}
			}
		},
	}, {
		name: "an existing rules ConfigMap is cleaned up after",
		args: []string{"--set", "existingRulesConfigMap=my-rules", "--set", "fullnameOverride=k"},
		check: func(t *testing.T, objs map[string]*unstructured.Unstructured) {
			var d appsv1.Deployment
			convert(t, objs["Deployment/k"], &d)
			if v := d.Spec.Template.Spec.Volumes; v[0].ConfigMap == nil || v[0].ConfigMap.Name != "my-rules" {
				t.Errorf("kgen mounts %+v, want the ConfigMap my-rules", v)
			}
			if objs["ConfigMap/k-rules"] != nil {
				t.Error("the chart makes a rules ConfigMap besides the existing one")
			}
			var job batchv1.Job
			convert(t, objs["Job/k-cleanup"], &job)
			want := []string{"cleanup", "--rules=/etc/kgen/rules", "--rule-objects=true", "--stop-deployment=kgen-system/k", "--state-configmap=k-state", "--timeout=3m"}
			if got := job.Spec.Template.Spec.Containers[0].Args; !slices.Equal(got, want) {
				t.Errorf("the cleanup hook runs %q, want %q", got, want)
			}
			if v := job.Spec.Template.Spec.Volumes; len(v) != 1 || v[0].ConfigMap == nil || v[0].ConfigMap.Name != "my-rules" {
				t.Errorf("the cleanup hook mounts %+v, want the ConfigMap my-rules", v)
			}
			if job.Spec.Template.Spec.ServiceAccountName != "k" || objs["Role/k-cleanup"] == nil || objs["RoleBinding/k-cleanup"] == nil {
				t.Errorf("the cleanup hook does not run as kgen with the cleanup Role")
			}
		},
	}, {
		name: "the event policy is passed when set",
		args: []string{"--set", "controller.events=all"},
		check: func(t *testing.T, objs map[string]*unstructured.Unstructured) {
			var d appsv1.Deployment
			convert(t, objs["Deployment/kgen"], &d)
			if !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--events=all") {
				t.Errorf("no --events=all in %q", d.Spec.Template.Spec.Containers[0].Args)
			}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := helm(t, append([]string{"template", "kgen", "kgen", "--namespace", "kgen-system"}, tt.args...)...)
			if err != nil {
				t.Fatalf("helm template: %v", err)
			}
			objs := map[string]*unstructured.Unstructured{}
			for _, o := range decode(t, out) {
				objs[o.GetKind()+"/"+o.GetName()] = o
			}
			for _, o := range objs {
				if o.GetKind() == "Deployment" {
					checkWriters(t, o, objs["Job/"+o.GetName()+"-stop"])
				}
			}
			tt.check(t, objs)
		})
	}
}

// checkWriters checks the Deployment's kgen.dev/writers annotation
// against its container: it names exactly the container's arguments that
// tell how replicas agree on who writes, as kgenctl stop finds them
// (cleanup.WriterFlags). The pre-upgrade hook passes the same list to
// kgenctl stop, which compares it with the running Deployment's, so a flag
// missed here would stop kgen at every upgrade, or not when it must.
func checkWriters(t *testing.T, o, stopJob *unstructured.Unstructured) {
	t.Helper()
	var d appsv1.Deployment
	convert(t, o, &d)
	var job batchv1.Job
	if stopJob == nil {
		t.Fatalf("no stop hook Job for Deployment %s", d.Name)
	}
	convert(t, stopJob, &job)
	if want := "--unless-writers=" + d.Annotations["kgen.dev/writers"]; !slices.Contains(job.Spec.Template.Spec.Containers[0].Args, want) {
		t.Errorf("the stop hook runs %q, want %q", job.Spec.Template.Spec.Containers[0].Args, want)
	}
	annotated := strings.Fields(d.Annotations["kgen.dev/writers"])
	var have []string
	for _, arg := range d.Spec.Template.Spec.Containers[0].Args {
		for _, prefix := range cleanup.WriterFlags {
			if strings.HasPrefix(arg, prefix) {
				have = append(have, arg)
			}
		}
	}
	slices.Sort(annotated)
	slices.Sort(have)
	if len(annotated) == 0 || !slices.Equal(annotated, have) {
		t.Errorf("kgen.dev/writers names %q, but the container's writer arguments are %q", annotated, have)
	}
}

// checkRuleObjectsRBAC checks that kgen's ServiceAccount may follow Rule
// objects and write their status, and nothing more.
func checkRuleObjectsRBAC(t *testing.T, objs map[string]*unstructured.Unstructured, fullname string) {
	t.Helper()
	var role rbacv1.ClusterRole
	convert(t, objs["ClusterRole/"+fullname+"-rule-objects"], &role)
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{"kgen.dev"}, Resources: []string{"rules"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"kgen.dev"}, Resources: []string{"rules/status"}, Verbs: []string{"patch"}},
	}
	if !reflect.DeepEqual(role.Rules, want) {
		t.Errorf("the Rule objects ClusterRole grants %+v, want %+v", role.Rules, want)
	}
	var binding rbacv1.ClusterRoleBinding
	convert(t, objs["ClusterRoleBinding/"+fullname+"-rule-objects"], &binding)
	wantSubjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: fullname, Namespace: "kgen-system"}}
	if binding.RoleRef.Name != role.Name || !reflect.DeepEqual(binding.Subjects, wantSubjects) {
		t.Errorf("the Rule objects ClusterRoleBinding binds %+v to %+v, want %s to %+v", binding.RoleRef, binding.Subjects, role.Name, wantSubjects)
	}
}

// A helm upgrade that changes only the rules changes the ConfigMap and
// nothing else: kgen follows the ConfigMap live, so its pods must not roll.
func TestRulesChangeDoesNotRollPods(t *testing.T) {
	render := func(rulesFile string) map[string]*unstructured.Unstructured {
		t.Helper()
		out, err := helm(t, "template", "kgen", "kgen", "--namespace", "kgen-system", "-f", "../examples/webapp/rbac-values.yaml", "--set-file", "rules.webapp="+rulesFile)
		if err != nil {
			t.Fatalf("helm template: %v", err)
		}
		objs := map[string]*unstructured.Unstructured{}
		for _, o := range decode(t, out) {
			objs[o.GetKind()+"/"+o.GetName()] = o
		}
		return objs
	}
	data, err := os.ReadFile("../examples/webapp/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(data), "image: ${parent.spec.image}\n", "image: ${parent.spec.image}\n        release: upgraded\n", 1)
	if changed == string(data) {
		t.Fatal("the test's edit of examples/webapp/rules.yaml did not apply")
	}
	changedFile := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(changedFile, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	before, after := render("../examples/webapp/rules.yaml"), render(changedFile)
	if len(before) != len(after) {
		t.Fatalf("%d objects before the change, %d after", len(before), len(after))
	}
	for name, o := range before {
		same := reflect.DeepEqual(o.Object, after[name].Object)
		if name == "ConfigMap/kgen-rules" || name == "ConfigMap/kgen-validate" { // the rules, and the hook that checks them
			if same {
				t.Errorf("%s did not change with the rules", name)
			}
		} else if !same {
			t.Errorf("%s changed with the rules", name)
		}
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
			name: "two replicas without leader election",
			args: []string{"--set", "replicaCount=2", "--set", "leaderElection.enabled=false"},
			want: "replicaCount is 2 but leaderElection.enabled is false: every replica would write",
		},
		{
			name: "sharding with leader election",
			args: []string{"--set", "sharding.enabled=true"},
			want: "sharding.enabled and leaderElection.enabled are exclusive",
		},
		{
			name: "sharding with one replica: the schema names the replicas",
			args: []string{"--set", "sharding.enabled=true", "--set", "leaderElection.enabled=false", "--set", "replicaCount=1"},
			want: "at '/replicaCount': minimum: got 1, want 2",
		},
		{
			name: "sharding with no replica: the schema names sharding.enabled",
			args: []string{"--set", "sharding.enabled=true", "--set", "leaderElection.enabled=false", "--set", "replicaCount=0"},
			want: "at '/sharding/enabled': value must be false",
		},
		{
			name: "sharding with one replica, without the schema",
			args: []string{"--skip-schema-validation", "--set", "sharding.enabled=true", "--set", "leaderElection.enabled=false", "--set", "replicaCount=1"},
			want: "sharding.enabled needs replicaCount of 2 or more, not 1",
		},
		{
			name: "a bad event policy",
			args: []string{"--set", "controller.events=some"},
			want: "/controller/events",
		},
		{
			name: "an annotation that is not a string",
			args: []string{"--set", "podAnnotations.rollout=1"},
			want: "/podAnnotations/rollout",
		},
		{
			name: "no rules and no Rule objects",
			args: []string{"--set", "ruleObjects.enabled=false"},
			want: "no rules: ruleObjects.enabled is false and neither rules nor existingRulesConfigMap is set",
		},
		{
			// A live audit: a misspelt field of a rule in the values
			// went through helm install, and only kgen's log said so.
			name: "a misspelt field of a rule given as YAML",
			args: []string{"--set", "rules.web.apiVersion=kgen.dev/v1alpha1", "--set", "rules.web.kind=Rule", "--set", "rules.web.metadata.name=web", "--set", "rules.web.spce.parent.kind=App"},
			want: "/rules/web",
		},
		{
			name: "a misspelt ruleObjects value",
			args: []string{"--set", "ruleObjects.enable=false"},
			want: "additional properties 'enable' not allowed",
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
			// The last of a flag wins: an audit ran two replicas
			// without leader election past the chart's check.
			name: "extraArgs turning leader election off",
			args: []string{"--set", "controller.extraArgs[0]=--leader-elect=false"},
			want: "controller.extraArgs sets --leader-elect to false, but leaderElection.enabled is true",
		},
		{
			name: "extraArgs turning sharding on",
			args: []string{"--set", "controller.extraArgs[0]=--shards=true"},
			want: "controller.extraArgs sets --shards to true, but sharding.enabled is false",
		},
		{
			name: "profiling turned on with a value, without secure metrics",
			args: []string{"--set", "metrics.secure=false", "--set", "controller.extraArgs[0]=--profiling=true"},
			want: "--profiling in controller.extraArgs needs metrics.secure",
		},
		{
			name: "extraArgs turning secure metrics off",
			args: []string{"--set", "controller.extraArgs[0]=--metrics-secure=false"},
			want: "controller.extraArgs sets --metrics-secure to false, but metrics.secure is true",
		},
		{
			name: "a Lease in two arguments of extraArgs",
			args: []string{"--set", "controller.extraArgs[0]=--leader-elect-id", "--set", "controller.extraArgs[1]=other"},
			want: "controller.extraArgs holds --leader-elect-id without =VALUE: write --leader-elect-id=VALUE as one argument",
		},
		{
			name: "a bare --leader-elect in extraArgs",
			args: []string{"--set", "leaderElection.enabled=false", "--set", "controller.extraArgs[0]=--leader-elect"},
			want: "controller.extraArgs holds --leader-elect without =VALUE",
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
	if o == nil {
		t.Fatalf("no object rendered to decode into a %T", into)
	}
	j, err := o.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(j, into); err != nil {
		t.Errorf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
}
