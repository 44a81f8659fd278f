import { defineConfig } from "vitest/config";

// Only the contract file; node_modules and the Go bridge are not test sources.
export default defineConfig({
  test: {
    include: ["store.contract.test.js"],
    // Each case is a handful of loopback round trips; a slow shared CI box
    // still finishes one in well under this.
    testTimeout: 30_000,
  },
});
