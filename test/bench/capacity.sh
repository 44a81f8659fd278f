#!/usr/bin/env bash
# Capacity and cost per unit, before and after, in one run on this machine.
#
#   test/bench/capacity.sh                    # full run (about 35 minutes: three rounds of ramps)
#   BENCH_QUICK=1 test/bench/capacity.sh      # short run (about 5 minutes, one round of ramps)
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
#    puts 0.2-0.5 s between a daemon's ticks. Pinned (CAP_PIN=1, the
#    default, with two cores or more and taskset): the load generator on the
#    first core this script may use, the relays, their Valkey servers and
#    the reference's Node on the second, so a limit is the target's on one
#    core and not the machine's. CAP_RAMPS rounds (3; 1 under BENCH_QUICK
#    and BENCH_SMOKE), every target once a round, each round reported and
#    the spread of the highest rate and of the ratio to the reference.
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
# 6. The floor of a Go HTTP service (test/bench/floor): after each new-1
#    cost run, a minimal net/http server (decode a ~1.5 KB JSON body, one
#    Ed25519 verify, one Valkey script call) driven at the request rate
#    that run served, from as many keep-alive clients as it had parties
#    (IDLE_DAEMONS + 1 for the idle fleet), on loadgen's shared connection
#    pool; its CPU per request (user+system over the window, from its own
#    getrusage, since a short run's floor CPU is under one clock tick) is
#    the floor every per-request figure is also divided by. Under load it
#    runs a second time with each answer padded to the bytes the relay's
#    answers averaged in that run (loadgen's answer bytes ÷ requests), so
#    the floor also writes what the relay wrote.
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
  # 2,000 queued: with 200, the used_memory delta (about 170 KB) was at
  # times below the server's own movement (buffers grown and freed) and
  # read negative.
  TARGETS=(new-1); MEM_ARGS=(-sizes 2000 -claims 5 -sweep-jobs 100 -mem-jobs 200); VERIFY_ARGS=(-n 300 -reps 3)
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
# The cost rounds alone (no ramps, no memory), for the profiles asked:
#   BENCH_QUICK=1 CAP_COST_ONLY=1 CAP_PROFILES=idle test/bench/capacity.sh   # the idle fleet against the floor
RAMP_ONLY=${CAP_RAMP_ONLY:-0} COST_ONLY=${CAP_COST_ONLY:-0}
read -ra PROFILES <<<"${CAP_PROFILES:-aggressive real idle}"
if [ "$COST_ONLY" = 1 ]; then TARGETS=(); fi
# The cost runs' rate: near what run.sh's closed loop carried, so the
# aggressive profile's idle polling is spread over as many jobs as there.
export COST_RATE=${COST_RATE:-100}
export COST_ROUNDS
MAX_P99=${MAX_P99:-1s}
# Cost runs per target and profile; the report takes the median of the
# balanced ones (a run that lost jobs idles through its whole drain, which
# inflates every per-job figure).
if [ "$QUICK" = 1 ] || [ "$SMOKE" = 1 ]; then COST_ROUNDS=${COST_ROUNDS:-1}; else COST_ROUNDS=${COST_ROUNDS:-2}; fi
# Rounds of ramps: every target once a round, rounds in a row.
if [ "$QUICK" = 1 ] || [ "$SMOKE" = 1 ]; then RAMPS=${CAP_RAMPS:-1}; else RAMPS=${CAP_RAMPS:-3}; fi
# The floor runs under load start this long before their window (the idle
# one waits IDLE_SETTLE, as the relay's idle run does).
if [ "$SMOKE" = 1 ]; then FLOOR_SETTLE=1; else FLOOR_SETTLE=2; fi
# The standard load of test/bench/run.sh, in the open loop.
STD=(-sites 4 -daemons 16 -slots 8 -payload 256 -ttl 20s -profile aggressive -arrivals poisson
     -results-poll 250ms -pending-poll 20ms -claim-poll 50ms -fetch-poll 10ms -heartbeat 5s -lease-ms 60000 -quiet)

CLUSTER_UP=0
on_exit() { [ "$CLUSTER_UP" = 0 ] || bash .ci/cluster stop >/dev/null 2>&1; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
field() { python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())[sys.argv[2]])' "$1" "$2"; }

# ---- build ------------------------------------------------------------------
log "building the relay at $OLD_REV and of this tree, loadgen, storebench, verifybench, floor"
build_old "$OLD_REV" relay-old=./cmd/relay storebench-old=./test/bench/storebench
go build -o "$BIN/relay-new" ./cmd/relay
go build -o "$BIN/storebench-new" ./test/bench/storebench
go build -o "$BIN/loadgen" ./cmd/loadgen
go build -o "$BIN/verifybench" ./test/bench/verifybench
go build -o "$BIN/floor" ./test/bench/floor
if [ ! -f test/reference/node_modules/@byollm/relay/package.json ]; then
  log "installing the reference relay (npm ci)"
  (cd test/reference && npm ci --no-audit --no-fund --loglevel=error) >&2 # its summary is not the report
