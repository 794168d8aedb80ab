#!/usr/bin/env bash
# Load benchmark over TLS: stackhook serve vs the floor server (same TLS/HTTP stack,
# decode + re-encode only), with wrk (HTTP/1.1, keep-alive) on loopback.
# Usage: bash benches/load.sh [seconds_per_round] [connections]
# The GeneratePatches case posts benches/bodies/$GP_BODY.json to handler $GP_HANDLER, e.g.
#   GP_BODY=generate-patches-12 GP_HANDLER=openstack-generate-patches bash benches/load.sh 10 32
# (12 templates, 20 variables, through the embedded openstack pack).
# MISS_PERCENT=N gives N % of the requests a settings value never sent before, so only
# the rest can be answered from the cache (see benches/wrk-post.lua).
# The floor answers with stackhook's own answer bytes for each case.
# Each case runs ROUNDS times (default 3), alternating stackhook and the floor and
# swapping which goes first each round; a row gives the medians of its rounds' req/s,
# p50 and p99, and "vs floor" the median of the rounds' stackhook/floor ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=benches/rounds.sh
. benches/rounds.sh
DURATION=${1:-10}
CONNS=${2:-32}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-1}  # one wrk thread leaves the server most of the 2nd core
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
command -v curl >/dev/null || { apt-get update -qq && apt-get install -y -qq curl; }
# SKIP_BUILD=1 uses the binaries already built (e.g. while other builds are paused).
if [ -z "${SKIP_BUILD:-}" ]; then
  cargo build --release --bin stackhook --bench floor >/dev/null 2>&1 || cargo build --release --bin stackhook --bench floor
fi
TARGET=${CARGO_TARGET_DIR:-target}
FLOOR=$(ls -t "$TARGET"/release/deps/floor-* | grep -v '\.d$' | head -1)
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT

"$TARGET/release/stackhook" serve --listen 127.0.0.1:19443 --admin-listen 127.0.0.1:18080 \
  --self-signed-dir "$WORK/sh" --capi-version 1.14 --shutdown-grace-seconds 0 ${STACKHOOK_EXTRA_ARGS:-} >"$WORK/sh.log" 2>&1 &
SH_PID=$!
for _ in $(seq 100); do curl -sf http://127.0.0.1:18080/readyz >/dev/null 2>&1 && break; sleep 0.1; done

P=/hooks.runtime.cluster.x-k8s.io/v1alpha1
CASES=("discovery:$P/discovery"
       "before-cluster-upgrade:$P/beforeclusterupgrade/before-cluster-upgrade"
       "${GP_BODY:-generate-patches-empty}:$P/generatepatches/${GP_HANDLER:-generate-patches}")
# stackhook's own answers, so the floor writes as many bytes (see benches/floor.rs).
mkdir -p "$WORK/answers"
for case in "${CASES[@]}"; do
  body=${case%%:*}; path=${case#*:}
  key=${path#"$P"/}; key=${key//\//_}
  curl -sf --cacert "$WORK/sh/ca.crt" --data-binary "@benches/bodies/$body.json" \
    "https://localhost:19443$path" -o "$WORK/answers/$key.json"
done
FLOOR_ANSWERS="$WORK/answers" "$FLOOR" 127.0.0.1:19444 "$WORK/floor" >"$WORK/floor.log" 2>&1 &
FLOOR_PID=$!
for _ in $(seq 50); do grep -q listening "$WORK/floor.log" && break; sleep 0.1; done

declare -A last=()
rss() { awk '/VmHWM/{printf "%.1f", $2/1024}' "/proc/$1/status"; }
printf '| body | server | req/s | p50 ms | p99 ms | errors | vs floor (rounds) |\n|---|---|---|---|---|---|---|\n'
for case in "${CASES[@]}"; do
  body=${case%%:*}; path=${case#*:}
  declare -A RPS=() P50=() P99=() ERR=()
  ratios=()
  for r in $(seq "$ROUNDS"); do
    order=(stackhook:19443 floor:19444)
    [ $((r % 2)) = 0 ] && order=(floor:19444 stackhook:19443)
    for srv in "${order[@]}"; do
      name=${srv%%:*}; port=${srv#*:}
      out=$(BODY_FILE="benches/bodies/$body.json" wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" \
        -s benches/wrk-post.lua "https://localhost:$port$path" | grep RESULT)
      eval "${out#RESULT }"
      RPS[$name]+="$rps " P50[$name]+="$p50_ms " P99[$name]+="$p99_ms "
      ERR[$name]=$(( ${ERR[$name]:-0} + errors + non2xx ))
      last[$name]=$rps
    done
    ratios+=("$(awk -v a="${last[stackhook]}" -v b="${last[floor]}" 'BEGIN { printf "%.3f", a / b }')")
  done
  for name in stackhook floor; do
    vs=""
    if [ "$name" = stackhook ]; then
      vs=$(vs_floor "${ratios[@]}")
    fi
    # shellcheck disable=SC2086 # word splitting of the per-round lists is wanted
    printf '| %s | %s | %.0f | %s | %s | %s | %s |\n' "$body" "$name" "$(median ${RPS[$name]})" \
      "$(median ${P50[$name]})" "$(median ${P99[$name]})" "${ERR[$name]}" "$vs"
  done
done
echo
echo "peak RSS: stackhook $(rss $SH_PID) MiB, floor $(rss $FLOOR_PID) MiB"
