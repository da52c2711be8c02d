package reconcile

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"kgen.dev/kgen/rules"
)

// Two child ids that render one object would each apply it as theirs, one
// after the other, forever: Render refuses them, as it refuses two
// elements of a forEach child with one name.
func TestRenderOneObjectTwice(t *testing.T) {
	cm := func(id, meta string) string {
		return "  - id: " + id + "\n    template: {apiVersion: v1, kind: ConfigMap, metadata: " + meta + "}\n"
	}
	cmWhen := func(id, includeWhen, meta string) string {
		return "  - id: " + id + "\n    includeWhen: ['" + includeWhen + "']\n    template: {apiVersion: v1, kind: ConfigMap, metadata: " + meta + "}\n"
	}
	tests := []struct {
		name     string
		spec     string         // extra lines of the rule's spec
		children string         // the rule's children
		parent   map[string]any // changes to the parent's spec
		want     string         // the error; none when empty
		rendered []string       // without an error: the children, as id/name
	}{
		{
			name:     "two ids, names equal only once rendered",
			children: cm("one", `{name: "${parent.metadata.name}-x"}`) + cm("two", `{name: "${parent.metadata.name + '-x'}"}`),
			want:     `rules.yaml:9:5: rule "r": children "one" and "two" both render ConfigMap team-a/web-x: give each child a name of its own`,
		},
		{
			name:     "an absent namespace is the parent's",
			children: cm("one", `{name: x}`) + cm("two", `{name: "${'x'}", namespace: "${parent.metadata.namespace}"}`),
			want:     `rules.yaml:9:5: rule "r": children "one" and "two" both render ConfigMap team-a/x: give each child a name of its own`,
		},
		{
			name: "a forEach element and an id",
			children: "  - id: each\n    forEach: [{r: \"${['a', 'b']}\"}]\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: 'web-${r}'}}\n" +
				cm("one", `{name: "${parent.metadata.name}-b"}`),
			want: `rules.yaml:10:5: rule "r": children "each" (forEach element 1) and "one" both render ConfigMap team-a/web-b: give each child a name of its own`,
		},
		{
			name: "two versions of one kind",
			children: "  - id: one\n    template: {apiVersion: autoscaling/v1, kind: HorizontalPodAutoscaler, metadata: {name: x}}\n" +
				"  - id: two\n    template: {apiVersion: autoscaling/v2, kind: HorizontalPodAutoscaler, metadata: {name: '${\"x\"}'}}\n",
			want: `rules.yaml:9:5: rule "r": children "one" and "two" both render HorizontalPodAutoscaler team-a/x: give each child a name of its own`,
		},
		{
			name:     "under includeWhen, while both are included",
			children: cmWhen("one", "${parent.spec.expose}", `{name: x}`) + cmWhen("two", "${parent.spec.replicas > 1}", `{name: x}`),
			want:     `rules.yaml:10:5: rule "r": children "one" and "two" both render ConfigMap team-a/x: give each child a name of its own`,
		},
		{
			name:     "under includeWhen, while one is excluded",
			children: cmWhen("one", "${parent.spec.expose}", `{name: x}`) + cmWhen("two", "${parent.spec.replicas > 1}", `{name: x}`),
			parent:   map[string]any{"replicas": int64(1)},
			rendered: []string{"one/x"},
		},
		{
			name:     "other namespaces",
			spec:     "  allowCrossNamespace: [shared]\n",
			children: cm("one", `{name: x}`) + cm("two", `{name: x, namespace: shared}`),
			rendered: []string{"one/x", "two/x"},
		},
		{
			name:     "other kinds",
			children: cm("one", `{name: x}`) + "  - id: two\n    template: {apiVersion: v1, kind: Secret, metadata: {name: x}}\n",
			rendered: []string{"one/x", "two/x"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent := object(t, app)
			for k, v := range tt.parent {
				parent.Object["spec"].(map[string]any)[k] = v
			}
			got, err := Render(parseRule(t, ruleFor("App", tt.spec, tt.children)), parent, Observed{}, scoper(t))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Render() error: %v", err)
				}
				if !reflect.DeepEqual(names(got.Children), tt.rendered) {
					t.Errorf("children = %q, want %q", names(got.Children), tt.rendered)
				}
				return
			}
			if err == nil || err.Error() != tt.want || !errors.Is(err, ErrInvalid) {
				t.Errorf("Render() error:\n%v\nwant:\n%s", err, tt.want)
			}
		})
	}
}

