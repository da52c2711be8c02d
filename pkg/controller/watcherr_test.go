package controller

import (
	"context"
	"errors"
	"fmt"
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
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"kgen.dev/kgen/pkg/watch"
	"kgen.dev/kgen/rules"
)

// A list kgen may not make fails only the rules that use that informer:
// two rules of one kind in two namespaces, kgen refused in one. The
// failures count for its rule, and not for the rule of the other
// namespace, which runs (contract section 6: "makes its rule report it").
func TestWatchErrorsCountForTheirRule(t *testing.T) {
	quietListErrors(t)
	synctest.Test(t, testWatchErrorsCountForTheirRule)
}

func testWatchErrorsCountForTheirRule(t *testing.T) {
	client, m := fakeCluster()
	client.PrependReactor("list", gadgets.Resource, func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() == "denied" {
			return true, nil, apierrors.NewForbidden(gadgets.GroupResource(), "", nil)
		}
		return false, nil, nil
	})
	rs, err := rules.Parse("rules.yaml", []byte(`apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: allowed}
spec:
  parent: {apiVersion: example.com/v1, kind: Gadget, namespaces: [ns]}
  children:
`+configChild+`---
apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: refused}
spec:
  parent: {apiVersion: example.com/v1, kind: Gadget, namespaces: [denied]}
  children:
`+configChild), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	metrics := NewMetrics(prometheus.NewRegistry())
	c := New(Config{Rules: rs, Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100), Workers: 1, Metrics: metrics})
	runController(t, c)
	waitFor(t, "the allowed rule to sync", func() bool { s, _ := c.State("allowed"); return s.Synced })
	time.Sleep(time.Minute)
	synctest.Wait()
	if n := testutil.ToFloat64(metrics.listErrors.WithLabelValues("refused", "Forbidden")); n == 0 {
		t.Error("the refused list counts for no failure of its rule")
	}
	if n := testutil.ToFloat64(metrics.listErrors.WithLabelValues("allowed", "Forbidden")); n != 0 {
		t.Errorf("kgen_watch_errors_total{rule=allowed} = %v for another namespace's informer, want 0", n)
	}
}

