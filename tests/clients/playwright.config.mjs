// The chat clients' browser tests: unmodified builds from ../shared/clients/, in Debian's
// Chromium (`npx playwright install` cannot download here), against the debug build of this
// checkout. Each test starts its own relays and TLS fronts (harness.mjs) and stops them.
import { defineConfig } from '@playwright/test';

export default defineConfig({
  testDir: '.',
  testMatch: /.*\.spec\.mjs/,
  // Two cores: one client page after another is what the machine can drive without timeouts.
  workers: 1,
  fullyParallel: false,
  retries: 0,
  timeout: 120_000,
  expect: { timeout: 20_000 },
  reporter: [['list']],
  outputDir: 'test-results',
  // An action that cannot happen fails on its own deadline, naming the step, not at the test's.
  use: { trace: 'off', screenshot: 'off', actionTimeout: 30_000, navigationTimeout: 30_000 },
});
