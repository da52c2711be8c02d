package controller

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"kgen.dev/kgen/pkg/reconcile"
	"kgen.dev/kgen/rules"
)

// A parent in Conflict is woken as soon as the object in its way goes or
// stops being someone else's, and not by a change that leaves it theirs;
// the watch ends with the parent's backoff, or once the parent is no
// longer in Conflict.
func TestBlockersWakeTheParent(t *testing.T) {
	cmGVR := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	key := Key{Rule: "webapp", Namespace: "team", Name: "shop"}
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, cms func() *unstructured.Unstructured, client *dynamicfake.FakeDynamicClient)
		wake   bool
	}{
		{"deleted", func(t *testing.T, _ func() *unstructured.Unstructured, client *dynamicfake.FakeDynamicClient) {
			if err := client.Resource(cmGVR).Namespace("team").Delete(context.Background(), "taken", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"its data changed", func(t *testing.T, cm func() *unstructured.Unstructured, client *dynamicfake.FakeDynamicClient) {
			o := cm()
			o.Object["data"] = map[string]any{"k": "changed"}
			if _, err := client.Resource(cmGVR).Namespace("team").Update(context.Background(), o, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"its owner let it go", func(t *testing.T, cm func() *unstructured.Unstructured, client *dynamicfake.FakeDynamicClient) {
			o := cm()
			o.SetOwnerReferences(nil)
			if _, err := client.Resource(cmGVR).Namespace("team").Update(context.Background(), o, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"another object deleted", func(t *testing.T, _ func() *unstructured.Unstructured, client *dynamicfake.FakeDynamicClient) {
			if err := client.Resource(cmGVR).Namespace("team").Delete(context.Background(), "other", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				taken := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
					"metadata": map[string]any{"name": "taken", "namespace": "team", "resourceVersion": "7"}, "data": map[string]any{"k": "v"}}}
				taken.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "App", Name: "theirs", UID: types.UID("uid-theirs")}})
				other := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
					"metadata": map[string]any{"name": "other", "namespace": "team"}}}
				client := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme(), taken, other)
				var mu sync.Mutex
				var woken []Key
				b := newBlockers(client, func(k Key) {
					mu.Lock()
					defer mu.Unlock()
					woken = append(woken, k)
				})
				b.watch(t.Context(), key, []reconcile.Blocker{{GVR: cmGVR, Namespace: "team", Name: "taken", ResourceVersion: "7", Marks: reconcile.OwnershipMarks(taken)}}, time.Minute)
				synctest.Wait()
				cm := func() *unstructured.Unstructured {
					o, err := client.Resource(cmGVR).Namespace("team").Get(context.Background(), "taken", metav1.GetOptions{})
					if err != nil {
						t.Fatal(err)
					}
					return o
				}
				tc.change(t, cm, client)
				synctest.Wait()
				mu.Lock()
				got := slices.Clone(woken)
				mu.Unlock()
				if tc.wake && !slices.Equal(got, []Key{key}) || !tc.wake && len(got) > 0 {
					t.Errorf("woken = %v, want the parent woken: %t", got, tc.wake)
				}
				// The watch ends in time, and asked the API server for
				// the object by name from the version read.
				time.Sleep(blockerWatchFor)
				synctest.Wait()
				b.mu.Lock()
				active := len(b.active)
				b.mu.Unlock()
				if active != 0 {
					t.Errorf("%d watches still open after the backoff", active)
				}
				b.stop()
				watches := 0
				for _, a := range client.Actions() {
					if w, ok := a.(clienttesting.WatchActionImpl); ok {
						watches++
						opts := w.GetWatchRestrictions()
						if opts.ResourceVersion != "7" || opts.Fields.String() != "metadata.name=taken" {
							t.Errorf("watch restrictions = %+v, want metadata.name=taken from version 7", opts)
						}
					}
				}
				if watches != 1 {
					t.Errorf("%d watches, want 1", watches)
				}
			})
		})
	}
}

