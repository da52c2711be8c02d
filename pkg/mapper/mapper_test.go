package mapper

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
)

func res(name, singular, kind string, namespaced bool, shortNames ...string) metav1.APIResource {
	return metav1.APIResource{Name: name, SingularName: singular, Kind: kind, Namespaced: namespaced, ShortNames: shortNames,
		Verbs: metav1.Verbs{"get", "list", "watch"}}
}

func sub(name string) metav1.APIResource { return metav1.APIResource{Name: name} }

// cluster is a small discovery document: built-ins with short names and
// subresources, a kind served by two groups, a CRD with an irregular plural
// at two versions, and a category.
func cluster() []*metav1.APIResourceList {
	crd := res("octopodes", "octopus", "Octopus", true, "oct")
	crd.Categories = []string{"sea"}
	return []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			res("configmaps", "configmap", "ConfigMap", true, "cm"),
			res("events", "event", "Event", true, "ev"),
			res("namespaces", "namespace", "Namespace", false, "ns"),
			res("endpoints", "endpoints", "Endpoints", true, "ep"),
		}},
		{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{
			res("deployments", "deployment", "Deployment", true, "deploy"),
			sub("deployments/status"), sub("deployments/scale"),
		}},
		{GroupVersion: "events.k8s.io/v1", APIResources: []metav1.APIResource{
			res("events", "event", "Event", true, "ev"),
		}},
		{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{crd, sub("octopodes/status")}},
		{GroupVersion: "example.com/v1alpha1", APIResources: []metav1.APIResource{crd}},
	}
}

func newFake(lists []*metav1.APIResourceList) *fake.FakeDiscovery {
	return &fake.FakeDiscovery{Fake: &clienttesting.Fake{Resources: lists}}
}

func gvrs(ms []Mapping) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.GroupVersionResource().String())
	}
	slices.Sort(out)
	return out
}

func TestResolve(t *testing.T) {
	deploy := []string{"apps/v1, Resource=deployments"}
	octo := []string{"example.com/v1, Resource=octopodes"}
	events := []string{"/v1, Resource=events", "events.k8s.io/v1, Resource=events"}
	tests := []struct {
		ref  string
		want []string
	}{
		{"apps/v1/Deployment", deploy},
		{"apps/v1/deployments", deploy},
		{"Deployment.v1.apps", deploy},
		{"deployments.v1.apps", deploy},
		{"deployments.apps", deploy},
		{"apps/deploy", deploy},
		{"Deployment", deploy},
		{"deployment", deploy},
		{"DEPLOYMENTS", deploy},
		{"deployments", deploy},
		{"deploy", deploy},
		{"v1/ConfigMap", []string{"/v1, Resource=configmaps"}},
		{"cm", []string{"/v1, Resource=configmaps"}},
		{"endpoints", []string{"/v1, Resource=endpoints"}},
		{"Octopus", octo},
		{"octopus", octo},
		{"octopodes", octo},
		{"oct", octo},
		{"octopodes.example.com", octo},
		{"Octopus.v1alpha1.example.com", []string{"example.com/v1alpha1, Resource=octopodes"}},
		{"example.com/v1alpha1/Octopus", []string{"example.com/v1alpha1, Resource=octopodes"}},
		{"sea", octo},
		{"Event", events},
		{"ev", events},
		{"events.events.k8s.io", []string{"events.k8s.io/v1, Resource=events"}},
		{"v1/Event", []string{"/v1, Resource=events"}},
	}
	m := New(newFake(cluster()))
	for _, tt := range tests {
		t.Run(tt.ref, func(t *testing.T) {
			got, err := m.Resolve(tt.ref)
			if err != nil {
				t.Fatalf("Resolve(%q) error: %v", tt.ref, err)
			}
			if g := gvrs(got); !slices.Equal(g, tt.want) {
				t.Errorf("Resolve(%q) = %v, want %v", tt.ref, g, tt.want)
			}
		})
	}
}

func TestResolveDetails(t *testing.T) {
	m := New(newFake(cluster()))
	got, err := m.Resolve("deploy")
	if err != nil {
		t.Fatal(err)
	}
	want := Mapping{Group: "apps", Version: "v1", Kind: "Deployment", Resource: "deployments", Namespaced: true,
		SingularName: "deployment", ShortNames: []string{"deploy"}, Subresources: []string{"status", "scale"},
		Verbs: []string{"get", "list", "watch"}}
	if len(got) != 1 || !equalMapping(got[0], want) {
		t.Errorf("Resolve(deploy) = %+v, want %+v", got, want)
	}
	ns, err := m.Resolve("ns")
	if err != nil || len(ns) != 1 || ns[0].Namespaced {
		t.Errorf("Resolve(ns) = %+v, %v; want one cluster-scoped namespaces", ns, err)
	}
}

