// Command bench measures kgen on a real local control plane against the API
// server's own limit, and writes the results to bench/results.
//
// For each N it runs the WebApp workload (a WebApp parent and its ConfigMap,
// Service and Deployment) twice on the same etcd and kube-apiserver:
//
//   - kgen: a loader creates N parents with 16 goroutines; kgenctl run, at
//     its default flags, makes the 3N children and N statuses. Convergence
//     ends when every child exists with the right spec and every parent has
//     status.observedGeneration. Then an update wave patches every parent's
//     spec.replicas and ends when every Deployment shows it.
//   - raw: with kgen stopped, the same loader creates the same 4N objects
//     itself (each parent, then its three children as kgen renders them), and
//     makes the same 2N patches of the update wave (N parents, N Deployments).
//
// It also reports kgen's API requests per parent during convergence and per
// minute in steady state (from kgen's own kgen_api_requests_total metric), its
// peak RSS (VmHWM), and its Go heap in use after a forced GC. Watches that
// observe progress run in both phases alike.
//
//	go run ./bench -sizes 500,2000,5000
package main
