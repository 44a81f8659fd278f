#!/usr/bin/env bash
# idlecpu.sh: where the relay's CPU goes when its daemons are mostly idle.
#
# One relay of this tree on a private redis-server (started here, port
# VPORT, default 6394, --save ''), then:
#   1. its background CPU with no daemons and no projection (BG seconds):
#      sweeper, work view, projection sync, ops heartbeat, metrics;
#   2. capacity.sh part 3's load (loadgen -profile real -idle-start, DAEMONS
#      daemons, one site pumping every second, a job every 5 s) and, over a
#      steady window, relay CPU (utime+stime) per request the relay's planes
#      answered (relay_http_requests_total), with one of:
#        PROF=pprof   a Go CPU profile of the window (cpu.pprof)
#        PROF=perf    perf record -g of the window, kernel included (perf.data)
#        PROF=stat    perf stat: context switches and migrations
#        PROF=strace  strace -c -f: system calls by kind
#      (perf and strace slow the relay: read their per-request CPU as such).
#   3. one Ed25519 verification (verifybench), the per-request floor.
# Run it under the shared lock: flock /work/bench.lock bash test/bench/idlecpu.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
VPORT=${VPORT:-6394} BG=${BG:-20} IDLE_FOR=${IDLE_FOR:-70} SETTLE=${SETTLE:-20} DAEMONS=${DAEMONS:-400} PROF=${PROF:-none}
OUT=${OUT:-$(mktemp -d /tmp/idlecpu.XXXXXX)}
go build -o "$OUT/relay" ./cmd/relay
go build -o "$OUT/loadgen" ./cmd/loadgen
go build -o "$OUT/verifybench" ./test/bench/verifybench
TOKEN=$(openssl rand -hex 16)
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null || true' EXIT
redis-server --port "$VPORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$OUT" --logfile "$OUT/redis.log" &
PIDS+=($!)
for _ in $(seq 1 50); do redis-cli -p "$VPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
ticks() { local f; f=$(sed 's/^.*) //' "/proc/$1/stat"); set -- $f; echo $((${12} + ${13})); }
field() { python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())[sys.argv[2]])' "$1" "$2"; }
RELAY_VALKEY_URL=redis://127.0.0.1:$VPORT/0 RELAY_NAMESPACE=idlecpu RELAY_LISTEN=127.0.0.1:0 RELAY_ADMIN_LISTEN=127.0.0.1:0 \
  RELAY_ADMIN_TOKEN=$TOKEN RELAY_LOG_LEVEL=warn RELAY_PAIRINGS_PER_ADDRESS=500 "$OUT/relay" >"$OUT/relay.stdout" 2>"$OUT/relay.log" &
RP=$!; PIDS+=($RP)
for _ in $(seq 1 300); do [ -s "$OUT/relay.stdout" ] && break; sleep 0.1; done
URL=http://$(field "$OUT/relay.stdout" listen); ADMIN=http://$(field "$OUT/relay.stdout" admin)
served() { curl -fsS -H "Authorization: Bearer $TOKEN" "$ADMIN/metrics" | awk '/^relay_http_requests_total[{ ]/ && !/plane="admin"/ {n += $NF} END {printf "%d", n}'; }
TCK=$(getconf CLK_TCK)
sleep 3
t0=$(ticks $RP); sleep "$BG"; t1=$(ticks $RP)
echo "background, no daemons: $(( (t1 - t0) * 1000000 / TCK / BG )) µs of relay CPU a second"
"$OUT/loadgen" -replicas "$URL" -admin "$ADMIN" -admin-token "$TOKEN" -sites 1 -daemons "$DAEMONS" -slots 2 -pair none \
  -profile real -idle-start -site-pump 1s -rate 0.2 -duration "${IDLE_FOR}s" -drain 20s -ttl 60s -quiet \
  -json "$OUT/loadgen.json" >"$OUT/loadgen.txt" 2>&1 &
LP=$!; PIDS+=($LP)
sleep "$SETTLE"
W=$((IDLE_FOR - SETTLE - 5))
t0=$(ticks $RP); m0=$(served); s0=$(date +%s.%N)
case $PROF in
  pprof) curl -fsS -H "Authorization: Bearer $TOKEN" -o "$OUT/cpu.pprof" "$ADMIN/debug/pprof/profile?seconds=$W" ;;
  perf) perf record -F 999 -g -p "$RP" -o "$OUT/perf.data" -- sleep "$W" 2>"$OUT/perf.err" ;;
  stat) perf stat -e task-clock,context-switches,cpu-migrations -p "$RP" -o "$OUT/perf-stat.txt" -- sleep "$W" ;;
  strace) timeout -s INT "$W" strace -c -f -p "$RP" -o "$OUT/strace.txt" || true ;;
  *) sleep "$W" ;;
esac
t1=$(ticks $RP); m1=$(served); s1=$(date +%s.%N)
python3 -c 'import sys; c, r, w = [float(x) for x in sys.argv[1:4]]; print("%d daemons: window %.1f s, %d requests (%.1f/s), relay CPU %.0f µs/s, %.0f µs per request" % (int(sys.argv[4]), w, r, r / w, c / w, c / r))' \
  "$(( (t1 - t0) * 1000000 / TCK ))" "$((m1 - m0))" "$(python3 -c "print($s1 - $s0)")" "$DAEMONS"
wait "$LP" || echo "loadgen exited $?"
"$OUT/verifybench" -n 3000 -reps 5
echo "output in $OUT"
