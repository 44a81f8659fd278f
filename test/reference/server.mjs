// Hosts the reference relay (@byollm/relay@0.1.1) over node:http so the Go
// tools (loadgen, benchmarks, real-peer tests) can drive the original exactly
// as they drive the Go relay: same environment variables, same projection
// admin interface on a second port.
//
// The reference package has no server of its own; it exposes
// Relay#handle(Request) -> Response. This file adapts node:http to that and
// adds what a deployment adds around it: a projection admin plane and a
// background sweep timer.
//
// Environment (all optional):
//   RELAY_LISTEN            host:port for the relay planes    (default 127.0.0.1:8080; port 0 = any)
//   RELAY_ADMIN_LISTEN      host:port for the admin plane     (default 127.0.0.1:8081; port 0 = any)
//   RELAY_ADMIN_TOKEN       bearer token for the admin plane  (admin answers 401 to everything when unset)
//   RELAY_LEASE_MS          leaseMs                            (default 60000)
//   RELAY_VERIFICATION_URL  verificationUrl for device-code pairing (default: not offered)
//   RELAY_BASE_PATH         basePath                           (default /byollm)
//   RELAY_SWEEP_MS          background sweep interval, 0 = off (default 1000)
//   RELAY_DEBUG             "1" serves /debug
//   RELAY_UPDATE_OFFER      updateOffer
//   RELAY_DAEMON_FLOOR      daemonFloor
//   RELAY_FIXTURE_FILE      initial projection (RelayFixture JSON file)
//
// On start it prints one JSON line to stdout naming the bound addresses:
//   {"ready":true,"listen":"127.0.0.1:41234","admin":"127.0.0.1:41235","pid":123}
// so a harness can start it with port 0 and read where it landed.
//
// Admin plane (Authorization: Bearer $RELAY_ADMIN_TOKEN, else 401):
//   GET  /projection        the current fixture as last accepted
//   PUT  /projection        replace the whole projection; body is a RelayFixture
//   POST /projection/merge  upsert: sites by siteId, consents by owner+siteId,
//                           devices by runnerId, rosters by id, revoked by
//                           owner+siteId; absent arrays are left alone
// Both writes validate through relay.project(); a bad fixture answers
// 400 {"error":"bad-request","message":<zod message>} and keeps the old one.
// Success answers 200 with the counts of each array.

import http from "node:http";
import { readFileSync } from "node:fs";
import { timingSafeEqual } from "node:crypto";
import { Relay, EMPTY_FIXTURE } from "@byollm/relay";

const env = process.env;

function parseListen(value, fallback) {
  const text = value === undefined || value === "" ? fallback : value;
  const at = text.lastIndexOf(":");
  if (at < 0) throw new Error(`listen address ${JSON.stringify(text)} is not host:port`);
  const host = text.slice(0, at).replace(/^\[|\]$/g, "") || "0.0.0.0";
  const port = Number(text.slice(at + 1));
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new Error(`listen address ${JSON.stringify(text)} has no valid port`);
  }
  return { host, port };
}

function positiveInt(name, fallback) {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || n < 0) throw new Error(`${name}=${raw} is not a non-negative integer`);
  return n;
}

const listen = parseListen(env.RELAY_LISTEN, "127.0.0.1:8080");
const adminListen = parseListen(env.RELAY_ADMIN_LISTEN, "127.0.0.1:8081");
const adminToken = env.RELAY_ADMIN_TOKEN ?? "";
const sweepMs = positiveInt("RELAY_SWEEP_MS", 1000);

// The fixture as last accepted, kept here because Projection holds its parsed
// copy privately and merge needs something to merge into.
let fixture = structuredClone(EMPTY_FIXTURE);
if (env.RELAY_FIXTURE_FILE) {
  fixture = JSON.parse(readFileSync(env.RELAY_FIXTURE_FILE, "utf8"));
}

const options = {
  fixture,
  leaseMs: positiveInt("RELAY_LEASE_MS", 60000),
  ...(env.RELAY_VERIFICATION_URL ? { verificationUrl: env.RELAY_VERIFICATION_URL } : {}),
  ...(env.RELAY_BASE_PATH ? { basePath: env.RELAY_BASE_PATH } : {}),
  ...(env.RELAY_DEBUG === "1" ? { debug: true } : {}),
  ...(env.RELAY_UPDATE_OFFER ? { updateOffer: env.RELAY_UPDATE_OFFER } : {}),
  ...(env.RELAY_DAEMON_FLOOR ? { daemonFloor: env.RELAY_DAEMON_FLOOR } : {}),
};
const relay = new Relay(options);

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

function sendJson(res, status, value) {
  const body = JSON.stringify(value);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
}

// ---- relay planes -------------------------------------------------------

function toRequest(req, body) {
  // Fetch Headers joins repeated headers with ", ", which the spec relies on
  // (wire.md §17.37); rawHeaders keeps every occurrence.
  const headers = new Headers();
  for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) {
    try {
      headers.append(req.rawHeaders[i], req.rawHeaders[i + 1]);
    } catch {
      // A header the Fetch API refuses (forbidden name, bad value): the
      // relay reads only x-byollm-*, so dropping it changes nothing.
    }
  }
  let url;
  try {
    url = new URL(req.url, `http://${req.headers.host || "localhost"}`);
  } catch {
    url = new URL(req.url, "http://localhost");
  }
  const init = { method: req.method, headers };
  if (req.method !== "GET" && req.method !== "HEAD" && body.length > 0) init.body = body;
  return new Request(url, init);
}

