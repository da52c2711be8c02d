package explain

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	discoveryfake "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	"kgen.dev/kgen/internal/golden"
	"kgen.dev/kgen/pkg/mapper"
	"kgen.dev/kgen/pkg/reconcile"
	kschema "kgen.dev/kgen/pkg/schema"
	"kgen.dev/kgen/rules"
)

// discovery serves the kinds of these tests.
func discovery() *mapper.Mapper {
	res := func(name, kind string, namespaced bool, short ...string) metav1.APIResource {
		return metav1.APIResource{Name: name, Kind: kind, Namespaced: namespaced, ShortNames: short, Verbs: metav1.Verbs{"get", "list", "watch"}}
	}
	return mapper.New(&discoveryfake.FakeDiscovery{Fake: &clienttesting.Fake{Resources: []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			res("configmaps", "ConfigMap", true, "cm"), res("services", "Service", true, "svc"), res("events", "Event", true, "ev"),
		}},
		{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{res("deployments", "Deployment", true, "deploy")}},
		{GroupVersion: "example.com/v1alpha1", APIResources: []metav1.APIResource{res("webapps", "WebApp", true), {Name: "webapps/status"}}},
		{GroupVersion: "kgen.dev/v1alpha1", APIResources: []metav1.APIResource{res("rules", "Rule", false)}},
	}}})
}

var listKinds = map[schema.GroupVersionResource]string{
	{Version: "v1", Resource: "configmaps"}:                            "ConfigMapList",
	{Version: "v1", Resource: "services"}:                              "ServiceList",
	{Version: "v1", Resource: "events"}:                                "EventList",
	{Group: "apps", Version: "v1", Resource: "deployments"}:            "DeploymentList",
	{Group: "example.com", Version: "v1alpha1", Resource: "webapps"}:   "WebAppList",
	{Group: "kgen.dev", Version: "v1alpha1", Resource: "rules"}:        "RuleList",
	{Group: "example.com", Version: "v1alpha1", Resource: "databases"}: "DatabaseList",
}

// schemas knows that a Deployment's containers are keyed by name.
type schemas struct{}

func (schemas) Kind(gvk schema.GroupVersionKind) (*kschema.Field, error) {
	if gvk.Kind != "Deployment" {
		return nil, nil
	}
	return &kschema.Field{Properties: map[string]*kschema.Field{"spec": {Properties: map[string]*kschema.Field{
		"template": {Properties: map[string]*kschema.Field{"spec": {Properties: map[string]*kschema.Field{
			"containers": {ListType: kschema.ListMap, ListMapKeys: []string{"name"}},
		}}}},
	}}}}, nil
}

func load(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: jsonInts(m).(map[string]any)}
}

// jsonInts turns whole float64s into int64, as the API server's objects
// have them.
func jsonInts(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = jsonInts(e)
		}
	case []any:
		for i, e := range v {
			v[i] = jsonInts(e)
		}
	case float64:
		if v == float64(int64(v)) {
			return int64(v)
		}
	}
	return v
}

const shop = `apiVersion: example.com/v1alpha1
kind: WebApp
metadata:
  name: shop
  namespace: team-a
  uid: uid-shop
  generation: 3
  labels: {tier: web}
spec: {image: "web:2", port: 8080, replicas: 2}
status:
  observedGeneration: 3
  conditions:
  - type: Ready
    status: "False"
    reason: Conflict
    message: "child service: services team-a/shop exists and is not managed by kgen; kgen leaves it untouched"
    lastTransitionTime: "2026-01-01T10:00:00Z"
    observedGeneration: 3
  - type: Synced
    status: "True"
    reason: Synced
    message: written by another controller
    lastTransitionTime: "2026-01-01T09:00:00Z"
`

// children renders the parent's children as kgen writes them.
func children(t *testing.T, rule *rules.Rule, parent *unstructured.Unstructured, observed ...*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	t.Helper()
	plan, err := reconcile.MakePlan(rule, parent, observed, map[string][]*unstructured.Unstructured{"defaults": {load(t, defaults)}},
		scoper{r: discovery()}, func(_, _ *unstructured.Unstructured) reconcile.Op { return reconcile.OpKeep })
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*unstructured.Unstructured{}
	for _, s := range plan.Steps {
		obj := s.Object.DeepCopy()
		obj.SetUID(types.UID("uid-" + s.ID))
		obj.SetCreationTimestamp(metav1.NewTime(time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)))
		out[s.ID] = obj
	}
	return out
}

const defaults = `apiVersion: v1
kind: ConfigMap
metadata: {name: webapp-defaults, namespace: team-a}
data: {domain: example.org}
`

