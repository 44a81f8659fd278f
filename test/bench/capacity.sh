#!/usr/bin/env bash
# Capacity and cost per unit, before and after, in one run on this machine.
#
#   test/bench/capacity.sh                    # full run (about 15 minutes)
#   BENCH_QUICK=1 test/bench/capacity.sh      # short run (about 4 minutes)
#   OLD_REV=<rev> CLUSTER_BASE_PORT=7390 test/bench/capacity.sh
#   BENCH_SMOKE=1 BENCH_OUT=/tmp/x test/bench/capacity.sh   # seconds-long runs that only prove the method works
#                                                        # (OLD_REV defaults to HEAD, no reference, no cluster;
#                                                        # test/bench/capacity_test.go runs it)
#
# The relay built from OLD_REV (default 397c753, "before") and the relay of
# this tree ("after") are measured side by side, runs interleaved (old, new,
# old, new) so a machine that gets busier or quieter shifts both alike. The
# load generator is always this tree's.
#
# 1. Capacity: an open-loop ramp (loadgen -ramp: Poisson arrivals at each
#    rate for a fixed time, rates doubling) per target until a step is not
#    sustained: end-to-end p99 over 1 s, anything lost, refused or answered
#    unexpectedly, or the load generator behind its own schedule (p90 of how
#    late jobs went out over 100 ms); then one step halfway
#    between the last rate sustained and the first not. Targets: the
#    reference (@byollm/relay@0.1.1 under Node), old and new with 1 replica,
#    with 3 replicas on one Valkey, and with 3 replicas on a 3-primary Valkey
#    Cluster (.ci/cluster on CLUSTER_BASE_PORT). Parties poll with the
#    aggressive profile (daemons claim every 50 ms while idle), whose latency
#    floor is well under the 1 s limit; the real profile's poll ladder alone
#    puts 0.2-0.5 s between a daemon's ticks.
# 2. Costs per unit at a fixed rate both relays carry, under the aggressive
#    and the real client profile (loadgen -profile): relay CPU per job and
#    per signed request (utime+stime of the relay process), Valkey CPU per
#    job (INFO cpu of the private server) and Lua scripts per job; the load
#    generator's own CPU per job.
# 3. 400 mostly idle daemons (real profile started as a long-idle fleet,
#    loadgen -idle-start: each ticking about every 10 s; a job every 5 s):
#    relay and Valkey CPU per request over a window after the set-up,
#    requests counted by the relay (relay_http_requests_total).
# 4. Valkey memory per queued and per finished job (storebench of each tree
#    on the private server), less the finished job's envelope bytes.
# 5. One Ed25519 request-signature check, CPU time, timed on this machine
#    between the runs (test/bench/verifybench): every per-request figure is
#    also given as a multiple of it.
#
# Output: test/bench/out/capacity.md and capacity.json (raw per-run JSON in
# test/bench/out/cap-*), and the markdown printed at the end.
set -euo pipefail

cd "$(dirname "$0")/../.."
. test/bench/lib.sh
bench_init capacity
rm -rf "$OUT"/cap-* "$OUT"/capacity.md "$OUT"/capacity.json

QUICK=${BENCH_QUICK:-0}
SMOKE=${BENCH_SMOKE:-0}
if [ "$SMOKE" = 1 ]; then OLD_REV=${OLD_REV:-HEAD}; else OLD_REV=${OLD_REV:-397c753}; fi
export CLUSTER_BASE_PORT=${CLUSTER_BASE_PORT:-7390} CLUSTER_REPLICAS=0 CLUSTER_DIR=$OUT/cap-cluster-nodes

VERIFY_ARGS=(-n 3000 -reps 5)
if [ "$SMOKE" = 1 ]; then
  RATES=5,10; STEP=2s; COST_FOR=2s; IDLE_FOR=6s; IDLE_SETTLE=3; IDLE_DAEMONS=${IDLE_DAEMONS:-20}; COST_RATE=${COST_RATE:-5}
  TARGETS=(new-1); MEM_ARGS=(-sizes 200 -claims 5 -sweep-jobs 100 -mem-jobs 100); VERIFY_ARGS=(-n 300 -reps 3)
