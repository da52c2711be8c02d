// Package controller turns loaded rules into a running controller: it
// resolves each rule's kinds through the mapper, watches parents and children
// with pkg/watch, queues parent keys, and runs workers that call
// pkg/reconcile for one parent at a time.
//
// A rule whose parent or child kinds are not served yet waits: the controller
// retries it periodically (resetting the mapper's cache), reports it in logs,
// metrics and Ready, and starts it once its CRDs appear. A rule whose kind
// stops being served (its CRD deleted) has its informers released and waits
// again.
//
// The controller reads only from its caches; every API request it makes is a
// write by the reconciler, or a list and watch of an informer.
package controller
