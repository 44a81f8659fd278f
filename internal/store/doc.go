// Package store is the relay's routing store and pairing-code store, kept in
// Valkey so that any number of relay replicas share one truth. It reproduces
// the semantics of @byollm/relay@0.1.1's RelayState and PairingCodes
// (shared/spec/store.md) and passes the published store contract.
//
// # Atomicity
//
// Every operation is one Lua script per shard it touches (lua/*.lua, one
// file per operation, helpers in lua/lib/). Where the server takes it, all
// of them are loaded as one Valkey Functions library (library.go: FUNCTION
// LOAD at New on every node, FCALL or FCALL_RO per call, loaded again on
// "Function not found"), so the libraries are built once per load instead
// of on every call; otherwise (the embedded miniredis, an ACL without
// FUNCTION) each runs as a script with EVALSHA, reloaded on NOSCRIPT. Each
// script is a typed value (Scripts) whose read-only mode its header
// declares (no-writes in the library), and every call goes through one
// runner that observes it
// (Options.ObserveScript: span, latency under the script's name, error
// class). A script
// is a decision and its write: no caller reads, decides and writes back. So
// two replicas racing claims can never grant one job twice or overrun the
// unsealed cap, and concurrent sweepers settle each due job exactly once
// (each settle re-reads the job record inside the script; the due index is
// only a candidate filter).
//
// # Clock
//
// Valkey TIME is the only clock: now = sec*1000 + floor(usec/1000) + offset,
// read once per script. offset is 0 in production; tests move it with
// Testing().SetClockOffset / AdvanceClock (testhooks.go). Lease ids are UUID v4 minted
// in Go from crypto/rand and passed to the claim script, which appends "." and
// the job's ⟨S⟩ when the result fits MaxIDBytes (lua/lib/store.lua).
//
// # Key layout (store.md §9.3, mode S: sharded by site; layout v4)
//
// A namespace is laid out over Shards shards (16 for a new namespace, fixed
// in its layout record). Shard i's keys start with "<ns>:{<ns>/<i>-<n>}:",
// n chosen so the tag's cluster slot lies in the i-th of Shards equal slot
// ranges; fleet-wide keys start with "<ns>:{<ns>}:". Which shard holds what:
//
//   - a site's jobs, queues and per-site indexes: the shard the placement
//     record gives the site (see Placement below);
//   - a runner's hid and cxl sets: one per shard where it holds a
//     grant, on that shard (they change in the same script as the job);
//   - the lease index, the due index, seq, epoch and stc: one per
//     shard;
//   - presence, and the runner's record of the shards it holds grants on
//     (rsh:⟨R⟩): shard(runner);
//   - a lease: the shard whose claim minted it, written in the lease id's
//     first byte (a UUID v4 otherwise random);
//   - pairing codes, the projection, approvals, the policy and the layout
//     record: fleet-wide. Each is small and bounded (at most
//     PairingCapacity codes; one projection and policy document), and
//     pairing approval must be atomic with the projection write;
//   - the operations view's own records (replica heartbeats, site view
//     tokens; internal/opsstore, keys in opskeys.go): fleet-wide too,
//     bounded by opsstore.MaxReplicaRecords and opsstore.MaxViewTokens.
//     Its reads of the routing keys go shard by shard like every other
//     read: a site's page reads its site's shard only, a device's page
//     the shards of its runner's record.
//
// shard(runner) is HMAC-SHA256(salt, "runner", id) mod Shards, the salt
// coming from the layout record; a site's shard is its placement. Either
// way hash tags are derived, never taken from ids, so no site or runner id
// can choose its slot (TestCraftedIDsDoNotPickTheirSlot).
//
// # Placement
//
// A site's shard is decided once, when the site is first enqueued for or
// claimed from, by lua/place.lua on the fleet-wide slot: it reads the
// fleet-wide "place" hash, and for a site not in it chooses a shard and
// writes it there in the same script, so two replicas placing one site at
// once get the one answer the first script wrote (internal/layout holds
// the placer). Nothing rewrites an entry while a site is in use, so each
// Store keeps what it has read in memory for the refresh age
// (Options.PlacementRefresh, 10 minutes): a request pays a round trip for
// placement only at a replica's first meeting with a site and once per
// refresh age after, one script for all the sites of that call (the cache
// is bounded, Options.PlacementCacheSites; a site it forgot is read
// again). Each read through place.lua stamps the site's last read in
// "placet", and the sweep forgets a site no replica has read for
// Options.DeviceRetention that holds nothing on its shard (ReapSites,
// lua/place_reap.lua; see "What ends each key"). Operations that
// only read, or write to jobs that must exist (seal, cancel), never place:
// on a cache miss they read the record (one HMGET, no script), and a site
// it does not name has no keys yet, so they read its hash shard and find
// nothing.
//
// A new site is placed balanced. Go passes which primary serves each
// shard's slot (CLUSTER SLOTS, cached 30 s; every shard on one node when
// the server is not a cluster), and "placen" keeps the number of sites per
// shard; the script takes the primary with the fewest sites, then its
// shard with the fewest, ties to the lowest number. So 12 sites on 3
// primaries land 4-4-4 (TestNewSitesBalance), and on a single node sites
// go round robin over the shards. Sites count alike: placement balances
// sites, not their traffic. A reshard that moves slots changes where later
// sites go, never where placed ones are.
//
// Why a record of its own and not the projection: every site the relay
// serves is in the projection, but the store is used without one (the
// store contract, tests, tools), a projection document is replaced whole
// by admins (a site removed and added back must come back to its shard,
// with its jobs), and data written before placement existed needs a home
// that no projection names. A record on the fleet-wide slot is atomic
// with the choice, survives restarts, and is cached with one staleness
// rule (the refresh age). It is bounded by MaxPlacedSites entries; an operator reads
// it through the admin API (GET /placement: sites per shard and per
// primary, ?sites=1 for every site's shard) and no route changes it.
//
// Every script's KEYS lie on one slot, and every key a script builds
// inside (a job record popped from a queue, a due job) is built from
// KEYS[1]'s prefix, which lib/common.lua derives and checks: same tag, same
// slot, by construction (TestEveryScriptStaysOnOneSlot watches every
// command each script runs). Go never sends a multi-key command across
// slots; fan-outs are one single-slot call per shard. Two exceptions, on
// a server that is not a cluster only, where there are no slots to keep:
// presence_beat carries the short-form heartbeats of every shard, and the
// renewals a busy device's heartbeat asks for, each built from its own
// shard's lease index in KEYS; and a claim's first call carries one
// section for each shard it reads, each section's keys built from its
// first key's prefix (lib/common.lua on_shard switches P for both). On a
// cluster each is one shard's call, renewals go to renew.lua on their
// shards, and a claim calls each shard in turn.
//
// Every script also declares, as its last key, its slot's migration guard
// ⟨prefix⟩mguard (GuardKey), which is never written: Store.run appends it
// and lib/common.lua takes it off before the script body reads KEYS. While
// a slot migrates (SETSLOT MIGRATING/IMPORTING), a cluster aborts a script
// at the first undeclared key that is not on the node, keeping what it
// already wrote; but it checks declared keys before running anything, and
// a missing one there gets ASK or TRYAGAIN. The guard is always missing, so
// every script of a migrating slot is refused whole, as unavailable, and
// none runs half-way (TestStoreScriptsRefusedWholeDuringMigration). Outside
// a migration a declared key that does not exist costs nothing.
//
// Variable key parts are base64url without padding, written ⟨x⟩ below: they
// contain no ':', '{', '}' or ';', so any site id, job id, owner, runner or
// kind yields an unambiguous key. A job id in canonical lowercase UUID form
// (what @byollm/server mints) is instead '~' and its 16 bytes in base64url,
// 23 characters for 48 (layout v5, encJob in keys.go); '~' is outside
// base64url, so the forms never meet. A job's member in indexes that span
// sites of a shard is m = ⟨S⟩:⟨J⟩. Per shard:
//
//	j:⟨S⟩:⟨J⟩              HASH  the job (fields below)
//	j:⟨S⟩:⟨J⟩:ref          ZSET  refusedBy: runner -> position (refusal order)
//	j:⟨S⟩:⟨J⟩:ra           HASH  retryAfter: runner -> ms (caller's clock)
//	seq                    STR   the shard's last first-enqueue number: the
//	                             server's TIME in µs, or last+1 if that is
//	                             later (next_seq in lib/common.lua), so
//	                             numbers compare across shards as instants
//	epoch                  STR   random id SET NX by enqueue; with the server's
//	                             replication id (new after a failover) it names
//	                             the data generation, which caches keyed by seq
//	                             check (results)
//	q:⟨S⟩:⟨O⟩:⟨K⟩:⟨A⟩      ZSET  ⟨J⟩ -> seq: queued, not cancelled, not sticky,
//	                             not quarantined; per site, job owner, kind,
//	                             audience (the ready queues)
//	sq:⟨S⟩:⟨O⟩:⟨R⟩         ZSET  ⟨J⟩ -> seq: queued, not cancelled, reofferTo=R
//	bad                    ZSET  m -> seq: queued jobs whose stub failed strict
//	                             validation at claim (quarantine, §3.5)
//	uns:⟨S⟩:⟨O⟩            SET   ⟨J⟩ of the pair's awaiting-payload jobs (the cap)
//	aw:⟨S⟩                 ZSET  ⟨J⟩ -> seq: awaiting-payload jobs (Awaiting)
//	fin:⟨S⟩                ZSET  ⟨J⟩ -> seq: done jobs (Finished)
//	due                    ZSET  m -> next instant settle could act (every
//	                             job is in it, from enqueue to forget): the
//	                             minimum of the deadline, awaitingUntil (when
//	                             awaiting) and the lease expiry (ready, running)
//	lease                  HASH  leaseId -> m: current grants; a done job's
//	                             only when its lease id is a bare UUID
//	hid:⟨R⟩                ZSET  "⟨J⟩:⟨S⟩" -> 0: the bare-id probe of §2.0;
//	                             ZRANGEBYLEX [⟨J⟩: (⟨J⟩; answers "does R hold
//	                             some job with bare id J" on this shard. Every
//	                             grant, done included, from claim to requeue
//	                             or forget; the device page counts and lists
//	                             it (lua/ops_device.lua)
//	cxl:⟨R⟩                ZSET  m -> seq: cancelled jobs R holds here
//	gb:<token>             STR   "1": a claim token GiveBack revoked (the relay
//	                             gave up on that claim's answer); a claim
//	                             script carrying it grants nothing. Expires
//	                             after GiveBackRevokeMs
//	churn:⟨S⟩:⟨O⟩          ZSET  "<leaseId>:m" -> ms of each awaiting timeout
//	churnrep:⟨S⟩:⟨O⟩       STR   ms of the pair's last churn report
//	stc                    HASH  state -> jobs here in that state; metrics
//	                             only (Counts), never decisions; kept by
//	                             move_state in the script of each change
//	sl:⟨S⟩                 SET   ⟨J⟩ of the site's live jobs (not done, not
//	                             cancelled): the jobs limit is its SCARD
//	sb:⟨S⟩                 STR   bytes of the site's stored stubs, payloads and
//	                             results: the one counter (see account() in
//	                             lib/store.lua; each job's field by holds its part)
//	sr:⟨S⟩                 HASH  the site's enqueue token bucket: t, at
//	p:⟨R⟩                  HASH  presence (on shard(R)): runnerId, owner,
//	                             device, capabilities, withheld (raw JSON),
//	                             lastSeenAt, ld (the heartbeat digest of
//	                             owner, device and the two lists: a
//	                             heartbeat of the same device with the same
//	                             lists writes only lastSeenAt and the
//	                             expiry, and presence_beat, the short form,
//	                             checks only it; "-" after another device's
//	                             heartbeat; optionally ":" and nr after it,
//	                             the instant a heartbeat last found rsh:⟨R⟩
//	                             holding no live grant, dropped by every
//	                             grant)
//	                             lx: the retention index's score for it
//	pidx / pseq            ZSET / STR  ⟨R⟩ -> first-seen number (next_seq)
//	                             of the shard's runners (Everyone merges the
//	                             shards by it)
//	ls                     ZSET  ⟨R⟩ -> an instant at most an hour before
//	                             its lastSeenAt: the retention index (see
//	                             What ends each key)
//	lsfill                 STR   the retention backfill's cursor over pidx;
//	                             "done" once it has read all of it
//	po:⟨O⟩                 SET   ⟨R⟩ of owner O's presence records on this
//	                             shard (Advertised reads every shard's)
//	rsh:⟨R⟩                ZSET  shard index -> the latest deadline of a grant
//	                             R was given there, rounded up to 30 s
//	                             (ZADD GT, written before the claim's reply,
//	                             and only by a claim whose read of rsh did not
//	                             cover its grants): the shards the bare-id probe
//	                             and CancelRequests visit. A superset (at most
//	                             Shards members); every answer is decided by
//	                             the shard's own script.
//
// Fleet-wide ("<ns>:{<ns>}:"):
//
//	layout                 HASH  version (LayoutVersion), shards, salt (hex)
//	place                  HASH  site id (raw) -> shard: the placement record,
//	                             written once per site (lua/place.lua)
//	placen                 HASH  shard -> sites placed there (balancing)
//	pc:d pc:x pc:mi pc:mu pc:i pc:u    pending pairings: code -> JSON, code ->
//	                             expiresAt, code -> identity, code -> user code,
//	                             identity -> code, user code -> code
//	pc:ms                  HASH  code -> source address (base64url)
//	pc:a:⟨addr⟩            ZSET  code -> expiresAt: an address's codes, for
//	                             the per-source limit; expires with its last code
//	pc:ok                  HASH  code -> runnerId it was approved as (admin API)
//	projection, projection:approved    internal/projectionsync's document and
//	                             the devices approved by code; pairing_approve
//	                             writes the second and bumps the first's version
//	projection:sites       HASH  site id -> generation (the version it entered
//	                             the projection at), kept by projection_put;
//	                             view tokens are bound to it
//	ops:rs, ops:r:⟨id⟩      ZSET, STR  replica heartbeats (opskeys.go)
//	ops:tk, ops:ti, ops:tg HASH  scoped view tokens by digest, digest by id, site generation by digest
//
// # What ends each key
//
// Nothing the relay writes grows with history: every key family has an
// owner and an end, so Valkey holds what the live fleet needs (devices
// seen within the retention, jobs before their deadlines) plus a fixed
// set per shard and the fleet-wide records. "Entries" means a key holds
// members that each leave with what they name, and Valkey deletes the key
// when its last member goes.
//
//	key (per shard)            ends by
//	j:⟨S⟩:⟨J⟩ (+ :ref, :ra)    the job's deadline: settle forgets it (sweep,
//	                           claim, or the next call touching it)
//	q: sq: bad uns: aw: fin:   entries: each job leaves at requeue, claim,
//	due sl: st:<state> all     seal, completion, cancel or forget (the
//	                           deadline); all and st: are only emptied
//	lease held: hid: cxl:      entries: each grant leaves at requeue,
//	                           release, expiry or forget (the deadline);
//	                           lease also at completion, for a lease id
//	                           that carries its site
//	sb:⟨S⟩                     deleted when the site's stored bytes reach 0
//	                           (its last blob forgotten)
//	sr:⟨S⟩                     TTL: the bucket's refill time plus 1 s
//	churn:⟨S⟩:⟨O⟩, churnrep:   TTL (CHURN_TTL_MS, 2 h) and the window trim
//	p:⟨R⟩                      device silence: ReapDevices after
//	                           Options.DeviceRetention (RELAY_DEVICE_RETENTION);
//	                           a projection change: ForgetDevices (the sweep
//	                           after a replica sees the device unpaired or
//	                           revoked); PresenceTTLMs when set (tests)
//	po:⟨O⟩ pidx ls             entries: each leaves with its presence record
//	                           (reap, forget, drop); po also on the owner's
//	                           next Advertised when a record went by a TTL
//	rsh:⟨R⟩                    TTL: ten minutes past its latest grant
//	                           deadline (runner_shards_add), and with its
//	                           presence record (then, if it still names a
//	                           deadline ahead, PEXPIREAT that deadline)
//	seq epoch stc pseq lsfill  fixed: one each per shard (counters and
//	                           cursors), at most 5 × Shards keys
//	mguard                     never written
//
//	key (fleet-wide)           ends by
//	layout                     the namespace
//	place placen placet        site disuse: ReapSites forgets a site (its
//	                           entries, and its count in placen) once no
//	                           replica has read it through place.lua for
//	                           Options.DeviceRetention and its shard holds
//	                           no live job, result, awaiting job or stored
//	                           bytes for it; bounded by MaxPlacedSites
//	placetfill                 fixed: the index backfill's cursor
//	pc:* (pending pairings)    the code's expiresAt (purged after it), approval,
//	                           denial; pc:a:⟨addr⟩ expires with its last code
//	pc:ok                      with its code (purged at expiry)
//	projection                 admin action (PUT/merge); one document
//	projection:approved        admin action (relay pairing unpair, or the
//	                           document taking the runner id over)
//	pol:*                      admin action (policy writes); pol:v a counter
//	ops:r:⟨id⟩, ops:rs         TTL of the replica's heartbeat record; the
//	                           index trimmed by age and opsstore.MaxReplicaRecords
//	ops:tk ops:ti              admin action (drop a view token); at most
//	                           opsstore.MaxViewTokens
//
// The retention index ls (per shard, beside pidx) is what lets the sweep
// find silent devices without reading the dataset: runner -> an instant
// at most an hour (LS_STEP_MS, lua/lib/presence.lua) before its last
// heartbeat. A heartbeat writes it when the record's lx field (the score
// last written) is absent or an hour old, so an idle tick adds no write
// there; presence_reap reads only entries already past the cut, decides
// each by the record's own lastSeenAt (moving a device that beat since
// forward), and forgets the rest, a record and its entries in one script
// on the runner's shard. Records written before the index (relays before
// 2026-12-03) enter it at their next heartbeat; those that never beat
// again are indexed once per namespace by BackfillRetention (the sweep
// walks pidx in pages, keeping its cursor in lsfill, "done" at the end).
// Each Store remembers per shard when its index head can next be due, so
// an idle sweep reads one ZRANGE per shard at most once a minute.
//
// A site's placement ends without a split: a replica trusts a cached entry
// only for the refresh age, and a call that may place only an entry
// place.lua read within it (which stamped placet), so while any replica
// may write with an entry its site's last read is recent; ReapSites
// forgets only sites whose last read is older than the retention (which
// must exceed the refresh age; 24 h at least against 10 minutes),
// re-checked in the script. A site that holds state is kept whatever its
// last read (a job's deadline is its client's to choose), and one that
// returns after it was forgotten is placed anew, every replica following
// the record within a refresh age. Entries older relays placed are
// indexed by place_backfill.lua (HSCAN pages, cursor placetfill). The
// times are Valkey's TIME, without the store clock's test offset.
//
// A replica's own memory is bounded the same way: the placement cache
// (Options.PlacementCacheSites, two generations, each entry trusted for
// Options.PlacementRefresh), the work view
// (Options.WorkViewQueues per shard; the queues announced to it are kept
// 10 to 20 s, at most 4,096 a shard), the results cache
// (Options.ResultCacheBytes, each site's entry counted), the relay's
// presence checks (100,000 runners), the operations view's activity (500
// sites × 10 minutes), per-site queue ages (the projection's sites). A
// miss reads Valkey again.
//
// # Claims spanning shards
//
// A claim's routes are grouped by their site's shard, and each shard is one
// atomic claim script (CLAIM_ATOMIC, the unsealed cap and the churn rule are
// per (site, owner) pair, and a pair never spans shards, so each holds
// exactly as before). Before the scripts, one pipelined read (TIME and a
// ZRANGE of the head of each due index and of each of the claim's queues;
// no script) settles what is due on other shards, skips shards with no
// queued entry on these routes and nothing due, and orders the rest by the
// seq of their oldest queued entry. seq is an enqueue instant (µs, the
// shard's server clock), so the promise is: within a shard, exact
// first-enqueue order (so within a site, and within a pair); across shards,
// the shard holding the oldest job on the claim's routes is served first,
// and the grants come back sorted by seq. When Max lets a claim take every
// eligible job, the grants are exactly those a single global FIFO would
// make; when Max is smaller, the oldest job over all the routes is granted
// first, and the rest of the grants come from its shard before the next
// shard's, which can put a younger job of that shard ahead of an older job
// of another (at most Max-1 places). That is fair in the sense the
// reference's order is for: no site's work waits behind another's beyond
// one claim, because a shard's turn is decided by its oldest job, which
// only gets older. Across cluster nodes the enqueue instants come from each
// node's own clock, so order across shards is as exact as those clocks
// agree (NTP: milliseconds).
//
// An idle claim (nothing queued on the routes, nothing due) costs that one
// pipelined read and no script, and nothing at all while the replica runs
// its work view (RunWorkView; package internal/workview says how it is
// kept): every script that puts a job in a ready or sticky queue announces
// the queue on its shard's channel "<shard prefix>work" with SPUBLISH, and
// the view only decides whether to ask Valkey: a stale view delays a
// grant, never makes one.
//
// A daemon's idle heartbeat is one script on the runner's shard
// (presence_beat through Heartbeat, the short form): it checks that the
// presence record still holds the owner and device the replica remembered
// (the relay's authentication, atomic with the write) and the lists the
// heartbeat carries, by one digest (ld, one field read), writes lastSeenAt, and
// answers the runner's record of shards (rsh:⟨R⟩) for the cancel
// requests, which read further only on shards where the runner holds
// grants. A record that does not match is written by nothing; the
// heartbeat is then sent in full (presence_seen), which decides it as
// before. rsh:⟨R⟩ is read only when the record's nr (kept in ld after the
// digest) is absent or older than Options.ShardRecheckMs: nr says a read
// found no grant whose deadline is ahead (cancel requests last until the
// job's deadline, so such a set reports nothing), and every grant drops
// it in the call that writes rsh:⟨R⟩ (runner_shards_add), so a new grant
// is seen on the next beat. With
// Options.HeartbeatBatch (the relay's RELAY_DAEMON_HEARTBEAT_BATCH) the
// heartbeats arriving within the window go out as one pipelined DoMulti
// in which the heartbeats of one shard and form share one presence_beat
// or presence_seen_batch call (internal/beatbatch decides when, beatsend.go what; at most 64 records and 1 MiB of
// arguments a call): the
// server's cost of a round trip is shared per node, and the script call's
// own setup, about as costly as the record's commands, per shard. An idle
// heartbeat (HeartbeatInput.Idle: the device reported no active lease, and
// the work view knows its next claim would find nothing: every queue of
// its routes seen empty, nothing due on their shards; claimLooksEmpty)
// may wait for the longer Options.HeartbeatIdleBatch (the relay's
// RELAY_DAEMON_IDLE_HEARTBEAT_BATCH, 1 s): its answer can carry nothing
// that leads to work sooner, and on a cluster, where a call holds one
// shard's records only, a replica's 100 ms window holds about one record
// a shard, so a longer one is what fills the calls. A batch goes out at
// the earliest instant any call in it may wait to, so heartbeats in the
// short window take the waiting idle ones along. While Valkey is
// unreachable (the runner's last verdict was a transport failure) no
// heartbeat waits: the failure sends the waiting ones, and heartbeats go
// unbatched until a call is answered again. Each
// record is still decided alone (its condition, its write, its answer);
// under the condition the script answers only lastSeenAt, since the
// caller sent the rest. On a server that is not a cluster a busy device's
// heartbeat (HeartbeatInput.Renew: the grants it reports, at most
// GrantChunk) renews them in the same call, only if its record is
// written, with the write's clock: one script call for the whole
// heartbeat instead of presence_beat and a renew per lease shard (real
// profile, 100 jobs/s: 5.50 to 4.90 script calls a job,
// test/bench/results/2026-12-07-renewals-and-claims-in-one-call.md). A
// cluster, or a heartbeat sent in full, renews after the cancel
// requests, as before. An idle claim the view rules out reads nothing at all, not even
// the presence record its grants would be checked against (nothing is
// granted; a lost record is rebuilt by the next heartbeat); a claim that
// reads queue heads reads the record in the same pipelined batch
// (RequirePresence) (test/bench/results/2026-12-01-idle-devices-batched.md).
// On a server that is not a cluster, a claim whose routes may hold work on
// one shard only (the usual case: the view rules the others out) reads
// nothing first: its one script call checks the record, settles the shards
// whose due head the view does not know in sections of their own, grants,
// and keeps rsh, and answers what the view learns (queues found empty,
// due heads, the shards it wrote on) (Store.claimFused,
// test/bench/results/2026-12-08-claim-in-one-call.md).
//
// The grant policy (internal/policy, lua/policy_*.lua) lives beside them:
//
//	pol:c                  HASH  ⟨S⟩:⟨U⟩ -> mappings JSON: U consented to S
//	pol:p                  SET   ⟨S⟩:⟨U⟩ of paused consents
//	pol:t:⟨O⟩              SET   ⟨U⟩ of the people on O's team
//	pol:towners            SET   ⟨O⟩ with a non-empty team (dump, replace)
//	pol:d                  HASH  ⟨S⟩ -> declared purposes JSON (absent: all)
//	pol:v                  STR   policy version, INCR on every write
//
// Job hash fields: stub (raw bytes Go wrote); dl (deadline), seq, state;
// eO eK eA (encoded key parts, so a script can rebuild a discovered job's
// index keys; eS and eJ come from the member; no raw id, site, owner, kind
// or audience: scripts answer them encoded and Go decodes them); while
// claimed: cr, ecr
// (runner, raw and encoded), co (device owner), cd (device JSON), cl (lease
// id), ce (lease expiry); au (awaitingUntil), sa (sealAttempts), ro, ero
// (reofferTo), cx (cancelled), pl (payload), rs (result), dp (disposition),
// bad (quarantined), by (bytes of stub, pl and rs counted in sb:⟨S⟩). Blobs
// are stored as the exact bytes Go produced; Lua never re-encodes them
// (cjson is used only to validate stubs). A blob (stub, pl, rs, cd) of 65
// bytes to 4 KiB is stored in 64-byte slices under numbered fields, the
// blob's base (stub 100, cd 200, pl 300, rs 400) holding its length and
// base+1 … base+n the slices, which a listpack stores as small integers
// (lua/lib/blob.lua), so a record's every value fits Valkey's compact hash encoding (listpack, while
// values are at most hash-max-listpack-value, 64 by default): a queued
// record then takes about half the memory of the same fields in a hash
// table (BenchmarkJobMemory).
//
// Indexes hold memberships, never counters: the unsealed cap is the size of
// uns:⟨S⟩:⟨O⟩ after verifying each member against its record, and any index
// entry a script finds disagreeing with the record is repaired. The one
// exception is sb:⟨S⟩, a site's stored bytes, because a sum has no O(1)
// membership form; it is kept exact by construction (every blob write and
// every forget goes through the job's own by field) and is checked against
// the records by TestSiteUseStaysExact.
//
// # Scaling properties
//
// Claim opens only the queues of its routes × kinds (private only for the
// device owner's own routes) plus one sticky queue per route, and merges them
// by seq: its cost is O(routes·kinds·log n + grants + skipped), independent of
// jobs queued on other routes. Before choosing, claim settles what is due: up
// to ClaimSettleBudget due jobs inside its own script; when more are due it
// writes nothing, Go drains that shard with Sweep (batches of SweepBatch)
// and runs claim again. Sweep reads each shard's due head (one pipelined
// ZRANGE per shard, no script) and runs the sweep script, ZRANGEBYSCORE -inf
// now LIMIT 0 SweepBatch, only on shards with something due, looping while
// more are due: an idle sweep runs no script. take, complete, release, renew and seal settle the job they touch
// first (store.md §9.8), answering as if a sweep had just run.
//
// Churn reports (OnChurn) are decided inside the sweeping script against
// state in Valkey, so at most one report per pair per hour leaves the whole
// fleet; the callback runs after the script, on its own goroutine.
//
// # Where this store differs from the in-memory reference
//
// None of these is visible to the published store contract.
//
//   - Settle on touch (store.md §9.8): take, complete, release, renew and
//     seal settle the job they address first, so a late seal answers
//     too-late (was queued) and an overdue grant is lost, exactly as if a
//     sweep had run just before the call. Pure reads never settle.
//   - Sweep snapshots (and the jobs a claim settles) carry no payload or
//     result ciphertext, so one reply never carries megabytes per job.
//     Sweep orders each of its two lists by first-enqueue order.
//   - A claim examines queue entries in scripts of at most 48 entries each,
//     continuing where the last script stopped, so a job requeued behind
//     a claim's position while that claim is still scanning is left for the
//     next claim; each grant is still chosen and made atomically.
//   - A claim examines at most ClaimScanBudget queue entries; only entries
//     skipped for this runner (refusedBy, retryAfter) cost scans without a
//     grant, so the budget bounds pathological claims only.
//   - Presence may expire (Options.PresenceTTLMs), and a device silent
//     past Options.DeviceRetention is forgotten (ReapDevices; the relay
//     always sets it); Everyone drops index entries whose record is gone.
//   - Pairing user codes: a lookup by user code finds the first live code
//     stored under it; if that one is dropped, a later code that collided
//     with it (8 random symbols) is not found by user code (it still is by
//     device code).
//   - Inputs the reference cannot receive (U+0000 or invalid UTF-8 in an
//     identifier, identifiers or blobs over the Options limits, blobs that
//     are not JSON) are refused with ErrInvalidInput before any write.
//
// # Layout versions
//
// The layout record (fleet-wide "layout") names the version the namespace
// is in: LayoutVersion, written with the record when the first relay
// starts on a new namespace. New refuses any other version with ErrLayout,
// whose message gives the steps: a newer one needs a newer relay; an
// older one `relay migrate` (Migrate) once the older relays are stopped,
// if this relay has steps leading from it, else a new namespace. Migrate
// runs each registered step (migrations, keyed by the version it moves
// from; 4 is the first layout a release wrote, and its step to 5 moves
// UUID job ids to their compact key part, rekey.go), recording
// each version as it is reached (lua/layout_move.lua), and refuses while a
// live replica's heartbeat record says it reads an older layout.
//
// Requirements: Redis 7.0+ or Valkey 7.2+ (FCALL_RO or EVALSHA_RO,
// effect-replicated scripts calling TIME), or the embedded miniredis of
// internal/valkeyconn. The functions library is server-wide (not per
// database or namespace) and named by a digest of its code
// (relay_<16 hex>), so replicas of two versions each keep their own during
// a rolling upgrade; an operator removes an old one with FUNCTION DELETE
// (a relay that still needs it loads it again).
package store
