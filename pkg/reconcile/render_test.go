package reconcile

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"kgen.dev/kgen/internal/golden"
	"kgen.dev/kgen/pkg/kinds"
	"kgen.dev/kgen/rules"
)

// parseRule compiles one rule document.
func parseRule(t testing.TB, doc string) *rules.Rule {
	t.Helper()
	rs, err := rules.Parse("rules.yaml", []byte(doc), rules.Options{})
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return rs[0]
}

// object decodes a YAML object.
func object(t testing.TB, doc string) *unstructured.Unstructured {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatalf("decode object: %v", err)
	}
	// As the API server's objects, with integers as int64.
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(j); err != nil {
		t.Fatalf("decode object: %v", err)
	}
	return obj
}

// scoper knows the built-in kinds, the namespaced App and the cluster-scoped
// Team of group example.com.
func scoper(t testing.TB) *kinds.Static {
	s := kinds.NewStatic()
	for _, c := range []*unstructured.Unstructured{crd("example.com", "App", "Namespaced", "v1"), crd("example.com", "Team", "Cluster", "v1")} {
		if err := s.AddCRD(c); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

const app = `apiVersion: example.com/v1
kind: App
metadata:
  name: web
  namespace: team-a
  uid: 1111-2222
  labels: {tier: web}
spec:
  replicas: 2
  image: nginx
  expose: true
  host: web.example.com
`

const team = `apiVersion: example.com/v1
kind: Team
metadata: {name: blue, uid: 3333-4444}
spec: {members: [ann, bob]}
`

// ruleFor returns a rule document for parent kind with the given children
// and extra spec lines.
func ruleFor(kind, spec, children string) string {
	return "apiVersion: kgen.dev/v1alpha1\nkind: Rule\nmetadata: {name: r}\nspec:\n  parent: {apiVersion: example.com/v1, kind: " + kind + "}\n" + spec + "  children:\n" + children
}

func TestRender(t *testing.T) {
	tests := []struct {
		name     string
		parent   string
		rule     string
		observed []string // observed children, each labelled kgen.dev/child
		// Want, for each rendered child in order, "id namespace owner"
		// (namespace "-" for cluster-scoped children).
		want        []string
		wantExclude []string
		wantWaiting map[string]Wait
		wantStatus  map[string]any
		wantOmitted map[string]string
	}{
		{
			name:   "namespaced child of a namespaced parent",
			parent: app,
			rule:   ruleFor("App", "", "  - id: cm\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}\n"),
			want:   []string{"cm team-a owner"},
		},
		{
			name:   "the parent's namespace written out",
			parent: app,
			rule:   ruleFor("App", "", "  - id: cm\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x, namespace: '${parent.metadata.namespace}'}}\n"),
			want:   []string{"cm team-a owner"},
		},
		{
			name:   "cluster-scoped child of a namespaced parent",
			parent: app,
			rule:   ruleFor("App", "", "  - id: role\n    template: {apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole, metadata: {name: x}}\n"),
			want:   []string{"role - no-owner"},
		},
		{
			name:   "namespaced child in another namespace",
			parent: app,
			rule:   ruleFor("App", "  allowCrossNamespace: [shared]\n", "  - id: cm\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x, namespace: shared}}\n"),
			want:   []string{"cm shared no-owner"},
		},
		{
			name:   "a templated namespace that is the parent's",
			parent: app,
			rule:   ruleFor("App", "  allowCrossNamespace: [shared]\n", "  - id: cm\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x, namespace: '${parent.metadata.labels.tier == \"web\" ? parent.metadata.namespace : \"shared\"}'}}\n"),
			want:   []string{"cm team-a owner"},
		},
		{
			name:   "cluster-scoped child of a cluster-scoped parent",
			parent: team,
			rule:   ruleFor("Team", "", "  - id: ns\n    template: {apiVersion: v1, kind: Namespace, metadata: {name: 'team-${parent.metadata.name}'}}\n"),
			want:   []string{"ns - owner"},
		},
		{
			name:   "namespaced child of a cluster-scoped parent",
			parent: team,
			rule:   ruleFor("Team, scope: Cluster", "", "  - id: cm\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x, namespace: 'team-${parent.metadata.name}'}}\n"),
			want:   []string{"cm team-blue owner"},
		},
		{
			name:   "a templated role the rule allows",
			parent: app,
			rule:   ruleFor("App", "  allowBindRoles: [view, nginx]\n", "  - id: rb\n    template: {apiVersion: rbac.authorization.k8s.io/v1, kind: RoleBinding, metadata: {name: x}, roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: '${parent.spec.image}'}, subjects: []}\n"),
			want:   []string{"rb team-a owner"},
		},
		{
			name:   "includeWhen",
			parent: app,
			rule: ruleFor("App", "", `  - id: a
    includeWhen: ["${parent.spec.replicas > 1}", "${parent.spec.expose}"]
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}
  - id: b
    includeWhen: ["${parent.spec.replicas > 1}", "${!parent.spec.expose}"]
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: b}}
`),
			want:        []string{"a team-a owner"},
			wantExclude: []string{"b"},
		},
		{
			name:   "a child reading an excluded child is excluded",
			parent: app,
			rule: ruleFor("App", "", `  - id: user
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: "${children.off.metadata.name}-user"}}
  - id: off
    includeWhen: ["${false}"]
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: off}}
  - id: user2
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: "${children.user.metadata.name}-2"}}
`),
			observed:    []string{"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: off, labels: {kgen.dev/child: off}}\n"},
			wantExclude: []string{"off", "user", "user2"},
		},
		{
			name:   "waiting for a dependency",
			parent: app,
			rule: ruleFor("App", "", `  - id: deploy
    template: {apiVersion: apps/v1, kind: Deployment, metadata: {name: "${children.config.metadata.name}"}}
  - id: config
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: "${parent.metadata.name}"}}
  - id: both
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: "${children.deploy.metadata.name + children.config.metadata.name}"}}
`),
			want:        []string{"config team-a owner"},
			wantWaiting: map[string]Wait{"deploy": {Reason: ReasonWaiting, Message: "waiting for child config"}, "both": {Reason: ReasonWaiting, Message: "waiting for children config, deploy"}},
		},
		{
			name:   "dependencies observed: dependency order",
			parent: app,
			rule: ruleFor("App", "", `  - id: deploy
    template: {apiVersion: apps/v1, kind: Deployment, metadata: {name: "${children.config.metadata.name}"}}
  - id: config
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: "${parent.metadata.name}"}}
`),
			observed: []string{"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web, namespace: team-a, labels: {kgen.dev/child: config}}\n"},
			want:     []string{"config team-a owner", "deploy team-a owner"},
		},
		{
			name:   "includeWhen waiting for a dependency",
			parent: app,
			rule: ruleFor("App", "", `  - id: a
    includeWhen: ["${has(children.b.data)}"]
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}
  - id: b
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: b}}
`),
			want:        []string{"b team-a owner"},
			wantWaiting: map[string]Wait{"a": {Reason: ReasonWaiting, Message: "waiting for child b"}},
		},
		{
			name:   "excluded although a dependency of the template is missing",
			parent: app,
			rule: ruleFor("App", "", `  - id: a
    includeWhen: ["${false}"]
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: "${children.b.metadata.name}"}}
  - id: b
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: b}}
`),
			want:        []string{"b team-a owner"},
			wantExclude: []string{"a"},
		},
		{
			name:   "status fields",
			parent: app,
			rule: ruleFor("App", "", `  - id: deploy
    template: {apiVersion: apps/v1, kind: Deployment, metadata: {name: web}}
  - id: off
    includeWhen: ["${false}"]
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: off}}
  status:
    image: ${parent.spec.image}
    available: ${children.deploy.status.availableReplicas}
    replicas: ${children.deploy.spec.replicas}
    off: ${children.off.metadata.name}
    absent: ${parent.spec.?nothing}
    nested: {url: "https://${parent.spec.host}/"}
`),
			observed:    []string{"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: team-a, labels: {kgen.dev/child: deploy}}\nspec: {replicas: 2}\n"},
			want:        []string{"deploy team-a owner"},
			wantExclude: []string{"off"},
			wantStatus:  map[string]any{"image": "nginx", "replicas": int64(2), "nested": map[string]any{"url": "https://web.example.com/"}},
			wantOmitted: map[string]string{"available": "${children.deploy.status.availableReplicas}: no such key: status", "off": "child off is excluded"},
		},
		{
			name:        "status waiting for a child",
			parent:      app,
			rule:        ruleFor("App", "", "  - id: cm\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}\n  status:\n    name: ${children.cm.metadata.name}\n"),
			want:        []string{"cm team-a owner"},
			wantStatus:  map[string]any{},
			wantOmitted: map[string]string{"name": "waiting for child cm"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rule := parseRule(t, tt.rule)
			parent := object(t, tt.parent)
			observed := Observed{Children: map[string][]*unstructured.Unstructured{}}
			for _, doc := range tt.observed {
				o := object(t, doc)
				id := o.GetLabels()[LabelChild]
				observed.Children[id] = append(observed.Children[id], o)
			}
			before := parent.DeepCopy()
			got, err := Render(rule, parent, observed, scoper(t))
			if err != nil {
				t.Fatalf("Render() error: %v", err)
			}
			if !reflect.DeepEqual(parent, before) {
				t.Errorf("Render() changed the parent")
			}
			var children []string
			for _, c := range got.Children {
				ns := c.Object.GetNamespace()
				if ns == "" {
					ns = "-"
				}
				owner := "no-owner"
				if c.OwnerReference {
					owner = "owner"
				}
				if c.OwnerReference != (len(c.Object.GetOwnerReferences()) == 1) {
					t.Errorf("child %s: OwnerReference = %t but the object has %d ownerReferences", c.ID, c.OwnerReference, len(c.Object.GetOwnerReferences()))
				}
				children = append(children, c.ID+" "+ns+" "+owner)
			}
			if !reflect.DeepEqual(children, tt.want) {
				t.Errorf("children = %q, want %q", children, tt.want)
			}
			if !reflect.DeepEqual(got.Excluded, tt.wantExclude) {
				t.Errorf("Excluded = %q, want %q", got.Excluded, tt.wantExclude)
			}
			if tt.wantWaiting == nil {
				tt.wantWaiting = map[string]Wait{}
			}
			if !reflect.DeepEqual(got.Waiting, tt.wantWaiting) {
				t.Errorf("Waiting = %q, want %q", got.Waiting, tt.wantWaiting)
			}
			if !reflect.DeepEqual(got.Status, tt.wantStatus) {
				t.Errorf("Status = %#v, want %#v", got.Status, tt.wantStatus)
			}
			if tt.wantOmitted == nil {
				tt.wantOmitted = map[string]string{}
			}
			if !reflect.DeepEqual(got.StatusOmitted, tt.wantOmitted) {
				t.Errorf("StatusOmitted = %q, want %q", got.StatusOmitted, tt.wantOmitted)
			}
		})
	}
}

// TestRenderMetadata checks a whole rendered child against a golden file:
// kgen's labels win over the template's, the template's are kept, and the
// annotation and ownerReference point at the parent.
func TestRenderMetadata(t *testing.T) {
	rule := parseRule(t, ruleFor("App", "", `  - id: deploy
    template:
      apiVersion: apps/v1
      kind: Deployment
      metadata:
        name: ${parent.metadata.name}
        labels:
          app: ${parent.metadata.name}
          kgen.dev/rule: not-this
          app.kubernetes.io/managed-by: someone-else
        annotations:
          note: '${"replicas: " + string(parent.spec.replicas)}'
      spec:
        replicas: ${parent.spec.replicas}
`))
	got, err := Render(rule, object(t, app), Observed{}, scoper(t))
	if err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(got.Children[0].Object.Object)
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, filepath.Join("testdata", "metadata.golden.yaml"), string(out))
}

// A child carries its parent's kgen.dev/shard label, so the replica the
// parent is assigned to watches it; without one on the parent the child has
// none, whatever the template says.
func TestRenderShardLabel(t *testing.T) {
	rule := parseRule(t, ruleFor("App", "", `  - id: cm
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: ${parent.metadata.name}
        labels: {kgen.dev/shard: from-template}
`))
	tests := []struct {
		name, parentShard, want string
	}{
		{"sharded parent", "kgen-7f9c", "kgen-7f9c"},
		{"parent without a shard", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent := object(t, app)
			if tt.parentShard != "" {
				parent.SetLabels(map[string]string{LabelShard: tt.parentShard})
			}
			got, err := Render(rule, parent, Observed{}, scoper(t))
			if err != nil {
				t.Fatal(err)
			}
			if got := got.Children[0].Object.GetLabels()[LabelShard]; got != tt.want {
				t.Errorf("child's %s = %q, want %q", LabelShard, got, tt.want)
			}
		})
	}
}

