# Shared by the benchmark scripts, which source it after `cd` to the
# repository root (it runs nothing by itself):
#
#   bench_init NAME   ROOT, OUT (BENCH_OUT or test/bench/out), BIN, TOKEN,
#                     CLK_TCK, Go on PATH; log lines prefixed [NAME time];
#                     on exit every pid in STARTED is killed and waited for,
#                     the old revision's worktree removed, then on_exit
#                     runs if the script defines it
#   build_old REV name=./pkg ...   builds each package of revision REV into
#                     $BIN/name from a temporary worktree; sets NEW_REV (this
#                     tree's revision, "+dirty" when it has changes)
#   std_load JOBS DURATION   sets LG_ARGS, the standard closed-loop load of
#                     run.sh's "ours" rows (4 sites, 16 daemons × 8 slots,
#                     64 in flight)
#   cpu_ticks PID...  utime+stime of the pids, in clock ticks
#   free_port         a free loopback port
#   SERVER, CLI       the server benchmarks start and its cli: BENCH_SERVER
#                     (a valkey-server or redis-server binary), else Valkey 8
#                     from ../shared/valkey (what the relay is deployed on),
#                     else valkey-server, else redis-server on PATH; every
#                     result names the server it ran on
#   scripts           Lua script calls so far on the server at VPORT
#   relay_bins        BIN from RELAY_BIN_DIR (another revision's relay and
#                     loadgen), else this tree's built into it
#   start_relays NS [N]   N (default 3) relays of $BIN on CLUSTER_URL in
#                     namespace NS; sets URLS, ADMINS, ADMIN (the first),
#                     RELAY_PIDS
#   relay_counters URL...  requests by route and store calls by operation
#                     of the relays at those admin URLs (JSON)
#   store_calls       the replicas' store calls so far by operation (JSON)
#   snapshot          one JSON line: time, relay CPU ticks of RELAY_PIDS,
#                     and per server of PRIMARIES its CPU, scripts, commands,
#                     read events and calls by command; with
#                     SNAPSHOT_REQUESTS=1 also the heartbeats and claims the
#                     relays have answered (one /metrics read each)

bench_init() {
  BENCH_NAME=$1
  ROOT=$PWD
  OUT=${BENCH_OUT:-$ROOT/test/bench/out}
  mkdir -p "$OUT/bin"
  OUT=$(cd "$OUT" && pwd)
  BIN=$OUT/bin
  export PATH="/usr/local/go/bin:$PATH"
  TOKEN="bench-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  CLK_TCK=$(getconf CLK_TCK)
  if [ -n "${BENCH_SERVER:-}" ]; then SERVER=$BENCH_SERVER
  elif [ -x "$ROOT/../shared/valkey/valkey-server" ]; then SERVER=$(cd "$ROOT/../shared/valkey" && pwd)/valkey-server
  elif command -v valkey-server >/dev/null 2>&1; then SERVER=$(command -v valkey-server)
  else SERVER=$(command -v redis-server); fi
  case "$(basename "$SERVER")" in valkey-*) CLI=$(dirname "$SERVER")/valkey-cli ;; *) CLI=${CLI:-$(dirname "$SERVER")/redis-cli} ;; esac
  [ -x "$CLI" ] || command -v "$CLI" >/dev/null 2>&1 || CLI=redis-cli
  export SERVER CLI
  export RELAY_TEST_REDIS_SERVER="${RELAY_TEST_REDIS_SERVER:-$SERVER}" # .ci/cluster's server
  log "server: $("$SERVER" --version)"
  STARTED=() # pids this script started; only these are ever signalled
  OLD_TREE=""
  trap bench_cleanup EXIT
}

bench_cleanup() {
  local pid
  for pid in "${STARTED[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${STARTED[@]}"; do wait "$pid" 2>/dev/null || true; done
  [ -z "$OLD_TREE" ] || git worktree remove --force "$OLD_TREE" 2>/dev/null || true
  if declare -F on_exit >/dev/null; then on_exit || true; fi
}

log() { printf '[%s %s] %s\n' "$BENCH_NAME" "$(date +%T)" "$*" >&2; }

build_old() {
  local rev=$1 spec
  shift
  OLD_TREE=$(mktemp -d /tmp/relay-old-XXXXXX)
  rmdir "$OLD_TREE"
  git worktree add --detach "$OLD_TREE" "$rev" >/dev/null 2>&1
  for spec in "$@"; do
    (cd "$OLD_TREE" && go build -o "$BIN/${spec%%=*}" "${spec#*=}")
  done
  NEW_REV=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . && echo "" || echo "+dirty")
}

std_load() {
  LG_ARGS=(-sites 4 -daemons 16 -slots 8 -concurrency 64 -payload 256 -ttl 20s -drain 25s
           -jobs "$1" -duration "$2" -results-poll 250ms -pending-poll 20ms
           -claim-poll 50ms -fetch-poll 10ms -heartbeat 5s -lease-ms 60000 -quiet)
}

