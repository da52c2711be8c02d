package ruleset

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
)

// A Rule's status the API server refuses to write (kgen's grant on
// rules/status revoked, the API server down) is retried with a growing
// backoff, not every second with an error line each (a live audit: 30
// writes and log lines in 30 s), and written once it is allowed again.
func TestRuleStatusWriteBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
			map[schema.GroupVersionResource]string{CRDGVR: "CustomResourceDefinitionList", RuleGVR: "RuleList"})
		var refuse atomic.Bool
		var tries, written atomic.Int32
		refuse.Store(true)
		client.PrependReactor("patch", "rules", func(a clienttesting.Action) (bool, runtime.Object, error) {
			tries.Add(1)
			if refuse.Load() {
				return true, nil, apierrors.NewForbidden(RuleGVR.GroupResource(), "web", nil)
			}
			written.Add(1)
			return true, nil, nil
		})
		s, err := New(Config{Objects: true, Client: client, Resources: serveApps})
		if err != nil {
			t.Fatal(err)
		}
		s.objects["web"] = &object{obj: ruleObject(t, ruleDoc("web", "parent.spec.image"), "uid-web", 1, nil)}
		s.handed.Store(true) // as once the set with every Rule object was handed over
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go s.writeStatuses(ctx)
		time.Sleep(time.Minute)
		synctest.Wait()
		// Without a backoff: 60; with one doubling from 1 s: 0, 1, 3, 7,
		// 15, 31 s (and 63).
		if n := tries.Load(); n > 7 || n < 5 {
			t.Errorf("%d attempts to write a refused status in a minute, want 5 to 7", n)
		}
		refuse.Store(false)
		time.Sleep(time.Minute)
		synctest.Wait()
		if written.Load() != 1 {
			t.Errorf("%d writes of the status once allowed, want 1", written.Load())
		}
		cancel()
	})
}
