#!/usr/bin/env bash
# HTTP/2 load benchmark over TLS, side by side with the floor, in CAPI's shapes: one
# client multiplexing its topology concurrency (1 connection x 10 streams) and a few
# clients (4 x 8). GeneratePatches of benches/bodies/$GP_BODY.json through handler
# $GP_HANDLER:
#   miss  stackhook with the answer cache off (every request through the whole engine)
#   hit   stackhook with the cache on; h2load resends one body, so every call but the
#         first is answered from the cache
#   mix   the cache on, every request with fresh item UIDs and MISS_PERCENT (default 20)
#         of them with a settings value never seen before (benches/h2mix.rs)
# The floor answers with stackhook's own answer bytes (FLOOR_ANSWERS), so both write
# the same amount. h2load (Debian's nghttp2-client) gives throughput and, from its
# per-request log, p50/p99; h2mix prints its own.
#
# Each case runs ROUNDS times (default 5), alternating stackhook and the floor and
# swapping which goes first each round, so drift on a busy machine falls on both. A row
# gives the median req/s of its rounds; "vs floor" is the median of the rounds'
# stackhook/floor ratios; h2load's p50/p99/max are over every request of every round,
# h2mix's are the medians of its rounds' figures.
# Usage: bash benches/load-h2.sh [requests_per_round]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=benches/rounds.sh
. benches/rounds.sh
N=${1:-20000}
GP_BODY=${GP_BODY:-generate-patches-12}
GP_HANDLER=${GP_HANDLER:-openstack-generate-patches}
MISS_PERCENT=${MISS_PERCENT:-20}
ROUNDS=${ROUNDS:-5}
command -v h2load >/dev/null || { apt-get update -qq && apt-get install -y -qq nghttp2-client; }
command -v curl >/dev/null || { apt-get update -qq && apt-get install -y -qq curl; }
if [ -z "${SKIP_BUILD:-}" ]; then
  cargo build --release --bin stackhook --bench floor --bench h2mix >/dev/null 2>&1 ||
    cargo build --release --bin stackhook --bench floor --bench h2mix
fi
TARGET=${CARGO_TARGET_DIR:-target}
bench_bin() { ls -t "$TARGET"/release/deps/"$1"-* | grep -v '\.d$' | head -1; }
FLOOR=$(bench_bin floor)
H2MIX=$(bench_bin h2mix)
WORK=$(mktemp -d)
# The servers are started in command substitutions, so they are not this shell's jobs:
# their PIDs are kept for the exit trap. They run without a shutdown grace period, so
# the ports are free for the next run as soon as the script ends.
PIDS=()
trap 'kill $(jobs -p) "${PIDS[@]}" 2>/dev/null || true; rm -rf "$WORK"' EXIT
P=/hooks.runtime.cluster.x-k8s.io/v1alpha1
PATH_GP=$P/generatepatches/$GP_HANDLER
BODY=benches/bodies/$GP_BODY.json

start_stackhook() { # name port admin_port extra-args...
  local name=$1 port=$2 admin=$3; shift 3
  "$TARGET/release/stackhook" serve --listen "127.0.0.1:$port" --admin-listen "127.0.0.1:$admin" \
    --self-signed-dir "$WORK/$name" --capi-version 1.14 --shutdown-grace-seconds 0 "$@" >"$WORK/$name.log" 2>&1 &
  echo $!
}
wait_ready() {
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$1/readyz" >/dev/null 2>&1 && return; sleep 0.1; done
  echo "server on admin port $1 did not become ready" >&2; exit 1
}
MISS_PID=$(start_stackhook miss 19443 18080 --patch-cache-entries 0)
HIT_PID=$(start_stackhook hit 19445 18081)
PIDS+=("$MISS_PID" "$HIT_PID")
wait_ready 18080
wait_ready 18081
# stackhook's own answer, for the floor to send.
mkdir -p "$WORK/answers"
curl -sf --cacert "$WORK/miss/ca.crt" --data-binary "@$BODY" \
  "https://localhost:19443$PATH_GP" -o "$WORK/answers/generatepatches_$GP_HANDLER.json"
FLOOR_ANSWERS="$WORK/answers" "$FLOOR" 127.0.0.1:19444 "$WORK/floor" >"$WORK/floor.log" 2>&1 &
FLOOR_PID=$!
for _ in $(seq 50); do grep -q listening "$WORK/floor.log" && break; sleep 0.1; done

