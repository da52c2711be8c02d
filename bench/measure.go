package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"kgen.dev/kgen/pkg/reconcile"
)

// result is what one N measured.
type result struct {
	N int `json:"n"`
	// Run counts the runs of this N, from 1.
	Run int `json:"run"`

	KgenConverge time.Duration `json:"kgenConvergeNs"`
	RawConverge  time.Duration `json:"rawConvergeNs"`
	KgenWave     time.Duration `json:"kgenWaveNs"`
	RawWave      time.Duration `json:"rawWaveNs"`
	// FloorConverge and FloorWave are the times of a loader that makes,
	// directly, every write kgen must make: each parent, its children by
	// server-side apply and a status apply; in the wave the parent's patch,
	// an apply of the Deployment and a status apply.
	FloorConverge time.Duration `json:"floorConvergeNs,omitempty"`
	FloorWave     time.Duration `json:"floorWaveNs,omitempty"`

	// ConvergeRequests are kgen's requests during convergence by
	// "verb resource".
	ConvergeRequests map[string]float64 `json:"convergeRequests"`
	// WaveRequests are kgen's requests during the update wave by "verb
	// resource".
	WaveRequests map[string]float64 `json:"waveRequests,omitempty"`
	// ConvergeReconciles and WaveReconciles are kgen's reconciles (of a
	// parent, with or without a write) in each phase.
	ConvergeReconciles float64 `json:"convergeReconciles,omitempty"`
	WaveReconciles     float64 `json:"waveReconciles,omitempty"`
	// SteadyPerMinute are kgen's requests per minute after convergence.
	SteadyPerMinute map[string]float64 `json:"steadyPerMinute"`

	// CPU is the CPU seconds each process used in each phase ("kgen
	// converge", "kgen wave", "raw create", "raw wave").
	CPU map[string]map[string]float64 `json:"cpuSeconds,omitempty"`

	PeakRSS int64 `json:"peakRSSBytes"`
	// PeakAnon and PeakFile are the highest anonymous and file-backed
	// (the binary's pages) RSS sampled; 0 in results from before.
	PeakAnon    int64 `json:"peakAnonRSSBytes,omitempty"`
	PeakFile    int64 `json:"peakFileRSSBytes,omitempty"`
	HeapAfterGC int64 `json:"heapAfterGCBytes"`

	KgenTimeline []sample `json:"kgenTimeline"`
	RawTimeline  []sample `json:"rawTimeline"`
}

const parentImage, replicas, newReplicas = "nginx:1.27", int64(1), int64(3)

func (b *bench) measure(ctx context.Context, n, run int) (*result, error) {
	r := &result{N: n, Run: run, CPU: map[string]map[string]float64{}}
	type phase struct {
		name    string
		measure func(context.Context, int, *result) error
	}
	phases := []phase{{"kgen", b.measureKgen}}
	if b.opts.raw {
		phases = append(phases, phase{"raw", b.measureRaw})
	}
	if b.opts.floor {
		phases = append(phases, phase{"floor", b.measureFloor})
	}
	for _, p := range phases {
		if err := b.freshControlPlane(ctx, false); err != nil {
			return nil, err
		}
		if err := p.measure(ctx, n, r); err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
	}
	return r, nil
}

// convergeGoals are the children's goals: every child with the template's
// values, the Deployment with want replicas.
func convergeGoals(want int64) map[schema.GroupVersionResource]func(*unstructured.Unstructured) bool {
	str := func(u *unstructured.Unstructured, f ...string) string {
		s, _, _ := unstructured.NestedString(u.Object, f...)
		return s
	}
	num := func(u *unstructured.Unstructured, f ...string) int64 {
		v, _, _ := unstructured.NestedInt64(u.Object, f...)
		return v
	}
	return map[schema.GroupVersionResource]func(*unstructured.Unstructured) bool{
		cmGVR:     func(u *unstructured.Unstructured) bool { return str(u, "data", "image") == parentImage },
		svcGVR:    func(u *unstructured.Unstructured) bool { return num(u, "spec", "ports", "0", "port") >= 0 },
		deployGVR: func(u *unstructured.Unstructured) bool { return num(u, "spec", "replicas") == want },
	}
}

