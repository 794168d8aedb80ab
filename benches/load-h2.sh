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
# Usage: bash benches/load-h2.sh [requests_per_run]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
GP_BODY=${GP_BODY:-generate-patches-12}
GP_HANDLER=${GP_HANDLER:-openstack-generate-patches}
MISS_PERCENT=${MISS_PERCENT:-20}
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

# p50/p99 in ms from h2load's per-request log (third column: microseconds).
percentiles() {
  sort -n -k3 "$1" | awk '{d[NR]=$3} END {
    i50=int(NR*0.50); i99=int(NR*0.99); if (i50<1) i50=1; if (i99<1) i99=1;
    printf "%.2f %.2f %.2f", d[i50]/1000, d[i99]/1000, d[NR]/1000 }'
}
h2run() { # label server_name port conns streams
  local log="$WORK/h2load-$1-$2.log"
  out=$(h2load -n "$N" -c "$4" -m "$5" -t 1 -d "$BODY" --log-file="$log" \
    "https://localhost:$3$PATH_GP" 2>&1)
  rps=$(echo "$out" | awk '/^finished in/ {print $4}')
  errs=$(echo "$out" | awk '/^requests:/ {print $10 + $12 + $14}')
  read -r p50 p99 max <<<"$(percentiles "$log")"
  printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$1" "$2" "${rps%.*}" "$p50" "$p99" "$max" "$errs"
}
mixrun() { # label server_name port ca conns streams
  out=$("$H2MIX" "https://localhost:$3$PATH_GP" "$BODY" "$4" "$5" "$6" "$N" "$MISS_PERCENT" | grep RESULT)
  eval "${out#RESULT }"
  printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$1" "$2" "$rps" "$p50_ms" "$p99_ms" "$max_ms" "$errors"
}

echo "GeneratePatches $GP_BODY -> $GP_HANDLER, $N requests per run, mix: $MISS_PERCENT % misses"
echo
printf '| case | server | req/s | p50 ms | p99 ms | max ms | errors |\n|---|---|---|---|---|---|---|\n'
for shape in "1 10" "4 8"; do
  read -r c m <<<"$shape"
  h2run "miss ${c}x${m}" stackhook 19443 "$c" "$m"
  h2run "miss ${c}x${m}" floor 19444 "$c" "$m"
  h2run "hit ${c}x${m}" stackhook 19445 "$c" "$m"
  h2run "hit ${c}x${m}" floor 19444 "$c" "$m"
  mixrun "mix ${c}x${m}" stackhook 19445 "$WORK/hit/ca.crt" "$c" "$m"
  mixrun "mix ${c}x${m}" floor 19444 "$WORK/floor/ca.crt" "$c" "$m"
done
rss() { awk '/VmHWM/{printf "%.1f", $2/1024}' "/proc/$1/status"; }
echo
echo "peak RSS: stackhook cache off $(rss "$MISS_PID") MiB, cache on $(rss "$HIT_PID") MiB, floor $(rss "$FLOOR_PID") MiB"
