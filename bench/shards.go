package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// shardResult is what one N measured with a number of replicas run with
// 'kgenctl run --shards' (-shards).
type shardResult struct {
	N int `json:"n"`
	// Replicas is the number of shards; 0 is one kgen without --shards.
	Replicas int `json:"replicas"`
	Run      int `json:"run"`

	Converge time.Duration `json:"convergeNs"`
	Wave     time.Duration `json:"waveNs"`
	// ConvergeRequests and SteadyPerMinute are the replicas' requests,
	// summed, by "verb resource".
	ConvergeRequests map[string]float64 `json:"convergeRequests"`
	SteadyPerMinute  map[string]float64 `json:"steadyPerMinute"`
	// CPU is the CPU seconds each process used in each phase ("converge",
	// "wave"); the replicas are named after their shard.
	CPU    map[string]map[string]float64 `json:"cpuSeconds"`
	Shards []shardReplica                `json:"shards"`
}

// shardReplica is one replica's share and cost.
type shardReplica struct {
	ID      string `json:"id"`
	Parents int    `json:"parents"`
	PeakRSS int64  `json:"peakRSSBytes"`
	// HeapAfterGC is the live Go heap after a forced GC at the end: mostly
	// the replica's caches, without the runtime's and the GC's slack.
	HeapAfterGC int64 `json:"heapAfterGCBytes,omitempty"`
}

