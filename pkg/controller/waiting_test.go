package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"kgen.dev/kgen/pkg/mapper"
	"kgen.dev/kgen/pkg/reconcile"
	"kgen.dev/kgen/rules"
)

// A rule that waits (a child kind not served, or one kgen may not list)
// still finalizes its deleted parents: the children only kgen's finalizer
// guards are deleted, then the finalizer goes (other finalizers stay). A
// kind that is not served is skipped, and so is a forbidden kind whose
// children the parent owns (the garbage collector deletes them); a
// forbidden kind whose children only the finalizer guards keeps the
// finalizer, with a Warning event, until kgen may list it. A parent that
// is not being deleted keeps the finalizer and its children.
func TestFinalizeWhileRuleWaits(t *testing.T) {
	const remoteConfig = `  - id: remote
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: "${parent.metadata.name}-remote", namespace: team-b}}
`
	// client-go's HandleError, which an informer's failing list calls,
	// sleeps after an error until 1ms after the last one, measured from a
	// time taken when the process started: in a synctest bubble, whose
	// clock starts in 2000, it would sleep for decades, holding the
	// informer's error handler (and so onWatchError). Errors are logged
	// only.
	quietListErrors(t)
	for _, tc := range []struct {
		name string
		// children of the rule, as under spec.children
		children string
		// remote is the resource of the child in team-b, forbidden the
		// resource kgen may not list until the test grants it
		remote, forbidden schema.GroupVersionResource
		// kept is set when the finalizer must stay while forbidden
		kept bool
	}{{
		name: "child kind not served",
		children: remoteConfig + `  - id: widget
    template: {apiVersion: example.com/v1, kind: Widget, metadata: {name: "${parent.metadata.name}"}}
`,
		remote: cmResource,
	}, {
		name:      "forbidden child kind the parent owns",
		children:  remoteConfig + deployChild,
		remote:    cmResource,
		forbidden: depResource,
	}, {
		name: "forbidden child kind only the finalizer guards",
		children: configChild + `  - id: remote
    template: {apiVersion: apps/v1, kind: Deployment, metadata: {name: "${parent.metadata.name}-remote", namespace: team-b}}
`,
		remote:    depResource,
		forbidden: depResource,
		kept:      true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { testFinalizeWhileRuleWaits(t, tc.children, tc.remote, tc.forbidden, tc.kept) })
		})
	}
}