// observeConvergence watches ns until its n parents and 3n children meet
// their goals; with observed, a parent's goal is its status.observedGeneration.
// The timeline counts the children.
func (b *bench) observeConvergence(ctx context.Context, ns string, n int, observed bool) (*observer, error) {
	goals := convergeGoals(replicas)
	goals[webappGVR] = func(u *unstructured.Unstructured) bool {
		g, ok, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
		return !observed || (ok && g == u.GetGeneration())
	}
	return observe(ctx, b.dyn, ns, 4*n, goals, cmGVR, svcGVR, deployGVR)
}

func (b *bench) measureKgen(ctx context.Context, n int, r *result) error {
	ns := fmt.Sprintf("kgen-%d-%d", n, r.Run)
	if err := b.namespace(ctx, ns); err != nil {
		return err
	}
	k, err := b.startKgen(ctx, fmt.Sprintf("kgen-%d-%d.log", n, r.Run))
	if err != nil {
		return err
	}
	defer k.stop()

	obs, err := b.observeConvergence(ctx, ns, n, true)
	if err != nil {
		return err
	}
	defer obs.stop()
	before, err := k.scrape()
	if err != nil {
		return err
	}
	var profiled <-chan error
	if n == b.opts.profileSize && r.Run == 1 {
		profiled = k.profile(filepath.Join(b.opts.out, fmt.Sprintf("kgen-cpu-%d.pprof", n)), 15*time.Second)
	}
	logf("N=%d kgen: creating %d parents", n, n)
	if err := b.step(r, "kgen converge", k, 10*time.Second, func() (err error) {
		obs.begin()
		if err := b.load(ctx, n, func(ctx context.Context, i int) error {
			_, err := b.create(ctx, webappGVR, ns, parent(ns, i, true))
			return err
		}); err != nil {
			return err
		}
		r.KgenConverge, err = obs.wait(b.opts.timeout)
		return err
	}); err != nil {
		return err
	}
	r.KgenTimeline = obs.timeline()
	after, err := k.scrape()
	if err != nil {
		return err
	}
	r.ConvergeRequests = after.requests().minus(before.requests())
	r.ConvergeReconciles = after.value(reconcileTotal, nil) - before.value(reconcileTotal, nil)
	logf("N=%d kgen: converged in %s", n, r.KgenConverge.Round(time.Millisecond))

	if err := awaitProfile(profiled); err != nil {
		return err
	}
	profiled = nil
	if n == b.opts.profileSize && r.Run == 1 {
		profiled = k.profile(filepath.Join(b.opts.out, fmt.Sprintf("kgen-cpu-wave-%d.pprof", n)), 30*time.Second)
	}
	if err := b.step(r, "kgen wave", k, 5*time.Second, func() (err error) {
		r.KgenWave, err = b.updateWave(ctx, ns, n, webappGVR)
		return err
	}); err != nil {
		return err
	}
	waved, err := k.scrape()
	if err != nil {
		return err
	}
	r.WaveRequests = waved.requests().minus(after.requests())
	r.WaveReconciles = waved.value(reconcileTotal, nil) - after.value(reconcileTotal, nil)
	logf("N=%d kgen: update wave in %s", n, r.KgenWave.Round(time.Millisecond))

	// Steady state: let the wave's status writes settle, then count.
	time.Sleep(5 * time.Second)
	s1, err := k.scrape()
	if err != nil {
		return err
	}
	time.Sleep(b.opts.steady)
	s2, err := k.scrape()
	if err != nil {
		return err
	}
	r.SteadyPerMinute = steadyPerMinute(s1, s2, b.opts.steady)
	if r.PeakRSS, _, err = k.memory(); err != nil {
		return err
	}
	r.PeakAnon, r.PeakFile = k.sampledRSS()
	if r.HeapAfterGC, err = k.heapAfterGC(); err != nil {
		return err
	}
	if n == b.opts.profileSize && r.Run == 1 {
		if err := k.saveHeapProfile(filepath.Join(b.opts.out, fmt.Sprintf("kgen-heap-%d.pprof", n))); err != nil {
			return err
		}
	}
	if err := awaitProfile(profiled); err != nil {
		return err
	}
	k.stop()
	return nil
}

