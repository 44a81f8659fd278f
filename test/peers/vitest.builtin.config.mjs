import { defineConfig } from "vitest/config";

// The built-in engine scenarios (builtin.test.mjs), run by
// builtin_peers_test.go against replicas with RELAY_GRANT_KEY_FILE or a remote
// signer; one file, in order.
export default defineConfig({
  test: {
    include: ["builtin.test.mjs"],
    pool: "forks",
    fileParallelism: false,
    testTimeout: 180_000,
    hookTimeout: 60_000,
  },
});