func equalMapping(a, b Mapping) bool {
	return a.Group == b.Group && a.Version == b.Version && a.Kind == b.Kind && a.Resource == b.Resource &&
		a.Namespaced == b.Namespaced && a.SingularName == b.SingularName && slices.Equal(a.ShortNames, b.ShortNames) &&
		slices.Equal(a.Subresources, b.Subresources) && slices.Equal(a.Verbs, b.Verbs)
}

func TestResolveNotFound(t *testing.T) {
	m := New(newFake(cluster()))
	for _, ref := range []string{"widgets", "apps/v2/Deployment", "v1/Deployment", "Deployment.v1.nowhere", "a/b/c/d", "..", "/"} {
		t.Run(ref, func(t *testing.T) {
			got, err := m.Resolve(ref)
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("Resolve(%q) = %v, %v; want ErrNotFound", ref, got, err)
			}
			if !strings.Contains(err.Error(), ref) || !strings.Contains(err.Error(), "searched") {
				t.Errorf("error %q should name the reference and what was searched", err)
			}
		})
	}
	if _, err := m.Resolve("  "); err == nil {
		t.Error("Resolve of a blank reference should fail")
	}
}

func TestResourceFor(t *testing.T) {
	m := New(newFake(cluster()))
	tests := []struct {
		gvk        schema.GroupVersionKind
		resource   string
		namespaced bool
	}{
		{schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, "deployments", true},
		{schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, "namespaces", false},
		{schema.GroupVersionKind{Group: "example.com", Version: "v1alpha1", Kind: "Octopus"}, "octopodes", true},
	}
	for _, tt := range tests {
		got, err := m.ResourceFor(tt.gvk)
		if err != nil {
			t.Fatalf("ResourceFor(%v): %v", tt.gvk, err)
		}
		if got.Resource != tt.resource || got.Namespaced != tt.namespaced || got.GroupVersionKind() != tt.gvk {
			t.Errorf("ResourceFor(%v) = %+v, want resource %s namespaced %t", tt.gvk, got, tt.resource, tt.namespaced)
		}
	}
	_, err := m.ResourceFor(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Widget"})
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("ResourceFor(Widget) error = %v, want ErrNotFound", err)
	}
}

// A kind served after the Mapper cached discovery is found: the miss resets
// the cache and asks again.
func TestServedLater(t *testing.T) {
	lists := cluster()
	fd := newFake(lists)
	m := New(fd)
	gvk := schema.GroupVersionKind{Group: "later.example.com", Version: "v1", Kind: "Squid"}
	if _, err := m.ResourceFor(gvk); !errors.Is(err, ErrNotFound) {
		t.Fatalf("before the CRD: err = %v, want ErrNotFound", err)
	}
	if _, err := m.Resolve("squid"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("before the CRD: err = %v, want ErrNotFound", err)
	}
	fd.Resources = append(fd.Resources, &metav1.APIResourceList{GroupVersion: "later.example.com/v1",
		APIResources: []metav1.APIResource{res("squids", "squid", "Squid", false, "sq")}})
	got, err := m.ResourceFor(gvk)
	if err != nil || got.Resource != "squids" || got.Namespaced {
		t.Fatalf("after the CRD: ResourceFor = %+v, %v; want cluster-scoped squids", got, err)
	}
	fd.Resources = append(fd.Resources, &metav1.APIResourceList{GroupVersion: "later.example.com/v2",
		APIResources: []metav1.APIResource{res("clams", "clam", "Clam", true)}})
	if found, err := m.Resolve("clam"); err != nil || len(found) != 1 || found[0].Resource != "clams" {
		t.Fatalf("after the second CRD: Resolve(clam) = %+v, %v", found, err)
	}
}

// A kind's mapping has its subresources even when the RESTMapper saw the
// kind before the flat view did: a Reset that raced with a read left the
// view older than the RESTMapper. Without its status subresource, the
// parent of a just-created CRD never got a status (TestLanguageManageCRDs).
func TestServedLaterSubresources(t *testing.T) {
	fd := newFake(cluster())
	m := New(fd)
	gvk := schema.GroupVersionKind{Group: "later.example.com", Version: "v1", Kind: "Squid"}
	if _, err := m.groups(); err != nil { // the view, built before the CRD
		t.Fatal(err)
	}
	fd.Resources = append(fd.Resources, &metav1.APIResourceList{GroupVersion: "later.example.com/v1",
		APIResources: []metav1.APIResource{res("squids", "squid", "Squid", true), sub("squids/status")}})
	m.rest.Reset() // only the RESTMapper's half of a Reset
	got, err := m.ResourceFor(gvk)
	if err != nil || !got.HasSubresource("status") || got.SingularName != "squid" {
		t.Fatalf("ResourceFor = %+v, %v; want squids with its status subresource", got, err)
	}
}