# p50/p99/max in ms over h2load per-request logs (third column: microseconds).
percentiles() {
  cat "$@" | sort -n -k3 | awk '{d[NR]=$3} END {
    i50=int(NR*0.50); i99=int(NR*0.99); if (i50<1) i50=1; if (i99<1) i99=1;
    printf "%.2f %.2f %.2f", d[i50]/1000, d[i99]/1000, d[NR]/1000 }'
}
# One round of one server: "rps p50 p99 max errors"; h2load's log goes to $log.
h2once() { # port conns streams log
  local out rps errs
  out=$(h2load -n "$N" -c "$2" -m "$3" -t 1 -d "$BODY" --log-file="$4" \
    "https://localhost:$1$PATH_GP" 2>&1)
  rps=$(echo "$out" | awk '/^finished in/ {print $4}')
  errs=$(echo "$out" | awk '/^requests:/ {print $10 + $12 + $14}')
  echo "${rps%.*} - - - $errs"
}
mixonce() { # port ca conns streams
  local out
  out=$("$H2MIX" "https://localhost:$1$PATH_GP" "$BODY" "$2" "$3" "$4" "$N" "$MISS_PERCENT" | grep RESULT)
  eval "${out#RESULT }"
  echo "$rps $p50_ms $p99_ms $max_ms $errors"
}
# case label, stackhook port, then the runner (h2once or mixonce) and its arguments
# after the port, with @LOG standing for the round's log file and @CA for the CA bundle.
rounds() { # label sh_port sh_ca runner args...
  local label=$1 sh_port=$2 sh_ca=$3 runner=$4; shift 4
  local -a sh_rps=() fl_rps=() ratios=() sh_row=() fl_row=()
  local sh_err=0 fl_err=0 r
  for r in $(seq "$ROUNDS"); do
    local order=(stackhook floor)
    [ $((r % 2)) = 0 ] && order=(floor stackhook)
    for srv in "${order[@]}"; do
      local port=$sh_port ca=$sh_ca
      [ "$srv" = floor ] && port=19444 ca=$WORK/floor/ca.crt
      local log="$WORK/h2-${label// /_}-$srv-$r.log" args=()
      for a in "$@"; do a=${a//@LOG/$log}; args+=("${a//@CA/$ca}"); done
      read -r rps p50 p99 max errs <<<"$("$runner" "$port" "${args[@]}")"
      if [ "$srv" = stackhook ]; then
        sh_rps+=("$rps") sh_row+=("$p50 $p99 $max") sh_err=$((sh_err + errs))
      else
        fl_rps+=("$rps") fl_row+=("$p50 $p99 $max") fl_err=$((fl_err + errs))
      fi
    done
    ratios+=("$(awk -v a="${sh_rps[-1]}" -v b="${fl_rps[-1]}" 'BEGIN { printf "%.3f", a / b }')")
  done
  for srv in stackhook floor; do
    local -a rps_list row_list
    local err vs
    if [ "$srv" = stackhook ]; then
      rps_list=("${sh_rps[@]}") row_list=("${sh_row[@]}") err=$sh_err
      vs=$(vs_floor "${ratios[@]}")
    else
      rps_list=("${fl_rps[@]}") row_list=("${fl_row[@]}") err=$fl_err vs=""
    fi
    local p50 p99 max
    if [ "$runner" = h2once ]; then
      read -r p50 p99 max <<<"$(percentiles "$WORK/h2-${label// /_}-$srv-"*.log)"
    else
      p50=$(median $(printf '%s\n' "${row_list[@]}" | awk '{print $1}'))
      p99=$(median $(printf '%s\n' "${row_list[@]}" | awk '{print $2}'))
      max=$(median $(printf '%s\n' "${row_list[@]}" | awk '{print $3}'))
    fi
    printf '| %s | %s | %.0f | %s | %s | %s | %s | %s |\n' "$label" "$srv" \
      "$(median "${rps_list[@]}")" "$p50" "$p99" "$max" "$err" "$vs"
  done
}

echo "GeneratePatches $GP_BODY -> $GP_HANDLER, $ROUNDS rounds of $N requests per server and case, mix: $MISS_PERCENT % misses"
echo
printf '| case | server | req/s | p50 ms | p99 ms | max ms | errors | vs floor (rounds) |\n|---|---|---|---|---|---|---|---|\n'
for shape in "1 10" "4 8"; do
  read -r c m <<<"$shape"
  rounds "miss ${c}x${m}" 19443 "$WORK/miss/ca.crt" h2once "$c" "$m" @LOG
  rounds "hit ${c}x${m}" 19445 "$WORK/hit/ca.crt" h2once "$c" "$m" @LOG
  rounds "mix ${c}x${m}" 19445 "$WORK/hit/ca.crt" mixonce @CA "$c" "$m"
done
rss() { awk '/VmHWM/{printf "%.1f", $2/1024}' "/proc/$1/status"; }
echo
echo "peak RSS: stackhook cache off $(rss "$MISS_PID") MiB, cache on $(rss "$HIT_PID") MiB, floor $(rss "$FLOOR_PID") MiB"
