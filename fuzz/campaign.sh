#!/usr/bin/env bash
# A fuzzing campaign: every target for SECONDS with AddressSanitizer and every
# dependency instrumented (cargo-fuzz's defaults), JOBS targets at a time (one per
# core by default), from fuzz/corpus/ (seeded by seed.sh, grown by earlier runs).
# Prints each target's executions and the total; a crash fails the run and leaves its
# input in fuzz/artifacts/<target>/.
#
# usage: fuzz/campaign.sh SECONDS   (needs `cargo install cargo-fuzz`)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root/fuzz"
seconds=${1:?usage: campaign.sh SECONDS}
jobs=${JOBS:-$(nproc)}
mapfile -t targets < <(sed -n '/^\[\[bin\]\]/,/^name/s/^name *= *"\(.*\)"/\1/p' Cargo.toml)
logs=${FUZZ_LOGS:-$(mktemp -d)}
bash seed.sh >/dev/null
cp ../Cargo.lock Cargo.lock
RUSTC_BOOTSTRAP=1 cargo fuzz build
run() {
  RUSTC_BOOTSTRAP=1 cargo fuzz run "$1" -- -max_total_time="$seconds" -timeout=10 \
    -print_final_stats=1 >"$logs/$1.log" 2>&1
}
failed=()
for ((i = 0; i < ${#targets[@]}; i += jobs)); do
  batch=("${targets[@]:i:jobs}")
  pids=()
  for t in "${batch[@]}"; do
    run "$t" &
    pids+=($!)
  done
  for k in "${!batch[@]}"; do
    wait "${pids[$k]}" || failed+=("${batch[$k]}")
  done
done
total=0
for t in "${targets[@]}"; do
  n=$(sed -n 's/^stat::number_of_executed_units: *//p' "$logs/$t.log" | tail -n 1)
  echo "$t: ${n:-0} executions"
  total=$((total + ${n:-0}))
done
echo "total: $total executions in ${#targets[@]} targets x $seconds s (logs: $logs)"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "crashed: ${failed[*]}" >&2
  exit 1
fi
