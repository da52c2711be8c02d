// Package kinds knows the API resources of Kubernetes' built-in kinds
// without asking a cluster: each kind's resource name (the plural used in
// URLs and RBAC rules), whether it is namespaced, and whether it has a status
// subresource.
//
// It is what offline commands (kgenctl render, kgenctl rbac) use where the
// controller asks discovery: Static is the one offline resolver, knowing the
// built-in kinds, the CustomResourceDefinitions added to it, resources the
// user names, and scopes a caller assumes. It never guesses a plural: a kind
// it does not know, such as any custom resource, is an error matching
// ErrUnknownKind, and the caller must learn it elsewhere (a
// CustomResourceDefinition, the user, discovery). Scoper is the one
// question Render asks of kinds, answered by Static offline and by
// discovery in the controller.
//
// The table is checked against a live kube-apiserver serving every API
// version (alpha and beta included) by the e2e test TestBuiltinKindsMatchDiscovery,
// so it cannot silently drift from the Kubernetes release kgen is built for.
package kinds
