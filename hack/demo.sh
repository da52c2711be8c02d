#!/usr/bin/env bash
# make demo: start a local control plane, show kgen at work on it, clean up.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
dir="$root/.cache/demo"
kgenctl="$root/bin/kgenctl"

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT

say "Starting etcd, kube-apiserver and kube-controller-manager"
rm -rf "$dir"
go build -o "$root/bin/localcp" ./hack/localcp
"$root/bin/localcp" --dir "$dir" >"$root/.cache/demo-localcp.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 600); do
	[ -f "$dir/ready" ] && break
	kill -0 "${pids[0]}" 2>/dev/null || { cat "$root/.cache/demo-localcp.log"; exit 1; }
	sleep 0.2
done
[ -f "$dir/ready" ] || { echo "control plane did not start"; cat "$root/.cache/demo-localcp.log"; exit 1; }
export KUBECONFIG="$dir/kubeconfig"
kubectl version 2>/dev/null | sed 's/^/  /' || true

say "kgenctl gvk-to-gvr resolves any kind through live discovery"
kubectl apply -f e2e/testdata/octopus-crd.yaml >/dev/null
kubectl wait --for=condition=Established crd/octopodes.zoo.example.com --timeout=60s >/dev/null
for ref in deploy v1/ConfigMap Deployment.v1.apps octopodes oct; do
	echo "\$ kgenctl gvk-to-gvr $ref"
	"$kgenctl" gvk-to-gvr "$ref"
done
echo "\$ kgenctl gvk-to-gvr Octopus -o json"
"$kgenctl" gvk-to-gvr Octopus -o json

say "Done; the control plane is stopped and its folder removed"
cleanup
rm -rf "$dir"
