// What the Flotilla tests share: the unmodified build (../shared/clients/flotilla/build) served
// and Chromium started once per file, a hearth at its production quotas (the defaults, not
// `hearth dev`'s) behind a TLS front per test, and a person: a key, a browser context of their
// own, logged in, with every WebSocket their page opened and every frame it sent and received kept.
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { crc32, deflateSync } from 'node:zlib';
import { join } from 'node:path';
import { test, expect, chromium } from '@playwright/test';
import { generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import { nsecEncode } from 'nostr-tools/nip19';
import { startRelay, stopRelay, tlsFront, serveBuild, chromiumOptions, SHARED, answerTo, exported, sentEvent } from './harness.mjs';

const BUILD = join(SHARED, 'flotilla', 'build');
// The emoji picker's data, which Flotilla loads from a CDN at start: the same file from npm.
const EMOJI = readFileSync(join(import.meta.dirname, 'node_modules', 'emoji-picker-element-data', 'en', 'emojibase', 'data.json'));
const SHOTS = join(import.meta.dirname, 'screenshots');
mkdirSync(SHOTS, { recursive: true });

let app;
let browser;
/** Serves the build and starts Chromium for the tests of the file that calls it. */
export function flotilla() {
  test.beforeAll(async () => {
    app = await serveBuild(BUILD);
    browser = await chromium.launch(chromiumOptions());
  });
  test.afterAll(async () => {
    await browser?.close();
    app?.server.close();
  });
}

/**
 * A hearth for one test, behind its TLS front, with `env` (HEARTH_… settings); `space` is the
 * address a person types into Flotilla; `admin(method, path, body)` and `stored(filter)` ask its
 * admin API. `stop()` ends both.
 */
export async function community(env) {
  const dir = mkdtempSync(join(tmpdir(), 'hearth-flotilla-'));
  const front = await tlsFront(dir);
  const space = `wss://127.0.0.1:${front.port}`;
  const relay = await startRelay({ HEARTH_SERVER__PUBLIC_URL: space, HEARTH_ADMIN__TOKEN: 'clients-token', ...env });
  front.target = relay.addr;
  const admin = async (method, path, body) => {
    const response = await fetch(`http://${relay.addr}${path}`, {
      method,
      headers: { Authorization: 'Bearer clients-token', ...(body ? { 'Content-Type': 'application/json' } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    return { status: response.status, body: await response.json().catch(() => null) };
  };
  const stored = (filter) => exported(relay.addr, 'clients-token', filter);
  return {
    space,
    host: `127.0.0.1:${front.port}`,
    relay,
    admin,
    stored,
    stop: async () => {
      front.close();
      await stopRelay(relay);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A person: a key, a browser context of their own, logged in to Flotilla with "Log in with Key". */
export async function person(name) {
  const secret = generateSecretKey();
  // Flotilla's service worker would fetch past Playwright's routes: blocked, the page fetches itself.
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, serviceWorkers: 'block' });
  await context.route(/^https:\/\/cdn\.jsdelivr\.net\/npm\/emoji-picker-element-data@/, (route) => route.fulfill({
    contentType: 'application/json',
    headers: { 'access-control-allow-origin': '*', etag: 'W/"emoji-picker-element-data-1.8.0"' },
    body: EMOJI,
  }));
  const page = await context.newPage();
  const frames = [];
  const sockets = [];
  page.on('websocket', (ws) => {
    sockets.push(ws.url());
    ws.on('framesent', (f) => frames.push(`> ${f.payload}`));
    ws.on('framereceived', (f) => frames.push(`< ${f.payload}`));
  });
  await page.goto(app.url);
  await page.getByText('Log in', { exact: true }).click();
  await page.getByRole('button', { name: 'Log in with Key' }).click();
  await page.getByPlaceholder('nsec1...').fill(nsecEncode(secret));
  await page.getByRole('button', { name: 'Log in', exact: true }).click();
  await expect(page.getByRole('button', { name: /Add a space/ })).toBeVisible();
  return { name, secret, pubkey: getPublicKey(secret), context, page, frames, sockets };
}

/** Adds the space at `space` the way Flotilla offers first: "Add a space", "Join a space", its address or link. */
export async function addSpace(who, space) {
  const { page } = who;
  await page.getByRole('button', { name: /Add a space/ }).click();
  await page.getByRole('button', { name: /Join a space/ }).click();
  await page.locator('input[type=text]').last().fill(space);
  await page.getByRole('button', { name: /Join Space/i }).click();
}

export async function shot(who, what) {
  await who.page.screenshot({ path: join(SHOTS, `flotilla-${what}-${who.name}.png`) });
}

/** Sends `text` in the open room through Flotilla's composer. */
export async function say(who, text) {
  const box = who.page.locator('[contenteditable=true][role=textbox]').last();
  await box.click();
  await box.pressSequentially(text);
  await box.press('Enter');
}

/** The relay's answer (`[accepted, message]`) to the first join request (28934) `who`'s page sent, waited for. */
export async function joinAnswer(who) {
  const answer = () => {
    const sent = sentEvent(who.frames, (e) => e.kind === 28934);
    return sent && answerTo(who.frames, sent.id);
  };
  await expect.poll(answer, { timeout: 15_000 }).toBeTruthy();
  return answer();
}

/**
 * A `width`×`height` PNG of one colour (what a phone's picture is to the relay: bytes), or of
 * random pixels when `colour` is `null` (a picture that does not compress).
 */
export function png(width, height, colour) {
  const chunk = (type, data) => {
    const out = Buffer.alloc(12 + data.length);
    out.writeUInt32BE(data.length, 0);
    out.write(type, 4, 'latin1');
    data.copy(out, 8);
    out.writeUInt32BE(crc32(Buffer.concat([Buffer.from(type, 'latin1'), data])), 8 + data.length);
    return out;
  };
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  header.set([8, 2, 0, 0, 0], 8);
  const row = () => Buffer.concat([Buffer.from([0]), colour ? Buffer.from(Array(width).fill(colour).flat()) : randomBytes(width * 3)]);
  const pixels = deflateSync(Buffer.concat(Array.from({ length: height }, row)));
  return Buffer.concat([Buffer.from('89504e470d0a1a0a', 'hex'), chunk('IHDR', header), chunk('IDAT', pixels), chunk('IEND', Buffer.alloc(0))]);
}
