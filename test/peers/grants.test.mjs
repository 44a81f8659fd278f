// Team sharing end to end (issue 8), in remote-authority mode: three relay
// replicas with RELAY_GRANT_AUTHORITY_URL pointing at lib/authority.mjs (the
// published @byollm/control-plane engine behind the relay's HTTP contract),
// the real byollm daemon paired by device code, the real cloud lane, every
// request through the random-spreading proxy. Run by grants_peers_test.go;
// titles are matched there.
//
// The relay's projection routes (sites, consents, rosters); the authority
// decides (consent state, membership, mappings) and signs. A scenario sets
// both, and G3 makes them disagree on purpose: the projection still routes a
// former member's jobs, the authority declines them.

import { verifyGrant } from "@byollm/protocol";
import { afterAll, describe, expect, it } from "vitest";
import { env, makeSite, mergeProjection, pairDaemon, recordFigures, sleep, uniq, waitFor, waitForOutcomes } from "./lib/harness.mjs";

const authorityAdmin = process.env.PEERS_AUTHORITY_ADMIN;
const controlPlanePublic = process.env.PEERS_CONTROL_PLANE_PUBLIC;
// A transiently declined job stays away from that runner this long (the
// relays run with RELAY_GRANT_RETRY_AFTER shortened from the reference's
// 30 s; grants_peers_test.go).
const RETRY_AFTER_MS = env.grantRetryAfterMs;

async function authority(path, body) {
  const response = await fetch(`${authorityAdmin}${path}`, {
    method: body === undefined ? "GET" : "POST",
    headers: { "content-type": "application/json" },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await response.text();
  if (response.status !== 200) throw new Error(`authority ${path} answered ${response.status}: ${text}`);
  return JSON.parse(text);
}
const policy = (op, args) => authority("/policy", { op, ...args });
const setMode = (mode) => authority("/mode", { mode });
const authorCalls = async (jobId) => (await authority("/stats")).calls.filter((c) => c.op === "author" && c.jobId === jobId);

const cleanups = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
});
function track(...peers) {
  for (const peer of peers) cleanups.push(() => (peer.dispose ? peer.dispose() : peer.stop()));
}

/**
 * One team: alice owns the device (offered to her team), bob is her
 * teammate, carol is on alice's roster in the relay's projection but not a
 * member in the control plane. Everyone has consented to the site and
 * mapped the slot to alice's service.
 */
async function team({ concurrency = 8 } = {}) {
  const alice = `alice_${uniq()}`;
  const bob = `bob_${uniq()}`;
  const carol = `carol_${uniq()}`;
  const site = await makeSite({ owners: [alice, bob, carol] });
  track(site);
  await mergeProjection({ rosters: [{ id: `team_${uniq()}`, owner: alice, members: [bob, carol] }] });
  const slot = { purpose: "default", kind: "llm.generate", service: "primary" };
  await policy("consent", { siteId: site.siteId, user: alice, mappings: [{ ...slot, owner: null }] });
  await policy("consent", { siteId: site.siteId, user: bob, mappings: [{ ...slot, owner: alice }] });
  await policy("consent", { siteId: site.siteId, user: carol, mappings: [{ ...slot, owner: alice }] });
  await policy("addMember", { owner: alice, user: bob });
  const daemon = await pairDaemon({ owner: alice, offer: "team", concurrency });
  track(daemon);
  return { alice, bob, carol, site, daemon };
}

/** The jobs a daemon was handed, from its own recorded claim responses. */
function claimedJobs(daemon) {
  return daemon.requests
    .filter((r) => r.endpoint === "claim" && r.status === 200)
    .flatMap((r) => JSON.parse(r.text).jobs);
}

const grantRefusals = (daemon, jobId) => daemon.events.filter((e) => e.type === "grant-refused" && e.jobId === jobId);

