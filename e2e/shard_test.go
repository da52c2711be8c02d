//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"kgen.dev/kgen/pkg/shard"
)

const shardeeRules = `apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata:
  name: shardee
spec:
  parent:
    apiVersion: shard.example.com/v1
    kind: Shardee
    namespaces: [NAMESPACE]
  children:
  - id: cm
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: ${parent.metadata.name}-cm
      data:
        value: ${parent.spec.value}
`

// Sharding (contract §9): three replicas run with --shards as three users.
// 300 parents are spread over them by the ring, and each child is written
// by its parent's replica only; the Rule's status, written by one replica,
// counts every shard's parents. A replica killed with SIGKILL has its
// parents reconciled by the others, after a parent update, within two
// lease durations. A fourth replica that joins gets its share of the
// parents, handed over without a child deleted or recreated, and each
// child is written by one replica at a time. One stopped with SIGTERM hands
// its parents over at once, by releasing its Lease.
func TestShards(t *testing.T) {
	const parents, leaseDuration = 300, 8 * time.Second
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	ns := newNamespace(t)
	gvr := newCRD(t, "shard.example.com", "Shardee", "shardees")
	applyRule(t, strings.Replace(shardeeRules, "NAMESPACE", ns, 1))
	// kgen's own namespace (the shards' Leases, its record), apart from
	// the parents, as an install has it.
	home := newNamespace(t)
	args := []string{"--shards", "--leader-elect-namespace", home, "--leader-elect-lease-duration", leaseDuration.String()}
	user := func(id string) string { return "kgen-shard-" + id }
	procs := map[string]*kgenProcess{}
	startShard := func(id string) {
		procs[id] = startKgen(t, user(id), append(slices.Clone(args), "--shard-id", id)...)
	}
	for _, id := range []string{"s1", "s2", "s3"} {
		startShard(id)
	}
	waitMembers(t, procs, 3)

	start := time.Now()
	err := forEachParent(t.Context(), parents, func(ctx context.Context, name string) error {
		_, err := env.dynamic.Resource(gvr).Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "shard.example.com/v1", "kind": "Shardee",
			"metadata": map[string]any{"name": name, "namespace": ns}, "spec": map[string]any{"value": "v1"}}}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	live := []string{"s1", "s2", "s3"}
	assigned := waitSharded(t, gvr, ns, parents, live, "v1", 90*time.Second)
	t.Logf("%d parents converged on 3 shards in %s: %v", parents, time.Since(start).Round(time.Millisecond), countShards(assigned))
	for _, id := range live {
		if n := countShards(assigned)[id]; n < parents/3/2 {
			t.Errorf("shard %s got %d of %d parents", id, n, parents)
		}
	}
	// Each child was written by the replica of its parent, and no other.
	for cm, users := range writersOf(t, ns, "configmaps", start, user) {
		if want := user(assigned[strings.TrimSuffix(cm, "-cm")]); len(users) != 1 || users[0] != want {
			t.Errorf("ConfigMap %s was written by %v, want only %s", cm, users, want)
		}
	}
	uids := childUIDs(t, ns)
	if len(uids) != parents {
		t.Fatalf("%d children, want %d", len(uids), parents)
	}
	// The Rule's status counts the parents of every shard, and one shard
	// writes it.
	waitRuleStatus(t, "shardee", func(o *unstructured.Unstructured) error {
		p, _, _ := unstructured.NestedInt64(o.Object, "status", "parents")
		r, _, _ := unstructured.NestedInt64(o.Object, "status", "readyParents")
		if p != parents || r != parents {
			return fmt.Errorf("the Rule counts %d parents, %d ready; want %d", p, r, parents)
		}
		return nil
	})
	statusWriter := shard.NewRing(live, 0).Owner(shard.Key(ruleGVR.GroupResource(), "", "shardee"))
	for _, id := range live {
		for _, e := range auditOf(t, user(id), start) {
			if e.ObjectRef.Resource == "rules" && e.ObjectRef.Name == "shardee" && isWrite(e.Verb) && id != statusWriter {
				t.Errorf("%s wrote the Rule's %s; only %s should", user(id), e.ObjectRef.Subresource, user(statusWriter))
			}
		}
	}

	// Each child was created once, by its parent's shard (an apply answered
	// 201), and from now on none may be deleted or created again, by
	// anyone.
	settled := time.Now()
	created := map[string]int{}
	for _, e := range childLifecycle(t, ns, start) {
		if e.Verb != "patch" || e.User.Username != user(assigned[strings.TrimSuffix(e.ObjectRef.Name, "-cm")]) {
			t.Errorf("%s: %s %s (%d) of ConfigMap %s/%s", e.User.Username, e.Verb, e.RequestURI, e.ResponseStatus.Code, ns, e.ObjectRef.Name)
		}
		created[e.ObjectRef.Name]++
	}
	if len(created) != parents {
		t.Errorf("%d ConfigMaps were created, want %d", len(created), parents)
	}
	for cm, n := range created {
		if n != 1 {
			t.Errorf("ConfigMap %s was created %d times", cm, n)
		}
	}

	// SIGKILL s1, and change every parent it had.
	procs["s1"].kill()
	killed := time.Now()
	var orphans []string
	for name, id := range assigned {
		if id == "s1" {
			orphans = append(orphans, name)
		}
	}
	sort.Strings(orphans)
	if err := patchValues(t.Context(), gvr, ns, orphans, "v2"); err != nil {
		t.Fatal(err)
	}
	live = []string{"s2", "s3"}
	eventually(t, 60*time.Second, func() (bool, error) {
		return convergedOn(t, gvr, ns, orphans, live, "v2")
	}, "the parents of the killed shard to be reconciled by the others")
	took := time.Since(killed)
	t.Logf("the %d parents of the killed s1 converged on %v %s after the kill", len(orphans), live, took.Round(time.Millisecond))
	// Two lease durations, and a second for this machine's load.
	if limit := 2*leaseDuration + time.Second; took > limit {
		t.Errorf("the parents of the killed shard took %s, more than %s", took.Round(time.Millisecond), limit)
	}
	delete(procs, "s1")
	checkNoRecreation(t, ns, settled, uids)

	// s4 joins: it gets its share, handed over by s2 and s3.
	joined := time.Now()
	startShard("s4")
	live = []string{"s2", "s3", "s4"}
	assigned = waitSharded(t, gvr, ns, parents, live, "", 60*time.Second)
	t.Logf("parents after s4 joined, in %s: %v", time.Since(joined).Round(time.Millisecond), countShards(assigned))
	if countShards(assigned)["s4"] == 0 {
		t.Fatal("no parent moved to s4")
	}
	checkNoRecreation(t, ns, settled, uids)
	// One replica at a time: once a parent's new shard wrote it or its
	// child, its old shard never did again. A child's takeover found it:
	// no write of a child was refused.
	for _, resource := range []string{"configmaps", gvr.Resource} {
		for name, users := range writersOf(t, ns, resource, killed, user) {
			if len(users) > 2 {
				t.Errorf("%s %s was written by %v since the kill", resource, name, users)
			}
		}
	}
	for id := range procs {
		for _, e := range auditOf(t, user(id), killed) {
			if e.ObjectRef.Resource == "configmaps" && e.ObjectRef.Namespace == ns && e.ResponseStatus.Code >= 300 {
				t.Errorf("%s's %s of ConfigMap %s failed: %d (%s %s)", user(id), e.Verb, e.ObjectRef.Name, e.ResponseStatus.Code, e.StageTimestamp.Format("15:04:05.000000"), e.RequestURI)
			}
		}
	}

	// Every shard reconciles its parents now, and only its own.
	updated := time.Now()
	names := make([]string, 0, parents)
	for name := range assigned {
		names = append(names, name)
	}
	sort.Strings(names)
	if err := patchValues(t.Context(), gvr, ns, names, "v3"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, func() (bool, error) {
		return convergedOn(t, gvr, ns, names, live, "v3")
	}, "every parent to be reconciled after the update")
	for cm, users := range writersOf(t, ns, "configmaps", updated, user) {
		if want := user(assigned[strings.TrimSuffix(cm, "-cm")]); len(users) != 1 || users[0] != want {
			t.Errorf("after the update, ConfigMap %s was written by %v, want only %s", cm, users, want)
		}
	}
	checkNoRecreation(t, ns, settled, uids)

	// s4 stops cleanly: it releases its Lease once it stopped writing, and
	// the others take its parents at once, without waiting for an expiry.
	var leaving []string
	for name, id := range assigned {
		if id == "s4" {
			leaving = append(leaving, name)
		}
	}
	sort.Strings(leaving)
	if len(leaving) == 0 {
		t.Fatal("s4 has no parents to hand over")
	}
	_ = procs["s4"].cmd.Process.Signal(syscall.SIGTERM)
	stopped := time.Now()
	<-procs["s4"].done
	delete(procs, "s4")
	if err := patchValues(t.Context(), gvr, ns, leaving, "v4"); err != nil {
		t.Fatal(err)
	}
	live = []string{"s2", "s3"}
	eventually(t, 60*time.Second, func() (bool, error) {
		return convergedOn(t, gvr, ns, leaving, live, "v4")
	}, "the parents of the stopped shard to be reconciled by the others")
	took = time.Since(stopped)
	t.Logf("the %d parents of s4, stopped with SIGTERM, converged on %v %s after the signal", len(leaving), live, took.Round(time.Millisecond))
	// Without waiting for the Lease to expire: well within one duration of
	// it, and this machine's load.
	if limit := leaseDuration + 2*time.Second; took > limit {
		t.Errorf("the parents of the stopped shard took %s, more than %s", took.Round(time.Millisecond), limit)
	}
	checkNoRecreation(t, ns, settled, uids)

	// A parent restored from a backup still carries the label of s1, which
	// is gone: one of the others claims it at once and makes its child,
	// as for the parents of a shard that dies (before, it waited for the
	// sweep, every ten lease durations).
	restored := time.Now()
	create(t, gvr, map[string]any{"apiVersion": "shard.example.com/v1", "kind": "Shardee",
		"metadata": map[string]any{"name": "restored", "namespace": ns, "labels": map[string]any{shard.Label: "s1"}},
		"spec":     map[string]any{"value": "v5"}})
	eventually(t, 60*time.Second, func() (bool, error) {
		return convergedOn(t, gvr, ns, []string{"restored"}, live, "v5")
	}, "the restored parent to be claimed and reconciled")
	took = time.Since(restored)
	t.Logf("the parent restored with the label of the gone s1 converged on %v %s after its creation", live, took.Round(time.Millisecond))
	if limit := 2*leaseDuration + time.Second; took > limit {
		t.Errorf("the restored parent took %s, more than %s", took.Round(time.Millisecond), limit)
	}
}