func testFinalizeWhileRuleWaits(t *testing.T, children string, remote, forbidden schema.GroupVersionResource, kept bool) {
	remoteOf := func(parent string) *unstructured.Unstructured {
		kind := map[schema.GroupVersionResource]string{cmResource: "ConfigMap", depResource: "Deployment"}[remote]
		o := object(remote.GroupVersion().String(), kind, parent+"-remote", "uid-"+parent+"-remote", "uid-"+parent)
		o.SetNamespace("team-b")
		labels := o.GetLabels()
		labels[reconcile.LabelChild] = "remote"
		o.SetLabels(labels)
		o.SetAnnotations(map[string]string{reconcile.AnnotationParent: "ns/" + parent})
		return o
	}
	client, m := fakeCluster(gadgetWith("doomed", true, true), gadgetWith("alive", true, false), remoteOf("doomed"), remoteOf("alive"))
	applyFinalizers(client)
	var denied atomic.Bool
	denied.Store(!forbidden.Empty())
	client.PrependReactor("list", forbidden.Resource, func(clienttesting.Action) (bool, runtime.Object, error) {
		if denied.Load() {
			return true, nil, apierrors.NewForbidden(forbidden.GroupResource(), "", nil)
		}
		return false, nil, nil
	})
	rs, err := rules.Parse("rules.yaml", []byte(`apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: r}
spec:
  parent: {apiVersion: example.com/v1, kind: Gadget, namespaces: [ns]}
  allowCrossNamespace: [team-b]
  children:
`+children), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	recorder := record.NewFakeRecorder(1000)
	metrics := NewMetrics(prometheus.NewRegistry())
	runController(t, New(Config{Rules: rs, Client: client, Mapper: m, Recorder: recorder, Workers: 1, Metrics: metrics}))

	finalizers := func(name string) []string {
		obj, err := client.Tracker().Get(gadgets, "ns", name)
		if err != nil {
			t.Fatal(err)
		}
		return obj.(*unstructured.Unstructured).GetFinalizers()
	}
	exists := func(name string) bool {
		_, err := client.Tracker().Get(remote, "team-b", name)
		return err == nil
	}
	released := func() bool { return !slices.Contains(finalizers("doomed"), reconcile.Finalizer) }
	if kept {
		warned := func() bool {
			for {
				select {
				case e := <-recorder.Events:
					if strings.HasPrefix(e, "Warning "+reconcile.ReasonForbidden+" ") && strings.Contains(e, "403") {
						return true
					}
				default:
					return false
				}
			}
		}
		for deadline := time.Now().Add(time.Minute); !warned(); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("waited 1m for a Warning event on the parent kgen may not finalize")
			}
		}
		time.Sleep(time.Minute)
		if released() || !exists("doomed-remote") {
			t.Fatalf("finalizers %v, child exists %v while kgen may not list its kind; want both kept", finalizers("doomed"), exists("doomed-remote"))
		}
		denied.Store(false)
	}
	deadline := time.Now().Add(10 * time.Minute)
	for !released() || exists("doomed-remote") {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10m for the deleted parent to be finalized: finalizers %v, child exists %v", finalizers("doomed"), exists("doomed-remote"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got, want := finalizers("doomed"), []string{"other.example.com/keep"}; !slices.Equal(got, want) {
		t.Errorf("finalizers of the deleted parent = %v, want %v", got, want)
	}
	synctest.Wait()
	if got := finalizers("alive"); !slices.Contains(got, reconcile.Finalizer) {
		t.Errorf("finalizers of the parent not being deleted = %v, want kgen's kept", got)
	}
	if !exists("alive-remote") {
		t.Error("the child of the parent not being deleted was deleted")
	}
	// Finalizing is a reconcile, counted as one; the parent not being
	// deleted is not reconciled while the rule waits, and not counted.
	if n := testutil.ToFloat64(metrics.reconciles.WithLabelValues("r", resultSuccess)); n < 1 || n > 2 {
		t.Errorf("reconcile_total{result=success} = %v, want the finalized parent's (1, or 2 while the cache still shows the finalizer)", n)
	}
}

// quietListErrors keeps only client-go's first error handler until the test
// ends: the others rate-limit by sleeping, which a failing list in a
// synctest bubble would turn into a sleep of decades.
func quietListErrors(t *testing.T) {
	t.Helper()
	handlers := utilruntime.ErrorHandlers
	utilruntime.ErrorHandlers = handlers[:1]
	t.Cleanup(func() { utilruntime.ErrorHandlers = handlers })
}

