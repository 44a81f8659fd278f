#!/usr/bin/env bash
# Valkey round trips and CPU per job, per endpoint and per store call, for
# this tree's relay at one fixed rate (narrower and quicker than
# capacity.sh's cost runs, and it says where the round trips come from).
#
#   test/bench/roundtrips.sh
#   RT_RATE=100 RT_FOR=15s RT_PROFILES="aggressive real" test/bench/roundtrips.sh
#   RT_VARIANTS="two:RELAY_VALKEY_CONNECTIONS=2 one:" test/bench/roundtrips.sh
#   RT_RATES="50 200" RT_ROUNDS=2 RT_FOR=20s test/bench/roundtrips.sh   # and what a job adds, by slope
#   RT_ROUNDS=2 RT_PORT=6393 test/bench/roundtrips.sh
#   RT_OLD_REV=81bd9cb RT_VARIANTS="old: new:" test/bench/roundtrips.sh   # a label starting "old" runs RT_OLD_REV's relay
#   RT_SLOWLOG=1 RT_ROUNDS=1 test/bench/roundtrips.sh   # and where the server's time goes, by script
#   RT_PERF=1 RT_ROUNDS=1 test/bench/roundtrips.sh      # and by layer of the server process (perf)
#
# One private redis-server (RT_PORT, default a free port; --save ''), one
# relay replica per run, the standard load of capacity.sh (4 sites, 16
# daemons × 8 slots, 20 s TTL) at RT_RATE jobs/s for RT_FOR, under each
# profile of RT_PROFILES, for each variant of RT_VARIANTS (label:ENV=V,ENV=V;
# default one variant "tree" with the relay's defaults), RT_ROUNDS times,
# variants interleaved. With RT_RATES (several rates, e.g. "50 200") each
# of those runs is made at every rate in turn, and the report adds what a
# job adds by slope: between the lowest and the highest rate of one
# variant, profile and round, the change in each total over the window
# (Valkey CPU, relay CPU, server reads, scripts, commands) divided by the
# change in jobs collected. Runs are equally long, so what the fleet costs
# while idle (polls, heartbeats, sweeps) cancels out; the median over the
# rounds and the range are reported. Over each loadgen run (warm-up
# excluded) it reads:
#
#   - the server's INFO: total_reads_processed (one per read event on a
#     client connection: a round trip, or one pipelined batch), commands,
#     Lua script calls (EVALSHA/EVAL/FCALL), used_cpu_sys+user;
#   - the relay's /metrics: HTTP requests by route, and store calls by name
#     (relay_valkey_script_duration_seconds_count: a script, or one
#     pipelined batch of plain commands);
#   - the relay process's utime+stime;
#   - the load generator's report: jobs collected, lost, e2e p50/p99;
#   - with RT_SLOWLOG=1, the server's SLOWLOG with every command logged
#     (slowlog-log-slower-than 0): each call's execution time, FCALLs by
#     function, so a job's server time splits by script. Valkey 8 also logs
#     each command a script runs, under the command's own name, so a
#     command's row counts its runs inside scripts as well as on their own,
#     and the shares are of the scripts' total only. Only execution is
#     logged (not reading, parsing or replying), and logging costs the
#     server CPU of its own: read the CPU figures of those runs as inflated
#     and use the split, not the total.
#   - with RT_PERF=1, perf samples of the server process over the window
#     (`perf record`, Debian's linux-perf), split by layer: the kernel,
#     Lua (the interpreter and its libraries, the address range of the
#     binary's exported lua_*/luaL_*/luaopen_* symbols), libc's malloc,
#     number formatting, jemalloc, listpacks, sorted sets, the keyspace,
#     replies and networking, the rest. Each share times the run's Valkey
#     CPU a job gives µs a job by layer. Sampling costs the server little
#     (about 2,000 samples a second); the split, not the total, is the
#     figure.
#
# Output: test/bench/out/roundtrips.md (and roundtrips.json, raw files in
# test/bench/out/rt-*), and the markdown printed at the end. Run it under
# the shared lock: flock /work/bench.lock test/bench/roundtrips.sh
set -euo pipefail

cd "$(dirname "$0")/../.."
. test/bench/lib.sh
bench_init roundtrips
rm -rf "$OUT"/rt-* "$OUT"/roundtrips.md "$OUT"/roundtrips.json