// checkNoRecreation checks that since a time no ConfigMap in ns was
// deleted or created, by anyone, and that the children are those of uids.
func checkNoRecreation(t *testing.T, ns string, since time.Time, uids map[string]types.UID) {
	t.Helper()
	for _, e := range childLifecycle(t, ns, since) {
		t.Errorf("%s: %s %s (%d) of ConfigMap %s/%s at %s", e.User.Username, e.Verb, e.RequestURI, e.ResponseStatus.Code,
			ns, e.ObjectRef.Name, e.StageTimestamp.Format("15:04:05.000"))
	}
	if now := childUIDs(t, ns); !equalUIDs(uids, now) {
		t.Errorf("children were recreated: %d before, %d now, %d differ", len(uids), len(now), diffUIDs(uids, now))
	}
}

// childLifecycle returns the requests, by anyone, since a time, that
// deleted or created a ConfigMap in ns: a DELETE, a POST, or an apply
// (PATCH) answered 201 Created, as kgen creates children.
func childLifecycle(t *testing.T, ns string, since time.Time) []auditEvent {
	t.Helper()
	return readAudit(t, func(e auditEvent) bool {
		if e.Stage != "ResponseComplete" || e.StageTimestamp.Before(since) ||
			e.ObjectRef.Resource != "configmaps" || e.ObjectRef.Namespace != ns || e.ResponseStatus.Code >= 300 {
			return false
		}
		switch {
		case e.Verb == "delete", e.Verb == "deletecollection", e.Verb == "create",
			e.Verb == "patch" && e.ResponseStatus.Code == http.StatusCreated:
			return true
		}
		return false
	})
}

