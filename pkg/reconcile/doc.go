// Package reconcile makes one parent's children match its rule.
//
// Render is the pure half. From a rule, a parent and the children as last
// observed, it computes the desired children (templates evaluated; kgen's
// labels, parent annotation, namespace and ownerReference filled in) in the
// order to apply them, the children to prune because their includeWhen is
// false, the children that wait for a child they read, and the rule's status
// fields. Ready judges an observed child by its readyWhen. Errors that come
// from the rule or the parent's data are *RenderError values matching
// ErrInvalid: retrying does not fix them, a change to the parent or the
// rules does.
//
// A Scoper is all Render needs to know of the cluster: whether a kind is
// namespaced. StaticScoper answers without a cluster, for built-in kinds and
// the CustomResourceDefinitions it is given, as kgenctl render needs.
//
// The Reconciler applies what Render computes with server-side apply,
// prunes what is no longer wanted, and writes the parent's status.
package reconcile