// Kinds the RESTMapper answers and the view does not list by name (a kind
// in lower case, a List kind) are answered from the view as it is: it is
// not rebuilt for every such question.
func TestRESTMapperOnlyKinds(t *testing.T) {
	m := New(newFake(cluster()))
	view, err := m.groups()
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.ResourceFor(schema.GroupVersionKind{Version: "v1", Kind: "configmap"})
	if err != nil || got.Resource != "configmaps" || got.SingularName != "configmap" {
		t.Errorf("ResourceFor(v1/configmap) = %+v, %v; want configmaps from the view", got, err)
	}
	if m.view != view {
		t.Error("ResourceFor(v1/configmap) rebuilt the view")
	}
	// The RESTMapper makes up configmaplists: the view is built again once
	// to look for it, not at every question.
	for range 3 {
		if got, err := m.ResourceFor(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMapList"}); err != nil || got.Resource != "configmaplists" {
			t.Errorf("ResourceFor(v1/ConfigMapList) = %+v, %v", got, err)
		}
	}
	if m.view == view {
		t.Error("the view was not built again for a resource it lacked")
	}
	again := m.view
	if _, err := m.ResourceFor(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMapList"}); err != nil || m.view != again {
		t.Errorf("ResourceFor(v1/ConfigMapList) built the view again (err %v)", err)
	}
}

// Odd discovery data is skipped, never a panic.
func TestOddDiscovery(t *testing.T) {
	lists := append(cluster(),
		&metav1.APIResourceList{GroupVersion: "odd.example.com/v1", APIResources: []metav1.APIResource{
			{Name: "nokind"}, {Name: "", Kind: "NoName"}, {Name: "orphan/status"},
		}})
	m := New(newFake(lists))
	if _, err := m.Resolve("nokind"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a resource without a kind should not match: %v", err)
	}
	if _, err := m.Resolve("deploy"); err != nil {
		t.Errorf("good groups should still resolve: %v", err)
	}
}

func TestDiscoveryError(t *testing.T) {
	fd := newFake(cluster())
	fd.PrependReactor("*", "*", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	_, err := New(fd).Resolve("deploy")
	if err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Resolve with discovery down = %v, want the discovery error", err)
	}
}

// downDiscovery is a fake discovery whose group versions in down answer
// 503, as those of an aggregated API whose server is down do.
type downDiscovery struct {
	*fake.FakeDiscovery
	down map[string]bool
}

func (d *downDiscovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	if d.down[gv] {
		return nil, apierrors.NewServiceUnavailable("the server is currently unable to handle the request")
	}
	return d.FakeDiscovery.ServerResourcesForGroupVersion(gv)
}

// A kind of a group version whose discovery failed is unavailable, not
// "not served": callers must not take it for a kind of which no object can
// exist. Other groups still map, and the kind maps once discovery reads it
// again.
func TestUnavailableGroupVersion(t *testing.T) {
	// The discovery cache reports the 503s through client-go's error
	// handlers, whose backoff would sleep for decades in the bubble.
	handlers := utilruntime.ErrorHandlers
	utilruntime.ErrorHandlers = handlers[:1]
	t.Cleanup(func() { utilruntime.ErrorHandlers = handlers })
	synctest.Test(t, testUnavailableGroupVersion)
}

