// Shared pieces of the real-peer suite: the relay under test (reached through
// the random-spreading proxy that peers_test.go runs), a real @byollm/server
// site on the cloud lane, and real byollm daemons paired by the device-code
// flow. Nothing here reimplements a protocol step the shipped packages own;
// the only substitutes are the model at the end of the daemon (FakeBackend)
// and one site-store adapter (RelayLeaseStore) explained where it is defined.

import { appendFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomUUID } from "node:crypto";

import {
  PROTOCOL_VERSION,
  generateKeys,
  keyId,
  publicIdentityOf,
  signRequest,
  signSiteRequest,
} from "@byollm/protocol";
import { ByollmApp, MemoryStore, generateSiteKeys } from "@byollm/server";
import {
  Budgets,
  DaemonConfig,
  DeviceIdentity,
  IngressLog,
  ProtocolClient,
  Runner,
  SpendLedger,
  connect,
  resolveConfig,
} from "byollm";

// ---------------------------------------------------------------------------
// Environment (set by peers_test.go)

function required(name) {
  const value = process.env[name];
  if (value === undefined || value === "") {
    throw new Error(
      `${name} is not set: run this suite through peers_test.go (go test ./test/peers/), which starts the relays and the proxy`,
    );
  }
  return value;
}

export const env = {
  /** The proxy: every request goes to a replica chosen at random. */
  origin: required("PEERS_ORIGIN").replace(/\/+$/, ""),
  /** Admin listeners of every replica, comma separated. */
  admins: required("PEERS_ADMINS")
    .split(",")
    .map((a) => a.trim().replace(/\/+$/, ""))
    .filter((a) => a !== ""),
  adminToken: required("PEERS_ADMIN_TOKEN"),
  /** Each replica's own plane origin, index-aligned with admins (bypassing the proxy). */
  planes: (process.env.PEERS_PLANES ?? "")
    .split(",")
    .map((a) => a.trim().replace(/\/+$/, ""))
    .filter((a) => a !== ""),
  /** The proxy's control listener (kill a replica, read stats). */
  control: required("PEERS_CONTROL").replace(/\/+$/, ""),
  leaseMs: Number(required("PEERS_LEASE_MS")),
  replicas: Number(required("PEERS_REPLICAS")),
  figures: process.env.PEERS_FIGURES ?? "",
  target: process.env.PEERS_TARGET ?? "go",
  /** How long a transiently declined job stays away from its runner (the relay's RELAY_GRANT_RETRY_AFTER; the reference's is 30 s). */
  grantRetryAfterMs: Number(process.env.PEERS_GRANT_RETRY_AFTER_MS ?? 30_000),
};

// ---------------------------------------------------------------------------
// Small utilities

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export async function waitFor(predicate, { timeoutMs = 30_000, intervalMs = 50, what = "a condition" } = {}) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await predicate()) return;
    if (Date.now() >= deadline) throw new Error(`timed out after ${timeoutMs}ms waiting for ${what}`);
    await sleep(intervalMs);
  }
}

/** A short unique suffix, so scenarios never share owners, sites or runners. */
export const uniq = () => randomUUID().slice(0, 8);

/** One line per scenario in the figures file, which peers_test.go prints. */
export function recordFigures(figures) {
  const waits = projectionWaits.splice(0);
  const line = JSON.stringify({
    at: new Date().toISOString(),
    target: env.target,
    ...figures,
    ...(waits.length === 0 ? {} : { projectionPushes: waits.length, projectionPropagationMsMax: Math.max(...waits) }),
  });
  if (env.figures !== "") appendFileSync(env.figures, line + "\n");
  console.log(`[figures] ${line}`);
}

/**
 * A fetch that keeps every exchange: the exact bytes and headers sent, and
 * what came back. Replay and tamper scenarios resend captured requests
 * verbatim, so the capture must be of what was really on the wire.
 */