RATE=${RT_RATE:-100}
RATES=${RT_RATES:-$RATE}
for r in $RATES; do
  case $r in '' | *[!0-9]* | 0) echo "RT_RATES: \"$r\" is not a rate in jobs/s (a whole number above 0)" >&2; exit 2 ;; esac
done
FOR=${RT_FOR:-15s}
ROUNDS=${RT_ROUNDS:-1}
PROFILES=${RT_PROFILES:-aggressive real}
VARIANTS=${RT_VARIANTS:-tree:}
SLOWLOG=${RT_SLOWLOG:-0}
PERF=${RT_PERF:-0}
if [ "$PERF" = 1 ] && ! command -v perf >/dev/null 2>&1; then
  echo "RT_PERF=1 needs perf (Debian: apt-get install linux-perf)" >&2; exit 2
fi
STD=(-sites 4 -daemons 16 -slots 8 -payload 256 -ttl 20s -arrivals poisson
     -results-poll 250ms -pending-poll 20ms -claim-poll 50ms -fetch-poll 10ms -heartbeat 5s -lease-ms 60000 -quiet)

log "building the relay and loadgen of this tree"
go build -o "$BIN/relay-rt" ./cmd/relay
if [ -n "${RT_OLD_REV:-}" ]; then build_old "$RT_OLD_REV" relay-old=./cmd/relay; fi
go build -o "$BIN/loadgen" ./cmd/loadgen
NEW_REV=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . && echo "" || echo "+dirty")

VPORT=${RT_PORT:-$(free_port)}
mkdir -p "$OUT/rt-valkey"
"$SERVER" --port "$VPORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$OUT/rt-valkey" \
  --logfile "$OUT/rt-valkey/server.log" --lazyfree-lazy-user-del yes &
VPID=$!
STARTED+=($VPID)
for _ in $(seq 1 50); do "$CLI" -p "$VPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
VALKEY_URL=redis://127.0.0.1:$VPORT/0
field() { python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())[sys.argv[2]])' "$1" "$2"; }

# server_stats: one JSON object of the counters read from the server.
server_stats() {
  { "$CLI" -p "$VPORT" info stats; "$CLI" -p "$VPORT" info cpu; "$CLI" -p "$VPORT" info commandstats; } | tr -d '\r' |
    python3 -c '
import json, sys
o = {"reads": 0, "commands": 0, "scripts": 0, "cpu": 0.0, "cmd": {}, "us": {}}
for line in sys.stdin:
    k, _, v = line.strip().partition(":")
    if k == "total_reads_processed": o["reads"] = int(v)
    elif k == "total_commands_processed": o["commands"] = int(v)
    elif k in ("used_cpu_sys", "used_cpu_user"): o["cpu"] += float(v)
    elif k.startswith("cmdstat_"):
        f = dict(x.split("=") for x in v.split(","))
        calls, us = int(f["calls"]), int(f["usec"])
        name = k[len("cmdstat_"):]
        o["cmd"][name] = calls
        o["us"][name] = us
        if name.startswith(("eval", "fcall")): o["scripts"] += calls
print(json.dumps(o))'
}
# slowlog_split: the SLOWLOG's calls and µs by script (FCALL and FCALL_RO
# by function; EVALSHA by digest) and by plain command. The server is this
# script's own and one relay runs at a time, so every call is the run's.
slowlog_split() {
  "$CLI" -p "$VPORT" --json slowlog get -1 | python3 -c '
import json, sys
by = {}
for e in json.load(sys.stdin):
    us, argv = e[2], [str(a) for a in e[3]]
    if not argv: continue
    cmd = argv[0].lower()
    if cmd in ("fcall", "fcall_ro", "evalsha", "evalsha_ro", "eval") and len(argv) > 1:
        key = cmd + " " + argv[1]
    else:
        key = cmd
    if cmd in ("slowlog", "config", "info"): continue
    b = by.setdefault(key, [0, 0])
    b[0] += 1; b[1] += us
print(json.dumps({k: {"calls": v[0], "us": v[1]} for k, v in by.items()}))'
}