func (b *bench) measureRaw(ctx context.Context, n int, r *result) error {
	ns := fmt.Sprintf("raw-%d-%d", n, r.Run)
	if err := b.namespace(ctx, ns); err != nil {
		return err
	}
	obs, err := b.observeConvergence(ctx, ns, n, false)
	if err != nil {
		return err
	}
	defer obs.stop()
	logf("N=%d raw: creating %d objects", n, 4*n)
	if err := b.step(r, "raw create", nil, 10*time.Second, func() (err error) {
		obs.begin()
		if err := b.load(ctx, n, func(ctx context.Context, i int) error {
			return b.createRaw(ctx, ns, i)
		}); err != nil {
			return err
		}
		r.RawConverge, err = obs.wait(b.opts.timeout)
		return err
	}); err != nil {
		return err
	}
	r.RawTimeline = obs.timeline()
	logf("N=%d raw: created in %s", n, r.RawConverge.Round(time.Millisecond))

	// The same 2N patches: each parent, and the Deployment kgen would patch.
	if err := b.step(r, "raw wave", nil, 5*time.Second, func() (err error) {
		r.RawWave, err = b.updateWave(ctx, ns, n, webappGVR, deployGVR)
		return err
	}); err != nil {
		return err
	}
	logf("N=%d raw: update wave in %s", n, r.RawWave.Round(time.Millisecond))
	return nil
}

// measureFloor makes kgen's writes without kgen, as its contract requires
// them: for each parent, its children created by server-side apply (kgen
// owns their fields with its apply from the first write) and one status
// apply of only kgen's part of the status; in the wave, the parent's patch,
// an apply of the Deployment and a status apply. No Event: by default kgen
// records none for creating or following a change.
func (b *bench) measureFloor(ctx context.Context, n int, r *result) error {
	ns := fmt.Sprintf("floor-%d-%d", n, r.Run)
	if err := b.namespace(ctx, ns); err != nil {
		return err
	}
	obs, err := b.observeConvergence(ctx, ns, n, true)
	if err != nil {
		return err
	}
	defer obs.stop()
	logf("N=%d floor: creating %d parents, applying %d children and %d statuses", n, n, 3*n, n)
	if err := b.step(r, "floor converge", nil, 10*time.Second, func() (err error) {
		obs.begin()
		if err := b.load(ctx, n, func(ctx context.Context, i int) error {
			p, err := b.create(ctx, webappGVR, ns, parent(ns, i, false))
			if err != nil {
				return err
			}
			if err := b.applyChildren(ctx, p, "", true); err != nil {
				return err
			}
			return b.applyStatus(ctx, p)
		}); err != nil {
			return err
		}
		r.FloorConverge, err = obs.wait(b.opts.timeout)
		return err
	}); err != nil {
		return err
	}
	logf("N=%d floor: converged in %s", n, r.FloorConverge.Round(time.Millisecond))

	floorWave := func(ctx context.Context, i int) error {
		patch := []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, newReplicas))
		p, err := b.dyn.Resource(webappGVR).Namespace(ns).Patch(ctx, parentName(i), types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			return err
		}
		if err := b.applyChildren(ctx, p, "Deployment", false); err != nil {
			return err
		}
		return b.applyStatus(ctx, p)
	}
	if err := b.step(r, "floor wave", nil, 5*time.Second, func() (err error) {
		r.FloorWave, err = b.wave(ctx, ns, n, floorWave)
		return err
	}); err != nil {
		return err
	}
	logf("N=%d floor: update wave in %s", n, r.FloorWave.Round(time.Millisecond))
	return nil
}

