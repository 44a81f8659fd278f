#!/usr/bin/env bash
# Benchmark on a local Valkey Cluster (three primaries, no replicas, made by
# .ci/cluster on CLUSTER_BASE_PORT, default 7101), three relay replicas on it.
#
#   test/bench/cluster.sh                  # both parts, about 5 minutes
#   BENCH_QUICK=1 test/bench/cluster.sh    # smaller, about 2 minutes
#   BENCH_PARTS=idle test/bench/cluster.sh # the idle part only
#   BENCH_PARTS=load test/bench/cluster.sh # the load part only
#   BENCH_VALKEY=single BENCH_PARTS=idle test/bench/cluster.sh # the idle part on one redis-server
#   RELAY_BIN_DIR=dir test/bench/cluster.sh # relay and loadgen built elsewhere
#                                          # (another revision, side by side)
#
# 1. Load split: the load generator with 12 sites and 24 daemons through the
#    three replicas. Reports each primary's CPU (INFO cpu used_cpu_sys +
#    used_cpu_user, before and after) and its share of the cluster's total,
#    script calls (INFO commandstats: EVAL*, EVALSHA*, FCALL*) per collected
#    job, relay CPU per job, and the replicas' store calls a job by
#    operation (their /metrics).
# 2. Idle cost: IDLE_DAEMONS (default 1000) simulated daemons that ticked
#    like the real one when idle (a heartbeat and an empty claim every 10 s),
#    a trickle of 0.05 jobs/s so the run has an end (its one site polls once
#    a second), three replicas sweeping every second. Measured over a steady
#    window after pairing: relay CPU and Valkey CPU per idle tick (one
#    heartbeat + one claim), Valkey commands and scripts per tick. Before
#    the daemons start, the same three replicas run 20 s with no daemon: the
#    cluster's and relays' own cost (gossip, INFO, sweeps, replica records),
#    reported per second and taken off the idle figures in a second column.
#
# Output: test/bench/out/cluster.md (and cluster-*.json raw samples).
set -euo pipefail

cd "$(dirname "$0")/../.."
. test/bench/lib.sh
bench_init cluster-bench
rm -f "$OUT"/cluster-*

QUICK=${BENCH_QUICK:-0}
IDLE_DAEMONS=${IDLE_DAEMONS:-1000}
if [ "$QUICK" = 1 ]; then LOAD_JOBS=1500; IDLE_FOR=70; else LOAD_JOBS=4000; IDLE_FOR=100; fi

export CLUSTER_BASE_PORT=${CLUSTER_BASE_PORT:-7101} CLUSTER_REPLICAS=0 CLUSTER_DIR=$OUT/cluster-nodes
# BENCH_VALKEY=single: one private redis-server on CLUSTER_BASE_PORT instead
# of the cluster (its own cost is a small fraction of a cluster's gossip,
# so the idle baseline taken off is small).
SINGLE=0; [ "${BENCH_VALKEY:-cluster}" = single ] && SINGLE=1
if [ "$SINGLE" = 1 ]; then
  PRIMARIES=("$CLUSTER_BASE_PORT")
  on_exit() { :; }
else
  PRIMARIES=("$CLUSTER_BASE_PORT" $((CLUSTER_BASE_PORT + 1)) $((CLUSTER_BASE_PORT + 2)))
  on_exit() { bash .ci/cluster stop; }
fi

PARTS=${BENCH_PARTS:-load,idle}
relay_bins
log "starting the cluster on ports ${PRIMARIES[*]}"
if [ "$SINGLE" = 1 ]; then
  "$SERVER" --port "$CLUSTER_BASE_PORT" --bind 127.0.0.1 --save '' --appendonly no >"$OUT/cluster-single.log" 2>&1 &
  STARTED+=($!)
  for _ in $(seq 1 50); do "$CLI" -p "$CLUSTER_BASE_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
  CLUSTER_URL=redis://127.0.0.1:$CLUSTER_BASE_PORT/0
else
  CLUSTER_URL=$(bash .ci/cluster start)
fi
log "cluster at $CLUSTER_URL"

