// A remote grant authority for the grant scenarios: the published
// @byollm/control-plane engine (ControlPlane + MemoryPolicyStore, signing
// with a key generated here) behind the HTTP contract the relay speaks in
// RELAY_GRANT_AUTHORITY_URL mode (README, "Grants"):
//
//   POST /author-grant  {job, siteId, siteKey, purpose?, owner, runnerId, capabilities}
//                       -> {granted} | {declined: {permanent, reason}}
//   POST /satisfiable   {siteId, owner, purpose?, kind} -> {verdict}
//
// The relay's `owner` at enqueue is the job's owner, which the engine calls
// `user`: that adapter is the one line in /satisfiable below.
//
// A second listener is the test's lever (never reachable by the relay):
//   POST /policy  {op, ...args}   MemoryPolicyStore calls: consent, pause,
//                                 resume, revoke, addMember, removeMember
//   POST /mode    {mode}          "normal" | "aged" (grants issued 121 s ago)
//                                 | "replay" (the first grant ever issued for
//                                 the job, again)
//   POST /stop, POST /start       close / reopen the service listener
//   GET  /stats                   calls per job id and runner
//
// Started by grants_peers_test.go, which reads one JSON line from stdout:
// {"url", "admin", "publicKey"}.

import { createServer } from "node:http";
import { generateKeys } from "@byollm/protocol";
import { ControlPlane, MemoryPolicyStore, keypairSigner } from "@byollm/control-plane";

const keys = generateKeys();
const signer = keypairSigner(keys);
const store = new MemoryPolicyStore();
const plane = new ControlPlane({ store, signer });
// The same engine and key, with a clock two minutes and a second behind:
// its grants are genuine and too old for any daemon (GRANT_MAX_AGE_MS 120 s).
const agedPlane = new ControlPlane({ store, signer, now: () => Date.now() - 121_000 });

let mode = "normal";
const firstGrant = new Map(); // jobId -> the first grant issued for it
const calls = []; // {op, jobId?, runnerId?, owner, outcome}

async function readJSON(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
}

function reply(res, status, body) {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify(body));
}

async function service(req, res) {
  try {
    const input = await readJSON(req);
    if (req.method === "POST" && req.url === "/author-grant") {
      const args = {
        job: input.job,
        siteId: input.siteId,
        siteKey: input.siteKey,
        owner: input.owner,
        capabilities: input.capabilities,
        ...(input.purpose === undefined ? {} : { purpose: input.purpose }),
      };
      let outcome = await (mode === "aged" ? agedPlane : plane).authorGrant(args);
      if (outcome.granted !== undefined) {
        if (!firstGrant.has(input.job.id)) firstGrant.set(input.job.id, outcome.granted);
        if (mode === "replay") outcome = { granted: firstGrant.get(input.job.id) };
      }
      calls.push({
        op: "author",
        jobId: input.job.id,
        runnerId: input.runnerId,
        owner: input.owner,
        outcome: outcome.granted !== undefined ? "granted" : outcome.declined.reason,
      });
      return reply(res, 200, outcome.granted !== undefined ? { granted: outcome.granted } : { declined: outcome.declined });
    }
    if (req.method === "POST" && req.url === "/satisfiable") {
      const answer = await plane.satisfiable({
        siteId: input.siteId,
        user: input.owner, // the relay's owner is the engine's user
        purpose: input.purpose,
        kind: input.kind,
      });
      calls.push({ op: "satisfiable", owner: input.owner, outcome: answer.verdict });
      return reply(res, 200, { verdict: answer.verdict });
    }
    reply(res, 404, { error: "not-found" });
  } catch (error) {
    reply(res, 500, { error: String(error) });
  }
}

async function admin(req, res) {
  try {
    if (req.method === "GET" && req.url === "/stats") return reply(res, 200, { mode, calls, listening: server.listening });
    const input = req.method === "POST" ? await readJSON(req).catch(() => ({})) : {};
    switch (req.url) {
      case "/policy": {
        const { op, ...args } = input;
        if (!["consent", "pause", "resume", "revoke", "addMember", "removeMember"].includes(op)) {
          return reply(res, 400, { error: `unknown op ${op}` });
        }
        store[op](args);
        return reply(res, 200, { ok: true });
      }
      case "/mode":
        mode = input.mode;
        return reply(res, 200, { mode });
      case "/stop":
        await stop();
        return reply(res, 200, { listening: server.listening });
      case "/start":
        await listen(port);
        return reply(res, 200, { listening: server.listening });
    }
    reply(res, 404, { error: "not-found" });
  } catch (error) {
    reply(res, 500, { error: String(error) });
  }
}

const server = createServer(service);
const adminServer = createServer(admin);

function listen(p) {
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(p, "127.0.0.1", () => {
      server.off("error", reject);
      resolve(server.address().port);
    });
  });
}

function stop() {
  // A stopped authority refuses connections: close the listener and every
  // kept-alive connection the relays hold to it.
  return new Promise((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections();
  });
}

const port = await listen(0);
await new Promise((resolve) => adminServer.listen(0, "127.0.0.1", resolve));
process.stdout.write(
  JSON.stringify({
    url: `http://127.0.0.1:${port}`,
    admin: `http://127.0.0.1:${adminServer.address().port}`,
    publicKey: plane.publicKey,
  }) + "\n",
);
process.on("SIGTERM", () => process.exit(0));
