// Real peers, real HTTP, several replicas (issue 3).
//
// Every request below reaches the relay through the proxy peers_test.go runs,
// which forwards it to a replica chosen at random, so consecutive calls of
// one flow (pair start and poll, claim and fetch, seal and result) land on
// different processes that share only Valkey. The daemons are the shipped
// byollm Runner paired by the device-code flow; the site is the shipped
// @byollm/server ByollmApp on the cloud lane. Titles are matched by
// peers_test.go: change them in both places.

import { afterAll, describe, expect, it } from "vitest";
import {
  PROTOCOL_VERSION,
  adminCall,
  beginPairing,
  daemonHeaders,
  expireCode,
  keyId,
  liveReplicas,
  runnerFor,
  env,
  generateKeys,
  killReplica,
  makeSite,
  mergeProjection,
  pairDaemon,
  proxyStats,
  recordFigures,
  send,
  siteHeaders,
  sleep,
  uniq,
  waitFor,
  waitForOutcomes,
} from "./lib/harness.mjs";

/** Requests a peer made, summarised by endpoint and status, for the figures. */
function summarize(...logs) {
  const byStatus = {};
  const latency = {};
  let total = 0;
  let transport = 0;
  for (const log of logs) {
    for (const r of log) {
      total += 1;
      if (r.doneAt > 0) (latency[r.endpoint] ??= []).push(r.doneAt - r.sentAt);
      const key = r.error !== undefined ? `${r.endpoint}:neterr` : r.proxyError ? `${r.endpoint}:proxy502` : `${r.endpoint}:${r.status}`;
      if (r.error !== undefined || r.proxyError || r.status >= 500) transport += 1;
      byStatus[key] = (byStatus[key] ?? 0) + 1;
    }
  }
  const ms = {};
  for (const [endpoint, xs] of Object.entries(latency)) {
    xs.sort((a, b) => a - b);
    ms[endpoint] = { p50: xs[Math.floor(xs.length / 2)], p95: xs[Math.floor(xs.length * 0.95)], max: xs[xs.length - 1] };
  }
  return { total, transportErrors: transport, byStatus, latencyMs: ms };
}

/** Every grant a daemon received, from its own recorded claim responses. */
function grants(daemon) {
  const out = [];
  for (const r of daemon.requests) {
    if (r.endpoint !== "claim" || r.status !== 200) continue;
    for (const job of JSON.parse(r.text).jobs) out.push({ jobId: job.id, leaseId: job.lease.id, runnerId: daemon.runnerId });
  }
  return out;
}

function bodyOf(r) {
  return r.body === "" ? {} : JSON.parse(r.body);
}

const cleanups = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
});
function track(...peers) {
  for (const peer of peers) cleanups.push(() => (peer.dispose ? peer.dispose() : peer.stop()));
}