fi

# ---- valkey: a private server, and a private cluster ------------------------
VPORT=$(free_port)
mkdir -p "$OUT/cap-valkey"
"$SERVER" --port "$VPORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$OUT/cap-valkey" \
  --logfile "$OUT/cap-valkey/server.log" --lazyfree-lazy-user-del yes &
VPID=$!; STARTED+=("$VPID")
for _ in $(seq 1 50); do "$CLI" -p "$VPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
VALKEY_URL=redis://127.0.0.1:$VPORT/0
if [ "${#TARGETS[@]}" -gt 0 ] && printf '%s\n' "${TARGETS[@]}" | grep -q cluster; then
  log "starting a 3-primary cluster on ports $CLUSTER_BASE_PORT-$((CLUSTER_BASE_PORT + 2))"
  CLUSTER_UP=1
  CLUSTER_URL=$(bash .ci/cluster start)
fi

# ---- pinning the ramps ------------------------------------------------------
# The cores this script may use; the ramps put the load generator on the
# first and the target (relays, their servers, the reference's Node) on the
# second. Go sizes GOMAXPROCS from the affinity, so a pinned relay runs
# with GOMAXPROCS=1, as it would on a one-core host.
read -r LG_CPU TGT_CPU ALL_CPUS < <(python3 -c 'import os; c = sorted(os.sched_getaffinity(0)); print(c[0], c[1] if len(c) > 1 else -1, ",".join(map(str, c)))')
PIN=${CAP_PIN:-1} PIN_NOTE=""
if [ "$PIN" = 1 ] && [ "$TGT_CPU" = -1 ]; then PIN=0 PIN_NOTE="not pinned: one core ($ALL_CPUS) available"; fi
if [ "$PIN" = 1 ] && ! command -v taskset >/dev/null 2>&1; then PIN=0 PIN_NOTE="not pinned: no taskset"; fi
[ "$PIN" = 1 ] || [ -n "$PIN_NOTE" ] || PIN_NOTE="not pinned: CAP_PIN=$PIN"
[ -z "$PIN_NOTE" ] || log "ramps $PIN_NOTE"
LG_PIN=() TGT_PIN=() # command prefixes: empty when not pinned
server_pid() { "$CLI" -p "$1" info server | tr -d '\r' | awk -F: '/^process_id:/ {print $2}'; }
server_ports() { echo "$VPORT"; [ "$CLUSTER_UP" = 0 ] || echo "$CLUSTER_BASE_PORT" $((CLUSTER_BASE_PORT + 1)) $((CLUSTER_BASE_PORT + 2)); }
# pin_servers CPUS: every thread of every Valkey server of the run (-a).
pin_servers() { local p; for p in $(server_ports); do taskset -a -p -c "$1" "$(server_pid "$p")" >/dev/null; done; }
pin_on() {
  [ "$PIN" = 1 ] || return 0
  LG_PIN=(taskset -c "$LG_CPU") TGT_PIN=(taskset -c "$TGT_CPU")
  pin_servers "$TGT_CPU"
  log "ramps pinned: load generator on cpu $LG_CPU; relays, Valkey and the reference on cpu $TGT_CPU"
}
pin_off() { [ "$PIN" = 1 ] || return 0; LG_PIN=() TGT_PIN=(); pin_servers "$ALL_CPUS"; }
affinity() { awk '/^Cpus_allowed_list:/ {print $2}' "/proc/$1/status"; }

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
        "${TGT_PIN[@]}" node test/reference/server.mjs >"$outf" 2>"$OUT/cap-$target.log" &
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
    # The enqueue rate limit is lifted: four sites at the default 200 a
    # second would cap a ramp near 800-1,000 jobs/s, a figure of the
    # configuration, not of the relay. So is the per-address connection
    # cap, as start_relays does (lib.sh): every simulated party connects
    # from 127.0.0.1, and a stall at an overloaded step made the load
    # generator open more than the default 512 and get 503s no fleet of
    # devices would.
    RELAY_VALKEY_URL=$url RELAY_NAMESPACE=$ns RELAY_LISTEN=127.0.0.1:0 RELAY_ADMIN_LISTEN=127.0.0.1:0 \
      RELAY_ADMIN_TOKEN=$TOKEN RELAY_LOG_LEVEL=warn RELAY_PAIRINGS_PER_ADDRESS=500 RELAY_SITE_LIMITS='*=rate:off' \
      RELAY_MAX_CONNS_PER_ADDRESS=2048 \
      "${TGT_PIN[@]}" "$BIN/relay-$kind" >"$outf" 2>"$OUT/cap-$target-$ns-r$i.log" &
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
warm_up() { timeout 120 "${LG_PIN[@]}" "$BIN/loadgen" -replicas "$(IFS=,; echo "${URLS[*]}")" -admin "$ADMIN" -admin-token "$TOKEN" \
  -sites 2 -daemons 4 -jobs 200 -concurrency 16 -quiet >/dev/null || log "warm-up of $1 did not balance"; }

