// Package controlplane runs a real, local Kubernetes control plane for tests,
// benchmarks and the demo: etcd, kube-apiserver and, optionally,
// kube-controller-manager, as child processes on loopback ports.
//
// The binaries are built from the Go module proxy by hack/tools.sh (see
// BinDir); this package only starts them. It makes its own certificate
// authority, so every client authenticates with a client certificate and the
// API server authorizes with RBAC, as a real cluster does: the admin user is
// in system:masters, and UserConfig mints credentials for any other user.
//
// kube-controller-manager runs only the controllers asked for (by default the
// garbage collector and the namespace controller), so ownerReference
// cascades and namespace deletion really happen, while nothing schedules or
// runs pods. Asked to, it also starts kube-scheduler and kwok, which plays
// the kubelet of fake Nodes (KwokNode), so with the Deployment and
// ReplicaSet controllers a Deployment's pods run and it becomes available;
// the benchmark uses this. The API server can write an audit log, so tests
// can count what a client really sent.
package controlplane
