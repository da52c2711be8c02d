package rules

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// statusValue compiles value (YAML) as the status field "v" of a rule and
// evaluates it with the given parent.
func statusValue(t *testing.T, value string, parent map[string]any, opts Options) (any, bool, error) {
	t.Helper()
	doc := header + "  - id: a\n" + cm("a") + "  status:\n    v: " + value + "\n"
	rules, err := Parse("rules.yaml", []byte(doc), opts)
	if err != nil {
		t.Fatalf("Parse(%s): %v", value, err)
	}
	return rules[0].Status[0].Value.Evaluate(NewVars(parent, nil, nil))
}

func testParent() map[string]any {
	return map[string]any{
		"apiVersion": "example.com/v1",
		"kind":       "App",
		"metadata":   map[string]any{"name": "web", "namespace": "team-a"},
		"spec": map[string]any{
			"replicas": int64(3),
			"ratio":    0.25,
			"list":     []any{"a", "b"},
			"map":      map[string]any{"k": "v", "n": int64(1)},
			"evil":     "${parent.metadata.name}",
			"yaml":     "\nkind: Secret\nmetadata: {name: x}",
			"empty":    "",
		},
	}
}

func TestEvaluate(t *testing.T) {
	tests := []struct {
		name   string
		value  string
		want   any
		absent bool
	}{
		// Literals keep their YAML 1.2 types.
		{name: "int literal", value: "3", want: int64(3)},
		{name: "float literal", value: "1.5", want: 1.5},
		{name: "bool literal", value: "true", want: true},
		{name: "null literal", value: "null", want: nil},
		{name: "yes is a string", value: "yes", want: "yes"},
		{name: "plain string", value: "hello", want: "hello"},
		{name: "escaped ${", value: `"$${not} an expression"`, want: "${not} an expression"},
		{name: "nested literal", value: "{a: [1, x], b: {c: null}}", want: map[string]any{"a": []any{int64(1), "x"}, "b": map[string]any{"c": nil}}},

		// A whole-value expression keeps its type.
		{name: "int", value: "${parent.spec.replicas}", want: int64(3)},
		{name: "uint", value: "${2u}", want: int64(2)},
		{name: "double", value: "${parent.spec.ratio * 2.0}", want: 0.5},
		{name: "bool", value: "${parent.spec.replicas > 2}", want: true},
		{name: "null", value: "${null}", want: nil},
		{name: "string", value: "${parent.metadata.name}", want: "web"},
		{name: "list from parent", value: "${parent.spec.list}", want: []any{"a", "b"}},
		{name: "map from parent", value: "${parent.spec.map}", want: map[string]any{"k": "v", "n": int64(1)}},
		{name: "computed list", value: "${[1, 2].map(x, x * 2)}", want: []any{int64(2), int64(4)}},
		{name: "computed map", value: `'${{"a": parent.spec.replicas}}'`, want: map[string]any{"a": int64(3)}},
		{name: "bytes are base64", value: `${b"hi"}`, want: "aGk="},
		{name: "duration", value: `${duration("90s")}`, want: "1m30s"},
		{name: "timestamp", value: `${timestamp("2024-01-02T03:04:05Z")}`, want: "2024-01-02T03:04:05Z"},
		{name: "quantity", value: `${quantity("1536Mi")}`, want: "1536Mi"},
		{name: "quantity arithmetic", value: `${quantity("1Gi").add(quantity("512Mi")).isGreaterThan(quantity("1Gi"))}`, want: true},
		{name: "url", value: `${url("https://example.com:8443/x").getHost()}`, want: "example.com:8443"},
		{name: "regex", value: `${parent.metadata.name.matches("^w")}`, want: true},
		{name: "strings library", value: `${parent.spec.list.join("-").upperAscii()}`, want: "A-B"},
		{name: "optional value", value: "${parent.spec.?replicas}", want: int64(3)},
		{name: "optional default", value: "${parent.spec.?missing.orValue(7)}", want: int64(7)},
		{name: "empty optional is absent", value: "${parent.spec.?missing}", absent: true},
		{name: "braces and quotes inside", value: `"${{'k': '}'}.k + \"{\"}"`, want: "}{"},
		{name: "raw string", value: `${r'\d}'}`, want: `\d}`},

		// Mixed strings interpolate.
		{name: "interpolated int", value: "n-${parent.spec.replicas}", want: "n-3"},
		{name: "interpolated floats", value: "${1.5} ${2.0} ${1e21} ${0.0000001}", want: "1.5 2 1e+21 1e-07"},
		{name: "interpolated bool", value: "x-${parent.spec.replicas > 5}", want: "x-false"},
		{name: "interpolated list is JSON", value: "l=${parent.spec.list}", want: `l=["a","b"]`},
		{name: "interpolated map is JSON", value: "m=${parent.spec.map}", want: `m={"k":"v","n":1}`},
		{name: "interpolated null", value: "n=${null}", want: "n=null"},
		{name: "interpolated empty optional", value: "o=${parent.spec.?missing}", want: "o="},
		{name: "interpolated quantity", value: `q=${quantity("2Gi")}`, want: "q=2Gi"},
		{name: "several expressions", value: "${parent.metadata.name}.${parent.metadata.namespace}.svc", want: "web.team-a.svc"},

		// Values are data, never syntax.
		{name: "expression text in data", value: "${parent.spec.evil}", want: "${parent.metadata.name}"},
		{name: "expression text interpolated", value: "x-${parent.spec.evil}", want: "x-${parent.metadata.name}"},
		{name: "YAML text in data", value: "${parent.spec.yaml}", want: "\nkind: Secret\nmetadata: {name: x}"},
		{name: "empty string", value: "${parent.spec.empty}", want: ""},

		// Absent values leave their entry or item out.
		{name: "absent map entry", value: "{a: '${parent.spec.?missing}', b: 1}", want: map[string]any{"b": int64(1)}},
		{name: "absent list item", value: "['${parent.spec.?missing}', 1]", want: []any{int64(1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent := testParent()
			got, ok, err := statusValue(t, tt.value, parent, Options{})
			if err != nil {
				t.Fatalf("Evaluate(%s) error: %v", tt.value, err)
			}
			if ok == tt.absent {
				t.Fatalf("Evaluate(%s) present = %t, want %t", tt.value, ok, !tt.absent)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Evaluate(%s) = %#v, want %#v", tt.value, got, tt.want)
			}
			if !reflect.DeepEqual(parent, testParent()) {
				t.Errorf("Evaluate(%s) changed the parent", tt.value)
			}
		})
	}
}

func TestEvaluateCopies(t *testing.T) {
	parent := testParent()
	got, _, err := statusValue(t, "${parent.spec.map}", parent, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got.(map[string]any)["k"] = "changed"
	if v := parent["spec"].(map[string]any)["map"].(map[string]any)["k"]; v != "v" {
		t.Errorf("changing the result changed the parent: spec.map.k = %v", v)
	}
}

func TestEvaluateErrors(t *testing.T) {
	big := strings.Repeat("x", 300)
	tests := []struct {
		name  string
		value string
		opts  Options
		want  string
		limit bool
	}{
		{
			name:  "missing field",
			value: "${parent.spec.nope}",
			want:  `rules.yaml:13:8: rule "r": spec.status.v: ${parent.spec.nope}: no such key: nope`,
		},
		{
			name:  "missing field in interpolation",
			value: "x-${parent.spec.nope}",
			want:  `rules.yaml:13:10: rule "r": spec.status.v: ${parent.spec.nope}: no such key: nope`,
		},
		{
			name:  "NaN",
			value: "${0.0 / 0.0}",
			want:  `rules.yaml:13:8: rule "r": spec.status.v: ${0.0 / 0.0}: NaN is not a JSON number`,
		},
		{
			name:  "non-string map key",
			value: `"${{1: 'a'}}"`,
			want:  `rules.yaml:13:9: rule "r": spec.status.v: ${{1: 'a'}}: a map key of type int cannot be rendered: JSON keys are strings`,
		},
		{
			name:  "cost limit",
			value: "${parent.spec.list.map(x, parent.spec.list.map(y, x + y))}",
			opts:  Options{CostLimit: 10},
			want:  `rules.yaml:13:8: rule "r": spec.status.v: ${parent.spec.list.map(x, parent.spec.list.map(y, x + y))}: evaluation cost exceeds the limit of 10`,
			limit: true,
		},
		{
			name:  "output size of a parent value",
			value: "${parent.spec.big}",
			opts:  Options{MaxOutputBytes: 100},
			want:  `rules.yaml:13:8: rule "r": spec.status.v: ${parent.spec.big}: output size in bytes exceeds the limit of 100`,
			limit: true,
		},
		{
			name:  "output size of a computed value",
			value: "${[parent.spec.big, parent.spec.big]}",
			opts:  Options{MaxOutputBytes: 500},
			want:  `rules.yaml:13:8: rule "r": spec.status.v: ${[parent.spec.big, parent.spec.big]}: output size in bytes exceeds the limit of 500`,
			limit: true,
		},
		{
			name:  "output size of an interpolation",
			value: "${parent.spec.big}${parent.spec.big}",
			opts:  Options{MaxOutputBytes: 500},
			want:  `rules.yaml:13:26: rule "r": spec.status.v: ${parent.spec.big}: output size in bytes exceeds the limit of 500`,
			limit: true,
		},
		{
			name:  "output size of literals",
			value: "[" + big + ", " + big + "]",
			opts:  Options{MaxOutputBytes: 500},
			want:  `rule "r": spec.status.v: output size in bytes exceeds the limit of 500`,
			limit: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent := testParent()
			parent["spec"].(map[string]any)["big"] = big
			_, _, err := statusValue(t, tt.value, parent, tt.opts)
			if err == nil {
				t.Fatalf("Evaluate(%s) succeeded, want error %q", tt.value, tt.want)
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("Evaluate(%s) error:\n%s\nwant:\n%s", tt.value, got, tt.want)
			}
			var re *Error
			if !errors.As(err, &re) {
				t.Errorf("Evaluate(%s) error is a %T, not an *Error", tt.value, err)
			}
			if got := errors.Is(err, ErrLimitExceeded); got != tt.limit {
				t.Errorf("errors.Is(err, ErrLimitExceeded) = %t, want %t", got, tt.limit)
			}
		})
	}
}

// TestCostLimitStopsHostileInput checks that the default limit stops an
// expression that a large parent would make very expensive, at once.
func TestCostLimitStopsHostileInput(t *testing.T) {
	list := make([]any, 5000)
	for i := range list {
		list[i] = strings.Repeat("y", 100)
	}
	parent := testParent()
	parent["spec"].(map[string]any)["huge"] = list
	_, _, err := statusValue(t, "${parent.spec.huge.map(x, parent.spec.huge.filter(y, y == x).size())}", parent, Options{})
	if !errors.Is(err, ErrLimitExceeded) {
		t.Fatalf("error = %v, want one matching ErrLimitExceeded", err)
	}
}

func TestEvalBool(t *testing.T) {
	doc := header + "  - id: a\n    includeWhen: ['${parent.spec.replicas > 1}', '${parent.spec.flag}']\n" + cm("a")
	rules, err := Parse("rules.yaml", []byte(doc), Options{})
	if err != nil {
		t.Fatal(err)
	}
	conds := rules[0].Children[0].IncludeWhen
	parent := testParent()
	if ok, err := conds[0].EvalBool(NewVars(parent, nil, nil)); err != nil || !ok {
		t.Errorf("EvalBool(%s) = %t, %v; want true, nil", conds[0], ok, err)
	}
	parent["spec"].(map[string]any)["flag"] = "yes"
	_, err = conds[1].EvalBool(NewVars(parent, nil, nil))
	want := `rules.yaml:8:51: rule "r": child "a": includeWhen[1]: ${parent.spec.flag}: must evaluate to a bool, but got string`
	if err == nil || err.Error() != want {
		t.Errorf("EvalBool(%s) error = %v, want %s", conds[1], err, want)
	}
}

func TestLiteral(t *testing.T) {
	doc := header + `  - id: a
    template:
      apiVersion: rbac.authorization.k8s.io/v1
      kind: RoleBinding
      metadata: {name: "${parent.metadata.name}"}
      roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: admin}
      subjects: [{kind: User, name: "$${x}"}]
      spec: {replicas: 3}
`
	rules, err := Parse("rules.yaml", []byte(doc), Options{})
	if err != nil {
		t.Fatal(err)
	}
	tmpl := rules[0].Children[0].Template
	tests := []struct {
		path   []string
		want   any
		wantOK bool
	}{
		{path: []string{"roleRef", "name"}, want: "admin", wantOK: true},
		{path: []string{"kind"}, want: "RoleBinding", wantOK: true},
		{path: []string{"spec", "replicas"}, want: int64(3), wantOK: true},
		{path: []string{"metadata", "name"}},         // an expression
		{path: []string{"roleRef"}},                  // a map
		{path: []string{"subjects"}},                 // a list
		{path: []string{"roleRef", "name", "extra"}}, // below a scalar
		{path: []string{"missing"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.path, "."), func(t *testing.T) {
			got, ok := tmpl.Literal(tt.path...)
			if ok != tt.wantOK || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Literal(%q) = %#v, %t; want %#v, %t", tt.path, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}
