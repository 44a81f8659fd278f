import { defineConfig } from "vitest/config";

// One file, scenarios in order, one process: the scenarios share three relay
// replicas and a proxy, and their timings are part of what they measure.
export default defineConfig({
  test: {
    include: ["peers.test.mjs"],
    pool: "forks",
    fileParallelism: false,
    testTimeout: 180_000,
    hookTimeout: 60_000,
  },
});
