// Package mapper resolves Kubernetes kinds and the names people type for them
// to API resources, using live discovery only.
//
// A Mapper wraps a restmapper.DeferredDiscoveryRESTMapper over a memory-cached
// discovery client. ResourceFor turns an exact GroupVersionKind into its
// GroupVersionResource and scope, as the controller needs; Resolve turns user
// input (apps/v1/Deployment, v1/ConfigMap, Deployment.v1.apps, Deployment,
// deployments, deploy, or a category such as "all") into every matching
// resource, as kubectl would, and reports ambiguity instead of hiding it.
//
// Plurals, short names, categories and scope come from the API server's
// discovery documents and never from guessing. A miss invalidates the cache
// and retries once, so kinds served after the Mapper was built (a CRD
// installed later) are found. The Mapper never panics on odd discovery data:
// a malformed group version is skipped, and a group whose discovery failed
// still leaves the others usable. A kind of a group version whose discovery
// failed (an aggregated API that is down) is reported as unavailable
// (ErrUnavailable), never as not served (ErrNotFound): its objects may
// exist, and callers must not act as if they could not.
//
// The package does not know about rules, informers or the controller; it only
// answers questions about what the API server serves.
package mapper
