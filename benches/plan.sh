#!/usr/bin/env bash
# `stackhook plan` for 100 Clusters sharing one ClusterClass, both sides rendered: the
# openstack-kubeadm class of tests/fixtures/plan moves to version 2 of the openstack
# pack, which changes every Cluster's worker machine template (so every Cluster is
# rendered twice, plus once more to name the cause). Times the real binary end to end
# (reading the files, loading the packs, planning, printing JSON), ROUNDS runs, and
# prints the median and the fastest and slowest run.
#
#   cargo build --release --locked && benches/plan.sh [CLUSTERS] [ROUNDS]
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
bin=${STACKHOOK_BIN:-$here/target/release/stackhook}
clusters=${1:-100}
rounds=${2:-11}
fx=$here/tests/fixtures/plan
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/from" "$work/to"
for side in from to; do
  cp "$fx/base/templates-openstack-kubeadm.yaml" "$work/$side/"
done
cp "$fx/base/class-openstack-kubeadm.yaml" "$work/from/"
cp "$fx/pack-version/class-openstack-kubeadm.yaml" "$work/to/"
for i in $(seq 1 "$clusters"); do
  for side in from to; do
    sed "s/prod1/c$i/g" "$fx/base/cluster-prod1.yaml" >"$work/$side/cluster-$i.yaml"
  done
done

run() {
  "$bin" plan --from "$work/from" --to "$work/to" --extensions "$fx/packs" -o json >"$work/out.json" || test $? -eq 2
}
run
changed=$(grep -c '"status": "changed"' "$work/out.json")
if [ "$changed" -ne "$clusters" ]; then
  echo "expected $clusters changed Clusters, the plan has $changed" >&2
  exit 1
fi

times=()
for _ in $(seq 1 "$rounds"); do
  start=$(date +%s.%N)
  run
  end=$(date +%s.%N)
  times+=("$(echo "$end - $start" | bc)")
done
printf '%s\n' "${times[@]}" | sort -g | awk -v n="$clusters" '{v[NR]=$1} END {
  printf "%d Clusters, %d runs: median %.3f s, fastest %.3f s, slowest %.3f s\n",
    n, NR, v[int((NR+1)/2)], v[1], v[NR] }'
