#!/usr/bin/env bash
# Relay CPU per signed request and per job, the relay at OLD_REV against the
# relay of this tree, each read against one Ed25519 verification timed in
# the same run. One private redis-server; runs interleaved (old, new, old,
# new, ...) so a machine that gets busier or quieter shifts both alike.
#
#   test/bench/reqcpu.sh                          # OLD_REV = merge-base with main, 2 rounds
#   OLD_REV=<rev> ROUNDS=3 IDLE_DAEMONS=400 IDLE_FOR=80 BENCH_JOBS=6000 test/bench/reqcpu.sh
#
# Per run and relay:
#   idle: IDLE_DAEMONS daemons that each send a heartbeat and an empty claim
#     every 10 s (loadgen -pair none, as test/bench/cluster.sh's idle part)
#     plus one site polling pending and results every second; relay CPU
#     (utime+stime) over a steady window from IDLE_WARM s on, divided by the
#     signed requests the relay answered in it (relay_http_requests_total of
#     the daemon and site planes on /metrics);
#   load: the load of test/bench/regress.sh (4 sites, 16 daemons, 64 jobs in
#     flight, BENCH_JOBS jobs); relay CPU over the run per collected job.
# Before each round: BenchmarkEd25519Verify (internal/protocol), its CPU
# time per verification (cpu-ns/op, the process's utime+stime per op).
# The relays run with RELAY_STORE_TIMEOUT=30s: on a machine busy with other
# work a store call can take longer than the default, and the retryable 503
# it would answer is not the request being measured.
# Output: test/bench/out/reqcpu.md (and reqcpu-* raw files).
set -euo pipefail

cd "$(dirname "$0")/../.."
. test/bench/lib.sh
bench_init reqcpu
rm -rf "$OUT"/reqcpu-*

OLD_REV=${OLD_REV:-$(git merge-base HEAD main)}
ROUNDS=${ROUNDS:-2}
JOBS=${BENCH_JOBS:-6000}
IDLE_DAEMONS=${IDLE_DAEMONS:-400}
IDLE_FOR=${IDLE_FOR:-80}
IDLE_WARM=${IDLE_WARM:-25}
std_load "$JOBS" 45s

# signed requests answered so far: the daemon and site planes' request counter
signed() {
  curl -sf "$1/metrics" | awk '/^relay_http_requests_total\{/ && /plane="(daemon|site)"/ {n += $NF} END {printf "%d\n", n}'
}

log "building the relay at $OLD_REV and of this tree, loadgen and the verify benchmark"
build_old "$OLD_REV" relay-old=./cmd/relay
go build -o "$BIN/relay-new" ./cmd/relay
go build -o "$BIN/loadgen" ./cmd/loadgen
go test -c -o "$BIN/protocol.test" ./internal/protocol

VPORT=$(free_port)
mkdir -p "$OUT/reqcpu-valkey"
"$SERVER" --port "$VPORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$OUT/reqcpu-valkey" \
  --logfile "$OUT/reqcpu-valkey/server.log" --lazyfree-lazy-user-del yes &
VPID=$!; STARTED+=("$VPID")
for _ in $(seq 1 50); do "$CLI" -p "$VPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

RELAY_PID="" LISTEN="" ADMIN=""
start_relay() { # KIND NAME
  local ns outf
  ns="reqcpu-$2-$(head -c 3 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  outf=$OUT/reqcpu-$2.stdout
  RELAY_VALKEY_URL=redis://127.0.0.1:$VPORT/0 RELAY_NAMESPACE=$ns RELAY_LISTEN=127.0.0.1:0 \
    RELAY_ADMIN_LISTEN=127.0.0.1:0 RELAY_ADMIN_TOKEN=$TOKEN RELAY_LOG_LEVEL=warn RELAY_STORE_TIMEOUT=30s \
    "$BIN/relay-$1" >"$outf" 2>"$OUT/reqcpu-$2.log" &
  RELAY_PID=$!; STARTED+=("$RELAY_PID")
  for _ in $(seq 1 300); do [ -s "$outf" ] && break; sleep 0.1; done
  [ -s "$outf" ] || { log "relay-$1 not ready"; cat "$OUT/reqcpu-$2.log" >&2; exit 1; }
  LISTEN="http://$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["listen"])' "$outf")"
  ADMIN="http://$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["admin"])' "$outf")"
}
stop_relay() { kill "$RELAY_PID"; wait "$RELAY_PID" 2>/dev/null || true; }

idle() { # KIND ROUND
  local kind=$1 round=$2 lg r0 q0 r1 q1
  start_relay "$kind" "idle-$kind-$round"
  log "$kind round $round: idle, $IDLE_DAEMONS daemons for ${IDLE_FOR}s"
  "$BIN/loadgen" -replicas "$LISTEN" -admin "$ADMIN" -admin-token "$TOKEN" -sites 1 -daemons "$IDLE_DAEMONS" -slots 1 \
    -pair none -rate 0.05 -duration "${IDLE_FOR}s" -drain 10s -ttl 120s -heartbeat 10s -claim-poll 10s \
    -pending-poll 1s -results-poll 1s -quiet -json "$OUT/reqcpu-idle-$kind-$round.json" >/dev/null &
  lg=$!; STARTED+=("$lg")
  sleep "$IDLE_WARM"
  r0=$(cpu_ticks "$RELAY_PID"); q0=$(signed "$ADMIN")
  sleep $((IDLE_FOR - IDLE_WARM - 5))
  r1=$(cpu_ticks "$RELAY_PID"); q1=$(signed "$ADMIN")
  wait "$lg" || log "idle loadgen exited $?"
  stop_relay
  printf '{"part":"idle","kind":"%s","round":%s,"relayTicks":%s,"requests":%s,"loadavg":"%s"}\n' \
    "$kind" "$round" $((r1 - r0)) $((q1 - q0)) "$(cut -d' ' -f1 /proc/loadavg)" >>"$OUT/reqcpu-runs.jsonl"
}

