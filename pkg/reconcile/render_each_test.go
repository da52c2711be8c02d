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

// A named input that is an object kgen writes for the parent, the parent
// itself or an object a child renders, is the rule's error, whether or not
// the object exists yet: a value read from it would be written back in a
// loop. By name, not by labels: Endpoints copy their Service's labels. An
// object of the parent that kgen no longer renders (a renamed child's old
// object, waiting to be pruned) may be read. A selector input leaves out
// the parent's objects.
func TestRenderInputOfOwnWrites(t *testing.T) {
	ruleWith := func(kind, name string) *rules.Rule {
		return parseRule(t, ruleFor("App", `  inputs:
  - {id: mine, apiVersion: `+map[string]string{"ConfigMap": "v1", "App": "example.com/v1"}[kind]+`, kind: `+kind+`, name: "`+name+`"}
  - {id: all, apiVersion: v1, kind: ConfigMap, selector: {matchLabels: {team: a}}}
`, `  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-cnt", labels: {team: a}}
      data: {all: "${inputs.all.map(c, c.metadata.name).join(',')}"}
  - id: reader
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-reader"}
      data: {count: "${string(int(inputs.mine.?data.?count.orValue('0')) + 1)}"}
`))
	}
	parent := object(t, app)
	other := object(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other, namespace: team-a, uid: o-1, labels: {team: a}}\n")
	own := object(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web-cnt, namespace: team-a, uid: c-1, labels: {team: a, kgen.dev/parent-uid: 1111-2222, kgen.dev/child: config}}\ndata: {count: '3'}\n")
	old := object(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web-old, namespace: team-a, uid: c-0, labels: {team: a, kgen.dev/parent-uid: 1111-2222, kgen.dev/child: config}}\ndata: {count: '5'}\n")
	copied := object(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: copy, namespace: team-a, uid: e-1, labels: {team: a, kgen.dev/parent-uid: 1111-2222, kgen.dev/child: config}}\ndata: {count: '7'}\n")
	for _, tc := range []struct {
		name      string
		kind, ref string // the input's kind and name
		mine      *unstructured.Unstructured
		observed  []*unstructured.Unstructured // the config child's objects
		want      string                       // the error, or the child's data
	}{
		{"the parent's own child", "ConfigMap", "${parent.metadata.name}-cnt", own, []*unstructured.Unstructured{own},
			`input mine is ConfigMap team-a/web-cnt, which kgen writes: a value read from it would be written back in a loop; read it as children.config`},
		// A live audit: kgen created it as the child, and pruned the
		// object it replaced, before the next reconcile refused it.
		{"the child's object before it exists", "ConfigMap", "${parent.metadata.name}-cnt", nil, []*unstructured.Unstructured{old},
			`input mine is ConfigMap team-a/web-cnt, which kgen writes: a value read from it would be written back in a loop; read it as children.config`},
		{"the parent itself", "App", "${parent.metadata.name}", parent, []*unstructured.Unstructured{own},
			`input mine is App team-a/web, which kgen writes: a value read from it would be written back in a loop; read it as parent`},
		// A live audit: the rename never happened, the parent stuck.
		{"a renamed child's old object", "ConfigMap", "web-old", old, []*unstructured.Unstructured{old}, "map[all:copy,other,web-cnt] map[count:6]"},
		// Endpoints copy their Service's labels: not the child.
		{"an object with the child's labels", "ConfigMap", "copy", copied, []*unstructured.Unstructured{own}, "map[all:copy,other,web-old] map[count:8]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mine := []*unstructured.Unstructured{tc.mine}
			if tc.mine == nil {
				mine = nil
			}
			got, err := Render(ruleWith(tc.kind, tc.ref), parent, Observed{
				Children: map[string][]*unstructured.Unstructured{"config": tc.observed},
				Inputs: map[string][]*unstructured.Unstructured{
					"mine": mine,
					"all":  {own, other, parent, old, copied},
				}}, scoper(t))
			if err != nil {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("Render() error %v, want %q", err, tc.want)
				}
				return
			}
			var data []string
			for _, c := range got.Children {
				data = append(data, fmt.Sprint(c.Object.Object["data"]))
			}
			if strings.Join(data, " ") != tc.want {
				t.Errorf("Render() children's data %q, waiting %v, want %s", data, got.Waiting, tc.want)
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

// The object of a child that waits (here for a child that does not exist)
// is one kgen writes again once it renders: an input naming it is refused
// (a review), as the object of a child that renders.
func TestRenderInputOfAWaitingChild(t *testing.T) {
	rule := parseRule(t, ruleFor("App", `  inputs:
  - {id: mine, apiVersion: v1, kind: ConfigMap, name: "${parent.metadata.name}-cnt"}
`, `  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-cnt"}
      data: {v: "${string(children.deployment.spec.replicas)}"}
  - id: deployment
    template: {apiVersion: apps/v1, kind: Deployment, metadata: {name: x}}
  - id: reader
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-reader"}
      data: {v: "${inputs.mine.data.v}"}
`))
	own := object(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web-cnt, namespace: team-a, uid: c-1, labels: {kgen.dev/parent-uid: 1111-2222, kgen.dev/child: config}}\ndata: {v: '3'}\n")
	got, err := Render(rule, object(t, app), Observed{
		Children: map[string][]*unstructured.Unstructured{"config": {own}},
		Inputs:   map[string][]*unstructured.Unstructured{"mine": {own}},
	}, scoper(t))
	const want = "input mine is ConfigMap team-a/web-cnt, which kgen writes: a value read from it would be written back in a loop; read it as children.config"
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
		t.Errorf("Render() = %+v, %v; want %q", got, err, want)
	}
}