# perf_split DATA: the perf samples of the server in DATA by layer, as
# shares of the process's samples (JSON). Symbols come from perf; the
# server binary may be stripped, so an unnamed address inside it counts as
# Lua when it lies within the exported Lua block (the lowest lua_*, luaL_*
# or luaopen_* symbol up to the first symbol after the last of them that
# is not Lua's or its bundled cjson's strbuf_*/fpconv_*), else as "server,
# unnamed".
perf_split() {
  local data=$1
  nm -D --defined-only "$(readlink -f "$SERVER")" 2>/dev/null | awk '$2 == "T" || $2 == "t" {print $1, $3}' | sort >"$data.syms" || true
  perf report -i "$data" --no-children --sort dso,symbol -g none --stdio --percent-limit 0 2>/dev/null |
    python3 -c '
import json, re, sys
syms = [(int(a, 16), n) for a, n in (l.split() for l in open(sys.argv[1]) if len(l.split()) == 2)]
lua = [a for a, n in syms if n.startswith(("lua_", "luaL_", "luaopen_"))]
lo, hi = (min(lua), max(lua)) if lua else (0, 0)
server = sys.argv[2] # the binary perf names the process by (Debian: redis-check-rdb)
if lua:
    after = [a for a, n in syms if a > hi and not n.startswith(("strbuf_", "fpconv_"))]
    hi = min(after) if after else hi + 0x10000
def layer(dso, sym):
    if dso.startswith("[kernel"): return "kernel"
    if dso.startswith("[vdso"): return "vdso (clock)"
    if dso.startswith("libjemalloc"): return "jemalloc"
    if dso.startswith("liblua"): return "Lua"
    if sym.startswith("0x"):
        if dso == server:
            return "Lua" if lo <= int(sym, 16) < hi else "server, unnamed"
        return dso + ", unnamed"
    if re.match(r"(lua|luaL|luaopen|strbuf|fpconv)_", sym): return "Lua"
    if re.match(r"(_int_malloc|_int_free|_int_realloc|malloc|free|cfree|realloc|calloc|unlink_chunk|malloc_consolidate|tcache)", sym) and dso.startswith("libc"): return "libc malloc/free"
    if re.search(r"printf|hack_digit|mpn_|strtod|str_to_mpn|ull2string|ll2string|string2ll|d2string|fpconv|round_and_return", sym): return "number formatting"
    if sym.startswith("je_"): return "jemalloc"
    if sym.startswith(("lp", "hashTypeGetFromListpack", "hashTypeSet", "hashType")): return "listpack and hashes"
    if sym.startswith(("zsl", "zzl", "zset", "zadd", "zrange", "genericZ")): return "sorted sets"
    if re.match(r"(dict|kvstore|lookupKey|hashtable|siphash|dbFind|dbAdd)", sym): return "keyspace"
    if re.search(r"[Rr]eply|writeToClient|readQueryFromClient|processInputBuffer|processMultibulk|connSocket|epoll|^read$|^write|writev|sock|aeProcess", sym): return "replies and networking"
    if re.match(r"__mem|__str|memcpy|memmove|memcmp|strlen", sym): return "libc string ops"
    return "server, named" if dso == server else dso
out = {}
for line in sys.stdin:
    m = re.match(r"\s*([\d.]+)%\s+(\S+)\s+\[[.k]\]\s+(\S+)", line)
    if not m: continue
    k = layer(m.group(2), m.group(3))
    out[k] = out.get(k, 0) + float(m.group(1)) / 100
print(json.dumps(out))' "$data.syms" "$(basename "$(readlink -f "$SERVER")")"
}

