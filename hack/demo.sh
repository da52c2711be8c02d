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
kubectl apply -f examples/webapp/crd.yaml >/dev/null
kubectl wait --for=condition=Established crd/webapps.example.com --timeout=60s >/dev/null
for ref in deploy webapps.example.com; do
	echo "\$ kgenctl gvk-to-gvr $ref"
	"$kgenctl" gvk-to-gvr "$ref"
done

say "kgenctl run, serving Rule objects; kubectl apply -f examples/webapp/rules.yaml"
kubectl apply -f charts/kgen/crds/rules.kgen.dev.yaml >/dev/null
kubectl wait --for=condition=Established crd/rules.kgen.dev --timeout=60s >/dev/null
kubectl create namespace team-a >/dev/null
"$kgenctl" run --metrics-bind-address 127.0.0.1:0 \
	--health-probe-bind-address 127.0.0.1:18081 >"$root/.cache/demo-kgen.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
	curl -fs http://127.0.0.1:18081/readyz >/dev/null 2>&1 && break
	sleep 0.1
done
echo "/readyz: $(curl -s http://127.0.0.1:18081/readyz)"
kubectl apply -f examples/webapp/rules.yaml
kubectl wait rule/webapp --for=condition=Ready --timeout=30s >/dev/null
kubectl get rules

say "A WebApp appears; kgen makes its ConfigMap, Deployment and Service"
cat examples/webapp/parent.yaml
kubectl apply -f examples/webapp/parent.yaml
kubectl wait -n team-a --for=create deployment/shop service/shop configmap/shop-config --timeout=30s >/dev/null
kubectl get configmaps,deployments,services -n team-a -l app.kubernetes.io/managed-by=kgen
kubectl wait -n team-a webapp/shop --for=jsonpath='{.status.configName}'=shop-config --timeout=30s >/dev/null
echo
echo "The WebApp's status (no kubelet runs here, so its Deployment is not available):"
kubectl get webapp shop -n team-a -o jsonpath='{.status}' | python3 -m json.tool 2>/dev/null || kubectl get webapp shop -n team-a -o jsonpath='{.status}'

say "Drift is repaired: delete the ConfigMap and change the Deployment's replicas"
kubectl delete configmap shop-config -n team-a
kubectl scale deployment shop -n team-a --replicas=5 >/dev/null
kubectl wait -n team-a --for=create configmap/shop-config --timeout=30s >/dev/null
kubectl wait -n team-a deployment/shop --for=jsonpath='{.spec.replicas}'=2 --timeout=30s >/dev/null
kubectl get configmap shop-config -n team-a
echo "deployment/shop replicas: $(kubectl get deployment shop -n team-a -o jsonpath='{.spec.replicas}') (set back from 5)"

say "The Deployment reports its replicas available (by hand, standing in for a kubelet): Ready turns True"
kubectl patch deployment shop -n team-a --subresource=status --type=merge \
	-p '{"status":{"replicas":2,"readyReplicas":2,"availableReplicas":2}}' >/dev/null
kubectl wait -n team-a webapp/shop --for=condition=Ready --timeout=30s
kubectl get webapp shop -n team-a

say "The rule changes live: edit the Rule object, and the children follow, with no restart"
echo "\$ kubectl patch rule webapp --type=json -p '[{\"op\":\"add\",\"path\":\"/spec/children/0/template/data/greeting\",\"value\":\"hello from \${parent.metadata.name}\"}]'"
kubectl patch rule webapp --type=json \
	-p '[{"op":"add","path":"/spec/children/0/template/data/greeting","value":"hello from ${parent.metadata.name}"}]' >/dev/null
kubectl wait -n team-a configmap/shop-config --for=jsonpath='{.data.greeting}'='hello from shop' --timeout=30s >/dev/null
kubectl get configmap shop-config -n team-a -o jsonpath='{.data}'; echo
echo "An invalid edit is refused, reported, and the previous version keeps running:"
kubectl patch rule webapp --type=json \
	-p '[{"op":"replace","path":"/spec/children/0/template/data/greeting","value":"${parent.spec.imgae +}"}]' >/dev/null
kubectl wait rule/webapp --for=condition=Accepted=False --timeout=30s >/dev/null
kubectl get rule webapp -o jsonpath='{range .status.conditions[*]}{.type}={.status} ({.reason}): {.message}{"\n"}{end}'
kubectl get rules

say "Events kgen recorded on the WebApp"
kubectl get events -n team-a --field-selector involvedObject.kind=WebApp

say "Done; the control plane is stopped and its folder removed"
cleanup
rm -rf "$dir"
