// Browser tests of the admin page against the real relay (global-setup.mjs starts it), in
// Debian's Chromium: `npx playwright install` cannot download here, so the browser is the
// system's (`HEARTH_CHROMIUM`, default /usr/bin/chromium).
import { defineConfig } from '@playwright/test';

const chromium = {
  browserName: 'chromium',
  launchOptions: {
    executablePath: process.env.HEARTH_CHROMIUM || '/usr/bin/chromium',
    // This machine's network is closed: without these Chromium keeps trying Google's hosts.
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  },
};

export default defineConfig({
  testDir: '.',
  testMatch: /.*\.spec\.mjs/,
  globalSetup: './global-setup.mjs',
  // One relay is shared: the flows change its limits and bans, so they run one at a time.
  workers: 1,
  fullyParallel: false,
  retries: 0,
  timeout: 60_000,
  expect: { timeout: 10_000 },
  reporter: [['list']],
  outputDir: 'test-results',
  use: { trace: 'off', screenshot: 'off' },
  projects: [
    { name: 'desktop', use: { ...chromium, viewport: { width: 1280, height: 800 } } },
    { name: 'phone', use: { ...chromium, viewport: { width: 375, height: 740 }, isMobile: true, hasTouch: true } },
  ],
});
