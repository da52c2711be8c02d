//go:build tools

// Package tools records the helm command this module builds, so that
// 'go mod tidy' keeps its dependencies. Helm is used to lint, render and
// install charts/kgen in tests.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