run_one() { # LABEL ENVSPEC PROFILE ROUND RATE
  local label=$1 envspec=$2 profile=$3 round=$4 rate=$5 name ns outf pid r0 r1 s0 s1 m0 m1 rc=0
  name=$label-$profile-$round
  if [ "$(wc -w <<<"$RATES")" -gt 1 ]; then name=$label-$profile-$rate-$round; fi
  ns="rt-$name-$(head -c 3 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  outf=$OUT/rt-$name.stdout
  local envs=() bin=$BIN/relay-rt
  case $label in old*) bin=$BIN/relay-old ;; esac
  if [ -n "$envspec" ]; then IFS=, read -r -a envs <<<"$envspec"; fi
  env "${envs[@]}" RELAY_VALKEY_URL="$VALKEY_URL" RELAY_NAMESPACE="$ns" RELAY_LISTEN=127.0.0.1:0 RELAY_ADMIN_LISTEN=127.0.0.1:0 \
    RELAY_ADMIN_TOKEN="$TOKEN" RELAY_LOG_LEVEL=warn RELAY_PAIRINGS_PER_ADDRESS=500 \
    "$bin" >"$outf" 2>"$OUT/rt-$name.log" &
  pid=$!; STARTED+=("$pid")
  for _ in $(seq 1 300); do [ -s "$outf" ] && break; sleep 0.1; done
  [ -s "$outf" ] || { log "relay not ready"; cat "$OUT/rt-$name.log" >&2; exit 1; }
  URL="http://$(field "$outf" listen)"; ADMIN="http://$(field "$outf" admin)"
  timeout 120 "$BIN/loadgen" -replicas "$URL" -admin "$ADMIN" -admin-token "$TOKEN" \
    -sites 2 -daemons 4 -jobs 200 -concurrency 16 -quiet >/dev/null || log "warm-up did not balance"
  log "$name: $rate jobs/s for $FOR (load $(cut -d' ' -f1-3 /proc/loadavg))"
  if [ "$SLOWLOG" = 1 ]; then
    "$CLI" -p "$VPORT" config set slowlog-max-len 1000000 >/dev/null
    "$CLI" -p "$VPORT" config set slowlog-log-slower-than 0 >/dev/null
    "$CLI" -p "$VPORT" slowlog reset >/dev/null
  fi
  local perfpid=""
  if [ "$PERF" = 1 ]; then
    perf record -q -F 1999 -p "$VPID" -o "$OUT/rt-$name.perf.data" >/dev/null 2>"$OUT/rt-$name.perf.log" &
    perfpid=$!
  fi
  r0=$(cpu_ticks "$pid"); s0=$(server_stats); m0=$(relay_counters "$ADMIN")
  timeout 300 "$BIN/loadgen" -replicas "$URL" -admin "$ADMIN" -admin-token "$TOKEN" "${STD[@]}" \
    -profile "$profile" -rate "$rate" -duration "$FOR" -drain 20s -json "$OUT/rt-$name.json" >"$OUT/rt-$name.txt" || rc=$?
  r1=$(cpu_ticks "$pid"); s1=$(server_stats); m1=$(relay_counters "$ADMIN")
  if [ -n "$perfpid" ]; then
    kill -INT "$perfpid" 2>/dev/null || true; wait "$perfpid" 2>/dev/null || true
    perf_split "$OUT/rt-$name.perf.data" >"$OUT/rt-$name.perf.json" || log "perf split failed: $(cat "$OUT/rt-$name.perf.log")"
  fi
  if [ "$SLOWLOG" = 1 ]; then
    "$CLI" -p "$VPORT" config set slowlog-log-slower-than -1 >/dev/null
    slowlog_split >"$OUT/rt-$name.slowlog.json"
    "$CLI" -p "$VPORT" slowlog reset >/dev/null
  fi
  kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
  printf '{"name":"%s","label":"%s","env":"%s","profile":"%s","round":%s,"rate":%s,"relayTicks":%s,"s0":%s,"s1":%s,"m0":%s,"m1":%s,"loadgenExit":%s,"load":"%s"}\n' \
    "$name" "$label" "$envspec" "$profile" "$round" "$rate" $((r1 - r0)) "$s0" "$s1" "$m0" "$m1" "$rc" "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/rt-runs.jsonl"
}

for round in $(seq 1 "$ROUNDS"); do
  for profile in $PROFILES; do
    for v in $VARIANTS; do
      for rate in $RATES; do run_one "${v%%:*}" "${v#*:}" "$profile" "$round" "$rate"; done
    done
  done
done
"$CLI" -p "$VPORT" flushall >/dev/null || true