elif [ "$QUICK" = 1 ]; then
  RATES=20,40,80,160,320,640; STEP=4s; COST_FOR=8s; COST_RATE=${COST_RATE:-60}; IDLE_FOR=30s; IDLE_SETTLE=12; IDLE_DAEMONS=${IDLE_DAEMONS:-400}
  TARGETS=(reference old-1 new-1 new-3 new-cluster); MEM_ARGS=(-sizes 5000 -claims 10 -sweep-jobs 1000 -mem-jobs 1000)
else
  RATES=10,20,40,80,160,320,640,1280; STEP=8s; COST_FOR=20s; IDLE_FOR=50s; IDLE_SETTLE=15; IDLE_DAEMONS=${IDLE_DAEMONS:-400}
  TARGETS=(reference old-1 new-1 old-3 new-3 old-cluster new-cluster); MEM_ARGS=(-sizes 20000 -claims 20 -sweep-jobs 2000 -mem-jobs 2000)
fi
# A finer ramp near the limits, ramps only (no cost runs, no memory):
#   CAP_RAMP_ONLY=1 CAP_TARGETS="reference new-1" CAP_RATES=160,240,320,400 test/bench/capacity.sh
if [ -n "${CAP_RATES:-}" ]; then RATES=$CAP_RATES; fi
if [ -n "${CAP_TARGETS:-}" ]; then read -ra TARGETS <<<"$CAP_TARGETS"; fi
# The cost runs' rate: near what run.sh's closed loop carried, so the
# aggressive profile's idle polling is spread over as many jobs as there.
export COST_RATE=${COST_RATE:-100}
export COST_ROUNDS
MAX_P99=${MAX_P99:-1s}
# Cost runs per target and profile; the report takes the median of the
# balanced ones (a run that lost jobs idles through its whole drain, which
# inflates every per-job figure).
if [ "$QUICK" = 1 ] || [ "$SMOKE" = 1 ]; then COST_ROUNDS=${COST_ROUNDS:-1}; else COST_ROUNDS=${COST_ROUNDS:-2}; fi
# The standard load of test/bench/run.sh, in the open loop.
STD=(-sites 4 -daemons 16 -slots 8 -payload 256 -ttl 20s -profile aggressive -arrivals poisson
     -results-poll 250ms -pending-poll 20ms -claim-poll 50ms -fetch-poll 10ms -heartbeat 5s -lease-ms 60000 -quiet)

CLUSTER_UP=0
on_exit() { [ "$CLUSTER_UP" = 0 ] || bash .ci/cluster stop >/dev/null 2>&1; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
field() { python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())[sys.argv[2]])' "$1" "$2"; }

# ---- build ------------------------------------------------------------------
log "building the relay at $OLD_REV and of this tree, loadgen, storebench, verifybench"
build_old "$OLD_REV" relay-old=./cmd/relay storebench-old=./test/bench/storebench
go build -o "$BIN/relay-new" ./cmd/relay
go build -o "$BIN/storebench-new" ./test/bench/storebench
go build -o "$BIN/loadgen" ./cmd/loadgen
go build -o "$BIN/verifybench" ./test/bench/verifybench
if [ ! -f test/reference/node_modules/@byollm/relay/package.json ]; then
  log "installing the reference relay (npm ci)"
  (cd test/reference && npm ci --no-audit --no-fund --loglevel=error)
fi

# ---- valkey: a private server, and a private cluster ------------------------
VPORT=$(free_port)
mkdir -p "$OUT/cap-valkey"
"$SERVER" --port "$VPORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$OUT/cap-valkey" \
  --logfile "$OUT/cap-valkey/server.log" --lazyfree-lazy-user-del yes &
VPID=$!; STARTED+=("$VPID")
for _ in $(seq 1 50); do "$CLI" -p "$VPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
VALKEY_URL=redis://127.0.0.1:$VPORT/0
if printf '%s\n' "${TARGETS[@]}" | grep -q cluster; then
  log "starting a 3-primary cluster on ports $CLUSTER_BASE_PORT-$((CLUSTER_BASE_PORT + 2))"
  CLUSTER_UP=1
  CLUSTER_URL=$(bash .ci/cluster start)