// A rule limited to two namespaces, one of which kgen may no longer list
// in (its Role there is gone): when that namespace is gone too, or being
// deleted, the rule runs in the other one (a restart of kgen after a
// namespace the rule names was deleted); while it is there, or kgen may
// not tell, the rule waits and is Forbidden, as kgen's grants are wrong.
func TestNamespaceGoneDoesNotHoldTheRuleBack(t *testing.T) {
	quietListErrors(t)
	namespace := func(deleting bool) *unstructured.Unstructured {
		ns := &unstructured.Unstructured{}
		ns.SetAPIVersion("v1")
		ns.SetKind("Namespace")
		ns.SetName("gone")
		if deleting {
			ns.SetDeletionTimestamp(&metav1.Time{Time: time.Now()})
			ns.SetFinalizers([]string{"kubernetes"})
		}
		return ns
	}
	for _, tc := range []struct {
		name      string
		namespace *unstructured.Unstructured
		deleted   bool
		getDenied bool
		runs      bool
		gone      string
	}{
		{name: "deleted", deleted: true, runs: true, gone: "does not exist"},
		{name: "being deleted", namespace: namespace(true), runs: true, gone: "is being deleted"},
		{name: "there", namespace: namespace(false)},
		{name: "get refused", getDenied: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := newAgainCluster(false)
				client, m := a.client, a.mapper
				if tc.namespace != nil {
					if err := client.Tracker().Add(tc.namespace); err != nil {
						t.Fatal(err)
					}
				}
				var back atomic.Bool  // the namespace, and kgen's Role there, are back
				var flaky atomic.Bool // the namespace's GET fails with a 503
				client.PrependReactor("list", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
					if a.GetNamespace() == "gone" && !back.Load() {
						return true, nil, apierrors.NewForbidden(a.GetResource().GroupResource(), "", nil)
					}
					return false, nil, nil
				})
				client.PrependReactor("get", "namespaces", func(a clienttesting.Action) (bool, runtime.Object, error) {
					switch {
					case tc.getDenied:
						return true, nil, apierrors.NewForbidden(a.GetResource().GroupResource(), "gone", nil)
					case tc.deleted && flaky.Load():
						return true, nil, apierrors.NewServiceUnavailable("etcd is slow")
					case tc.deleted && !back.Load():
						return true, nil, apierrors.NewNotFound(a.GetResource().GroupResource(), "gone")
					}
					return false, nil, nil
				})
				rs, err := rules.Parse("rules.yaml", []byte(`apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: r}
spec:
  parent: {apiVersion: example.com/v1, kind: Gadget, namespaces: [ns, gone]}
  children:
`+configChild), rules.Options{})
				if err != nil {
					t.Fatal(err)
				}
				c := New(Config{Rules: rs, Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100), Workers: 1})
				runController(t, c)
				time.Sleep(time.Minute)
				synctest.Wait()
				s, _ := c.State("r")
				_, childErr := client.Resource(cmResource).Namespace("ns").Get(t.Context(), "g", metav1.GetOptions{})
				if s.Synced != tc.runs || (childErr == nil) != tc.runs {
					t.Fatalf("Synced = %v, child made: %v (%v); want both %v", s.Synced, childErr == nil, childErr, tc.runs)
				}
				if s.Forbidden == tc.runs {
					t.Errorf("Forbidden = %v, want %v", s.Forbidden, !tc.runs)
				}
				if c.Ready() != nil {
					t.Errorf("Ready: %v; a rule that cannot list is not the controller's readiness", c.Ready())
				}
				var gone []string
				for _, u := range s.Unsynced {
					if u.NamespaceGone != "" {
						gone = append(gone, u.String())
						if u.Resource.Namespace != "gone" || u.NamespaceGone != tc.gone || u.Failing() {
							t.Errorf("unsynced %s: gone %q, failing %v; want namespace gone %q, not failing", u, u.NamespaceGone, u.Failing(), tc.gone)
						}
					}
				}
				// The parent's and the child's informers of namespace gone.
				if tc.runs && len(gone) != 2 {
					t.Errorf("informers of a gone namespace: %q, want the parent's and the child's", gone)
				}
				if !tc.runs && len(gone) != 0 {
					t.Errorf("informers of a gone namespace: %q, want none", gone)
				}
				if !tc.deleted {
					return
				}
				// A read of the namespace that tells nothing keeps what
				// kgen knew: the rule is not Forbidden for it.
				flaky.Store(true)
				time.Sleep(time.Minute)
				synctest.Wait()
				if s, _ := c.State("r"); s.Forbidden || len(s.Unsynced) != 2 || s.Unsynced[0].NamespaceGone == "" {
					t.Errorf("while the namespace's read fails: Forbidden %v, unsynced %v; want the namespace still gone", s.Forbidden, s.Unsynced)
				}
				flaky.Store(false)
				// The namespace comes back, a parent in it, and kgen's
				// grants: the informers there list, with no restart.
				back.Store(true)
				p := object("example.com/v1", "Gadget", "g2", "uid-g2", "")
				p.SetNamespace("gone")
				if _, err := client.Resource(gadgets).Namespace("gone").Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				time.Sleep(2 * time.Minute)
				synctest.Wait()
				if _, err := client.Resource(cmResource).Namespace("gone").Get(t.Context(), "g2", metav1.GetOptions{}); err != nil {
					t.Errorf("the child of a parent in the namespace that came back: %v", err)
				}
				if s, _ := c.State("r"); len(s.Unsynced) != 0 || s.Forbidden {
					t.Errorf("once the namespace is back: unsynced %v, Forbidden %v; want none, false", s.Unsynced, s.Forbidden)
				}
			})
		})
	}
}