// applyChildren applies the children kgen renders for a parent (only those
// of kind, when set), as kgen writes them: a create is an apply that cannot
// take over an existing object (it carries a resourceVersion no object has),
// an update an apply.
func (b *bench) applyChildren(ctx context.Context, p *unstructured.Unstructured, kind string, create bool) error {
	rendered, err := reconcile.Render(b.rule, p, reconcile.Observed{}, b.scope)
	if err != nil {
		return err
	}
	for _, c := range rendered.Children {
		if kind != "" && c.Object.GetKind() != kind {
			continue
		}
		gvr := map[string]schema.GroupVersionResource{"ConfigMap": cmGVR, "Service": svcGVR, "Deployment": deployGVR}[c.Object.GetKind()]
		if create {
			c.Object.SetResourceVersion("18446744073709551615")
		}
		if _, err := b.dyn.Resource(gvr).Namespace(p.GetNamespace()).Apply(ctx, c.Object.GetName(), c.Object,
			metav1.ApplyOptions{FieldManager: reconcile.FieldManager, Force: true}); err != nil {
			return err
		}
	}
	return nil
}

// applyStatus writes the status kgen would write for a parent whose
// children it just wrote: only its own part (observedGeneration, its Ready
// condition, the rule's fields), with server-side apply, as kgen writes it
// to a parent whose conditions are keyed by type.
func (b *bench) applyStatus(ctx context.Context, p *unstructured.Unstructured) error {
	status := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": p.GetAPIVersion(), "kind": p.GetKind(),
		"metadata": map[string]any{"name": p.GetName(), "namespace": p.GetNamespace(), "uid": string(p.GetUID())},
		"status": map[string]any{
			"observedGeneration": p.GetGeneration(),
			"configName":         p.GetName() + "-config",
			"availableReplicas":  int64(0),
			"url":                fmt.Sprintf("http://%s.%s.svc:8080", p.GetName(), p.GetNamespace()),
			"conditions": []any{map[string]any{
				"type": "Ready", "status": "False", "reason": reconcile.ReasonNotReady, "observedGeneration": p.GetGeneration(),
				"message":            "child deployment: status.availableReplicas >= parent.spec.replicas is false",
				"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
			}},
		},
	}}
	_, err := b.dyn.Resource(webappGVR).Namespace(p.GetNamespace()).ApplyStatus(ctx, p.GetName(), status,
		metav1.ApplyOptions{FieldManager: reconcile.FieldManager, Force: true})
	return err
}

// createRaw creates parent i in ns, not selected by kgen's rule, and the
// children kgen would make for it.
func (b *bench) createRaw(ctx context.Context, ns string, i int) error {
	_, err := b.createRawParent(ctx, ns, i)
	return err
}