# ---- 1. load split ---------------------------------------------------------
if [[ $PARTS == *load* ]]; then
NS="cbench-$(head -c 4 /dev/urandom | od -An -tx1 | tr -d ' \n')"
start_relays "$NS"
replicas=$(IFS=,; echo "${URLS[*]}")
log "load: warm-up"
timeout 120 "$BIN/loadgen" -replicas "$replicas" -admin "$ADMIN" -admin-token "$TOKEN" -sites 2 -daemons 4 -jobs 200 \
  -concurrency 16 -quiet >"$OUT/cluster-warmup.txt"
store_calls >"$OUT/cluster-load-calls-before.json"
snapshot >"$OUT/cluster-load-before.json"
log "load: 12 sites, 24 daemons, $LOAD_JOBS jobs"
timeout 400 "$BIN/loadgen" -replicas "$replicas" -admin "$ADMIN" -admin-token "$TOKEN" -sites 12 -daemons 24 -slots 8 \
  -concurrency 64 -payload 256 -ttl 60s -drain 30s -jobs "$LOAD_JOBS" -results-poll 250ms -pending-poll 20ms \
  -claim-poll 50ms -fetch-poll 10ms -heartbeat 5s -quiet -json "$OUT/cluster-load.json" >"$OUT/cluster-load.txt"
snapshot >"$OUT/cluster-load-after.json"
store_calls >"$OUT/cluster-load-calls-after.json"
kill "${RELAY_PIDS[@]}" 2>/dev/null || true; wait "${RELAY_PIDS[@]}" 2>/dev/null || true
fi

# ---- 2. idle ---------------------------------------------------------------
if [[ $PARTS == *idle* ]]; then
NS="cidle-$(head -c 4 /dev/urandom | od -An -tx1 | tr -d ' \n')"
start_relays "$NS"
replicas=$(IFS=,; echo "${URLS[*]}")
IDLE_BASE=${IDLE_BASE:-40}
log "idle: baseline, $IDLE_BASE s with no daemon"
sleep 5
snapshot >"$OUT/cluster-base-before.json"
sleep "$IDLE_BASE"
snapshot >"$OUT/cluster-base-after.json"
log "idle: $IDLE_DAEMONS daemons ticking every 10 s for ${IDLE_FOR}s"
"$BIN/loadgen" -replicas "$replicas" -admin "$ADMIN" -admin-token "$TOKEN" -sites 1 -daemons "$IDLE_DAEMONS" -slots 1 \
  -pair none -rate 0.05 -duration "${IDLE_FOR}s" -drain 20s -ttl 120s -heartbeat 10s -claim-poll 10s \
  -pending-poll 1s -results-poll 1s -quiet \
  -json "$OUT/cluster-idle.json" >"$OUT/cluster-idle.txt" &
LG=$!; STARTED+=("$LG")
: >"$OUT/cluster-idle-samples.jsonl"
# Three samples: the start, then the steady window's two edges (40 s in,
# 5 s before the end), each edge with the replicas' request counts read
# after its Valkey and relay figures, so one scrape falls in the window.
snapshot >>"$OUT/cluster-idle-samples.jsonl"
sleep 40
SNAPSHOT_REQUESTS=1 snapshot >>"$OUT/cluster-idle-samples.jsonl"
sleep $((IDLE_FOR - 45))
SNAPSHOT_REQUESTS=1 snapshot >>"$OUT/cluster-idle-samples.jsonl"
wait "$LG" || log "idle loadgen exited $?"
# The same baseline again once the daemons are gone (their records stay):
# the figure taken off is the mean of the two, the range says how steady
# the no-daemon cost was.
log "idle: baseline again, $IDLE_BASE s after the daemons"
sleep 10
snapshot >"$OUT/cluster-base2-before.json"
sleep "$IDLE_BASE"
snapshot >"$OUT/cluster-base2-after.json"
fi

