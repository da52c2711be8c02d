// Command bench measures kgen on a real local control plane against the API
// server's own limit, and writes the results to bench/results.
//
// For each N it runs the WebApp workload (a WebApp parent and its ConfigMap,
// Service and Deployment) three times, each phase on a control plane of its
// own (in one long-lived API server the CPU time of the same work drifted by
// up to 30% between runs), after one warm-up write of each kind (a new CRD's
// first write is slow):
//
//   - kgen: a loader creates N parents with 16 goroutines; kgenctl run, at
//     its default flags, makes the 3N children and N statuses. Convergence
//     ends when every child exists with the right spec and every parent has
//     status.observedGeneration. Then an update wave patches every parent's
//     spec.replicas and ends when every Deployment shows it.
//   - raw: with kgen stopped, the same loader creates the same 4N objects
//     itself (each parent, then its three children as kgen renders them), and
//     makes the same 2N patches of the update wave (N parents, N Deployments).
//   - floor (-floor, on by default): the same loader makes exactly the writes
//     kgen's contract requires, without kgen: each parent, then its three
//     children by server-side apply (a create that cannot take over an
//     object, so kgen owns every field from the first write) and one status
//     apply of kgen's own part of the status; in the wave, each parent's
//     patch, a server-side apply of its Deployment and a status apply. No
//     Events: by default kgen records none for creating or following a
//     change. No controller that keeps kgen's contract can be faster than
//     this on the same machine.
//   - pods (-pods, off unless asked; 'make bench' asks): on a control plane
//     that also runs the Deployment, ReplicaSet, ServiceAccount and node
//     lifecycle controllers, kube-scheduler and kwok (built on first use by
//     'hack/tools.sh kube-scheduler kwok'), with one fake Node that kwok
//     plays the kubelet of, kgen at its defaults gets -pods-size parents
//     (200 by default, 600 pods, about a minute to the steady state; 2000
//     parents with 6000 pods took 7 minutes on 2 busy cores) with one pod
//     each, then scales them to three. It runs once, after every N. Once
//     every parent is Ready with every pod available and kgen has made no
//     write for 10 s, its requests are counted over the steady window. The
//     target is no write at all: the Deployments' status changed
//     throughout the rollout, but nothing in a parent or the rule changes
//     in the window. The report also counts the changes of the objects
//     around kgen, in the rollout and in the window.
//
// It also reports kgen's API requests per parent during convergence and per
// minute in steady state (from kgen's own kgen_api_requests_total metric), its
// peak RSS (VmHWM) with the highest of its anonymous and file-backed parts
// (RssAnon and RssFile, sampled every 100 ms), and its Go heap in use after
// a forced GC. A steady state
// leaves out the requests the bench's own scrapes cost (a TokenReview or
// SubjectAccessReview when kgen's cache of the answer expires). Watches that
// observe progress run in every phase alike. For each phase it reports the
// CPU seconds the API server, etcd, kgen and the bench itself used, since
// they share the machine's cores; -profile-apiserver also saves the API
// server's CPU profiles.
//
// The ratios vary from run to run on a shared machine; -repeat K runs each N
// K times and adds the median and range of the ratios to the report.
//
//	go run ./bench -sizes 500,2000,5000 -repeat 3
//	go run ./bench -sizes= -pods -pods-size 200   # only the pods phase
//
// With -shards K1,K2,... it measures instead, for each N, the kgen phase
// (convergence, update wave, steady state) against K replicas of
// 'kgenctl run --shards' (K=0: one kgen without it), each on a control
// plane of its own, and reports the replicas' summed requests, each
// replica's share of the parents, peak RSS and CPU seconds, in
// bench/results/shards:
//
//	go run ./bench -shards 0,1,2,3 -sizes 500,2000
package main