// measureShards runs the WebApp workload's convergence, update wave and
// steady state against replicas kgens run with --shards (one without it
// for 0), on a control plane of its own.
func (b *bench) measureShards(ctx context.Context, n, replicas, run int) (*shardResult, error) {
	r := &shardResult{N: n, Replicas: replicas, Run: run, CPU: map[string]map[string]float64{}}
	if err := b.freshControlPlane(ctx, false); err != nil {
		return nil, err
	}
	ns := fmt.Sprintf("shards-%d-%d-%d", n, replicas, run)
	if err := b.namespace(ctx, ns); err != nil {
		return nil, err
	}
	var kgens []*kgen
	var ids []string
	defer func() {
		for _, k := range kgens {
			k.stop()
		}
	}()
	for i := range max(replicas, 1) {
		id, extra := "kgen", []string(nil)
		if replicas > 0 {
			id = fmt.Sprintf("shard-%d", i)
			extra = []string{"--shards", "--shard-id", id, "--leader-elect-namespace", ns}
		}
		k, err := b.startKgenNamed(ctx, fmt.Sprintf("%s-%d-%d-%d", id, n, replicas, run), extra...)
		if err != nil {
			return nil, err
		}
		kgens, ids = append(kgens, k), append(ids, id)
	}
	if replicas > 0 {
		// Every replica sees every shard before the parents come.
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			for _, k := range kgens {
				m, err := k.scrape()
				if err != nil || int(m.value("kgen_shard_members", nil)) != replicas {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			return nil, fmt.Errorf("the shards do not see each other: %w", err)
		}
	}
	obs, err := b.observeConvergence(ctx, ns, n, true)
	if err != nil {
		return nil, err
	}
	defer obs.stop()
	before, err := sumRequests(kgens)
	if err != nil {
		return nil, err
	}
	label := fmt.Sprintf("N=%d, %d shards", n, replicas)
	if replicas == 0 {
		label = fmt.Sprintf("N=%d, one kgen without --shards", n)
	}
	logf("%s: creating %d parents", label, n)
	if err := b.shardStep(r, "converge", kgens, ids, func() (err error) {
		obs.begin()
		if err := b.load(ctx, n, func(ctx context.Context, i int) error {
			_, err := b.create(ctx, webappGVR, ns, parent(ns, i, true))
			return err
		}); err != nil {
			return err
		}
		r.Converge, err = obs.wait(b.opts.timeout)
		return err
	}); err != nil {
		return nil, err
	}
	after, err := sumRequests(kgens)
	if err != nil {
		return nil, err
	}
	r.ConvergeRequests = after.minus(before)
	logf("%s: converged in %s", label, r.Converge.Round(time.Millisecond))
	if err := b.shardStep(r, "wave", kgens, ids, func() (err error) {
		r.Wave, err = b.updateWave(ctx, ns, n, webappGVR)
		return err
	}); err != nil {
		return nil, err
	}
	logf("%s: update wave in %s", label, r.Wave.Round(time.Millisecond))

	// Steady state, as in the kgen phase.
	time.Sleep(5 * time.Second)
	s1, err := sumRequests(kgens)
	if err != nil {
		return nil, err
	}
	time.Sleep(b.opts.steady)
	s2, err := sumRequests(kgens)
	if err != nil {
		return nil, err
	}
	r.SteadyPerMinute = s2.minus(s1).scale(time.Minute.Seconds() / b.opts.steady.Seconds())

	list, err := b.dyn.Resource(webappGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	share := map[string]int{}
	for _, p := range list.Items {
		share[p.GetLabels()["kgen.dev/shard"]]++
	}
	for i, k := range kgens {
		peak, _, err := k.memory()
		if err != nil {
			return nil, err
		}
		heap, err := k.heapAfterGC()
		if err != nil {
			return nil, err
		}
		parents := share[ids[i]]
		if replicas == 0 {
			parents = len(list.Items)
		}
		r.Shards = append(r.Shards, shardReplica{ID: ids[i], Parents: parents, PeakRSS: peak, HeapAfterGC: heap})
	}
	return r, nil
}

// shardStep runs fn and records the CPU seconds of the control plane, the
// bench and every replica in it.
func (b *bench) shardStep(r *shardResult, name string, kgens []*kgen, ids []string, fn func() error) error {
	pids := b.cp.PIDs()
	pids["bench"] = os.Getpid()
	for i, k := range kgens {
		pids[ids[i]] = k.cmd.Process.Pid
	}
	cpu := newCPUMeter(pids)
	if err := fn(); err != nil {
		return err
	}
	r.CPU[name] = cpu.used()
	return nil
}

// sumRequests adds up the replicas' kgen_api_requests_total.
func sumRequests(kgens []*kgen) (counts, error) {
	out := counts{}
	for _, k := range kgens {
		m, err := k.scrape()
		if err != nil {
			return nil, err
		}
		for key, v := range m.requests() {
			out[key] += v
		}
	}
	return out, nil
}

// shardReport is the -shards results.
type shardReport struct {
	Machine map[string]string `json:"machine"`
	Results []*shardResult    `json:"results"`
}

func (rep *shardReport) markdown() string {
	var b strings.Builder
	b.WriteString("# kgen with --shards: one to three replicas\n\n")
	var ns, replicas []string
	for _, r := range rep.Results {
		if n := strconv.Itoa(r.N); !slices.Contains(ns, n) {
			ns = append(ns, n)
		}
		if k := strconv.Itoa(r.Replicas); !slices.Contains(replicas, k) {
			replicas = append(replicas, k)
		}
	}
	fmt.Fprintf(&b, "Reproduce with `go run ./bench -shards %s -sizes %s` (see bench/doc.go).\n\n", strings.Join(replicas, ","), strings.Join(ns, ","))
	for _, k := range sortedKeys(rep.Machine) {
		fmt.Fprintf(&b, "- %s: %s\n", k, rep.Machine[k])
	}
	b.WriteString("\nThe WebApp workload of the main results (a parent and its ConfigMap, Service and Deployment), with the replicas, the API server, etcd and the bench on one machine. ")
	b.WriteString("Replicas 0 is one kgen without --shards. Every replica runs at kgen's default flags (8 workers, 1000 QPS), so more replicas only help once the API server is not the limit: ")
	b.WriteString("on this machine it is, and sharding here shows its cost (the claim of each new parent, the relabelling, the Lease renewals), and how memory and CPU spread over the replicas, not a speed-up. ")
	b.WriteString("In steady state each shard renews its Lease: an update every seventh of the 15 s lease duration, about 28 a minute (a get without a resource is discovery, as without --shards).\n\n")
	b.WriteString("| N | replicas | converge | update wave | requests per parent (converge) | steady requests per minute | kube-apiserver CPU s | etcd CPU s | kgen CPU s, all replicas |\n|---:|---:|---:|---:|---|---|---:|---:|---:|\n")
	for _, r := range rep.Results {
		per := counts(r.ConvergeRequests).byVerb(nil)
		var parts []string
		for _, v := range sortedKeys(per) {
			parts = append(parts, fmt.Sprintf("%s %.2f", v, per[v]/float64(r.N)))
		}
		steady := counts(r.SteadyPerMinute).byVerb(nil)
		var sparts []string
		for _, v := range sortedKeys(steady) {
			sparts = append(sparts, fmt.Sprintf("%s %.0f", v, steady[v]))
		}
		if len(sparts) == 0 {
			sparts = []string{"none"}
		}
		var api, etcd, kgen float64
		for _, phase := range []string{"converge", "wave"} {
			api += r.CPU[phase]["kube-apiserver"]
			etcd += r.CPU[phase]["etcd"]
			for _, s := range r.Shards {
				kgen += r.CPU[phase][s.ID]
			}
		}
		fmt.Fprintf(&b, "| %d | %d | %s | %s | %s | %s | %.1f | %.1f | %.1f |\n", r.N, r.Replicas, seconds(r.Converge), seconds(r.Wave),
			strings.Join(parts, ", "), strings.Join(sparts, ", "), api, etcd, kgen)
	}
	b.WriteString("\n## Each replica\n\nCPU seconds over the convergence and the update wave; peak RSS over the whole run; the live Go heap after a forced GC at the end, ")
	b.WriteString("which is mostly the replica's caches (the peak RSS also holds the process's fixed cost and the GC's slack).\n\n")
	b.WriteString("| N | replicas | replica | parents | peak RSS | heap after GC | CPU s converge | CPU s wave |\n|---:|---:|---|---:|---:|---:|---:|---:|\n")
	for _, r := range rep.Results {
		for _, s := range r.Shards {
			fmt.Fprintf(&b, "| %d | %d | %s | %d | %s | %s | %.1f | %.1f |\n", r.N, r.Replicas, s.ID, s.Parents, mib(s.PeakRSS), fmt.Sprintf("%.1f MiB", float64(s.HeapAfterGC)/(1<<20)),
				r.CPU["converge"][s.ID], r.CPU["wave"][s.ID])
		}
	}
	return b.String()
}

func (rep *shardReport) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(dir, "results.json"), rep); err != nil {
		return err
	}
	md := rep.markdown()
	fmt.Println(md)
	return os.WriteFile(filepath.Join(dir, "README.md"), []byte(md), 0o644)
}

// runShards measures every N with each number of replicas.
func (b *bench) runShards(ctx context.Context, replicas []int) (*shardReport, error) {
	rep := &shardReport{Machine: b.machine(ctx)}
	for _, n := range b.opts.sizes {
		for run := 1; run <= max(b.opts.repeat, 1); run++ {
			for _, k := range replicas {
				r, err := b.measureShards(ctx, n, k, run)
				if err != nil {
					return nil, fmt.Errorf("N=%d, %d shards, run %d: %w", n, k, run, err)
				}
				rep.Results = append(rep.Results, r)
			}
		}
	}
	slices.SortStableFunc(rep.Results, func(a, b *shardResult) int { return a.N - b.N })
	return rep, nil
}
