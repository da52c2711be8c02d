// Package manager wires a running kgen together: API clients with kgen's
// rate limits and User-Agent, the discovery mapper, the event recorder and
// its policy, Prometheus metrics, the controller, the /metrics server
// (pkg/metricsserver: plain, or HTTPS with callers reviewed by the API
// server), the /healthz+/readyz server, and leader election, which feeds
// leader_election_master_status, or sharding (pkg/shard): the controller
// then runs under the replica's shard Lease, on its share of the parents,
// and each Rule's status is written by one shard with every shard's
// parent counts.
//
// kgenctl run only binds its flags to an Options and calls New and Run; the
// end-to-end tests build the same Manager in-process, so what they test is
// what the command runs. The package knows nothing of flags, of where rules
// come from on disk, or of logging formats: the caller decides those.
package manager
