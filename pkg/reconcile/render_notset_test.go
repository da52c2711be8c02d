package reconcile

import (
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A child that reads a field of another child that is not set yet (a
// Deployment's status.availableReplicas, which the API server leaves out
// while it is 0) waits for it, in its template, its includeWhen or its
// forEach, as for a child that does not exist: the other children render,
// so a change of the parent still lands on them. A field of the parent
// that is not set stays the rule's error.
func TestRenderWaitsForAChildFieldNotSet(t *testing.T) {
	deployment := `  - id: deployment
    template:
      apiVersion: apps/v1
      kind: Deployment
      metadata: {name: "${parent.metadata.name}"}
      spec: {replicas: "${parent.spec.replicas}"}
`
	for _, tc := range []struct {
		name, child string
		invalid     bool
		set         bool           // the deployment's status is set
		status      map[string]any // the deployment's status before, if not {replicas: 2}
		want        string         // the wait's message, if not for availableReplicas
	}{
		{name: "template", child: `  - id: ep
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-ep"}
      data: {available: "${string(children.deployment.status.availableReplicas)}"}
`},
		{name: "includeWhen", child: `  - id: ep
    includeWhen: ["${children.deployment.status.availableReplicas > 0}"]
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: "${parent.metadata.name}-ep"}}
`},
		{name: "forEach", child: `  - id: ep
    forEach: [{c: "${children.deployment.status.conditions}"}]
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: "${parent.metadata.name}-${c.type}"}}
`},
		// A live audit: an index into a list that is not set (a Service's
		// status.loadBalancer.ingress[0].ip) was the rule's error, and
		// blocked a change of the parent from reaching the other children.
		{name: "index", child: `  - id: ep
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-ep"}
      data: {first: "${children.deployment.status.conditions[0].type}:${parent.spec.replicas}"}
`, want: "waiting for children.deployment.status.conditions[0].type (not set yet)"},
		// A live check: in a branch of a conditional, it was the rule's
		// error.
		{name: "index in the branch taken", child: `  - id: ep
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-ep"}
      data: {first: "${parent.metadata.name == 'web' ? children.deployment.status.conditions[0].type : 'x'}"}
`, want: "waiting for children.deployment.status.conditions[0].type (not set yet)"},
		{name: "index in the else branch taken", child: `  - id: ep
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-ep"}
      data: {first: "${parent.metadata.name != 'web' ? 'x' : children.deployment.status.conditions[0].type}"}
`, want: "waiting for children.deployment.status.conditions[0].type (not set yet)"},
		{name: "index of an empty list", status: map[string]any{"conditions": []any{}}, child: `  - id: ep
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-ep"}
      data: {first: "${children.deployment.status.conditions[0].type}"}
`, want: "waiting for children.deployment.status.conditions[0].type (not set yet)"},
		// An error of another cause, in an expression that also reads the
		// field not set, in a branch not taken.
		{name: "another error", invalid: true, child: `  - id: ep
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-ep"}
      data: {available: "${has(children.deployment.status.availableReplicas) ? string(children.deployment.status.availableReplicas) : string(int(parent.metadata.name))}"}
`},
		{name: "parent field", invalid: true, set: true, child: `  - id: ep
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-ep"}
      data: {available: "${string(children.deployment.status.availableReplicas)}", owner: "${parent.spec.owner}"}
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rule := parseRule(t, ruleFor("App", "", deployment+tc.child))
			parent := object(t, app)
			live := object(t, "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: team-a}\nspec: {replicas: 2}\nstatus: {replicas: 2}\n")
			if tc.status != nil {
				live.Object["status"] = tc.status
			}
			observed := Observed{Children: map[string][]*unstructured.Unstructured{"deployment": {live}}}
			if tc.invalid {
				if tc.set {
					live.Object["status"] = map[string]any{"availableReplicas": int64(2)}
				}
				_, err := Render(rule, parent, observed, scoper(t))
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("Render = %v, want the rule's error", err)
				}
				return
			}
			got, err := Render(rule, parent, observed, scoper(t))
			if err != nil {
				t.Fatal(err)
			}
			if n := names(got.Children); len(n) != 1 || n[0] != "deployment/web" {
				t.Errorf("children = %q, want the deployment alone", n)
			}
			want := "waiting for children.deployment.status.availableReplicas (not set yet)"
			if tc.name == "forEach" {
				want = "waiting for children.deployment.status.conditions (not set yet)"
			}
			if tc.want != "" {
				want = tc.want
			}
			if w := got.Waiting["ep"]; w.Reason != ReasonWaiting || w.Message != want || w.Child != "deployment" {
				t.Errorf("Waiting[ep] = %+v, want %q", w, want)
			}

			// Once it is set, the child renders.
			live.Object["status"] = map[string]any{"availableReplicas": int64(2), "conditions": []any{map[string]any{"type": "available"}}}
			got, err = Render(rule, parent, observed, scoper(t))
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Children) != 2 || len(got.Waiting) != 0 {
				t.Errorf("with the field set: children %q, waiting %v", names(got.Children), got.Waiting)
			}
		})
	}
}

// Through reconciles: the parent says what the child waits for, a field
// of a child this reconcile created, not the child it waited for before
// (no reconcile follows kgen's own write); a change of the parent still
// reaches the other child; once the field is set, the waiting child is
// made.
func TestReconcileWaitsForAChildFieldNotSet(t *testing.T) {
	h := newHarness(t, `apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: app}
spec:
  parent: {apiVersion: example.com/v1, kind: App}
  children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-config"}
      data: {image: "${parent.spec.image}"}
  - id: reader
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-reader"}
      data: {token: "${children.config.data.token}"}
`)
	const want = "child reader is waiting for children.config.data.token (not set yet)"
	if _, err := h.reconcile(appParent(nil)); err != nil {
		t.Fatal(err)
	}
	if c := h.ready(); c["reason"] != ReasonWaiting || c["message"] != want {
		t.Errorf("Ready = %v, want %s: %s", c, ReasonWaiting, want)
	}
	h.setSpec(map[string]any{"image": "nginx:2"})
	if _, err := h.reconcile(appParent(nil)); err != nil {
		t.Fatal(err)
	}
	if img, _, _ := unstructured.NestedString(h.api.get(cmGVK, "team", "web-config").Object, "data", "image"); img != "nginx:2" {
		t.Errorf("config's image = %q after the parent's change, want nginx:2", img)
	}
	if h.api.get(cmGVK, "team", "web-reader") != nil {
		t.Fatal("the reader was made before the field it reads was set")
	}
	if c := h.ready(); c["reason"] != ReasonWaiting || c["message"] != want {
		t.Errorf("Ready = %v, want %s: %s", c, ReasonWaiting, want)
	}

	// Another writer sets the field.
	config := h.api.get(cmGVK, "team", "web-config")
	_ = unstructured.SetNestedField(config.Object, "t0k3n", "data", "token")
	h.api.add(config)
	if _, err := h.reconcile(appParent(nil)); err != nil {
		t.Fatal(err)
	}
	reader := h.api.get(cmGVK, "team", "web-reader")
	if token, _, _ := unstructured.NestedString(reader.Object, "data", "token"); token != "t0k3n" {
		t.Errorf("reader = %v", reader)
	}
	if c := h.ready(); c["status"] != "True" {
		t.Errorf("Ready = %v, want True", c)
	}
}

// A read of a child's list item counts as not set only where it failed
// (a review): an index of the parent's list that fails in the branch taken,
// beside the child's empty list in the other, is the rule's error; so is a
// negative index, which is never set. An item of a list that is null waits.
func TestRenderNotSetOnlyWhereItFailed(t *testing.T) {
	deployment := `  - id: deployment
    template:
      apiVersion: apps/v1
      kind: Deployment
      metadata: {name: "${parent.metadata.name}"}
      spec: {replicas: "${parent.spec.replicas}"}
`
	ep := func(expr string) string {
		return `  - id: ep
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-ep"}
      data: {first: "` + expr + `"}
`
	}
	for _, tc := range []struct {
		name, expr  string
		status      map[string]any
		wantInvalid bool
	}{
		{name: "parent index in the branch taken", status: map[string]any{"conditions": []any{}}, wantInvalid: true,
			expr: `${size(children.deployment.status.conditions) > 0 ? children.deployment.status.conditions[0].type : parent.spec.hosts[0]}`},
		{name: "negative index", status: map[string]any{"conditions": []any{map[string]any{"type": "a"}}}, wantInvalid: true,
			expr: `${children.deployment.status.conditions[-1].type}`},
		// A live check: the parent's list, empty too, is in the branch
		// not taken; the child's read, in the branch taken, failed.
		{name: "child index in the branch taken, parent index in the other", status: map[string]any{"conditions": []any{}}, wantInvalid: false,
			expr: `${parent.metadata.name != 'web' ? parent.spec.hosts[0] : children.deployment.status.conditions[0].type}`},
		// A review: a read of the parent not set fails with the same
		// error as one of a child's, whose error is swallowed or comes
		// second: the rule's error.
		{name: "a child's error swallowed, the parent's index fails", status: map[string]any{"conditions": []any{}}, wantInvalid: true,
			expr: `${(children.deployment.status.conditions[0].type == 'x' || true) ? parent.spec.hosts[0] : ''}`},
		{name: "swallowed in exists", status: map[string]any{"conditions": []any{}}, wantInvalid: true,
			expr: `${[0, 1].exists(i, i == 1 || children.deployment.status.conditions[0].type == 'a') ? parent.spec.hosts[0] : ''}`},
		{name: "swallowed, the parent's key fails", status: map[string]any{}, wantInvalid: true,
			expr: `${(children.deployment.status.replicas > 0 || true) ? string(parent.spec.x.replicas) : ''}`},
		{name: "the index argument fails", status: map[string]any{"conditions": []any{}}, wantInvalid: true,
			expr: `${children.deployment.status.conditions[parent.spec.hosts[0] == 'a' ? 0 : 1].type}`},
		{name: "the parent's path in the branch taken", status: map[string]any{}, wantInvalid: true,
			expr: `${parent.metadata.name != 'web' ? children.deployment.status.hosts : parent.spec.x.hosts}`},
		{name: "a qualifier after a conditional, the parent's", status: map[string]any{"conditions": []any{}}, wantInvalid: true,
			expr: `${(parent.metadata.name != 'web' ? children.deployment.status : parent.spec).hosts[0]}`},
		{name: "waits: read twice, the second taken", status: map[string]any{"conditions": []any{}}, wantInvalid: false,
			expr: `${parent.metadata.name != 'web' ? children.deployment.status.conditions[0].type : 'a' + children.deployment.status.conditions[0].type}`},
		{name: "waits: in a comprehension", status: map[string]any{"conditions": []any{}}, wantInvalid: false,
			expr: `${[1, 2].map(i, children.deployment.status.conditions[0].type + string(i)).join(',')}`},
		{name: "waits: an optional read, then a plain one", status: map[string]any{}, wantInvalid: false,
			expr: `${children.deployment.status.?ready.orValue(false) ? 'a' : children.deployment.status.conditions[0].type}`},
		{name: "waits: has() of a path whose parent is not set", status: nil, wantInvalid: false,
			expr: `${has(children.deployment.status.x) ? 'a' : 'b'}`},
		{name: "the parent's and a child's index, the parent's first", status: map[string]any{"conditions": []any{}}, wantInvalid: true,
			expr: `${parent.spec.hosts[0] + children.deployment.status.conditions[0].type}`},
		{name: "the same, in sizes", status: map[string]any{"conditions": []any{}}, wantInvalid: true,
			expr: `${string(size(parent.spec.hosts[0]) + size(children.deployment.status.conditions[0].type))}`},
		{name: "null list", status: map[string]any{"conditions": nil}, wantInvalid: false,
			expr: `${children.deployment.status.conditions[0].type}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rule := parseRule(t, ruleFor("App", "", deployment+ep(tc.expr)))
			parent := object(t, app)
			parent.Object["spec"].(map[string]any)["hosts"] = []any{}
			live := object(t, "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: team-a}\nspec: {replicas: 2}\n")
			live.Object["status"] = tc.status
			observed := Observed{Children: map[string][]*unstructured.Unstructured{"deployment": {live}}}
			got, err := Render(rule, parent, observed, scoper(t))
			if tc.wantInvalid != errors.Is(err, ErrInvalid) {
				var w any
				if got != nil {
					w = got.Waiting["ep"]
				}
				t.Errorf("Render err = %v, waiting %+v; want invalid=%v", err, w, tc.wantInvalid)
			}
		})
	}
}

// A child that waited for a child this reconcile created, and that cannot
// render once it exists for the rule's fault (a field of the parent that
// is not set), is not left saying it waits for that child (a live check:
// WaitingForDependency for minutes, nothing logged, since no reconcile
// follows kgen's own write): the reconcile asks for another, which reports
// the rule's error.
func TestReconcileAfterAWaitThatTurnsInvalid(t *testing.T) {
	h := newHarness(t, `apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: app}
spec:
  parent: {apiVersion: example.com/v1, kind: App}
  children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-config"}
  - id: reader
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-reader"}
      data: {v: "${children.config.metadata.name + parent.spec.missing}"}
`)
	res, err := h.reconcile(appParent(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Again {
		t.Errorf("Again = false, Ready = %v; want another reconcile, which reports the rule's error", h.ready())
	}
	if _, err := h.reconcile(appParent(nil)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("the next reconcile: %v, want the rule's error", err)
	}
	if c := h.ready(); c["reason"] != ReasonInvalid {
		t.Errorf("Ready = %v, want %s", c, ReasonInvalid)
	}
}
