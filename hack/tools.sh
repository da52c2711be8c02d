#!/usr/bin/env bash
# Builds the local control plane (etcd, kube-apiserver, kube-controller-manager)
# and helm from the Go module proxy into a git-ignored cache folder, and prints
# that folder; 'hack/tools.sh helm' builds only the tools named. The folder's
# name is a hash of the tools modules, so a change of a pinned version builds
# afresh and an unchanged one costs nothing.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/hack/tools"
stamp=$(cat "$tools"/*/go.mod "$tools"/*/go.sum "$0" | sha256sum | cut -c1-12)
bin="$root/.cache/tools/$stamp/bin"

wanted=" $* "

build() { # build MODULE_DIR PACKAGE OUTPUT [LDFLAGS]
	local dir=$1 pkg=$2 out=$3 ldflags=${4:-}
	[ "$wanted" = "  " ] || [[ "$wanted" == *" $out "* ]] || return 0
	[ -x "$bin/$out" ] && return 0
	echo "building $out (first time only; a few minutes on 2 cores)" >&2
	(cd "$tools/$dir" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags="-s -w $ldflags" -o "$bin/$out.tmp" "$pkg")
	mv "$bin/$out.tmp" "$bin/$out"
}

mkdir -p "$bin"
build etcd go.etcd.io/etcd/server/v3 etcd
# As Kubernetes' own build: without its version, the API server reports
# v0.0.0-master, which charts' kubeVersion constraints reject.
kube_version=$(sed -n 's|^require k8s.io/kubernetes ||p' "$tools/kube/go.mod")
kube_ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	kube_ldflags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1"
	kube_ldflags+=" -X $pkg.gitMinor=$(echo "$kube_version" | cut -d. -f2) -X $pkg.gitTreeState=clean"
done
build kube k8s.io/kubernetes/cmd/kube-apiserver kube-apiserver "$kube_ldflags"
build kube k8s.io/kubernetes/cmd/kube-controller-manager kube-controller-manager "$kube_ldflags"
# As helm's own Makefile: its version, and the Kubernetes version of its
# client-go as the default of 'helm template' and 'helm lint'.
helm_version=$(sed -n 's|^require helm.sh/helm/v3 ||p' "$tools/helm/go.mod")
k8s_minor=$(sed -n 's|^\tk8s.io/client-go v0\.\([0-9]*\)\..*|\1|p' "$tools/helm/go.mod")
build helm helm.sh/helm/v3/cmd/helm helm "-X helm.sh/helm/v3/internal/version.version=$helm_version \
-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$k8s_minor \
-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$k8s_minor"
echo "$bin"