// waitMembers waits until every replica sees n live shards.
func waitMembers(t *testing.T, procs map[string]*kgenProcess, n int) {
	t.Helper()
	for id, p := range procs {
		eventually(t, 60*time.Second, func() (bool, error) {
			_, body, err := httpGet(p.metric + "/metrics")
			line := fmt.Sprintf("kgen_shard_members %d", n)
			return err == nil && strings.Contains(body, "\n"+line+"\n"), fmt.Errorf("/metrics has no %s (%v)", line, err)
		}, "shard %s to see %d shards", id, n)
	}
}

// forEachParent runs fn for parents shardee-000 ... concurrently.
func forEachParent(ctx context.Context, n int, fn func(ctx context.Context, name string) error) error {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("shardee-%03d", i)
	}
	return forEach(ctx, names, fn)
}

func forEach(ctx context.Context, names []string, fn func(ctx context.Context, name string) error) error {
	work := make(chan string, len(names))
	for _, n := range names {
		work <- n
	}
	close(work)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for range 16 {
		wg.Go(func() {
			for name := range work {
				if err := fn(ctx, name); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%s: %w", name, err))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func patchValues(ctx context.Context, gvr schema.GroupVersionResource, ns string, names []string, value string) error {
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"value": value}})
	return forEach(ctx, names, func(ctx context.Context, name string) error {
		_, err := env.dynamic.Resource(gvr).Namespace(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
}

// waitSharded waits until there are n parents, each labelled with the
// shard the ring of live shards gives it, each with its child carrying the
// same label (and the value, unless empty) and its status observing its
// generation; it returns each parent's shard.
func waitSharded(t *testing.T, gvr schema.GroupVersionResource, ns string, n int, live []string, value string, timeout time.Duration) map[string]string {
	t.Helper()
	var assigned map[string]string
	eventually(t, timeout, func() (bool, error) {
		list, err := env.dynamic.Resource(gvr).Namespace(ns).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		if len(list.Items) != n {
			return false, fmt.Errorf("%d parents", len(list.Items))
		}
		names := make([]string, 0, n)
		for _, p := range list.Items {
			names = append(names, p.GetName())
		}
		ok, err := convergedOn(t, gvr, ns, names, live, value)
		if !ok {
			return false, err
		}
		assigned = map[string]string{}
		for _, p := range list.Items {
			assigned[p.GetName()] = p.GetLabels()[shard.Label]
		}
		return true, nil
	}, "%d parents sharded over %v", n, live)
	return assigned
}

// convergedOn checks the named parents: each labelled with the shard the
// ring of live shards gives it, its status observing its generation, and
// its ConfigMap carrying the same label and, unless value is empty, that
// value.
func convergedOn(t *testing.T, gvr schema.GroupVersionResource, ns string, names, live []string, value string) (bool, error) {
	ring := shard.NewRing(live, 0)
	list, err := env.dynamic.Resource(gvr).Namespace(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		return false, err
	}
	cms, err := env.kube.CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "kgen.dev/rule=shardee"})
	if err != nil {
		return false, err
	}
	children := map[string]map[string]string{} // name → labels, with data.value as "value"
	for _, cm := range cms.Items {
		l := map[string]string{"value": cm.Data["value"]}
		for k, v := range cm.Labels {
			l[k] = v
		}
		children[cm.Name] = l
	}
	parents := map[string]unstructured.Unstructured{}
	for _, p := range list.Items {
		parents[p.GetName()] = p
	}
	for _, name := range names {
		p, ok := parents[name]
		if !ok {
			return false, fmt.Errorf("no parent %s", name)
		}
		got, want := p.GetLabels()[shard.Label], ring.Owner(shard.Key(gvr.GroupResource(), ns, name))
		if got != want {
			return false, fmt.Errorf("parent %s is on shard %q, the ring gives it to %s", name, got, want)
		}
		if g, _, _ := unstructured.NestedInt64(p.Object, "status", "observedGeneration"); g != p.GetGeneration() {
			return false, fmt.Errorf("parent %s: observedGeneration %d of %d", name, g, p.GetGeneration())
		}
		cm := children[name+"-cm"]
		switch {
		case cm == nil:
			return false, fmt.Errorf("parent %s has no ConfigMap", name)
		case cm[shard.Label] != got:
			return false, fmt.Errorf("ConfigMap of %s is on shard %q, its parent on %s", name, cm[shard.Label], got)
		case value != "" && cm["value"] != value:
			return false, fmt.Errorf("ConfigMap of %s holds %q, want %q", name, cm["value"], value)
		}
	}
	return true, nil
}

func countShards(assigned map[string]string) map[string]int {
	out := map[string]int{}
	for _, id := range assigned {
		out[id]++
	}
	return out
}

// writersOf returns, per object of a resource in ns, the shards' users that
// wrote it since a time, in order, each once per run of writes.
func writersOf(t *testing.T, ns, resource string, since time.Time, user func(string) string) map[string][]string {
	t.Helper()
	type write struct {
		user string
		at   time.Time
	}
	writes := map[string][]write{}
	for _, id := range []string{"s1", "s2", "s3", "s4"} {
		for _, e := range auditOf(t, user(id), since) {
			if e.ObjectRef.Resource == resource && e.ObjectRef.Namespace == ns && isWrite(e.Verb) && e.ResponseStatus.Code < 300 {
				writes[e.ObjectRef.Name] = append(writes[e.ObjectRef.Name], write{user(id), e.StageTimestamp})
			}
		}
	}
	out := map[string][]string{}
	for cm, ws := range writes {
		sort.Slice(ws, func(i, j int) bool { return ws[i].at.Before(ws[j].at) })
		var users []string
		for _, w := range ws {
			if len(users) == 0 || users[len(users)-1] != w.user {
				users = append(users, w.user)
			}
		}
		out[cm] = users
	}
	return out
}

func equalUIDs(a, b map[string]types.UID) bool { return diffUIDs(a, b) == 0 && len(a) == len(b) }

func diffUIDs(a, b map[string]types.UID) int {
	n := 0
	for name, uid := range a {
		if b[name] != uid {
			n++
		}
	}
	return n
}

// The chart with sharding.enabled: two pods, each a shard named after
// itself, with the RBAC 'kgenctl rbac --shards' generates and the chart's
// Role for the shards' Leases. The parents are spread over both pods,
// their children follow, and every parent converges.
func TestHelmShards(t *testing.T) {
	const parents = 20
	installCRD(t, "examples/webapp/crd.yaml")
	ns, release := newNamespace(t), newNamespace(t)
	startPods(t, release)
	rulesFile := exampleWebAppRulesIn(t, ns)
	helmInstall(t, filepath.Join(env.root, "charts/kgen"), release, "-f", generateRBACValues(t, rulesFile, "--shards"),
		"--set-file", "rules.webapp="+rulesFile, "--set", "sharding.enabled=true", "--set", "leaderElection.enabled=false")
	var pods []string
	for _, p := range podsOf(t, release, "app.kubernetes.io/instance=kgen,app.kubernetes.io/name=kgen") {
		pods = append(pods, p.Name)
	}
	if len(pods) != 2 {
		t.Fatalf("pods %v, want 2", pods)
	}
	for i := range parents {
		create(t, webappGVR, webapp(ns, fmt.Sprintf("app-%02d", i), 1))
	}
	eventually(t, 90*time.Second, func() (bool, error) { return converged(t, ns, parents) }, "every parent to converge")
	eventually(t, 30*time.Second, func() (bool, error) {
		list, err := env.dynamic.Resource(webappGVR).Namespace(ns).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		cms := childUIDs(t, ns)
		got := map[string]int{}
		for _, p := range list.Items {
			id := p.GetLabels()[shard.Label]
			if !slices.Contains(pods, id) {
				return false, fmt.Errorf("parent %s is on shard %q, not one of the pods %v", p.GetName(), id, pods)
			}
			if _, ok := cms["configmaps/"+p.GetName()+"-config"]; !ok {
				return false, fmt.Errorf("parent %s has no ConfigMap", p.GetName())
			}
			got[id]++
		}
		if len(got) != 2 {
			return false, fmt.Errorf("parents by shard: %v, want both pods", got)
		}
		return true, nil
	}, "the parents to be spread over both pods")
	for _, p := range pods {
		if _, err := env.kube.CoordinationV1().Leases(release).Get(t.Context(), shard.LeasePrefix+p, metav1.GetOptions{}); err != nil {
			t.Errorf("pod %s's Lease: %v", p, err)
		}
	}
}

const leaverRules = `apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata:
  name: leaver
spec:
  parent:
    apiVersion: leave.example.com/v1
    kind: Leaver
    namespaces: [NAMESPACE]
    selector: {matchLabels: {tier: web}}
  allowCrossNamespace: [SHARED]
  children:
  - id: cm
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: ${parent.metadata.name}-cm
        namespace: SHARED
`

// No finalizer is left behind under --shards (contract §6): each parent's
// child lives in another namespace, so it carries kgen's finalizer. A
// replica is killed with SIGKILL, and its parents are relabelled out of
// the rule's selector and deleted before any other replica took them:
// they are in no live replica's cache. Once the shard is dead, the replica
// the ring gives each parent releases it: its child is deleted, and the
// parent goes, within two lease durations of the kill. A parent of the
// live replica that loses both its rule's label and its shard label, then
// is deleted, goes too (released by the replica that saw it leave, the
// ring's owner of its key).
func TestShardsReleaseParentsThatLeft(t *testing.T) {
	const parents, leaseDuration = 24, 8 * time.Second
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	ns, shared := newNamespace(t), newNamespace(t)
	gvr := newCRD(t, "leave.example.com", "Leaver", "leavers")
	applyRule(t, strings.NewReplacer("NAMESPACE", ns, "SHARED", shared).Replace(leaverRules))
	home := newNamespace(t)
	args := []string{"--shards", "--leader-elect-namespace", home, "--leader-elect-lease-duration", leaseDuration.String()}
	procs := map[string]*kgenProcess{}
	for _, id := range []string{"l1", "l2"} {
		procs[id] = startKgen(t, "kgen-shard-"+id, append(slices.Clone(args), "--shard-id", id)...)
	}
	waitMembers(t, procs, 2)
	names := make([]string, parents)
	for i := range names {
		names[i] = fmt.Sprintf("leaver-%02d", i)
	}
	err := forEach(t.Context(), names, func(ctx context.Context, name string) error {
		_, err := env.dynamic.Resource(gvr).Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "leave.example.com/v1", "kind": "Leaver",
			"metadata": map[string]any{"name": name, "namespace": ns, "labels": map[string]any{"tier": "web"}}}}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// Every parent on its shard, with kgen's finalizer and its child.
	assigned := map[string]string{}
	eventually(t, 90*time.Second, func() (bool, error) {
		list, err := env.dynamic.Resource(gvr).Namespace(ns).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		cms, err := env.kube.CoreV1().ConfigMaps(shared).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		children := map[string]bool{}
		for _, cm := range cms.Items {
			children[cm.Name] = true
		}
		for _, p := range list.Items {
			id := p.GetLabels()[shard.Label]
			switch {
			case id != "l1" && id != "l2":
				return false, fmt.Errorf("parent %s is on shard %q", p.GetName(), id)
			case !slices.Contains(p.GetFinalizers(), "kgen.dev/cleanup"):
				return false, fmt.Errorf("parent %s has no kgen finalizer", p.GetName())
			case !children[p.GetName()+"-cm"]:
				return false, fmt.Errorf("parent %s has no child", p.GetName())
			}
			assigned[p.GetName()] = id
		}
		return len(list.Items) == parents, fmt.Errorf("%d parents", len(list.Items))
	}, "every parent to have its shard, kgen's finalizer and its child")
	var ofKilled, ofLive []string
	for name, id := range assigned {
		if id == "l1" {
			ofKilled = append(ofKilled, name)
		} else {
			ofLive = append(ofLive, name)
		}
	}
	if len(ofKilled) == 0 || len(ofLive) == 0 {
		t.Fatalf("parents by shard: %v, want both shards", countShards(assigned))
	}
	sort.Strings(ofKilled)

	// SIGKILL l1; its parents leave the rule and are deleted at once.
	procs["l1"].kill()
	killed := time.Now()
	leave, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{"tier": "batch"}}})
	if err := forEach(t.Context(), ofKilled, func(ctx context.Context, name string) error {
		ri := env.dynamic.Resource(gvr).Namespace(ns)
		if _, err := ri.Patch(ctx, name, types.MergePatchType, leave, metav1.PatchOptions{}); err != nil {
			return err
		}
		return ri.Delete(ctx, name, metav1.DeleteOptions{})
	}); err != nil {
		t.Fatal(err)
	}
	// One of l2's parents loses both labels, and is deleted.
	bare := ofLive[0]
	unlabel, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{"tier": nil, shard.Label: nil}}})
	ri := env.dynamic.Resource(gvr).Namespace(ns)
	if _, err := ri.Patch(t.Context(), bare, types.MergePatchType, unlabel, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := ri.Delete(t.Context(), bare, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	gone := append(slices.Clone(ofKilled), bare)
	eventually(t, 60*time.Second, func() (bool, error) {
		list, err := ri.List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, p := range list.Items {
			if slices.Contains(gone, p.GetName()) {
				return false, fmt.Errorf("parent %s (shard %q) is still there, finalizers %v", p.GetName(), p.GetLabels()[shard.Label], p.GetFinalizers())
			}
		}
		cms, err := env.kube.CoreV1().ConfigMaps(shared).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, cm := range cms.Items {
			// (The bare parent may be released before its delete lands,
			// and then keeps its child, as without sharding.)
			if slices.Contains(ofKilled, strings.TrimSuffix(cm.Name, "-cm")) {
				return false, fmt.Errorf("the child %s of a deleted parent is still there", cm.Name)
			}
		}
		return true, nil
	}, "the parents that left the rule and were deleted to go, with their children")
	took := time.Since(killed)
	t.Logf("the %d parents of the killed l1 and 1 of l2 that left the rule and were deleted went %s after the kill", len(ofKilled), took.Round(time.Millisecond))
	// l1's are released once it is dead: about one lease duration, the
	// time to take its Lease, and this machine's load.
	if limit := 2*leaseDuration + 2*time.Second; took > limit {
		t.Errorf("the parents took %s to go, more than %s", took.Round(time.Millisecond), limit)
	}
}

// Scenario (an audit finding): a replica dies in the middle of taking a
// parent over, having relabelled only some of its children. The parent,
// whose finalizer guards a child in another namespace, is deleted; the
// live replica claims it and must find that child, which still carries
// the dead replica's label, before it removes the finalizer: no child is
// left behind.
func TestShardsFinalizeAfterPartialTakeOver(t *testing.T) {
	const leaseDuration = 8 * time.Second
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	ns, shared := newNamespace(t), newNamespace(t)
	gvr := newCRD(t, "partial.example.com", "Leaver", "leavers")
	rule := strings.NewReplacer("NAMESPACE", ns, "SHARED", shared, "leave.example.com", "partial.example.com", "name: leaver", "name: partial").Replace(leaverRules) +
		`  - id: local
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: ${parent.metadata.name}-local
`
	applyRule(t, rule)
	home := newNamespace(t)
	args := []string{"--shards", "--leader-elect-namespace", home, "--leader-elect-lease-duration", leaseDuration.String()}
	procs := map[string]*kgenProcess{}
	for _, id := range []string{"p1", "p2"} {
		procs[id] = startKgen(t, "kgen-shard-"+id, append(slices.Clone(args), "--shard-id", id)...)
	}
	waitMembers(t, procs, 2)
	// Parents until one is on each shard.
	owner := map[string]string{}
	for i := 0; len(owner) < 2 && i < 20; i++ {
		name := fmt.Sprintf("partial-%02d", i)
		create(t, gvr, map[string]any{"apiVersion": "partial.example.com/v1", "kind": "Leaver",
			"metadata": map[string]any{"name": name, "namespace": ns, "labels": map[string]any{"tier": "web"}}})
		p := waitFor(t, gvr, ns, name, func(o *unstructured.Unstructured) error {
			if o.GetLabels()[shard.Label] == "" || !slices.Contains(o.GetFinalizers(), "kgen.dev/cleanup") {
				return fmt.Errorf("labels %v, finalizers %v", o.GetLabels(), o.GetFinalizers())
			}
			return nil
		})
		waitFor(t, cmGVR, shared, name+"-cm", nil)
		waitFor(t, cmGVR, ns, name+"-local", nil)
		if _, ok := owner[p.GetLabels()[shard.Label]]; !ok {
			owner[p.GetLabels()[shard.Label]] = name
		}
	}
	victim, ok := owner["p1"]
	if !ok || owner["p2"] == "" {
		t.Fatalf("parents by shard: %v, want one on each", owner)
	}
	// p1 dies after relabelling the local child only (as p2 took it over).
	procs["p1"].kill()
	relabel, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{shard.Label: "p2"}}})
	if _, err := env.kube.CoreV1().ConfigMaps(ns).Patch(t.Context(), victim+"-local", types.MergePatchType, relabel, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := env.dynamic.Resource(gvr).Namespace(ns).Delete(t.Context(), victim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, gvr, ns, victim)
	if cm, err := env.kube.CoreV1().ConfigMaps(shared).Get(t.Context(), victim+"-cm", metav1.GetOptions{}); err == nil {
		t.Errorf("the child %s/%s (shard %q) of the deleted parent was left behind", shared, cm.Name, cm.Labels[shard.Label])
	}
}

