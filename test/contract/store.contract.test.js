// Runs the store contract published in @byollm/relay@0.1.1, unmodified,
// against the Go store. The RoutingStore handed to the contract is a thin
// client: every method is one POST to the loopback bridge that
// contract_test.go starts (bridge/), and the Go side does the work.
//
// The contract awaits every store call and every hook, so a plain async
// fetch is enough; no synchronous bridge is needed.
import { describeStoreContract } from "@byollm/relay/store-contract";

const BRIDGE = process.env.RELAY_CONTRACT_BRIDGE_URL;
if (!BRIDGE) {
  throw new Error(
    "RELAY_CONTRACT_BRIDGE_URL is not set; run this through `go test ./test/contract/`",
  );
}
const BACKEND = process.env.RELAY_CONTRACT_BACKEND ?? "valkey";

async function call(path, body) {
  const res = await fetch(`${BRIDGE}/${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    // Sets (ClaimInput.routes and .kinds) do not survive JSON.stringify;
    // send them as arrays. Route members stay "site\u0000owner" strings.
    body: JSON.stringify(body, (_key, value) =>
      value instanceof Set ? [...value] : value,
    ),
  });
  const text = await res.text();
  if (!res.ok) {
    throw new Error(`bridge ${path}: HTTP ${res.status}: ${text}`);
  }
  return JSON.parse(text);
}

// Which bridge store a RoutingStore object stands for; the hooks receive the
// object, the bridge wants the id.
const storeIds = new WeakMap();

// Methods whose "absent" answer is undefined in the interface; JSON has only
// null, so turn it back.
const UNDEFINED_WHEN_NULL = new Set(["job", "presence"]);

const METHODS = [
  "now",
  "enqueue",
  "job",
  "jobs",
  "awaiting",
  "finished",
  "claim",
  "takePayload",
  "complete",
  "releaseLeases",
  "seal",
  "cancel",
  "cancelRequests",
  "renewLeases",
  "seen",
  "presence",
  "everyone",
  "dropPresenceForTests",
  "sweep",
];

async function make() {
  const { store: id } = await call("make", {});
  const store = {};
  for (const method of METHODS) {
    store[method] = async (...args) => {
      const { result } = await call(`op/${method}`, { store: id, args });
      if (result === null && UNDEFINED_WHEN_NULL.has(method)) return undefined;
      return result;
    };
  }
  storeIds.set(store, id);
  return { store, done: () => call("done", { store: id }).then(() => undefined) };
}

describeStoreContract(`Go store on ${BACKEND}`, {
  make,
  serialising: true,
  advance: (store, ms) => call("advance", { store: storeIds.get(store), ms }).then(() => undefined),
  writeRawStub: (store, id, raw) =>
    call("writeRawStub", { store: storeIds.get(store), id, raw }).then(() => undefined),
});