func TestRenderErrors(t *testing.T) {
	tests := []struct {
		name    string
		parent  string
		rule    string
		want    string
		invalid bool
	}{
		{
			name:    "expression error",
			parent:  app,
			rule:    ruleFor("App", "", "  - id: cm\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x}, data: {a: '${parent.spec.nope}'}}\n"),
			want:    `rules.yaml:8:81: rule "r": child "cm": template.data.a: ${parent.spec.nope}: no such key: nope`,
			invalid: true,
		},
		{
			name:    "includeWhen error",
			parent:  app,
			rule:    ruleFor("App", "", "  - id: cm\n    includeWhen: ['${parent.spec.image}']\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}\n"),
			want:    `rules.yaml:8:20: rule "r": child "cm": includeWhen[0]: ${parent.spec.image}: must evaluate to a bool, but got string`,
			invalid: true,
		},
		{
			name:    "a cluster-scoped parent's namespaced child without a namespace",
			parent:  team,
			rule:    ruleFor("Team", "", "  - id: cm\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}\n"),
			want:    `rules.yaml:7:5: rule "r": child "cm": template.metadata.namespace: the parent is cluster-scoped, so the template of namespaced v1 ConfigMap must set a namespace`,
			invalid: true,
		},
		{
			name:    "a cluster-scoped child with a namespace",
			parent:  app,
			rule:    ruleFor("App", "", "  - id: ns\n    template: {apiVersion: v1, kind: Namespace, metadata: {name: x, namespace: '${parent.metadata.namespace}'}}\n"),
			want:    `rules.yaml:7:5: rule "r": child "ns": template.metadata.namespace: v1 Namespace is cluster-scoped, but the template sets namespace "team-a"`,
			invalid: true,
		},
		{
			name:    "a templated role the rule does not allow",
			parent:  app,
			rule:    ruleFor("App", "  allowBindRoles: [view, edit]\n", "  - id: rb\n    template: {apiVersion: rbac.authorization.k8s.io/v1, kind: RoleBinding, metadata: {name: x}, roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: '${parent.spec.image}'}, subjects: []}\n"),
			want:    `rules.yaml:8:5: rule "r": child "rb": template.roleRef.name: binding role "nginx" is not allowed by spec.allowBindRoles (view, edit)`,
			invalid: true,
		},
		{
			name:    "a templated namespace the rule does not allow",
			parent:  app,
			rule:    ruleFor("App", "  allowCrossNamespace: [shared, other]\n", "  - id: cm\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x, namespace: '${parent.spec.image}'}}\n"),
			want:    `rules.yaml:8:5: rule "r": child "cm": template.metadata.namespace: "nginx" is neither the parent's namespace "team-a" nor one of spec.allowCrossNamespace (shared, other)`,
			invalid: true,
		},
		{
			name:    "a templated namespace a cluster-scoped parent's rule does not allow",
			parent:  team,
			rule:    ruleFor("Team, scope: Cluster", "  allowCrossNamespace: [shared]\n", "  - id: cm\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x, namespace: '${parent.metadata.name}'}}\n"),
			want:    `rules.yaml:8:5: rule "r": child "cm": template.metadata.namespace: "blue" is not one of spec.allowCrossNamespace (shared)`,
			invalid: true,
		},
		{
			name:    "a parent scope the rule has wrong",
			parent:  app,
			rule:    ruleFor("App, scope: Cluster", "", "  - id: cm\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x, namespace: y}}\n"),
			want:    `rules.yaml:1:1: rule "r": spec.parent.scope: the rule takes App.example.com as cluster-scoped, but it is namespaced`,
			invalid: true,
		},
		{
			name:    "a namespace that is not a name",
			parent:  app,
			rule:    ruleFor("App", "  allowCrossNamespace: [shared]\n", "  - id: cm\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x, namespace: '${parent.spec.image}:1'}}\n"),
			want:    `rules.yaml:8:5: rule "r": child "cm": template.metadata.namespace: "nginx:1" is not a valid namespace name: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`,
			invalid: true,
		},
		{
			name:    "an empty name",
			parent:  app,
			rule:    ruleFor("App", "", "  - id: cm\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: '${parent.spec.?nothing.orValue(\"\")}'}}\n"),
			want:    `rules.yaml:7:5: rule "r": child "cm": template.metadata.name: rendered to string "", not a non-empty string`,
			invalid: true,
		},
		{
			name:    "a name that is not a string",
			parent:  app,
			rule:    ruleFor("App", "", "  - id: cm\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: '${parent.spec.replicas}'}}\n"),
			want:    `rules.yaml:7:5: rule "r": child "cm": template.metadata.name: rendered to int64 2, not a non-empty string`,
			invalid: true,
		},
		{
			name:    "a name with a slash",
			parent:  app,
			rule:    ruleFor("App", "", "  - id: cm\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: 'a/${parent.spec.image}'}}\n"),
			want:    `rules.yaml:7:5: rule "r": child "cm": template.metadata.name: "a/nginx": may not contain '/'`,
			invalid: true,
		},
		{
			name:    "a label that is not a string",
			parent:  app,
			rule:    ruleFor("App", "", "  - id: cm\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x, labels: {n: '${parent.spec.replicas}'}}}\n"),
			want:    `rules.yaml:7:5: rule "r": child "cm": template.metadata.labels["n"]: rendered to int64 2, not a string`,
			invalid: true,
		},
		{
			name:    "a label value from the parent that is not one",
			parent:  app,
			rule:    ruleFor("App", "", "  - id: cm\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x, labels: {host: 'https://${parent.spec.host}'}}}\n"),
			want:    `rules.yaml:7:5: rule "r": child "cm": template.metadata.labels: invalid value "https://web.example.com" for label host: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')`,
			invalid: true,
		},
		{
			name:    "a parent of another kind",
			parent:  team,
			rule:    ruleFor("App", "", "  - id: cm\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}\n"),
			want:    `rule "r": the parent is example.com/v1 Team, but the rule's parent is example.com/v1 App`,
			invalid: true,
		},
		{
			name:    "a parent without a UID",
			parent:  strings.Replace(app, "  uid: 1111-2222\n", "", 1),
			rule:    ruleFor("App", "", "  - id: cm\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}\n"),
			want:    `rule "r": the parent web has no metadata.uid`,
			invalid: true,
		},
		{
			name:    "a namespaced parent without a namespace",
			parent:  strings.Replace(app, "  namespace: team-a\n", "", 1),
			rule:    ruleFor("App", "", "  - id: cm\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}\n"),
			want:    `rule "r": the parent web is namespaced but has no metadata.namespace`,
			invalid: true,
		},
		{
			name:   "a child of unknown kind",
			parent: app,
			rule:   ruleFor("App", "", "  - id: w\n    template: {apiVersion: example.com/v1, kind: Widget, metadata: {name: x}}\n"),
			want:   `rule "r": child "w": unknown kind: kind Widget (apiVersion example.com/v1) is not a built-in kind, and neither its CustomResourceDefinition nor its resource name was given`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Render(parseRule(t, tt.rule), object(t, tt.parent), Observed{}, scoper(t))
			if err == nil {
				t.Fatalf("Render() succeeded, want error %s", tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("Render() error:\n%s\nwant:\n%s", err, tt.want)
			}
			if got := errors.Is(err, ErrInvalid); got != tt.invalid {
				t.Errorf("errors.Is(err, ErrInvalid) = %t, want %t", got, tt.invalid)
			}
			var re *RenderError
			if got := errors.As(err, &re); got != tt.invalid {
				t.Errorf("errors.As(err, *RenderError) = %t, want %t", got, tt.invalid)
			}
		})
	}
}

