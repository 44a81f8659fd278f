// Team sharing end to end with the built-in grant engine (issue 8): three
// relay replicas with RELAY_GRANT_KEY_FILE (PEERS_GRANT_MODE=builtin), or with
// a remote HTTP signer holding the same key (PEERS_GRANT_MODE=signer), the
// policy written through the replicas' admin API (POST /policy/merge), the
// real byollm daemon paired by device code, the real cloud lane, every
// request through the random-spreading proxy. Run by builtin_peers_test.go;
// titles are matched there.
//
// The engine runs inside the relay, so there is no authority to ask what it
// decided: declines are read from the relays' own grant metrics
// (relay_grant_calls_total by outcome, summed over the replicas), and the
// daemon's recorded claim responses show what it was handed.

import { verifyGrant } from "@byollm/protocol";
import { afterAll, describe, expect, it } from "vitest";
import { adminCall, env, makeSite, mergeProjection, pairDaemon, recordFigures, uniq, waitFor, waitForOutcomes } from "./lib/harness.mjs";

const mode = process.env.PEERS_GRANT_MODE;
const controlPlanePublic = process.env.PEERS_CONTROL_PLANE_PUBLIC;
const signerStats = process.env.PEERS_SIGNER_STATS;
// A transiently declined job stays away from that runner this long (the
// relays run with RELAY_GRANT_RETRY_AFTER shortened from the reference's
// 30 s; grants_peers_test.go).
const RETRY_AFTER_MS = env.grantRetryAfterMs;
const SLOT = { purpose: "default", kind: "llm.generate", service: "primary" };

/** One policy merge through a replica's admin listener (any: one Valkey). */
let nextAdmin = 0;
async function mergePolicy(doc) {
  const index = nextAdmin++ % env.admins.length;
  const res = await adminCall(index, "POST", "/policy/merge", doc);
  if (res.status !== 200) throw new Error(`POST /policy/merge answered ${res.status}: ${res.text}`);
  return res.body;
}

/** The author calls of every replica by outcome (Prometheus text). */
async function authorOutcomes() {
  const totals = {};
  for (const admin of env.admins) {
    const text = await (await fetch(`${admin}/metrics`)).text();
    for (const line of text.split("\n")) {
      if (!line.startsWith("relay_grant_calls_total{") || !line.includes('op="author"')) continue;
      const outcome = /outcome="([^"]+)"/.exec(line)?.[1];
      totals[outcome] = (totals[outcome] ?? 0) + Number(line.slice(line.lastIndexOf(" ") + 1));
    }
  }
  return totals;
}
const since = (before, after, outcome) => (after[outcome] ?? 0) - (before[outcome] ?? 0);

const cleanups = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
});
function track(...peers) {
  for (const peer of peers) cleanups.push(() => (peer.dispose ? peer.dispose() : peer.stop()));
}

/**
 * One team, as in grants.test.mjs: alice owns the device (offered to her
 * team), bob is her teammate, carol is on alice's roster in the relay's
 * projection but not a member in the policy (the drift GET /policy/status
 * reports). Everyone has consented and mapped the slot to alice's service.
 */
async function team({ concurrency = 8 } = {}) {
  const alice = `alice_${uniq()}`;
  const bob = `bob_${uniq()}`;
  const carol = `carol_${uniq()}`;
  const site = await makeSite({ owners: [alice, bob, carol] });
  track(site);
  await mergeProjection({ rosters: [{ id: `team_${uniq()}`, owner: alice, members: [bob, carol] }] });
  const consent = (user, owner, paused = false) => ({ siteId: site.siteId, user, paused, mappings: [{ ...SLOT, owner }] });
  await mergePolicy({
    consents: [consent(alice, null), consent(bob, alice), consent(carol, alice)],
    teams: [{ owner: alice, members: [bob] }],
  });
  const daemon = await pairDaemon({ owner: alice, offer: "team", concurrency });
  track(daemon);
  return { alice, bob, carol, site, daemon, consent };
}

/** The jobs a daemon was handed, from its own recorded claim responses. */
function claimedJobs(daemon) {
  return daemon.requests
    .filter((r) => r.endpoint === "claim" && r.status === 200)
    .flatMap((r) => JSON.parse(r.text).jobs);
}
const claimsAnswered = (daemon) => daemon.requests.filter((r) => r.endpoint === "claim" && r.status === 200).length;
const grantRefusals = (daemon, jobId) => daemon.events.filter((e) => e.type === "grant-refused" && e.jobId === jobId);

/** Start the daemon and wait until its team offer is on record (satisfiable reads it). */
async function startOffering(daemon) {
  daemon.start();
  await waitFor(() => daemon.requests.some((r) => r.endpoint === "heartbeat" && r.status === 200), {
    timeoutMs: 20_000,
    what: "a first heartbeat",
  });
}

/** G1's checks: granted with the pinned key, verified by the daemon, run. */
async function teammateJobRuns({ bob, alice, site, daemon }, tag) {
  const prompt = `${tag} ${uniq()}`;
  const { id } = await site.enqueue(prompt, bob);
  await waitForOutcomes(site, [id], { timeoutMs: 30_000 });
  const record = await site.store.get(id);
  expect(record.outcome.text).toContain(prompt);
  expect(record.provenance.runnerId).toBe(daemon.runnerId);
  expect(daemon.backend.executions(prompt)).toBe(1);
  expect(grantRefusals(daemon, id)).toEqual([]);
  const job = claimedJobs(daemon).find((j) => j.id === id);
  expect(Object.keys(job).slice(-2)).toEqual(["lease", "grant"]);
  expect(job.grant).toMatchObject({ jobId: id, user: bob, owner: alice, site: site.keyId, service: "primary", purpose: "default" });
  expect(verifyGrant({ grant: job.grant, owner: alice, jobId: id, controlPlanePublic, now: Date.now() })).toBeNull();
  return id;
}

