#!/usr/bin/env bash
# The whole test run, on a fresh Debian machine with only Go: installs what
# is missing, starts the servers the tests need, runs vet, every test and the
# fuzz smoke, and stops what it started. CI runs exactly this (.ci/run).
#
#   bash test/run.sh
#
# Servers, all private to this run, on free loopback ports:
#   * Valkey 8 (the server the relay is deployed on), single node and a
#     3-primary cluster (one replica each): every package's tests run on it.
#     The binaries come from RELAY_TEST_VALKEY_DIR (default ../shared/valkey,
#     where the team keeps 8.0.1), else valkey-server on PATH; without either
#     the whole suite runs on redis-server instead, and says so.
#   * Redis (Debian's redis-server, 7.0 on bookworm), a compatibility target:
#     the connection and store packages, the operations view (it reads the
#     server's INFO), the published store contract and the peers suite
#     (TestPeers) run on it too.
#
# Whoever already has servers running can skip all this and use plain
# `go test ./...` (or one tier of it): it reads RELAY_TEST_VALKEY_URL (default
# redis://127.0.0.1:6379/0) and RELAY_TEST_VALKEY_CLUSTER_URL (unset: the
# cluster tests skip).
#
# Two tiers (test/README.md): the unit tier, ./internal/... ./cmd/...
# ./lua/..., every package at once (go test's default -p, one per core; the
# tests own their namespaces and run in parallel), and the process tier,
# ./test/..., the suites that start replicas, servers, node and chromium and
# put them under load or faults, TEST_PROCESS_P packages at a time.
#
#   TEST_TIMEOUT   go test -timeout for each suite (default 30m)
#   TEST_PROCESS_P how many process-tier packages run at once (default 2:
#                  the suites mostly wait on timers, and two at a time
#                  take about 200 s instead of about 530 s; 1 for a
#                  machine too busy to keep their latency bounds)
#   TEST_SKIP_FUZZ set to 1 to skip the fuzz smoke
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export PATH="/usr/local/go/bin:$HOME/go/bin:$PATH"

say() { echo "test/run.sh: $*" >&2; }
need() { command -v "$1" >/dev/null 2>&1; }
apt_install() {
  say "installing $*"
  local sudo=
  if [ "$(id -u)" != 0 ]; then need sudo && sudo=sudo; fi
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

need go || { say "Go is required (expected at /usr/local/go/bin/go)"; exit 1; }
# Node and npm run the published packages (contract, peers, grants); Debian's
# chromium drives the operations view's browser test; promtool (Debian's
# prometheus package) checks the alert rules.
{ need node && need npm; } || apt_install nodejs npm
need chromium || apt_install chromium
need promtool || apt_install prometheus
{ need redis-server && need redis-cli; } || apt_install redis-server redis-tools

# The server binaries.
valkey_dir="${RELAY_TEST_VALKEY_DIR:-$root/../shared/valkey}"
if [ -x "$valkey_dir/valkey-server" ] && [ -x "$valkey_dir/valkey-cli" ]; then
  valkey_server="$(cd "$valkey_dir" && pwd)/valkey-server"
elif need valkey-server && need valkey-cli; then
  valkey_server="$(command -v valkey-server)"
else
  valkey_server=
fi
redis_server="$(command -v redis-server)"
main_server="${valkey_server:-$redis_server}"
[ -n "$valkey_server" ] || say "no Valkey found (looked in $valkey_dir and on PATH): the whole suite runs on $("$redis_server" --version)"
cli_for() { case "$(basename "$1")" in valkey-*) echo "$(dirname "$1")/valkey-cli" ;; *) command -v redis-cli ;; esac; }

