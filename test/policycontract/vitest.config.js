import { defineConfig } from "vitest/config";

// Only the contract file; node_modules and the Go side are not test sources.
export default defineConfig({
  test: {
    include: ["policy.contract.test.js"],
    testTimeout: 30_000,
  },
});
