package rules

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// Why explains a readyWhen that does not hold in a person's words: the
// field not set yet, the values a comparison saw; "" where the shape of the
// expression does not allow it.
func TestWhy(t *testing.T) {
	parent := testParent() // spec.replicas is 3
	tests := []struct {
		name string
		expr string
		self string // the child, as YAML
		each string // the forEach element, as YAML
		want string
	}{
		// A field that is not set yet.
		{name: "missing field", expr: "self.status.availableReplicas >= parent.spec.replicas", self: "status: {}",
			want: "waiting for status.availableReplicas (not set yet)"},
		{name: "missing nested field", expr: "self.status.availableReplicas >= parent.spec.replicas", self: "{}",
			want: "waiting for status.availableReplicas (not set yet)"},
		{name: "missing null field", expr: "self.status.availableReplicas >= 1", self: "status: {availableReplicas: null}",
			want: "waiting for status.availableReplicas (not set yet)"},
		{name: "first missing in reading order", expr: "self.status.ready && self.status.phase == 'Running'", self: "status: {}",
			want: "waiting for status.ready (not set yet)"},
		{name: "missing parent field", expr: "self.status.availableReplicas >= parent.spec.nope", self: "status: {availableReplicas: 1}",
			want: "parent.spec.nope is not set"},
		{name: "missing under an optional", expr: "self.status.?ready.orValue(false)", self: "{}",
			want: "waiting for status (not set yet)"},
		{name: "missing map key", expr: "self.metadata.labels['app.kubernetes.io/name'] == 'x'", self: "metadata: {labels: {}}",
			want: `waiting for metadata.labels["app.kubernetes.io/name"] (not set yet)`},
		{name: "missing list element", expr: "self.status.conditions[0].status == 'True'", self: "status: {conditions: []}",
			want: "waiting for status.conditions[0].status (not set yet)"},
		{name: "missing in a comprehension's range", expr: "self.status.conditions.exists(c, c.type == 'Ready')", self: "status: {}",
			want: "waiting for status.conditions (not set yet)"},
		{name: "has() is false", expr: "has(self.status.loadBalancer)", self: "status: {}",
			want: "waiting for status.loadBalancer (not set yet)"},
		{name: "has() guard", expr: "has(self.status.x) && self.status.x > 1", self: "status: {}",
			want: "waiting for status.x (not set yet)"},
		{name: "another child's field", expr: "children.config.data.ready == 'yes'", self: "{}",
			want: "waiting for children.config.data.ready (not set yet)"},

		// A comparison that is false, with the values it saw.
		{name: "false comparison of two fields", expr: "self.status.availableReplicas >= parent.spec.replicas", self: "status: {availableReplicas: 1}",
			want: "status.availableReplicas is 1, wants >= 3 (parent.spec.replicas)"},
		{name: "self named first", expr: "parent.spec.replicas <= self.status.availableReplicas", self: "status: {availableReplicas: 1}",
			want: "status.availableReplicas is 1, wants >= 3 (parent.spec.replicas)"},
		{name: "field and literal", expr: "self.status.phase == 'Running'", self: "status: {phase: Pending}",
			want: `status.phase is "Pending", wants == "Running"`},
		{name: "literal first", expr: "2 < self.status.readyReplicas", self: "status: {readyReplicas: 2}",
			want: "status.readyReplicas is 2, wants > 2"},
		{name: "floats", expr: "self.status.ratio > 0.5", self: "status: {ratio: 0.25}",
			want: "status.ratio is 0.25, wants > 0.5"},
		{name: "not equal", expr: "self.status.phase != 'Failed'", self: "status: {phase: Failed}",
			want: `status.phase is "Failed", wants != "Failed"`},
		{name: "forEach name", expr: "self.data.region == region", self: "data: {region: eu}", each: "us",
			want: `data.region is "eu", wants == "us" (region)`},
		{name: "false operand of a conjunction", expr: "self.status.replicas > 0 && self.status.readyReplicas == self.status.replicas", self: "status: {replicas: 2, readyReplicas: 1}",
			want: "status.readyReplicas is 1, wants == 2 (status.replicas)"},
		{name: "first false operand of three", expr: "self.status.a == 1 && self.status.b == 2 && self.status.c == 3", self: "status: {a: 1, b: 5, c: 4}",
			want: "status.b is 5, wants == 2"},
		{name: "operand of another shape", expr: "self.status.a == 1 && size(self.status.list) > 1", self: "status: {a: 1, list: [x]}",
			want: "${size(self.status.list) > 1} is false"},

		// A bool field.
		{name: "bool field false", expr: "self.status.ready", self: "status: {ready: false}",
			want: "status.ready is false, wants true"},
		{name: "negated bool field true", expr: "!self.spec.paused", self: "spec: {paused: true}",
			want: "spec.paused is true, wants false"},
		{name: "negated has()", expr: "!has(self.metadata.deletionTimestamp)", self: "metadata: {deletionTimestamp: '2024-01-01T00:00:00Z'}",
			want: "metadata.deletionTimestamp is set, wants it not set"},

		// exists() and all() over a list field.
		{name: "exists with no match", expr: "self.status.conditions.exists(c, c.type == 'Available' && c.status == 'True')",
			self: "status: {conditions: [{type: Available, status: 'False', message: long, reason: MinimumReplicasUnavailable}, {type: Progressing, status: 'True'}]}",
			want: `status.conditions has no entry where ${c.type == "Available" && c.status == "True"}; its entries: {type: "Available", status: "False"}, {type: "Progressing", status: "True"}`},
		{name: "exists over an empty list", expr: "self.status.conditions.exists(c, c.type == 'Ready')", self: "status: {conditions: []}",
			want: `status.conditions has no entry where ${c.type == "Ready"}: it has no entries`},
		{name: "all with an exception", expr: "self.status.items.all(i, i.ready)", self: "status: {items: [{ready: true, name: a}, {ready: false, name: b}]}",
			want: `status.items has an entry where not ${i.ready}; its entries: {ready: true}, {ready: false}`},
		{name: "exists in a conjunction", expr: "self.status.replicas > 0 && self.status.conditions.exists(c, c.type == 'Ready')", self: "status: {replicas: 1, conditions: [{type: Other}]}",
			want: `status.conditions has no entry where ${c.type == "Ready"}; its entries: {type: "Other"}`},

		// An optional field with a default, set or not.
		{name: "optional with a default, set", expr: "self.status.?availableReplicas.orValue(0) >= parent.spec.replicas", self: "status: {availableReplicas: 1}",
			want: "status.availableReplicas is 1, wants >= 3 (parent.spec.replicas)"},
		{name: "optional with a default, not set", expr: "self.status.?availableReplicas.orValue(0) >= parent.spec.replicas", self: "status: {}",
			want: "status.availableReplicas is not set yet (0 by default), wants >= 3 (parent.spec.replicas)"},
		{name: "optional chain with a default, not set", expr: "self.?status.?availableReplicas.orValue(0) >= 1", self: "{}",
			want: "status.availableReplicas is not set yet (0 by default), wants >= 1"},
		{name: "optional bool with a default", expr: "self.?status.?ready.orValue(false)", self: "{}",
			want: "status.ready is not set yet (false by default), wants true"},
		{name: "optional bool set false", expr: "self.?status.?ready.orValue(true)", self: "status: {ready: false}",
			want: "status.ready is false, wants true"},
		{name: "optional index with a default", expr: "self.metadata.labels[?'tier'].orValue('') == 'web'", self: "metadata: {labels: {}}",
			want: `metadata.labels.tier is not set yet ("" by default), wants == "web"`},
		{name: "optional parent field with a default", expr: "self.status.replicas == parent.spec.?size.orValue(2)", self: "status: {replicas: 1}",
			want: "status.replicas is 1, wants == 2 (the default of parent.spec.size, which is not set)"},
		{name: "forEach map element", expr: "self.data.region == region.name", self: "data: {region: eu}", each: "{name: us}",
			want: `data.region is "eu", wants == "us" (region.name)`},

		// Other expressions: the caller shows the expression.
		{name: "a function", expr: "size(self.status.list) > 1", self: "status: {list: [x]}"},
		{name: "a disjunction", expr: "self.status.a == 1 || self.status.b == 2", self: "status: {a: 0, b: 0}"},
		{name: "arithmetic", expr: "self.status.availableReplicas >= parent.spec.replicas - 1", self: "status: {availableReplicas: 1}"},
		{name: "an error no missing field explains", expr: "self.status.phase > 1", self: "status: {phase: Running}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := header + "  - id: config\n" + cm("config") +
				"  - id: a\n    forEach: [{region: '${[\"us\"]}'}]\n    readyWhen: [\"${" + tt.expr + "}\"]\n" + cm("a-${region}")
			rules, err := Parse("rules.yaml", []byte(doc), Options{})
			if err != nil {
				t.Fatal(err)
			}
			e := rules[0].Child("a").ReadyWhen[0]
			var self map[string]any
			if err := yaml.Unmarshal([]byte(tt.self), &self, func(d *json.Decoder) *json.Decoder { d.UseNumber(); return d }); err != nil {
				t.Fatal(err)
			}
			self = jsonInts(self).(map[string]any)
			children := map[string]any{"config": map[string]any{"data": map[string]any{}}}
			vars := NewVars(parent, children, self)
			if tt.each != "" {
				var each any
				if err := yaml.Unmarshal([]byte(tt.each), &each); err != nil {
					t.Fatal(err)
				}
				vars = vars.With(map[string]any{"region": each})
			}
			ok, err := e.EvalBool(vars)
			if ok {
				t.Fatalf("%s holds; the test wants one that does not", e)
			}
			if got := e.Why(vars, err); got != tt.want {
				t.Errorf("Why(%s) = %q, want %q (the evaluation said %v)", e, got, tt.want, err)
			}
		})
	}
}

