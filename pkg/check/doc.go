// Package check tells whether an installed kgen works, from the API alone:
// its Deployment has an available replica and, with leader election, a
// replica holds the Lease and has renewed it within the Lease's duration.
// A kgen scaled to zero, crash-looping, or whose leader died fails it.
//
// kgenctl check is its command, and the Helm chart's 'helm test' runs that
// in a pod whose ServiceAccount may only get the one Deployment and Lease.
package check
