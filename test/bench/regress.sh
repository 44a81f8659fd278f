#!/usr/bin/env bash
# Single-node regression check: the relay at OLD_REV against the relay of
# this tree, on one private redis-server, same load as test/bench/run.sh's
# "ours, 1 replica" row, runs interleaved (old, new, old, new, ...) so a
# machine that gets busier or quieter during the run shifts both alike.
#
#   test/bench/regress.sh                        # OLD_REV=0fa7b5d (the single-slot layout), 2 rounds
#   OLD_REV=<rev> ROUNDS=3 BENCH_JOBS=6000 test/bench/regress.sh
#
# Per run: relay CPU s / 1k jobs (utime+stime of the relay process),
# Valkey CPU s / 1k jobs (of the private server), Lua scripts per job
# (INFO commandstats); then the medians and new/old ratios.
# Output: test/bench/out/regress.md (and regress-*.json raw reports).
set -euo pipefail

cd "$(dirname "$0")/../.."
. test/bench/lib.sh
bench_init regress
rm -rf "$OUT"/regress-*

OLD_REV=${OLD_REV:-0fa7b5d}
ROUNDS=${ROUNDS:-2}
JOBS=${BENCH_JOBS:-6000}
std_load "$JOBS" 45s

log "building the relay at $OLD_REV and of this tree, and loadgen"
build_old "$OLD_REV" relay-old=./cmd/relay
go build -o "$BIN/relay-new" ./cmd/relay
go build -o "$BIN/loadgen" ./cmd/loadgen

VPORT=$(free_port)
mkdir -p "$OUT/regress-valkey"
"$SERVER" --port "$VPORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$OUT/regress-valkey" \
  --logfile "$OUT/regress-valkey/server.log" --lazyfree-lazy-user-del yes &
VPID=$!; STARTED+=("$VPID")
for _ in $(seq 1 50); do "$CLI" -p "$VPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

run() { # KIND ROUND
  local kind=$1 round=$2 ns outf pid listen admin r0 v0 s0 r1 v1 s1
  ns="regress-$kind-$round-$(head -c 3 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  outf=$OUT/regress-$kind-$round.stdout
  RELAY_VALKEY_URL=redis://127.0.0.1:$VPORT/0 RELAY_NAMESPACE=$ns RELAY_LISTEN=127.0.0.1:0 \
    RELAY_ADMIN_LISTEN=127.0.0.1:0 RELAY_ADMIN_TOKEN=$TOKEN RELAY_LOG_LEVEL=warn \
    "$BIN/relay-$kind" >"$outf" 2>"$OUT/regress-$kind-$round.log" &
  pid=$!; STARTED+=("$pid")
  for _ in $(seq 1 300); do [ -s "$outf" ] && break; sleep 0.1; done
  [ -s "$outf" ] || { log "relay-$kind not ready"; cat "$OUT/regress-$kind-$round.log" >&2; exit 1; }
  listen="http://$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["listen"])' "$outf")"
  admin="http://$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["admin"])' "$outf")"
  timeout 120 "$BIN/loadgen" -replicas "$listen" -admin "$admin" -admin-token "$TOKEN" \
    -sites 2 -daemons 4 -jobs 200 -concurrency 16 -quiet >/dev/null
  r0=$(cpu_ticks "$pid"); v0=$(cpu_ticks "$VPID"); s0=$(scripts)
  log "$kind round $round: $JOBS jobs"
  timeout 300 "$BIN/loadgen" -replicas "$listen" -admin "$admin" -admin-token "$TOKEN" "${LG_ARGS[@]}" \
    -json "$OUT/regress-$kind-$round.json" >/dev/null
  r1=$(cpu_ticks "$pid"); v1=$(cpu_ticks "$VPID"); s1=$(scripts)
  kill "$pid"; wait "$pid" 2>/dev/null || true
  printf '{"kind":"%s","round":%s,"relayTicks":%s,"valkeyTicks":%s,"scripts":%s,"load":"%s","loadavg":"%s"}\n' \
    "$kind" "$round" $((r1 - r0)) $((v1 - v0)) $((s1 - s0)) "$OUT/regress-$kind-$round.json" \
    "$(cut -d' ' -f1 /proc/loadavg)" >>"$OUT/regress-runs.jsonl"
}

for round in $(seq 1 "$ROUNDS"); do
  run old "$round"
  run new "$round"
done

python3 - "$OUT" "$CLK_TCK" "$OLD_REV" "$NEW_REV" <<'EOF' | tee "$OUT/regress.md"
import json, statistics, sys
out, tck, old_rev, new_rev = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rows = {"old": [], "new": []}
for line in open(f"{out}/regress-runs.jsonl"):
    r = json.loads(line)
    lg = json.load(open(r["load"]))
    jobs = lg["jobs"]["collected"]
    rows[r["kind"]].append({"round": r["round"], "jobs": jobs, "jps": lg["jobsPerSecond"],
        "relay": r["relayTicks"] / tck / jobs * 1000, "valkey": r["valkeyTicks"] / tck / jobs * 1000,
        "scripts": r["scripts"] / jobs, "lost": lg["jobs"]["lost"], "twice": lg["jobs"]["runTwice"], "load": r["loadavg"]})
print(f"| relay | round | jobs | jobs/s | relay CPU s / 1k jobs | Valkey CPU s / 1k jobs | scripts / job | lost / run twice | load avg |")
print("|---|---|---|---|---|---|---|---|---|")
for kind, label in (("old", f"old ({old_rev})"), ("new", f"new ({new_rev})")):
    for x in rows[kind]:
        print(f"| {label} | {x['round']} | {x['jobs']} | {x['jps']:.1f} | {x['relay']:.3f} | {x['valkey']:.3f} | {x['scripts']:.1f} | {x['lost']} / {x['twice']} | {x['load']} |")
med = {k: {m: statistics.median(x[m] for x in v) for m in ("relay", "valkey", "scripts")} for k, v in rows.items()}
print()
print(f"median: relay CPU {med['old']['relay']:.3f} -> {med['new']['relay']:.3f} s/1k jobs (new/old {med['new']['relay']/med['old']['relay']:.2f}); "
      f"Valkey CPU {med['old']['valkey']:.3f} -> {med['new']['valkey']:.3f} s/1k jobs (new/old {med['new']['valkey']/med['old']['valkey']:.2f}); "
      f"scripts/job {med['old']['scripts']:.1f} -> {med['new']['scripts']:.1f}")
EOF
