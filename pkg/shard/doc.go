// Package shard spreads the parents of kgen's rules over several replicas
// ('kgenctl run --shards'): each replica (a shard) reconciles the parents
// assigned to it, and watches and caches only those and their children.
// docs/sharding.md tells the design; in short:
//
//   - Membership: each shard holds the Lease kgen-shard-<id> (client-go's
//     leader election on a Lease of its own) and follows every shard's
//     Lease. A shard whose Lease was not renewed for its duration, by this
//     replica's clock, is taken from it (fenced: it can no longer renew and
//     stops) and is then dead; a released Lease is dead at once.
//   - Assignment: a Ring (consistent hashing with virtual nodes) over the
//     live shards gives each parent an owner. The assignment is the label
//     kgen.dev/shard: <id> on the parent; the renderer copies it onto the
//     children. Every replica is the sharder of its own parents: it claims
//     (labels) parents without a shard or of a dead shard that the ring
//     gives it, and hands over its own parents that the ring gives to
//     another live shard. A claim is a compare-and-swap on the label (a
//     merge patch pinned to the resource version, or a JSON patch that
//     tests the old value), so two replicas that see different rings never
//     both win.
//   - Hand-over: the shard that holds a parent gives it away itself: Begin
//     stops new reconciles of it, the reconciles in flight end, and only
//     then the label changes. The new shard acts only on the new label, so
//     a parent is reconciled by one replica at a time.
//   - Parents that leave their rule: exactly one replica releases one
//     (Releases): the shard its label names while live, else the ring's
//     owner of its key. The lists made when a shard dies and at each
//     sweep leave the rule's selector out, so they also find parents that
//     left it, which they hand to the controller (Assign's left).
//
// The package knows nothing of rules or children: the controller tells it
// which parents it watches (Assign) and asks before each reconcile (Begin);
// relabelling a moved parent's children is the controller's part.
package shard
