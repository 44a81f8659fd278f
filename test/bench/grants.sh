#!/usr/bin/env bash
# Grant overhead: relay CPU per job with and without grants, one replica.
#
#   test/bench/grants.sh                 # 6000 jobs per run (or 45 s)
#   BENCH_QUICK=1 test/bench/grants.sh   # 600 jobs per run (or 20 s)
#   BENCH_PAIRS=3 test/bench/grants.sh   # pairs of runs (default 2)
#
# Both runs put the same team load through the relay (loadgen -team: every
# job is a teammate's, audience "team", routed to the owner's devices by a
# roster, offered at scope "team"):
#   without  relay started without a grant engine; claims carry no grant.
#   with     relay started with RELAY_GRANT_KEY_FILE; loadgen -grants pushes
#            the policy (consents mapped to the owner's service, team
#            membership) through POST /policy/merge, so every enqueue asks
#            satisfiable and every claimed job is granted, and the simulated
#            daemons verify each grant against the key their pairing pinned.
# Each run gets a fresh relay and namespace and a warm-up; the pairs run back
# to back (without, with) so a shared machine's load hits both alike. Relay
# CPU is utime+stime of the relay process from /proc/<pid>/stat over the
# measured run only.
#
# Valkey: a private redis-server on a free loopback port, or BENCH_VALKEY_URL.
# Output: the table on stdout and test/bench/out/grants.json.
set -euo pipefail

cd "$(dirname "$0")/../.."
. test/bench/lib.sh
bench_init grants-bench
PAIRS=${BENCH_PAIRS:-2}
if [ "${BENCH_QUICK:-0}" = 1 ]; then LG_JOBS=600; LG_DURATION=20s; else LG_JOBS=6000; LG_DURATION=45s; fi
std_load "$LG_JOBS" "$LG_DURATION"


log "building relay and loadgen"
go build -o "$BIN/relay" ./cmd/relay
go build -o "$BIN/loadgen" ./cmd/loadgen

if [ -n "${BENCH_VALKEY_URL:-}" ]; then
  VALKEY_URL=$BENCH_VALKEY_URL
else
  VPORT=$(free_port)
  mkdir -p "$OUT/valkey-grants"
  "$SERVER" --port "$VPORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$OUT/valkey-grants" \
    --logfile "$OUT/valkey-grants/server.log" &
  STARTED+=("$!")
  VALKEY_URL=redis://127.0.0.1:$VPORT/0
  for _ in $(seq 1 50); do "$CLI" -p "$VPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
fi
KEY=$OUT/grant-bench.key
head -c 32 /dev/urandom | base64 >"$KEY"
chmod 600 "$KEY"

# run MODE INDEX: one relay, a warm-up, the measured run; writes
# $OUT/grants-MODE-INDEX.json (loadgen report) and .cpu (relay ticks).
run() {
  local mode=$1 i=$2 name="grants-$1-$2" flag=-team
  local ns="bench-grants-$(head -c 6 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  local env=(RELAY_VALKEY_URL="$VALKEY_URL" RELAY_NAMESPACE="$ns" RELAY_LISTEN=127.0.0.1:0
             RELAY_ADMIN_LISTEN=127.0.0.1:0 RELAY_ADMIN_TOKEN="$TOKEN" RELAY_LOG_LEVEL=warn)
  if [ "$mode" = with ]; then env+=(RELAY_GRANT_KEY_FILE="$KEY"); flag=-grants; fi
  env "${env[@]}" "$BIN/relay" >"$OUT/$name.stdout" 2>"$OUT/$name.log" &
  local pid=$!
  STARTED+=("$pid")
  for _ in $(seq 1 300); do [ -s "$OUT/$name.stdout" ] && break; sleep 0.1; done
  local listen admin
  listen=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["listen"])' "$OUT/$name.stdout")
  admin=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["admin"])' "$OUT/$name.stdout")
  timeout 120 "$BIN/loadgen" -replicas "http://$listen" -admin "http://$admin" -admin-token "$TOKEN" $flag \
    -sites 2 -daemons 4 -jobs 200 -concurrency 16 -quiet >"$OUT/$name-warmup.txt" || {
      log "$name: warm-up failed"; cat "$OUT/$name-warmup.txt" >&2; exit 1; }
  local r0 r1
  r0=$(cpu_ticks "$pid")
  log "$name: measured run (${LG_JOBS} jobs or ${LG_DURATION})"
  timeout 300 "$BIN/loadgen" -replicas "http://$listen" -admin "http://$admin" -admin-token "$TOKEN" $flag \
    "${LG_ARGS[@]}" -json "$OUT/$name.json" >"$OUT/$name.txt" || { log "$name: loadgen failed"; cat "$OUT/$name.txt" >&2; exit 1; }
  r1=$(cpu_ticks "$pid")
  echo $((r1 - r0)) >"$OUT/$name.cpu"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  log "$name: $(grep -E '^throughput|^must be 0|^grants' "$OUT/$name.txt" | tr '\n' ' ')"
  "$CLI" -u "$VALKEY_URL" --scan --pattern "$ns:*" | xargs -r -n 500 "$CLI" -u "$VALKEY_URL" unlink >/dev/null
}

for i in $(seq 1 "$PAIRS"); do
  run without "$i"
  run with "$i"
done

python3 - "$OUT" "$PAIRS" "$CLK_TCK" "$(nproc)" "$(uptime)" <<'EOF'
import json, os, sys
out, pairs, tck, cpus, uptime = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
rows = []
for i in range(1, pairs + 1):
    row = {"pair": i}
    for mode in ("without", "with"):
        lg = json.load(open(os.path.join(out, f"grants-{mode}-{i}.json")))
        ticks = int(open(os.path.join(out, f"grants-{mode}-{i}.cpu")).read())
        jobs = lg["jobs"]["collected"]
        ok = lg["jobs"]["lost"] == 0 and lg["jobs"]["runTwice"] == 0 and lg["jobs"]["integrity"] == 0
        row[mode] = {"jobs": jobs, "jobsPerSecond": round(lg["jobsPerSecond"], 1), "relayCpuSeconds": ticks / tck,
                     "relayCpuMsPerJob": round(ticks / tck / jobs * 1000, 3) if jobs else None,
                     "grantsVerified": lg["jobs"].get("grantsVerified", 0), "balanced": ok}
    a, b = row["without"]["relayCpuMsPerJob"], row["with"]["relayCpuMsPerJob"]
    row["ratio"] = round(b / a, 3) if a and b else None
    rows.append(row)
json.dump({"cpus": cpus, "uptime": uptime.strip(), "pairs": rows}, open(os.path.join(out, "grants.json"), "w"), indent=2)
print(f"Grant overhead, 1 replica ({cpus} CPUs; `{uptime.strip()}`)\n")
print("| pair | without: jobs, jobs/s, relay CPU ms/job | with grants: jobs, jobs/s, relay CPU ms/job, grants verified | with / without |")
print("|---|---|---|---|")
for r in rows:
    w, g = r["without"], r["with"]
    print(f"| {r['pair']} | {w['jobs']}, {w['jobsPerSecond']}, {w['relayCpuMsPerJob']} | {g['jobs']}, {g['jobsPerSecond']}, {g['relayCpuMsPerJob']}, {g['grantsVerified']} | {r['ratio']} |")
bad = [r["pair"] for r in rows if not (r["with"]["balanced"] and r["without"]["balanced"])]
print("\n" + ("every run balanced (0 lost, 0 run twice, 0 integrity failures)" if not bad else f"UNBALANCED pairs: {bad}"))
EOF
