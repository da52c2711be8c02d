package reconcile

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"kgen.dev/kgen/rules"
)

// regions is an App with regions and tiers to make children for.
const regions = `apiVersion: example.com/v1
kind: App
metadata: {name: web, namespace: team-a, uid: 1111-2222}
spec:
  regions: [eu, us]
  tiers: {web: 2, db: 1}
`

// eachRule renders a ConfigMap per region and tier, and a Service that
// reads them all.
const eachRule = `  - id: cm
    forEach: [{region: "${parent.spec.regions}"}, {tier: "${parent.spec.tiers}"}]
    includeWhen: ["${tier.value > 0}"]
    readyWhen: ["${self.data.region == region}"]
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-${region}-${tier.key}"}
      data: {region: "${region}", tier: "${tier.key}", replicas: "${string(tier.value)}"}
  - id: svc
    template:
      apiVersion: v1
      kind: Service
      metadata: {name: "${parent.metadata.name}", annotations: {configs: "${children.cm.map(c, c.metadata.name).join(',')}"}}
  status:
    configs: ${size(children.cm)}
`

func names(cs []Child) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.ID+"/"+c.Object.GetName())
	}
	return out
}

func TestRenderForEach(t *testing.T) {
	rule := parseRule(t, ruleFor("App", "", eachRule))
	parent := object(t, regions)
	got, err := Render(rule, parent, Observed{}, scoper(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"cm/web-eu-db", "cm/web-eu-web", "cm/web-us-db", "cm/web-us-web"}
	if !reflect.DeepEqual(names(got.Children), want) {
		t.Fatalf("children = %q, want %q", names(got.Children), want)
	}
	for i, c := range got.Children {
		if c.Index != i || c.Each["region"] == nil || c.Each["tier"] == nil {
			t.Errorf("child %d: Index %d, Each %v", i, c.Index, c.Each)
		}
		if c.Object.GetLabels()[LabelChild] != "cm" || !c.OwnerReference {
			t.Errorf("child %d: labels %v, ownerReference %t", i, c.Object.GetLabels(), c.OwnerReference)
		}
	}
	if w := got.Waiting["svc"]; w.Reason != ReasonWaiting || w.Message != "waiting for child cm" {
		t.Errorf("Waiting[svc] = %+v, want waiting for child cm", w)
	}
	if got.StatusOmitted["configs"] != "waiting for child cm" {
		t.Errorf("StatusOmitted = %v", got.StatusOmitted)
	}

	// Once every object exists, the Service reads them as a list, in
	// element order; an observed object no element renders is not in it.
	observed := Observed{Children: map[string][]*unstructured.Unstructured{}}
	for _, c := range append(got.Children, Child{Object: object(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web-old, namespace: team-a}\n")}) {
		observed.Children["cm"] = append([]*unstructured.Unstructured{c.Object}, observed.Children["cm"]...)
	}
	got, err = Render(rule, parent, observed, scoper(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Children) != 5 || got.Children[4].Object.GetAnnotations()["configs"] != "web-eu-db,web-eu-web,web-us-db,web-us-web" {
		t.Errorf("children = %q, svc annotations %v", names(got.Children), got.Children[len(got.Children)-1].Object.GetAnnotations())
	}
	if got.Status["configs"] != int64(4) {
		t.Errorf("Status = %v", got.Status)
	}

	// Reordering the elements changes the order of the output, not the set.
	reordered := parent.DeepCopy()
	reordered.Object["spec"].(map[string]any)["regions"] = []any{"us", "eu"}
	again, err := Render(rule, reordered, Observed{}, scoper(t))
	if err != nil {
		t.Fatal(err)
	}
	if a, b := names(again.Children), []string{"cm/web-us-db", "cm/web-us-web", "cm/web-eu-db", "cm/web-eu-web"}; !reflect.DeepEqual(a, b) {
		t.Errorf("children after reordering = %q, want %q", a, b)
	}

	// includeWhen filters elements; all filtered out excludes the child and
	// what reads it.
	none := parent.DeepCopy()
	none.Object["spec"].(map[string]any)["tiers"] = map[string]any{"web": int64(0)}
	got, err = Render(rule, none, Observed{}, scoper(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Children) != 0 || !reflect.DeepEqual(got.Excluded, []string{"cm", "svc"}) {
		t.Errorf("children %q, excluded %q", names(got.Children), got.Excluded)
	}

	// readyWhen sees each object's element.
	c := again.Children[0]
	self := c.Object.DeepCopy()
	if ok, msg, err := Ready(rule, c, parent, self, Observed{}); err != nil || !ok {
		t.Errorf("Ready() = %t, %q, %v", ok, msg, err)
	}
	c.Each = again.Children[2].Each
	if ok, msg, _ := Ready(rule, c, parent, self, Observed{}); ok || msg != `data.region is "us", wants == "eu" (region)` {
		t.Errorf("Ready() with another element = %t, %q", ok, msg)
	}
}

func TestRenderForEachErrors(t *testing.T) {
	tests := []struct {
		name, children, want string
	}{
		{
			name:     "two elements, one name",
			children: "  - id: cm\n    forEach: [{r: \"${['a', 'b', 'a']}\"}]\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: 'x-${r}'}}\n",
			want:     `rules.yaml:7:5: rule "r": child "cm": forEach: elements 0 and 2 both render ConfigMap team-a/x-a: give each element a name of its own`,
		},
		{
			name:     "not a list at run time",
			children: "  - id: cm\n    forEach: [{r: \"${parent.spec.replicas}\"}]\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: 'x-${r}'}}\n",
			want:     `rules.yaml:8:20: rule "r": child "cm": forEach[0].r: ${parent.spec.replicas}: must be a list or a map, but is int64`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Render(parseRule(t, ruleFor("App", "", tt.children)), object(t, app), Observed{}, scoper(t))
			if err == nil || err.Error() != tt.want || !errors.Is(err, ErrInvalid) {
				t.Errorf("Render() error:\n%v\nwant:\n%s", err, tt.want)
			}
		})
	}
}

func TestRenderInputs(t *testing.T) {
	rule := parseRule(t, ruleFor("App", `  inputs:
  - {id: shared, apiVersion: v1, kind: ConfigMap, name: shared-config}
  - {id: certs, apiVersion: v1, kind: Secret, selector: {matchLabels: {kind: cert}}}
`, `  - id: cm
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: x}
      data: {level: "${inputs.shared.data.level}", certs: "${inputs.certs.map(s, s.metadata.name).join(',')}"}
  - id: plain
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: y}}
  status:
    level: ${inputs.shared.data.level}
`))
	parent := object(t, app)
	got, err := Render(rule, parent, Observed{}, scoper(t))
	if err != nil {
		t.Fatal(err)
	}
	// The message names the object the input reads (an audit could not
	// tell which object to create).
	const waiting = "waiting for input shared (ConfigMap team-a/shared-config, which does not exist)"
	if w := got.Waiting["cm"]; w.Reason != ReasonInputMissing || w.Message != waiting {
		t.Errorf("Waiting[cm] = %+v", w)
	}
	if !reflect.DeepEqual(names(got.Children), []string{"plain/y"}) || got.StatusOmitted["level"] != waiting {
		t.Errorf("children %q, omitted %v", names(got.Children), got.StatusOmitted)
	}
	observed := Observed{Inputs: map[string][]*unstructured.Unstructured{
		"shared": {object(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: shared-config, namespace: team-a}\ndata: {level: debug}\n")},
		"certs": {
			object(t, "apiVersion: v1\nkind: Secret\nmetadata: {name: b, namespace: team-a}\n"),
			object(t, "apiVersion: v1\nkind: Secret\nmetadata: {name: a, namespace: team-a}\n"),
		},
	}}
	got, err = Render(rule, parent, observed, scoper(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Waiting) != 0 || got.Children[0].Object.Object["data"].(map[string]any)["certs"] != "a,b" || got.Status["level"] != "debug" {
		t.Errorf("waiting %v, children %v, status %v", got.Waiting, got.Children[0].Object.Object["data"], got.Status)
	}
}

// An input that is the parent, or one of its children, is refused: kgen
// writes those, and a value read from them is written back in a loop (a
// live audit: a child counting in its own data through an input was
// written 400 times a second). A list input leaves them out.
func TestRenderInputOfOwnWrites(t *testing.T) {
	rule := parseRule(t, ruleFor("App", `  inputs:
  - {id: mine, apiVersion: v1, kind: ConfigMap, name: "${parent.metadata.name}-cnt"}
  - {id: all, apiVersion: v1, kind: ConfigMap, selector: {matchLabels: {team: a}}}
`, `  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-cnt", labels: {team: a}}
      data: {count: "${string(int(inputs.mine.?data.?count.orValue('0')) + 1)}", all: "${inputs.all.map(c, c.metadata.name).join(',')}"}
`))
	parent := object(t, app)
	other := object(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other, namespace: team-a, uid: o-1, labels: {team: a}}\n")
	own := object(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web-cnt, namespace: team-a, uid: c-1, labels: {team: a, kgen.dev/parent-uid: 1111-2222, kgen.dev/child: config}}\ndata: {count: '3'}\n")
	copied := object(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: copy, namespace: team-a, uid: e-1, labels: {team: a, kgen.dev/parent-uid: 1111-2222, kgen.dev/child: config}}\ndata: {count: '7'}\n")
	foreign := object(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web-cnt, namespace: team-a, uid: f-1, labels: {team: a, kgen.dev/parent-uid: '9999', kgen.dev/child: config}}\ndata: {count: '3'}\n")
	for _, tc := range []struct {
		name string
		mine *unstructured.Unstructured
		want string // the error, or the child's data
	}{
		{"the parent's own child", own, `input mine is ConfigMap team-a/web-cnt, which kgen writes: a value read from it would be written back in a loop; read it as children.config`},
		{"the parent itself", parent, `input mine is App team-a/web, which kgen writes: a value read from it would be written back in a loop; read it as parent`},
		{"another parent's object", foreign, "map[all:copy,other,web-cnt count:4]"},
		// Endpoints copy their Service's labels: not the child.
		{"an object with the child's labels", copied, "map[all:copy,other,web-cnt count:8]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Render(rule, parent, Observed{
				Children: map[string][]*unstructured.Unstructured{"config": {own}},
				Inputs: map[string][]*unstructured.Unstructured{
					"mine": {tc.mine},
					"all":  {own, other, parent, foreign, copied},
				}}, scoper(t))
			if err != nil {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("Render() error %v, want %q", err, tc.want)
				}
				return
			}
			if len(got.Children) != 1 || fmt.Sprint(got.Children[0].Object.Object["data"]) != tc.want {
				t.Errorf("Render() children %v, want data %s", got.Children, tc.want)
			}
		})
	}
}

// The rules' parse of a forEach child is what Render uses: guard the
// assumption that an ordinary child has no elements.
func TestOrdinaryChildHasNoElements(t *testing.T) {
	rule := parseRule(t, ruleFor("App", "", "  - id: cm\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}\n"))
	if els, err := rule.Children[0].Elements(rules.NewVars(nil, nil, nil)); els != nil || err != nil {
		t.Errorf("Elements() = %v, %v", els, err)
	}
}
