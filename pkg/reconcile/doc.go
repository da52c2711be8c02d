// Package reconcile makes one parent's children match its rule.
//
// Render is the pure half. From a rule, a parent and what was observed
// (Observed: the children, several for a forEach child, and the inputs), it
// computes the desired children (templates evaluated; kgen's labels, parent
// annotation, namespace and ownerReference filled in) in the order to apply
// them, one per object of a forEach child (identity ChildKey: id, namespace,
// name), the children to prune because their includeWhen is false, the
// children that wait for a child they read or a missing input, and the
// rule's status fields. Ready judges an observed object by its child's
// readyWhen. Errors that come
// from the rule or the parent's data are *RenderError values matching
// ErrInvalid: retrying does not fix them, a change to the parent or the
// rules does.
//
// A Scoper (kinds.Scoper) is all Render needs to know of the cluster:
// whether a kind is namespaced. kinds.Static answers without a cluster, for
// built-in kinds and the CustomResourceDefinitions it is given, and
// AssumeScopes fills in what kgenctl render assumes for the other kinds.
//
// The Reconciler is the other half. It reads a parent's children only from
// the informer cache (a ChildLister), and writes only what differs from the
// desired state (UpToDate): a new child is created with POST, which fails
// rather than take over an object kgen did not make; a changed one is
// server-side applied with field manager kgen, pinned to the live object's
// UID; one no longer wanted is deleted with a UID precondition. It then
// writes the parent's status (observedGeneration, the Ready condition, the
// rule's fields) through the status subresource when it changed, and keeps
// the kgen.dev/cleanup finalizer on parents whose children Kubernetes cannot
// garbage-collect. Errors that retrying will not fix match ErrTerminal.
package reconcile
