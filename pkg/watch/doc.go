// Package watch runs dynamic informers over unstructured objects, one per
// resource, namespace and label selector, started when first needed and
// stopped when the last user releases it (reference counting).
//
// Every informer shares the Manager's indexers and transform. The default
// transform (Compact) drops metadata.managedFields and the last-applied
// annotation, which kgen never reads and which are often most of an object,
// and caches the object as an *Object: typed metadata plus the object's JSON,
// a fraction of the memory of decoded maps. Get and Decode return the full
// object. Events are normalised to one callback that receives the object's
// metadata (for a delete, its last known state), and each registration
// reports whether its informer has synced, which feeds readiness.
//
// The package knows nothing of rules or parents: which keys to watch, with
// which selectors, and what an event means are the caller's business. A
// watch that fails because the resource is no longer served (its CRD was
// deleted) is reported to Config.OnWatchError, so the caller can release it.
package watch
