#!/usr/bin/env bash
# Benchmark: the Go relay against the reference relay (@byollm/relay@0.1.1)
# on this machine, in one run.
#
#   test/bench/run.sh            # everything, well under 15 minutes
#   BENCH_QUICK=1 test/bench/run.sh   # smaller sizes, a couple of minutes
#
# 1. Throughput: identical loadgen settings against (a) the reference relay
#    under Node, (b) the Go relay, 1 replica, (c) the Go relay, 3 replicas on
#    one Valkey. Reports jobs/s, relay CPU seconds per 1,000 jobs (utime+stime
#    of the relay processes only, from /proc/<pid>/stat), Valkey's CPU per
#    1,000 jobs separately, and the ratios ours/reference.
# 2. Store: claim latency and Valkey time per claim with 1k/10k/100k jobs
#    queued on routes the claimer cannot take and with 1k/10k/100k claimable;
#    sweep of 100k jobs with 1% due; Valkey memory per queued and per finished
#    job; the same scenarios on the reference's in-memory RelayState.
# 3. SLOWLOG/LATENCY: script calls that held Valkey over 1 ms, during the Go
#    relay's load runs and during the store scenarios.
#
# Valkey: by default a private redis-server on a free loopback port (INFO,
# SLOWLOG and the server's CPU time are server-wide, so they only mean
# something when nothing else uses the server). BENCH_VALKEY_URL=redis://...
# uses an existing server instead (a fresh namespace; Valkey CPU, memory and
# SLOWLOG figures then include whatever else that server does, and SLOWLOG
# settings are changed on it).
#
# Output: test/bench/out/results.md and results.json (plus each run's raw
# JSON), and the markdown printed at the end.
set -euo pipefail

