#!/usr/bin/env bash
# Memory of the in-process controllers at scale: peak RSS of
# `stackhook serve --controllers` watching N OpenStackClusters and M OpenStackMachines
# (with CAPO-sized specs and statuses) on the real API server of ../shared/kube.
# The objects have no CAPI owner, so every reconcile stops before the cloud: what is
# measured is the controllers' watch caches and queues, not OpenStack calls.
# Usage: bash benches/controllers-scale.sh [clusters] [machines]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1000}
M=${2:-3000}
KUBE_DIR=${STACKHOOK_KUBE_DIR:-../shared/kube}
[ -f "$KUBE_DIR/up" ] || { echo "no $KUBE_DIR: this benchmark needs its API server"; exit 0; }
command -v kubectl >/dev/null || { echo "kubectl is needed"; exit 1; }
if [ -z "${SKIP_BUILD:-}" ]; then
  cargo build --release --bin stackhook >/dev/null 2>&1 || cargo build --release --bin stackhook
fi
TARGET=${CARGO_TARGET_DIR:-target}
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; bash "$KUBE_DIR/down" "$WORK/kube" >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT
export KUBECONFIG=$(bash "$KUBE_DIR/up" "$WORK/kube" | tail -n 1)
k() { kubectl --request-timeout=120s "$@"; }
"$TARGET/release/stackhook" crds | k apply --server-side -f - >/dev/null
k apply --server-side -f "$KUBE_DIR/crds/cluster-api-v1.13.5/" >/dev/null
k create namespace scale >/dev/null
python3 - "$N" "$M" "$WORK" <<'EOF'
import json, sys
n, m, work = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
G = "infrastructure.cluster.x-k8s.io/v1beta1"
def osc(i):
    name = "c%04d" % i
    return {"apiVersion": G, "kind": "OpenStackCluster",
            "metadata": {"name": name, "namespace": "scale",
                         "labels": {"cluster.x-k8s.io/cluster-name": name}},
            "spec": {"identityRef": {"name": name + "-cloud-config", "cloudName": "default"},
                     "managedSubnets": [{"cidr": "10.0.0.0/24", "dnsNameservers": ["8.8.8.8"]}],
                     "managedSecurityGroups": {"allowAllInClusterTraffic": True},
                     "apiServerLoadBalancer": {"enabled": True},
                     "externalNetwork": {"id": "2f0c9b8e-0a0c-4b6c-9a0e-0d7c7f3f8a11"},
                     "tags": ["magnum", "cluster-" + name]}}
def osc_status(i):
    name = "c%04d" % i
    sg = lambda r: {"id": "5f0c9b8e-0a0c-4b6c-9a0e-%012d" % i, "name": "k8s-cluster-scale-%s-secgroup-%s" % (name, r)}
    return {"apiVersion": G, "kind": "OpenStackCluster", "metadata": {"name": name, "namespace": "scale"},
            "status": {"ready": True,
                       "network": {"id": "3f0c9b8e-0a0c-4b6c-9a0e-%012d" % i, "name": "k8s-clusterapi-cluster-scale-" + name,
                                   "subnets": [{"id": "4f0c9b8e-0a0c-4b6c-9a0e-%012d" % i, "name": "s", "cidr": "10.0.0.0/24"}]},
                       "controlPlaneSecurityGroup": sg("controlplane"), "workerSecurityGroup": sg("worker"),
                       "apiServerLoadBalancer": {"name": "lb", "id": "6f0c9b8e-0a0c-4b6c-9a0e-%012d" % i,
                                                 "ip": "192.0.2.10", "internalIP": "10.0.0.10"},
                       "failureDomains": {"az1": {"controlPlane": True}, "az2": {"controlPlane": True}}}}
def osm(i):
    name = "c%04d-md-%d" % (i // 3, i % 3)
    return {"apiVersion": G, "kind": "OpenStackMachine",
            "metadata": {"name": name, "namespace": "scale",
                         "labels": {"cluster.x-k8s.io/cluster-name": "c%04d" % (i // 3)}},
            "spec": {"flavor": "m1.medium", "image": {"filter": {"name": "ubuntu-2204-kube-v1.33.1"}},
                     "sshKeyName": "default", "serverMetadata": [{"key": "k", "value": "v"}],
                     "rootVolume": {"sizeGiB": 50, "type": "ssd"},
                     "tags": ["magnum"]}}
with open(work + "/objects.yaml", "w") as f:
    for i in range(n): f.write("---\n" + json.dumps(osc(i)) + "\n")
    for i in range(m): f.write("---\n" + json.dumps(osm(i)) + "\n")
with open(work + "/status.yaml", "w") as f:
    for i in range(n): f.write("---\n" + json.dumps(osc_status(i)) + "\n")
EOF
t0=$(date +%s)
k apply --server-side -f "$WORK/objects.yaml" >/dev/null
k apply --server-side --subresource=status -f "$WORK/status.yaml" >/dev/null
echo "created $N OpenStackClusters and $M OpenStackMachines in $(( $(date +%s) - t0 )) s"

"$TARGET/release/stackhook" serve --controllers --kubeconfig "$KUBECONFIG" --leader-election=false \
  --listen 127.0.0.1:19543 --admin-listen 127.0.0.1:18180 --self-signed-dir "$WORK/ss" \
  --log-format json >"$WORK/serve.log" 2>&1 &
PID=$!
total=$((N + M))
for _ in $(seq 240); do
  seen=$(curl -sf http://127.0.0.1:18180/metrics 2>/dev/null |
    awk '/^stackhook_controller_reconciles_total/ {s += $2} END {print s + 0}')
  [ "${seen%.*}" -ge "$total" ] && break
  sleep 0.5
done
sleep 5
awk '/VmHWM|VmRSS/ {printf "%s %.1f MiB\n", $1, $2/1024}' "/proc/$PID/status"
echo "reconciles: $seen of $total objects"