fi

# valkey_stats PORTS...: summed INFO cpu seconds and Lua script calls.
valkey_stats() {
  local p cpu=0 scripts=0 c s
  for p in "$@"; do
    c=$("$CLI" -p "$p" info cpu | tr -d '\r' | awk -F: '/^used_cpu_(sys|user):/ {n += $2} END {printf "%.6f", n}')
    s=$("$CLI" -p "$p" info commandstats | tr -d '\r' | awk -F'[=,:]' '/^cmdstat_(eval|fcall)/ {n += $3} END {print n + 0}')
    cpu=$(awk "BEGIN{print $cpu + $c}"); scripts=$((scripts + s))
  done
  echo "{\"cpu\": $cpu, \"scripts\": $scripts}"
}
verify_floor() { "$BIN/verifybench" "${VERIFY_ARGS[@]}" >>"$OUT/cap-verify.jsonl"; }

# start_target TARGET NS: starts the relays of a target; sets URLS, ADMIN, PIDS, VPORTS.
start_target() {
  local target=$1 ns=$2 kind n url i outf
  URLS=() PIDS=() ADMIN="" VPORTS=("$VPORT")
  case $target in
    reference)
      outf=$OUT/cap-$target.stdout
      RELAY_LISTEN=127.0.0.1:0 RELAY_ADMIN_LISTEN=127.0.0.1:0 RELAY_ADMIN_TOKEN=$TOKEN RELAY_SWEEP_MS=1000 \
        node test/reference/server.mjs >"$outf" 2>"$OUT/cap-$target.log" &
      PIDS+=($!); STARTED+=($!)
      for _ in $(seq 1 300); do [ -s "$outf" ] && break; sleep 0.1; done
      [ -s "$outf" ] || { log "reference not ready"; cat "$OUT/cap-$target.log" >&2; exit 1; }
      URLS+=("http://$(field "$outf" listen)"); ADMIN="http://$(field "$outf" admin)"; VPORTS=()
      return ;;
  esac
  kind=${target%%-*}; n=${target#*-}; url=$VALKEY_URL
  if [ "$n" = cluster ]; then
    n=3; url=$CLUSTER_URL; VPORTS=("$CLUSTER_BASE_PORT" $((CLUSTER_BASE_PORT + 1)) $((CLUSTER_BASE_PORT + 2)))
  fi
  for i in $(seq 1 "$n"); do
    outf=$OUT/cap-$target-$ns-r$i.stdout
    RELAY_VALKEY_URL=$url RELAY_NAMESPACE=$ns RELAY_LISTEN=127.0.0.1:0 RELAY_ADMIN_LISTEN=127.0.0.1:0 \
      RELAY_ADMIN_TOKEN=$TOKEN RELAY_LOG_LEVEL=warn RELAY_PAIRINGS_PER_ADDRESS=500 \
      "$BIN/relay-$kind" >"$outf" 2>"$OUT/cap-$target-$ns-r$i.log" &
    PIDS+=($!); STARTED+=($!)
    for _ in $(seq 1 300); do [ -s "$outf" ] && break; sleep 0.1; done
    [ -s "$outf" ] || { log "relay-$kind not ready"; cat "$OUT/cap-$target-$ns-r$i.log" >&2; exit 1; }
    URLS+=("http://$(field "$outf" listen)")
    [ -n "$ADMIN" ] || ADMIN="http://$(field "$outf" admin)"
  done
}
# served: requests the relay's planes answered so far (its /metrics).
served() {
  curl -fsS -H "Authorization: Bearer $TOKEN" "$ADMIN/metrics" | awk '/^relay_http_requests_total[{ ]/ && !/plane="admin"/ {n += $NF} END {printf "%d", n}'
}
stop_target() { kill "${PIDS[@]}" 2>/dev/null || true; wait "${PIDS[@]}" 2>/dev/null || true; }
newns() { echo "cap-$1-$(head -c 3 /dev/urandom | od -An -tx1 | tr -d ' \n')"; }
lg() { "$BIN/loadgen" -replicas "$(IFS=,; echo "${URLS[*]}")" -admin "$ADMIN" -admin-token "$TOKEN" "$@"; }
warm_up() { timeout 120 "$BIN/loadgen" -replicas "$(IFS=,; echo "${URLS[*]}")" -admin "$ADMIN" -admin-token "$TOKEN" \
  -sites 2 -daemons 4 -jobs 200 -concurrency 16 -quiet >/dev/null || log "warm-up of $1 did not balance"; }

