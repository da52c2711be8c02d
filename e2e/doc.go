// Package e2e holds kgen's end-to-end tests. They run against a real etcd,
// kube-apiserver and kube-controller-manager started once in TestMain (see
// internal/controlplane), drive kgen in-process or as the kgenctl binary,
// and wait by polling with deadlines, never by sleeping.
//
// The tests carry the build tag e2e: run them with 'make e2e' (or
// 'go test -tags e2e ./e2e/'), which builds the control plane on first use.
package e2e