# free_port FROM: the first port from FROM on which nothing listens.
free_port() {
  local p=$1
  while (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; do p=$((p + 1)); done
  echo "$p"
}

run_dir="$(mktemp -d /tmp/relay-test-run.XXXXXX)"
started=()
cluster_base=
cleanup() {
  local pidfile job
  # Stages still running in the background (a stopped run) go first.
  for job in $(jobs -p); do kill "$job" 2>/dev/null || true; done
  for pidfile in "${started[@]}"; do
    [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  if [ -n "$cluster_base" ]; then
    RELAY_TEST_REDIS_SERVER="$main_server" CLUSTER_BASE_PORT="$cluster_base" bash .ci/cluster stop || true
  fi
  rm -rf "$run_dir"
}
trap cleanup EXIT
trap 'exit 143' TERM INT # so a stopped run still stops its servers

# start_server BINARY PORT: a private server without persistence; sets
# server_url to its URL. (Not called in $(…): the pid it records must reach
# cleanup.)
start_server() {
  local bin=$1 port=$2 dir="$run_dir/$2"
  mkdir -p "$dir"
  "$bin" --port "$port" --bind 127.0.0.1 --daemonize yes --save "" --appendonly no \
    --dir "$dir" --logfile "$dir/server.log" --pidfile "$dir/server.pid" >/dev/null
  started+=("$dir/server.pid")
  local cli; cli="$(cli_for "$bin")"
  for _ in $(seq 1 100); do "$cli" -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
  "$cli" -p "$port" ping >/dev/null || { say "$bin on port $port did not start (see $dir/server.log)"; exit 1; }
  server_url="redis://127.0.0.1:$port/0"
}

# server_line URL: what the server at URL is, from its own INFO.
server_line() {
  local port="${1##*:}"; port="${port%%/*}"; port="${port%%\?*}"
  "$(cli_for "$main_server")" -p "$port" info server | tr -d '\r' |
    awk -F: '/^(valkey_version|redis_version|redis_mode|server_name):/ {printf "%s=%s ", $1, $2}'
}

start_server "$main_server" "$(free_port 16390)"; main_url=$server_url
cluster_base="$(free_port 17101)"
# The cluster takes six ports from its base and their bus ports (+10000).
main_cluster_url="$(RELAY_TEST_REDIS_SERVER="$main_server" CLUSTER_BASE_PORT="$cluster_base" bash .ci/cluster start)"
start_server "$redis_server" "$(free_port 16490)"; compat_url=$server_url

say "main suite: single node $main_url ($(server_line "$main_url")), cluster $main_cluster_url ($(server_line "$main_cluster_url"))"
say "compatibility suites: $compat_url ($(server_line "$compat_url"))"
go version; node --version; npm --version

timeout="${TEST_TIMEOUT:-30m}"
start=$SECONDS

# Every stage runs even when one before it failed; the run fails at the end.
failed=()
go vet ./... || failed+=(vet)

on_main() { RELAY_TEST_VALKEY_URL="$main_url" RELAY_TEST_VALKEY_CLUSTER_URL="$main_cluster_url" RELAY_TEST_REDIS_SERVER="$main_server" "$@"; }
say "== unit tier (./internal/... ./cmd/... ./lua/...), on $(basename "$main_server") ($(server_line "$main_url"))"
on_main go test -count=1 -timeout "$timeout" ./internal/... ./cmd/... ./lua/... || failed+=("unit tier")
say "unit tier done at $((SECONDS - start))s"
say "== process tier (./test/...), on $(basename "$main_server"), ${TEST_PROCESS_P:-2} package(s) at a time"
# The longest suites first: go test starts packages in the order given, and
# the peers suite (about two minutes, most of it in 30 s retry-afters)
# started last would be the tier's tail.
process_pkgs=()
all_process_pkgs="$(go list ./test/...)" || all_process_pkgs=
for p in peers bench cluster upgrade chaos; do
  if grep -qx ".*/test/$p" <<<"$all_process_pkgs"; then process_pkgs+=("./test/$p/"); fi
done
process_pkgs+=($(grep -vE '/test/(peers|bench|cluster|upgrade|chaos)$' <<<"$all_process_pkgs" || true))
[ -n "$all_process_pkgs" ] || process_pkgs=(./test/...)
on_main go test -p "${TEST_PROCESS_P:-2}" -count=1 -timeout "$timeout" "${process_pkgs[@]}" || failed+=("process tier")
say "process tier done at $((SECONDS - start))s"

say "== compatibility: connection, store, operations view, store contract and peers, on redis-server ($(server_line "$compat_url"))"
compat() { env -u RELAY_TEST_VALKEY_CLUSTER_URL RELAY_TEST_VALKEY_URL="$compat_url" RELAY_TEST_REDIS_SERVER="$redis_server" "$@"; }
# The two commands run side by side: the peers' suite mostly waits on its
# daemons and leases while the store's tests use the cores.
compat go test -count=1 -timeout "$timeout" ./internal/valkeyconn/ ./internal/store/ ./internal/opsstore/ ./internal/opsview/ ./test/contract/ &
compat_pid=$!
# The peers' own suite (the real daemon and cloud lane through three
# replicas); its grant variants exercise the relay, not the server, and run
# in the process tier.
compat go test -count=1 -timeout "$timeout" -run '^TestPeers$' ./test/peers/ &
peers_pid=$!
wait "$compat_pid" || failed+=("compatibility suites")
wait "$peers_pid" || failed+=("compatibility peers")
say "compatibility suites done at $((SECONDS - start))s"

if [ "${TEST_SKIP_FUZZ:-}" != 1 ]; then
  RELAY_TEST_VALKEY_URL="$main_url" bash .ci/fuzz || failed+=("fuzz smoke")
fi
say "all done in $((SECONDS - start))s"
if [ ${#failed[@]} -gt 0 ]; then
  say "FAILED: ${failed[*]}"
  exit 1
fi
say "PASS"