describe.runIf(mode === "builtin")(`grants from the built-in engine (key file), ${env.target} relay x${env.replicas}`, () => {
  it("B1 a device-code-paired Runner pins the key file's public half; a teammate's job is granted, verified by the daemon and run", async () => {
    const started = Date.now();
    const t = await team();
    // The relay derived controlPlanePublic from the key file and handed it
    // over at pairing; the Runner runs with it pinned.
    expect(t.daemon.pairing.controlPlanePublic).toBe(controlPlanePublic);
    const before = await authorOutcomes();
    await startOffering(t.daemon);
    await teammateJobRuns(t, "B1");
    expect(since(before, await authorOutcomes(), "granted")).toBe(1);
    recordFigures({ scenario: "B1", ms: Date.now() - started, daemonErrors: t.daemon.errors(), siteErrors: t.site.errors });
  });

  it("B2 the owner's own job still runs", async () => {
    const { alice, site, daemon } = await team();
    await startOffering(daemon);
    const prompt = `B2 ${uniq()}`;
    const { id } = await site.enqueue(prompt, alice);
    await waitForOutcomes(site, [id], { timeoutMs: 30_000 });
    expect(daemon.backend.executions(prompt)).toBe(1);
    const job = claimedJobs(daemon).find((j) => j.id === id);
    expect(job.grant).toMatchObject({ jobId: id, user: alice, owner: alice });
    expect(grantRefusals(daemon, id)).toEqual([]);
  });

  it("B3 a non-member's job is declined permanently and never offered to that device again", async () => {
    const { carol, site, daemon } = await team();
    await startOffering(daemon);
    const before = await authorOutcomes();
    const prompt = `B3 ${uniq()}`;
    const { id } = await site.enqueue(prompt, carol);
    await waitFor(async () => since(before, await authorOutcomes(), "declined-permanent") > 0, {
      timeoutMs: 20_000,
      what: "the engine to decline",
    });
    const declinedAt = claimsAnswered(daemon);
    // Many more claims by the same device: the job is never handed over,
    // and the engine is never asked about it again.
    await waitFor(() => claimsAnswered(daemon) >= declinedAt + 8, { timeoutMs: 30_000, what: "eight more claims" });
    const after = await authorOutcomes();
    expect(since(before, after, "declined-permanent")).toBe(1);
    expect(since(before, after, "granted") + since(before, after, "declined-transient")).toBe(0);
    expect(claimedJobs(daemon).some((j) => j.id === id)).toBe(false);
    expect(daemon.backend.executions(prompt)).toBe(0);
    expect((await site.store.get(id)).state).not.toBe("ok");
  });

  it("B4 a paused consent is declined transiently and runs once resumed through the policy admin API", async () => {
    const started = Date.now();
    const { alice, bob, site, daemon, consent } = await team();
    await mergePolicy({ consents: [consent(bob, alice, true)] });
    await startOffering(daemon);
    const before = await authorOutcomes();
    const prompt = `B4 ${uniq()}`;
    const { id } = await site.enqueue(prompt, bob);
    await waitFor(async () => since(before, await authorOutcomes(), "declined-transient") > 0, {
      timeoutMs: 20_000,
      what: "the engine to decline",
    });
    const declinedAt = Date.now();
    expect(daemon.backend.executions(prompt)).toBe(0);
    await mergePolicy({ consents: [consent(bob, alice, false)] });
    await waitForOutcomes(site, [id], { timeoutMs: RETRY_AFTER_MS + 30_000 });
    const ranAt = Date.now();
    expect(daemon.backend.executions(prompt)).toBe(1);
    expect((await site.store.get(id)).provenance.runnerId).toBe(daemon.runnerId);
    const after = await authorOutcomes();
    expect(since(before, after, "declined-transient")).toBe(1);
    expect(since(before, after, "declined-permanent")).toBe(0);
    expect(since(before, after, "granted")).toBe(1);
    const job = claimedJobs(daemon).find((j) => j.id === id);
    expect(verifyGrant({ grant: job.grant, owner: alice, jobId: id, controlPlanePublic, now: Date.now() })).toBeNull();
    // Transient: back to the same device after the retry-after, not before.
    expect(ranAt - declinedAt).toBeGreaterThanOrEqual(RETRY_AFTER_MS - 2_000);
    recordFigures({ scenario: "B4", ms: Date.now() - started, declineToRunMs: ranAt - declinedAt });
  });
});

describe.runIf(mode === "signer")(`grants from the built-in engine with a remote signer, ${env.target} relay x${env.replicas}`, () => {
  it("B5 signer mode: the engine decides, the HTTP signer signs, the teammate's job is granted, verified by the daemon and run", async () => {
    const started = Date.now();
    const t = await team();
    expect(t.daemon.pairing.controlPlanePublic).toBe(controlPlanePublic);
    const signedBefore = (await (await fetch(signerStats)).json()).signed;
    await startOffering(t.daemon);
    await teammateJobRuns(t, "B5");
    // The signature came from the signer (the relay holds no key).
    expect((await (await fetch(signerStats)).json()).signed).toBeGreaterThan(signedBefore);
    recordFigures({ scenario: "B5", ms: Date.now() - started, daemonErrors: t.daemon.errors(), siteErrors: t.site.errors });
  });
});
