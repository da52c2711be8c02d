package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
)

// sample is how many watched objects met their goal at a time since start.
type sample struct {
	T float64 `json:"t"`
	N int     `json:"n"`
}

// observer watches one namespace and counts the objects that meet their
// goal, recording when each count was reached. Both kgen's phase and the raw
// phase use it, so its watches cost both the same.
type observer struct {
	start   time.Time
	target  int
	goals   map[schema.GroupVersionResource]func(*unstructured.Unstructured) bool
	plotted map[schema.GroupVersionResource]bool // what the timeline counts

	mu      sync.Mutex
	met     map[string]bool
	count   int
	plot    int
	samples []sample
	done    chan struct{}
	doneAt  time.Time
	cancel  context.CancelFunc
}

// observe starts watching ns; target is how many objects must meet their
// goals. Objects of kinds in plotted are counted in the timeline.
func observe(ctx context.Context, client dynamic.Interface, ns string, target int,
	goals map[schema.GroupVersionResource]func(*unstructured.Unstructured) bool, plotted ...schema.GroupVersionResource) (*observer, error) {
	o := &observer{target: target, goals: goals, plotted: map[schema.GroupVersionResource]bool{},
		met: map[string]bool{}, done: make(chan struct{})}
	for _, p := range plotted {
		o.plotted[p] = true
	}
	ctx, o.cancel = context.WithCancel(ctx)
	factory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(client, 0, ns, func(*metav1.ListOptions) {})
	var synced []cache.InformerSynced
	for gvr, goal := range goals {
		inf := factory.ForResource(gvr).Informer()
		handle := func(obj any) {
			if u, ok := obj.(*unstructured.Unstructured); ok {
				o.update(gvr, u, goal(u))
			}
		}
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    handle,
			UpdateFunc: func(_, obj any) { handle(obj) },
		}); err != nil {
			return nil, err
		}
		synced = append(synced, inf.HasSynced)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil, fmt.Errorf("observer caches did not sync")
	}
	o.mu.Lock()
	o.start = time.Now()
	o.mu.Unlock()
	return o, nil
}

// begin sets the time the timeline counts from.
func (o *observer) begin() {
	o.mu.Lock()
	o.start = time.Now()
	o.samples = append(o.samples[:0], sample{0, o.plot})
	o.mu.Unlock()
}

func (o *observer) update(gvr schema.GroupVersionResource, u *unstructured.Unstructured, ok bool) {
	key := gvr.Resource + "/" + u.GetName()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.met[key] == ok {
		return
	}
	o.met[key] = ok
	delta := 1
	if !ok {
		delta = -1
	}
	o.count += delta
	if o.plotted[gvr] {
		o.plot += delta
		o.samples = append(o.samples, sample{time.Since(o.start).Seconds(), o.plot})
	}
	if o.count == o.target {
		select {
		case <-o.done:
		default:
			o.doneAt = time.Now()
			close(o.done)
		}
	}
}

// wait returns the time from begin until every object met its goal.
func (o *observer) wait(timeout time.Duration) (time.Duration, error) {
	select {
	case <-o.done:
	case <-time.After(timeout):
		o.mu.Lock()
		defer o.mu.Unlock()
		return 0, fmt.Errorf("after %s only %d of %d objects met their goal", timeout, o.count, o.target)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.doneAt.Sub(o.start), nil
}

func (o *observer) timeline() []sample {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]sample(nil), o.samples...)
}

func (o *observer) stop() { o.cancel() }
