package controller

import (
	"context"
	"testing"
	"testing/synctest"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"kgen.dev/kgen/pkg/mapper"
	"kgen.dev/kgen/rules"
)

// A parent CRD changed in place to gain its status subresource: the running
// rule maps its parents again, so they get a status from then on, with no
// restart; and it loses the subresource the same way.
func TestParentMappingFollowsCRD(t *testing.T) { synctest.Test(t, testParentMappingFollowsCRD) }

func testParentMappingFollowsCRD(t *testing.T) {
	client, _ := fakeCluster(object("example.com/v1", "Gadget", "g", "p1", ""))
	disc := fakeDiscovery()
	m := mapper.New(disc)
	c := New(Config{Rules: []*rules.Rule{gadgetRule(t, configChild)}, Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100), Record: &memRecord{scopes: map[string][]ChildScope{}}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer c.queue.ShutDown()
	defer c.watches.Shutdown()
	if err := c.activate(ctx, c.rules["r"]); err != nil {
		t.Fatal(err)
	}
	waitState(t, c, "the rule to sync", func(s RuleState) bool { return s.Synced })
	status := func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.rules["r"].parent.HasSubresource("status")
	}
	if status() {
		t.Fatal("the parent mapping has a status subresource before the CRD has one")
	}
	gadgets := disc.Resources[2]
	kind := gadgets.APIResources[0]
	for _, step := range []struct {
		resources []metav1.APIResource
		want      bool
	}{
		{[]metav1.APIResource{kind, {Name: "gadgets/status"}}, true},
		{[]metav1.APIResource{kind}, false},
	} {
		gadgets.APIResources = step.resources
		m.Reset() // as the Watcher does before it tells its subscribers
		c.KindsChanged(mapper.Change{Group: "example.com", Spec: true})
		if got := status(); got != step.want {
			t.Errorf("with %d resources in example.com/v1: the parent mapping has status = %v, want %v", len(step.resources), got, step.want)
		}
	}
}