// A parent reconciled again in Conflict keeps its watch of the same
// object, as long as it lasts past the next look (no watch opened by each
// reconcile); a watch that would end sooner, or of an object whose
// ownership changed, is opened again; a parent no longer in Conflict stops
// its watches.
func TestBlockersKeptAndForgotten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cmGVR := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
		key := Key{Rule: "webapp", Namespace: "team", Name: "shop"}
		client := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
		b := newBlockers(client, func(Key) {})
		watches := func() int {
			n := 0
			for _, a := range client.Actions() {
				if a.GetVerb() == "watch" {
					n++
				}
			}
			return n
		}
		in := []reconcile.Blocker{{GVR: cmGVR, Namespace: "team", Name: "taken", Marks: "a"}}
		for _, step := range []struct {
			name    string
			in      []reconcile.Blocker
			next    time.Duration
			watches int
		}{
			{"first conflict", in, 30 * time.Second, 1},
			{"again, same object", in, time.Minute, 1},
			{"again, its ownership changed", []reconcile.Blocker{{GVR: cmGVR, Namespace: "team", Name: "taken", Marks: "b"}}, time.Minute, 2},
			{"again, next look after the watch ends", []reconcile.Blocker{{GVR: cmGVR, Namespace: "team", Name: "taken", Marks: "b"}}, blockerWatchFor, 3},
		} {
			b.watch(t.Context(), key, step.in, step.next)
			synctest.Wait()
			if got := watches(); got != step.watches {
				t.Errorf("%s: %d watches opened in all, want %d", step.name, got, step.watches)
			}
			if n := len(b.active); n != 1 {
				t.Errorf("%s: %d watches open, want 1", step.name, n)
			}
		}
		b.forget(key)
		synctest.Wait()
		if n := len(b.active); n != 0 {
			t.Errorf("%d watches after the conflict ended, want 0", n)
		}
		// A rule that stops forgets its parents' watches, not another
		// rule's.
		other := Key{Rule: "db", Namespace: "team", Name: "shop"}
		b.watch(t.Context(), key, in, time.Minute)
		b.watch(t.Context(), other, in, time.Minute)
		b.forgetRule("webapp")
		synctest.Wait()
		if _, ok := b.active[keyOfBlocker(other, in[0])]; !ok || len(b.active) != 1 {
			t.Errorf("watches after rule webapp stopped: %v, want only rule db's", b.active)
		}
		b.stop()
	})
}

// A rule that stops (a kind it uses is no longer served) stops the watches
// of the objects in its parents' children's way: its parents are not
// reconciled meanwhile, and the watches would count against
// maxBlockerWatches until they time out.
func TestStoppedRuleForgetsBlockers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newAgainCluster(false)
		a.takeName(t)
		c := New(Config{Rules: []*rules.Rule{gadgetRule(t, configChild+blockedChild)}, Client: a.client, Mapper: a.mapper,
			Recorder: record.NewFakeRecorder(10000), Workers: 1})
		runController(t, c)
		active := func() int {
			c.blockers.mu.Lock()
			defer c.blockers.mu.Unlock()
			return len(c.blockers.active)
		}
		waitFor(t, "the object in the child's way to be watched", func() bool { return active() == 1 })
		c.mu.Lock()
		state := c.rules["r"]
		c.mu.Unlock()
		c.deactivate(state, errors.New("example.com/v1, Resource=gadgets is no longer served"))
		if n := active(); n != 0 {
			t.Errorf("%d watches of objects in the way after the rule stopped, want 0", n)
		}
		// A reconcile that was running when the rule stopped, and ends
		// in Conflict after, opens none again.
		c.watchBlockers(t.Context(), Key{Rule: "r", Namespace: "ns", Name: "g"},
			[]reconcile.Blocker{{GVR: cmResource, Namespace: "ns", Name: "taken", Marks: "x"}}, time.Minute)
		if n := active(); n != 0 {
			t.Errorf("%d watches opened by a reconcile that ended after its rule stopped, want 0", n)
		}
	})
}