func event(t *testing.T, name, typ, reason, msg string, count int, at string) *unstructured.Unstructured {
	return load(t, `apiVersion: v1
kind: Event
metadata: {name: `+name+`, namespace: team-a}
involvedObject: {apiVersion: example.com/v1alpha1, kind: WebApp, namespace: team-a, name: shop, uid: uid-shop}
type: `+typ+`
reason: `+reason+`
message: "`+msg+`"
count: `+strconv.Itoa(count)+`
lastTimestamp: "`+at+`"
`)
}

func loadRules(t *testing.T) []*rules.Rule {
	t.Helper()
	rs, err := rules.Load([]string{"testdata/rules.yaml"}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// shopCluster is a WebApp with a child of every kind of trouble: config is
// fine; someone changed the deployment's image, and it has one of its two
// replicas; a Service that is not kgen's has the service's name, so the
// endpoint, which reads it, waits; the budget is not wanted; and legacy, a
// child the rule no longer has, is to be deleted once the endpoint, a
// ConfigMap that has no object yet (which legacy may be the old object of),
// exists.
func shopCluster(t *testing.T) []runtime.Object {
	rs := loadRules(t)
	parent := load(t, shop)
	kids := children(t, rs[0], parent)
	deploy := kids["deployment"]
	containers, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "containers")
	containers[0].(map[string]any)["image"] = "web:1"
	_ = unstructured.SetNestedSlice(deploy.Object, containers, "spec", "template", "spec", "containers")
	_ = unstructured.SetNestedField(deploy.Object, int64(1), "status", "availableReplicas")
	legacy := kids["config"].DeepCopy()
	legacy.SetName("shop-legacy")
	legacy.SetUID("uid-legacy")
	ls := legacy.GetLabels()
	ls[reconcile.LabelChild] = "legacy"
	legacy.SetLabels(ls)
	foreign := load(t, "apiVersion: v1\nkind: Service\nmetadata: {name: shop, namespace: team-a, uid: uid-foreign}\nspec: {ports: [{port: 80}]}\n")
	return []runtime.Object{parent, load(t, defaults), kids["config"], deploy, legacy, foreign,
		event(t, "e1", "Warning", "Conflict", "child service: services team-a/shop exists and is not managed by kgen; kgen leaves it untouched", 3, "2026-01-01T10:05:00Z"),
		event(t, "e2", "Normal", "Repaired", "Repaired deployments.apps team-a/shop (child deployment) (changed by kubectl-edit)", 1, "2026-01-01T10:01:00Z"),
		// Another object's event in the same namespace.
		load(t, "apiVersion: v1\nkind: Event\nmetadata: {name: e3, namespace: team-a}\ninvolvedObject: {kind: WebApp, name: other, uid: uid-other}\ntype: Normal\nreason: Other\nmessage: not about shop\n"),
	}
}

func newConfig(t *testing.T, objs ...runtime.Object) (Config, *dynamicfake.FakeDynamicClient) {
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds, objs...)
	return Config{Client: client, Resources: discovery(), Schemas: schemas{}, Rules: loadRules(t)}, client
}

// noWrites fails the test if explain sent anything but reads.
func noWrites(t *testing.T, client *dynamicfake.FakeDynamicClient) {
	t.Helper()
	for _, a := range client.Actions() {
		if v := a.GetVerb(); v != "get" && v != "list" {
			t.Errorf("explain sent %s %s", v, a.GetResource().Resource)
		}
	}
}

// The text and JSON reports of parents in trouble, checked against golden
// files (go test -update rewrites them).
func TestExplainGolden(t *testing.T) {
	fresh := load(t, "apiVersion: example.com/v1alpha1\nkind: WebApp\nmetadata: {name: new, namespace: team-a, uid: uid-new, generation: 1, labels: {tier: web}}\nspec: {image: \"web:1\", port: 80, replicas: 3}\n")
	tests := []struct {
		name string
		ref  Ref
		objs []runtime.Object
	}{
		{"shop", Ref{Kind: "webapps", Namespace: "team-a", Name: "shop"}, shopCluster(t)},
		// Nothing exists yet, and the input config reads is missing.
		{"new", Ref{Kind: "example.com/v1alpha1/WebApp", Namespace: "team-a", Name: "new"}, []runtime.Object{fresh}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, client := newConfig(t, tt.objs...)
			report, err := Explain(t.Context(), cfg, tt.ref)
			if err != nil {
				t.Fatal(err)
			}
			noWrites(t, client)
			var text bytes.Buffer
			if err := report.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join("testdata", tt.name+".txt"), text.String())
			js, err := report.JSON()
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join("testdata", tt.name+".json"), string(js))
		})
	}
}