func testUnavailableGroupVersion(t *testing.T) {
	lists := append(cluster(), &metav1.APIResourceList{GroupVersion: "metrics.example.com/v1beta1", APIResources: []metav1.APIResource{
		res("nodemetrics", "nodemetrics", "NodeMetrics", false),
	}})
	d := &downDiscovery{FakeDiscovery: newFake(lists), down: map[string]bool{"metrics.example.com/v1beta1": true}}
	m := New(d)
	metrics := schema.GroupVersionKind{Group: "metrics.example.com", Version: "v1beta1", Kind: "NodeMetrics"}

	_, err := m.ResourceFor(metrics)
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNotFound) {
		t.Fatalf("ResourceFor(%v) error = %v, want ErrUnavailable and not ErrNotFound", metrics, err)
	}
	for _, want := range []string{"metrics.example.com/v1beta1/NodeMetrics", "discovery failed: metrics.example.com/v1beta1", "unable to handle the request"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := m.ResourceFor(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}); err != nil {
		t.Errorf("a kind of a group discovery read: %v", err)
	}
	// Another version of the group was not asked for and is not served.
	if _, err := m.ResourceFor(schema.GroupVersionKind{Group: "metrics.example.com", Version: "v1", Kind: "NodeMetrics"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("a version discovery does not list: %v, want ErrNotFound", err)
	}

	for ref, want := range map[string]error{
		"nodemetrics":                         ErrUnavailable, // any group may serve it
		"nodemetrics.metrics.example.com":     ErrUnavailable,
		"metrics.example.com/v1beta1/Widgets": ErrUnavailable,
		"apps/v1/Widget":                      ErrNotFound, // apps was read: not served
		"Widget.v1.apps":                      ErrNotFound,
		"metrics.example.com/v2/NodeMetrics":  ErrNotFound,
	} {
		if _, err := m.Resolve(ref); !errors.Is(err, want) {
			t.Errorf("Resolve(%q) error = %v, want %v", ref, err, want)
		}
	}
	if _, err := m.Resolve("deploymentz"); err == nil || !strings.HasPrefix(err.Error(), `"deploymentz" is not served by the API group versions discovery could read`) {
		t.Errorf("Resolve of a typo = %v, want it to say first that nothing matched", err)
	}
	if got, err := m.Resolve("deploy"); err != nil || len(got) != 1 {
		t.Errorf("Resolve(deploy) = %v, %v", got, err)
	}

	// The API server is back: a lookup reads discovery again, at most once
	// per unavailableRetry, also while a Watcher keeps the cache true (it
	// may have rebuilt the view while the API was down, at a change of
	// another group, and sees no change of this one).
	m.setWatched(func() bool { return true })
	d.down = nil
	if _, err := m.ResourceFor(metrics); !errors.Is(err, ErrUnavailable) {
		t.Errorf("ResourceFor(%v) right after a reset = %v, want it to wait for unavailableRetry", metrics, err)
	}
	time.Sleep(unavailableRetry)
	got, err := m.ResourceFor(metrics)
	if err != nil || got.Resource != "nodemetrics" {
		t.Errorf("ResourceFor(%v) once discovery reads it = %+v, %v", metrics, got, err)
	}
}

// resolverFunc is a Resolver of a func.
type resolverFunc func(string) ([]Mapping, error)

func (f resolverFunc) Resolve(ref string) ([]Mapping, error) { return f(ref) }

// AnyVersion finds a kind in the version it is served in, and only that
// kind: a name of another group or kind that the reference also matches
// is not it.
func TestAnyVersion(t *testing.T) {
	served := resolverFunc(func(ref string) ([]Mapping, error) {
		if ref != "example.com/Widget" {
			return nil, &NotFoundError{Ref: ref}
		}
		return []Mapping{
			{Group: "other.example.com", Version: "v1", Kind: "Widget", Resource: "widgets"},
			{Group: "example.com", Version: "v2", Kind: "Widget", Resource: "widgets"},
		}, nil
	})
	m, err := AnyVersion(served, schema.GroupKind{Group: "example.com", Kind: "Widget"})
	if err != nil || m.Version != "v2" || m.Group != "example.com" {
		t.Errorf("AnyVersion = %+v, %v; want example.com v2", m, err)
	}
	if _, err := AnyVersion(served, schema.GroupKind{Group: "example.com", Kind: "Gadget"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("a kind not served: %v, want ErrNotFound", err)
	}
	only := resolverFunc(func(string) ([]Mapping, error) {
		return []Mapping{{Group: "other.example.com", Version: "v1", Kind: "Widget"}}, nil
	})
	if _, err := AnyVersion(only, schema.GroupKind{Group: "example.com", Kind: "Widget"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("only another group's kind: %v, want ErrNotFound", err)
	}
}

// CachedAnyVersion answers from the discovery read: the kind in its
// version, or in another the group serves, and a miss reads nothing again.
func TestCachedAnyVersion(t *testing.T) {
	fd := newFake(cluster())
	m := New(fd)
	got, err := m.CachedAnyVersion(schema.GroupVersionKind{Group: "example.com", Version: "v1alpha1", Kind: "Octopus"})
	if err != nil || got.Version != "v1alpha1" || got.Resource != "octopodes" {
		t.Errorf("the kind in its version: %+v, %v", got, err)
	}
	got, err = m.CachedAnyVersion(schema.GroupVersionKind{Group: "example.com", Version: "v0", Kind: "Octopus"})
	if err != nil || got.Group != "example.com" || got.Resource != "octopodes" {
		t.Errorf("the kind in a version no longer served: %+v, %v; want octopodes in another version", got, err)
	}
	read := len(fd.Actions())
	if read == 0 {
		t.Fatal("the fake discovery records no reads: the test cannot count them")
	}
	for range 3 {
		if _, err := m.CachedAnyVersion(schema.GroupVersionKind{Group: "gone.example.com", Version: "v1", Kind: "Gone"}); !errors.Is(err, ErrNotFound) {
			t.Errorf("a kind not served: %v, want ErrNotFound", err)
		}
	}
	if n := len(fd.Actions()); n != read {
		t.Errorf("misses read discovery %d times; want none", n-read)
	}
}
