#!/usr/bin/env bash
# The long churn soak: test/soak's TestChurnSoak with GENERATIONS
# generations (default 50) of 24 devices, 3 owners and 4 sites each, LOAD
# of traffic each (default 10s), through three stores and their sweepers
# on a private server (device retention shortened to 1 s, a store option).
# After each generation has gone (its devices silent or unpaired, its jobs
# past their deadlines) it records the server's keys and used_memory and
# the process heap: a flat line says nothing grows with history.
#
#   test/bench/soak.sh                                  # 50 generations, 10 s each (about 10 minutes)
#   GENERATIONS=10 LOAD=3s test/bench/soak.sh
#   RELAY_TEST_REDIS_SERVER=/path/valkey-server test/bench/soak.sh   # another server binary
#
# Output: $OUT/soak.md (one row per generation, then the summary) and
# soak.log (the test's own output).
set -euo pipefail

cd "$(dirname "$0")/../.."
. test/bench/lib.sh
bench_init soak

GENERATIONS=${GENERATIONS:-50}
LOAD=${LOAD:-10s}
log "$GENERATIONS generations of $LOAD load"
# The tree the test is built from, read now: a soak runs for minutes, and
# HEAD may move (or the tree change) before it ends.
REV=$(git rev-parse --short HEAD)
git diff --quiet HEAD -- . 2>/dev/null || REV="$REV with uncommitted changes"
STARTED=$(date -u +%FT%TZ)
RELAY_SOAK_GENERATIONS=$GENERATIONS RELAY_SOAK_LOAD=$LOAD \
  go test -count=1 -v -timeout 0 -run '^TestChurnSoak$' ./test/soak/ >"$OUT/soak.log" 2>&1 || {
  tail -40 "$OUT/soak.log" >&2
  exit 1
}
{
  echo "# Churn soak: $GENERATIONS generations, $LOAD of load each (started $STARTED, $REV)"
  echo
  echo "| generation | peak keys | peak key bytes | peak used_memory (B) | after: keys | after: key bytes | of them, records of shards ending by TTL (B) | after: used_memory (B) | of it Lua VMs (B) | after: heap (B) |"
  echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  python3 - "$OUT/soak.log" <<'PY'
import re, sys
line = re.compile(r'generation (\d+): peak keys (\d+) \((\d+) B, \d+ B of them records of shards ending by TTL\), used_memory (\d+) B '
                  r'\(Lua \d+ B\), heap \d+ B; after keys (\d+) \((\d+) B, (\d+) B of them records of shards ending by TTL\), '
                  r'used_memory (\d+) B \(Lua (\d+) B\), heap (\d+) B')
for l in open(sys.argv[1]):
    m = line.search(l)
    if m:
        print('| ' + ' | '.join(m.groups()) + ' |')
PY
  echo
  grep -o 'jobs completed.*' "$OUT/soak.log" | sed 's/^/    /'
} >"$OUT/soak.md"
cat "$OUT/soak.md"
