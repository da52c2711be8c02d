package controller

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

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