describe(`real peers against ${env.target} relay x${env.replicas}`, () => {
  it("S1 round trip of many jobs through CloudLane and a device-code-paired Runner", async () => {
    const started = Date.now();
    const owner = `alice_${uniq()}`;
    const site = await makeSite({ owners: [owner] });
    track(site);
    const daemon = await pairDaemon({ owner });
    track(daemon);

    // The pairing went start -> pending -> approved, and pinned this site.
    expect(daemon.pairingPolls.pendingBeforeApproval).toBeGreaterThan(0);
    expect(daemon.userCode).toMatch(/^[0-9A-HJKMNP-TV-Z]{4}-[0-9A-HJKMNP-TV-Z]{4}$/);
    expect(Object.keys(daemon.pairing.sites)).toEqual([site.keyId]);
    expect(daemon.pairing.owner).toBe(owner);
    const paired = Date.now();

    daemon.start();
    const N = 50;
    const tag = uniq();
    const jobs = [];
    for (let i = 0; i < N; i += 1) {
      const prompt = `S1 ${tag} #${i}#`;
      const handle = await site.enqueue(prompt, owner);
      jobs.push({ id: handle.id, prompt });
    }
    await waitForOutcomes(site, jobs.map((j) => j.id), { timeoutMs: 120_000 });
    const finished = Date.now();

    // Recorded before the assertions, so a failed run still says whether a
    // job was granted twice and whether a heartbeat reported a lease lost.
    const granted = grants(daemon);
    recordFigures({
      scenario: "S1",
      jobs: N,
      pairMs: paired - started,
      runMs: finished - paired,
      jobsPerSec: Number((N / ((finished - paired) / 1000)).toFixed(1)),
      grantedTwice: jobs.filter((j) => granted.filter((g) => g.jobId === j.id).length > 1).map((j) => j.id),
      leasesReportedLost: daemon.requests
        .filter((r) => r.endpoint === "heartbeat" && r.status === 200)
        .reduce((n, r) => n + (JSON.parse(r.text).lost ?? []).length, 0),
      daemonErrors: daemon.errors(),
      siteErrors: site.errors,
      requests: summarize(daemon.requests, site.requests),
    });

    for (const job of jobs) {
      const record = await site.store.get(job.id);
      expect(record.outcome.outcome).toBe("ok");
      expect(record.outcome.text).toContain(job.prompt);
      expect(record.provenance.runnerId).toBe(daemon.runnerId);
      expect(record.provenance.runnerOwner).toBe(owner);
      expect(site.store.completions.get(job.id)).toBe(1);
      expect(daemon.backend.executions(job.prompt)).toBe(1);
    }
    expect(daemon.backend.seen).toHaveLength(N);
    const results = daemon.requests.filter((r) => r.endpoint === "result");
    expect(results).toHaveLength(N);
    for (const r of results) expect(JSON.parse(r.text)).toEqual({ accepted: true, state: "done" });
  });

  it("S2 cancel mid-flight reaches the running daemon", async () => {
    const started = Date.now();
    const owner = `bea_${uniq()}`;
    const site = await makeSite({ owners: [owner] });
    track(site);
    const daemon = await pairDaemon({ owner });
    track(daemon);
    daemon.backend.hold = true;
    daemon.start();

    const tag = uniq();
    const handles = [];
    for (let i = 0; i < 3; i += 1) {
      const prompt = `S2 ${tag} #${i}#`;
      handles.push({ handle: await site.enqueue(prompt, owner), prompt });
    }
    // All three are running on the daemon's model: fetched and executing.
    await waitFor(() => handles.every((h) => daemon.backend.executions(h.prompt) === 1), {
      timeoutMs: 30_000,
      what: "all three jobs to be running",
    });

    const [victim, ...others] = handles;
    const cancelledAt = Date.now();
    await victim.handle.cancel();
    await waitFor(() => daemon.backend.aborted.some((p) => p.includes(victim.prompt)), {
      timeoutMs: 15_000,
      what: "the daemon to abort the cancelled job",
    });
    const abortedAt = Date.now();

    // The relay named the job on a heartbeat, the daemon reported `canceled`
    // under its lease, and the site recorded that outcome.
    const named = daemon.requests.some(
      (r) => r.endpoint === "heartbeat" && r.status === 200 && JSON.parse(r.text).cancel.some((c) => c.jobId === victim.handle.id),
    );
    expect(named).toBe(true);
    await waitFor(
      () => daemon.requests.some((r) => r.endpoint === "result" && r.status === 200 && bodyOf(r).jobId === victim.handle.id),
      { timeoutMs: 10_000, what: "the canceled result to be accepted" },
    );
    const result = daemon.requests.find((r) => r.endpoint === "result" && bodyOf(r).jobId === victim.handle.id);
    expect(bodyOf(result).disposition).toBe("canceled");
    expect(JSON.parse(result.text)).toEqual({ accepted: true, state: "done" });
    await waitForOutcomes(site, [victim.handle.id], { timeoutMs: 15_000, states: ["canceled"] });
    expect((await site.store.get(victim.handle.id)).outcome.outcome).toBe("canceled");

    // The other two were not touched by the cancel and finish normally.
    expect(others.some((h) => daemon.backend.aborted.some((p) => p.includes(h.prompt)))).toBe(false);
    daemon.backend.hold = false;
    daemon.backend.releaseHeld();
    await waitForOutcomes(site, others.map((h) => h.handle.id), { timeoutMs: 30_000 });
    for (const h of handles) expect(site.store.completions.get(h.handle.id)).toBe(1);

    recordFigures({
      scenario: "S2",
      jobs: handles.length,
      ms: Date.now() - started,
      cancelToAbortMs: abortedAt - cancelledAt,
      daemonErrors: daemon.errors(),
      siteErrors: site.errors,
      requests: summarize(daemon.requests, site.requests),
    });
  });

  it("S3 lease expiry requeues to a second daemon", async () => {
    const started = Date.now();
    const owner = `cy_${uniq()}`;
    const site = await makeSite({ owners: [owner] });
    track(site);
    const first = await pairDaemon({ owner });
    track(first);
    const second = await pairDaemon({ owner });
    track(second);
    first.backend.hold = true;
    first.start();

    const prompt = `S3 ${uniq()} #0#`;
    const { id } = await site.enqueue(prompt, owner);
    await waitFor(() => first.backend.executions(prompt) === 1, { timeoutMs: 30_000, what: "the first daemon to run the job" });

    // The first daemon stops heartbeating but keeps the job: its model is
    // still working on it and nothing is released or cancelled.
    await first.stopLoop();
    const beats = first.requests.filter((r) => r.endpoint === "heartbeat" && r.status === 200);
    const lastBeat = beats[beats.length - 1];
    const stoppedAt = Date.now();
    second.start();

    await waitForOutcomes(site, [id], { timeoutMs: env.leaseMs * 3 + 30_000 });
    const secondClaim = second.events.find((e) => e.type === "claimed" && e.jobId === id);
    expect(secondClaim).toBeDefined();
    // Not before the lease lapsed: the last renewal happened after that
    // heartbeat was sent, so the lease ran at least leaseMs from then.
    expect(secondClaim.at - lastBeat.sentAt).toBeGreaterThanOrEqual(env.leaseMs);
    const record = await site.store.get(id);
    expect(record.provenance.runnerId).toBe(second.runnerId);
    expect(record.outcome.text).toContain(prompt);
    expect(second.backend.executions(prompt)).toBe(1);

    // The first daemon finally finishes and reports under its dead lease:
    // the relay refuses it, and the site keeps the second daemon's result.
    first.backend.releaseHeld();
    await waitFor(() => first.requests.some((r) => r.endpoint === "result" && r.status !== 0), {
      timeoutMs: 10_000,
      what: "the first daemon's late result",
    });
    const late = first.requests.find((r) => r.endpoint === "result");
    expect(late.status).toBe(404);
    expect(JSON.parse(late.text)).toEqual({ error: "not-found", message: "unknown job" });
    await sleep(500);
    expect(site.store.completions.get(id)).toBe(1);
    expect((await site.store.get(id)).provenance.runnerId).toBe(second.runnerId);

    recordFigures({
      scenario: "S3",
      jobs: 1,
      ms: Date.now() - started,
      leaseMs: env.leaseMs,
      stopToRequeueClaimMs: secondClaim.at - stoppedAt,
      lastRenewalToRequeueClaimMs: secondClaim.at - lastBeat.sentAt,
      siteRegrants: site.store.regrants,
      daemonErrors: [...first.errors(), ...second.errors()],
      siteErrors: site.errors,
      requests: summarize(first.requests, second.requests, site.requests),
    });
  });

  it("S4 two daemons competing: no job granted twice", async () => {
    const started = Date.now();
    const owner = `dee_${uniq()}`;
    const site = await makeSite({ owners: [owner] });
    track(site);
    const a = await pairDaemon({ owner });
    track(a);
    const b = await pairDaemon({ owner });
    track(b);

    const N = 60;
    const tag = uniq();
    const jobs = [];
    for (let i = 0; i < N; i += 1) {
      const prompt = `S4 ${tag} #${i}#`;
      jobs.push({ id: (await site.enqueue(prompt, owner)).id, prompt });
    }
    const runFrom = Date.now();
    a.start();
    b.start();
    await waitForOutcomes(site, jobs.map((j) => j.id), { timeoutMs: 120_000 });
    const runMs = Date.now() - runFrom;

    const all = [...grants(a), ...grants(b)];
    const perJob = new Map();
    for (const g of all) perJob.set(g.jobId, [...(perJob.get(g.jobId) ?? []), g]);
    const twice = [...perJob.entries()].filter(([, gs]) => gs.length > 1);
    expect(twice.map(([jobId, gs]) => `${jobId}: ${gs.map((g) => g.runnerId).join(",")}`)).toEqual([]);
    expect(perJob.size).toBe(N);
    // Both daemons really competed for the same queue.
    const byA = grants(a).length;
    const byB = grants(b).length;
    expect(byA).toBeGreaterThan(0);
    expect(byB).toBeGreaterThan(0);
    for (const job of jobs) {
      expect(a.backend.executions(job.prompt) + b.backend.executions(job.prompt)).toBe(1);
      expect(site.store.completions.get(job.id)).toBe(1);
      const record = await site.store.get(job.id);
      expect(record.provenance.runnerId).toBe(perJob.get(job.id)[0].runnerId);
    }

    recordFigures({
      scenario: "S4",
      jobs: N,
      ms: Date.now() - started,
      runMs,
      grants: { [a.runnerId]: byA, [b.runnerId]: byB },
      daemonErrors: [...a.errors(), ...b.errors()],
      siteErrors: site.errors,
      requests: summarize(a.requests, b.requests, site.requests),
    });
  });

  it("S5 a refused release is not re-offered to that runner", async () => {
    const started = Date.now();
    const carol = `carol_${uniq()}`;
    const dave = `dave_${uniq()}`;
    const site = await makeSite({ owners: [carol, dave] });
    track(site);
    // Dave's roster admits carol, so the relay routes carol's jobs to dave's
    // device. That device is in direct mode (no control plane key), so it
    // serves its owner only and refuses carol's job: release "refused".
    await mergeProjection({ rosters: [{ id: `roster_${uniq()}`, owner: dave, members: [carol] }] });
    const daves = await pairDaemon({ owner: dave });
    track(daves);
    const carols = await pairDaemon({ owner: carol });
    track(carols);
    daves.start();

    const prompt = `S5 ${uniq()} #0#`;
    const { id } = await site.enqueue(prompt, carol);
    await waitFor(() => daves.events.some((e) => e.type === "refused" && e.jobId === id), {
      timeoutMs: 20_000,
      what: "dave's daemon to refuse carol's job",
    });
    await waitFor(() => daves.requests.some((r) => r.endpoint === "release" && r.status !== 0), {
      timeoutMs: 5_000,
      what: "the refused release",
    });
    const release = daves.requests.find((r) => r.endpoint === "release");
    expect(bodyOf(release).reason).toBe("refused");
    expect(JSON.parse(release.text)).toEqual({ released: [id] });
    const refusedAt = Date.now();

    // Dave's daemon keeps heartbeating and claiming; the job stays queued and
    // is never offered to it again.
    const claimsBefore = daves.requests.filter((r) => r.endpoint === "claim").length;
    await sleep(3_000);
    const claimsDuring = daves.requests.filter((r) => r.endpoint === "claim").length - claimsBefore;
    expect(claimsDuring).toBeGreaterThanOrEqual(3);
    expect(daves.claimed(id)).toBe(1);
    // And a claim sent by hand, signed as dave's device, gets nothing either.
    const body = JSON.stringify({ protocolVersion: PROTOCOL_VERSION, runnerId: daves.runnerId, capabilities: daves.capabilities, max: 8 });
    for (let i = 0; i < 3; i += 1) {
      const res = await send({ path: "/byollm/claim", headers: daemonHeaders(daves.keys, { endpoint: "claim", runnerId: daves.runnerId, body }), body });
      expect(res.status).toBe(200);
      expect(res.body.jobs.map((j) => j.id)).not.toContain(id);
    }
    expect(daves.backend.seen).toHaveLength(0);

    // Carol's own daemon takes it.
    carols.start();
    await waitForOutcomes(site, [id], { timeoutMs: 30_000 });
    expect((await site.store.get(id)).provenance.runnerId).toBe(carols.runnerId);
    expect(daves.claimed(id)).toBe(1);
    expect(site.store.completions.get(id)).toBe(1);

    recordFigures({
      scenario: "S5",
      jobs: 1,
      ms: Date.now() - started,
      claimsAfterRefusal: claimsDuring,
      refusedToDoneMs: Date.now() - refusedAt,
      daemonErrors: [...daves.errors(), ...carols.errors()],
      siteErrors: site.errors,
      requests: summarize(daves.requests, carols.requests, site.requests),
    });
  });

  it("S6 a replayed result is answered as a duplicate", async () => {
    const started = Date.now();
    const owner = `eve_${uniq()}`;
    const site = await makeSite({ owners: [owner] });
    track(site);
    const daemon = await pairDaemon({ owner });
    track(daemon);
    daemon.start();

    const tag = uniq();
    const jobs = [];
    for (let i = 0; i < 3; i += 1) {
      const prompt = `S6 ${tag} #${i}#`;
      jobs.push({ id: (await site.enqueue(prompt, owner)).id, prompt });
    }
    await waitForOutcomes(site, jobs.map((j) => j.id), { timeoutMs: 60_000 });
    const results = daemon.requests.filter((r) => r.endpoint === "result" && r.status === 200);
    expect(results).toHaveLength(jobs.length);

    // The exact signed HTTP requests, resent byte for byte, several times
    // each, so they land on different replicas.
    let replays = 0;
    for (const original of results) {
      for (let i = 0; i < 4; i += 1) {
        const res = await send({ path: new URL(original.url).pathname, headers: original.headers, body: original.body });
        expect(res.status).toBe(200);
        expect(res.text).toBe('{"accepted":false,"duplicate":true,"state":"done"}');
        replays += 1;
      }
    }
    // The site saw each result once, and nothing about the replays reached it.
    await sleep(500);
    for (const job of jobs) {
      expect(site.store.completions.get(job.id)).toBe(1);
      expect((await site.store.get(job.id)).outcome.text).toContain(job.prompt);
    }

    recordFigures({
      scenario: "S6",
      jobs: jobs.length,
      replays,
      ms: Date.now() - started,
      daemonErrors: daemon.errors(),
      siteErrors: site.errors,
      requests: summarize(daemon.requests, site.requests),
    });
  });

  it("S7 bad signatures are refused", async () => {
    const started = Date.now();
    const owner = `fay_${uniq()}`;
    const site = await makeSite({ owners: [owner] });
    track(site);
    const daemon = await pairDaemon({ owner });
    track(daemon);
    const runnerId = daemon.runnerId;
    const stranger = generateKeys(Date.now());
    const SKEW = 120_000;

    const beat = (version = "0.1.1") =>
      JSON.stringify({
        protocolVersion: PROTOCOL_VERSION,
        runnerId,
        daemonVersion: version,
        capabilities: daemon.capabilities,
        withheld: [],
        activeLeases: [],
      });
    const stub = (jobId) => ({
      id: jobId,
      kind: "llm.generate",
      owner,
      site: site.keyId,
      audience: "team",
      sizeClass: "small",
      streaming: false,
      deadlineAt: Date.now() + 60_000,
    });
    const enqueueBody = (jobId) => JSON.stringify({ protocolVersion: PROTOCOL_VERSION, siteId: site.siteId, stub: stub(jobId) });
    const pendingPath = `/relay/site/pending?siteId=${encodeURIComponent(site.siteId)}&protocolVersion=2`;

    const badSignature = { error: "unauthorized", message: "signature check failed" };
    const unsigned = { error: "unauthorized", message: "this request is not signed" };
    const skew = (body) => {
      expect(body.error).toBe("clock-skew");
      expect(body.message).toBe("this request's timestamp is too far from the server's clock; check the machine's time and try again");
      expect(body.maxSkewMs).toBe(SKEW);
      expect(Math.abs(body.serverTime - Date.now())).toBeLessThan(10_000);
    };

    const cases = [
      {
        name: "daemon: valid heartbeat (control)",
        request: () => ({ path: "/byollm/heartbeat", body: beat(), headers: daemonHeaders(daemon.keys, { endpoint: "heartbeat", runnerId, body: beat() }) }),
        expect: (res) => expect(res.status).toBe(200),
      },
      {
        name: "daemon: tampered body",
        request: () => ({ path: "/byollm/heartbeat", body: beat("0.1.2"), headers: daemonHeaders(daemon.keys, { endpoint: "heartbeat", runnerId, body: beat() }) }),
        expect: (res) => expect([res.status, res.body]).toEqual([401, badSignature]),
      },
      {
        name: "daemon: wrong key",
        request: () => ({ path: "/byollm/heartbeat", body: beat(), headers: daemonHeaders(stranger, { endpoint: "heartbeat", runnerId, body: beat() }) }),
        expect: (res) => expect([res.status, res.body]).toEqual([401, badSignature]),
      },
      {
        name: "daemon: signed for another endpoint",
        request: () => ({ path: "/byollm/heartbeat", body: beat(), headers: daemonHeaders(daemon.keys, { endpoint: "claim", runnerId, body: beat() }) }),
        expect: (res) => expect([res.status, res.body]).toEqual([401, badSignature]),
      },
      {
        name: "daemon: stale timestamp (past)",
        request: () => ({
          path: "/byollm/heartbeat",
          body: beat(),
          headers: daemonHeaders(daemon.keys, { endpoint: "heartbeat", runnerId, body: beat(), issuedAt: Date.now() - SKEW - 5_000 }),
        }),
        expect: (res) => {
          expect(res.status).toBe(401);
          skew(res.body);
        },
      },
      {
        name: "daemon: stale timestamp (future)",
        request: () => ({
          path: "/byollm/heartbeat",
          body: beat(),
          headers: daemonHeaders(daemon.keys, { endpoint: "heartbeat", runnerId, body: beat(), issuedAt: Date.now() + SKEW + 5_000 }),
        }),
        expect: (res) => {
          expect(res.status).toBe(401);
          skew(res.body);
        },
      },
      {
        name: "daemon: unsigned",
        request: () => ({ path: "/byollm/heartbeat", body: beat(), headers: { "content-type": "application/json" } }),
        expect: (res) => expect([res.status, res.body]).toEqual([401, unsigned]),
      },
      {
        name: "site: valid enqueue (control)",
        request: () => {
          const body = enqueueBody(`s7_ok_${uniq()}`);
          return { path: "/relay/site/enqueue", body, headers: siteHeaders(site.keys, { endpoint: "enqueue", siteId: site.siteId, body }) };
        },
        expect: (res) => expect([res.status, res.body.state]).toEqual([200, "queued"]),
      },
      {
        name: "site: tampered enqueue",
        request: () => {
          const signed = enqueueBody(`s7_a_${uniq()}`);
          return {
            path: "/relay/site/enqueue",
            body: signed.replace('"small"', '"large"'),
            headers: siteHeaders(site.keys, { endpoint: "enqueue", siteId: site.siteId, body: signed }),
          };
        },
        expect: (res) => expect([res.status, res.body]).toEqual([401, badSignature]),
      },
      {
        name: "site: enqueue signed with a stranger's key",
        request: () => {
          const body = enqueueBody(`s7_b_${uniq()}`);
          return { path: "/relay/site/enqueue", body, headers: siteHeaders(stranger, { endpoint: "enqueue", siteId: site.siteId, body }) };
        },
        expect: (res) => expect([res.status, res.body]).toEqual([401, badSignature]),
      },
      {
        name: "site: stale enqueue",
        request: () => {
          const body = enqueueBody(`s7_c_${uniq()}`);
          return {
            path: "/relay/site/enqueue",
            body,
            headers: siteHeaders(site.keys, { endpoint: "enqueue", siteId: site.siteId, body, issuedAt: Date.now() - SKEW - 5_000 }),
          };
        },
        expect: (res) => {
          expect(res.status).toBe(401);
          skew(res.body);
        },
      },
      {
        name: "site: pending read with a stranger's key",
        request: () => ({ path: pendingPath, method: "GET", headers: siteHeaders(stranger, { endpoint: "pending", siteId: site.siteId, body: "" }) }),
        expect: (res) => expect([res.status, res.body]).toEqual([401, badSignature]),
      },
      {
        name: "site: stale pending read",
        request: () => ({
          path: pendingPath,
          method: "GET",
          headers: siteHeaders(site.keys, { endpoint: "pending", siteId: site.siteId, body: "", issuedAt: Date.now() + SKEW + 5_000 }),
        }),
        expect: (res) => {
          expect(res.status).toBe(401);
          skew(res.body);
        },
      },
    ];

    const REPEAT = 3; // land each case on several replicas
    let sent = 0;
    for (const c of cases) {
      for (let i = 0; i < REPEAT; i += 1) {
        const res = await send(c.request());
        sent += 1;
        try {
          c.expect(res);
        } catch (error) {
          throw new Error(`${c.name}: got ${res.status} ${res.text}: ${error.message}`);
        }
      }
    }
    // The refused enqueues created nothing the daemon could be handed: only
    // the control enqueues are claimable.
    const claimBody = JSON.stringify({ protocolVersion: PROTOCOL_VERSION, runnerId, capabilities: daemon.capabilities, max: 64 });
    const claimed = await send({ path: "/byollm/claim", body: claimBody, headers: daemonHeaders(daemon.keys, { endpoint: "claim", runnerId, body: claimBody }) });
    expect(claimed.status).toBe(200);
    const ids = claimed.body.jobs.map((j) => j.id);
    expect(ids.every((jobId) => jobId.startsWith("s7_ok_"))).toBe(true);

    recordFigures({
      scenario: "S7",
      cases: cases.length,
      requests: sent,
      ms: Date.now() - started,
      controlJobsClaimable: ids.length,
    });
  });


  // -------------------------------------------------------------------------
  // Approval by user code (admin API). The test plays the person and the
  // operator's approval page: it knows only the code the daemon shows.

  /** Devices of the projection a replica serves that carry this identity. */
  async function devicesOf(device, via = 0) {
    const got = await adminCall(via, "GET", "/projection");
    expect(got.status).toBe(200);
    return got.body.devices.filter((d) => d.device.identity === device.identity);
  }
  const codePath = (code, suffix = "") => `/pairings/${encodeURIComponent(code)}${suffix}`;
  function begin(options) {
    return beginPairing(options).then((pairing) => {
      cleanups.push(() => pairing.dispose());
      return pairing;
    });
  }

  if (env.target === "go" && env.replicas >= 3) {
    it("P1 approved knowing only the user code: started on one replica, shown on a second, approved on a third, then runs a job", async () => {
      const started = Date.now();
      const owner = `pia_${uniq()}`;
      const site = await makeSite({ owners: [owner] });
      track(site);
      const pairing = await begin({ startVia: 0, label: "pia's laptop" });
      const shownToPerson = await pairing.codeShown;
      const code = shownToPerson.userCode;
      expect(code).toMatch(/^[0-9A-HJKMNP-TV-Z]{4}-[0-9A-HJKMNP-TV-Z]{4}$/);
      expect(pairing.requests.find((r) => r.body.includes('"action":"start"')).url.startsWith(env.planes[0])).toBe(true);
      await pairing.pendingSeen();

      // The approval page looks the code up on replica 1 ...
      const shown = await adminCall(1, "GET", codePath(code));
      expect(shown.status).toBe(200);
      // ... and sees the identity the daemon generated, without being told it.
      expect(shown.body.device).toEqual(pairing.device);
      expect(shown.body.keyId).toBe(keyId(pairing.device.identity));
      expect(shown.body).toMatchObject({ userCode: code, status: "pending", label: "pia's laptop", platform: process.platform });
      expect(shown.body.expiresAt).toBe(shownToPerson.expiresAt);
      expect(shown.body.capabilities).toEqual(pairing.capabilities);
      expect(shown.text).not.toContain(pairing.requests.find((r) => r.body.includes('"action":"poll"')).body.match(/"deviceCode":"([^"]+)"/)[1]);

      // ... and the person approves on replica 2.
      const approved = await adminCall(2, "POST", codePath(code, "/approve"), { owner });
      expect(approved.status).toBe(200);
      expect(approved.body).toMatchObject({ userCode: code, owner, keyId: shown.body.keyId });
      expect(typeof approved.body.version).toBe("number");

      const result = await pairing.result;
      expect(result.ok).toBe(true);
      expect(result.pairing.runnerId).toBe(approved.body.runnerId);
      expect(result.pairing.owner).toBe(owner);
      expect(Object.keys(result.pairing.sites)).toEqual([site.keyId]);
      const paired = Date.now();
      for (const via of [0, 1, 2]) {
        expect(await devicesOf(pairing.device, via)).toEqual([{ owner, runnerId: approved.body.runnerId, device: pairing.device }]);
      }
      // The daemon collected the code: it is spent.
      expect((await adminCall(0, "GET", codePath(code))).status).toBe(404);

      const daemon = await runnerFor(pairing, result);
      track(daemon);
      daemon.start();
      const prompt = `P1 ${uniq()}`;
      const handle = await site.enqueue(prompt, owner);
      await waitForOutcomes(site, [handle.id], { timeoutMs: 60_000 });
      const record = await site.store.get(handle.id);
      expect(record.outcome.text).toContain(prompt);
      expect(record.provenance.runnerId).toBe(approved.body.runnerId);

      recordFigures({
        scenario: "P1",
        pairMs: paired - started,
        jobMs: Date.now() - paired,
        polls: pairing.polls,
        runnerId: approved.body.runnerId,
        requests: summarize(pairing.requests, site.requests),
      });
    });

    it("P2 an expired code cannot be shown or approved, and the daemon gives up", async () => {
      const owner = `pat_${uniq()}`;
      const pairing = await begin({});
      const { userCode: code } = await pairing.codeShown;
      await pairing.pendingSeen();
      expect((await adminCall(0, "GET", codePath(code))).status).toBe(200);
      await pairing.holdPolls();
      await expireCode(code, 0);
      const shown = await adminCall(1, "GET", codePath(code));
      expect(shown.status).toBe(404);
      expect(shown.body.error).toBe("not-found");
      const approve = await adminCall(2, "POST", codePath(code, "/approve"), { owner });
      expect(approve.status).toBe(409);
      expect(approve.body).toMatchObject({ error: "conflict" });
      expect(approve.body.message).toContain("expired");
      pairing.releasePolls();
      const result = await pairing.result;
      expect(result).toMatchObject({ ok: false, reason: "expired" });
      expect(await devicesOf(pairing.device)).toEqual([]);
      recordFigures({ scenario: "P2", show: shown.status, approve: approve.status, daemon: result.reason });
    });

    it("P3 a denied code: the daemon's next poll is expired and it gives up cleanly", async () => {
      const owner = `pud_${uniq()}`;
      const pairing = await begin({});
      const { userCode: code } = await pairing.codeShown;
      await pairing.pendingSeen();
      const denied = await adminCall(1, "POST", codePath(code, "/deny"));
      expect(denied.status).toBe(200);
      expect(denied.body).toEqual({ status: "denied" });
      const result = await pairing.result;
      expect(result).toMatchObject({ ok: false, reason: "expired" });
      const polls = pairing.requests.filter((r) => r.body.includes('"action":"poll"'));
      expect(polls.at(-1).text).toBe('{"status":"expired"}');
      expect((await adminCall(2, "GET", codePath(code))).status).toBe(404);
      expect((await adminCall(0, "POST", codePath(code, "/approve"), { owner })).status).toBe(404);
      expect(await devicesOf(pairing.device)).toEqual([]);
      recordFigures({ scenario: "P3", deny: denied.status, daemon: result.reason, polls: polls.length });
    });

    it("P4 a code approved twice: the second approval is a conflict", async () => {
      const owner = `pip_${uniq()}`;
      const site = await makeSite({ owners: [owner] });
      track(site);
      const pairing = await begin({});
      const { userCode: code } = await pairing.codeShown;
      await pairing.pendingSeen();
      // Keep the daemon from collecting the approval in between.
      await pairing.holdPolls();
      const first = await adminCall(0, "POST", codePath(code, "/approve"), { owner });
      expect(first.status).toBe(200);
      const again = await adminCall(1, "POST", codePath(code, "/approve"), { owner });
      expect(again.status).toBe(409);
      expect(again.body.error).toBe("conflict");
      expect(again.body.message).toContain("approved already");
      const otherOwner = await adminCall(2, "POST", codePath(code, "/approve"), { owner: `mallory_${uniq()}`, runnerId: `r_${uniq()}` });
      expect(otherOwner.status).toBe(409);
      const shown = await adminCall(2, "GET", codePath(code));
      expect(shown.body).toMatchObject({ status: "approved", runnerId: first.body.runnerId });
      expect(await devicesOf(pairing.device)).toEqual([{ owner, runnerId: first.body.runnerId, device: pairing.device }]);
      pairing.releasePolls();
      const result = await pairing.result;
      expect(result.ok).toBe(true);
      expect(result.pairing.runnerId).toBe(first.body.runnerId);
      expect((await adminCall(0, "POST", codePath(code, "/approve"), { owner })).status).toBe(404);
      recordFigures({ scenario: "P4", first: first.status, second: again.status, otherOwner: otherOwner.status });
    });

    it("P5 an approval racing the code's expiry is all or nothing", async () => {
      const owner = `pax_${uniq()}`;
      const site = await makeSite({ owners: [owner] });
      track(site);
      // One approval at a random moment around the expiry, and one surely
      // inside the window whose daemon polls only after it: both must leave
      // the store whole.
      async function race(windowMs, delayMs) {
        const pairing = await begin({});
        const { userCode: code } = await pairing.codeShown;
        await pairing.pendingSeen();
        await pairing.holdPolls();
        await expireCode(code, windowMs);
        await sleep(delayMs);
        const approve = await adminCall(1, "POST", codePath(code, "/approve"), { owner });
        // Let the expiry pass before the daemon polls again.
        await waitFor(async () => (await adminCall(0, "GET", codePath(code))).status === 404, { what: "the code to expire" });
        pairing.releasePolls();
        const result = await pairing.result;
        const devices = await devicesOf(pairing.device);
        expect(result).toMatchObject({ ok: false, reason: "expired" });
        if (approve.status !== 200) {
          // Lost: nothing was written.
          expect([404, 409]).toContain(approve.status);
          expect(devices).toEqual([]);
          return { approve: approve.status, repaired: null };
        }
        // Won: the record is whole, though the daemon's poll came after the
        // expiry. Pairing again with the same keys is approved at once.
        expect(devices).toEqual([{ owner, runnerId: approve.body.runnerId, device: pairing.device }]);
        const again = await begin({ keysOf: pairing });
        const second = await again.result;
        expect(second.ok).toBe(true);
        expect(second.pairing.runnerId).toBe(approve.body.runnerId);
        expect(second.pairing.owner).toBe(owner);
        return { approve: approve.status, repaired: second.pairing.runnerId, pollsToApproval: again.polls };
      }
      const inside = await race(400, 0);
      expect(inside.approve).toBe(200);
      const windowMs = 30;
      const random = await race(windowMs, Math.floor(Math.random() * 2 * windowMs));
      recordFigures({ scenario: "P5", inside, random });
    });

    it("P6 lower-case and padded codes are the same code", async () => {
      const owner = `pal_${uniq()}`;
      const pairing = await begin({});
      const { userCode: code } = await pairing.codeShown;
      await pairing.pendingSeen();
      const spellings = [code.toLowerCase(), `  ${code}  `, `\t${code.toLowerCase()} `];
      for (const [i, spelled] of spellings.entries()) {
        const shown = await adminCall(i % 3, "GET", codePath(spelled));
        expect(shown.status).toBe(200);
        expect(shown.body.userCode).toBe(code);
        expect(shown.body.device).toEqual(pairing.device);
      }
      const approved = await adminCall(2, "POST", codePath(` ${code.toLowerCase()}  `, "/approve"), { owner });
      expect(approved.status).toBe(200);
      expect(approved.body.userCode).toBe(code);
      const result = await pairing.result;
      expect(result.ok).toBe(true);
      expect(result.pairing.runnerId).toBe(approved.body.runnerId);
      recordFigures({ scenario: "P6", spellings: spellings.length + 1 });
    });
  }

  if (env.replicas >= 2) {
    it("S8 a replica killed with SIGKILL mid-run: every job completes exactly once", async () => {
      const started = Date.now();
      const owner = `gus_${uniq()}`;
      const site = await makeSite({ owners: [owner] });
      track(site);
      const a = await pairDaemon({ owner });
      track(a);
      const b = await pairDaemon({ owner });
      track(b);
      a.start();
      b.start();

      const N = 60;
      const tag = uniq();
      const jobs = [];
      for (let i = 0; i < N; i += 1) {
        const prompt = `S8 ${tag} #${i}#`;
        jobs.push({ id: (await site.enqueue(prompt, owner)).id, prompt });
      }
      // Kill once a quarter of the work is done and the rest is in motion.
      await waitFor(() => jobs.filter((j) => site.store.completions.get(j.id) === 1).length >= N / 4, {
        timeoutMs: 60_000,
        what: "a quarter of the jobs to finish",
      });
      const before = await proxyStats();
      const live = before.replicas.filter((r) => r.live);
      const victim = live[Math.floor(Math.random() * live.length)];
      const doneAtKill = jobs.filter((j) => site.store.completions.get(j.id) === 1).length;
      const killed = await killReplica(victim.index);
      const killedAt = Date.now();

      await waitForOutcomes(site, jobs.map((j) => j.id), { timeoutMs: 150_000 });
      const finished = Date.now();
      const after = await proxyStats();

      // Exactly once at the site, for every job.
      for (const job of jobs) {
        expect(site.store.completions.get(job.id)).toBe(1);
        const record = await site.store.get(job.id);
        expect(record.outcome.text).toContain(job.prompt);
      }
      // The daemons executed each job once, except where a result report was
      // lost with the replica (a daemon reports once and the lease then
      // lapses): such a job may legitimately run again, and only then.
      const lostReports = new Map();
      for (const r of [...a.requests, ...b.requests]) {
        if (r.endpoint !== "result") continue;
        if (r.error !== undefined || r.proxyError || r.status >= 500) {
          const jobId = bodyOf(r).jobId;
          lostReports.set(jobId, (lostReports.get(jobId) ?? 0) + 1);
        }
      }
      let executions = 0;
      const extra = [];
      for (const job of jobs) {
        const n = a.backend.executions(job.prompt) + b.backend.executions(job.prompt);
        executions += n;
        expect(n).toBeGreaterThanOrEqual(1);
        if (n > 1) extra.push(job.id);
        expect(n - 1).toBeLessThanOrEqual(lostReports.get(job.id) ?? 0);
      }
      // The kill took: the victim served traffic before, none after.
      expect(victim.requests).toBeGreaterThan(0);
      const victimAfter = after.replicas.find((r) => r.index === victim.index);
      expect(victimAfter.live).toBe(false);
      expect(victimAfter.requests).toBe(killed.requestsAtKill);
      const survivorsServed = after.replicas
        .filter((r) => r.index !== victim.index)
        .reduce((n, r) => n + r.requests - before.replicas.find((x) => x.index === r.index).requests, 0);
      expect(survivorsServed).toBeGreaterThan(0);

      recordFigures({
        scenario: "S8",
        jobs: N,
        ms: finished - started,
        killedReplica: victim.index,
        doneAtKill,
        inflightAtKill: killed.inflightAtKill,
        killToAllDoneMs: finished - killedAt,
        executions,
        reExecuted: extra.length,
        lostResultReports: [...lostReports.values()].reduce((x, y) => x + y, 0),
        siteRegrants: site.store.regrants,
        daemonErrors: [...a.errors(), ...b.errors()].length,
        daemonErrorSample: [...a.errors(), ...b.errors()].slice(0, 5),
        siteErrors: site.errors.length,
        siteErrorSample: site.errors.slice(0, 5),
        requests: summarize(a.requests, b.requests, site.requests),
        proxy: after.replicas.map((r) => ({ index: r.index, live: r.live, requests: r.requests, failures: r.failures })),
      });
    });
  }

  if (env.target === "go" && env.replicas >= 2) {
    it("P7 a code minted on a replica killed before approval is approved through the survivors", async () => {
      const started = Date.now();
      const owner = `pok_${uniq()}`;
      const site = await makeSite({ owners: [owner] });
      track(site);
      const live = await liveReplicas();
      expect(live.length).toBeGreaterThanOrEqual(2);
      const victim = live[Math.floor(Math.random() * live.length)];
      const survivors = live.filter((i) => i !== victim);
      const pairing = await begin({ startVia: victim });
      const { userCode: code } = await pairing.codeShown;
      await pairing.pendingSeen();
      await pairing.holdPolls();
      await killReplica(victim);
      const shown = await adminCall(survivors[0], "GET", codePath(code));
      expect(shown.status).toBe(200);
      expect(shown.body.device).toEqual(pairing.device);
      const approved = await adminCall(survivors.at(-1), "POST", codePath(code, "/approve"), { owner });
      expect(approved.status).toBe(200);
      pairing.releasePolls();
      const result = await pairing.result;
      expect(result.ok).toBe(true);
      expect(result.pairing.runnerId).toBe(approved.body.runnerId);
      expect(Object.keys(result.pairing.sites)).toEqual([site.keyId]);
      const daemon = await runnerFor(pairing, result);
      track(daemon);
      daemon.start();
      const prompt = `P7 ${uniq()}`;
      const handle = await site.enqueue(prompt, owner);
      await waitForOutcomes(site, [handle.id], { timeoutMs: 60_000 });
      expect((await site.store.get(handle.id)).provenance.runnerId).toBe(approved.body.runnerId);
      recordFigures({ scenario: "P7", killed: victim, survivors, ms: Date.now() - started });
    });
  }
});