# ---- 1. capacity ramps ------------------------------------------------------
ramp() { # TARGET ROUND
  local target=$1 round=$2 ns highest limit mid base p aff="" vaff=""
  base=$OUT/cap-ramp-$target-r$round
  ns=$(newns "$target")
  start_target "$target" "$ns"
  warm_up "$target"
  # What the target's processes are allowed to run on, read back: the
  # report states the pinning it saw, not the one it asked for.
  for p in "${PIDS[@]}"; do aff+="${aff:+ }$(affinity "$p")"; done
  for p in "${VPORTS[@]}"; do vaff+="${vaff:+ }$(affinity "$(server_pid "$p")")"; done
  log "$target: ramp $round/$RAMPS, $RATES, $STEP a step (load $(loadavg))"
  timeout 900 "${LG_PIN[@]}" "$BIN/loadgen" -replicas "$(IFS=,; echo "${URLS[*]}")" -admin "$ADMIN" -admin-token "$TOKEN" "${STD[@]}" \
    -ramp "$RATES" -duration "$STEP" -drain 10s -max-p99 "$MAX_P99" -json "$base.json" \
    >"$base.txt" || log "$target: ramp exited $?"
  highest=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["highestSustained"])' "$base.json")
  limit=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["firstNotSustained"])' "$base.json")
  if python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) > 0 and float(sys.argv[2]) > 0 else 1)' "$highest" "$limit"; then
    mid=$(python3 -c 'import sys; print(round((float(sys.argv[1]) + float(sys.argv[2])) / 2))' "$highest" "$limit")
    timeout 300 "${LG_PIN[@]}" "$BIN/loadgen" -replicas "$(IFS=,; echo "${URLS[*]}")" -admin "$ADMIN" -admin-token "$TOKEN" "${STD[@]}" \
      -ramp "$mid" -duration "$STEP" -drain 10s -max-p99 "$MAX_P99" -json "$base-mid.json" \
      >>"$base.txt" || true
  fi
  tail -n 3 "$base.txt" | sed "s/^/[$target r$round] /" >&2
  printf '{"target": "%s", "round": %s, "load": "%s", "targetCpus": "%s", "valkeyCpus": "%s"}\n' \
    "$target" "$round" "$(loadavg)" "$aff" "$vaff" >>"$OUT/cap-ramps.jsonl"
  stop_target
}

# ---- 2./3. costs at a fixed rate, and idle daemons --------------------------
now() { date +%s.%N; }
cost() { # TARGET PROFILE ROUND
  local target=$1 profile=$2 round=$3 ns name r0 r1 v0 v1 t0 t1 rc=0
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
    r0=$(cpu_ticks "${PIDS[@]}"); v0=$(valkey_stats "${VPORTS[@]}"); m0=$(served); t0=$(now)
    wait "$lgpid" || rc=$?
    r1=$(cpu_ticks "${PIDS[@]}"); v1=$(valkey_stats "${VPORTS[@]}"); m1=$(served); t1=$(now)
  else
    r0=$(cpu_ticks "${PIDS[@]}"); v0=$(valkey_stats "${VPORTS[@]}"); t0=$(now)
    timeout 300 "$BIN/loadgen" -replicas "$(IFS=,; echo "${URLS[*]}")" -admin "$ADMIN" -admin-token "$TOKEN" "${args[@]}" \
      -json "$OUT/cap-cost-$name.json" >"$OUT/cap-cost-$name.txt" || rc=$?
    r1=$(cpu_ticks "${PIDS[@]}"); v1=$(valkey_stats "${VPORTS[@]}"); t1=$(now)
  fi
  printf '{"name":"%s","target":"%s","profile":"%s","round":%s,"relayTicks":%s,"valkeyBefore":%s,"valkeyAfter":%s,"served":%s,"windowS":%s,"loadgenExit":%s,"load":"%s"}\n' \
    "$name" "$target" "$profile" "$round" $((r1 - r0)) "$v0" "$v1" $((m1 - m0)) "$(awk "BEGIN{print $t1 - $t0}")" "$rc" "$(loadavg)" >>"$OUT/cap-costs.jsonl"
  stop_target
}

