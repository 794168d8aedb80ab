#!/usr/bin/env bash
# Memory of the in-process controllers at scale: RSS of `stackhook serve --controllers`
# watching N OpenStackClusters and M OpenStackMachines (CAPO-sized specs and statuses),
# with one CAPI Cluster per OpenStackCluster and one Machine per OpenStackMachine
# (CAPI-sized statuses), on the real API server of ../shared/kube.
# The objects have no CAPI owner references, so every reconcile stops before the
# cloud: what is measured is the controllers' watches, caches and queues.
#
# Usage: bash benches/controllers-scale.sh [clusters] [machines]
#   CAPI=0            no CAPI Clusters and Machines (the shape of the first measurement)
#   SKIP_BUILD=1      use the release binary as it is
#   BIN=path          the binary to run (and to print the CRDs) instead of the release build
#   VARIANTS=file     one run per line, `label|binary|VAR=value ...` (binary empty: $BIN),
#                     all against the same objects
#   PARALLEL=N        kubectl applies creating the objects side by side (4)
#   MEMORY_LIMIT_MIB=N  run the server in a memory cgroup limited to N MiB, as a pod's
#                     memory limit does (root, cgroup v1 memory controller at
#                     /sys/fs/cgroup/memory or cgroup v2 at /sys/fs/cgroup with it
#                     enabled); the page cache is dropped first, so the binary's pages
#                     are charged to the cgroup as it maps them. Prints the cgroup's peak
#                     usage, how often it hit the limit, and OOM kills.
# Prints, per run: idle RSS (controllers on, CRDs installed, before any object exists),
# then the time until the reconcile count reaches the object count, and 10 s later the
# peak RSS (VmHWM) and the RSS, split into anonymous memory and mapped file pages (the
# binary's code, clean and reclaimable).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1000}
M=${2:-3000}
CAPI=${CAPI:-1}
KUBE_DIR=${STACKHOOK_KUBE_DIR:-../shared/kube}
[ -f "$KUBE_DIR/up" ] || { echo "no $KUBE_DIR: this benchmark needs its API server"; exit 0; }
command -v kubectl >/dev/null || { echo "kubectl is needed"; exit 1; }
if [ -z "${SKIP_BUILD:-}" ]; then
  cargo build --release --locked --bin stackhook >/dev/null 2>&1 || cargo build --release --locked --bin stackhook
fi
TARGET=${CARGO_TARGET_DIR:-target}
BIN=${BIN:-$TARGET/release/stackhook}
WORK=$(mktemp -d)
SERVE_PID=
stop_serve() {
  if [ -n "$SERVE_PID" ]; then
    kill "$SERVE_PID" 2>/dev/null || true
    wait "$SERVE_PID" 2>/dev/null || true
    SERVE_PID=
  fi
  if [ -n "${CG:-}" ]; then
    rmdir "$CG" 2>/dev/null || true
    CG=
  fi
}
trap 'stop_serve; bash "$KUBE_DIR/down" "$WORK/kube" >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT
export KUBECONFIG=$(bash "$KUBE_DIR/up" "$WORK/kube" | tail -n 1)
k() { kubectl --request-timeout=300s "$@"; }
"$BIN" crds | k apply --server-side -f - >/dev/null
k apply --server-side -f "$KUBE_DIR/crds/cluster-api-v1.13.5/" >/dev/null
k create namespace scale >/dev/null

if [ -n "${VARIANTS:-}" ]; then
  cp "$VARIANTS" "$WORK/variants"
else
  echo "current||" >"$WORK/variants"
fi