load() { # KIND ROUND
  local kind=$1 round=$2 r0 r1 q0 q1
  start_relay "$kind" "load-$kind-$round"
  timeout 120 "$BIN/loadgen" -replicas "$LISTEN" -admin "$ADMIN" -admin-token "$TOKEN" \
    -sites 2 -daemons 4 -jobs 200 -concurrency 16 -quiet >/dev/null || log "warm-up loadgen exited $?"
  r0=$(cpu_ticks "$RELAY_PID"); q0=$(signed "$ADMIN")
  log "$kind round $round: load, $JOBS jobs"
  timeout 300 "$BIN/loadgen" -replicas "$LISTEN" -admin "$ADMIN" -admin-token "$TOKEN" "${LG_ARGS[@]}" \
    -json "$OUT/reqcpu-load-$kind-$round.json" >/dev/null || log "load loadgen exited $? (see its report)"
  r1=$(cpu_ticks "$RELAY_PID"); q1=$(signed "$ADMIN")
  stop_relay
  printf '{"part":"load","kind":"%s","round":%s,"relayTicks":%s,"requests":%s,"report":"%s","loadavg":"%s"}\n' \
    "$kind" "$round" $((r1 - r0)) $((q1 - q0)) "$OUT/reqcpu-load-$kind-$round.json" \
    "$(cut -d' ' -f1 /proc/loadavg)" >>"$OUT/reqcpu-runs.jsonl"
}

verify() { # ROUND
  local ns
  ns=$("$BIN/protocol.test" -test.run '^$' -test.bench '^BenchmarkEd25519Verify$' -test.benchtime 5000x |
    awk '/cpu-ns\/op/ {for (i = 1; i <= NF; i++) if ($(i+1) == "cpu-ns/op") print $i}')
  printf '{"part":"verify","round":%s,"cpuNs":%s,"loadavg":"%s"}\n' "$1" "$ns" "$(cut -d' ' -f1 /proc/loadavg)" >>"$OUT/reqcpu-runs.jsonl"
}

for round in $(seq 1 "$ROUNDS"); do
  verify "$round"
  idle old "$round"; idle new "$round"
  load old "$round"; load new "$round"
done
verify $((ROUNDS + 1))

python3 - "$OUT" "$CLK_TCK" "$OLD_REV" "$NEW_REV" <<'EOF' | tee "$OUT/reqcpu.md"
import json, statistics, sys
out, tck, old_rev, new_rev = sys.argv[1], int(sys.argv[2]), sys.argv[3][:7], sys.argv[4]
runs = [json.loads(l) for l in open(f"{out}/reqcpu-runs.jsonl")]
v = statistics.median(r["cpuNs"] for r in runs if r["part"] == "verify") / 1000
print(f"Ed25519 verify (BenchmarkEd25519Verify, CPU time per op, median of {sum(r['part'] == 'verify' for r in runs)}): {v:.1f} µs; "
      f"load average {', '.join(r['loadavg'] for r in runs if r['part'] == 'verify')}\n")
label = {"old": f"old ({old_rev})", "new": f"new ({new_rev})"}
med = {}
print("| relay | round | idle: signed requests | relay CPU µs / request | × verify | load: jobs | relay CPU ms / job | × verify | requests / job | load avg (idle, load) |")
print("|---|---|---|---|---|---|---|---|---|---|")
for kind in ("old", "new"):
    idle = {r["round"]: r for r in runs if r["part"] == "idle" and r["kind"] == kind}
    load = {r["round"]: r for r in runs if r["part"] == "load" and r["kind"] == kind}
    for rnd in sorted(idle):
        i, l = idle[rnd], load.get(rnd)
        per_req = 1e6 * i["relayTicks"] / tck / max(i["requests"], 1)
        row = {"req": per_req}
        cells = f"| {label[kind]} | {rnd} | {i['requests']} | {per_req:.0f} | {per_req / v:.2f} |"
        if l:
            jobs = json.load(open(l["report"]))["jobs"]["collected"]
            per_job = 1e3 * l["relayTicks"] / tck / max(jobs, 1)
            row["job"] = per_job
            cells += f" {jobs} | {per_job:.3f} | {per_job * 1000 / v:.1f} | {l['requests'] / max(jobs, 1):.1f} | {i['loadavg']}, {l['loadavg']} |"
        else:
            cells += " – | – | – | – | " + i["loadavg"] + " |"
        med.setdefault(kind, []).append(row)
        print(cells)
print()
for m, unit, scale in (("req", "µs / signed request", 1), ("job", "ms / job", 1000)):
    o = [x[m] for x in med.get("old", []) if m in x]; n = [x[m] for x in med.get("new", []) if m in x]
    if o and n:
        mo, mn = statistics.median(o), statistics.median(n)
        print(f"median relay CPU {unit}: old {mo:.3f} ({mo * scale / v:.2f} × verify) -> new {mn:.3f} ({mn * scale / v:.2f} × verify); new/old {mn / mo:.2f}")
EOF
