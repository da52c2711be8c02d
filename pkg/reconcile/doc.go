// Package reconcile makes one parent's children match its rule.
//
// Render is the pure half of rendering. From a rule, a parent and what was
// observed (Observed: the children, several for a forEach child, and the
// inputs), it computes the desired children (templates evaluated; kgen's
// labels, parent annotation, namespace and ownerReference filled in) in the
// order to apply them, one per object of a forEach child (identity
// ChildKey: id, namespace, name), the children to prune because their
// includeWhen is false, the children that wait for a child they read or a
// missing input, and the rule's status fields. Two desired objects that are
// one object (group, kind, namespace, name) are an error, whichever ids
// render them. Ready judges an observed object by its child's readyWhen.
// Errors that come from the rule or the parent's data are *RenderError
// values matching ErrInvalid: retrying does not fix them, a change to the
// parent or the rules does.
//
// A Scoper (kinds.Scoper) is all Render needs to know of the cluster:
// whether a kind is namespaced. kinds.Static answers without a cluster, for
// built-in kinds and the CustomResourceDefinitions it is given, and
// AssumeScopes fills in what kgenctl render assumes for the other kinds.
//
// MakePlan is the pure half of a reconcile: from the rendering and the
// parent's children as cached it decides, per child object, whether to
// create, update, repair or keep it, which observed objects a renamed child
// replaces, which to prune, and whether the parent needs kgen's finalizer.
// A child is the parent's by UID (its controller ownerReference, or where
// none is allowed the kgen.dev/parent-uid label and parent annotation),
// never by labels alone. Comparisons use the kind's schema (pkg/schema):
// quantities by value, keyed lists by key; what the server made of kgen's
// last write is remembered, so a difference the server made is not a change.
// Differences names the fields that differ, by the same walk as Matches;
// with CheckReady and Whose it lets kgenctl explain judge children as the
// Reconciler does.
//
// The Reconciler executes plans. It reads a parent's children only from the
// informer cache (a ChildLister) and its own recent writes (watch.Writes),
// and writes with server-side apply, field manager kgen: a new child is
// created by an apply that the API server refuses for an existing object
// (createOnlyResourceVersion), so kgen never takes over what it did not make
// and owns every field from the first write; a changed one is applied pinned
// to the live object's UID; a renamed one is created before its old object
// is deleted; one no longer wanted is deleted with a UID precondition. An
// object found where a child should be is adopted only when its owner no
// longer exists. The Reconciler then writes its own part of the parent's
// status (observedGeneration, the Ready condition, the rule's fields) and
// backs off from a writer that fights it or a status that triggers itself,
// and keeps the kgen.dev/cleanup finalizer on parents whose children
// Kubernetes cannot garbage-collect. Events follow an EventPolicy. Errors
// that retrying will not fix match ErrTerminal.
package reconcile