describe.runIf(authorityAdmin !== undefined)(`grants through a remote authority, ${env.target} relay x${env.replicas}`, () => {
  it("G1 a device-code-paired Runner pins the control-plane key; a teammate's job is granted, verified by the daemon and run", async () => {
    const started = Date.now();
    const { alice, bob, site, daemon } = await team();
    // Pairing handed over the authority's key verbatim, and the Runner runs
    // with it pinned (harness: as the CLI builds it).
    expect(daemon.pairing.controlPlanePublic).toBe(controlPlanePublic);
    daemon.start();

    const prompt = `G1 ${uniq()}`;
    const { id } = await site.enqueue(prompt, bob);
    await waitForOutcomes(site, [id], { timeoutMs: 30_000 });
    const record = await site.store.get(id);
    expect(record.outcome.text).toContain(prompt);
    expect(record.provenance.runnerId).toBe(daemon.runnerId);
    expect(daemon.backend.executions(prompt)).toBe(1);
    expect(grantRefusals(daemon, id)).toEqual([]);

    // What the daemon verified: the authority's grant, carried verbatim,
    // after the lease, naming bob's job on alice's service.
    const job = claimedJobs(daemon).find((j) => j.id === id);
    expect(Object.keys(job).slice(-2)).toEqual(["lease", "grant"]);
    expect(job.grant).toMatchObject({ jobId: id, user: bob, owner: alice, site: site.keyId, service: "primary", purpose: "default" });
    expect(verifyGrant({ grant: job.grant, owner: alice, jobId: id, controlPlanePublic, now: Date.now() })).toBeNull();
    expect((await authorCalls(id)).map((c) => c.outcome)).toEqual(["granted"]);
    recordFigures({ scenario: "G1", ms: Date.now() - started, daemonErrors: daemon.errors(), siteErrors: site.errors });
  });

  it("G2 the owner's own job still runs", async () => {
    const { alice, site, daemon } = await team();
    daemon.start();
    const prompt = `G2 ${uniq()}`;
    const { id } = await site.enqueue(prompt, alice);
    await waitForOutcomes(site, [id], { timeoutMs: 30_000 });
    expect(daemon.backend.executions(prompt)).toBe(1);
    const job = claimedJobs(daemon).find((j) => j.id === id);
    expect(job.grant).toMatchObject({ jobId: id, user: alice, owner: alice });
    expect(grantRefusals(daemon, id)).toEqual([]);
  });

  it("G3 a non-member's job is declined permanently and never offered to that device again", async () => {
    const { carol, site, daemon } = await team();
    daemon.start();
    const prompt = `G3 ${uniq()}`;
    const { id } = await site.enqueue(prompt, carol);
    await waitFor(async () => (await authorCalls(id)).length > 0, { timeoutMs: 20_000, what: "the authority to be asked" });
    const declinedAt = daemon.requests.filter((r) => r.endpoint === "claim").length;
    // Many more claims by the same device: the job is never handed over, and
    // the authority is never asked about it again.
    await waitFor(() => daemon.requests.filter((r) => r.endpoint === "claim" && r.status === 200).length >= declinedAt + 8, {
      timeoutMs: 30_000,
      what: "eight more claims",
    });
    expect((await authorCalls(id)).map((c) => c.outcome)).toEqual(["not-a-member"]);
    expect(claimedJobs(daemon).some((j) => j.id === id)).toBe(false);
    expect(daemon.backend.executions(prompt)).toBe(0);
    expect((await site.store.get(id)).state).not.toBe("ok");
  });

  it("G4 a paused consent is declined transiently and runs once resumed", async () => {
    const started = Date.now();
    const { bob, site, daemon } = await team();
    await policy("pause", { siteId: site.siteId, user: bob });
    daemon.start();
    const prompt = `G4 ${uniq()}`;
    const { id } = await site.enqueue(prompt, bob);
    await waitFor(async () => (await authorCalls(id)).length > 0, { timeoutMs: 20_000, what: "the authority to be asked" });
    const declined = (await authorCalls(id))[0];
    expect(declined.outcome).toBe("consent-paused");
    const declinedAt = Date.now();
    await policy("resume", { siteId: site.siteId, user: bob });
    await waitForOutcomes(site, [id], { timeoutMs: RETRY_AFTER_MS + 30_000 });
    const ranAt = Date.now();
    expect(daemon.backend.executions(prompt)).toBe(1);
    expect((await site.store.get(id)).provenance.runnerId).toBe(daemon.runnerId);
    const outcomes = (await authorCalls(id)).map((c) => c.outcome);
    expect(outcomes[0]).toBe("consent-paused");
    expect(outcomes.at(-1)).toBe("granted");
    // Transient: back to the same device, after the retry-after, not before.
    expect(ranAt - declinedAt).toBeGreaterThanOrEqual(RETRY_AFTER_MS - 2_000);
    recordFigures({ scenario: "G4", ms: Date.now() - started, declineToRunMs: ranAt - declinedAt, authorCalls: outcomes });
  });

  it("G5 a grant aged past 120 s is refused by the daemon", async () => {
    const { alice, site, daemon } = await team();
    await setMode("aged");
    try {
      daemon.start();
      const prompt = `G5 ${uniq()}`;
      const { id } = await site.enqueue(prompt, alice);
      await waitFor(() => grantRefusals(daemon, id).length > 0, { timeoutMs: 20_000, what: "the daemon to refuse the aged grant" });
      expect(grantRefusals(daemon, id)[0].refusal).toBe("expired");
      const job = claimedJobs(daemon).find((j) => j.id === id);
      expect(Date.now() - job.grant.issuedAt).toBeGreaterThan(120_000);
      await sleep(1_000);
      expect(daemon.backend.executions(prompt)).toBe(0);
    } finally {
      await setMode("normal");
    }
  });

  it("G6 a replayed grant is refused by the daemon", async () => {
    const { alice, site, daemon } = await team();
    daemon.backend.hold = true;
    daemon.start();
    const prompt = `G6 ${uniq()}`;
    const { id } = await site.enqueue(prompt, alice);
    await waitFor(() => daemon.backend.executions(prompt) === 1, { timeoutMs: 20_000, what: "the job to run" });
    const first = claimedJobs(daemon).find((j) => j.id === id);
    // The daemon goes quiet holding the job; its lease lapses and the relay
    // requeues it. The authority now answers with the grant it issued the
    // first time: a genuine, fresh signature on a document already spent.
    await daemon.stopLoop();
    await setMode("replay");
    try {
      await sleep(env.leaseMs + 1_000);
      daemon.start();
      await waitFor(() => grantRefusals(daemon, id).length > 0, { timeoutMs: 30_000, what: "the daemon to refuse the replayed grant" });
      expect(grantRefusals(daemon, id)[0].refusal).toBe("replayed");
      const again = claimedJobs(daemon).filter((j) => j.id === id);
      expect(again.length).toBeGreaterThanOrEqual(2);
      expect(again.at(-1).grant).toEqual(first.grant);
      expect(again.at(-1).lease.id).not.toBe(first.lease.id);
      expect(daemon.backend.executions(prompt)).toBe(1);
    } finally {
      await setMode("normal");
    }
  });

  it("G7 the authority stopped mid-run: claims keep answering, no job is lost, jobs run once it is back", async () => {
    const started = Date.now();
    const { alice, site, daemon } = await team({ concurrency: 2 });
    daemon.backend.hold = true;
    daemon.start();
    const N = 12;
    const tag = uniq();
    const jobs = [];
    for (let i = 0; i < N; i += 1) {
      const prompt = `G7 ${tag} #${i}#`;
      jobs.push({ id: (await site.enqueue(prompt, alice)).id, prompt });
    }
    await waitFor(() => daemon.backend.seen.length >= 2, { timeoutMs: 20_000, what: "two jobs running" });

    // Stop the authority while two jobs run and ten wait, then let the two
    // finish: the daemon claims again and again against a dead authority.
    await authority("/stop", {});
    const stoppedAt = Date.now();
    const claimsBefore = daemon.requests.filter((r) => r.endpoint === "claim").length;
    daemon.backend.hold = false;
    daemon.backend.releaseHeld();
    await waitFor(() => daemon.requests.filter((r) => r.endpoint === "claim" && r.doneAt > 0).length >= claimsBefore + 6, {
      timeoutMs: 30_000,
      what: "six claims during the outage",
    });
    const during = daemon.requests.filter((r) => r.endpoint === "claim").slice(claimsBefore).filter((r) => r.doneAt > 0);
    // Every claim answered, at once, and handed out nothing ungranted.
    expect(during.map((r) => r.status).filter((s) => s !== 200)).toEqual([]);
    expect(during.flatMap((r) => JSON.parse(r.text).jobs)).toEqual([]);
    const slowestClaimMs = Math.max(...during.map((r) => r.doneAt - r.sentAt));
    await authority("/start", {});
    const restartedAt = Date.now();

    await waitForOutcomes(site, jobs.map((j) => j.id), { timeoutMs: RETRY_AFTER_MS + 60_000 });
    for (const job of jobs) {
      expect(daemon.backend.executions(job.prompt)).toBe(1);
      expect(site.store.completions.get(job.id)).toBe(1);
    }
    // The daemon keeps polling, so one claim may still be on the wire here;
    // every claim that has answered or failed must have been a 200.
    const settled = daemon.requests.filter((r) => r.endpoint === "claim" && (r.doneAt > 0 || r.error !== undefined));
    expect(settled.filter((r) => r.status !== 200)).toEqual([]);
    recordFigures({
      scenario: "G7",
      jobs: N,
      ms: Date.now() - started,
      outageMs: restartedAt - stoppedAt,
      claimsDuringOutage: during.length,
      slowestClaimDuringOutageMs: slowestClaimMs,
      restartToAllDoneMs: Date.now() - restartedAt,
      daemonErrors: daemon.errors(),
      siteErrors: site.errors,
    });
  });
});