export function recordingFetch(log, inner = globalThis.fetch) {
  return async (input, init = {}) => {
    const url = typeof input === "string" ? input : input.url;
    const headers = Object.fromEntries(new Headers(init.headers ?? {}).entries());
    const entry = {
      url,
      endpoint: new URL(url).pathname.split("/").pop(),
      method: init.method ?? "GET",
      headers,
      body: typeof init.body === "string" ? init.body : "",
      status: 0,
      text: "",
      proxyError: false,
      error: undefined,
      sentAt: Date.now(),
      doneAt: 0,
    };
    log.push(entry);
    let response;
    try {
      response = await inner(input, init);
    } catch (error) {
      entry.error = error instanceof Error ? error.message : String(error);
      throw error;
    }
    entry.status = response.status;
    entry.proxyError = response.headers.get("x-balancer-error") !== null;
    entry.text = await response.text();
    entry.doneAt = Date.now();
    // Hand the caller a fresh Response over the bytes already read.
    return new Response(entry.text, { status: response.status, headers: response.headers });
  };
}

// ---------------------------------------------------------------------------
// The relay: admin plane, proxy control, raw signed requests

/**
 * Upsert records into the projection (POST /projection/merge), through the
 * admin listener of one replica chosen at random, as a control plane would.
 *
 * The Go relay keeps the projection in Valkey and every replica loads new
 * versions on its own; its answer names the version written, and this waits
 * until every replica reports that version in force (GET /projection/status)
 * so a scenario never races the propagation it did not set out to measure.
 * The reference host answers counts only and is a single replica.
 */
export const projectionWaits = [];
export async function mergeProjection(patch) {
  const headers = { authorization: `Bearer ${env.adminToken}`, "content-type": "application/json" };
  // Only replicas still running (a scenario may have killed one).
  const admins = (await liveReplicas()).map((i) => env.admins[i]);
  const admin = admins[Math.floor(Math.random() * admins.length)];
  const response = await fetch(`${admin}/projection/merge`, { method: "POST", headers, body: JSON.stringify(patch) });
  const text = await response.text();
  if (response.status !== 200) throw new Error(`projection merge on ${admin} answered ${response.status}: ${text}`);
  const { version } = JSON.parse(text);
  if (typeof version !== "number") return;
  const started = Date.now();
  for (const other of admins) {
    await waitFor(
      async () => {
        const status = await fetch(`${other}/projection/status`, { headers });
        if (status.status !== 200) throw new Error(`projection status on ${other} answered ${status.status}: ${await status.text()}`);
        const body = await status.json();
        return body.replica?.loaded === true && body.replica.version >= version;
      },
      { timeoutMs: 10_000, intervalMs: 20, what: `${other} to load projection version ${version}` },
    );
  }
  projectionWaits.push(Date.now() - started);
}

/**
 * One admin call to replica `index`'s admin listener, as an operator's
 * approval page would make it: {status, body (parsed JSON), text}.
 */