const relayServer = http.createServer(async (req, res) => {
  try {
    const body = await readBody(req);
    const response = await relay.handle(toRequest(req, body));
    const out = Buffer.from(await response.arrayBuffer());
    const headers = { "content-length": out.length };
    response.headers.forEach((v, k) => {
      headers[k] = v;
    });
    res.writeHead(response.status, headers);
    res.end(out);
  } catch (err) {
    // The reference leaves a throwing handler to its host; answer as the Go
    // relay does (wire.md §1.1).
    sendJson(res, 500, { error: "server-error", message: String(err?.message ?? err) });
  }
});

// ---- admin plane ----------------------------------------------------------

function authorised(req) {
  if (adminToken === "") return false;
  const header = req.headers.authorization ?? "";
  const want = Buffer.from(`Bearer ${adminToken}`);
  const got = Buffer.from(header);
  return got.length === want.length && timingSafeEqual(got, want);
}

// Upsert `incoming` into `current`: a record whose key matches replaces the
// existing one in place (keeping array order, which the projection's
// first-match lookups depend on); new records are appended.
function upsert(current, incoming, keyOf) {
  const out = current.slice();
  const index = new Map(out.map((r, i) => [keyOf(r), i]));
  for (const record of incoming) {
    const k = keyOf(record);
    const at = index.get(k);
    if (at === undefined) {
      index.set(k, out.length);
      out.push(record);
    } else {
      out[at] = record;
    }
  }
  return out;
}

const mergeKeys = {
  sites: (r) => JSON.stringify([r?.siteId]),
  consents: (r) => JSON.stringify([r?.owner, r?.siteId]),
  devices: (r) => JSON.stringify([r?.runnerId]),
  rosters: (r) => JSON.stringify([r?.id]),
  revoked: (r) => JSON.stringify([r?.owner, r?.siteId]),
};

function merge(base, patch) {
  if (patch === null || typeof patch !== "object" || Array.isArray(patch)) {
    throw new Error("merge body must be a JSON object");
  }
  const out = { ...base };
  for (const [key, records] of Object.entries(patch)) {
    const keyOf = mergeKeys[key];
    if (keyOf === undefined) throw new Error(`unknown projection key ${JSON.stringify(key)}`);
    if (!Array.isArray(records)) throw new Error(`${key} must be an array`);
    out[key] = upsert(Array.isArray(base[key]) ? base[key] : [], records, keyOf);
  }
  return out;
}

function counts(f) {
  const n = (a) => (Array.isArray(a) ? a.length : 0);
  return {
    sites: n(f.sites),
    consents: n(f.consents),
    devices: n(f.devices),
    rosters: n(f.rosters),
    revoked: n(f.revoked),
  };
}

function apply(next) {
  relay.project(next); // throws on an invalid fixture; the old one stays
  fixture = next;
}

const adminServer = http.createServer(async (req, res) => {
  try {
    if (!authorised(req)) return sendJson(res, 401, { error: "unauthorized", message: "admin token required" });
    const path = new URL(req.url, "http://localhost").pathname;
    const body = await readBody(req);
    if (path === "/projection" && req.method === "GET") return sendJson(res, 200, fixture);
    if (path === "/projection" && req.method === "PUT") {
      let next;
      try {
        next = JSON.parse(body.toString("utf8"));
        apply(next);
      } catch (err) {
        return sendJson(res, 400, { error: "bad-request", message: String(err?.message ?? err) });
      }
      return sendJson(res, 200, counts(fixture));
    }
    if (path === "/projection/merge" && req.method === "POST") {
      try {
        apply(merge(fixture, JSON.parse(body.toString("utf8"))));
      } catch (err) {
        return sendJson(res, 400, { error: "bad-request", message: String(err?.message ?? err) });
      }
      return sendJson(res, 200, counts(fixture));
    }
    if (path === "/projection" || path === "/projection/merge") {
      return sendJson(res, 405, { error: "method-not-allowed" });
    }
    return sendJson(res, 404, { error: "not-found" });
  } catch (err) {
    return sendJson(res, 500, { error: "server-error", message: String(err?.message ?? err) });
  }
});

// ---- lifecycle ------------------------------------------------------------

function listenOn(server, where) {
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(where.port, where.host, () => {
      const a = server.address();
      resolve(a.family === "IPv6" ? `[${a.address}]:${a.port}` : `${a.address}:${a.port}`);
    });
  });
}

let sweeping = false;
const timer =
  sweepMs > 0
    ? setInterval(async () => {
        if (sweeping) return; // never overlap sweeps
        sweeping = true;
        try {
          await relay.sweep();
        } catch (err) {
          console.error(JSON.stringify({ level: "error", msg: "sweep failed", error: String(err?.message ?? err) }));
        } finally {
          sweeping = false;
        }
      }, sweepMs)
    : null;

const [relayAddr, adminAddr] = await Promise.all([listenOn(relayServer, listen), listenOn(adminServer, adminListen)]);
console.log(JSON.stringify({ ready: true, listen: relayAddr, admin: adminAddr, pid: process.pid }));

function shutdown() {
  if (timer) clearInterval(timer);
  relayServer.close();
  adminServer.close();
  relayServer.closeAllConnections?.();
  adminServer.closeAllConnections?.();
}
process.on("SIGTERM", shutdown);
process.on("SIGINT", shutdown);
