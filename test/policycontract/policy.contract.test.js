// Runs the policy store contract published in @byollm/control-plane@0.1.1
// (`describePolicyStoreContract`), unmodified, against the Go policy store in
// Valkey. The PolicyStore handed to the contract is a thin client: read and
// every write act is one POST to the loopback bridge contract_test.go starts,
// and the Go store does the work.
import { describePolicyStoreContract } from "@byollm/control-plane/store-contract";

const BRIDGE = process.env.RELAY_POLICY_BRIDGE_URL;
if (!BRIDGE) {
  throw new Error(
    "RELAY_POLICY_BRIDGE_URL is not set; run this through `go test ./test/policycontract/`",
  );
}
const BACKEND = process.env.RELAY_POLICY_BACKEND ?? "valkey";

async function call(path, body) {
  const res = await fetch(`${BRIDGE}/${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  if (!res.ok) {
    throw new Error(`bridge ${path}: HTTP ${res.status}: ${text}`);
  }
  return JSON.parse(text);
}

// Sets do not survive JSON; the bridge sends arrays, turned back here.
function snapshot(s) {
  const out = { consented: s.consented, member: s.member, mappings: s.mappings };
  if (s.declares !== undefined) out.declares = new Set(s.declares);
  if (s.advertised !== undefined) out.advertised = new Set(s.advertised);
  return out;
}

describePolicyStoreContract(`Go policy store on ${BACKEND}`, {
  opaqueIds: true,
  make: async () => {
    const { id } = await call("make", {});
    return {
      store: { read: async (input) => snapshot(await call("read", { id, ...input })) },
      consent: async (input) => { await call("consent", { id, ...input }); },
      revoke: async (input) => { await call("revoke", { id, ...input }); },
      pause: async (input) => { await call("pause", { id, ...input }); },
      addMember: async (input) => { await call("addMember", { id, ...input }); },
      removeMember: async (input) => { await call("removeMember", { id, ...input }); },
      done: async () => { await call("done", { id }); },
    };
  },
});