python3 - "$OUT" "$CLK_TCK" "$NEW_REV${RT_OLD_REV:+ (old: $RT_OLD_REV)}" "$RATES" "$FOR" <<'EOF' | tee "$OUT/roundtrips.md"
import json, os, statistics, sys
out, tck, rev, rates, dur = sys.argv[1:6]
tck = int(tck)
runs = [json.loads(l) for l in open(os.path.join(out, "rt-runs.jsonl"))]
rows = []
for r in runs:
    rep = json.load(open(os.path.join(out, f"rt-{r['name']}.json")))
    jobs = rep["jobs"]["collected"] or 1
    d = lambda k: r["s1"][k] - r["s0"][k]
    http = {k: v - r["m0"]["http"].get(k, 0) for k, v in r["m1"]["http"].items()}
    store = {k: v - r["m0"]["store"].get(k, 0) for k, v in r["m1"]["store"].items()}
    cmd = {k: v - r["s0"]["cmd"].get(k, 0) for k, v in r["s1"]["cmd"].items()}
    us = {k: v - r["s0"]["us"].get(k, 0) for k, v in r["s1"]["us"].items()}
    rows.append({"name": r["name"], "label": r["label"], "env": r["env"], "profile": r["profile"], "round": r["round"], "rate": r["rate"],
                 "jobs": rep["jobs"]["collected"],
                 "lost": rep["jobs"]["lost"], "runTwice": rep["jobs"]["runTwice"], "errors": rep["errors"],
                 "readsPerJob": d("reads") / jobs, "commandsPerJob": d("commands") / jobs, "scriptsPerJob": d("scripts") / jobs,
                 "valkeyMsPerJob": d("cpu") * 1000 / jobs, "relayMsPerJob": r["relayTicks"] / tck * 1000 / jobs,
                 "requestsPerJob": sum(http.values()) / jobs,
                 "httpPerJob": {k: v / jobs for k, v in sorted(http.items()) if v},
                 "storePerJob": {k: v / jobs for k, v in sorted(store.items()) if v},
                 "cmdPerJob": {k: v / jobs for k, v in sorted(cmd.items()) if v},
                 "cmdUsPerJob": {k: v / jobs for k, v in sorted(us.items()) if v},
                 "p50": rep["phases"]["end-to-end"]["p50Ms"], "p99": rep["phases"]["end-to-end"]["p99Ms"], "load": r["load"],
                 # the window's totals, for slopes between rates
                 "totals": {"jobs": rep["jobs"]["collected"], "valkeyMs": d("cpu") * 1000, "relayMs": r["relayTicks"] / tck * 1000,
                            "reads": d("reads"), "scripts": d("scripts"), "commands": d("commands")}})
    sl = os.path.join(out, f"rt-{r['name']}.slowlog.json")
    if os.path.exists(sl):
        rows[-1]["slowlogPerJob"] = {k: {"calls": v["calls"] / jobs, "us": v["us"] / jobs} for k, v in json.load(open(sl)).items()}
    pf = os.path.join(out, f"rt-{r['name']}.perf.json")
    if os.path.exists(pf) and os.path.getsize(pf) > 0:
        rows[-1]["perfShare"] = json.load(open(pf))
json.dump(rows, open(os.path.join(out, "roundtrips.json"), "w"), indent=2)
L = [f"# Valkey round trips per job, {rev}, {' and '.join(rates.split())} jobs/s for {dur} per run\n",
     "| run | jobs (lost) | server reads / job | commands / job | scripts / job | Valkey CPU ms / job | relay CPU ms / job | requests / job | e2e p50 / p99 ms | load |",
     "|---|---|---|---|---|---|---|---|---|---|"]
for x in rows:
    L.append(f"| {x['name']} | {x['jobs']} ({x['lost']}) | {x['readsPerJob']:.1f} | {x['commandsPerJob']:.1f} | {x['scriptsPerJob']:.2f} | "
             f"{x['valkeyMsPerJob']:.3f} | {x['relayMsPerJob']:.3f} | {x['requestsPerJob']:.2f} | {x['p50']:.0f} / {x['p99']:.0f} | {x['load']} |")
