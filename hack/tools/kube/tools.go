//go:build tools

// Package tools records the control-plane commands this module builds, so
// that 'go mod tidy' keeps their dependencies. kube-scheduler is built only
// when asked for ('hack/tools.sh kube-scheduler'), for the benchmark's pods.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