// A list or watch that fails after the rule's caches synced (kgen's
// grants shrank, a conversion webhook went down) shows in the rule's
// state, which the Rule's status reads, until the informer lists again.
func TestWatchErrorAfterSyncShows(t *testing.T) {
	quietListErrors(t)
	synctest.Test(t, func(t *testing.T) {
		client, m := fakeCluster()
		c := New(Config{Rules: []*rules.Rule{gadgetRule(t, configChild)}, Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100), Workers: 1})
		runController(t, c)
		waitFor(t, "the rule to sync", func() bool { s, _ := c.State("r"); return s.Synced })
		var key watch.Key
		for _, reg := range c.rules["r"].registrations() {
			if reg.Informer().Key().GVR == cmResource {
				key = reg.Informer().Key()
			}
		}
		for _, tc := range []struct {
			name      string
			err       error
			forbidden bool
		}{
			{"refused", apierrors.NewForbidden(cmResource.GroupResource(), "", nil), true},
			{"failing", apierrors.NewInternalError(errors.New("conversion webhook for example.com/v1, Kind=Gadget failed")), false},
		} {
			c.onWatchError(key, tc.err)
			s, _ := c.State("r")
			if len(s.Stale) != 1 || s.Stale[0].Resource != key || s.Forbidden != tc.forbidden || !s.Synced || !s.Running {
				t.Errorf("%s: state = %+v, want the rule running with %s stale, forbidden: %t", tc.name, s, key, tc.forbidden)
			}
			logged := c.watchErrors[key].logged
			// Where kgen may list but not watch, each list works and
			// the watch after it is refused at once: the rule stays
			// stale, and the failure is not logged again each time.
			time.Sleep(time.Second)
			c.onListed(key)
			if s, _ := c.State("r"); len(s.Stale) != 1 {
				t.Errorf("%s: state just after the informer listed again = %+v, want %s still stale", tc.name, s, key)
			}
			time.Sleep(10 * time.Millisecond)
			c.onWatchError(key, tc.err)
			if s, _ := c.State("r"); len(s.Stale) != 1 {
				t.Errorf("%s: state after its watch failed again = %+v, want %s stale", tc.name, s, key)
			}
			if got := c.watchErrors[key].logged; !got.Equal(logged) {
				t.Errorf("%s: the failure that came back after a list was logged again at %v (first at %v), want once a minute", tc.name, got, logged)
			}
			// Once it lists and does not fail for watchSettle, the
			// failure is forgotten.
			c.onListed(key)
			time.Sleep(watchSettle - time.Millisecond)
			if s, _ := c.State("r"); len(s.Stale) != 1 {
				t.Errorf("%s: state %v after the informer listed again = %+v, want %s still stale", tc.name, watchSettle-time.Millisecond, s, key)
			}
			time.Sleep(time.Millisecond)
			if s, _ := c.State("r"); len(s.Stale) != 0 || s.Forbidden {
				t.Errorf("%s: state %v after the informer listed again = %+v, want nothing stale", tc.name, watchSettle, s)
			}
			time.Sleep(watchErrorLogEvery)
		}
		// A healed failure, and one of an informer no rule uses (a
		// namespace that went), are forgotten once nothing is left to
		// throttle: the entries do not pile up over a long run.
		gone := watch.Key{GVR: cmResource, Namespace: "gone"}
		c.onWatchError(gone, apierrors.NewForbidden(cmResource.GroupResource(), "", nil))
		time.Sleep(watchErrorLogEvery)
		c.onListed(key)
		c.mu.Lock()
		left := len(c.watchErrors)
		c.mu.Unlock()
		if left != 0 {
			t.Errorf("%d failures kept, want none: %v", left, c.watchErrors)
		}
	})
}

// A rule that stops (a kind it uses is no longer served) forgets which of
// its parents were ready: one deleted while it waits is not counted ready
// once it runs again (an audit saw readyParents above parents).
func TestStoppedRuleForgetsReadyParents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newAgainCluster(false)
		client, m := a.client, a.mapper
		c := New(Config{Rules: []*rules.Rule{gadgetRule(t, configChild)}, Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100), Workers: 1})
		runController(t, c)
		waitFor(t, "the parent to be ready", func() bool { s, _ := c.State("r"); return s.ReadyParents == 1 })
		c.mu.Lock()
		state := c.rules["r"]
		c.mu.Unlock()
		c.deactivate(state, errors.New("example.com/v1, Resource=gadgets is no longer served"))
		if s, _ := c.State("r"); s.ReadyParents != 0 || s.Parents != 0 {
			t.Errorf("stopped rule: parents %d, ready %d; want 0 and 0", s.Parents, s.ReadyParents)
		}
	})
}

// An informer stopped on purpose (its rule stopped, or kgen) ends its list
// or watch with the context's error: no failure to log, count or report.
func TestStoppedInformerIsNoWatchError(t *testing.T) {
	client, m := fakeCluster()
	c := New(Config{Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100)})
	key := watch.Key{GVR: gadgets, Namespace: "ns"}
	c.onWatchError(key, fmt.Errorf("list gadgets: %w", context.Canceled))
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.watchErrors[key]; ok {
		t.Errorf("a stopped informer's error is kept as a watch failure: %v", e.err)
	}
}
