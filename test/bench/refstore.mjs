// The reference relay's in-memory store (RelayState of @byollm/relay@0.1.1)
// under the same scenarios as storebench: claim latency with N jobs queued on
// routes the claimer cannot take and with N claimable, a sweep of N jobs with
// 1% due, and heap bytes per queued and per finished job.
//
//   node --expose-gc refstore.mjs <reference dir> [sizes] [claims] [sweepJobs] [memJobs]
//
// Prints one JSON object shaped like storebench's result.

import { pathToFileURL } from "node:url";
import { join } from "node:path";
import { randomUUID } from "node:crypto";

const [refDir, sizesArg = "1000,10000,100000", claimsArg = "200", sweepArg = "100000", memArg = "2000"] = process.argv.slice(2);
const relay = await import(pathToFileURL(join(refDir, "node_modules/@byollm/relay/dist/index.js")).href);
const protocol = await import(pathToFileURL(join(refDir, "node_modules/@byollm/protocol/dist/index.js")).href);
const { RelayState, routeKey } = relay;

const sizes = sizesArg.split(",").map(Number);
const claims = Number(claimsArg);
const sweepJobs = Number(sweepArg);
const memJobs = Number(memArg);

let clock = Date.now();
const fresh = () => new RelayState({ now: () => clock });
const site = protocol.generateKeys(Date.now());
const device = protocol.generateKeys(Date.now());
const devicePublic = { identity: device.identityPublic, encryption: device.encryptionPublic, encryptionSig: device.encryptionSig };
const siteKeyId = protocol.keyId(site.identityPublic);

const stub = (owner, ttlMs) => ({
  id: randomUUID(), kind: "llm.generate", owner, site: siteKeyId, audience: "private",
  sizeClass: "small", streaming: false, deadlineAt: clock + ttlMs,
});

async function enqueueMany(state, siteId, owner, n, ttlMs) {
  for (let i = 0; i < n; i++) {
    const s = stub(owner, ttlMs);
    await state.enqueue({ id: s.id, siteId, stub: s });
  }
}

const claimInput = (siteId) => ({
  runnerId: "bench-runner", owner: "me", device: devicePublic,
  routes: new Set([routeKey(siteId, "me")]), kinds: new Set(["llm.generate"]), max: 1, leaseMs: 60000,
});

const ms = (ns) => Number(ns) / 1e6;
function timing(queued, lat, extra = {}) {
  lat.sort((a, b) => a - b);
  const q = (p) => lat[Math.min(lat.length - 1, Math.floor(p * lat.length))];
  return { queued, ops: lat.length, p50Ms: round(q(0.5)), p99Ms: round(q(0.99)), maxMs: round(lat[lat.length - 1]), ...extra };
}
const round = (x) => Math.round(x * 1000) / 1000;

async function timeClaims(state, queued, n, claimable) {
  const lat = [];
  let granted = 0;
  const input = claimInput("my-site");
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint();
    const got = await state.claim(input);
    lat.push(ms(process.hrtime.bigint() - t0));
    granted += got.length;
    if (claimable && got.length !== 1) throw new Error(`claim with ${queued} claimable granted ${got.length}`);
    if (!claimable && got.length !== 0) throw new Error(`claim with no route granted ${got.length}`);
    if (got.length > 0) {
      await state.releaseLeases({ runnerId: input.runnerId, leases: got.map((g) => ({ jobId: g.id, leaseId: g.lease.id })), reason: "shutdown" });
    }
  }
  return timing(queued, lat, { granted });
}

function heap() {
  globalThis.gc?.();
  globalThis.gc?.();
  // Strings made from Buffers (base64 ciphertext) can live outside the V8
  // heap as external strings; count both.
  const m = process.memoryUsage();
  return m.heapUsed + m.external;
}

const result = { backend: "reference RelayState (in-process, Node " + process.version + ")", claimBlocked: [], claimClaimable: [] };

// Claims with N queued on a route the claimer cannot take.
{
  const state = fresh();
  const before = heap();
  let have = 0;
  for (const n of sizes) {
    await enqueueMany(state, "blocked-site", "other-owner", n - have, 3600000);
    have = n;
    if (n === sizes[sizes.length - 1]) result.memPerQueuedJobBytes = round((heap() - before) / n);
    result.claimBlocked.push(await timeClaims(state, n, n >= 100000 ? Math.min(claims, 100) : claims, false));
  }
}

// Claims with N claimable.
{
  const state = fresh();
  let have = 0;
  for (const n of sizes) {
    await enqueueMany(state, "my-site", "me", n - have, 3600000);
    have = n;
    result.claimClaimable.push(await timeClaims(state, n, n >= 100000 ? Math.min(claims, 100) : claims, true));
  }
}

// Sweep of N jobs, 1% due.
{
  const state = fresh();
  const due = Math.floor(sweepJobs / 100);
  await enqueueMany(state, "sweep-site", "me", sweepJobs - due, 3600000);
  await enqueueMany(state, "sweep-site", "me", due, 60000);
  clock += 120000;
  const t0 = process.hrtime.bigint();
  await state.sweep();
  const wall = ms(process.hrtime.bigint() - t0);
  const left = (await state.jobs()).length;
  if (left !== sweepJobs - due) throw new Error(`sweep left ${left} jobs, want ${sweepJobs - due}`);
  result.sweep = { queued: sweepJobs, ops: 1, p50Ms: round(wall), p99Ms: round(wall), maxMs: round(wall), wallMs: round(wall), settled: due };
  clock -= 120000;
}

// Heap per finished job, with envelopes the size loadgen's are.
{
  const state = fresh();
  const before = heap();
  await enqueueMany(state, "mem-site", "me", memJobs, 3600000);
  const input = claimInput("mem-site");
  const prompt = "x".repeat(256);
  let envBytes = 0;
  for (let i = 0; i < memJobs; i++) {
    const [job] = await state.claim(input);
    const deadlineAt = Date.now() + 86400000;
    const payload = await protocol.seal({
      plaintext: JSON.stringify({ prompt }), senderKeys: site, recipientEncryptionPublic: device.encryptionPublic,
      context: { jobId: job.id, senderKeyId: siteKeyId, recipientKeyId: protocol.keyId(device.identityPublic), deadlineAt, direction: "payload" },
    });
    const resultEnv = await protocol.seal({
      plaintext: JSON.stringify({ outcome: { outcome: "ok", text: "sha256:" + "0".repeat(64) }, ran: { model: "loadgen", backendClass: "http", durationMs: 0, stop: "end", stopReported: true } }),
      senderKeys: device, recipientEncryptionPublic: site.encryptionPublic,
      context: { jobId: job.id, senderKeyId: protocol.keyId(device.identityPublic), recipientKeyId: siteKeyId, deadlineAt, direction: "result" },
    });
    envBytes = JSON.stringify(payload).length + JSON.stringify(resultEnv).length;
    await state.seal({ jobId: job.id, siteId: "mem-site", envelope: payload });
    await state.takePayload({ jobId: job.id, runnerId: input.runnerId, leaseId: job.lease.id });
    const done = await state.complete({ jobId: job.id, runnerId: input.runnerId, leaseId: job.lease.id, envelope: resultEnv, disposition: "ok" });
    if (!done.accepted) throw new Error("complete refused");
  }
  result.memPerFinishedJobBytes = round((heap() - before) / memJobs);
  result.finishedJobEnvelopeBytes = envBytes;
}

process.stdout.write(JSON.stringify(result, null, 2) + "\n");
