#!/usr/bin/env bash
# CPU time per GeneratePatches request, from /proc/PID/stat around a fixed number of
# HTTP/2 requests: steadier than req/s on a busy 2-core machine, where the load
# generator shares the cores. Each binary serves with the answer cache off (the miss
# path) next to the floor; rounds alternate between the servers, and the medians and
# the median of each round's floor/stackhook CPU ratio (the floor's share of a miss's
# CPU: the throughput ratio the machine would give if CPU were all that counted) are
# printed.
# Usage: bash benches/cpu-per-request.sh [stackhook_binary...]
#   (default: $CARGO_TARGET_DIR/release/stackhook; build it and the floor first with
#   `cargo build --release --bin stackhook --bench floor`)
# ROUNDS (default 6), N requests per round (default 20000), CONNS x STREAMS (1 x 10),
# GP_BODY, GP_HANDLER as in load-h2.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=${CARGO_TARGET_DIR:-target}
ROUNDS=${ROUNDS:-6}
N=${N:-20000}
CONNS=${CONNS:-1}
STREAMS=${STREAMS:-10}
GP_BODY=${GP_BODY:-generate-patches-12}
GP_HANDLER=${GP_HANDLER:-openstack-generate-patches}
BODY=benches/bodies/$GP_BODY.json
PATH_GP=/hooks.runtime.cluster.x-k8s.io/v1alpha1/generatepatches/$GP_HANDLER
command -v h2load >/dev/null || { apt-get update -qq && apt-get install -y -qq nghttp2-client; }
FLOOR=$(ls -t "$TARGET"/release/deps/floor-* | grep -v '\.d$' | head -1)
BINS=("$@")
[ ${#BINS[@]} -gt 0 ] || BINS=("$TARGET/release/stackhook")
WORK=$(mktemp -d)
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true; rm -rf "$WORK"' EXIT

NAMES=() PORTS=()
for i in "${!BINS[@]}"; do
  port=$((19460 + i))
  "${BINS[$i]}" serve --listen "127.0.0.1:$port" --admin-listen "127.0.0.1:$((18460 + i))" \
    --self-signed-dir "$WORK/s$i" --capi-version 1.14 --shutdown-grace-seconds 0 \
    --patch-cache-entries 0 >"$WORK/s$i.log" 2>&1 &
  PIDS+=($!) NAMES+=("${BINS[$i]}") PORTS+=("$port")
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$((18460 + i))/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
done
# The floor writes stackhook's own answer (see benches/floor.rs).
mkdir -p "$WORK/answers"
curl -sfk --data-binary "@$BODY" "https://localhost:${PORTS[0]}$PATH_GP" \
  -o "$WORK/answers/generatepatches_$GP_HANDLER.json"
FLOOR_ANSWERS="$WORK/answers" "$FLOOR" 127.0.0.1:19459 "$WORK/floor" >"$WORK/floor.log" 2>&1 &
PIDS+=($!) NAMES+=("floor") PORTS+=(19459)
for _ in $(seq 50); do grep -q listening "$WORK/floor.log" && break; sleep 0.1; done

tck=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
for _ in $(seq "$ROUNDS"); do
  for i in "${!PIDS[@]}"; do
    url="https://localhost:${PORTS[$i]}$PATH_GP"
    h2load -n 2000 -c "$CONNS" -m "$STREAMS" -t 1 -d "$BODY" "$url" >/dev/null 2>&1
    before=$(cpu "${PIDS[$i]}")
    h2load -n "$N" -c "$CONNS" -m "$STREAMS" -t 1 -d "$BODY" "$url" >"$WORK/out" 2>&1
    grep -q "$N succeeded" "$WORK/out" || { echo "failed requests on ${NAMES[$i]}" >&2; cat "$WORK/out" >&2; exit 1; }
    after=$(cpu "${PIDS[$i]}")
    echo "$i $(((after - before) * 1000000 / tck / N))" >>"$WORK/samples"
  done
done
echo "CPU µs per request, $ROUNDS rounds of $N (h2load ${CONNS}x$STREAMS, $GP_BODY -> $GP_HANDLER, cache off)"
for i in "${!PIDS[@]}"; do
  samples=$(awk -v i="$i" '$1 == i {print $2}' "$WORK/samples" | sort -n | tr '\n' ' ')
  median=$(awk -v i="$i" '$1 == i {print $2}' "$WORK/samples" | sort -n |
    awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}')
  printf '%s: median %s (%s)\n' "${NAMES[$i]}" "$median" "$samples"
done
# Each round measures every server within seconds of the others, so a round's ratio
# is steadier than the medians above when the machine's speed drifts between rounds.
floor=$((${#PIDS[@]} - 1))
for i in $(seq 0 $((floor - 1))); do
  awk -v i="$i" -v f="$floor" -v n="$((floor + 1))" '
    { v[NR] = $2 }
    END {
      for (r = 0; r * n < NR; r++) { a = v[r * n + i + 1]; b = v[r * n + f + 1]; if (a > 0) q[++k] = b / a }
      for (x = 1; x <= k; x++) for (y = x + 1; y <= k; y++) if (q[y] < q[x]) { t = q[x]; q[x] = q[y]; q[y] = t }
      m = (k % 2) ? q[(k + 1) / 2] : (q[k / 2] + q[k / 2 + 1]) / 2
      printf "floor / %s per round: median %.1f %% (", name, 100 * m
      for (x = 1; x <= k; x++) printf "%s%.0f", (x > 1 ? " " : ""), 100 * q[x]
      print ")"
    }' name="${NAMES[$i]}" "$WORK/samples"
done