// moverRules are rules web (tier=web: a ConfigMap and a Service) and api
// (tier=api: a ConfigMap alone) of one parent kind.
const moverRules = `apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata:
  name: mover-web
spec:
  parent:
    apiVersion: move.example.com/v1
    kind: Mover
    namespaces: [NAMESPACE]
    selector: {matchLabels: {tier: web}}
  children:
  - id: cm
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: ${parent.metadata.name}-web
  - id: svc
    template:
      apiVersion: v1
      kind: Service
      metadata:
        name: ${parent.metadata.name}
      spec:
        ports: [{port: 80}]
---
apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata:
  name: mover-api
spec:
  parent:
    apiVersion: move.example.com/v1
    kind: Mover
    namespaces: [NAMESPACE]
    selector: {matchLabels: {tier: api}}
  children:
  - id: cm
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: ${parent.metadata.name}-api
`

// Scenario (an audit finding): a parent moves from one rule to another
// (relabelled out of rule web's selector into rule api's) while its
// replica is dead. The live replica claims it for rule api and must take
// over rule web's children too, of a kind rule api does not have: then it
// prunes them, as a live replica prunes them when its own parent moves.
// Before, it relabelled only the ConfigMaps, and rule web's Service kept
// the dead replica's label, out of every live replica's sight, for good.
func TestShardsMoveParentOfDeadShard(t *testing.T) {
	const leaseDuration = 8 * time.Second
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	ns := newNamespace(t)
	gvr := newCRD(t, "move.example.com", "Mover", "movers")
	for _, doc := range strings.Split(strings.ReplaceAll(moverRules, "NAMESPACE", ns), "---\n") {
		applyRule(t, doc)
	}
	home := newNamespace(t)
	args := []string{"--shards", "--leader-elect-namespace", home, "--leader-elect-lease-duration", leaseDuration.String()}
	procs := map[string]*kgenProcess{}
	for _, id := range []string{"m1", "m2"} {
		procs[id] = startKgen(t, "kgen-shard-"+id, append(slices.Clone(args), "--shard-id", id)...)
	}
	waitMembers(t, procs, 2)
	// Parents until one is on the replica to kill.
	victim := ""
	for i := 0; victim == "" && i < 20; i++ {
		name := fmt.Sprintf("mover-%02d", i)
		create(t, gvr, map[string]any{"apiVersion": "move.example.com/v1", "kind": "Mover",
			"metadata": map[string]any{"name": name, "namespace": ns, "labels": map[string]any{"tier": "web"}}})
		p := waitFor(t, gvr, ns, name, func(o *unstructured.Unstructured) error {
			if o.GetLabels()[shard.Label] == "" {
				return fmt.Errorf("labels %v", o.GetLabels())
			}
			return nil
		})
		waitFor(t, cmGVR, ns, name+"-web", nil)
		waitFor(t, svcGVR, ns, name, nil)
		if p.GetLabels()[shard.Label] == "m1" {
			victim = name
		}
	}
	if victim == "" {
		t.Fatal("no parent on shard m1")
	}
	// m1 dies; its parent moves to rule api.
	procs["m1"].kill()
	move, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{"tier": "api"}}})
	if _, err := env.dynamic.Resource(gvr).Namespace(ns).Patch(t.Context(), victim, types.MergePatchType, move, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, cmGVR, ns, victim+"-api", nil)
	eventually(t, 60*time.Second, func() (bool, error) {
		for _, c := range []struct {
			gvr  schema.GroupVersionResource
			name string
		}{{cmGVR, victim + "-web"}, {svcGVR, victim}} {
			if o := get(t, c.gvr, ns, c.name); o != nil {
				return false, fmt.Errorf("rule web's %s %s is still there, on shard %q", c.gvr.Resource, c.name, o.GetLabels()[shard.Label])
			}
		}
		return true, nil
	}, "rule web's children of the moved parent to be pruned")
	if p := get(t, gvr, ns, victim); p == nil || p.GetLabels()[shard.Label] != "m2" {
		t.Errorf("the moved parent is not on shard m2: %v", p)
	}
}

