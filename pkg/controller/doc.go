// Package controller turns loaded rules into a running controller: it
// resolves each rule's kinds through the mapper, watches parents and children
// with pkg/watch, queues parent keys, and runs workers that call
// pkg/reconcile for one parent at a time.
//
// A rule whose parent or child kinds are not served yet waits: the controller
// retries it periodically (resetting the mapper's cache), reports it in logs,
// metrics and State, and starts it once its CRDs appear. A started rule's
// parents are reconciled only once all its informers have synced, and then
// all queued once; an informer that cannot list (forbidden, or failing)
// retries with client-go's backoff while the parents wait. A rule whose kind
// stops being served (its CRD deleted) has its informers released and waits
// again. Ready reports whether every rule that can run has synced: waiting
// and failing rules do not make the controller unready. A waiting rule
// still finalizes its deleted parents: it watches its parents (the
// informers it would run with), lists the children only kgen's finalizer
// guards of a parent being deleted, deletes them and releases the parent;
// a kind it may not list keeps the finalizer, and says so (waiting.go).
//
// Before a rule starts, the Prepare and Admit hooks of Config may make its
// parent kind served (a CRD kgen manages) and refuse it (its expressions do
// not fit the parent's schema); a refused rule waits and is asked again.
//
// Where each rule may have made children is kept in a Record (the
// ConfigMap kgen-state, ConfigMapRecord) that survives restarts: kinds and
// namespaces a rule no longer covers are watched as prune-only informers
// until none of the rule's children is left there, so children of a kind
// that left a rule are pruned too (record.go). A started rule's scopes are
// recorded before any of its parents is reconciled; a Record kgen cannot
// read or write does not stop the rules, whose state says why. The Record
// also keeps where each rule watched its parents: once every rule is
// loaded, a recorded parent kind and namespace that no rule covers any
// more (every rule of the kind removed, or the namespace dropped, while
// kgen was stopped, or live) is listed once and its parents that carry
// kgen's finalizer are released, then it leaves the Record (parents.go).
//
// Inputs (inputs.go) are read from shared informers; each reconcile records
// what its parent read, and an input's event queues exactly the parents
// that read it.
//
// Children are indexed by their parent's UID, not by rule, so a renamed rule
// or a parent moved between rules keeps its children. A parent that leaves a
// rule's informer while it carries kgen's finalizer is read once and released
// if no rule selects it any more; one being deleted first loses the children
// only kgen's finalizer guards, listed where the Record says the rules that
// watched it made children. A parent whose child's name is taken by an
// object kgen may not touch is looked at again with a backoff of its own.
//
// With Config.Sharding ('kgenctl run --shards', pkg/shard) the parent and
// child informers also select the replica's kgen.dev/shard label, the
// Sharding assigns each rule's parents, and each reconcile first asks it
// (Sharding.Begin) whether this replica may reconcile the parent now. A
// parent that came to this replica has its children relabelled before its
// first reconcile here (shard.go), so none looks missing. A parent that no
// rule selects any more is released by the one replica the Sharding names
// (Sharding.Releases), also one the Sharding found (Assign's left), of a
// dead shard; only the shard the ring gives a rule removes scopes from its
// record, and every replica's write of the record changes only what it
// learned (record.go).
//
// The controller reads only from its caches; every API request it makes is a
// write by the reconciler, a list and watch of an informer, a read of a
// parent that left a rule, a read the reconciler makes on a rare path
// (a conflict, a drift repair), the get and patches of the record, the
// one-off list of a recorded parent kind no rule covers (and of the
// children of its parents being deleted), the lists of the children of a
// parent being deleted that left every rule or whose rule waits, or, with
// sharding, the list and relabelling of the children of a parent that came
// to this replica (or that it releases while it is deleted), and the list
// of a rule's parents by the replica that judges whether a prune-only
// scope of the rule's record still holds children of other shards'.
package controller