# ---- 1. capacity ramps ------------------------------------------------------
ramp() { # TARGET
  local target=$1 ns highest limit mid
  ns=$(newns "$target")
  start_target "$target" "$ns"
  warm_up "$target"
  log "$target: ramp $RATES, $STEP a step (load $(loadavg))"
  timeout 900 "$BIN/loadgen" -replicas "$(IFS=,; echo "${URLS[*]}")" -admin "$ADMIN" -admin-token "$TOKEN" "${STD[@]}" \
    -ramp "$RATES" -duration "$STEP" -drain 10s -max-p99 "$MAX_P99" -json "$OUT/cap-ramp-$target.json" \
    >"$OUT/cap-ramp-$target.txt" || log "$target: ramp exited $?"
  highest=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["highestSustained"])' "$OUT/cap-ramp-$target.json")
  limit=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["firstNotSustained"])' "$OUT/cap-ramp-$target.json")
  if python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) > 0 and float(sys.argv[2]) > 0 else 1)' "$highest" "$limit"; then
    mid=$(python3 -c 'import sys; print(round((float(sys.argv[1]) + float(sys.argv[2])) / 2))' "$highest" "$limit")
    timeout 300 "$BIN/loadgen" -replicas "$(IFS=,; echo "${URLS[*]}")" -admin "$ADMIN" -admin-token "$TOKEN" "${STD[@]}" \
      -ramp "$mid" -duration "$STEP" -drain 10s -max-p99 "$MAX_P99" -json "$OUT/cap-ramp-$target-mid.json" \
      >>"$OUT/cap-ramp-$target.txt" || true
  fi
  tail -n 3 "$OUT/cap-ramp-$target.txt" | sed "s/^/[$target] /" >&2
  echo "{\"target\": \"$target\", \"load\": \"$(loadavg)\"}" >>"$OUT/cap-ramps.jsonl"
  stop_target
}

# ---- 2./3. costs at a fixed rate, and idle daemons --------------------------
cost() { # TARGET PROFILE ROUND
  local target=$1 profile=$2 round=$3 ns name r0 r1 v0 v1 rc=0
  name=$target-$profile-$round
  ns=$(newns "$name")
  start_target "$target" "$ns"
  warm_up "$target"
  local args=("${STD[@]}" -profile "$profile" -rate "$COST_RATE" -duration "$COST_FOR" -drain 20s)
  if [ "$profile" = idle ]; then
    # Mostly idle: many real-profile daemons, one job a second.
    # One site pumping every second, so the daemons' requests dominate.
    args=(-sites 1 -daemons "$IDLE_DAEMONS" -slots 2 -pair none -profile real -idle-start -site-pump 1s -rate 0.2
          -duration "$IDLE_FOR" -drain 20s -ttl 60s -quiet)
  fi
  local m0=0 m1=0 lgpid
  log "$name: $([ "$profile" = idle ] && echo "$IDLE_DAEMONS idle daemons for $IDLE_FOR" || echo "$COST_RATE jobs/s for $COST_FOR") (load $(loadavg))"
  if [ "$profile" = idle ]; then
    # The idle figures are taken over a window that starts once the setup
    # (projection with 400 devices) is done, and count the requests the
    # relay itself served in it (relay_http_requests_total).
    timeout 300 "$BIN/loadgen" -replicas "$(IFS=,; echo "${URLS[*]}")" -admin "$ADMIN" -admin-token "$TOKEN" "${args[@]}" \
      -json "$OUT/cap-cost-$name.json" >"$OUT/cap-cost-$name.txt" &
    lgpid=$!
    sleep "$IDLE_SETTLE"
    r0=$(cpu_ticks "${PIDS[@]}"); v0=$(valkey_stats "${VPORTS[@]}"); m0=$(served)
    wait "$lgpid" || rc=$?
    r1=$(cpu_ticks "${PIDS[@]}"); v1=$(valkey_stats "${VPORTS[@]}"); m1=$(served)
  else
    r0=$(cpu_ticks "${PIDS[@]}"); v0=$(valkey_stats "${VPORTS[@]}")
    timeout 300 "$BIN/loadgen" -replicas "$(IFS=,; echo "${URLS[*]}")" -admin "$ADMIN" -admin-token "$TOKEN" "${args[@]}" \
      -json "$OUT/cap-cost-$name.json" >"$OUT/cap-cost-$name.txt" || rc=$?
    r1=$(cpu_ticks "${PIDS[@]}"); v1=$(valkey_stats "${VPORTS[@]}")
  fi
  printf '{"name":"%s","target":"%s","profile":"%s","round":%s,"relayTicks":%s,"valkeyBefore":%s,"valkeyAfter":%s,"served":%s,"loadgenExit":%s,"load":"%s"}\n' \
    "$name" "$target" "$profile" "$round" $((r1 - r0)) "$v0" "$v1" $((m1 - m0)) "$rc" "$(loadavg)" >>"$OUT/cap-costs.jsonl"
  stop_target
}

