#!/usr/bin/env bash
# Builds the local control plane (etcd, kube-apiserver, kube-controller-manager)
# and helm from the Go module proxy into a git-ignored cache folder, and prints
# that folder; 'hack/tools.sh helm' builds only the tools named. kube-scheduler
# and kwok, which only the benchmark's pods need ('go run ./bench -pods'), are
# built only when named: 'hack/tools.sh kube-scheduler kwok'.
#
# The folder's name is a hash of this script and of the modules of the tools
# built by default, so a change of a pinned version builds afresh and an
# unchanged one costs nothing. kwok's module (hack/tools/kwok) is not in that
# hash: a new kwok is rebuilt in the same folder, told by a stamp file beside
# it, without rebuilding the control plane that every test needs.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/hack/tools"
stamp=$(cat "$tools"/{etcd,kube,helm}/go.{mod,sum} "$root/hack/tools.sh" | sha256sum | cut -c1-12)
bin="$root/.cache/tools/$stamp/bin"

names=" $* "
optional=" kube-scheduler kwok "

# wanted OUTPUT: the tool is named, or none is and it is not optional.
wanted() {
	if [ "$names" = "  " ]; then
		[[ "$optional" != *" $1 "* ]]
	else
		[[ "$names" == *" $1 "* ]]
	fi
}

build() { # build MODULE_DIR PACKAGE OUTPUT [LDFLAGS]
	local dir=$1 pkg=$2 out=$3 ldflags=${4:-} key=""
	wanted "$out" || return 0
	if [ "$dir" = kwok ]; then
		key=$(cat "$tools/$dir/go.mod" "$tools/$dir/go.sum" | sha256sum | cut -c1-12)
	fi
	if [ -x "$bin/$out" ] && { [ -z "$key" ] || [ "$(cat "$bin/$out.stamp" 2>/dev/null)" = "$key" ]; }; then
		return 0
	fi
	echo "building $out (first time only; a few minutes on 2 cores)" >&2
	(cd "$tools/$dir" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags="-s -w $ldflags" -o "$bin/$out.tmp" "$pkg")
	mv "$bin/$out.tmp" "$bin/$out"
	[ -z "$key" ] || echo "$key" >"$bin/$out.stamp"
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
build kube k8s.io/kubernetes/cmd/kube-scheduler kube-scheduler "$kube_ldflags"
# As helm's own Makefile: its version, and the Kubernetes version of its
# client-go as the default of 'helm template' and 'helm lint'.
helm_version=$(sed -n 's|^require helm.sh/helm/v3 ||p' "$tools/helm/go.mod")
k8s_minor=$(sed -n 's|^\tk8s.io/client-go v0\.\([0-9]*\)\..*|\1|p' "$tools/helm/go.mod")
build helm helm.sh/helm/v3/cmd/helm helm "-X helm.sh/helm/v3/internal/version.version=$helm_version \
-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$k8s_minor \
-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$k8s_minor"
build kwok sigs.k8s.io/kwok/cmd/kwok kwok
# kwok plays only the stages it is given: those kwokctl gives it by default
# (nodes ready at once, with a heartbeat Lease; pods ready at once), from
# kwok's module, so they always match the kwok built.
if wanted kwok && ! [ "$bin/kwok-stages.yaml" -nt "$bin/kwok" ]; then
	stages=$(cd "$tools/kwok" && GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage
	for f in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
		pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
		echo ---
		cat "$stages/$f.yaml"
	done >"$bin/kwok-stages.yaml.tmp"
	mv "$bin/kwok-stages.yaml.tmp" "$bin/kwok-stages.yaml"
fi
echo "$bin"
