import { defineConfig } from "vitest/config";

// The grant scenarios (grants.test.mjs), run by grants_peers_test.go against
// replicas configured with a remote grant authority; one file, in order.
export default defineConfig({
  test: {
    include: ["grants.test.mjs"],
    pool: "forks",
    fileParallelism: false,
    testTimeout: 180_000,
    hookTimeout: 60_000,
  },
});
