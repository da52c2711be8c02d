//go:build tools

// Package tools records the etcd command this module builds, so that
// 'go mod tidy' keeps its dependencies.
package tools

import _ "go.etcd.io/etcd/server/v3"