LOAD_START=$(loadavg)
verify_floor
for t in "${TARGETS[@]}"; do ramp "$t"; done
verify_floor
if [ "${CAP_RAMP_ONLY:-0}" = 1 ]; then
  for t in "${TARGETS[@]}"; do sed "s/^/[$t] /" "$OUT/cap-ramp-$t.txt"; done
  exit 0
fi
for round in $(seq 1 "$COST_ROUNDS"); do
  for profile in aggressive real idle; do
    cost old-1 "$profile" "$round"
    cost new-1 "$profile" "$round"
    verify_floor
  done
done

# ---- 4. memory --------------------------------------------------------------
for kind in old new; do
  log "memory per job: storebench of $kind"
  timeout 600 "$BIN/storebench-$kind" -valkey "$VALKEY_URL" "${MEM_ARGS[@]}" -json "$OUT/cap-store-$kind.json" >/dev/null
done
verify_floor
LOAD_END=$(loadavg)

# Clean the namespaces the relays wrote on the private server (it goes away
# with the run anyway; the cluster is stopped).
"$CLI" -p "$VPORT" flushall >/dev/null || true

# ---- report -----------------------------------------------------------------
python3 - "$OUT" "$CLK_TCK" "$OLD_REV" "$NEW_REV" "$LOAD_START" "$LOAD_END" "$(nproc)" "$MAX_P99" "$QUICK" <<'EOF' | tee "$OUT/capacity.md"
import json, os, statistics, sys
out, tck, old_rev, new_rev, load0, load1, cpus, max_p99, quick = sys.argv[1:10]
tck = int(tck)
J = lambda name: json.load(open(os.path.join(out, name)))
verify = [json.loads(l) for l in open(os.path.join(out, "cap-verify.jsonl"))]
v_us = statistics.median(v["verifyNs"] for v in verify) / 1000
vr_us = statistics.median(v["verifyRequestNs"] for v in verify) / 1000

labels = {"reference": "reference (Node)", "old-1": f"old ×1", "new-1": f"new ×1", "old-3": "old ×3",
          "new-3": "new ×3", "old-cluster": "old ×3, 3-primary cluster", "new-cluster": "new ×3, 3-primary cluster"}
ramps = {}
for line in open(os.path.join(out, "cap-ramps.jsonl")):
    t = json.loads(line)["target"]
    r = J(f"cap-ramp-{t}.json")
    steps = list(r["steps"])
    highest, limit = r["highestSustained"], r["firstNotSustained"]
    mid_path = os.path.join(out, f"cap-ramp-{t}-mid.json")
    if os.path.exists(mid_path):
        m = J(f"cap-ramp-{t}-mid.json")
        steps += m["steps"]
        if m["highestSustained"] > 0:
            highest = m["highestSustained"]
        elif m["steps"]:
            limit = m["steps"][0]["rate"]
    best = next((s for s in steps if s["rate"] == highest), None)
    failed = next((s for s in steps if s["rate"] == limit), None)
    ramps[t] = {"highest": highest, "limit": limit, "at": best, "failed": failed, "load": json.loads(line)["load"],
                "steps": [{k: v for k, v in s.items() if k != "report"} for s in steps]}

