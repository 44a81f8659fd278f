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
#   scripts           Lua script calls so far on the server at VPORT

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

scripts() { redis-cli -p "$VPORT" info commandstats | tr -d '\r' | awk -F'[=,:]' '/^cmdstat_(eval|fcall)/ {n += $3} END {print n + 0}'; }