// Why needs a compiled expression; show writes values as JSON.
func TestShow(t *testing.T) {
	for v, want := range map[any]string{int64(2): "2", 0.5: "0.5", "x": `"x"`, true: "true", nil: "null"} {
		if got := show(v); got != want {
			t.Errorf("show(%v) = %s, want %s", v, got, want)
		}
	}
	long := ""
	for i := range 30 {
		long += strconv.Itoa(i)
	}
	if got := show([]any{long}); len(got) > 64 {
		t.Errorf("show(a long list) = %s: not cut short", got)
	}
}

// Read and Why name what an expression read, but never a Secret's data:
// the parent's status, where their messages go, is read by many who may
// not read Secrets; and a long string is cut short (a whole configuration
// file would make the message larger than a condition may be).
func TestWhyHidesSecretsAndCutsLongValues(t *testing.T) {
	doc := header + "  - id: a\n    readyWhen: [\"${size(self.data.token) > 100}\", \"${self.data.token == 'x'}\", \"${self.data.cfg.contains('ready')}\"]\n" + cm("a")
	rs, err := Parse("rules.yaml", []byte(doc), Options{})
	if err != nil {
		t.Fatal(err)
	}
	exprs := rs[0].Child("a").ReadyWhen
	secret := map[string]any{"apiVersion": "v1", "kind": "Secret", "data": map[string]any{"token": "c2VjcmV0"}}
	vars := NewVars(map[string]any{}, map[string]any{}, secret)
	if got := exprs[0].Read(vars); got != "data.token is "+hiddenValue {
		t.Errorf("Read of a Secret's data = %q", got)
	}
	if got := exprs[1].Why(vars, nil); got != "data.token is "+hiddenValue+", wants == \"x\"" {
		t.Errorf("Why of a Secret's data = %q", got)
	}
	cm := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "data": map[string]any{"token": "abc", "cfg": strings.Repeat("line\n", 10000)}}
	vars = NewVars(map[string]any{}, map[string]any{}, cm)
	if got := exprs[0].Read(vars); got != `data.token is "abc"` {
		t.Errorf("Read of a ConfigMap's data = %q", got)
	}
	if got := exprs[2].Read(vars); len(got) > 100 || !strings.HasSuffix(got, "…") {
		t.Errorf("Read of a 50 KB value = %d bytes: %.100s", len(got), got)
	}
}