runs = {}
for line in open(os.path.join(out, "cap-costs.jsonl")):
    c = json.loads(line)
    rep = J(f"cap-cost-{c['name']}.json")
    jobs = rep["jobs"]["collected"]
    req = rep["requests"]
    relay_ms = c["relayTicks"] / tck * 1000
    if c.get("served"):
        req = c["served"]  # an idle window: what the relay answered in it
    vk = c["valkeyAfter"]["cpu"] - c["valkeyBefore"]["cpu"]
    sc = c["valkeyAfter"]["scripts"] - c["valkeyBefore"]["scripts"]
    runs[c["name"]] = {"key": f"{c['target']}-{c['profile']}",
        "jobs": jobs, "requests": req, "ok": rep["jobs"]["lost"] == 0 and rep["jobs"]["runTwice"] == 0,
        "lost": rep["jobs"]["lost"], "runTwice": rep["jobs"]["runTwice"], "errors": rep["errors"],
        "relayMsPerJob": relay_ms / jobs if jobs else None,
        "relayUsPerRequest": relay_ms * 1000 / req if req else None,
        "requestsPerJob": req / jobs if jobs else None,
        "valkeyMsPerJob": vk * 1000 / jobs if jobs else None,
        "valkeyUsPerRequest": vk * 1e6 / req if req else None,
        "scriptsPerJob": sc / jobs if jobs else None,
        "loadgenMsPerJob": rep["loadgenCpuSeconds"] * 1000 / jobs if jobs else None,
        "e2eP50Ms": rep["phases"]["end-to-end"]["p50Ms"], "e2eP99Ms": rep["phases"]["end-to-end"]["p99Ms"],
        "load": c["load"],
    }
# Per target and profile: the median of each figure over the balanced
# rounds (over every round when none balanced, flagged).
costs = {}
for key in sorted({r["key"] for r in runs.values()}):
    rs = [r for r in runs.values() if r["key"] == key]
    good = [r for r in rs if r["ok"]] or rs
    agg = {"rounds": len(rs), "balanced": sum(r["ok"] for r in rs), "ok": any(r["ok"] for r in rs),
           "load": "; ".join(r["load"] for r in rs)}
    for k, v in good[0].items():
        if k in ("key", "ok", "load"):
            continue
        vals = [r[k] for r in good if r[k] is not None]
        agg[k] = statistics.median(vals) if vals else None
    costs[key] = agg
store = {k: J(f"cap-store-{k}.json") for k in ("old", "new")}
for k, s in store.items():
    s["beyondEnvelopes"] = s["memPerFinishedJobBytes"] - s["finishedJobEnvelopeBytes"]

json.dump({"oldRev": old_rev, "newRev": new_rev, "verifyUs": v_us, "verifyRequestUs": vr_us, "verifyRuns": verify,
           "ramps": ramps, "costs": costs, "costRuns": runs, "store": store, "load": [load0, load1], "cpus": int(cpus)},
          open(os.path.join(out, "capacity.json"), "w"), indent=2)

def f(x, nd=2):
    return "—" if x is None else f"{x:,.{nd}f}"
def ratio(a, b, nd=2):
    return "—" if a is None or b in (None, 0) else f"{a / b:.{nd}f}"

L = [f"# Capacity and cost per unit: {old_rev} (old) and {new_rev} (new)\n",
     f"{cpus} CPUs; load average {load0} at the start, {load1} at the end{' (BENCH_QUICK=1)' if quick == '1' else ''}. "
     f"One Ed25519 verification (crypto/ed25519.Verify of a heartbeat signature, CPU time, median of {len(verify)} timings spread over the run): "
     f"**{v_us:.1f} µs** (protocol.VerifyRequest, the relay's whole check: {vr_us:.1f} µs).\n",
     "## Highest sustained rate (open loop, Poisson arrivals, aggressive profile)\n",
     f"A step is sustained when every job is collected, nothing is lost, run twice or refused, end-to-end p99 ≤ {max_p99}, "
     "and the load generator kept its arrival schedule (p90 of how late a job went out ≤ 100 ms).\n",
     "| target | highest sustained jobs/s | vs reference | e2e p50 / p99 ms there | loadgen CPU ms / job there | first not sustained | why | load avg |",
     "|---|---|---|---|---|---|---|---|"]
