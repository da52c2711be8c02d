#!/usr/bin/env bash
# Builds the local control plane (etcd, kube-apiserver, kube-controller-manager)
# from the Go module proxy into a git-ignored cache folder, and prints
# that folder. The folder's name is a hash of the tools modules, so a change of
# a pinned version builds afresh and an unchanged one costs nothing.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/hack/tools"
stamp=$(cat "$tools"/*/go.mod "$tools"/*/go.sum "$0" | sha256sum | cut -c1-12)
bin="$root/.cache/tools/$stamp/bin"

build() { # build MODULE_DIR PACKAGE OUTPUT
	local dir=$1 pkg=$2 out=$3
	[ -x "$bin/$out" ] && return 0
	echo "building $out (first time only; a few minutes on 2 cores)" >&2
	(cd "$tools/$dir" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags='-s -w' -o "$bin/$out.tmp" "$pkg")
	mv "$bin/$out.tmp" "$bin/$out"
}

mkdir -p "$bin"
build etcd go.etcd.io/etcd/server/v3 etcd
build kube k8s.io/kubernetes/cmd/kube-apiserver kube-apiserver
build kube k8s.io/kubernetes/cmd/kube-controller-manager kube-controller-manager
echo "$bin"