for x in rows:
    L.append(f"\n**{x['name']}** per job: requests " + ", ".join(f"{k} {v:.2f}" for k, v in x["httpPerJob"].items()))
    L.append("store calls " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(x["storePerJob"].items(), key=lambda kv: -kv[1])))
    L.append("server commands " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(x["cmdPerJob"].items(), key=lambda kv: -kv[1])))
    L.append("server command µs " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(x["cmdUsPerJob"].items(), key=lambda kv: -kv[1])[:12]))
    if "slowlogPerJob" in x:
        sl = sorted(x["slowlogPerJob"].items(), key=lambda kv: -kv[1]["us"])
        # Valkey 8 logs the commands a script runs too: only the scripts'
        # rows add up to a total without counting anything twice.
        scripted = lambda k: k.split(" ")[0] in ("fcall", "fcall_ro", "evalsha", "evalsha_ro", "eval")
        tot = sum(v["us"] for k, v in sl if scripted(k)) or 1
        L.append(f"\nSLOWLOG, execution µs a job by call ({tot:.0f} µs a job in scripts; calls a job, µs a job, µs a call, share of the scripts' µs; "
                 "a plain command's row may include its runs inside scripts):\n")
        L.append("| call | calls / job | µs / job | µs / call | share |")
        L.append("|---|---|---|---|---|")
        for k, v in sl[:16]:
            share = f"{100 * v['us'] / tot:.0f}%" if scripted(k) else ""
            L.append(f"| {k} | {v['calls']:.2f} | {v['us']:.1f} | {v['us'] / v['calls']:.1f} | {share} |")
    if "perfShare" in x:
        ps = sorted(x["perfShare"].items(), key=lambda kv: -kv[1])
        tot = sum(v for _, v in ps) or 1
        L.append(f"\nServer CPU by layer (perf samples of the server process, as shares of its {x['valkeyMsPerJob'] * 1000:.0f} µs a job):\n")
        L.append("| layer | share | µs / job |")
        L.append("|---|---|---|")
        for k, v in ps:
            L.append(f"| {k} | {100 * v / tot:.1f}% | {x['valkeyMsPerJob'] * 1000 * v / tot:.0f} |")

# What a job adds, by slope: between the lowest and highest rate of one
# variant, profile and round, each total's change over the change in jobs.
# Equal windows, so the idle fleet's cost cancels out.
SLOPED = (("valkeyMs", "Valkey CPU ms", 3), ("reads", "server reads", 2), ("scripts", "scripts", 2),
          ("commands", "commands", 1), ("relayMs", "relay CPU ms", 3))
groups = {}
for x in rows:
    groups.setdefault((x["label"], x["profile"]), {}).setdefault(x["round"], []).append(x)
slopes = []
for (label, profile), by_round in groups.items():
    per_round = []
    for rnd, xs in sorted(by_round.items()):
        xs.sort(key=lambda x: x["rate"])
        lo, hi = xs[0], xs[-1]
        dj = hi["totals"]["jobs"] - lo["totals"]["jobs"]
        if lo["rate"] == hi["rate"] or dj <= 0:
            continue # one rate, or no more jobs at the higher rate: no slope
        per_round.append({k: (hi["totals"][k] - lo["totals"][k]) / dj for k, _, _ in SLOPED} |
                         {"round": rnd, "rates": [lo["rate"], hi["rate"]], "jobs": [lo["totals"]["jobs"], hi["totals"]["jobs"]]})
    if per_round:
        slopes.append({"label": label, "profile": profile, "rounds": per_round,
                       "median": {k: statistics.median(p[k] for p in per_round) for k, _, _ in SLOPED},
                       "min": {k: min(p[k] for p in per_round) for k, _, _ in SLOPED},
                       "max": {k: max(p[k] for p in per_round) for k, _, _ in SLOPED}})
json.dump(slopes, open(os.path.join(out, "roundtrips-slope.json"), "w"), indent=2)
if slopes:
    rs = sorted({r for s in slopes for p in s["rounds"] for r in p["rates"]})
    L.append(f"\n## What a job adds, by slope ({rs[0]} → {rs[-1]} jobs/s)\n")
    L.append("Each total's change between the two rates over the change in jobs collected, per variant, profile and round; "
             "the median over the rounds, and the range. Equal windows: what the idle fleet costs cancels out.\n")
    L.append("| variant | profile | rounds | " + " | ".join(f"{name} / job" for _, name, _ in SLOPED) + " |")
    L.append("|---|---|---|" + "---|" * len(SLOPED))
    for sl in slopes:
        cells = []
        for k, _, nd in SLOPED:
            med, lo, hi = sl["median"][k], sl["min"][k], sl["max"][k]
            cells.append(f"{med:.{nd}f}" if len(sl["rounds"]) == 1 else f"{med:.{nd}f} ({lo:.{nd}f}–{hi:.{nd}f})")
        L.append(f"| {sl['label']} | {sl['profile']} | {len(sl['rounds'])} | " + " | ".join(cells) + " |")
print("\n".join(L))
EOF
