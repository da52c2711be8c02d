package controller

import (
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/record"

	"kgen.dev/kgen/rules"
)

// An event that comes while its parent is reconciled is held until the
// reconcile ends: the echo of a write the reconcile made, whose answer came
// after the event, queues nothing; anything else queues the parent once.
func TestHeldEvents(t *testing.T) {
	client, m := fakeCluster()
	c := New(Config{Rules: []*rules.Rule{gadgetRule(t, configChild)}, Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100)})
	defer c.queue.ShutDown()
	defer c.watches.Shutdown()
	deployments := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	child := func(uid, rv string) *unstructured.Unstructured {
		u := object("apps/v1", "Deployment", "d", uid, "p1")
		u.SetResourceVersion(rv)
		return u
	}
	key := Key{Rule: "r", Namespace: "ns", Name: "p1"}

	for _, tc := range []struct {
		name string
		// events come while the parent is reconciled, before the writes
		// of the versions wrote are answered.
		events []string
		wrote  []string
		queued bool
	}{
		{name: "no event", wrote: []string{"10"}},
		{name: "the echo of the write", events: []string{"10"}, wrote: []string{"10"}},
		{name: "the echoes of two writes", events: []string{"10", "11"}, wrote: []string{"10", "11"}},
		{name: "someone else's version", events: []string{"9"}, wrote: []string{"10"}, queued: true},
		{name: "someone else's, then the echo", events: []string{"9", "10"}, wrote: []string{"10"}, queued: true},
		{name: "no write at all", events: []string{"7"}, queued: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			uid := "u-" + tc.name
			c.hold(key)
			for _, rv := range tc.events {
				c.enqueue(key, child(uid, rv), false)
			}
			if c.queue.Len() != 0 {
				t.Fatal("an event was queued while its parent was reconciled")
			}
			for _, rv := range tc.wrote {
				c.watches.Writes().Wrote(deployments, child(uid, rv))
			}
			c.unhold(key)
			if got := c.queue.Len() == 1; got != tc.queued {
				t.Errorf("parent queued = %v, want %v", got, tc.queued)
			}
			for c.queue.Len() > 0 {
				k, _ := c.queue.Get()
				c.queue.Done(k)
			}
			// Not held any more: an event queues at once.
			c.enqueue(key, child(uid, "99"), false)
			if c.queue.Len() != 1 {
				t.Error("an event after the reconcile was not queued")
			}
			k, _ := c.queue.Get()
			c.queue.Done(k)
		})
	}
}

// A deleted object's event queues its parent even while the parent is
// reconciled: a delete answers with the version of the deleted event, so it
// would pass for an echo.
func TestHeldEventsDeleted(t *testing.T) {
	client, m := fakeCluster()
	c := New(Config{Rules: []*rules.Rule{gadgetRule(t, configChild)}, Client: client, Mapper: m, Recorder: record.NewFakeRecorder(100)})
	defer c.queue.ShutDown()
	defer c.watches.Shutdown()
	key := Key{Rule: "r", Namespace: "ns", Name: "p1"}
	gone := object("apps/v1", "Deployment", "d", "u1", "p1")
	gone.SetResourceVersion("10")
	c.hold(key)
	c.watches.Writes().Wrote(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, gone)
	c.enqueue(key, gone, true)
	if c.queue.Len() != 1 {
		t.Error("a deleted object's event did not queue its parent while it was reconciled")
	}
	c.unhold(key)
}

// Two failures of a list are one cause for logging when only their
// messages differ (resource versions change at every retry), and two
// when their status differs.
func TestCauseOf(t *testing.T) {
	gr := schema.GroupResource{Resource: "widgets"}
	a := apierrors.NewInternalError(errors.New("conversion webhook failed at rv 10"))
	b := apierrors.NewInternalError(errors.New("conversion webhook failed at rv 11"))
	if causeOf(a) != causeOf(b) {
		t.Errorf("causeOf: %q != %q for the same failure", causeOf(a), causeOf(b))
	}
	// One status, a message that says more: a new cause.
	first := apierrors.NewTooManyRequests("storage is (re)initializing", 1)
	later := apierrors.NewTooManyRequests("storage is (re)initializing: failed to list widgets: conversion webhook failed", 1)
	if causeOf(first) == causeOf(later) {
		t.Error("causeOf: a message that names the failure is the same cause as one that does not")
	}
	if causeOf(a) == causeOf(apierrors.NewForbidden(gr, "", nil)) {
		t.Error("causeOf: different failures are one cause")
	}
}