// A rule that cannot start (a child kind not served) has its parents say
// so once it has waited waitReportAfter: Ready turns False, reason
// KindNotServed, with why; nothing else is written, and nothing before
// (a kind back within the grace costs nothing). A parent changed while the
// rule waits gets the same condition of its new generation (a live audit:
// every parent kept Ready=True while none of its Widgets existed).
func TestWaitingRuleReportedOnParents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := gadgetWith("g1", true, false)
		g.SetGeneration(1)
		g.SetResourceVersion("1")
		_ = unstructured.SetNestedSlice(g.Object, []any{map[string]any{"type": "Ready", "status": "True", "reason": "Ready", "message": "all children are applied and ready", "observedGeneration": int64(1)}}, "status", "conditions")
		client, _ := fakeCluster(g)
		disc := fakeDiscovery()
		gadgetsList := disc.Resources[2]
		gadgetsList.APIResources = append(gadgetsList.APIResources, metav1.APIResource{Name: "gadgets/status"})
		m := mapper.New(disc)
		rule := gadgetRule(t, configChild+`  - id: widget
    template: {apiVersion: example.com/v1, kind: Widget, metadata: {name: "${parent.metadata.name}"}}
`)
		runController(t, New(Config{Rules: []*rules.Rule{rule}, Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100), Workers: 1}))
		ready := func() map[string]any {
			obj, err := client.Tracker().Get(gadgets, "ns", "g1")
			if err != nil {
				t.Fatal(err)
			}
			conds, _, _ := unstructured.NestedSlice(obj.(*unstructured.Unstructured).Object, "status", "conditions")
			for _, c := range conds {
				if c.(map[string]any)["type"] == "Ready" {
					return c.(map[string]any)
				}
			}
			return nil
		}
		writes := func() []string {
			var out []string
			for _, a := range client.Actions() {
				if v := a.GetVerb(); v != "get" && v != "list" && v != "watch" {
					out = append(out, v+" "+a.GetResource().Resource+"/"+a.GetSubresource())
				}
			}
			return out
		}
		time.Sleep(20 * time.Second)
		synctest.Wait()
		if w := writes(); len(w) > 0 || ready()["status"] != "True" {
			t.Fatalf("within the grace: writes %q, Ready %v", w, ready())
		}
		time.Sleep(20 * time.Second)
		synctest.Wait()
		c := ready()
		if c["status"] != "False" || c["reason"] != "KindNotServed" || !strings.Contains(fmt.Sprint(c["message"]), "rule r waits") || !strings.Contains(fmt.Sprint(c["message"]), "Widget") {
			t.Errorf("Ready = %v after the rule waited, want False KindNotServed naming the rule and the kind", c)
		}
		if w := writes(); !slices.Equal(w, []string{"patch gadgets/status"}) {
			t.Errorf("writes %q, want the status alone", w)
		}
		// Changed while the rule waits: its new generation is reported.
		obj, _ := client.Tracker().Get(gadgets, "ns", "g1")
		changed := obj.(*unstructured.Unstructured).DeepCopy()
		changed.SetGeneration(2)
		if err := client.Tracker().Update(gadgets, changed, "ns"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if c := ready(); c["observedGeneration"] != int64(2) || c["status"] != "False" {
			t.Errorf("Ready = %v after the parent changed, want False of generation 2", c)
		}
	})
}

// The report of a waiting rule on its parents follows the rule: a new
// cause of the wait is reported again (digits aside: a backoff's seconds
// are not a new cause), and a new version that replaces a stopped one
// waits its grace from when that one stopped, not from its own first try
// (a review: parents of a pending version that had waited for hours were
// flipped 3 s into a blip of the running version's kind).
func TestWaitingReportFollowsTheRule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client, m := fakeCluster()
		c := New(Config{Rules: []*rules.Rule{gadgetRule(t, configChild)}, Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100)})
		defer func() {
			c.watches.Shutdown()
			c.queue.ShutDown()
		}()
		rs := c.rules["r"]
		_ = c.setWaiting(rs, fmt.Errorf("child %q: %w", "widget", mapper.ErrNotFound))
		rs.waitReported = true
		_ = c.setWaiting(rs, fmt.Errorf("child %q: %w", "widget", mapper.ErrNotFound))
		if !rs.waitReported {
			t.Error("the same cause again was reported again")
		}
		_ = c.setWaiting(rs, errors.New("list failed, retrying in 5s"))
		rs.waitReported = true
		_ = c.setWaiting(rs, errors.New("list failed, retrying in 10s"))
		if !rs.waitReported {
			t.Error("a cause that differs in its digits was reported again")
		}
		_ = c.setWaiting(rs, fmt.Errorf("child %q: %w", "widget", mapper.ErrNotFound))
		if rs.waitReported {
			t.Error("a new cause of the wait is not reported again")
		}

		// v1 stopped a second ago; v2 has waited for an hour.
		stopped := time.Now()
		time.Sleep(time.Hour)
		v2 := newRuleState(gadgetRule(t, deployChild))
		v2.waitingSince = stopped
		rs.waitingSince = time.Now().Add(-time.Second)
		c.pending["r"] = v2
		c.startPending(context.Background(), nil)
		if got := c.rules["r"]; got != v2 || !v2.waitingSince.Equal(rs.waitingSince) || v2.waitReported {
			t.Errorf("promoted version waits since %v (reported %v), want since the running version stopped, %v", v2.waitingSince, v2.waitReported, rs.waitingSince)
		}
	})
}
