package rules

import (
	"regexp"
	"strings"
	"testing"
)

func TestPolicies(t *testing.T) {
	secret := func(policies, value string) string {
		return header + "  - id: a\n" + policies + "    template:\n      apiVersion: v1\n      kind: Secret\n      metadata: {name: x}\n      stringData: {password: '" + value + "'}\n"
	}
	tests := []struct {
		name, yaml   string
		wantDeletion DeletionPolicy
		wantUpdate   UpdatePolicy
		wantErr      string
	}{
		{name: "defaults", yaml: secret("", "x"), wantDeletion: DeletionDelete, wantUpdate: UpdateApply},
		{name: "set", yaml: secret("    deletionPolicy: Orphan\n    updatePolicy: CreateOnly\n", "${randomString(16)}"), wantDeletion: DeletionOrphan, wantUpdate: UpdateCreateOnly},
		{name: "bad deletionPolicy", yaml: secret("    deletionPolicy: Keep\n", "x"),
			wantErr: `rules.yaml:8:21: rule "r": child "a": deletionPolicy: must be Delete or Orphan, not "Keep"`},
		{name: "bad updatePolicy", yaml: secret("    updatePolicy: Once\n", "x"),
			wantErr: `rules.yaml:8:19: rule "r": child "a": updatePolicy: must be Apply or CreateOnly, not "Once"`},
		{name: "randomString in an Apply child", yaml: secret("", "${randomString(16)}"),
			wantErr: `rules.yaml:12:31: rule "r": child "a": template.stringData.password: ${randomString(16)}: randomString is allowed only in the template of a child with updatePolicy: CreateOnly: elsewhere its value would change at every reconcile, and kgen would write forever`},
		{name: "randomString out of bounds", yaml: secret("    updatePolicy: CreateOnly\n", "${randomString(257)}"),
			wantErr: `rules.yaml:13:31: rule "r": child "a": template.stringData.password: ${randomString(257)}: randomString(257): n must be between 1 and 256`},
		{name: "randomString in includeWhen", yaml: secret("    updatePolicy: CreateOnly\n    includeWhen: ['${randomString(2) == \"ab\"}']\n", "x"),
			wantErr: `rules.yaml:9:20: rule "r": child "a": includeWhen[0]: ${randomString(2) == "ab"}: randomString is allowed only in the template of a child with updatePolicy: CreateOnly: elsewhere its value would change at every reconcile, and kgen would write forever`},
		{name: "randomString in status", yaml: secret("    updatePolicy: CreateOnly\n", "x") + "  status: {p: '${randomString(3)}'}\n",
			wantErr: `rules.yaml:14:16: rule "r": spec.status.p: ${randomString(3)}: randomString is allowed only in the template of a child with updatePolicy: CreateOnly: elsewhere its value would change at every reconcile, and kgen would write forever`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := Parse("rules.yaml", []byte(tt.yaml), Options{})
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("Parse() error:\n%v\nwant:\n%s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c := rs[0].Children[0]
			if c.DeletionPolicy != tt.wantDeletion || c.UpdatePolicy != tt.wantUpdate {
				t.Errorf("policies = %s, %s; want %s, %s", c.DeletionPolicy, c.UpdatePolicy, tt.wantDeletion, tt.wantUpdate)
			}
		})
	}
}

func TestRandomString(t *testing.T) {
	doc := header + "  - id: a\n    updatePolicy: CreateOnly\n    template:\n      apiVersion: v1\n      kind: Secret\n      metadata: {name: x}\n      stringData: {a: '${randomString(32)}', b: '${randomString(parent.spec.replicas)}'}\n"
	for _, tt := range []struct {
		name string
		opts Options
		want *regexp.Regexp
	}{
		{name: "crypto/rand", want: regexp.MustCompile(`^[a-zA-Z0-9]{32} [a-zA-Z0-9]{3}$`)},
		{name: "placeholder", opts: Options{RandomString: PlaceholderRandomString}, want: regexp.MustCompile(`^RANDOMRANDOMRANDOMRANDOMRANDOMRA RAN$`)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := Parse("rules.yaml", []byte(doc), tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			var seen []string
			for range 2 {
				v, _, err := rs[0].Children[0].Template.Evaluate(NewVars(testParent(), nil, nil))
				if err != nil {
					t.Fatal(err)
				}
				data := v.(map[string]any)["stringData"].(map[string]any)
				got := data["a"].(string) + " " + data["b"].(string)
				if !tt.want.MatchString(got) {
					t.Errorf("randomString gave %q, want %s", got, tt.want)
				}
				seen = append(seen, got)
			}
			if random := tt.opts.RandomString == nil; random == (seen[0] == seen[1]) {
				t.Errorf("two evaluations gave %q and %q", seen[0], seen[1])
			}
		})
	}
	// At run time, n out of bounds is an error for the parent.
	rs, err := Parse("rules.yaml", []byte(strings.Replace(doc, "parent.spec.replicas", "parent.spec.replicas * 100", 1)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := rs[0].Children[0].Template.Evaluate(NewVars(testParent(), nil, nil)); err == nil || !strings.HasSuffix(err.Error(), "randomString(300): n must be between 1 and 256") {
		t.Errorf("Evaluate() error = %v", err)
	}
}
