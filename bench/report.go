package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

type report struct {
	Machine map[string]string `json:"machine"`
	Results []*result         `json:"results"`
	// Pods is the -pods phase's result, if it ran.
	Pods *podsResult `json:"pods,omitempty"`
}

func newReport(results []*result, pods *podsResult, machine map[string]string) *report {
	for _, r := range results {
		r.KgenTimeline, r.RawTimeline = thin(r.KgenTimeline), thin(r.RawTimeline)
	}
	return &report{Machine: machine, Results: results, Pods: pods}
}

// thin keeps about 500 samples of a timeline, and its last, which is plenty
// for a plot and keeps results.json small.
func thin(s []sample) []sample {
	const keep = 500
	if len(s) <= keep {
		return s
	}
	step := len(s) / keep
	out := make([]sample, 0, keep+2)
	for i := 0; i < len(s); i += step {
		out = append(out, s[i])
	}
	return append(out, s[len(s)-1])
}

func isChild(key string) bool {
	_, res, _ := strings.Cut(key, " ")
	return res == "configmaps" || res == "services" || res == "deployments"
}

func isWrite(key string) bool {
	verb, _, _ := strings.Cut(key, " ")
	switch verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

func seconds(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

func ratio(a, b time.Duration) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", a.Seconds()/b.Seconds())
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// writesPerChild is kgen's child writes during convergence per child.
func (r *result) writesPerChild() float64 {
	c := counts(r.ConvergeRequests)
	return c.sum(func(k string) bool { return isChild(k) && isWrite(k) }) / float64(3*r.N)
}

// statusWritesPerParent is kgen's status writes during convergence per parent.
func (r *result) statusWritesPerParent() float64 {
	return counts(r.ConvergeRequests).sum(func(k string) bool { return strings.HasSuffix(k, " webapps/status") }) / float64(r.N)
}

func (r *result) summary() string {
	return fmt.Sprintf("N=%d: converge kgen %s raw %s (%s×) floor %s; update wave kgen %s raw %s (%s×) floor %s; %.2f writes/child, %.2f status writes/parent; peak RSS %s; heap after GC %s",
		r.N, seconds(r.KgenConverge), seconds(r.RawConverge), ratio(r.KgenConverge, r.RawConverge), seconds(r.FloorConverge),
		seconds(r.KgenWave), seconds(r.RawWave), ratio(r.KgenWave, r.RawWave), seconds(r.FloorWave),
		r.writesPerChild(), r.statusWritesPerParent(), mib(r.PeakRSS), mib(r.HeapAfterGC))
}

// label names a result's row: its N, and its run when N ran more than once.
func (rep *report) label(r *result) string {
	runs := 0
	for _, o := range rep.Results {
		if o.N == r.N {
			runs++
		}
	}
	if runs > 1 {
		return fmt.Sprintf("%d (run %d)", r.N, r.Run)
	}
	return fmt.Sprint(r.N)
}

// spread is the median and range of one figure over the runs of one N.
func spread(values []float64, format string) string {
	slices.Sort(values)
	mid := len(values) / 2
	median := values[mid]
	if len(values)%2 == 0 {
		median = (values[mid-1] + values[mid]) / 2
	}
	return fmt.Sprintf(format+" ("+format+"–"+format+")", median, values[0], values[len(values)-1])
}

// spreads writes, for every N that ran more than once, the median and
// range of its ratios and peak RSS.
func (rep *report) spreads(b *strings.Builder) {
	byN := map[int][]*result{}
	var sizes []int
	for _, r := range rep.Results {
		if _, ok := byN[r.N]; !ok {
			sizes = append(sizes, r.N)
		}
		byN[r.N] = append(byN[r.N], r)
	}
	header := false
	for _, n := range sizes {
		runs := byN[n]
		if len(runs) < 2 {
			continue
		}
		if !header {
			b.WriteString("\n## Over the runs of each N: median (lowest–highest)\n\n")
			b.WriteString("| N | runs | converge kgen/raw | converge kgen/floor | wave kgen/raw | wave kgen/floor | peak RSS, MiB |\n|---:|---:|---:|---:|---:|---:|---:|\n")
			header = true
		}
		figure := func(f func(*result) float64) []float64 {
			var out []float64
			for _, r := range runs {
				out = append(out, f(r))
			}
			return out
		}
		div := func(a, b time.Duration) float64 {
			if b == 0 {
				return 0
			}
			return a.Seconds() / b.Seconds()
		}
		fmt.Fprintf(b, "| %d | %d | %s | %s | %s | %s | %s |\n", n, len(runs),
			spread(figure(func(r *result) float64 { return div(r.KgenConverge, r.RawConverge) }), "%.2f"),
			spread(figure(func(r *result) float64 { return div(r.KgenConverge, r.FloorConverge) }), "%.2f"),
			spread(figure(func(r *result) float64 { return div(r.KgenWave, r.RawWave) }), "%.2f"),
			spread(figure(func(r *result) float64 { return div(r.KgenWave, r.FloorWave) }), "%.2f"),
			spread(figure(func(r *result) float64 { return float64(r.PeakRSS) / (1 << 20) }), "%.0f"))
	}
}

func (rep *report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# kgen benchmark results\n\n")
	fmt.Fprintf(&b, "Reproduce with `make bench` (see bench/doc.go for what is measured).\n\n")
	for _, k := range sortedKeys(rep.Machine) {
		fmt.Fprintf(&b, "- %s: %s\n", k, rep.Machine[k])
	}
	if len(rep.Results) > 0 {
		rep.phases(&b)
	}
	rep.pods(&b)
	if len(rep.Results) > 0 {
		rep.resources(&b)
	}
	return b.String()
}

// phases writes the times and API requests of the phases of every N.
func (rep *report) phases(b *strings.Builder) {
	b.WriteString("\n## Convergence and update wave (kgen at its default flags vs. the same writes made directly)\n\n")
	b.WriteString("raw: a loader (16 goroutines) creates the parents and children itself, and patches parents and Deployments in the wave. ")
	b.WriteString("floor: the same loader makes exactly the writes kgen's contract requires, without kgen: the parent, its children by server-side apply and a status apply of kgen's part of the status; in the wave the parent's patch, an apply of the Deployment and a status apply. ")
	b.WriteString("No controller with kgen's contract can beat the floor on this machine; the issue's targets are against raw.\n\n")
	b.WriteString("| N | kgen converge | raw create | kgen/raw | floor | kgen/floor | kgen update wave | raw patches | kgen/raw | floor | kgen/floor |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rep.Results {
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", rep.label(r),
			seconds(r.KgenConverge), seconds(r.RawConverge), ratio(r.KgenConverge, r.RawConverge),
			seconds(r.FloorConverge), ratio(r.KgenConverge, r.FloorConverge),
			seconds(r.KgenWave), seconds(r.RawWave), ratio(r.KgenWave, r.RawWave),
			seconds(r.FloorWave), ratio(r.KgenWave, r.FloorWave))
	}
	rep.spreads(b)
	b.WriteString("\n## API requests\n\n")
	b.WriteString("| N | writes per child | status writes per parent | requests per parent during convergence, by verb | during the wave | reconciles per parent, convergence / wave | steady state per minute, by verb |\n|---:|---:|---:|---|---|---|---|\n")
	for _, r := range rep.Results {
		fmt.Fprintf(b, "| %s | %.2f | %.2f | %s | %s | %.2f / %.2f | %s |\n", rep.label(r), r.writesPerChild(), r.statusWritesPerParent(),
			perParent(r.ConvergeRequests, r.N), perParent(r.WaveRequests, r.N),
			r.ConvergeReconciles/float64(r.N), r.WaveReconciles/float64(r.N), verbsText(r.SteadyPerMinute))
	}
}

// resources writes the CPU time and memory of every N, and its plot.
func (rep *report) resources(b *strings.Builder) {
	b.WriteString("\n## CPU seconds used, by process\n\n")
	b.WriteString("The API server, etcd, kgen and the bench (loader and observer) share the machine's cores.\n\n")
	b.WriteString("| N | phase | kube-apiserver | etcd | kgen | bench |\n|---:|---|---:|---:|---:|---:|\n")
	for _, r := range rep.Results {
		for _, phase := range []string{"kgen converge", "raw create", "floor converge", "kgen wave", "raw wave", "floor wave"} {
			c, ok := r.CPU[phase]
			if !ok {
				continue
			}
			kg := "-"
			if v, ok := c["kgen"]; ok {
				kg = fmt.Sprintf("%.1f", v)
			}
			fmt.Fprintf(b, "| %s | %s | %.1f | %.1f | %s | %.1f |\n", rep.label(r), phase, c["kube-apiserver"], c["etcd"], kg, c["bench"])
		}
	}
	b.WriteString("\n## Memory of kgen\n\nPeak RSS is the kernel's (VmHWM); its anonymous part (the Go heap, stacks and runtime) and its file-backed part (the pages of kgenctl's binary it touched) are the highest of samples every 100 ms, so they need not add up to it.\n\n| N | objects cached | peak RSS | anonymous | file-backed | peak RSS per parent | Go heap in use after GC |\n|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rep.Results {
		fmt.Fprintf(b, "| %s | %d | %s | %s | %s | %.1f KiB | %s |\n", rep.label(r), 4*r.N, mib(r.PeakRSS), mibOrDash(r.PeakAnon), mibOrDash(r.PeakFile),
			float64(r.PeakRSS)/float64(r.N)/1024, mib(r.HeapAfterGC))
	}
	b.WriteString("\n## Children ready over time\n\n")
	for _, r := range rep.Results {
		if r.Run <= 1 {
			fmt.Fprintf(b, "![N=%d](convergence-%d.png)\n", r.N, r.N)
		}
	}
}

func (rep *report) write(dir string) error {
	for _, r := range rep.Results {
		if r.Run > 1 {
			continue // the first run's plot stands for the others
		}
		title := fmt.Sprintf("N=%d: children with the right spec over time", r.N)
		if err := plot(filepath.Join(dir, fmt.Sprintf("convergence-%d.png", r.N)), title, 3*r.N,
			series{"kgen", r.KgenTimeline}, series{"raw client", r.RawTimeline}); err != nil {
			return err
		}
	}
	if err := writeJSON(filepath.Join(dir, "results.json"), newReport(rep.Results, rep.Pods, rep.Machine)); err != nil {
		return err
	}
	md := rep.markdown()
	fmt.Println(md)
	return os.WriteFile(filepath.Join(dir, "README.md"), []byte(md), 0o644)
}

// pods writes the -pods phase's section, if it ran.
func (rep *report) pods(b *strings.Builder) {
	p := rep.Pods
	if p == nil {
		return
	}
	fmt.Fprintf(b, "\n## Steady state with running pods\n\n")
	fmt.Fprintf(b, "kgen at its defaults, with the Deployment and ReplicaSet controllers, kube-scheduler and kwok running the Deployments' pods on a fake Node: "+
		"%d parents created with %d pod each, then scaled to %d. The steady window (%s) starts once kgen has made no write for %s. "+
		"Target: no write at all, while the Deployments are available and nothing in a parent or the rule changes.\n\n",
		p.N, replicas, newReplicas, seconds(p.Window), seconds(podsQuiet))
	b.WriteString("| N | pods running | every parent Ready | after the wave | kgen's requests per parent until then, by verb | steady with pods, per minute by verb | writes per minute |\n|---:|---:|---:|---:|---|---|---:|\n")
	per := counts(p.Requests).byVerb(nil)
	var parts []string
	for _, v := range sortedKeys(per) {
		parts = append(parts, fmt.Sprintf("%s %.2f", v, per[v]/float64(p.N)))
	}
	fmt.Fprintf(b, "| %d | %d | %s | %s | %s | %s | %s |\n", p.N, p.Pods, seconds(p.Ready), seconds(p.Wave),
		strings.Join(parts, ", "), verbsText(p.SteadyPerMinute), perMinute(counts(p.SteadyPerMinute).sum(isWrite)))
	fmt.Fprintf(b, "\nChanges the bench saw in the parents' namespace (creates, updates, deletes), until every parent was Ready after the wave: %s; in the steady window: %s.\n",
		changesText(p.RolloutChanges), changesText(p.WindowChanges))
	if writes := counts(p.SteadyPerMinute).sum(isWrite); writes > 0 {
		b.WriteString("\nWrites in the steady window, per minute: ")
		var w []string
		for _, k := range sortedKeys(p.SteadyPerMinute) {
			if isWrite(k) {
				w = append(w, fmt.Sprintf("%s %.1f", k, p.SteadyPerMinute[k]))
			}
		}
		b.WriteString(strings.Join(w, ", ") + ".\n")
	}
}

// perParent is requests (by "verb resource") per parent, by verb.
func perParent(requests map[string]float64, n int) string {
	if len(requests) == 0 {
		return "-"
	}
	per := counts(requests).byVerb(nil)
	var parts []string
	for _, v := range sortedKeys(per) {
		parts = append(parts, fmt.Sprintf("%s %.2f", v, per[v]/float64(n)))
	}
	return strings.Join(parts, ", ")
}

// mibOrDash is mib, or "-" for a figure a result from before it was
// measured does not have.
func mibOrDash(n int64) string {
	if n == 0 {
		return "-"
	}
	return mib(n)
}