cpu_ticks() {
  local total=0 pid f
  for pid in "$@"; do
    # Fields after the ")" of comm: state is 1, utime is 12, stime 13.
    f=$(sed 's/^.*) //' "/proc/$pid/stat")
    set -- $f
    total=$((total + ${12} + ${13}))
  done
  echo "$total"
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

scripts() { "$CLI" -p "$VPORT" info commandstats | tr -d '\r' | awk -F'[=,:]' '/^cmdstat_(eval|fcall)/ {n += $3} END {print n + 0}'; }

# snapshot: one JSON object: wall time, relay CPU ticks of RELAY_PIDS, and per
# primary its CPU seconds, script calls and the commands clients sent (one
# INFO per sample included).
snapshot() {
  local nodes="" p
  for p in "${PRIMARIES[@]}"; do
    nodes+=$("$CLI" -p "$p" info everything | tr -d '\r' | python3 -c '
import sys, json
cpu = 0.0; scripts = 0; calls = 0; reads = 0; bycmd = {}
for line in sys.stdin:
    if line.startswith(("used_cpu_sys:", "used_cpu_user:")):
        cpu += float(line.split(":")[1])
    elif line.startswith("total_reads_processed:"):
        reads = int(line.split(":")[1])  # read events: round trips (a pipelined batch is one)
    elif line.startswith("total_commands_processed:"):
        calls = int(line.split(":")[1])  # every command run, those scripts ran included
    elif line.startswith("cmdstat_"):
        name, rest = line[8:].split(":", 1)
        n = int(rest.split("calls=")[1].split(",")[0])
        bycmd[name] = n
        if name.startswith(("eval", "fcall")):
            scripts += n
print(json.dumps({"port": int(sys.argv[1]), "cpu": cpu, "scripts": scripts, "calls": calls, "reads": reads, "bycmd": bycmd}))' "$p"),
  done
  local t ticks; t=$(date +%s.%N); ticks=$(cpu_ticks "${RELAY_PIDS[@]}")
  # The replicas' request counts only when asked (SNAPSHOT_REQUESTS=1): a
  # /metrics scrape runs store reads of its own (job counts per shard).
  local reqs='{}'
  [ "${SNAPSHOT_REQUESTS:-0}" = 1 ] && reqs=$(daemon_requests)
  printf '{"t": %s, "relayTicks": %s, "daemonRequests": %s, "nodes": [%s]}\n' "$t" "$ticks" "$reqs" "${nodes%,}"
}

# relay_counters ADMIN_URL...: from each relay's /metrics, summed, its
# requests by route (the admin plane's left out) and its store calls by
# operation (relay_valkey_script_duration_seconds_count by its script
# label, which names a script or the plain pipeline filed under an
# operation's name: operations, not Lua runs), as
# {"http": {route: n}, "store": {operation: n}}. A relay that does not
# answer is said on stderr and counts nothing.
relay_counters() {
  local a
  for a in "$@"; do
    curl -fsS -H "Authorization: Bearer $TOKEN" "$a/metrics" || echo "relay_counters: no /metrics from $a" >&2
  done | python3 -c '
import json, re, sys
o = {"http": {}, "store": {}}
for line in sys.stdin:
    m = re.match(r"relay_http_requests_total\{(.*)\} (\S+)", line)
    if m and "plane=\"admin\"" not in m.group(1):
        r = re.search(r"route=\"([^\"]*)\"", m.group(1))
        if r:
            o["http"][r.group(1)] = o["http"].get(r.group(1), 0) + float(m.group(2))
    m = re.match(r"relay_valkey_script_duration_seconds_count\{(.*)\} (\S+)", line)
    if m:
        s = re.search(r"script=\"([^\"]*)\"", m.group(1)).group(1)
        o["store"][s] = o["store"].get(s, 0) + float(m.group(2))
print(json.dumps(o))'
}

# daemon_requests: heartbeats and claims the replicas (ADMINS) have answered
# so far, as {"heartbeat": n, "claim": n}.
daemon_requests() {
  relay_counters "${ADMINS[@]}" | python3 -c '
import json, sys
http = json.load(sys.stdin)["http"]
print(json.dumps({e: sum(n for r, n in http.items() if r.endswith("/" + e)) for e in ("heartbeat", "claim")}))'
}

# store_calls: the replicas' (ADMINS) store calls so far by operation.
store_calls() {
  relay_counters "${ADMINS[@]}" | python3 -c 'import json, sys; print(json.dumps(json.load(sys.stdin)["store"]))'
}

# Every simulated daemon connects from 127.0.0.1, so start_relays lifts the
# per-address connection cap to RELAY_MAX_CONNS's default (2,048): at its
# own default (512) a thousand idle daemons' keep-alive connections were
# answered 503, which a fleet of real devices, each from its own address,
# would not see.
start_relays() {
  local ns=$1 n=${2:-3} i outf
  URLS=() RELAY_PIDS=() ADMIN="" ADMINS=()
  for i in $(seq 1 "$n"); do
    outf=$OUT/cluster-$ns-r$i.stdout
    RELAY_VALKEY_URL=$CLUSTER_URL RELAY_NAMESPACE=$ns RELAY_LISTEN=127.0.0.1:0 RELAY_ADMIN_LISTEN=127.0.0.1:0 \
      RELAY_ADMIN_TOKEN=$TOKEN RELAY_LOG_LEVEL=warn RELAY_PAIRINGS_PER_ADDRESS=500 RELAY_MAX_CONNS_PER_ADDRESS=2048 \
      "$BIN/relay" >"$outf" 2>"$OUT/cluster-$ns-r$i.log" &
    STARTED+=($!); RELAY_PIDS+=($!)
    for _ in $(seq 1 300); do [ -s "$outf" ] && break; sleep 0.1; done
    [ -s "$outf" ] || { log "relay not ready"; cat "$OUT/cluster-$ns-r$i.log" >&2; exit 1; }
    URLS+=("http://$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["listen"])' "$outf")")
    ADMINS+=("http://$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["admin"])' "$outf")")
    [ -n "$ADMIN" ] || ADMIN="http://$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["admin"])' "$outf")"
  done
}

relay_bins() {
  if [ -n "${RELAY_BIN_DIR:-}" ]; then
    BIN=$RELAY_BIN_DIR
    log "relay and loadgen from $BIN"
  else
    log "building relay and loadgen"
    go build -o "$BIN/relay" ./cmd/relay
    go build -o "$BIN/loadgen" ./cmd/loadgen
  fi
}