# ---- 6. the floor: a minimal Go service at the rate a relay run served -------
floor_run() { # PROFILE ROUND [bytes]: copies the new-1 cost run of that profile and round
  # With "bytes", each answer is padded to what that run's answers averaged
  # (loadgen's answer bytes ÷ its requests): the floor then also writes what
  # the relay wrote.
  local profile=$1 round=$2 match=${3:-} name rate clients burst settle dur outf spid dpid addr p0 p1 v0 v1 s0 s1 t0 t1 rc=0 answer=0
  name=floor-$profile-$round
  if [ "$match" = bytes ]; then
    name=floor-bytes-$profile-$round
    answer=$(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
print(round(r.get("answerBytes", 0) / r["requests"]) if r["requests"] else 0)' "$OUT/cap-cost-new-1-$profile-$round.json")
  fi
  # Its request rate: what the relay served over its window (the idle
  # fleet: relay_http_requests_total; under load: loadgen's requests).
  rate=$(python3 -c '
import json, sys
c = [c for c in map(json.loads, open(sys.argv[1])) if c["name"] == sys.argv[2]][-1]
req = c["served"] or json.load(open(sys.argv[3]))["requests"]
print(round(req / c["windowS"], 2) if c["windowS"] > 0 else 0)' "$OUT/cap-costs.jsonl" "new-1-$profile-$round" "$OUT/cap-cost-new-1-$profile-$round.json")
  if [ "$profile" = idle ]; then
    # The fleet: a heartbeat and a claim a tick from each daemon, and the site.
    clients=$((IDLE_DAEMONS + 1)) burst=2 settle=$IDLE_SETTLE dur=$IDLE_FOR
  else
    # The standard load's 4 sites and 16 daemons; the aggressive profile's
    # polls go one at a time, a real-profile tick is a heartbeat and a claim.
    clients=20 settle=$FLOOR_SETTLE dur=$(( ${COST_FOR%s} + FLOOR_SETTLE ))s
    if [ "$profile" = real ]; then burst=2; else burst=1; fi
  fi
  if ! python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) > 0 else 1)' "$rate"; then
    log "$name: the relay run served nothing to copy; no floor"
    return 0
  fi
  outf=$OUT/cap-$name.stdout
  "$BIN/floor" serve -valkey "$VALKEY_URL" -clients "$clients" -answer-bytes "$answer" >"$outf" 2>"$OUT/cap-$name.log" &
  spid=$!; STARTED+=("$spid")
  for _ in $(seq 1 100); do [ -s "$outf" ] && break; sleep 0.1; done
  [ -s "$outf" ] || { log "floor server not ready"; cat "$OUT/cap-$name.log" >&2; exit 1; }
  addr=http://$(field "$outf" listen)
  log "$name: $clients clients at $rate requests/s, $burst a tick, $([ "$answer" = 0 ] && echo "short answers" || echo "answers of $answer bytes"), for $dur (load $(loadavg))"
  "$BIN/floor" drive -url "$addr" -clients "$clients" -rate "$rate" -burst "$burst" -duration "$dur" \
    -json "$OUT/cap-$name.json" >/dev/null 2>"$OUT/cap-$name-drive.log" &
  dpid=$!
  sleep "$settle"
  p0=$(cpu_ticks "$spid"); v0=$(valkey_stats "$VPORT"); s0=$(curl -fsS "$addr/stats"); t0=$(now)
  wait "$dpid" || rc=$?
  p1=$(cpu_ticks "$spid"); v1=$(valkey_stats "$VPORT"); s1=$(curl -fsS "$addr/stats"); t1=$(now)
  printf '{"name":"%s","profile":"%s","round":%s,"clients":%s,"burst":%s,"rate":%s,"answerBytes":%s,"serverTicks":%s,"statsBefore":%s,"statsAfter":%s,"valkeyBefore":%s,"valkeyAfter":%s,"windowS":%s,"driveExit":%s,"load":"%s"}\n' \
    "$name" "$profile" "$round" "$clients" "$burst" "$rate" "$answer" $((p1 - p0)) "$s0" "$s1" "$v0" "$v1" "$(awk "BEGIN{print $t1 - $t0}")" "$rc" "$(loadavg)" >>"$OUT/cap-floor.jsonl"
  kill "$spid" 2>/dev/null || true; wait "$spid" 2>/dev/null || true
}

LOAD_START=$(loadavg)
verify_floor
if [ "$COST_ONLY" != 1 ]; then
  pin_on
  for round in $(seq 1 "$RAMPS"); do
    for t in "${TARGETS[@]}"; do ramp "$t" "$round"; done
  done
  pin_off
  verify_floor
fi
if [ "$RAMP_ONLY" != 1 ]; then
  for round in $(seq 1 "$COST_ROUNDS"); do
    for profile in "${PROFILES[@]}"; do
      cost old-1 "$profile" "$round"
      cost new-1 "$profile" "$round"
      floor_run "$profile" "$round"
      # Under load the relay's answers (results, payloads) are far longer
      # than the floor's; idle they are as short.
      [ "$profile" = idle ] || floor_run "$profile" "$round" bytes
      verify_floor
    done
  done

  # ---- 4. memory ------------------------------------------------------------
  if [ "$COST_ONLY" != 1 ]; then
    for kind in old new; do
      log "memory per job: storebench of $kind"
      # The server is this script's own and no relay runs now: emptied, it
      # is the fresh server storebench's figures are defined on (the cost
      # runs' keys would otherwise expire under its used_memory deltas).
      "$CLI" -p "$VPORT" flushall sync >/dev/null
      timeout 600 "$BIN/storebench-$kind" -valkey "$VALKEY_URL" "${MEM_ARGS[@]}" -json "$OUT/cap-store-$kind.json" >/dev/null
    done
  fi
  verify_floor