// Scenario (contract §7 Rule status, §9, through a change of one replica's
// grants): two shards, and the one that does not write the Rule's status
// may not list the rule's child kind. Its parents wait, and the Rule must
// say so, naming the shard, not Running because the writer runs it. Once
// that replica may list, the rule runs everywhere and every parent
// converges.
func TestShardsRuleNotRunningOnOneReplica(t *testing.T) {
	const group = "shardgrant.example.com"
	installCRD(t, "charts/kgen/crds/rules.kgen.dev.yaml")
	ns := newNamespace(t)
	gvr := newCRD(t, group, "Gadget", "gadgets")
	home := newNamespace(t)
	// A rule whose status shard "a" writes, so the problem is b's alone.
	ring, rule := shard.NewRing([]string{"a", "b"}, 0), ""
	for i := 0; rule == ""; i++ {
		if name := fmt.Sprintf("limited-%d", i); ring.Owner(shard.Key(ruleGVR.GroupResource(), "", name)) == "a" {
			rule = name
		}
	}
	const limited = "kgen-shard-b"
	allowed := func(secretVerbs ...string) []rbacv1.PolicyRule {
		return []rbacv1.PolicyRule{
			{APIGroups: []string{"kgen.dev"}, Resources: []string{"rules"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"kgen.dev"}, Resources: []string{"rules/status"}, Verbs: []string{"patch", "update"}},
			{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "create", "patch", "update", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: secretVerbs},
			{APIGroups: []string{group}, Resources: []string{"gadgets", "gadgets/status", "gadgets/finalizers"}, Verbs: []string{"get", "list", "watch", "patch", "update"}},
		}
	}
	grant(t, limited, allowed("get", "create", "patch", "update", "delete"))
	waitCan(t, limited, false, authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets", Namespace: ns})
	kubeconfig, err := env.cp.WriteKubeconfig(limited+".kubeconfig", limited)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--shards", "--leader-elect-namespace", home, "--leader-elect-lease-duration", "8s"}
	procs := map[string]*kgenProcess{
		"a": startKgen(t, "kgen-shard-a", append(slices.Clone(args), "--shard-id", "a")...),
		"b": startKgenWith(t, limited, kubeconfig, append(slices.Clone(args), "--shard-id", "b")...),
	}
	waitMembers(t, procs, 2)
	applyRule(t, gadgetRuleDoc(rule, group, "Gadget", ns, `  children:
  - id: secret
    template:
      apiVersion: v1
      kind: Secret
      metadata:
        name: ${parent.metadata.name}
      stringData:
        value: v1
`))
	waitRuleStatus(t, rule, readyIs("False", "Forbidden", "on shard b", "secrets", "forbidden"))

	// Parents on both shards: a's converge, b's wait.
	onShard := map[string][]string{}
	for i := 0; len(onShard["a"]) == 0 || len(onShard["b"]) == 0; i++ {
		if i == 40 {
			t.Fatalf("40 parents, and not on both shards: %v", onShard)
		}
		name := fmt.Sprintf("g%02d", i)
		create(t, gvr, gadget(group, ns, name, map[string]any{}))
		p := waitFor(t, gvr, ns, name, func(o *unstructured.Unstructured) error {
			if o.GetLabels()[shard.Label] == "" {
				return fmt.Errorf("labels %v", o.GetLabels())
			}
			return nil
		})
		id := p.GetLabels()[shard.Label]
		onShard[id] = append(onShard[id], name)
	}
	waitFor(t, secretGVR, ns, onShard["a"][0], nil)
	if err := readyIs("False", "Forbidden", "on shard b")(get(t, ruleGVR, "", rule)); err != nil {
		t.Errorf("with parents on both shards: %v", err)
	}

	grant(t, limited, allowed("get", "list", "watch", "create", "patch", "update", "delete"))
	eventually(t, 90*time.Second, func() (bool, error) {
		err := readyIs("True", "Running")(get(t, ruleGVR, "", rule))
		return err == nil, err
	}, "the rule to run on every replica once b may list its child kind")
	for _, name := range onShard["b"] {
		waitFor(t, secretGVR, ns, name, nil)
	}
}
