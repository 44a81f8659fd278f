#!/usr/bin/env bash
# What one more idle device costs: Valkey and relay CPU per idle tick as the
# slope between two fleet sizes measured in one run, so the servers' and
# relays' own cost (cron, gossip, sweeps, subscriptions, the one site's
# polling), which swings by more than the figure sought on this machine,
# cancels instead of being subtracted from a separate baseline.
#
#   test/bench/idletick.sh                         # 3 replicas, one private redis-server
#   BENCH_VALKEY=cluster test/bench/idletick.sh    # 3 replicas on a 3-primary cluster (.ci/cluster)
#   REPLICAS=1 test/bench/idletick.sh              # one replica
#   RELAY_BIN_DIR=dir test/bench/idletick.sh       # relay and loadgen built elsewhere (another revision)
#   VALKEY_CPU=1 taskset -c 0 test/bench/idletick.sh   # the server on CPU 1 alone, everything else on CPU 0
#
# Fleet A (FLEET_A daemons, default 1,000) ticks for the whole run; fleet B
# (FLEET_B more, default 3,000) is added and taken away again, ROUNDS times
# (default 2): windows A, A+B, A, A+B, A, each WINDOW seconds (default 30)
# after a settling pause. Every daemon is the byollm 0.1.1 Runner when idle
# (loadgen -profile real -idle-start: a heartbeat, then a claim, every
# 8.5-11.5 s at a random phase), authenticated from the projection
# (-pair none); each fleet has one site that enqueues a job every 50-100 s
# and pumps once a second, so the run exercises the full daemon path.
# Ticks are counted from the relays' own request counters (heartbeats +
# claims, / 2). Per tick = (cost/s in the A+B windows - the mean of the A
# windows either side) / (ticks/s likewise), per round; the report gives
# each round and their mean, plus the raw figures of every window.
#
# Output: $OUT/idletick.md (and idletick-windows.jsonl, the raw samples).
set -euo pipefail

cd "$(dirname "$0")/../.."
. test/bench/lib.sh
bench_init idletick
rm -f "$OUT"/idletick-*

FLEET_A=${FLEET_A:-1000}
FLEET_B=${FLEET_B:-3000}
ROUNDS=${ROUNDS:-2}
WINDOW=${WINDOW:-30}
SETTLE=${SETTLE:-40}
REPLICAS=${REPLICAS:-3}
export CLUSTER_BASE_PORT=${CLUSTER_BASE_PORT:-7101} CLUSTER_REPLICAS=0 CLUSTER_DIR=$OUT/idletick-nodes
if [ "${BENCH_VALKEY:-single}" = cluster ]; then
  PRIMARIES=("$CLUSTER_BASE_PORT" $((CLUSTER_BASE_PORT + 1)) $((CLUSTER_BASE_PORT + 2)))
  on_exit() { bash .ci/cluster stop; }
  CLUSTER_URL=$(bash .ci/cluster start)
  WHERE="a 3-primary cluster"
else
  PRIMARIES=("$CLUSTER_BASE_PORT")
  "$SERVER" --port "$CLUSTER_BASE_PORT" --bind 127.0.0.1 --save '' --appendonly no >"$OUT/idletick-valkey.log" 2>&1 &
  STARTED+=($!)
  if [ -n "${VALKEY_CPU:-}" ]; then
    taskset -pc "$VALKEY_CPU" $! >/dev/null
    WHERE_CPU=", the server alone on CPU $VALKEY_CPU, relays and load generators on CPU $(taskset -pc $$ | sed 's/.*: //')"
  fi
  for _ in $(seq 1 50); do "$CLI" -p "$CLUSTER_BASE_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
  CLUSTER_URL=redis://127.0.0.1:$CLUSTER_BASE_PORT/0
  WHERE="one redis-server${WHERE_CPU:-}"
fi
relay_bins

NS="itick-$(head -c 4 /dev/urandom | od -An -tx1 | tr -d ' \n')"
start_relays "$NS" "$REPLICAS"
replicas=$(IFS=,; echo "${URLS[*]}")
admins=$(IFS=,; echo "${ADMINS[*]}")
# Fleet A's enqueuing outlasts every window, each round's fleet B drain
# (at most 20 s) included.
TOTAL=$((SETTLE + ROUNDS * (2 * SETTLE + 2 * WINDOW + 25) + WINDOW + 60))

# fleet NAME DAEMONS DURATION: one fleet of idle Runners in the background;
# its pid in FLEET_PID. Its run id is fixed, so fleet B's second start
# brings back the same devices. A fleet stops on its own at DURATION and
# then drains (for longer than an idle daemon's longest sleep, about 11.5
# s), so a job enqueued just before it stops is collected, not counted in
# flight: a signal would cancel the drain.
fleet() {
  "$BIN/loadgen" -replicas "$replicas" -admin "$admins" -admin-token "$TOKEN" -run-id "$NS-$1" \
    -profile real -idle-start -sites 1 -daemons "$2" -slots 1 -pair none -rate 0.015 -arrivals poisson \
    -site-pump 1s -heartbeat 10s -duration "$3" -drain 20s -ttl 120s -quiet \
    -json "$OUT/idletick-$1.json" >"$OUT/idletick-$1.txt" 2>&1 &
  FLEET_PID=$!; STARTED+=("$FLEET_PID")
}