export async function adminCall(index, method, path, body) {
  const headers = { authorization: `Bearer ${env.adminToken}` };
  if (body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(`${env.admins[index]}${path}`, {
    method,
    headers,
    ...(body === undefined ? {} : { body: typeof body === "string" ? body : JSON.stringify(body) }),
  });
  const text = await response.text();
  let parsed;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  return { status: response.status, body: parsed, text };
}

/**
 * Move a pending code's expiry to `inMs` from now (Valkey TIME). The relay
 * mints codes for 10 minutes; this stands in for the wait (peers_test.go
 * rewrites the code's expiry in Valkey, where every replica reads it).
 */
export async function expireCode(userCode, inMs = 0) {
  const response = await fetch(`${env.control}/expire?userCode=${encodeURIComponent(userCode)}&inMs=${inMs}`, { method: "POST" });
  const text = await response.text();
  if (response.status !== 200) throw new Error(`expire ${userCode} answered ${response.status}: ${text}`);
  return JSON.parse(text);
}

/** Replica indexes the proxy still sends traffic to. */
export async function liveReplicas() {
  return (await proxyStats()).replicas.filter((r) => r.live).map((r) => r.index);
}

export async function proxyStats() {
  const response = await fetch(`${env.control}/stats`);
  if (response.status !== 200) throw new Error(`proxy stats answered ${response.status}`);
  return response.json();
}

/** SIGKILL one replica and take it out of the proxy's rotation. */
export async function killReplica(index) {
  const response = await fetch(`${env.control}/kill?replica=${index}`, { method: "POST" });
  const text = await response.text();
  if (response.status !== 200) throw new Error(`kill replica ${index} answered ${response.status}: ${text}`);
  return JSON.parse(text);
}

/** Send one request through the proxy exactly as given; returns {status, body, text}. */
export async function send({ path, method = "POST", headers = {}, body = "" }) {
  const response = await fetch(`${env.origin}${path}`, {
    method,
    headers,
    ...(method === "POST" ? { body } : {}),
  });
  const text = await response.text();
  let parsed;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  return { status: response.status, body: parsed, text, proxyError: response.headers.get("x-balancer-error") !== null };
}

/** Headers for a daemon-plane request signed with `keys` as `runnerId`. */
export function daemonHeaders(keys, { endpoint, runnerId, body, issuedAt = Date.now() }) {
  const sig = signRequest(keys, { endpoint, runnerId, issuedAt, body });
  return {
    "content-type": "application/json",
    "x-byollm-runner": runnerId,
    "x-byollm-issued-at": String(sig.issuedAt),
    "x-byollm-signature": sig.signature,
  };
}

/** Headers for a site-plane request signed with `keys` as `siteId`. */
export function siteHeaders(keys, { endpoint, siteId, body, issuedAt = Date.now() }) {
  const sig = signSiteRequest(keys, { endpoint, siteId, issuedAt, body });
  return {
    "content-type": "application/json",
    "x-byollm-site": siteId,
    "x-byollm-issued-at": String(sig.issuedAt),
    "x-byollm-signature": sig.signature,
  };
}

export { PROTOCOL_VERSION, generateKeys, keyId, publicIdentityOf };

// ---------------------------------------------------------------------------
// The site

/**
 * The shipped MemoryStore, with one adapter for the cloud lane's re-grants.
 *
 * On the cloud lane the relay owns leases: when a lease lapses (a daemon that
 * stopped heartbeating, a claim whose answer was lost) the relay requeues the
 * job and grants it again under a new lease id. @byollm/server 0.1.1's
 * MemoryStore.adopt refuses any lease id other than the first one it cached,
 * and (B258) never expires an adopted lease itself, so the stock site would
 * refuse to seal for the second device forever and the relay would evict the
 * job after three unsealed expiries. That is a site-side limitation, not a
 * relay property, and it would make every requeue scenario untestable. So when
 * the relay names a new lease for a job this store still holds under an
 * adopted (runner-less) lease, the stale cached lease is released and the new
 * one adopted. Everything else is the shipped store.
 *
 * It also counts accepted completions per job: "completed exactly once" is
 * asserted on these counts.
 */
export class RelayLeaseStore extends MemoryStore {
  completions = new Map();
  regrants = 0;

  async adopt(args) {
    const adopted = await super.adopt(args);
    if (adopted !== null) return adopted;
    const job = await super.get(args.jobId);
    if (job === null || job.state !== "claimed" || job.lease === null) return null;
    if (job.lease.runnerId !== "" || job.lease.id === args.leaseId) return null;
    await super.release({
      runnerId: "",
      leases: [{ jobId: args.jobId, leaseId: job.lease.id }],
      reason: "shutdown",
      now: args.now,
    });
    this.regrants += 1;
    return super.adopt(args);
  }

  async complete(args) {
    const result = await super.complete(args);
    if (result.accepted) this.completions.set(args.jobId, (this.completions.get(args.jobId) ?? 0) + 1);
    return result;
  }
}

/**
 * A site on the cloud lane: the shipped ByollmApp + CloudLane, registered in
 * the relay's projection, with a pump loop running as a long-lived site would.
 */
export async function makeSite({ siteId = `site_${uniq()}`, owners = [], pumpMs = 50 } = {}) {
  const keys = generateSiteKeys();
  const store = new RelayLeaseStore();
  const requests = [];
  const app = new ByollmApp({
    store,
    siteKeys: keys,
    lane: { relayOrigin: env.origin, siteId, fetch: recordingFetch(requests) },
  });
  await mergeProjection({
    sites: [{ siteId, site: publicIdentityOf(keys) }],
    consents: owners.map((owner) => ({ owner, siteId })),
  });

  const errors = [];
  const reports = { sealed: 0, completed: 0, refused: 0, deferred: 0 };
  let running = true;
  const loop = (async () => {
    while (running) {
      try {
        const report = await app.cloud.pump();
        reports.sealed += report.sealed.length;
        reports.completed += report.completed.length;
        reports.refused += report.refused.length;
        if (report.deferred !== undefined) {
          reports.deferred += 1;
          errors.push(`deferred: ${report.deferred}`);
        }
      } catch (error) {
        // A replica dying under a request surfaces here as a fetch failure
        // or a non-retryable RelayUnavailable; a long-lived site logs it and
        // pumps again, and the scenario decides whether it was acceptable.
        errors.push(error instanceof Error ? `${error.name}: ${error.message}` : String(error));
      }
      await sleep(pumpMs);
    }
  })();

  return {
    siteId,
    keys,
    keyId: keyId(keys.identityPublic),
    app,
    store,
    requests,
    errors,
    reports,
    /** Enqueue through the real app, retrying only a relay that was unreachable. */
    async enqueue(prompt, owner) {
      const id = `job_${randomUUID()}`;
      try {
        return await app.enqueue({ id, kind: "llm.generate", payload: { prompt }, owner });
      } catch (error) {
        errors.push(`enqueue ${id}: ${error instanceof Error ? error.message : String(error)}`);
        // The app stores and seals the job before publishing the stub, so a
        // relay that failed the publish cost a routing delay only: publish
        // the same record again (enqueue is idempotent per id at the relay).
        const record = await store.get(id);
        if (record === null) throw error;
        for (let attempt = 1; ; attempt += 1) {
          await sleep(200);
          try {
            await app.cloud.publish(record);
            return { id, record };
          } catch (again) {
            errors.push(`republish ${id}: ${again instanceof Error ? again.message : String(again)}`);
            if (attempt >= 10) throw again;
          }
        }
      }
    },
    async stop() {
      running = false;
      await loop;
    },
  };
}

// ---------------------------------------------------------------------------
// The daemon

/**
 * The model at the end of the daemon. Answers `echo: <prompt>` at once, or
 * holds every call until released (for cancel and lease-expiry scenarios),
 * and keeps count of what it executed.
 */
export class FakeBackend {
  id = "openai-http";
  class = "http";
  stopReasons = { kind: "unavailable", why: "the peers test backend echoes and never stops early" };
  healthy = true;
  models = ["echo-model"];
  /** Every prompt executed, in order. */
  seen = [];
  /** Prompts whose execution was aborted by the daemon (cancel, lost lease). */
  aborted = [];
  hold = false;
  #held = new Set();

  health() {
    return Promise.resolve({ healthy: this.healthy, models: this.models });
  }

  /** Let every held call finish normally. */
  releaseHeld() {
    for (const resolve of this.#held) resolve("done");
    this.#held.clear();
  }

  async execute(request) {
    this.seen.push(request.prompt);
    const started = Date.now();
    if (this.hold) {
      const how = request.signal.aborted
        ? "aborted"
        : await new Promise((resolve) => {
            this.#held.add(resolve);
            request.signal.addEventListener("abort", () => resolve("aborted"), { once: true });
          });
      if (how === "aborted") {
        this.aborted.push(request.prompt);
        return { ok: false, code: "canceled", message: "the job was canceled", durationMs: Date.now() - started };
      }
    }
    return { ok: true, text: `echo: ${request.prompt}`, durationMs: Date.now() - started };
  }

  /** How many times a prompt containing `marker` was executed. */
  executions(marker) {
    return this.seen.filter((p) => p.includes(marker)).length;
  }
}

/**
 * Pair a real byollm daemon through the device-code flow and build its Runner.
 *
 * start -> poll ("pending") -> the test approves by pushing the device record
 * into the projection (what a control plane does when a person types the user
 * code) -> poll ("approved"). The runner id is the projection's to choose.
 */
export async function pairDaemon({ owner, runnerId = `runner_${uniq()}`, concurrency = 8, heartbeatMs = 400, offer = "private" }) {
  const pairing = await beginPairing({ runnerId, concurrency, offer });
  // Approve only after the relay has answered "pending" at least once, so the
  // whole flow (start, pending, approved) crosses the replicas.
  await pairing.pendingSeen();
  const pendingPolls = pairing.requests.filter((r) => r.text.includes('"status":"pending"')).length;
  await mergeProjection({ devices: [{ owner, runnerId, device: pairing.device }] });
  const result = await pairing.result;
  if (!result.ok) throw new Error(`pairing ${runnerId} failed: ${result.reason}: ${result.message}`);
  return runnerFor(pairing, result, { heartbeatMs, approved: true, pendingPolls });
}

/**
 * A real byollm daemon starting the device-code flow (`connect`), as `byollm
 * pair` does: it has generated its keys and shows its person `userCode`.
 * Nothing is approved here; the caller decides what the person does.
 *
 * `startVia` and `pollVia` pin the start and the polls to one replica's plane
 * (an index into env.planes); otherwise they go through the proxy. `holdPolls()`
 * keeps the daemon's polls waiting (not failing) until `releasePolls()`, so a
 * scenario can order its admin calls against the daemon's next poll.
 */
export async function beginPairing({ runnerId = `runner_${uniq()}`, concurrency = 8, startVia, pollVia, label, keysOf, offer = "private" } = {}) {
  // keysOf: an earlier pairing whose keypair to reuse (a daemon pairing again).
  const home = keysOf?.home ?? (await mkdtemp(join(tmpdir(), "peers-daemon-")));
  const identity = new DeviceIdentity(join(home, "keys.json"));
  const keys = await identity.load(Date.now());
  const device = publicIdentityOf(keys);
  const requests = [];
  const recorded = recordingFetch(requests);

  const loaded = resolveConfig(
    DaemonConfig.parse({
      services: {
        primary: {
          model: "echo-model",
          kinds: ["llm.generate", "llm.chat"],
          type: "openai-http",
          baseUrl: "http://127.0.0.1:11434/v1",
          // "team" lets a control plane grant teammates' jobs onto it;
          // "private" runs the owner's work only, whatever any grant says.
          offer,
        },
      },
      concurrency,
    }),
  );
  const capabilities = loaded.routes.map((route) => ({
    kind: route.kind,
    service: route.service,
    backendId: route.backendId,
    backendClass: route.backendClass,
    model: route.model,
    offerScope: route.offerScope,
  }));

  let gate;
  let open;
  const pinned = (via) => (via === undefined ? env.origin : env.planes[via]);
  // Routes the pair requests; the daemon itself only knows one origin.
  const routed = async (input, init = {}) => {
    const url = new URL(typeof input === "string" ? input : input.url);
    const body = typeof init.body === "string" ? init.body : "";
    const action = url.pathname.endsWith("/pair") ? JSON.parse(body || "{}").action : undefined;
    if (action === "poll" && gate) await gate;
    const origin = action === "start" ? pinned(startVia) : action === "poll" ? pinned(pollVia) : env.origin;
    return recorded(origin + url.pathname + url.search, init);
  };

  let code;
  let polls = 0;
  let codeSeen;
  const codeShown = new Promise((resolve) => (codeSeen = resolve));
  const result = connect({
    client: new ProtocolClient({ origin: env.origin, fetch: routed }),
    daemonVersion: "0.1.1",
    label: label ?? `peers ${runnerId}`,
    capabilities,
    device,
    onCode: (info) => {
      code = info;
      codeSeen(info);
    },
    onPoll: () => {
      polls += 1;
    },
    sleep: () => sleep(100),
  });
  return {
    home,
    identity,
    keys,
    device,
    loaded,
    capabilities,
    requests,
    label: label ?? `peers ${runnerId}`,
    /** What the daemon prints: {userCode, verificationUrl, expiresAt}. */
    codeShown,
    get code() {
      return code;
    },
    get polls() {
      return polls;
    },
    /** connect's own outcome: {ok:true, pairing} or {ok:false, reason, message}. */
    result,
    pendingSeen: () =>
      waitFor(() => requests.some((r) => r.endpoint === "pair" && r.status === 200 && r.text.includes('"status":"pending"')), {
        timeoutMs: 20_000,
        what: `a pending poll for ${runnerId}`,
      }),
    /** Hold the daemon's next polls; resolves once no poll is in flight. */
    async holdPolls() {
      if (!gate) gate = new Promise((resolve) => (open = resolve));
      await waitFor(() => requests.every((r) => r.endpoint !== "pair" || r.doneAt > 0 || r.error !== undefined), {
        timeoutMs: 10_000,
        what: "the daemon's poll in flight to finish",
      });
    },
    releasePolls() {
      open?.();
      gate = undefined;
    },
    async dispose() {
      await rm(home, { recursive: true, force: true }).catch(() => {});
    },
  };
}

/** The daemon's Runner after an approved pairing, ready to `start()`. */
export async function runnerFor(pairing, result, { heartbeatMs = 400, approved = true, pendingPolls = 0 } = {}) {
  const { home, identity, keys, device, loaded, requests, capabilities } = pairing;
  const recorded = recordingFetch(requests);
  const code = pairing.code;
  const polls = pairing.polls;
  const budgets = new Budgets(join(home, "budgets.json"), loaded.config.community);
  await budgets.load(Date.now());
  const spend = new SpendLedger(join(home, "spend.json"));
  await spend.load(Date.now());
  const ingress = new IngressLog({ path: join(home, "ingress.log"), communityPromptDays: 7, keepSelfPrompts: true });
  const backend = new FakeBackend();
  const events = [];
  const runner = new Runner({
    client: new ProtocolClient({
      origin: env.origin,
      identity: { runnerId: result.pairing.runnerId, sign: (input) => identity.signRequest(input) },
      fetch: recorded,
    }),
    runnerId: result.pairing.runnerId,
    owner: result.pairing.owner,
    // The key pinned at pairing, when the relay handed one over, exactly as
    // the byollm CLI builds its Runner: with it the daemon runs only jobs
    // whose grant verifies; without it, its owner's jobs only.
    ...(result.pairing.controlPlanePublic === undefined ? {} : { controlPlanePublic: result.pairing.controlPlanePublic }),
    identity: {
      keys: () => identity.load(Date.now()),
      sites: new Map(Object.entries(result.pairing.sites)),
    },
    daemonVersion: "0.1.1",
    loaded,
    budgets,
    spend,
    ingress,
    heartbeatMs,
    onEvent: (event) => events.push({ at: Date.now(), ...event }),
    backendFactory: () => backend,
  });

  let abort;
  let loop;
  return {
    runnerId: result.pairing.runnerId,
    owner: result.pairing.owner,
    pairing: result.pairing,
    userCode: code?.userCode,
    pairingPolls: { total: polls, pendingBeforeApproval: pendingPolls, approved },
    keys,
    device,
    runner,
    backend,
    events,
    requests,
    capabilities,
    /** Start the daemon's own loop (heartbeat, claim, run), as `byollm start` does. */
    start() {
      if (loop) return;
      abort = new AbortController();
      loop = runner.run(abort.signal).catch((error) => {
        events.push({ at: Date.now(), type: "error", message: `run loop died: ${error?.message ?? error}` });
      });
    },
    /** Stop the loop without releasing or cancelling anything: no more heartbeats. */
    async stopLoop() {
      abort?.abort();
      await loop;
      loop = undefined;
    },
    claimed(jobId) {
      return events.filter((e) => e.type === "claimed" && e.jobId === jobId).length;
    },
    errors() {
      return events.filter((e) => e.type === "error").map((e) => e.message);
    },
    async dispose() {
      abort?.abort();
      backend.releaseHeld();
      runner.cancelAll();
      await loop;
      await waitFor(() => runner.status().activeJobs === 0, { timeoutMs: 3_000, what: "jobs to unwind" }).catch(() => {});
      await rm(home, { recursive: true, force: true }).catch(() => {});
    },
  };
}

/** Wait until every job id has a terminal outcome in the site's own store. */
export async function waitForOutcomes(site, ids, { timeoutMs = 60_000, states = ["ok"] } = {}) {
  await waitFor(
    async () => {
      for (const id of ids) {
        const job = await site.store.get(id);
        if (job === null || !states.includes(job.state)) return false;
      }
      return true;
    },
    { timeoutMs, intervalMs: 100, what: `${ids.length} outcomes at ${site.siteId}` },
  ).catch(async (error) => {
    const stuck = [];
    for (const id of ids) {
      const job = await site.store.get(id);
      if (job === null || !states.includes(job.state)) stuck.push(`${id}:${job?.state ?? "missing"}`);
    }
    throw new Error(`${error.message}; not finished: ${stuck.slice(0, 10).join(", ")} (${stuck.length} total); site errors: ${site.errors.slice(-5).join(" | ")}`);
  });
}
