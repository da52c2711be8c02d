package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"kgen.dev/kgen/internal/golden"
)

// TestRBACExamples prints the RBAC of every example offline, from its CRD
// (none for a built-in parent kind),
// and compares it with testdata/rbac/<example>.yaml; the WebApp example's
// Helm values are examples/webapp/rbac-values.yaml (rbac-shards-values.yaml
// with --shards), which the docs and the chart's tests use.
func TestRBACExamples(t *testing.T) {
	noCluster(t)
	testdata, err := filepath.Abs("testdata/rbac")
	if err != nil {
		t.Fatal(err)
	}
	// From the repository's root, so the paths in the output read as a
	// user would type them.
	t.Chdir("../..")
	// A folder without rules (examples/portal is a program) is no rules example.
	rulesFiles, err := filepath.Glob("examples/*/rules.yaml")
	if err != nil || len(rulesFiles) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, rulesFile := range rulesFiles {
		dir := filepath.Dir(rulesFile)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			args := []string{"rbac", "--rules", filepath.Join(dir, "rules.yaml")}
			if crd := filepath.Join(dir, "crd.yaml"); exists(crd) {
				args = append(args, "--crd", crd)
			}
			out, notes, err := runKgenctl(t, args...)
			if err != nil {
				t.Fatalf("kgenctl %s: %v", strings.Join(args, " "), err)
			}
			golden.Check(t, filepath.Join(testdata, filepath.Base(dir)+".yaml"), out+notes)
		})
	}
	out, _, err := runKgenctl(t, "rbac", "--rules", "examples/webapp/rules.yaml", "--crd", "examples/webapp/crd.yaml", "-o", "helm-values")
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "examples/webapp/rbac-values.yaml", out)
	// And for a sharded kgen, whose shards also patch the parents.
	out, _, err = runKgenctl(t, "rbac", "--rules", "examples/webapp/rules.yaml", "--crd", "examples/webapp/crd.yaml", "--shards", "-o", "helm-values")
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "examples/webapp/rbac-shards-values.yaml", out)
}

// The manifests in the formats of cli-runtime's printers: a v1 List for
// every format but yaml.
func TestRBACOutputFormats(t *testing.T) {
	noCluster(t)
	for _, tt := range []struct{ format, golden string }{
		{"json", "webapp.json"},
		{"name", "webapp.name"},
		{"jsonpath={range .items[*]}{.kind} {.metadata.namespace}/{.metadata.name}{\"\\n\"}{end}", "webapp.jsonpath"},
	} {
		t.Run(tt.golden, func(t *testing.T) {
			out, _, err := runKgenctl(t, "rbac", "--rules", "../../examples/webapp/rules.yaml", "--crd", "../../examples/webapp/crd.yaml", "-o", tt.format)
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join("testdata", "rbac", "output", tt.golden), out)
		})
	}
}

