package rules

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// eachRule is a rule with one forEach child: its forEach lines and extra
// child lines, and a template whose name uses the forEach names.
func eachRule(forEach, name, extra string) string {
	return header + "  - id: a\n    forEach: " + forEach + "\n" + extra +
		"    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {name: \"" + name + "\"}\n"
}

func TestForEachErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{"not a list", eachRule(`"${parent.spec.list}"`, "x", ""), `rules.yaml:8:14: rule "r": child "a": forEach: must be a list of {NAME: "${list or map expression}"}`},
		{"two names in one entry", eachRule(`[{a: "${[1]}", b: "${[2]}"}]`, "x-${a}", ""), `rules.yaml:8:15: rule "r": child "a": forEach[0]: must be a mapping of one name to a "${list or map expression}": write one entry per name, in the order of the product`},
		{"a bad name", eachRule(`[{A-b: "${[1]}"}]`, "x", ""), `rules.yaml:8:16: rule "r": child "a": forEach[0]: forEach name "A-b" must match [a-z][a-zA-Z0-9_]*`},
		{"a reserved name", eachRule(`[{parent: "${[1]}"}]`, "x", ""), `rules.yaml:8:16: rule "r": child "a": forEach[0]: forEach name "parent" is a variable of every expression already: pick another`},
		{"a duplicate name", eachRule(`[{a: "${[1]}"}, {a: "${[2]}"}]`, "x-${a}", ""), `rules.yaml:8:31: rule "r": child "a": forEach[1]: duplicate forEach name "a"`},
		{"text around the expression", eachRule(`[{a: "x${[1]}"}]`, "x-${a}", ""), `rules.yaml:8:19: rule "r": child "a": forEach[0].a: must be exactly one "${...}" expression, with no text around it`},
		{"not a list or map", eachRule(`[{a: "${1}"}]`, "x-${a}", ""), `rules.yaml:8:20: rule "r": child "a": forEach[0].a: ${1}: must be a list or a map, but its type is int`},
		{"a name without the forEach name", eachRule(`[{a: "${[1, 2]}"}]`, "x-${parent.metadata.name}", ""), `rules.yaml:12:24: rule "r": child "a": template.metadata.name: must use a forEach name (a): kgen tells the objects of a forEach child apart by their names`},
		{"a literal name", eachRule(`[{a: "${[1, 2]}"}]`, "x", ""), `rules.yaml:12:24: rule "r": child "a": template.metadata.name: must use a forEach name (a): kgen tells the objects of a forEach child apart by their names`},
		{"a forEach name elsewhere", header + "  - id: a\n" + cm("${region}"), `rules.yaml:11:27: rule "r": child "a": template.metadata.name: ${region}: undeclared reference to 'region' (in container '')`},
		{"fine", eachRule(`[{region: "${parent.spec.list}"}, {tier: "${parent.spec.map}"}]`, "x-${region}-${tier.key}", "    includeWhen: ['${tier.value != \"\"}']\n    readyWhen: ['${self.metadata.name.endsWith(tier.key)}']\n"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("rules.yaml", []byte(tt.yaml), Options{})
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("Parse() error:\n%s\nwant:\n%s\n%s", got, tt.want, tt.yaml)
			}
		})
	}
}

func TestElements(t *testing.T) {
	tests := []struct {
		name    string
		forEach string
		want    []map[string]any
		wantErr string
	}{
		{
			name:    "a list times a map, the first entry varying slowest, map keys sorted",
			forEach: `[{r: "${['eu', 'us']}"}, {t: '${{"web": 1, "db": 2}}'}]`,
			want: []map[string]any{
				{"r": "eu", "t": map[string]any{"key": "db", "value": int64(2)}},
				{"r": "eu", "t": map[string]any{"key": "web", "value": int64(1)}},
				{"r": "us", "t": map[string]any{"key": "db", "value": int64(2)}},
				{"r": "us", "t": map[string]any{"key": "web", "value": int64(1)}},
			},
		},
		{name: "an empty list", forEach: `[{r: "${parent.spec.list.filter(x, false)}"}, {t: "${[1]}"}]`, want: []map[string]any{}},
		{name: "an empty optional", forEach: `[{r: "${parent.spec.?nothing}"}]`, want: []map[string]any{}},
		{name: "parent data", forEach: `[{r: "${parent.spec.list}"}]`, want: []map[string]any{{"r": "a"}, {"r": "b"}}},
		{name: "not a list at run time", forEach: `[{r: "${parent.spec.replicas}"}]`, wantErr: "${parent.spec.replicas}: must be a list or a map, but is int64"},
		{name: "too many", forEach: `[{r: "${lists.range(100)}"}, {t: "${lists.range(11)}"}]`, wantErr: "${lists.range(11)}: number of forEach elements exceeds the limit of 1000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := Parse("rules.yaml", []byte(eachRule(tt.forEach, "x-${r}", "")), Options{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := rs[0].Children[0].Elements(NewVars(testParent(), nil, nil))
			if tt.wantErr != "" {
				if err == nil || !strings.HasSuffix(err.Error(), tt.wantErr) {
					t.Fatalf("Elements() error = %v, want one ending in %s", err, tt.wantErr)
				}
				if strings.Contains(tt.wantErr, "limit") && !errors.Is(err, ErrLimitExceeded) {
					t.Errorf("Elements() error does not match ErrLimitExceeded")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 0 && len(tt.want) == 0 {
				return
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Elements() = %v, want %v", got, tt.want)
			}
		})
	}
}