func TestRenderLimitIsInvalid(t *testing.T) {
	doc := ruleFor("App", "", "  - id: cm\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x}, data: {a: '${parent.spec.big}'}}\n")
	rs, err := rules.Parse("rules.yaml", []byte(doc), rules.Options{MaxOutputBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	parent := object(t, app)
	parent.Object["spec"].(map[string]any)["big"] = strings.Repeat("x", 2000)
	_, err = Render(rs[0], parent, Observed{}, scoper(t))
	if !errors.Is(err, ErrInvalid) || !errors.Is(err, rules.ErrLimitExceeded) {
		t.Fatalf("Render() error = %v, want one matching ErrInvalid and rules.ErrLimitExceeded", err)
	}
}

func TestReady(t *testing.T) {
	rule := parseRule(t, ruleFor("App", "", `  - id: deploy
    readyWhen:
    - ${self.status.availableReplicas >= parent.spec.replicas}
    - ${self.status.?conditions.orValue([]).exists(c, c.type == "Available")}
    template: {apiVersion: apps/v1, kind: Deployment, metadata: {name: web}}
  - id: cm
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: web}}
  - id: svc
    readyWhen: ["${has(children.cm.data) && self.spec.type == 'ClusterIP'}"]
    template: {apiVersion: v1, kind: Service, metadata: {name: web}}
  - id: port
    readyWhen: ["${int(self.data.port) > 9000}"]
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: port}}
`))
	parent := object(t, app)
	port := func(v string) *unstructured.Unstructured {
		return object(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: port}\ndata: {port: \""+v+"\"}\n")
	}
	deploy := func(status string) *unstructured.Unstructured {
		return object(t, "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nstatus: "+status+"\n")
	}
	svc := object(t, "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {type: ClusterIP}\n")
	cm := object(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\ndata: {a: b}\n")
	tests := []struct {
		name     string
		id       string
		self     *unstructured.Unstructured
		observed map[string][]*unstructured.Unstructured
		want     bool
		wantMsg  string
	}{
		{name: "ready", id: "deploy", self: deploy("{availableReplicas: 2, conditions: [{type: Available}]}"), want: true},
		{name: "first condition false", id: "deploy", self: deploy("{availableReplicas: 1}"),
			wantMsg: "status.availableReplicas is 1, wants >= 2 (parent.spec.replicas)"},
		{name: "second condition false", id: "deploy", self: deploy("{availableReplicas: 2}"),
			wantMsg: `readyWhen ${self.status.?conditions.orValue([]).exists(c, c.type == "Available")} is false (status.conditions is not set)`},
		{name: "field not set yet", id: "deploy", self: deploy("{}"),
			wantMsg: "waiting for status.availableReplicas (not set yet)"},
		{name: "status not set yet", id: "deploy", self: object(t, "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n"),
			wantMsg: "waiting for status.availableReplicas (not set yet)"},
		{name: "an error no missing field explains", id: "deploy", self: deploy("{availableReplicas: two}"),
			wantMsg: `readyWhen ${self.status.availableReplicas >= parent.spec.replicas} cannot be evaluated on what it read (status.availableReplicas is "two", parent.spec.replicas is 2): the values are not of the types the expression takes (no such overload)`},
		// A shape Why does not explain: the values read, not CEL's error
		// alone (an audit saw "type conversion error from 'string' to
		// 'int'" with nothing of the value).
		{name: "a shape Why does not explain", id: "port", self: port("8080"),
			wantMsg: `readyWhen ${int(self.data.port) > 9000} is false (data.port is "8080")`},
		{name: "a value the expression cannot take", id: "port", self: port("http"),
			wantMsg: `readyWhen ${int(self.data.port) > 9000} cannot be evaluated on what it read (data.port is "http"): type conversion error from 'string' to 'int'`},
		{name: "does not exist", id: "deploy", wantMsg: "child deploy does not exist yet"},
		{name: "no readyWhen", id: "cm", self: cm, want: true},
		{name: "reads another child", id: "svc", self: svc, observed: map[string][]*unstructured.Unstructured{"cm": {cm}}, want: true},
		{name: "waits for another child", id: "svc", self: svc,
			wantMsg: "readyWhen ${has(children.cm.data) && self.spec.type == 'ClusterIP'} is waiting for child cm"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, msg, err := Ready(rule, Child{ID: tt.id}, parent, tt.self, Observed{Children: tt.observed})
			if err != nil {
				t.Fatalf("Ready() error: %v", err)
			}
			if got != tt.want || msg != tt.wantMsg {
				t.Errorf("Ready() = %t, %q; want %t, %q", got, msg, tt.want, tt.wantMsg)
			}
		})
	}
	if _, _, err := Ready(rule, Child{ID: "nope"}, parent, cm, Observed{}); err == nil || err.Error() != `rule "r" has no child "nope"` {
		t.Errorf("Ready(nope) error = %v", err)
	}
}

func TestReadyLimitIsInvalid(t *testing.T) {
	doc := ruleFor("App", "", "  - id: cm\n    readyWhen: ['${self.data.list.all(x, self.data.list.all(y, x != \"\"))}']\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}\n")
	rs, err := rules.Parse("rules.yaml", []byte(doc), rules.Options{CostLimit: 100})
	if err != nil {
		t.Fatal(err)
	}
	self := object(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {list: [a, b, c, d, e, f, g, h, i, j, k, l]}\n")
	_, _, err = Ready(rs[0], Child{ID: "cm"}, object(t, app), self, Observed{})
	if !errors.Is(err, ErrInvalid) || !errors.Is(err, rules.ErrLimitExceeded) {
		t.Fatalf("Ready() error = %v, want one matching ErrInvalid and rules.ErrLimitExceeded", err)
	}
}