# `serve LABEL BINARY ENV...`: starts the controllers, sets SERVE_PID.
CG=
# `cgroup LABEL`: a fresh memory cgroup limited to MEMORY_LIMIT_MIB, path in CG.
cgroup() {
  CG=
  [ -n "${MEMORY_LIMIT_MIB:-}" ] || return 0
  local bytes=$((MEMORY_LIMIT_MIB * 1048576))
  if [ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then
    CG=/sys/fs/cgroup/memory/stackhook-scale-$$-$1
    mkdir -p "$CG"
    echo "$bytes" >"$CG/memory.limit_in_bytes"
  elif grep -qw memory /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; then
    CG=/sys/fs/cgroup/stackhook-scale-$$-$1
    mkdir -p "$CG"
    echo "$bytes" >"$CG/memory.max"
  else
    echo "MEMORY_LIMIT_MIB needs a writable memory cgroup" >&2
    exit 1
  fi
  sync
  echo 3 >/proc/sys/vm/drop_caches
}
# Peak usage, times the limit was hit, OOM kills of the cgroup in CG.
cgroup_report() {
  [ -n "$CG" ] || return 0
  if [ -f "$CG/memory.max_usage_in_bytes" ]; then
    printf '    cgroup (limit %s MiB): peak %.1f MiB, limit hit %s times, %s\n' "$MEMORY_LIMIT_MIB" \
      "$(awk '{print $1/1048576}' "$CG/memory.max_usage_in_bytes")" "$(cat "$CG/memory.failcnt")" \
      "$(awk '$1 == "oom_kill" {print "OOM kills " $2}' "$CG/memory.oom_control")"
  else
    printf '    cgroup (limit %s MiB): peak %.1f MiB, limit hit %s times, OOM kills %s\n' "$MEMORY_LIMIT_MIB" \
      "$(awk '{print $1/1048576}' "$CG/memory.peak")" \
      "$(awk '$1 == "max" {print $2}' "$CG/memory.events")" \
      "$(awk '$1 == "oom_kill" {print $2}' "$CG/memory.events")"
  fi
}
# `serve LABEL BINARY ENV...`: starts the controllers (in the cgroup when asked), sets
# SERVE_PID.
serve() {
  local label=$1 bin=${2:-$BIN}
  shift 2
  cgroup "$label"
  CG="$CG" sh -c '[ -z "$CG" ] || echo $$ >"$CG/cgroup.procs"; exec "$@"' sh \
    env "$@" "$bin" serve --controllers --kubeconfig "$KUBECONFIG" --leader-election=false \
    --listen 127.0.0.1:19543 --admin-listen 127.0.0.1:18180 --self-signed-dir "$WORK/ss" \
    --log-format json >"$WORK/serve-$label.log" 2>&1 &
  SERVE_PID=$!
}
reconciles() {
  { curl -sf http://127.0.0.1:18180/metrics 2>/dev/null || true; } |
    awk '/^stackhook_controller_reconciles_total/ {s += $2} END {print s + 0}'
}
mib() { awk -v k="$1" '$1 == k":" {printf "%.1f", $2/1024}' "/proc/$SERVE_PID/status"; }

echo "idle (controllers on, no objects), 10 s after start:"
while IFS='|' read -r label bin envs; do
  [ -n "$label" ] || continue
  # shellcheck disable=SC2086
  serve "$label" "$bin" $envs
  sleep 10
  echo "  $label: RSS $(mib VmRSS) MiB (anonymous $(mib RssAnon), file $(mib RssFile)), peak $(mib VmHWM) MiB"
  cgroup_report
  stop_serve
done <"$WORK/variants"

PARALLEL=${PARALLEL:-4}
python3 - "$N" "$M" "$CAPI" "$WORK" "$PARALLEL" <<'EOF'
import json, sys
n, m, capi, work, parts = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4], int(sys.argv[5])
G = "infrastructure.cluster.x-k8s.io/v1beta1"
C = "cluster.x-k8s.io/v1beta2"
T = "2026-01-01T00:00:00Z"
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
def conditions(kinds):
    return [{"type": t, "status": "True", "reason": "Ready", "message": "",
             "lastTransitionTime": T, "observedGeneration": 1} for t in kinds]
def cluster(i):
    name = "c%04d" % i
    return {"apiVersion": C, "kind": "Cluster",
            "metadata": {"name": name, "namespace": "scale",
                         "labels": {"cluster.x-k8s.io/cluster-name": name}},
            "spec": {"clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]},
                                        "services": {"cidrBlocks": ["10.96.0.0/12"]}},
                     "controlPlaneEndpoint": {"host": "192.0.2.10", "port": 6443},
                     "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                           "kind": "OpenStackCluster", "name": name},
                     "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io",
                                         "kind": "KubeadmControlPlane", "name": name + "-cp"}}}
def cluster_status(i):
    name = "c%04d" % i
    return {"apiVersion": C, "kind": "Cluster", "metadata": {"name": name, "namespace": "scale"},
            "status": {"phase": "Provisioned", "observedGeneration": 1,
                       "initialization": {"infrastructureProvisioned": True, "controlPlaneInitialized": True},
                       "failureDomains": [{"name": "az1", "controlPlane": True}, {"name": "az2", "controlPlane": True}],
                       "conditions": conditions(["Available", "InfrastructureReady", "ControlPlaneInitialized",
                                                 "ControlPlaneAvailable", "WorkersAvailable", "RemoteConnectionProbe",
                                                 "MachinesReady", "MachinesUpToDate", "ScalingUp", "ScalingDown",
                                                 "Remediating", "Deleting", "Paused", "TopologyReconciled"])}}
