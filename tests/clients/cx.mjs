import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from '@playwright/test';
import { startRelay, stopRelay, tlsFront, serveBuild, chromiumOptions, SHARED } from './harness.mjs';
const app = await serveBuild(join(SHARED, 'chachi', 'build'));
const dir = mkdtempSync(join(tmpdir(), 'cx-'));
const pp = await tlsFront(dir, 443, '127.0.0.3');
const stand = await startRelay({});
pp.target = stand.addr;
const front = await tlsFront(dir, 443, '127.0.0.2');
const relay = await startRelay({ HEARTH_SERVER__PUBLIC_URL: 'wss://127.0.0.2', HEARTH_ADMIN__TOKEN: 't' });
front.target = relay.addr;
const browser = await chromium.launch(chromiumOptions(['--host-resolver-rules=MAP purplepag.es 127.0.0.3']));
const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, serviceWorkers: 'block' });
const p = await context.newPage();
p.log = [];
p.on('websocket', (ws) => { p.log.push(`WS ${ws.url()}`); ws.on('framesent', (f) => p.log.push(`> ${f.payload}`)); ws.on('framereceived', (f) => p.log.push(`< ${String(f.payload).slice(0, 400)}`)); });
p.on('console', (m) => { if (m.type() === 'error') p.log.push(`console ${m.text().slice(0, 200)}`); });
const snap = async (name) => { writeFileSync(`/tmp/cx/${name}.yml`, await p.locator('body').ariaSnapshot()); await p.screenshot({ path: `/tmp/cx/${name}.png` }); };
try {
  await p.goto(app.url);
  await p.waitForTimeout(4000);
  await snap('landing');
  if (process.env.STEP) { const f = await import(process.env.STEP); await f.default(p, { snap, relay, app, context, browser }); }
} catch (e) { console.log('ERROR', e.message.slice(0, 600)); } finally {
  writeFileSync('/tmp/cx/log.txt', p.log.join('\n'));
  await browser.close(); app.server.close(); front.close(); pp.close(); await stopRelay(relay); await stopRelay(stand);
  process.exit(0);
}