# window LABEL: WINDOW seconds of samples, one JSON line each edge.
window() {
  local a b
  a=$(SNAPSHOT_REQUESTS=1 snapshot)
  sleep "$WINDOW"
  b=$(SNAPSHOT_REQUESTS=1 snapshot)
  printf '{"label": "%s", "a": %s, "b": %s}\n' "$1" "$a" "$b" >>"$OUT/idletick-windows.jsonl"
}

log "fleet A: $FLEET_A daemons; $REPLICAS replica(s) on $WHERE; run about $((TOTAL - 60)) s"
fleet A "$FLEET_A" "${TOTAL}s"; PID_A=$FLEET_PID
sleep "$SETTLE"
window A
for r in $(seq 1 "$ROUNDS"); do
  log "round $r: fleet B, $FLEET_B more daemons"
  # Its enqueuing ends no earlier than the window (it starts counting
  # after its own setup), then it drains and exits.
  fleet B "$FLEET_B" "$((SETTLE + WINDOW))s"; PID_B=$FLEET_PID
  sleep "$SETTLE"
  window AB
  wait "$PID_B" 2>/dev/null || true
  log "round $r: fleet B stopped"
  sleep "$SETTLE"
  window A
done
log "fleet A: enqueuing ends within a minute, then it drains"
wait "$PID_A" 2>/dev/null || true

python3 - "$OUT" "$CLK_TCK" "$FLEET_A" "$FLEET_B" "$REPLICAS" "$WHERE" <<'EOF' | tee "$OUT/idletick.md"
import json, sys, os
out, tck, fa, fb, reps, where = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
ws = [json.loads(l) for l in open(f"{out}/idletick-windows.jsonl") if l.strip()]
def rates(w):
    a, b = w["a"], w["b"]
    s = b["t"] - a["t"]
    d = lambda k: sum(y[k] - x[k] for x, y in zip(a["nodes"], b["nodes"])) / s
    ticks = ((b["daemonRequests"]["heartbeat"] - a["daemonRequests"]["heartbeat"]) +
             (b["daemonRequests"]["claim"] - a["daemonRequests"]["claim"])) / 2 / s
    return {"label": w["label"], "secs": s, "ticks": ticks, "valkey": d("cpu"), "cmds": d("calls"),
            "scripts": d("scripts"), "reads": d("reads"), "relay": (b["relayTicks"] - a["relayTicks"]) / tck / s}
rs = [rates(w) for w in ws]
batch = os.environ.get("RELAY_DAEMON_HEARTBEAT_BATCH", "default (100ms)")
idle_batch = os.environ.get("RELAY_DAEMON_IDLE_HEARTBEAT_BATCH", "default (1s)")
print(f"### Idle tick by slope: fleets of {fa} and {fa + fb} idle daemons, {reps} replica(s) on {where} (heartbeat batch {batch}, idle {idle_batch})\n")
print("| window | s | ticks/s | Valkey CPU ms/s | relay CPU ms/s | commands/s | scripts/s | round trips/s | Valkey µs/tick, raw |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rs:
    print(f"| {r['label']} | {r['secs']:.0f} | {r['ticks']:.1f} | {1000*r['valkey']:.2f} | {1000*r['relay']:.1f} | {r['cmds']:.0f} | {r['scripts']:.1f} | {r['reads']:.0f} | {1e6*r['valkey']/max(r['ticks'],1e-9):.0f} |")
print()
print("| round | Δ ticks/s | Valkey CPU µs / tick | relay CPU µs / tick (all replicas) | commands / tick | scripts / tick | round trips / tick |")
print("|---|---|---|---|---|---|---|")
per = []
for i in range(1, len(rs) - 1, 2):
    ab, before, after = rs[i], rs[i - 1], rs[i + 1]
    base = {k: (before[k] + after[k]) / 2 for k in ("ticks", "valkey", "relay", "cmds", "scripts", "reads")}
    dt = ab["ticks"] - base["ticks"]
    f = {k: (ab[k] - base[k]) / dt for k in ("valkey", "relay", "cmds", "scripts", "reads")}
    per.append(f)
    print(f"| {len(per)} | {dt:.1f} | {1e6*f['valkey']:.1f} | {1e6*f['relay']:.0f} | {f['cmds']:.2f} | {f['scripts']:.3f} | {f['reads']:.3f} |")
if per:
    m = {k: sum(p[k] for p in per) / len(per) for k in per[0]}
    print(f"| mean | | **{1e6*m['valkey']:.1f}** | {1e6*m['relay']:.0f} | {m['cmds']:.2f} | {m['scripts']:.3f} | {m['reads']:.3f} |")
for name in ("A", "B"):
    p = f"{out}/idletick-{name}.json"
    if os.path.exists(p):
        rep = json.load(open(p))
        e = rep.get("endpoints", {})
        print(f"\nfleet {name}: {rep['jobs']['collected']} jobs collected, lost {rep['jobs']['lost']}, run twice {rep['jobs']['runTwice']}; "
              + ", ".join(f"{k} {v.get('requests', 0)}" for k, v in sorted(e.items())))
EOF