fi
LOAD_END=$(loadavg)
PIN_DESC=$([ "$PIN" = 1 ] && echo "load generator on cpu $LG_CPU; relays, their Valkey and the reference's Node on cpu $TGT_CPU" || echo "$PIN_NOTE")

# Clean the namespaces the relays wrote on the private server (it goes away
# with the run anyway; the cluster is stopped).
"$CLI" -p "$VPORT" flushall >/dev/null || true

# ---- report -----------------------------------------------------------------
python3 - "$OUT" "$CLK_TCK" "$OLD_REV" "$NEW_REV" "$LOAD_START" "$LOAD_END" "$(nproc)" "$MAX_P99" "$QUICK" \
  "$RAMP_ONLY" "$PIN" "$PIN_DESC" "$LG_CPU" "$TGT_CPU" "$RAMPS" <<'EOF' | tee "$OUT/capacity.md"
import json, os, statistics, sys
out, tck, old_rev, new_rev, load0, load1, cpus, max_p99, quick, ramp_only, pin, pin_desc, lg_cpu, tgt_cpu, nramps = sys.argv[1:16]
tck = int(tck)
ramp_only = ramp_only == "1"
J = lambda name: json.load(open(os.path.join(out, name)))
verify = [json.loads(l) for l in open(os.path.join(out, "cap-verify.jsonl"))]
v_us = statistics.median(v["verifyNs"] for v in verify) / 1000
vr_us = statistics.median(v["verifyRequestNs"] for v in verify) / 1000