cd "$(dirname "$0")/../.."
. test/bench/lib.sh
bench_init bench
rm -f "$OUT"/*.json "$OUT"/*.md "$OUT"/*.log

QUICK=${BENCH_QUICK:-0}

# Loadgen settings shared by all three throughput runs.
if [ "$QUICK" = 1 ]; then
  LG_JOBS=600; LG_DURATION=20s; SIZES=1000,10000; CLAIMS=50; SWEEP_JOBS=10000; MEM_JOBS=500; PROFILE_JOBS=200
else
  LG_JOBS=6000; LG_DURATION=45s; SIZES=1000,10000,100000; CLAIMS=200; SWEEP_JOBS=100000; MEM_JOBS=2000; PROFILE_JOBS=600
fi
std_load "$LG_JOBS" "$LG_DURATION"

# start_relay NAME -- CMD...: starts a relay (env already exported by the
# caller's subshell), waits for its ready line, and sets READY_LISTEN,
# READY_ADMIN, READY_PID.
start_relay() {
  local name=$1; shift
  local outf=$OUT/$name.stdout
  "$@" >"$outf" 2>"$OUT/$name.log" &
  local pid=$!
  STARTED+=("$pid")
  for _ in $(seq 1 300); do
    if [ -s "$outf" ]; then break; fi
    if ! kill -0 "$pid" 2>/dev/null; then log "$name exited:"; cat "$OUT/$name.log" >&2; exit 1; fi
    sleep 0.1
  done
  [ -s "$outf" ] || { log "$name not ready after 30s"; exit 1; }
  READY_LISTEN=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["listen"])' "$outf")
  READY_ADMIN=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["admin"])' "$outf")
  READY_PID=$pid
}

stop_pids() {
  local pid
  for pid in "$@"; do kill "$pid" 2>/dev/null || true; done
  for pid in "$@"; do wait "$pid" 2>/dev/null || true; done
}

# ---- build ------------------------------------------------------------------
log "building relay, loadgen, storebench"
go build -o "$BIN/relay" ./cmd/relay
go build -o "$BIN/loadgen" ./cmd/loadgen
go build -o "$BIN/storebench" ./test/bench/storebench
if [ ! -f test/reference/node_modules/@byollm/relay/package.json ]; then
  log "installing the reference relay (npm ci)"
  (cd test/reference && npm ci --no-audit --no-fund --loglevel=error)
fi

# ---- valkey -----------------------------------------------------------------
if [ -n "${BENCH_VALKEY_URL:-}" ]; then
  VALKEY_URL=$BENCH_VALKEY_URL
  VALKEY_PID=""
  VALKEY_KIND="shared server $VALKEY_URL"
  log "using $VALKEY_URL (shared: Valkey CPU/memory/SLOWLOG include other clients)"
else
  VPORT=$(free_port)
  mkdir -p "$OUT/valkey"
  "$SERVER" --port "$VPORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$OUT/valkey" \
    --logfile "$OUT/valkey/server.log" --lazyfree-lazy-user-del yes &
  VALKEY_PID=$!
  STARTED+=("$VALKEY_PID")
  VALKEY_URL=redis://127.0.0.1:$VPORT/0
  for _ in $(seq 1 50); do "$CLI" -p "$VPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
  VALKEY_KIND="private $("$SERVER" --version | awk '{print $1, $2, $3}') on 127.0.0.1:$VPORT"
  log "started $VALKEY_KIND"
fi
NAMESPACE="bench-$(head -c 6 /dev/urandom | od -An -tx1 | tr -d ' \n')"

stats() { "$BIN/storebench" -valkey "$VALKEY_URL" -mode stats; }

# run_load NAME PIDS... : warm up, then the measured loadgen run, recording
# relay CPU, Valkey CPU and Valkey script time around it.
run_load() {
  local name=$1 replicas=$2 admin=$3; shift 3
  local pids=("$@")
  log "$name: warm-up"
  timeout 120 "$BIN/loadgen" -replicas "$replicas" -admin "$admin" -admin-token "$TOKEN" \
    -sites 2 -daemons 4 -jobs 200 -concurrency 16 -quiet >"$OUT/$name-warmup.txt" || {
      log "$name: warm-up failed"; cat "$OUT/$name-warmup.txt" >&2; exit 1; }
  local r0 v0 s0 t0 r1 v1 s1 t1
  r0=$(cpu_ticks "${pids[@]}")
  v0=0; [ -n "$VALKEY_PID" ] && v0=$(cpu_ticks "$VALKEY_PID")
  s0=$(stats)
  t0=$(date +%s.%N)
  log "$name: measured run (${LG_JOBS} jobs or ${LG_DURATION})"
  local rc=0
  timeout 300 "$BIN/loadgen" -replicas "$replicas" -admin "$admin" -admin-token "$TOKEN" "${LG_ARGS[@]}" \
    -json "$OUT/load-$name.json" >"$OUT/load-$name.txt" || rc=$?
  t1=$(date +%s.%N)
  r1=$(cpu_ticks "${pids[@]}")
  v1=0; [ -n "$VALKEY_PID" ] && v1=$(cpu_ticks "$VALKEY_PID")
  s1=$(stats)
  cat >"$OUT/cpu-$name.json" <<EOF
{"relayTicks": $((r1 - r0)), "valkeyTicks": $((v1 - v0)), "clkTck": $CLK_TCK, "wallSeconds": $(awk "BEGIN{print $t1 - $t0}"),
 "loadgenExit": $rc, "valkeyBefore": $s0, "valkeyAfter": $s1, "replicas": ${#pids[@]}}
EOF
  log "$name: $(grep -E '^throughput|^must be 0' "$OUT/load-$name.txt" | tr '\n' ' ')"
}

# ---- (a) reference ----------------------------------------------------------
(
  STARTED=(); trap cleanup EXIT   # this subshell's relays only
  export RELAY_LISTEN=127.0.0.1:0 RELAY_ADMIN_LISTEN=127.0.0.1:0 RELAY_ADMIN_TOKEN=$TOKEN RELAY_SWEEP_MS=1000
  start_relay reference node test/reference/server.mjs
  run_load reference "http://$READY_LISTEN" "http://$READY_ADMIN" "$READY_PID"
  stop_pids "$READY_PID"
)

# SLOWLOG from here on covers the Go relay's load runs.
"$BIN/storebench" -valkey "$VALKEY_URL" -mode slowlog-reset >/dev/null

# ---- (b) ours, 1 replica ----------------------------------------------------
(
  STARTED=(); trap cleanup EXIT
  export RELAY_VALKEY_URL=$VALKEY_URL RELAY_NAMESPACE=$NAMESPACE-1 RELAY_LISTEN=127.0.0.1:0 \
    RELAY_ADMIN_LISTEN=127.0.0.1:0 RELAY_ADMIN_TOKEN=$TOKEN RELAY_LOG_LEVEL=warn
  start_relay go-1 "$BIN/relay"
  run_load go-1 "http://$READY_LISTEN" "http://$READY_ADMIN" "$READY_PID"
  stop_pids "$READY_PID"
)

# ---- (c) ours, 3 replicas on one Valkey -------------------------------------
(
  STARTED=(); trap cleanup EXIT
  export RELAY_VALKEY_URL=$VALKEY_URL RELAY_NAMESPACE=$NAMESPACE-3 RELAY_LISTEN=127.0.0.1:0 \
    RELAY_ADMIN_LISTEN=127.0.0.1:0 RELAY_ADMIN_TOKEN=$TOKEN RELAY_LOG_LEVEL=warn
  urls=() pids=() admin=""
  for i in 1 2 3; do
    start_relay "go-3-r$i" "$BIN/relay"
    urls+=("http://$READY_LISTEN"); pids+=("$READY_PID")
    [ -z "$admin" ] && admin="http://$READY_ADMIN"
  done
  run_load go-3 "$(IFS=,; echo "${urls[*]}")" "$admin" "${pids[@]}"
  stop_pids "${pids[@]}"
)

"$BIN/storebench" -valkey "$VALKEY_URL" -mode slowlog >"$OUT/slowlog-load.json"

# ---- per-script profile: every Valkey call logged during a Go relay run -----
# A separate run, so logging every call does not tax the CPU figures above.
(
  STARTED=(); trap cleanup EXIT
  export RELAY_VALKEY_URL=$VALKEY_URL RELAY_NAMESPACE=$NAMESPACE-p RELAY_LISTEN=127.0.0.1:0 \
    RELAY_ADMIN_LISTEN=127.0.0.1:0 RELAY_ADMIN_TOKEN=$TOKEN RELAY_LOG_LEVEL=warn
  start_relay go-profile "$BIN/relay"
  "$BIN/storebench" -valkey "$VALKEY_URL" -mode profile-reset >/dev/null
  log "go-profile: ${PROFILE_JOBS} jobs with every Valkey call logged"
  timeout 180 "$BIN/loadgen" -replicas "http://$READY_LISTEN" -admin "http://$READY_ADMIN" -admin-token "$TOKEN" \
    "${LG_ARGS[@]}" -jobs "$PROFILE_JOBS" -json "$OUT/load-go-profile.json" >"$OUT/load-go-profile.txt" || true
  "$BIN/storebench" -valkey "$VALKEY_URL" -mode profile >"$OUT/slowlog-profile.json"
  stop_pids "$READY_PID"
)

# ---- store scenarios ----------------------------------------------------------
log "store scenarios on Valkey (sizes $SIZES, sweep $SWEEP_JOBS)"
timeout 600 "$BIN/storebench" -valkey "$VALKEY_URL" -sizes "$SIZES" -claims "$CLAIMS" \
  -sweep-jobs "$SWEEP_JOBS" -mem-jobs "$MEM_JOBS" -json "$OUT/store-go.json"
log "store scenarios on the reference RelayState"
timeout 600 node --expose-gc test/bench/refstore.mjs "$ROOT/test/reference" "$SIZES" "$CLAIMS" "$SWEEP_JOBS" "$MEM_JOBS" \
  >"$OUT/store-reference.json"

# Clean the namespaces the Go relays wrote (the store scenarios clean their own).
python3 - "$VALKEY_URL" "$NAMESPACE" <<'EOF' || true
import subprocess, sys, urllib.parse
u = urllib.parse.urlparse(sys.argv[1]); ns = sys.argv[2]
args = ["redis-cli", "-h", u.hostname or "127.0.0.1", "-p", str(u.port or 6379), "-n", (u.path.strip("/") or "0")]
keys = subprocess.run(args + ["--scan", "--pattern", f"*{ns}*"], capture_output=True, text=True).stdout.split()
for i in range(0, len(keys), 500):
    subprocess.run(args + ["unlink", *keys[i:i+500]], capture_output=True)
EOF

# ---- report -------------------------------------------------------------------
python3 - "$OUT" "$VALKEY_KIND" "$(nproc)" "$(uptime)" <<'EOF'
import json, os, sys
out, valkey_kind, cpus, uptime = sys.argv[1:5]
def load(name):
    with open(os.path.join(out, name)) as f:
        return json.load(f)

runs = {}
for name, label in [("reference", "reference (Node)"), ("go-1", "ours, 1 replica"), ("go-3", "ours, 3 replicas")]:
    lg, cpu = load(f"load-{name}.json"), load(f"cpu-{name}.json")
    jobs = lg["jobs"]["collected"]
    relay_s = cpu["relayTicks"] / cpu["clkTck"]
    valkey_s = cpu["valkeyTicks"] / cpu["clkTck"]
    script_us = cpu["valkeyAfter"]["evalUsec"] - cpu["valkeyBefore"]["evalUsec"]
    script_calls = cpu["valkeyAfter"]["evalCalls"] - cpu["valkeyBefore"]["evalCalls"]
    runs[name] = {
        "label": label,
        "jobsPerSecond": lg["jobsPerSecond"],
        "collected": jobs,
        "lost": lg["jobs"]["lost"], "runTwice": lg["jobs"]["runTwice"], "integrity": lg["jobs"]["integrity"],
        "errors": lg["errors"],
        "relayCpuSecondsPer1000Jobs": round(relay_s / jobs * 1000, 3) if jobs else None,
        "valkeyCpuSecondsPer1000Jobs": (round(valkey_s / jobs * 1000, 3) if jobs else None) if name != "reference" else None,
        "valkeyScriptMsPer1000Jobs": round(script_us / 1000 / jobs * 1000, 1) if jobs and name != "reference" else None,
        "valkeyScriptCallsPerJob": round(script_calls / jobs, 1) if jobs and name != "reference" else None,
        "loadgenCpuSecondsPer1000Jobs": round(lg.get("loadgenCpuSeconds", 0) / jobs * 1000, 3) if jobs else None,
        "endToEndP50Ms": lg["phases"]["end-to-end"]["p50Ms"], "endToEndP99Ms": lg["phases"]["end-to-end"]["p99Ms"],
        "claimP50Ms": lg["endpoints"].get("claim", {}).get("latency", {}).get("p50Ms"),
        "claimP99Ms": lg["endpoints"].get("claim", {}).get("latency", {}).get("p99Ms"),
        "settings": lg["settings"],
    }
ref = runs["reference"]
for name in ("go-1", "go-3"):
    r = runs[name]
    r["throughputRatioVsReference"] = round(r["jobsPerSecond"] / ref["jobsPerSecond"], 2) if ref["jobsPerSecond"] else None
    if ref["relayCpuSecondsPer1000Jobs"] and r["relayCpuSecondsPer1000Jobs"] is not None:
        r["relayCpuRatioVsReference"] = round(r["relayCpuSecondsPer1000Jobs"] / ref["relayCpuSecondsPer1000Jobs"], 2)
        both = r["relayCpuSecondsPer1000Jobs"] + (r["valkeyCpuSecondsPer1000Jobs"] or 0)
        r["relayPlusValkeyCpuRatioVsReference"] = round(both / ref["relayCpuSecondsPer1000Jobs"], 2)

store_go, store_ref = load("store-go.json"), load("store-reference.json")
slow_load = load("slowlog-load.json")
profile = load("slowlog-profile.json")
result = {"machine": {"cpus": int(cpus), "uptime": uptime.strip(), "valkey": valkey_kind},
          "throughput": runs, "storeGo": store_go, "storeReference": store_ref, "slowlogDuringLoad": slow_load, "scriptProfile": profile}
with open(os.path.join(out, "results.json"), "w") as f:
    json.dump(result, f, indent=2)

def fmt(x, nd=2):
    return "—" if x is None else (f"{x:.{nd}f}" if isinstance(x, float) else str(x))

L = []
L.append("# Relay benchmark\n")
L.append(f"Machine: {cpus} CPUs, `{uptime.strip()}` at the end. Valkey: {valkey_kind}.\n")
s = ref["settings"]
L.append(f"Loadgen (same for all three): {s['sites']} sites, {s['daemons']} daemons × {s['daemonSlots']} slots, closed loop {s['concurrency']} in flight, "
         f"{s['jobs']} jobs or {s['duration']}, payload {s['payloadChars']} chars, ttl {s['ttl']}, full signing and sealing; every result opened and checked.\n")
L.append("## Throughput and CPU\n")
L.append("| target | jobs/s | collected | lost | run twice | relay CPU s / 1k jobs | Valkey CPU s / 1k jobs | Valkey script ms / 1k jobs | scripts / job | loadgen CPU s / 1k jobs | e2e p50 / p99 ms | claim p50 / p99 ms | jobs/s vs ref | relay CPU vs ref | relay+Valkey CPU vs ref |")
L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for name in ("reference", "go-1", "go-3"):
    r = runs[name]
    L.append(f"| {r['label']} | {fmt(r['jobsPerSecond'],1)} | {r['collected']} | {r['lost']} | {r['runTwice']} | {fmt(r['relayCpuSecondsPer1000Jobs'],3)} | "
             f"{fmt(r['valkeyCpuSecondsPer1000Jobs'],3)} | {fmt(r['valkeyScriptMsPer1000Jobs'],1)} | {fmt(r['valkeyScriptCallsPerJob'],1)} | {fmt(r['loadgenCpuSecondsPer1000Jobs'],3)} | "
             f"{fmt(r['endToEndP50Ms'],1)} / {fmt(r['endToEndP99Ms'],1)} | {fmt(r['claimP50Ms'],2)} / {fmt(r['claimP99Ms'],2)} | "
             f"{fmt(r.get('throughputRatioVsReference'))} | {fmt(r.get('relayCpuRatioVsReference'))} | {fmt(r.get('relayPlusValkeyCpuRatioVsReference'))} |")
L.append("")
L.append("## Claim latency with N jobs queued\n")
L.append("Go: one claim = Go store call (EVALSHA) on Valkey; Valkey µs/claim from INFO commandstats. Reference: RelayState.claim in-process (sweeps and scans every job).\n")
L.append("| N queued | case | ours p50 / p99 ms | ours Valkey µs / claim | reference p50 / p99 ms |")
L.append("|---|---|---|---|---|")
for case, key in [("not claimable (other routes)", "claimBlocked"), ("claimable (own route)", "claimClaimable")]:
    for g, r in zip(store_go[key], store_ref[key]):
        L.append(f"| {g['queued']:,} | {case} | {fmt(g['p50Ms'],3)} / {fmt(g['p99Ms'],3)} | {fmt(g['valkeyUsPerOp'],1)} | {fmt(r['p50Ms'],3)} / {fmt(r['p99Ms'],3)} |")
L.append("")
sg, sr = store_go["sweep"], store_ref["sweep"]
L.append("## Sweep, memory\n")
L.append("| measure | ours | reference |")
L.append("|---|---|---|")
L.append(f"| sweep of {sg['queued']:,} jobs, 1% due ({sg['settled']} settled) | {fmt(sg['wallMs'],1)} ms wall, {fmt(sg['valkeyUsPerOp']/1000,1)} ms in Valkey over {int(sg['scriptsPerOp'])} scripts | {fmt(sr['wallMs'],1)} ms |")
L.append(f"| memory per queued job | {fmt(store_go['memPerQueuedJobBytes'],0)} B (Valkey used_memory) | {fmt(store_ref['memPerQueuedJobBytes'],0)} B (V8 heap+external) |")
L.append(f"| memory per finished job ({store_go['finishedJobEnvelopeBytes']} B of envelopes) | {fmt(store_go['memPerFinishedJobBytes'],0)} B | {fmt(store_ref['memPerFinishedJobBytes'],0)} B |")
L.append("")
L.append("## Valkey script time (SLOWLOG)\n")
L.append("Per script, every call logged (threshold 0) during a separate Go-relay run of the same settings "
         f"({sum(v['calls'] for v in profile['byScript'].values())} script calls). "
         "SLOWLOG time is execution time inside Valkey; on a busy machine it includes time the server was descheduled, "
         "which the O(1) commands (last row: HSET, HGET, ZSCORE, TIME..., mostly called from inside the scripts) show.\n")
L.append("| script | calls | p50 µs | p99 µs | max µs | > 1 ms |")
L.append("|---|---|---|---|---|---|")
for name, t in sorted(profile["byScript"].items(), key=lambda kv: -kv[1]["p99Us"]):
    L.append(f"| {name} | {t['calls']} | {t['p50Us']} | {t['p99Us']} | {t['maxUs']} | {t['over1ms']} |")
p = profile["plain"]
L.append(f"| (O(1) commands) | {p['calls']} | {p['p50Us']} | {p['p99Us']} | {p['maxUs']} | {p['over1ms']} |")
if not all(t["complete"] for t in profile["byScript"].values()):
    L.append("\n(SLOWLOG overflowed: the distribution is the most recent calls only.)")
L.append("")
L.append("Script calls over 1 ms (SLOWLOG armed at 1 ms):\n")
L.append("| window | script calls > 1 ms | max script µs | by script | O(1) commands > 1 ms | LATENCY LATEST |")
L.append("|---|---|---|---|---|---|")
for label, sl in [("Go relay measured load runs (1 and 3 replicas)", slow_load), ("store scenarios (incl. 64-way enqueue of 100k jobs)", store_go["slowlog"])]:
    by = ", ".join(f"{k}: {v['calls']}" for k, v in sorted(sl["byScript"].items())) or "none"
    L.append(f"| {label} | {sl['scriptEntries']} | {sl['maxScriptUs']} | {by} | {sl['plain']['calls']} | {'; '.join(sl['latencyLatest']) or 'none'} |")
L.append("")
bad = [n for n, r in runs.items() if r["lost"] or r["runTwice"] or r["integrity"]]
L.append("Verdict: " + ("every run balanced (0 lost, 0 run twice, 0 integrity failures)." if not bad else f"UNBALANCED runs: {', '.join(bad)}."))
md = "\n".join(L) + "\n"
with open(os.path.join(out, "results.md"), "w") as f:
    f.write(md)
print(md)
EOF