python3 - "$OUT" "$CLK_TCK" "$IDLE_DAEMONS" "$IDLE_FOR" <<'EOF' | tee "$OUT/cluster.md"
import json, sys
out, tck, daemons, idle_for = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
import os
def load_part():
  b = json.load(open(f"{out}/cluster-load-before.json")); a = json.load(open(f"{out}/cluster-load-after.json"))
  rep = json.load(open(f"{out}/cluster-load.json"))
  jobs = rep["jobs"]["collected"]
  cpu = [y["cpu"] - x["cpu"] for x, y in zip(b["nodes"], a["nodes"])]
  scripts = [y["scripts"] - x["scripts"] for x, y in zip(b["nodes"], a["nodes"])]
  total = sum(cpu) or 1e-9
  relay = (a["relayTicks"] - b["relayTicks"]) / tck
  on = "one redis-server" if os.environ.get("BENCH_VALKEY") == "single" else "a 3-primary cluster"
  print(f"### Load split: 12 sites, 24 daemons, 3 replicas on {on}\n")
  print(f"{jobs} jobs collected at {rep['jobsPerSecond']:.0f} jobs/s; lost {rep['jobs']['lost']}, run twice {rep['jobs']['runTwice']}\n")
  print("| primary | Valkey CPU s | share | scripts | scripts/job |\n|---|---|---|---|---|")
  for n, c, s in zip(a["nodes"], cpu, scripts):
      print(f"| :{n['port']} | {c:.2f} | {100*c/total:.0f}% | {s} | {s/max(jobs,1):.2f} |")
  print(f"| all | {total:.2f} | 100% | {sum(scripts)} | {sum(scripts)/max(jobs,1):.2f} |\n")
  print(f"Valkey CPU per job {1000*total/max(jobs,1):.3f} ms; relay CPU per job {1000*relay/max(jobs,1):.3f} ms (3 replicas)\n")
  # The replicas' store calls by operation over the same window (scraped
  # just outside it, so the scrapes' own reads are not in the Valkey
  # figures): a script's name, or the plain pipeline filed under it.
  cb, ca = (json.load(open(f"{out}/cluster-load-calls-{w}.json")) for w in ("before", "after"))
  calls = {k: v - cb.get(k, 0) for k, v in ca.items() if v - cb.get(k, 0) > 0}
  print("Store calls a job by operation (the replicas' relay_valkey_script_duration_seconds_count; a script, or the plain pipeline that stands in for it):\n")
  print("| operation | calls | a job |\n|---|---|---|")
  for k, v in sorted(calls.items(), key=lambda kv: -kv[1]):
      print(f"| {k} | {v:.0f} | {v/max(jobs,1):.2f} |")
  print()

if os.path.exists(f"{out}/cluster-load.json"):
  load_part()

if not os.path.exists(f"{out}/cluster-idle-samples.jsonl"):
    sys.exit(0)
samples = [json.loads(l) for l in open(f"{out}/cluster-idle-samples.jsonl") if l.strip()]
t0 = samples[0]["t"]
win = samples[1:]
if len(win) < 2:
    print("idle: no steady window (run too short)"); sys.exit(0)