// The report says, per child, what the contract asks for.
func TestExplainChildren(t *testing.T) {
	cfg, _ := newConfig(t, shopCluster(t)...)
	report, err := Explain(t.Context(), cfg, Ref{Kind: "WebApp", Namespace: "team-a", Name: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Child{}
	for _, c := range report.Children {
		byName[c.ID] = c
	}
	if c := byName["config"]; !c.Exists || !c.UpToDate || !c.Ready || c.Action != ActionNone {
		t.Errorf("config: %+v", c)
	}
	d := byName["deployment"]
	if !d.Exists || d.UpToDate || d.Ready || d.Action != ActionRepair ||
		strings.Join(d.Differences, ",") != "spec.template.spec.containers[name=app].image" ||
		d.NotReady != "status.availableReplicas is 1, wants >= 2 (parent.spec.replicas)" ||
		d.ReadyWhen != "${self.status.availableReplicas >= parent.spec.replicas}" {
		t.Errorf("deployment: %+v", d)
	}
	if s := byName["service"]; s.Exists || s.Action != ActionBlocked || s.Conflict != "services team-a/shop exists and is not managed by kgen; kgen leaves it untouched" {
		t.Errorf("service: %+v", s)
	}
	if e := byName["endpoint"]; e.Exists || e.Action != ActionWait || strings.Join(e.WaitingOn, ",") != "service" {
		t.Errorf("endpoint: %+v", e)
	}
	if b := byName["budget"]; b.Exists || b.Action != ActionNone || !strings.Contains(b.Message, "includeWhen is false") {
		t.Errorf("budget: %+v", b)
	}
	// An id the rule no longer has, of the kind of a child that waits:
	// kept until that one is made (it may be its old object).
	if l := byName["legacy"]; !l.Exists || l.Action != ActionWait || l.Name != "shop-legacy" || !strings.Contains(l.Next, "once every ConfigMap the rule wants exists") {
		t.Errorf("legacy: %+v", l)
	}
	if len(report.Events) != 2 || report.Events[0].Reason != "Repaired" || report.Events[1].Count != 3 {
		t.Errorf("events: %+v", report.Events)
	}
	if len(report.Conditions) != 2 || report.Conditions[0].Reason != "Conflict" {
		t.Errorf("conditions: %+v", report.Conditions)
	}
}

// A missing field of the child is waited for, in the Ready message's words.
func TestExplainNotSetYet(t *testing.T) {
	objs := shopCluster(t)
	for _, o := range objs {
		if u := o.(*unstructured.Unstructured); u.GetKind() == "Deployment" {
			unstructured.RemoveNestedField(u.Object, "status")
		}
	}
	cfg, _ := newConfig(t, objs...)
	report, err := Explain(t.Context(), cfg, Ref{Kind: "deploy", Namespace: "team-a", Name: "shop"})
	if err == nil || !errors.Is(err, ErrNoRule) {
		t.Fatalf("explaining a Deployment: %v, %v", report, err)
	}
	report, err = Explain(t.Context(), cfg, Ref{Kind: "webapps.example.com", Namespace: "team-a", Name: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range report.Children {
		if c.ID == "deployment" && c.NotReady != "waiting for status.availableReplicas (not set yet)" {
			t.Errorf("deployment: %+v", c)
		}
	}
}

// A child that reads a field of another child that is not set yet (the
// Service's clusterIP) waits for it, and names it: the rest of the tree is
// explained as the controller would act on it.
func TestExplainWaitsForAChildFieldNotSet(t *testing.T) {
	rs := loadRules(t)
	parent := load(t, shop)
	kids := children(t, rs[0], parent)
	var objs []runtime.Object
	for _, o := range shopCluster(t) {
		if u := o.(*unstructured.Unstructured); u.GetKind() != "Service" {
			objs = append(objs, o)
		}
	}
	service := kids["service"]
	unstructured.RemoveNestedField(service.Object, "spec", "clusterIP")
	cfg, _ := newConfig(t, append(objs, service)...)
	report, err := Explain(t.Context(), cfg, Ref{Kind: "webapp", Namespace: "team-a", Name: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	if report.RenderError != "" {
		t.Fatalf("renderError = %q, want none", report.RenderError)
	}
	byID := map[string]Child{}
	for _, c := range report.Children {
		byID[c.ID] = c
	}
	if e := byID["endpoint"]; e.Action != ActionWait || !slices.Equal(e.WaitingOn, []string{"service"}) ||
		e.Next != "waiting for children.service.spec.clusterIP (not set yet)" {
		t.Errorf("endpoint: %+v", e)
	}
	if d := byID["deployment"]; d.Action != ActionRepair {
		t.Errorf("deployment: %+v; want it repaired all the same", d)
	}
}

// Errors say what is wrong: the kind, the object, the rules, the rights.
func TestExplainErrors(t *testing.T) {
	other := load(t, "apiVersion: example.com/v1alpha1\nkind: WebApp\nmetadata: {name: blog, namespace: team-a, uid: uid-blog, labels: {tier: db}}\nspec: {image: x, port: 80, replicas: 1}\n")
	tests := []struct {
		name    string
		ref     Ref
		react   clienttesting.ReactionFunc
		is      func(error) bool
		wantErr string
	}{
		{name: "unknown kind", ref: Ref{Kind: "gadgets", Namespace: "team-a", Name: "x"},
			wantErr: `"gadgets" is not served by the API server (searched kinds, resource names, singular names, short names and categories of 4 API group versions)`},
		{name: "not found", ref: Ref{Kind: "webapp", Namespace: "team-a", Name: "nope"}, is: apierrors.IsNotFound,
			wantErr: `get webapps.example.com team-a/nope: webapps.example.com "nope" not found`},
		{name: "no rule selects it", ref: Ref{Kind: "webapp", Namespace: "team-a", Name: "blog"}, is: func(err error) bool { return errors.Is(err, ErrNoRule) },
			wantErr: "no rule selects it: webapps.example.com team-a/blog: rule webapp selects tier=web, and the object's labels are tier=db"},
		{name: "no rule has the kind", ref: Ref{Kind: "cm", Namespace: "team-a", Name: "webapp-defaults"}, is: func(err error) bool { return errors.Is(err, ErrNoRule) },
			wantErr: "no rule selects it: configmaps team-a/webapp-defaults: no rule has parent kind ConfigMap (the rules: webapp (WebApp.example.com))"},
		{name: "forbidden", ref: Ref{Kind: "webapp", Namespace: "team-a", Name: "shop"}, is: apierrors.IsForbidden,
			react: func(a clienttesting.Action) (bool, runtime.Object, error) {
				if a.GetResource().Resource == "deployments" {
					return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "", errors.New("no list for you"))
				}
				return false, nil, nil
			},
			wantErr: "list deployments.apps in team-a: deployments.apps is forbidden: no list for you"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, client := newConfig(t, append(shopCluster(t), other)...)
			if tt.react != nil {
				client.PrependReactor("*", "*", tt.react)
			}
			_, err := Explain(t.Context(), cfg, tt.ref)
			if err == nil || err.Error() != tt.wantErr {
				t.Fatalf("Explain() error = %v, want %s", err, tt.wantErr)
			}
			if tt.is != nil && !tt.is(err) {
				t.Errorf("the error %v is not of the expected kind", err)
			}
		})
	}
}

// LoadRules serves the files' rules and the Rule objects no file rule
// shadows, and says which objects it left out.
func TestLoadRules(t *testing.T) {
	ruleObject := func(name, kind string) *unstructured.Unstructured {
		return load(t, `apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: `+name+`}
spec:
  parent: {apiVersion: example.com/v1alpha1, kind: `+kind+`}
  children:
  - id: cm
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}
`)
	}
	invalid := ruleObject("broken", "Database")
	unstructured.RemoveNestedField(invalid.Object, "spec", "children")
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds,
		ruleObject("webapp", "Shadowed"), ruleObject("db", "Database"), invalid)
	rs, notes, err := LoadRules(t.Context(), client, discovery(), RuleSource{Paths: []string{"testdata/rules.yaml"}, Objects: true})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rs {
		got = append(got, r.Name+"/"+r.Parent.GroupVersionKind.Kind)
	}
	if strings.Join(got, " ") != "webapp/WebApp db/Database" {
		t.Errorf("rules = %q", got)
	}
	if len(notes) != 1 || !strings.HasPrefix(notes[0], "Rule broken is invalid") {
		t.Errorf("notes = %q", notes)
	}
	if _, _, err := LoadRules(t.Context(), client, discovery(), RuleSource{}); err == nil {
		t.Error("no rules: no error")
	}

	// An invalid object, or one the running kgen did not accept, whose
	// status records the version kgen runs: explained with that one.
	for _, latest := range []string{"invalid", "not accepted"} {
		obj := ruleObject("broken", "Database")
		_ = unstructured.SetNestedField(obj.Object, runtime.DeepCopyJSONValue(obj.Object["spec"]), "status", "running", "spec")
		_ = unstructured.SetNestedField(obj.Object, int64(4), "status", "running", "generation")
		obj.SetGeneration(5)
		_ = unstructured.SetNestedField(obj.Object, "Gadget", "spec", "parent", "kind")
		if latest == "invalid" {
			unstructured.RemoveNestedField(obj.Object, "spec", "children")
		} else {
			_ = unstructured.SetNestedSlice(obj.Object, []any{map[string]any{"type": "Accepted", "status": "False", "observedGeneration": int64(5), "message": "it conflicts"}}, "status", "conditions")
		}
		client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds, obj)
		rs, notes, err := LoadRules(t.Context(), client, discovery(), RuleSource{Objects: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) != 1 || rs[0].Parent.GroupVersionKind.Kind != "Database" {
			t.Errorf("%s latest version: rules %v, want the recorded version (parent kind Database)", latest, rs)
		}
		if len(notes) != 1 || !strings.HasSuffix(notes[0], "explained with the version kgen runs, of generation 4") {
			t.Errorf("%s latest version: notes = %q", latest, notes)
		}
	}

	// Without the files, an object whose status says a file of the
	// running kgen shadows it is left out, with a note: its template is
	// not what kgen applies.
	shadowedByRunning := ruleObject("webapp", "Shadowed")
	_ = unstructured.SetNestedSlice(shadowedByRunning.Object, []any{map[string]any{"type": "Ready", "status": "False", "reason": "Shadowed"}}, "status", "conditions")
	client = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds, shadowedByRunning, ruleObject("db", "Database"))
	rs, notes, err = LoadRules(t.Context(), client, discovery(), RuleSource{Objects: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].Name != "db" {
		t.Errorf("rules = %v, want db alone", rs)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "Rule webapp is shadowed by a --rules file of the running kgen") {
		t.Errorf("notes = %q", notes)
	}

	// An object whose status says the running kgen did not accept its
	// generation (it does not fit its kinds' schemas, or conflicts with
	// another rule) is left out too: its previous version runs. A status
	// of an earlier generation says nothing of this one.
	rejected, older := ruleObject("db", "Database"), ruleObject("webapp", "WebApp")
	for _, o := range []*unstructured.Unstructured{rejected, older} {
		o.SetGeneration(3)
	}
	_ = unstructured.SetNestedSlice(rejected.Object, []any{map[string]any{"type": "Accepted", "status": "False", "reason": "Invalid",
		"observedGeneration": int64(3), "message": "spec.children[0].template.metadata.name: no such key: nmae"}}, "status", "conditions")
	_ = unstructured.SetNestedSlice(older.Object, []any{map[string]any{"type": "Accepted", "status": "False", "reason": "Invalid",
		"observedGeneration": int64(2), "message": "an older problem"}}, "status", "conditions")
	client = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds, rejected, older)
	rs, notes, err = LoadRules(t.Context(), client, discovery(), RuleSource{Objects: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].Name != "webapp" {
		t.Errorf("rules = %v, want webapp alone", rs)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "Rule db: the running kgen did not accept its latest version (spec.children[0].template.metadata.name: no such key: nmae)") {
		t.Errorf("notes = %q", notes)
	}
}

// A forEach child is one entry per object: those that exist are judged
// one by one (a field of their own that the template does not set is no
// difference), one whose element is gone is to be deleted, and a new
// element's object is to be created.
func TestExplainForEach(t *testing.T) {
	rs, err := rules.Parse("rules.yaml", []byte(`apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: regions}
spec:
  parent: {apiVersion: example.com/v1alpha1, kind: WebApp}
  children:
  - id: region
    forEach: [{region: "${parent.spec.regions}"}]
    readyWhen: ["${self.data.ready == 'yes'}"]
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-${region}"}
      data: {region: "${region}"}
`), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	parent := load(t, "apiVersion: example.com/v1alpha1\nkind: WebApp\nmetadata: {name: web, namespace: team-a, uid: uid-web}\nspec: {regions: [us, eu]}\n")
	was := parent.DeepCopy()
	was.Object["spec"] = map[string]any{"regions": []any{"us", "ap"}}
	// The objects kgen made when the regions were us and ap.
	var all []runtime.Object
	all = append(all, parent)
	plan, err := reconcile.MakePlan(rs[0], was, nil, nil, scoper{r: discovery()}, func(_, _ *unstructured.Unstructured) reconcile.Op { return reconcile.OpKeep })
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range plan.Steps {
		o := s.Object.DeepCopy()
		o.SetUID(types.UID("uid-" + o.GetName()))
		if o.GetName() == "web-us" {
			o.Object["data"].(map[string]any)["ready"] = "no"
		}
		all = append(all, o)
	}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds, all...)
	report, err := Explain(t.Context(), Config{Client: client, Resources: discovery(), Rules: rs}, Ref{Kind: "webapp", Namespace: "team-a", Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range report.Children {
		got = append(got, fmt.Sprintf("%s %s exists=%t upToDate=%t ready=%t %s: %s", c.ID, c.Name, c.Exists, c.UpToDate, c.Ready, c.Action, c.Message))
	}
	want := []string{
		`region web-us exists=true upToDate=true ready=false none: not ready: data.ready is "no", wants == "yes"`,
		"region web-eu exists=false upToDate=false ready=false create: kgen creates it",
		"region web-ap exists=true upToDate=false ready=false delete: kgen deletes it: its forEach has no element for it any more",
	}
	if !slices.Equal(got, want) {
		t.Errorf("children:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A parent the rule cannot render shows why, and the children it has.
func TestExplainRenderError(t *testing.T) {
	objs := shopCluster(t)
	for _, o := range objs {
		if u := o.(*unstructured.Unstructured); u.GetKind() == "WebApp" {
			unstructured.RemoveNestedField(u.Object, "spec", "port")
		}
	}
	cfg, _ := newConfig(t, objs...)
	report, err := Explain(t.Context(), cfg, Ref{Kind: "webapp", Namespace: "team-a", Name: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(report.RenderError, `rule "webapp": child "config": template.data.port: ${string(parent.spec.port)}: no such key: port`) {
		t.Errorf("renderError = %q", report.RenderError)
	}
	// Every child of the rule, in its order, those with no object too
	// (their names are not known without rendering); ids the rule no
	// longer has last.
	var names []string
	for _, c := range report.Children {
		if c.Exists != (c.Name != "") || c.Action != ActionUnknown {
			t.Errorf("child %s %s: %+v", c.ID, c.Name, c)
		}
		names = append(names, c.ID+"="+c.Name)
	}
	if got, want := strings.Join(names, " "), "config=shop-config deployment=shop service= endpoint= budget= legacy=shop-legacy"; got != want {
		t.Errorf("children %q, want %q", got, want)
	}
	var text bytes.Buffer
	if err := report.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\nError:       testdata/rules.yaml:", "├─ config: ConfigMap team-a/shop-config\n│    Exists:      yes\n│    Next:        nothing, until"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text:\n%s\nwant it to contain %q", text.String(), want)
		}
	}
}

// A child held Terminating by another controller's finalizer exists, is not
// ready, and kgen waits for it to go (it writes nothing to it, and creates
// it again then), as the controller does: not "kgen applies it".
func TestExplainChildBeingDeleted(t *testing.T) {
	objs := shopCluster(t)
	for _, o := range objs {
		if u := o.(*unstructured.Unstructured); u.GetKind() == "ConfigMap" && u.GetName() == "shop-config" {
			now := metav1.Now()
			u.SetDeletionTimestamp(&now)
			u.SetFinalizers([]string{"example.com/hold"})
		}
	}
	cfg, client := newConfig(t, objs...)
	report, err := Explain(t.Context(), cfg, Ref{Kind: "WebApp", Namespace: "team-a", Name: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	noWrites(t, client)
	for _, c := range report.Children {
		if c.ID != "config" {
			continue
		}
		if !c.Exists || c.Ready || c.Action != ActionWait || !strings.Contains(c.NotReady, "being deleted") {
			t.Errorf("config: %+v, want it existing, not ready (being deleted), and waited for", c)
		}
		return
	}
	t.Error("no config child in the report")
}

// A child renamed onto a name an object that is not kgen's holds: the
// controller keeps the old object until its replacement exists, and
// explain says so, not that kgen deletes it (an audit finding).
func TestExplainRenameBlocked(t *testing.T) {
	objs := shopCluster(t)
	old := children(t, loadRules(t)[0], load(t, shop))["service"].DeepCopy()
	old.SetName("shop-old")
	old.SetUID("uid-old-service")
	_ = unstructured.SetNestedField(old.Object, "10.0.0.9", "spec", "clusterIP")
	cfg, _ := newConfig(t, append(objs, old)...)
	report, err := Explain(t.Context(), cfg, Ref{Kind: "WebApp", Namespace: "team-a", Name: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, c := range report.Children {
		if c.ID != "service" || c.Name != "shop-old" {
			continue
		}
		found = true
		if !c.Exists || c.Action != ActionWait || !strings.Contains(c.Next, "kgen keeps it until its replacement exists (Service shop cannot be written: services team-a/shop exists and is not managed by kgen") {
			t.Errorf("the old object: %+v (render error %q)", c, report.RenderError)
		}
	}
	if !found {
		t.Errorf("the old object is not in the report: %+v", report.Children)
	}
}

// A field kgen's last apply set that the template no longer sets (a
// container renamed away) is among the differences: kgen's next apply
// removes it (an audit found explain named only what the template adds).
func TestExplainNamesRemovedFields(t *testing.T) {
	objs := shopCluster(t)
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok || u.GetKind() != "Deployment" {
			continue
		}
		u.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: reconcile.FieldManager, Operation: metav1.ManagedFieldsOperationApply,
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"old\"}":{".":{},"f:name":{}}}}}}}`)}}})
	}
	cfg, _ := newConfig(t, objs...)
	report, err := Explain(t.Context(), cfg, Ref{Kind: "WebApp", Namespace: "team-a", Name: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range report.Children {
		if c.ID == "deployment" && !slices.Contains(c.Differences, "spec.template.spec.containers[name=old]") {
			t.Errorf("deployment differences = %q, want the removed container too", c.Differences)
		}
	}
}

// An input whose name does not evaluate for the parent is the rule's error
// for it, as the controller reports it: the tree is still shown.
func TestExplainInputNameError(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile("testdata/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	data = bytes.Replace(data, []byte("name: webapp-defaults"), []byte(`name: "${parent.spec.defaults}"`), 1)
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, _ := newConfig(t, shopCluster(t)...)
	if cfg.Rules, err = rules.Load([]string{filepath.Join(dir, "rules.yaml")}, rules.Options{}); err != nil {
		t.Fatal(err)
	}
	report, err := Explain(t.Context(), cfg, Ref{Kind: "webapp", Namespace: "team-a", Name: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(report.RenderError, "spec.inputs[0].name: ${parent.spec.defaults}: no such key: defaults") {
		t.Errorf("renderError = %q", report.RenderError)
	}
	if len(report.Children) == 0 {
		t.Error("no children shown")
	}
}

// When another writer owns status.observedGeneration (a parent kind with a
// controller of its own, which kgen backs off from), the report says whose
// it is instead of calling it kgen's.
func TestExplainObservedByAnotherWriter(t *testing.T) {
	entry := func(manager, op, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationType(op), APIVersion: "example.com/v1alpha1",
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}, Subresource: "status"}
	}
	const ready = `{"f:status":{"f:conditions":{"k:{\"type\":\"Ready\"}":{".":{},"f:status":{}}}}}`
	const observed = `{"f:status":{"f:observedGeneration":{}}}`
	for _, tc := range []struct {
		name    string
		entries []metav1.ManagedFieldsEntry
		want    string
	}{
		{"kgen's", []metav1.ManagedFieldsEntry{entry("kgen", "Apply", `{"f:status":{"f:observedGeneration":{},"f:conditions":{}}}`)}, ""},
		{"another writer's", []metav1.ManagedFieldsEntry{entry("kgen", "Apply", ready), entry("rival-controller", "Update", observed)}, "rival-controller"},
		{"shared", []metav1.ManagedFieldsEntry{entry("rival-controller", "Update", observed), entry("kgen", "Apply", observed)}, ""},
		{"no managed fields", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := shopCluster(t)
			objs[0].(*unstructured.Unstructured).SetManagedFields(tc.entries)
			cfg, _ := newConfig(t, objs...)
			report, err := Explain(t.Context(), cfg, Ref{Kind: "webapp", Namespace: "team-a", Name: "shop"})
			if err != nil {
				t.Fatal(err)
			}
			if report.Parent.ObservedBy != tc.want {
				t.Errorf("observedBy = %q, want %q", report.Parent.ObservedBy, tc.want)
			}
			var text bytes.Buffer
			if err := report.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			line := "Generation:  3 (kgen observed 3)"
			if tc.want != "" {
				line = "Generation:  3 (observed 3, as " + tc.want + " wrote it)"
			}
			if !strings.Contains(text.String(), line) {
				t.Errorf("text has no %q:\n%s", line, text.String())
			}
			if noted := strings.Contains(text.String(), "StatusContended"); noted != (tc.want != "") {
				t.Errorf("note on StatusContended = %t, want %t:\n%s", noted, tc.want != "", text.String())
			}
		})
	}
}

// A CreateOnly child is up to date whatever its content, unless kgen's
// marks on it differ from what the rule says (its deletionPolicy changed):
// explain names them, as the reconcile's next write (reconcile.OpMarks).
func TestExplainCreateOnlyMarks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy rules.DeletionPolicy
		want   []string
	}{
		{"same deletionPolicy", rules.DeletionDelete, nil},
		{"deletionPolicy changed to Orphan", rules.DeletionOrphan, []string{"metadata.annotations[" + reconcile.AnnotationDeletionPolicy + "]", "metadata.ownerReferences"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _ := newConfig(t, shopCluster(t)...)
			c := cfg.Rules[0].Child("config")
			c.UpdatePolicy, c.DeletionPolicy = rules.UpdateCreateOnly, tc.policy
			report, err := Explain(t.Context(), cfg, Ref{Kind: "webapp", Namespace: "team-a", Name: "shop"})
			if err != nil {
				t.Fatal(err)
			}
			for _, ch := range report.Children {
				if ch.ID != "config" {
					continue
				}
				if ch.UpToDate != (tc.want == nil) || !slices.Equal(ch.Differences, tc.want) {
					t.Errorf("config: upToDate %t, differences %q; want %t, %q", ch.UpToDate, ch.Differences, tc.want == nil, tc.want)
				}
			}
		})
	}
}

// A rule with a child kind the API server does not serve (its rule waits,
// KindNotServed) is still explained: the tree shows its other children,
// and that one waits for its kind. (explain failed with "child widget: ...
// is not served", showing nothing, in an audit.)
func TestExplainChildKindNotServed(t *testing.T) {
	rs, err := rules.Parse("rules.yaml", []byte(`apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: webapp}
spec:
  parent:
    apiVersion: example.com/v1alpha1
    kind: WebApp
    selector:
      matchLabels: {tier: web}
  children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${parent.metadata.name}-config"}
  - id: widget
    template:
      apiVersion: example.com/v1
      kind: Widget
      metadata: {name: "${parent.metadata.name}"}
`), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, client := newConfig(t, shopCluster(t)...)
	cfg.Rules = rs
	report, err := Explain(t.Context(), cfg, Ref{Kind: "webapp", Namespace: "team-a", Name: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Child{}
	for _, ch := range report.Children {
		got[ch.ID] = ch
	}
	if w := got["widget"]; w.Action != ActionWait || !strings.Contains(w.Next, "once the API server serves example.com/v1 Widget") {
		t.Errorf("widget: action %q, next %q; want it waiting for its kind", w.Action, w.Next)
	}
	if c, ok := got["config"]; !ok || !c.Exists {
		t.Errorf("config = %+v, want it shown, existing", c)
	}
	noWrites(t, client)
}

// The object of an id the rule no longer has, of the kind of a child that
// cannot be created (an object that is not kgen's holds its name), is
// kept by the controller, as it may be that child's old object: explain
// says so, not that kgen deletes it.
func TestExplainRemovedIdHeldByABlockedChild(t *testing.T) {
	objs := shopCluster(t)
	old := children(t, loadRules(t)[0], load(t, shop))["service"].DeepCopy()
	old.SetName("shop-old")
	old.SetUID("uid-old-service")
	ls := old.GetLabels()
	ls[reconcile.LabelChild] = "oldsvc"
	old.SetLabels(ls)
	cfg, client := newConfig(t, append(objs, old)...)
	report, err := Explain(t.Context(), cfg, Ref{Kind: "webapp", Namespace: "team-a", Name: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(report.Children, func(c Child) bool { return c.ID == "oldsvc" })
	if i < 0 {
		t.Fatalf("no entry for the removed id: %+v", report.Children)
	}
	if c := report.Children[i]; !c.Exists || c.Action != ActionWait || !strings.Contains(c.Next, "cannot be created") {
		t.Errorf("oldsvc = %+v, want it kept while the service cannot be created", c)
	}
	noWrites(t, client)
}

// A child whose repairs the controller holds off (its Ready condition says
// ChildContended for it) is not one "kgen sets back" now: explain says it
// waits, and only for that child.
func TestExplainChildContended(t *testing.T) {
	objs := shopCluster(t)
	parent := objs[0].(*unstructured.Unstructured)
	if err := unstructured.SetNestedSlice(parent.Object, []any{map[string]any{"type": "Ready", "status": "False", "reason": reconcile.ReasonChildContended,
		"message": "child deployment: another writer (kubectl-edit) keeps changing spec.template.spec.containers[name=app].image of deployments.apps team-a/shop, which the template sets: …"}},
		"status", "conditions"); err != nil {
		t.Fatal(err)
	}
	cfg, _ := newConfig(t, objs...)
	report, err := Explain(t.Context(), cfg, Ref{Kind: "webapp", Namespace: "team-a", Name: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range report.Children {
		switch c.ID {
		case "deployment":
			if c.Action != ActionRepair || c.Next != heldNext {
				t.Errorf("deployment: action %s, next %q; want %s, %q", c.Action, c.Next, ActionRepair, heldNext)
			}
		default:
			if c.Next == heldNext {
				t.Errorf("%s is said to be held: %+v", c.ID, c)
			}
		}
	}
}