def machine(i):
    name = "c%04d-md-%d-x%04d" % (i // 3, i % 3, i)
    return {"apiVersion": C, "kind": "Machine",
            "metadata": {"name": name, "namespace": "scale",
                         "labels": {"cluster.x-k8s.io/cluster-name": "c%04d" % (i // 3),
                                    "cluster.x-k8s.io/deployment-name": "c%04d-md" % (i // 3)}},
            "spec": {"clusterName": "c%04d" % (i // 3), "version": "v1.33.1", "failureDomain": "az1",
                     "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io",
                                                 "kind": "KubeadmConfig", "name": name},
                                   "dataSecretName": name},
                     "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                           "kind": "OpenStackMachine", "name": "c%04d-md-%d" % (i // 3, i % 3)}}}
def machine_status(i):
    name = "c%04d-md-%d-x%04d" % (i // 3, i % 3, i)
    return {"apiVersion": C, "kind": "Machine", "metadata": {"name": name, "namespace": "scale"},
            "status": {"phase": "Running", "observedGeneration": 1,
                       "initialization": {"infrastructureProvisioned": True, "bootstrapDataSecretCreated": True},
                       "nodeRef": {"name": name},
                       "addresses": [{"type": "InternalIP", "address": "10.0.0.%d" % (i % 250 + 2)},
                                     {"type": "InternalDNS", "address": name}],
                       "nodeInfo": {"architecture": "amd64", "bootID": "b", "containerRuntimeVersion": "containerd://1.7.27",
                                    "kernelVersion": "6.8.0-60-generic", "kubeProxyVersion": "", "kubeletVersion": "v1.33.1",
                                    "machineID": "m", "operatingSystem": "linux", "osImage": "Ubuntu 24.04.2 LTS",
                                    "systemUUID": "s"},
                       "conditions": conditions(["Available", "Ready", "UpToDate", "BootstrapConfigReady",
                                                 "InfrastructureReady", "NodeReady", "NodeHealthy", "Deleting",
                                                 "Paused", "Updating"])}}
objects = [osc(i) for i in range(n)] + [osm(i) for i in range(m)]
statuses = [osc_status(i) for i in range(n)]
if capi:
    objects += [cluster(i) for i in range(n)] + [machine(i) for i in range(m)]
    statuses += [cluster_status(i) for i in range(n)] + [machine_status(i) for i in range(m)]
# Split into `parts` files, applied side by side.
for name, docs in (("objects", objects), ("status", statuses)):
    for p in range(parts):
        with open("%s/%s-%d.yaml" % (work, name, p), "w") as f:
            for d in docs[p::parts]:
                f.write("---\n" + json.dumps(d) + "\n")
EOF
t0=$(date +%s)
# `apply_parts NAME ARGS...`: applies NAME-0.yaml ... side by side.
apply_parts() {
  local name=$1 pids=() p
  shift
  for p in $(seq 0 $((PARALLEL - 1))); do
    k apply --server-side "$@" -f "$WORK/$name-$p.yaml" >/dev/null &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
}
apply_parts objects
apply_parts status --subresource=status
extra=""
[ "$CAPI" = 1 ] && extra=", $N Clusters and $M Machines"
echo "created $N OpenStackClusters, $M OpenStackMachines$extra in $(( $(date +%s) - t0 )) s"

total=$((N + M))
while IFS='|' read -r label bin envs; do
  [ -n "$label" ] || continue
  # shellcheck disable=SC2086
  serve "$label" "$bin" $envs
  start=$(date +%s.%N)
  seen=0
  for _ in $(seq 1200); do
    seen=$(reconciles)
    [ "${seen%.*}" -ge "$total" ] && break
    sleep 0.25
  done
  took=$(echo "$(date +%s.%N) - $start" | bc)
  sleep 10
  printf '  %s: %s reconciles in %.1f s; 10 s later peak RSS %s MiB, RSS %s MiB (anonymous %s, file %s)\n' \
    "$label" "$(reconciles)" "$took" "$(mib VmHWM)" "$(mib VmRSS)" "$(mib RssAnon)" "$(mib RssFile)"
  cgroup_report
  stop_serve
done <"$WORK/variants"