def spread(xs):
    """min / median / max of the figures there are, and max ÷ min."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    lo, hi = min(xs), max(xs)
    return {"n": len(xs), "min": lo, "median": statistics.median(xs), "max": hi, "maxOverMin": hi / lo if lo > 0 else None}

labels = {"reference": "reference (Node)", "old-1": f"old ×1", "new-1": f"new ×1", "old-3": "old ×3",
          "new-3": "new ×3", "old-cluster": "old ×3, 3-primary cluster", "new-cluster": "new ×3, 3-primary cluster"}
order = ("reference", "old-1", "new-1", "old-3", "new-3", "old-cluster", "new-cluster")
# Every ramp of every round, then per target the spread over the rounds of
# its highest sustained rate and of its ratio to the reference's ramp of
# the same round.
ramps = {}
have = lambda name: os.path.exists(os.path.join(out, name))
for line in (open(os.path.join(out, "cap-ramps.jsonl")) if have("cap-ramps.jsonl") else []):
    meta = json.loads(line)
    t, rnd = meta["target"], meta["round"]
    base = f"cap-ramp-{t}-r{rnd}"
    r = J(f"{base}.json")
    steps = list(r["steps"])
    highest, limit = r["highestSustained"], r["firstNotSustained"]
    if have(f"{base}-mid.json"):
        m = J(f"{base}-mid.json")
        steps += m["steps"]
        if m["highestSustained"] > 0:
            highest = m["highestSustained"]
        elif m["steps"]:
            limit = m["steps"][0]["rate"]
    best = next((s for s in steps if s["rate"] == highest), None)
    failed = next((s for s in steps if s["rate"] == limit), None)
    ramps.setdefault(t, {"rounds": []})["rounds"].append({
        "round": rnd, "highest": highest, "limit": limit, "at": best, "failed": failed, "load": meta["load"],
        "targetCpus": meta["targetCpus"], "valkeyCpus": meta["valkeyCpus"],
        "steps": [{k: v for k, v in s.items() if k != "report"} for s in steps]})
ref_by_round = {r["round"]: r["highest"] for r in ramps.get("reference", {}).get("rounds", [])}
for t, rt in ramps.items():
    for r in rt["rounds"]:
        ref = ref_by_round.get(r["round"])
        r["vsReference"] = r["highest"] / ref if ref and r["highest"] else None
    rt["highest"] = spread([r["highest"] or None for r in rt["rounds"]])
    rt["vsReference"] = spread([r["vsReference"] for r in rt["rounds"]]) if t != "reference" else None

runs, costs, floors, floor_runs, store = {}, {}, {}, {}, {}
if not ramp_only:
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
            "requestsPerSecond": req / c["windowS"] if c["windowS"] else None,
            "relayMsPerJob": relay_ms / jobs if jobs else None,
            "relayUsPerRequest": relay_ms * 1000 / req if req else None,
            "requestsPerJob": req / jobs if jobs else None,
            "valkeyMsPerJob": vk * 1000 / jobs if jobs else None,
            "valkeyUsPerRequest": vk * 1e6 / req if req else None,
            "scriptsPerJob": sc / jobs if jobs else None,
            "loadgenMsPerJob": rep["loadgenCpuSeconds"] * 1000 / jobs if jobs else None,
            "answerBytesPerRequest": rep.get("answerBytes", 0) / rep["requests"] if rep["requests"] else None,
            "e2eP50Ms": rep["phases"]["end-to-end"]["p50Ms"], "e2eP99Ms": rep["phases"]["end-to-end"]["p99Ms"],
            "load": c["load"],
        }
    # The floor runs: the minimal service's CPU per request it answered in
    # its window, and its Valkey's.
    for line in (open(os.path.join(out, "cap-floor.jsonl")) if have("cap-floor.jsonl") else []):
        c = json.loads(line)
        d = J(f"cap-{c['name']}.json")
        req = c["statsAfter"]["requests"] - c["statsBefore"]["requests"]
        vk = c["valkeyAfter"]["cpu"] - c["valkeyBefore"]["cpu"]
        floor_runs[c["name"]] = {"key": c["profile"] + ("-bytes" if c.get("answerBytes") else ""),
            "ok": req > 0 and c["statsAfter"]["refused"] == 0 and c["driveExit"] == 0,
            "answerBytesAsked": c.get("answerBytes", 0),
            "answerBytesPerRequest": d.get("answerBytes", 0) / d["ok"] if d["ok"] else None,
            "clients": c["clients"], "burst": c["burst"], "rateAsked": c["rate"], "requests": req, "windowS": c["windowS"],
            "requestsPerSecond": req / c["windowS"] if c["windowS"] else None,
            "serverUsPerRequest": ((c["statsAfter"]["cpuSeconds"] - c["statsBefore"]["cpuSeconds"]) if "cpuSeconds" in c["statsAfter"]
                                   else c["serverTicks"] / tck) * 1e6 / req if req else None,
            "valkeyUsPerRequest": vk * 1e6 / req if req else None,
            "refused": c["statsAfter"]["refused"], "driveFailed": d["failed"], "p50Ms": d["p50Ms"], "p99Ms": d["p99Ms"],
            "driverCpuSeconds": d["cpuSeconds"], "bodyBytes": d["bodyBytes"], "load": c["load"]}

    def medians(rs):
        """Per figure, the median over the runs that balanced (over all when none did)."""
        good = [r for r in rs if r["ok"]] or rs
        agg = {"rounds": len(rs), "balanced": sum(r["ok"] for r in rs), "ok": any(r["ok"] for r in rs),
               "load": "; ".join(r["load"] for r in rs)}
        for k, v in good[0].items():
            if k in ("key", "ok", "load"):
                continue
            vals = [r[k] for r in good if r[k] is not None]
            agg[k] = statistics.median(vals) if vals else None
        return agg
    for key in sorted({r["key"] for r in runs.values()}):
        costs[key] = medians([r for r in runs.values() if r["key"] == key])
    for key in sorted({r["key"] for r in floor_runs.values()}):
        floors[key] = medians([r for r in floor_runs.values() if r["key"] == key])
    # Each per-request figure as a multiple of the floor of its profile.
    # relayOverFloorBytes: over the floor that wrote the relay's answer
    # bytes too (under load only).
    for key, c in costs.items():
        fl = floors.get(key.split("-", 2)[2], {})
        fs, fv = fl.get("serverUsPerRequest"), fl.get("valkeyUsPerRequest")
        c["relayOverFloor"] = c["relayUsPerRequest"] / fs if c.get("relayUsPerRequest") is not None and fs else None
        c["valkeyOverFloor"] = c["valkeyUsPerRequest"] / fv if c.get("valkeyUsPerRequest") is not None and fv else None
        fb = floors.get(key.split("-", 2)[2] + "-bytes", {}).get("serverUsPerRequest")
        c["relayOverFloorBytes"] = c["relayUsPerRequest"] / fb if c.get("relayUsPerRequest") is not None and fb else None
    store = {k: J(f"cap-store-{k}.json") for k in ("old", "new") if have(f"cap-store-{k}.json")}
    for k, s in store.items():
        s["beyondEnvelopes"] = s["memPerFinishedJobBytes"] - s["finishedJobEnvelopeBytes"]

pinning = {"pinned": pin == "1", "loadgenCpu": int(lg_cpu) if pin == "1" else None,
           "targetCpu": int(tgt_cpu) if pin == "1" else None, "note": pin_desc}
json.dump({"oldRev": old_rev, "newRev": new_rev, "verifyUs": v_us, "verifyRequestUs": vr_us, "verifyRuns": verify,
           "pinning": pinning, "rampRounds": int(nramps), "ramps": ramps, "costs": costs, "costRuns": runs,
           "floor": floors, "floorRuns": floor_runs, "store": store, "load": [load0, load1], "cpus": int(cpus)},
          open(os.path.join(out, "capacity.json"), "w"), indent=2)

def f(x, nd=2):
    return "—" if x is None else f"{x:,.{nd}f}"
def ratio(a, b, nd=2):
    return "—" if a is None or b in (None, 0) else f"{a / b:.{nd}f}"
def sp(s, nd=0, unit=""):
    if not s:
        return "—", "—"
    return (f"{f(s['min'], nd)}{unit} / {f(s['median'], nd)}{unit} / {f(s['max'], nd)}{unit}",
            "—" if s["maxOverMin"] is None else f"{s['maxOverMin']:.2f}")

L = [f"# Capacity and cost per unit: {old_rev} (old) and {new_rev} (new)\n",
     f"{cpus} CPUs; load average {load0} at the start, {load1} at the end{' (BENCH_QUICK=1)' if quick == '1' else ''}. "
     f"One Ed25519 verification (crypto/ed25519.Verify of a heartbeat signature, CPU time, median of {len(verify)} timings spread over the run): "
     f"**{v_us:.1f} µs** (protocol.VerifyRequest, the relay's whole check: {vr_us:.1f} µs).\n",
     ]
if ramps:
    L += [f"## Highest sustained rate (open loop, Poisson arrivals, aggressive profile; {nramps} ramp(s) in a row)\n",
     f"A step is sustained when every job is collected, nothing is lost, run twice or refused, end-to-end p99 ≤ {max_p99}, "
     "and the load generator kept its arrival schedule (p90 of how late a job went out ≤ 100 ms). "
     f"Pinning: {'**pinned**, ' if pin == '1' else ''}{pin_desc}"
     f"{' (a pinned Go process runs with GOMAXPROCS=1)' if pin == '1' else ''}. "
     "The ratio to the reference is to its ramp of the same round.\n",
     "| ramp | target | highest sustained jobs/s | vs reference | e2e p50 / p99 ms there | loadgen CPU ms / job there | first not sustained | why | target on cpus | load avg |",
     "|---|---|---|---|---|---|---|---|---|---|"]
    for rnd in sorted({r["round"] for rt in ramps.values() for r in rt["rounds"]}):
        for t in order:
            for r in (r for r in ramps.get(t, {}).get("rounds", []) if r["round"] == rnd):
                a = r["at"] or {}; x = r["failed"] or {}
                vs = "1" if t == "reference" else ratio(r["vsReference"], 1)
                L.append(f"| {rnd} | {labels[t]} | {f(r['highest'],0) if r['highest'] else 'none'} | {vs} | "
                         f"{f(a.get('endToEndP50Ms'),0)} / {f(a.get('endToEndP99Ms'),0)} | {f(a.get('loadgenCpuMsPerJob'),3)} | "
                         f"{f(r['limit'],0) if r['limit'] else '(none: every step held)'} | {(x.get('why') or '')[:160]} | "
                         f"{r['targetCpus']}{' (Valkey ' + r['valkeyCpus'] + ')' if r['valkeyCpus'] else ''} | {r['load']} |")
    L.append("")
    L.append("Spread over the ramps (min / median / max, and max ÷ min):\n")
    L.append("| target | highest sustained jobs/s, each ramp | min / median / max | max ÷ min | vs reference, each ramp | min / median / max | max ÷ min |")
    L.append("|---|---|---|---|---|---|---|")
    for t in order:
        if t not in ramps: continue
        rt = ramps[t]
        h, hq = sp(rt["highest"], 0)
        v, vq = sp(rt["vsReference"], 2) if t != "reference" else ("1", "—")
        each_h = ", ".join(f(r["highest"], 0) for r in rt["rounds"])
        each_v = ", ".join("—" if r["vsReference"] is None else f"{r['vsReference']:.2f}" for r in rt["rounds"]) if t != "reference" else "1"
        L.append(f"| {labels[t]} | {each_h} | {h} | {hq} | {each_v} | {v} | {vq} |")
    L.append("")

if not ramp_only:
    L.append(f"## Cost per unit (old and new interleaved, {os.environ.get('COST_RATE')} jobs/s, {os.environ.get('COST_ROUNDS')} round(s); the median of the balanced rounds)\n")
    L.append("| measure | profile | old | new | new / old | new ÷ one verify | new ÷ floor |")
    L.append("|---|---|---|---|---|---|---|")
    def row(label, key, profile, nd=3, floor=None, over=None):
        o = costs.get(f"old-1-{profile}", {}).get(key); n = costs.get(f"new-1-{profile}", {}).get(key)
        fl = "" if floor is None or n is None else f"{n / floor:.2f} ×"
        ov = costs.get(f"new-1-{profile}", {}).get(over) if over else None
        L.append(f"| {label} | {profile} | {f(o, nd)} | {f(n, nd)} | {ratio(n, o)} | {fl} | {'' if ov is None else f'{ov:.2f} ×'} |")
    ran = lambda p: f"old-1-{p}" in costs or f"new-1-{p}" in costs  # CAP_PROFILES may leave some out
    if ran("idle"):
        row("relay CPU per signed request, µs (400 mostly idle daemons)", "relayUsPerRequest", "idle", 1, v_us, "relayOverFloor")
        row("Valkey CPU per request, µs (400 mostly idle daemons)", "valkeyUsPerRequest", "idle", 1, v_us, "valkeyOverFloor")
    for p in (p for p in ("aggressive", "real") if ran(p)):
        row("relay CPU per job, ms", "relayMsPerJob", p, 3, v_us / 1000)
        row("relay CPU per signed request, µs", "relayUsPerRequest", p, 1, v_us, "relayOverFloor")
        row("signed requests per job", "requestsPerJob", p, 1)
        row("Valkey CPU per job, ms", "valkeyMsPerJob", p, 3)
        row("Lua scripts per job", "scriptsPerJob", p, 1)
        row("loadgen CPU per job, ms", "loadgenMsPerJob", p, 3)
        row("end-to-end p50, ms", "e2eP50Ms", p, 0)
        row("end-to-end p99, ms", "e2eP99Ms", p, 0)
    if len(store) == 2:  # not under CAP_COST_ONLY
        so, sn = store["old"], store["new"]
        L.append(f"| Valkey memory per queued job, B | storebench | {f(so['memPerQueuedJobBytes'],0)} | {f(sn['memPerQueuedJobBytes'],0)} | {ratio(sn['memPerQueuedJobBytes'], so['memPerQueuedJobBytes'])} | | |")
        L.append(f"| Valkey memory per finished job beyond its envelopes ({sn['finishedJobEnvelopeBytes']} B), B | storebench | {f(so['beyondEnvelopes'],0)} | {f(sn['beyondEnvelopes'],0)} | {ratio(sn['beyondEnvelopes'], so['beyondEnvelopes'])} | | |")
    L.append("")
    L.append("## The floor: a minimal Go service at the same rate, in the same run\n")
    L.append("`test/bench/floor`: net/http, a ~1.5 KB JSON body decoded, one Ed25519 verify over the body's canonical request, "
             "one Valkey script call (HSET + HINCRBY); driven right after each new-1 cost run at the request rate that run served, "
             "from as many keep-alive clients as it had parties, on loadgen's shared connection pool. CPU per request: "
             "the server's user+system CPU over the window (its getrusage) ÷ the requests it answered in it. "
             "It answers a short JSON object; under load it runs once more with each answer padded to the bytes the relay's "
             "answers averaged in the run it copies (\"same answer bytes\"), since results and payload answers are far longer.\n")
    L.append("| profile copied | clients | requests a tick | rate asked / served, req/s | answer bytes a request, relay / floor | floor CPU per request, µs | floor ÷ one verify | floor's Valkey per request, µs | old relay ÷ floor | new relay ÷ floor | new Valkey ÷ floor's |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for p in ("idle", "aggressive", "real"):
        for fk, label, over in ((p, p, "relayOverFloor"), (p + "-bytes", p + ", same answer bytes", "relayOverFloorBytes")):
            if fk not in floors: continue
            fl = floors[fk]; o = costs.get(f"old-1-{p}", {}); n = costs.get(f"new-1-{p}", {})
            L.append(f"| {label} | {fl['clients']:.0f} | {fl['burst']:.0f} | {f(fl['rateAsked'],1)} / {f(fl['requestsPerSecond'],1)} | "
                     f"{f(n.get('answerBytesPerRequest'),0)} / {f(fl.get('answerBytesPerRequest'),0)} | "
                     f"{f(fl['serverUsPerRequest'],1)} | {ratio(fl['serverUsPerRequest'], v_us)} | {f(fl['valkeyUsPerRequest'],1)} | "
                     f"{f(o.get(over))} | {f(n.get(over))} | {'' if over != 'relayOverFloor' else f(n.get('valkeyOverFloor'))} |")
    L.append("")
    bad = [k for k, c in runs.items() if not c["ok"]]
    L.append("Cost runs: " + ("every run balanced (0 lost, 0 run twice)." if not bad else f"these lost jobs or ran one twice and are left out of the medians where another round balanced: {', '.join(bad)}."))
    badf = [k for k, c in floor_runs.items() if not c["ok"]]
    L.append("Floor runs: " + ("every request answered." if not badf else f"these refused or failed requests: {', '.join(badf)}."))
    L.append("\nLoad average when each cost run ended: " + "; ".join(f"{k} {c['load']}" for k, c in list(runs.items()) + list(floor_runs.items())) + ".")
print("\n".join(L))
EOF