// createRawParent is createRaw, and returns the parent as created.
func (b *bench) createRawParent(ctx context.Context, ns string, i int) (*unstructured.Unstructured, error) {
	p, err := b.create(ctx, webappGVR, ns, parent(ns, i, false))
	if err != nil {
		return nil, err
	}
	rendered, err := reconcile.Render(b.rule, p, reconcile.Observed{}, b.scope)
	if err != nil {
		return nil, err
	}
	for _, c := range rendered.Children {
		gvr := map[string]schema.GroupVersionResource{"ConfigMap": cmGVR, "Service": svcGVR, "Deployment": deployGVR}[c.Object.GetKind()]
		if _, err := b.create(ctx, gvr, ns, c.Object); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// warmUp writes one parent and its children once and deletes them again.
// The API server's first write of a resource is slow (for a new CRD it
// sets up storage, about 2 s here); without this the first phase measured
// would pay for it and the others not.
func (b *bench) warmUp(ctx context.Context) error {
	const ns = "warm-up"
	if err := b.namespace(ctx, ns); err != nil {
		return err
	}
	if err := b.createRaw(ctx, ns, 0); err != nil {
		return err
	}
	return b.cleanup(ctx, ns)
}

// updateWave patches spec.replicas of the objects named after each parent in
// each of the resources, and returns the time until every Deployment shows
// the new value.
func (b *bench) updateWave(ctx context.Context, ns string, n int, resources ...schema.GroupVersionResource) (time.Duration, error) {
	return b.wave(ctx, ns, n, func(ctx context.Context, i int) error {
		for _, gvr := range resources {
			if err := b.patchReplicas(ctx, gvr, ns, parentName(i)); err != nil {
				return err
			}
		}
		return nil
	})
}

// wave runs fn for every parent on the loader goroutines and returns the
// time until every Deployment shows the new spec.replicas.
func (b *bench) wave(ctx context.Context, ns string, n int, fn func(context.Context, int) error) (time.Duration, error) {
	wave, err := observe(ctx, b.dyn, ns, n, map[schema.GroupVersionResource]func(*unstructured.Unstructured) bool{
		deployGVR: convergeGoals(newReplicas)[deployGVR],
	})
	if err != nil {
		return 0, err
	}
	defer wave.stop()
	wave.begin()
	if err := b.load(ctx, n, fn); err != nil {
		return 0, err
	}
	return wave.wait(b.opts.timeout)
}

// step runs fn, one timed step of a phase ("kgen converge"), and records
// the CPU time every process used in it (kgen's too if k is not nil); for
// the profiled N it also saves the API server's CPU profile over the first
// profile of it.
func (b *bench) step(r *result, name string, k *kgen, profile time.Duration, fn func() error) error {
	cpu := b.cpuMeter(k)
	profiled := b.profileAPIServer(r.N, r.Run, strings.ReplaceAll(name, " ", "-"), profile)
	if err := fn(); err != nil {
		return err
	}
	r.CPU[name] = cpu.used()
	return awaitProfile(profiled)
}

// awaitProfile waits for a background profile, if there is one.
func awaitProfile(profiled <-chan error) error {
	if profiled == nil {
		return nil
	}
	if err := <-profiled; err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	return nil
}

// cpuMeter starts measuring the control plane's, the bench's own and, if
// k is not nil, kgen's CPU time.
func (b *bench) cpuMeter(k *kgen) *cpuMeter {
	pids := b.cp.PIDs()
	pids["bench"] = os.Getpid()
	if k != nil {
		pids["kgen"] = k.cmd.Process.Pid
	}
	return newCPUMeter(pids)
}

func parentName(i int) string { return fmt.Sprintf("app-%05d", i) }

func parent(ns string, i int, selected bool) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1alpha1", "kind": "WebApp",
		"metadata": map[string]any{"name": parentName(i), "namespace": ns},
		"spec":     map[string]any{"image": parentImage, "port": int64(8080), "replicas": replicas},
	}}
	if selected {
		u.SetLabels(map[string]string{"tier": "web"})
	}
	return u
}

// load runs fn for 0..n-1 on the loader goroutines and returns the first error.
func (b *bench) load(ctx context.Context, n int, fn func(context.Context, int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range b.opts.loaders {
		wg.Go(func() {
			for i := range next {
				if err := fn(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		})
	}
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	return first
}

func (b *bench) create(ctx context.Context, gvr schema.GroupVersionResource, ns string, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	return b.dyn.Resource(gvr).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{})
}

func (b *bench) patchReplicas(ctx context.Context, gvr schema.GroupVersionResource, ns, name string) error {
	patch := []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, newReplicas))
	_, err := b.dyn.Resource(gvr).Namespace(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

func (b *bench) namespace(ctx context.Context, ns string) error {
	_, err := b.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	return err
}

// cleanup deletes the objects of a namespace. Nothing runs the namespace
// controller here, so the objects are deleted by collection.
func (b *bench) cleanup(ctx context.Context, ns string) error {
	// And the events about them, if any.
	for _, gvr := range []schema.GroupVersionResource{webappGVR, deployGVR, svcGVR, cmGVR, eventGVR} {
		if gvr == svcGVR {
			// Services have no deletecollection: one by one.
			list, err := b.dyn.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			if err := b.load(ctx, len(list.Items), func(ctx context.Context, i int) error {
				return b.dyn.Resource(gvr).Namespace(ns).Delete(ctx, list.Items[i].GetName(), metav1.DeleteOptions{})
			}); err != nil {
				return err
			}
			continue
		}
		if err := b.dyn.Resource(gvr).Namespace(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			return fmt.Errorf("delete %s in %s: %w", gvr.Resource, ns, err)
		}
	}
	return nil
}