x, y = win[0], win[-1]
secs = y["t"] - x["t"]
# An idle tick is one heartbeat and one claim; counted by the replicas
# (their /metrics), else estimated as one per daemon per 10 s.
dh = y.get("daemonRequests", {}).get("heartbeat", 0) - x.get("daemonRequests", {}).get("heartbeat", 0)
dc = y.get("daemonRequests", {}).get("claim", 0) - x.get("daemonRequests", {}).get("claim", 0)
ticks = (dh + dc) / 2 if dh > 0 and dc > 0 else daemons * secs / 10.0
reads = sum(n2.get("reads", 0) - n1.get("reads", 0) for n1, n2 in zip(x["nodes"], y["nodes"]))
vcpu = sum(n2["cpu"] - n1["cpu"] for n1, n2 in zip(x["nodes"], y["nodes"]))
calls = sum(n2["calls"] - n1["calls"] for n1, n2 in zip(x["nodes"], y["nodes"]))
scr = sum(n2["scripts"] - n1["scripts"] for n1, n2 in zip(x["nodes"], y["nodes"]))
rcpu = (y["relayTicks"] - x["relayTicks"]) / tck
irep = json.load(open(f"{out}/cluster-idle.json"))
hb = irep["endpoints"].get("heartbeat", {}).get("requests", 0); cl = irep["endpoints"].get("claim", {}).get("requests", 0)
where = "one redis-server" if os.environ.get("BENCH_VALKEY") == "single" else "a 3-primary cluster"
batch = os.environ.get("RELAY_DAEMON_HEARTBEAT_BATCH", "default")
print(f"### Idle cost: {daemons} daemons, a heartbeat and an empty claim every 10 s each, three replicas on {where} (heartbeat batch {batch})\n")
print(f"steady window {secs:.0f} s, {ticks:.0f} idle ticks ({dh:.0f} heartbeats and {dc:.0f} claims answered in it; whole run: {hb} heartbeats, {cl} claims, {irep['jobs']['collected']} jobs)\n")
# The baseline: the same replicas and cluster with no daemon, per second.
def base(name):
  bb = json.load(open(f"{out}/{name}-before.json")); ba = json.load(open(f"{out}/{name}-after.json"))
  bsecs = ba["t"] - bb["t"]
  return (bsecs,
          sum(n2["cpu"] - n1["cpu"] for n1, n2 in zip(bb["nodes"], ba["nodes"])) / bsecs,
          sum(n2["calls"] - n1["calls"] for n1, n2 in zip(bb["nodes"], ba["nodes"])) / bsecs,
          sum(n2.get("reads", 0) - n1.get("reads", 0) for n1, n2 in zip(bb["nodes"], ba["nodes"])) / bsecs,
          (ba["relayTicks"] - bb["relayTicks"]) / tck / bsecs)
bases = [base("cluster-base")]
if os.path.exists(f"{out}/cluster-base2-after.json"):
  bases.append(base("cluster-base2"))
for (bsecs, bv, bc, brd, br), when in zip(bases, ("before", "after")):
  print(f"baseline with no daemon, {when} ({bsecs:.0f} s): Valkey CPU {1000*bv:.1f} ms/s, relay CPU {1000*br:.1f} ms/s, {bc:.0f} commands/s, {brd:.0f} round trips/s\n")
bv, bc, brd, br = (sum(b[i] for b in bases) / len(bases) for i in (1, 2, 3, 4))
bvs = [b[1] for b in bases]
print("| per idle tick (heartbeat + empty claim) | value | baseline taken off |\n|---|---|---|")
rng = " (%s with each baseline alone)" % "-".join(f"{1e6*(vcpu-v*secs)/ticks:.0f}" for v in sorted(bvs, reverse=True)) if len(bvs) > 1 else ""
print(f"| Valkey CPU | {1e6*vcpu/ticks:.0f} µs | {1e6*(vcpu-bv*secs)/ticks:.0f} µs{rng} |")
print(f"| relay CPU (3 replicas) | {1e6*rcpu/ticks:.0f} µs | {1e6*(rcpu-br*secs)/ticks:.0f} µs |")
print(f"| Valkey commands run, those inside scripts included (total_commands_processed) | {calls/ticks:.2f} | {(calls-bc*secs)/ticks:.2f} |")
print(f"| Lua scripts | {scr/ticks:.2f} | |")
print(f"| round trips (total_reads_processed: a pipelined batch is one) | {reads/ticks:.2f} | {(reads-brd*secs)/ticks:.2f} |")
per = ", ".join("%.2f" % (n2["cpu"] - n1["cpu"]) for n1, n2 in zip(x["nodes"], y["nodes"]))
print(f"| Valkey CPU per primary (s over the window) | {per} |")
# Commands by name per tick (the scripts' own commands included: INFO
# commandstats counts those too), the cluster's gossip and INFO excluded.
by = {}
for n1, n2 in zip(x["nodes"], y["nodes"]):
    for k, v in n2.get("bycmd", {}).items():
        d = v - n1.get("bycmd", {}).get(k, 0)
        if d and k not in ("info", "cluster|info", "cluster|nodes", "cluster|slots", "cluster|shards", "ping"):
            by[k] = by.get(k, 0) + d
print("| commands by name per tick | " + ", ".join(f"{k} {v/ticks:.2f}" for k, v in sorted(by.items(), key=lambda kv: -kv[1])) + " |")
EOF