ref = ramps.get("reference", {}).get("highest") or None
for t in ("reference", "old-1", "new-1", "old-3", "new-3", "old-cluster", "new-cluster"):
    if t not in ramps: continue
    r = ramps[t]; a = r["at"] or {}; x = r["failed"] or {}
    L.append(f"| {labels[t]} | {f(r['highest'],0) if r['highest'] else 'none'} | {ratio(r['highest'] or None, ref) if t != 'reference' else '1'} | "
             f"{f(a.get('endToEndP50Ms'),0)} / {f(a.get('endToEndP99Ms'),0)} | {f(a.get('loadgenCpuMsPerJob'),3)} | "
             f"{f(r['limit'],0) if r['limit'] else '(none: every step held)'} | {(x.get('why') or '')[:160]} | {r['load']} |")
L.append("")
L.append(f"## Cost per unit (old and new interleaved, {os.environ.get('COST_RATE')} jobs/s, {os.environ.get('COST_ROUNDS')} round(s); the median of the balanced rounds)\n")
L.append("| measure | profile | old | new | new / old | new ÷ one verify |")
L.append("|---|---|---|---|---|---|")
def row(label, key, profile, nd=3, floor=None):
    o = costs.get(f"old-1-{profile}", {}).get(key); n = costs.get(f"new-1-{profile}", {}).get(key)
    fl = "" if floor is None or n is None else f"{n / floor:.2f} ×"
    L.append(f"| {label} | {profile} | {f(o, nd)} | {f(n, nd)} | {ratio(n, o)} | {fl} |")
row("relay CPU per signed request, µs (400 mostly idle daemons)", "relayUsPerRequest", "idle", 1, v_us)
row("Valkey CPU per request, µs (400 mostly idle daemons)", "valkeyUsPerRequest", "idle", 1, v_us)
for p in ("aggressive", "real"):
    row("relay CPU per job, ms", "relayMsPerJob", p, 3, v_us / 1000)
    row("relay CPU per signed request, µs", "relayUsPerRequest", p, 1, v_us)
    row("signed requests per job", "requestsPerJob", p, 1)
    row("Valkey CPU per job, ms", "valkeyMsPerJob", p, 3)
    row("Lua scripts per job", "scriptsPerJob", p, 1)
    row("loadgen CPU per job, ms", "loadgenMsPerJob", p, 3)
    row("end-to-end p50, ms", "e2eP50Ms", p, 0)
    row("end-to-end p99, ms", "e2eP99Ms", p, 0)
so, sn = store["old"], store["new"]
L.append(f"| Valkey memory per queued job, B | storebench | {f(so['memPerQueuedJobBytes'],0)} | {f(sn['memPerQueuedJobBytes'],0)} | {ratio(sn['memPerQueuedJobBytes'], so['memPerQueuedJobBytes'])} | |")
L.append(f"| Valkey memory per finished job beyond its envelopes ({sn['finishedJobEnvelopeBytes']} B), B | storebench | {f(so['beyondEnvelopes'],0)} | {f(sn['beyondEnvelopes'],0)} | {ratio(sn['beyondEnvelopes'], so['beyondEnvelopes'])} | |")
L.append("")
bad = [k for k, c in runs.items() if not c["ok"]]
L.append("Cost runs: " + ("every run balanced (0 lost, 0 run twice)." if not bad else f"these lost jobs or ran one twice and are left out of the medians where another round balanced: {', '.join(bad)}."))
L.append("\nLoad average when each cost run ended: " + "; ".join(f"{k} {c['load']}" for k, c in runs.items()) + ".")
print("\n".join(L))
EOF
