package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"kgen.dev/kgen/internal/controlplane"
)

var (
	podGVR        = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	replicaSetGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}
)

// podsResult is what the pods phase measured: kgen at its defaults with
// Deployments whose pods really run (on kwok's fake Node), so the
// Deployments become available and their status changes under kgen.
type podsResult struct {
	N int `json:"n"`
	// Pods is how many pods ran at the end: N times the wave's replicas.
	Pods int `json:"pods"`
	// Ready is the time from the first parent's creation until every parent
	// was Ready, every Deployment having its pod available.
	Ready time.Duration `json:"readyNs"`
	// Wave is the time from the first patch of spec.replicas until every
	// parent was Ready again, with all its pods available.
	Wave time.Duration `json:"waveNs"`
	// Settle is the time after the wave until kgen had made no write for
	// podsQuiet, when the steady window starts.
	Settle time.Duration `json:"settleNs"`
	// Requests are kgen's requests from the first create until the end of
	// the wave, by "verb resource".
	Requests map[string]float64 `json:"requests"`
	// Window is how long the steady window was.
	Window time.Duration `json:"windowNs"`
	// SteadyPerMinute are kgen's requests per minute in the steady window.
	SteadyPerMinute map[string]float64 `json:"steadyPerMinute"`
	// RolloutChanges and WindowChanges count, by resource, the changes
	// (creates, updates, deletes) of the objects in the parents' namespace
	// the bench saw until the end of the wave and in the steady window: how
	// much moved around kgen, such as the Deployments' status.
	RolloutChanges map[string]int `json:"rolloutChanges"`
	WindowChanges  map[string]int `json:"windowChanges"`
}

// podsQuiet is how long kgen must have made no write before the steady
// window starts.
const podsQuiet = 10 * time.Second

// podsGoals are the goals of the pods phase: every parent Ready at its
// generation with want pods available in its status, every Deployment
// rolled out with want pods available.
func podsGoals(want int64) map[schema.GroupVersionResource]func(*unstructured.Unstructured) bool {
	num := func(u *unstructured.Unstructured, f ...string) int64 {
		v, _, _ := unstructured.NestedInt64(u.Object, f...)
		return v
	}
	observed := func(u *unstructured.Unstructured) bool {
		g, ok, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
		return ok && g == u.GetGeneration()
	}
	return map[schema.GroupVersionResource]func(*unstructured.Unstructured) bool{
		webappGVR: func(u *unstructured.Unstructured) bool {
			return observed(u) && conditionTrue(u, "Ready") && num(u, "status", "availableReplicas") == want
		},
		deployGVR: func(u *unstructured.Unstructured) bool {
			return observed(u) && num(u, "spec", "replicas") == want && num(u, "status", "replicas") == want &&
				num(u, "status", "updatedReplicas") == want && num(u, "status", "availableReplicas") == want
		},
	}
}

// conditionTrue reports whether u has status.conditions[type=typ] with
// status "True".
func conditionTrue(u *unstructured.Unstructured, typ string) bool {
	conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conditions {
		if c, ok := c.(map[string]any); ok && c["type"] == typ {
			return c["status"] == "True"
		}
	}
	return false
}

// measurePods runs kgen at its defaults on a control plane that runs pods:
// it creates n parents with one pod each, waits until every parent is Ready,
// scales every parent to three pods, waits again, lets kgen settle, and
// counts kgen's requests over the steady window. The contract's target is no
// write at all: nothing in a parent or the rule changes in the window.
func (b *bench) measurePods(ctx context.Context, n int) (*podsResult, error) {
	if err := b.freshControlPlane(ctx, true); err != nil {
		return nil, err
	}
	r := &podsResult{N: n}
	// One Node holds every pod; a little room for the warm-up's pod too.
	if _, err := b.kube.CoreV1().Nodes().Create(ctx, controlplane.KwokNode("kwok-node-0", n*int(newReplicas)+110), metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if err := b.awaitNodeReady(ctx, "kwok-node-0"); err != nil {
		return nil, err
	}
	ns := fmt.Sprintf("pods-%d", n)
	if err := b.namespace(ctx, ns); err != nil {
		return nil, err
	}
	// Pods need their namespace's default ServiceAccount; without it the
	// ReplicaSet controller's first creates fail and back off.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := b.kube.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		return nil, fmt.Errorf("no default ServiceAccount in %s: %w", ns, err)
	}
	k, err := b.startKgen(ctx, fmt.Sprintf("kgen-pods-%d.log", n))
	if err != nil {
		return nil, err
	}
	defer k.stop()
	changes, err := watchChanges(ctx, b.dyn, ns, webappGVR, deployGVR, replicaSetGVR, podGVR, cmGVR, svcGVR)
	if err != nil {
		return nil, err
	}
	defer changes.stop()
	before, err := k.scrape()
	if err != nil {
		return nil, err
	}

	logf("N=%d pods: creating %d parents with %d pod each", n, n, replicas)
	obs, err := observe(ctx, b.dyn, ns, 2*n, podsGoals(replicas))
	if err != nil {
		return nil, err
	}
	obs.begin()
	err = b.load(ctx, n, func(ctx context.Context, i int) error {
		_, err := b.create(ctx, webappGVR, ns, parent(ns, i, true))
		return err
	})
	if err == nil {
		r.Ready, err = obs.wait(b.opts.timeout)
	}
	obs.stop()
	if err != nil {
		return nil, err
	}
	logf("N=%d pods: every parent Ready in %s", n, r.Ready.Round(time.Millisecond))

	obs, err = observe(ctx, b.dyn, ns, 2*n, podsGoals(newReplicas))
	if err != nil {
		return nil, err
	}
	obs.begin()
	err = b.load(ctx, n, func(ctx context.Context, i int) error {
		return b.patchReplicas(ctx, webappGVR, ns, parentName(i))
	})
	if err == nil {
		r.Wave, err = obs.wait(b.opts.timeout)
	}
	obs.stop()
	if err != nil {
		return nil, err
	}
	logf("N=%d pods: every parent Ready with %d pods in %s", n, newReplicas, r.Wave.Round(time.Millisecond))
	after, err := k.scrape()
	if err != nil {
		return nil, err
	}
	r.Requests = after.requests().minus(before.requests())
	r.RolloutChanges = changes.take()

	if r.Settle, err = settle(ctx, k, 2*time.Minute); err != nil {
		return nil, err
	}
	logf("N=%d pods: no write by kgen for %s, %s after the wave; counting for %s", n, podsQuiet, r.Settle.Round(time.Second), b.opts.steady)
	s1, err := k.scrape()
	if err != nil {
		return nil, err
	}
	changes.take()
	time.Sleep(b.opts.steady)
	r.Window = b.opts.steady
	s2, err := k.scrape()
	if err != nil {
		return nil, err
	}
	r.WindowChanges = changes.take()
	r.SteadyPerMinute = steadyPerMinute(s1, s2, b.opts.steady)

	pods, err := b.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "status.phase=Running"})
	if err != nil {
		return nil, err
	}
	r.Pods = len(pods.Items)
	k.stop()
	return r, nil
}

