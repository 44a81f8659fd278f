// The published side of the differential test (grants_test.go): every case
// runs through @byollm/control-plane@0.1.1's ControlPlane over its
// MemoryPolicyStore, and every grant the Go engine signed is checked with
// @byollm/protocol@0.1.1's verifyGrant, untampered and tampered.
//
// Usage: node differential.mjs <cases.json>   (writes results JSON to stdout)
import { readFileSync } from "node:fs";
import { ControlPlane, MemoryPolicyStore, keypairSigner } from "@byollm/control-plane";
import { generateKeys, verifyGrant } from "@byollm/protocol";

// `--keys`: print a fresh StoredKeys (what the daemon and site tools write),
// which the Go side loads as its RELAY_GRANT_KEY_FILE.
if (process.argv[2] === "--keys") {
  process.stdout.write(JSON.stringify(generateKeys(Date.now())));
  process.exit(0);
}

const input = JSON.parse(readFileSync(process.argv[2], "utf8"));
const signer = keypairSigner(input.keys);

// MemoryPolicyStore has no way to say what a site declares, so the declared
// purposes are added on top of its answer, exactly as a store that can say
// would return them; everything else is its own.
function withDeclares(store, declares) {
  return {
    async read(q) {
      const snap = await store.read(q);
      return declares === null ? snap : { ...snap, declares: new Set(declares) };
    },
  };
}

function tamper(grant) {
  // A different service than the one signed: the signature must not verify.
  return { ...grant, service: grant.service + "-x" };
}

const results = [];
for (const c of input.cases) {
  const memory = new MemoryPolicyStore();
  if (c.consent !== "no") memory.consent({ siteId: c.siteId, user: c.user, mappings: c.mappings });
  if (c.consent === "paused") memory.pause({ siteId: c.siteId, user: c.user });
  if (c.member) memory.addMember({ owner: c.owner, user: c.user });
  if (c.advertised !== null) memory.advertising(c.advertised);
  const plane = new ControlPlane({
    store: withDeclares(memory, c.declares),
    signer,
    now: () => c.now,
    newGrantId: () => c.grantId,
  });
  const job = JSON.parse(c.job);
  const outcome = await plane.authorGrant({
    job,
    siteId: c.siteId,
    siteKey: c.siteKey,
    owner: c.owner,
    ...(c.purpose === null ? {} : { purpose: c.purpose }),
    capabilities: JSON.parse(c.capabilities),
  });
  const { verdict } = await plane.satisfiable({
    siteId: c.siteId,
    user: c.user,
    purpose: c.purpose === null ? undefined : c.purpose,
    kind: job.kind,
  });
  const r = { verdict };
  if (outcome.granted) r.granted = JSON.stringify(outcome.granted);
  else r.declined = outcome.declined;
  if (c.goGrant !== null) {
    const goGrant = JSON.parse(c.goGrant);
    const check = { owner: c.owner, jobId: job.id, controlPlanePublic: signer.publicKey, now: c.now };
    r.goVerify = verifyGrant({ ...check, grant: goGrant });
    r.goTamperedVerify = verifyGrant({ ...check, grant: tamper(goGrant) });
    // Aged past the window: the same grant checked 120001 ms later.
    r.goExpiredVerify = verifyGrant({ ...check, grant: goGrant, now: c.now + 120_001 });
  }
  results.push(r);
}
process.stdout.write(JSON.stringify(results));