func TestRBAC(t *testing.T) {
	noCluster(t)
	const rules = "../../examples/webapp/rules.yaml"
	tests := []struct {
		name    string
		args    []string
		want    string // in stdout
		wantErr string
	}{
		{
			name: "a resource named by the user",
			args: []string{"--resource", "WebApp.example.com=webapps:Namespaced", "--name", "ops", "--namespace", "ops-system", "--service-account", "runner", "--leader-elect=false"},
			want: `apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  labels:
    app.kubernetes.io/component: rbac
    app.kubernetes.io/name: kgen
  name: ops
  namespace: team-a
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: ops
subjects:
- kind: ServiceAccount
  name: runner
  namespace: ops-system
`,
		},
		{
			name: "shards: their Leases instead of the leader-election one",
			args: []string{"--crd", "../../examples/webapp/crd.yaml", "--shards"},
			want: `kind: Role
metadata:
  labels:
    app.kubernetes.io/component: rbac
    app.kubernetes.io/name: kgen
  name: kgen-shards
  namespace: kgen
rules:
- apiGroups:
  - coordination.k8s.io
  resources:
  - leases
  verbs:
  - get
  - list
  - watch
  - create
  - update
  - delete
`,
		},
		{
			// A live audit: without them a secure kgen could review no
			// caller, and every scrape was refused.
			name: "metrics-secure: the reviews, and the client CA's reader",
			args: []string{"--crd", "../../examples/webapp/crd.yaml", "--metrics-secure"},
			want: `kind: ClusterRole
metadata:
  labels:
    app.kubernetes.io/component: rbac
    app.kubernetes.io/name: kgen
  name: kgen-metrics-auth
rules:
- apiGroups:
  - authentication.k8s.io
  resources:
  - tokenreviews
  verbs:
  - create
- apiGroups:
  - authorization.k8s.io
  resources:
  - subjectaccessreviews
  verbs:
  - create
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  labels:
    app.kubernetes.io/component: rbac
    app.kubernetes.io/name: kgen
  name: kgen-metrics-auth
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: kgen-metrics-auth
subjects:
- kind: ServiceAccount
  name: kgen
  namespace: kgen
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  labels:
    app.kubernetes.io/component: rbac
    app.kubernetes.io/name: kgen
  name: kgen-metrics-auth-reader
  namespace: kube-system
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: extension-apiserver-authentication-reader
subjects:
- kind: ServiceAccount
  name: kgen
  namespace: kgen
`,
		},
		{
			name: "a CRD kind offline without its CRD",
			wantErr: `rule webapp: parent: unknown kind: kind WebApp (apiVersion example.com/v1alpha1) is not a built-in kind, and neither its CustomResourceDefinition nor its resource name was given
(give each custom resource's CustomResourceDefinition with --crd FILE, or its resource with --resource KIND.GROUP=PLURAL:SCOPE, or resolve the kinds through the cluster with --offline=false)`,
		},
		{
			name:    "an unknown output format",
			args:    []string{"-o", "table"},
			wantErr: `unknown output format "table": use one of helm-values, json, yaml, kyaml, name, jsonpath, jsonpath-as-json, jsonpath-file`,
		},
		{
			name:    "connection flags offline",
			args:    []string{"--context", "prod", "--as", "jane"},
			wantErr: "--as, --context: connection flags are for --offline=false; offline, kgenctl rbac connects to no cluster",
		},
		{
			name:    "--crd asks for offline",
			args:    []string{"--offline=false", "--crd", "../../examples/webapp/crd.yaml"},
			wantErr: "--crd and --resource are for --offline; with --offline=false the cluster's discovery resolves every kind",
		},
		{
			name:    "a bad resource",
			args:    []string{"--resource", "WebApp"},
			wantErr: `resource "WebApp": want KIND[.GROUP]=PLURAL[:Namespaced|Cluster]`,
		},
		{
			name:    "not a CRD",
			args:    []string{"--crd", rules},
			wantErr: `../../examples/webapp/rules.yaml: Rule "webapp" is not a CustomResourceDefinition`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _, err := runKgenctl(t, append([]string{"rbac", "--rules", rules}, tt.args...)...)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error:\n%v\nwant:\n%s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, tt.want) {
				t.Errorf("output:\n%s\ndoes not contain:\n%s", out, tt.want)
			}
		})
	}
}

// --manage-crds grants create and patch on the CRD of a rule with
// spec.parent.schema, which is enough to resolve its kind offline, and
// turns the chart's manageCRDs on.
func TestRBACManageCRDs(t *testing.T) {
	noCluster(t)
	out, _, err := runKgenctl(t, "rbac", "--rules", "../../examples/regions/rules.yaml", "--manage-crds", "-o", "helm-values")
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, filepath.Join("testdata", "rbac", "output", "regions-manage-crds.yaml"), out)
	for _, want := range []string{"manageCRDs: true", "- globalapps.example.com", "      - create\n      - patch"} {
		if !strings.Contains(out, want) {
			t.Errorf("output does not contain %q:\n%s", want, out)
		}
	}
}

// With --offline=false the cluster is asked, so a missing kubeconfig is an
// error rather than a silent fallback to the offline table.
func TestRBACOnlineNeedsACluster(t *testing.T) {
	noCluster(t)
	_, _, err := runKgenctl(t, "rbac", "--rules", "../../examples/webapp/rules.yaml", "--offline=false")
	if !errors.Is(err, errNoCluster) {
		t.Fatalf("error = %v, want %v", err, errNoCluster)
	}
	if _, err := os.Stat(filepath.Join(os.Getenv("HOME"), ".kube")); err == nil {
		t.Error("kgenctl rbac wrote to ~/.kube")
	}
}
