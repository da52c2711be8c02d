// Package watch runs dynamic informers over unstructured objects, one per
// resource, namespace and label selector, started when first needed and
// stopped when the last user releases it (reference counting).
//
// Every informer shares the Manager's indexers and transform. The default
// transform (Compact) drops metadata.managedFields and the last-applied
// annotation, which kgen never reads and which are often most of an object,
// and caches the object as an *Object: typed metadata plus the object's JSON,
// a fraction of the memory of decoded maps. Get and Decode return the full
// object.
//
// With Config.REST set, informers list and watch through a plain REST client
// and decode each object's JSON straight into an *Object: the managed fields
// and the last-applied annotation are cut out of the bytes and only the
// metadata is decoded, so no maps are built for an object until a reconcile
// reads it. Without it they use the dynamic client (tests with fake clients
// do), and the transform compacts the decoded objects. Events are normalised to one callback that receives the object's
// metadata (for a delete, its last known state), and each registration
// reports whether its informer has synced, which feeds readiness.
// Manager.Relist has a group's informers list again, as after its CRD
// changed the server decodes their objects under the new schema.
//
// The package knows nothing of rules or parents: which keys to watch, with
// which selectors, and what an event means are the caller's business. A
// watch that fails because the resource is no longer served (its CRD was
// deleted) is reported to Config.OnWatchError, so the caller can release it.
package watch