// awaitNodeReady waits until kwok has made the Node ready and it takes
// pods: no taint left.
func (b *bench) awaitNodeReady(ctx context.Context, name string) error {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		node, err := b.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, err
		}
		if err != nil {
			return false, nil
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue && len(node.Spec.Taints) == 0, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("node %s not ready without taints (kwok, node-lifecycle-controller): %w", name, err)
	}
	return nil
}

// settle waits until kgen has made no write for podsQuiet, at most limit,
// and returns how long that took. A kgen that keeps writing reaches the
// limit, and the steady window then counts its writes.
func settle(ctx context.Context, k *kgen, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	last, lastChange := -1.0, start
	for time.Since(start) < limit {
		m, err := k.scrape()
		if err != nil {
			return 0, err
		}
		writes := m.requests().sum(isWrite)
		if writes != last {
			last, lastChange = writes, time.Now()
		}
		if time.Since(lastChange) >= podsQuiet {
			return lastChange.Sub(start), nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return time.Since(start), nil
}

// changeCounter counts the changes of objects in one namespace, by resource.
type changeCounter struct {
	cancel  context.CancelFunc
	mu      sync.Mutex
	changes map[string]int
}

// watchChanges starts watching the resources in ns and counts their changes
// from then on; the objects already there when it starts do not count.
func watchChanges(ctx context.Context, client dynamic.Interface, ns string, resources ...schema.GroupVersionResource) (*changeCounter, error) {
	c := &changeCounter{changes: map[string]int{}}
	ctx, c.cancel = context.WithCancel(ctx)
	factory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(client, 0, ns, nil)
	var synced []cache.InformerSynced
	for _, gvr := range resources {
		inf := factory.ForResource(gvr).Informer()
		count := func() {
			c.mu.Lock()
			c.changes[gvr.Resource]++
			c.mu.Unlock()
		}
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
			AddFunc: func(_ any, initial bool) {
				if !initial {
					count()
				}
			},
			UpdateFunc: func(any, any) { count() },
			DeleteFunc: func(any) { count() },
		}); err != nil {
			c.cancel()
			return nil, err
		}
		synced = append(synced, inf.HasSynced)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		c.cancel()
		return nil, fmt.Errorf("change counter caches did not sync")
	}
	return c, nil
}

// take returns the changes counted since the last take, or the start.
func (c *changeCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.changes
	c.changes = map[string]int{}
	return out
}

func (c *changeCounter) stop() { c.cancel() }

func (r *podsResult) summary() string {
	return fmt.Sprintf("pods, N=%d: %d pods running; every parent Ready in %s, after the wave in %s; steady state per minute: %s (writes: %s); changes seen until then: %s; in the window: %s",
		r.N, r.Pods, seconds(r.Ready), seconds(r.Wave), verbsText(r.SteadyPerMinute), perMinute(counts(r.SteadyPerMinute).sum(isWrite)), changesText(r.RolloutChanges), changesText(r.WindowChanges))
}

// verbsText formats request counts per minute by verb, or "none".
func verbsText(c counts) string {
	per := c.byVerb(nil)
	var parts []string
	for _, v := range sortedKeys(per) {
		parts = append(parts, fmt.Sprintf("%s %.1f", v, per[v]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func perMinute(v float64) string { return fmt.Sprintf("%.1f", v) }

// changesText formats counts of changes by resource, or "none".
func changesText(c map[string]int) string {
	var parts []string
	for _, k := range sortedKeys(c) {
		parts = append(parts, fmt.Sprintf("%s %d", k, c[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