// Once a parent's change makes a second id render the object of the
// first, the reconcile writes no child and prunes nothing: the parent
// says why (InvalidSpec, naming both ids), and a reconcile again writes
// nothing at all.
func TestReconcileOneObjectTwice(t *testing.T) {
	h := newHarness(t, `apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: app}
spec:
  parent: {apiVersion: example.com/v1, kind: App}
  children:
  - id: one
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-x"}
      data: {from: one}
  - id: two
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.spec.?other.orValue(parent.metadata.name + '-y')}"}
      data: {from: two}
`)
	h.converge(appParent(nil))
	x, y := h.api.get(cmGVK, "team", "web-x"), h.api.get(cmGVK, "team", "web-y")
	if x == nil || y == nil {
		t.Fatalf("children web-x %v, web-y %v; want both", x, y)
	}

	p := h.setSpec(map[string]any{"other": "web-x"})
	_, err := h.reconcile(p)
	if !errors.Is(err, ErrTerminal) || !errors.Is(err, ErrInvalid) {
		t.Fatalf("reconcile error = %v, want a terminal ErrInvalid", err)
	}
	if w, want := h.api.writes(), []string{"patch apps/status team/web"}; !reflect.DeepEqual(w, want) {
		t.Errorf("writes = %q, want only %q", w, want)
	}
	const msg = `rules.yaml:13:5: rule "app": children "one" and "two" both render ConfigMap team/web-x: give each child a name of its own`
	if c := h.ready(); c["status"] != "False" || c["reason"] != ReasonInvalid || c["message"] != msg {
		t.Errorf("Ready = %v, want False %s %q", c, ReasonInvalid, msg)
	}
	if now := h.api.get(cmGVK, "team", "web-x"); now == nil || now.GetResourceVersion() != x.GetResourceVersion() {
		t.Errorf("web-x was written or deleted: %v", now)
	}
	if now := h.api.get(cmGVK, "team", "web-y"); now == nil || now.GetResourceVersion() != y.GetResourceVersion() {
		t.Errorf("web-y was written or deleted: %v", now)
	}

	h.api.resetRequests()
	if _, err := h.reconcile(p); !errors.Is(err, ErrInvalid) {
		t.Fatalf("reconcile again: error %v, want ErrInvalid", err)
	}
	if w := h.api.writes(); len(w) > 0 {
		t.Errorf("reconciling again wrote %q", w)
	}
}

// Errors on a parent say where in the rules the child is: file:line:column
// for a rules file, the field path for a Rule object; an API server that
// refuses a child's object names its template too, and one that fails for
// another reason does not.
func TestChildSource(t *testing.T) {
	const doc = `apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: app}
spec:
  parent: {apiVersion: example.com/v1, kind: App}
  children:
  - id: one
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: cm-x}}
  - id: two
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: cm-y}}
`
	fromFile := parseRule(t, doc)
	obj := map[string]any{}
	if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
		t.Fatal(err)
	}
	fromObject, err := rules.FromObject(obj, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		rule *rules.Rule
		id   string
		want string
	}{
		{fromFile, "two", "rules.yaml:9:5"},
		{fromObject, "two", "Rule/app spec.children[1]"},
		{fromFile, "three", ""},
	} {
		if got := ChildSource(tt.rule, tt.id); got != tt.want {
			t.Errorf("ChildSource(%s, %s) = %q, want %q", tt.rule.Pos.File, tt.id, got, tt.want)
		}
	}
	invalid := apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "y", nil)
	if _, msg := failure(fromObject, "two", "configmaps team/y", "apply", invalid); !strings.HasSuffix(msg, "(its template: Rule/app spec.children[1])") {
		t.Errorf("failure(invalid) = %q, want it to name the template", msg)
	}
	if _, msg := failure(fromObject, "two", "configmaps team/y", "apply", apierrors.NewServiceUnavailable("busy")); strings.Contains(msg, "template") {
		t.Errorf("failure(503) = %q, want no template named", msg)
	}
}
