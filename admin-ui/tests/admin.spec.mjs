// The admin page in a real browser against the real relay: sign-in, limits (preview, validation,
// apply, a stale write, reset), usage of a fresh pubkey's traffic, tier change and ban, moderation,
// members and invites,
// the audit log, a 401 mid-session, keyboard use, accessibility (axe) and layout at each size.
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, expect } from '@playwright/test';
import AxeBuilder from '@axe-core/playwright';
import { createHash } from 'node:crypto';
import { finalizeEvent, verifyEvent } from 'nostr-tools/pure';
import { npubEncode } from 'nostr-tools/nip19';

const HTTP = () => process.env.HEARTH_HTTP;
const TOKEN = () => process.env.HEARTH_TOKEN;
const SHOTS = join(import.meta.dirname, 'screenshots');
mkdirSync(SHOTS, { recursive: true });

/** The admin API from the test's side, to confirm what the page did. */
async function api(method, path, body) {
  const response = await fetch(`${HTTP()}${path}`, {
    method,
    headers: { Authorization: `Bearer ${TOKEN()}`, ...(body ? { 'Content-Type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null, headers: response.headers };
}

/** The relay's own kind 13534 member list (NIP-43), as anyone reads it over REST. */
async function memberList() {
  const info = await (await fetch(HTTP(), { headers: { Accept: 'application/nostr+json' } })).json();
  const response = await fetch(`${HTTP()}/api/v1/query`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ filters: [{ kinds: [13534], authors: [info.self] }] }),
  });
  const { events } = await response.json();
  expect(events).toHaveLength(1);
  return events[0];
}

/** Runs the hearth binary: `{code, stdout, stderr}`. */
function hearth(args, input = '') {
  return new Promise((ok, fail) => {
    const child = spawn(process.env.HEARTH_BIN, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c) => { stdout += c; });
    child.stderr.on('data', (c) => { stderr += c; });
    child.on('error', fail);
    child.on('exit', (code) => ok({ code, stdout, stderr }));
    // A command that reads no input (keygen) may exit before it is written: that EPIPE is not a
    // failure, the exit code and output say how the command went.
    child.stdin.on('error', (e) => { if (e.code !== 'EPIPE') fail(e); });
    child.stdin.end(input);
  });
}

async function freshKey() {
  const { stdout } = await hearth(['keygen']);
  return JSON.parse(stdout);
}

/**
 * Publishes `n` kind-1 notes signed by `key` over WebSocket (to `relay`, by default the one under
 * test); the CLI's per-event lines. The CLI holds its events until the relay has said OK to its
 * AUTH, so every one is billed to the key.
 */
async function publish(key, n, content = 'note', relay = HTTP().replace('http://', 'ws://')) {
  const drafts = Array.from({ length: n }, (_, i) => JSON.stringify({ kind: 1, content: `${content} ${i}` })).join('\n');
  const out = await hearth(['publish', '--relay', relay, '--key', key.secret], `${drafts}\n`);
  return { code: out.code, lines: out.stdout.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l)), stderr: out.stderr };
}

// Console errors fail a test, except those it expects (a 401 the test provoked).
let consoleErrors = [];
let allowed = [];
test.beforeEach(async ({ page }) => {
  consoleErrors = [];
  allowed = [];
  page.on('console', (msg) => { if (msg.type() === 'error') consoleErrors.push(msg.text()); });
  page.on('pageerror', (e) => consoleErrors.push(`uncaught: ${e.message}`));
  // Every flow starts from the configured limits.
  expect((await api('DELETE', '/admin/v1/limits/overrides')).status).toBe(200);
});
test.afterEach(async () => {
  expect(consoleErrors.filter((e) => !allowed.some((re) => re.test(e)))).toEqual([]);
});

/** Uploads a 1x1 PNG as `key` and returns its hash; the bytes of `tail` after the picture's end
 * make each blob its own (browsers ignore them). */
async function uploadPicture(key, tail) {
  const png = Buffer.concat([Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==', 'base64'), Buffer.from(tail)]);
  const sha = createHash('sha256').update(png).digest('hex');
  const now = Math.floor(Date.now() / 1000);
  const auth = finalizeEvent({ kind: 24242, created_at: now, content: 'Upload a picture', tags: [['t', 'upload'], ['x', sha], ['expiration', String(now + 600)]] }, Buffer.from(key.secret, 'hex'));
  const put = await fetch(`${HTTP()}/upload`, {
    method: 'PUT',
    headers: { Authorization: `Nostr ${Buffer.from(JSON.stringify(auth)).toString('base64')}`, 'Content-Type': 'image/png' },
    body: png,
  });
  expect(put.status).toBe(201);
  return sha;
}

async function signIn(page) {
  await page.goto(`${HTTP()}/admin/`);
  await page.getByLabel('Admin token').fill(TOKEN());
  await page.getByRole('button', { name: 'Sign in' }).click();
  await expect(page.getByRole('heading', { name: 'Overview' })).toBeVisible();
}

async function view(page, name) {
  await page.getByRole('navigation', { name: 'Views' }).getByRole('link', { name, exact: true }).click();
  await expect(page.getByRole('heading', { name, level: 2 })).toBeVisible();
}

/** No axe violation of serious or critical impact, and no horizontal scrolling. */
async function accessible(page, what) {
  const { violations } = await new AxeBuilder({ page }).analyze();
  const bad = violations.filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.id} (${v.impact}): ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`);
  expect(bad, what).toEqual([]);
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
  expect(overflow, `${what} scrolls sideways`).toBeLessThanOrEqual(0);
}

test('sign in: a wrong token is refused with an alert, the right one enters, the token stays in this tab only', async ({ page }) => {
  allowed = [/401/];
  await page.goto(`${HTTP()}/admin/`);
  await accessible(page, 'sign-in');
  await page.getByLabel('Admin token').fill('not-the-token');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await expect(page.getByRole('alert')).toHaveText('That token was not accepted.');
  await page.getByLabel('Admin token').fill(TOKEN());
  await page.getByRole('button', { name: 'Sign in' }).click();
  await expect(page.getByRole('heading', { name: 'Overview' })).toBeVisible();
  const stored = await page.evaluate(() => ({ session: sessionStorage.getItem('hearth-admin-token'), local: localStorage.length }));
  expect(stored).toEqual({ session: TOKEN(), local: 0 });
  expect(page.url()).not.toContain(TOKEN());
  await page.getByRole('button', { name: 'Sign out' }).click();
  await expect(page.getByLabel('Admin token')).toBeVisible();
  expect(await page.evaluate(() => sessionStorage.getItem('hearth-admin-token'))).toBeNull();
});

test('overview: uptime, version, connections, subscriptions, events stored and both charts', async ({ page }, info) => {
  await signIn(page);
  const figures = page.locator('#overview-figures');
  for (const term of ['Uptime', 'Version', 'Connections', 'Subscriptions', 'Events stored']) {
    await expect(figures.getByText(term, { exact: true })).toBeVisible();
  }
  const relay = (await api('GET', '/admin/v1/relay')).body;
  await expect(figures.locator('.figure', { hasText: 'Version' }).locator('dd')).toHaveText(relay.version);
  await expect(figures.locator('.figure', { hasText: 'Access' }).locator('dd')).toHaveText('public (publish: anyone; read: anyone)');
  const store = (await api('GET', '/admin/v1/store')).body;
  await expect(figures.locator('.figure', { hasText: 'Events stored' }).locator('dd')).toHaveText(String(store.events));
  await expect(page.getByRole('img', { name: /^Events stored per second: latest/ })).toBeVisible();
  await expect(page.getByRole('img', { name: /^Refusals per second, all limit types: latest/ })).toBeVisible();
  await expect(page.locator('#refusals-legend li')).toHaveText(['ws_events', 'ws_reqs', 'messages', 'api_calls', 'upload_bytes', 'admin_auth', 'unavailable']);
  await accessible(page, 'overview');
  await page.screenshot({ path: join(SHOTS, `${info.project.name}-overview.png`), fullPage: true });
});

test('limits: preview, a refused value beside its field, apply, a stale write, reset', async ({ page }, info) => {
  allowed = [/status of 400/, /status of 412/];
  await signIn(page);
  await view(page, 'Limits');
  await expect(page.getByLabel('human ws_events_per_sec', { exact: true })).toHaveValue(/\d+/);
  // Reads have a budget of their own, tuned like every other.
  await expect(page.getByLabel('ip ws_reqs_burst_window_secs', { exact: true })).toHaveValue('10');
  await expect(page.getByLabel('human upload_bytes_per_day', { exact: true })).toHaveValue('1073741824');
  await page.getByLabel('agent ws_reqs_per_sec', { exact: true }).fill('31');
  await page.getByRole('button', { name: 'Apply' }).click();
  await expect(page.locator('#limit-agent-ws_reqs_per_sec-source')).toHaveText('admin');
  expect((await api('GET', '/admin/v1/limits')).body.agent.ws_reqs_per_sec).toEqual({ value: 31, source: 'admin' });
  // Preview: what the value would do, nothing changed.
  await page.getByLabel('human messages_per_min', { exact: true }).fill('1');
  await expect(page.locator('#limits-preview')).toHaveText(/^Would refuse \d+ principals? now \(\d+ under the limits in force, of \d+ tracked\)\.$/);
  expect((await api('GET', '/admin/v1/limits')).body.human.messages_per_min.source).not.toBe('admin');
  await page.getByLabel('human messages_per_min', { exact: true }).fill('');
  // A value the API refuses: its message next to the field, nothing applied.
  await page.getByLabel('human ws_events_per_sec', { exact: true }).fill('0');
  await page.getByRole('button', { name: 'Apply' }).click();
  await expect(page.locator('#limit-human-ws_events_per_sec-error')).toHaveText('`human.ws_events_per_sec` must be a positive integer of at most 10000000');
  await expect(page.getByLabel('human ws_events_per_sec', { exact: true })).toHaveAttribute('aria-invalid', 'true');
  await accessible(page, 'limits with an error');
  // Applied, shown without a reload, and so in the API.
  await page.getByLabel('human ws_events_per_sec', { exact: true }).fill('23');
  await page.getByRole('button', { name: 'Apply' }).click();
  await expect(page.locator('#limits-message')).toHaveText('Applied.');
  await expect(page.locator('#limit-human-ws_events_per_sec-source')).toHaveText('admin');
  expect((await api('GET', '/admin/v1/limits')).body.human.ws_events_per_sec).toEqual({ value: 23, source: 'admin' });
  await page.screenshot({ path: join(SHOTS, `${info.project.name}-limits.png`), fullPage: true });
  // Another admin changes the document meanwhile: this page's write is refused, the current shown.
  expect((await api('PATCH', '/admin/v1/limits', { agent: { api_calls_per_min: 77 } })).status).toBe(200);
  await page.getByLabel('human ws_events_per_sec', { exact: true }).fill('24');
  await page.getByRole('button', { name: 'Apply' }).click();
  await expect(page.locator('#limits-message')).toHaveText(/^Another admin changed the limits meanwhile/);
  await expect(page.getByLabel('agent api_calls_per_min', { exact: true })).toHaveValue('77');
  await expect(page.getByLabel('human ws_events_per_sec', { exact: true })).toHaveValue('23');
  expect((await api('GET', '/admin/v1/limits')).body.human.ws_events_per_sec.value).toBe(23);
  // Reset one value, then all.
  await page.getByRole('button', { name: 'Reset human ws_events_per_sec' }).click();
  await expect(page.locator('#limit-human-ws_events_per_sec-source')).not.toHaveText('admin');
  expect((await api('GET', '/admin/v1/limits')).body.human.ws_events_per_sec.source).not.toBe('admin');
  await page.getByRole('button', { name: 'Reset all' }).click();
  await expect(page.locator('#limits-message')).toHaveText('Every limit is back to its configured value.');
  expect((await api('GET', '/admin/v1/limits')).body.agent.api_calls_per_min.source).not.toBe('admin');
});

test('usage: a fresh pubkey\'s traffic in exact counts, its tier changed, banned, refused, audited', async ({ page }, info) => {
  const key = await freshKey();
  const sent = await publish(key, 3);
  expect(sent.lines.map((l) => l.accepted), sent.stderr).toEqual([true, true, true]);
  await signIn(page);
  await view(page, 'Usage');
  await page.getByLabel('Pubkey or IP').fill(key.npub);
  // What the page shows is what the relay answered it: the answer is read as the page got it
  // (four messages a minute for humans, global-setup: a used cell comes back every 15 s, so the
  // count depends on when the page asked, not on this test's timing).
  const [answer] = await Promise.all([
    page.waitForResponse((r) => r.url().includes(`/admin/v1/usage/`) && r.request().method() === 'GET'),
    page.getByRole('button', { name: 'Look up', exact: true }).click(),
  ]);
  const used = (await answer.json()).limits.messages.used;
  expect(used).toBeGreaterThanOrEqual(0);
  expect(used).toBeLessThanOrEqual(3);
  const report = page.locator('#usage-report');
  await expect(report.getByRole('heading', { level: 3 })).toHaveText(key.pubkey);
  await expect(report.getByText(`used ${used} of 4, ${4 - used} remaining`, { exact: false })).toBeVisible();
  await expect(page.getByRole('meter', { name: 'messages' })).toHaveAttribute('value', String(used));
  await expect(report.locator('.figure', { hasText: 'Stored events' }).locator('dd')).toHaveText('3');
  await expect(report.locator('.figure', { hasText: 'Refusals' }).locator('dd')).toHaveText('admin_auth 0, api_calls 0, messages 0, unavailable 0, upload_bytes 0, ws_events 0, ws_reqs 0');
  const usage = (await api('GET', `/admin/v1/usage/${key.pubkey}`)).body;
  expect(usage.limits.messages.used).toBeLessThanOrEqual(used);
  await accessible(page, 'usage');
  await page.screenshot({ path: join(SHOTS, `${info.project.name}-usage.png`), fullPage: true });
  // The busiest table lists it, with its actions.
  await expect(page.locator('#busiest').getByRole('button', { name: `Look up ${key.pubkey.slice(0, 8)}…${key.pubkey.slice(-6)}` })).toBeVisible({ timeout: 10_000 });
  // Tier.
  await page.getByLabel('Tier', { exact: true }).selectOption('agent');
  await page.getByRole('button', { name: 'Change tier' }).click();
  await expect(page.locator('#usage-message')).toHaveText(/is in the agent tier now\.$/);
  expect((await api('GET', `/admin/v1/usage/${key.pubkey}`)).body.tier).toBe('agent');
  // Ban: its next event is refused.
  await page.getByRole('button', { name: 'Ban this pubkey' }).click();
  await expect(page.locator('#usage-message')).toHaveText(/is banned\.$/);
  const banned = (await api('POST', '/admin/v1/rpc', { method: 'listbannedpubkeys', params: [] })).body.result;
  expect(banned.map((b) => b.pubkey)).toContain(key.pubkey);
  const refused = await publish(key, 1, 'after the ban');
  expect(refused.lines.map((l) => [l.accepted, l.message.split(':')[0]])).toEqual([[false, 'blocked']]);
  // Audit: both changes, newest first.
  await view(page, 'Audit');
  const rows = page.locator('#audit tbody tr');
  await expect(rows.first()).toContainText('banpubkey');
  await expect(page.locator('#audit tbody tr', { hasText: 'tier.set' }).first()).toContainText('human → agent');
  await accessible(page, 'audit');
  await page.screenshot({ path: join(SHOTS, `${info.project.name}-audit.png`), fullPage: true });
});

test('moderation: ban by npub, the lists, unban, an allowed kind, the relay name', async ({ page }, info) => {
  const key = await freshKey();
  await signIn(page);
  await view(page, 'Moderation');
  await page.getByLabel('Pubkey to ban').fill(key.npub);
  await page.getByRole('button', { name: 'Ban', exact: true }).click();
  await expect(page.locator('#moderation-message')).toHaveText(/^Banned /);
  const short = `${key.pubkey.slice(0, 8)}…${key.pubkey.slice(-6)}`;
  await expect(page.getByRole('button', { name: `Unban ${short}` })).toBeVisible();
  let banned = (await api('POST', '/admin/v1/rpc', { method: 'listbannedpubkeys', params: [] })).body.result;
  expect(banned.map((b) => b.pubkey)).toContain(key.pubkey);
  await accessible(page, 'moderation');
  await page.screenshot({ path: join(SHOTS, `${info.project.name}-moderation.png`), fullPage: true });
  await page.getByRole('button', { name: `Unban ${short}` }).click();
  await expect(page.getByRole('button', { name: `Unban ${short}` })).toHaveCount(0);
  banned = (await api('POST', '/admin/v1/rpc', { method: 'listbannedpubkeys', params: [] })).body.result;
  expect(banned.map((b) => b.pubkey)).not.toContain(key.pubkey);
  // An allowed kind restricts every publisher: added and taken away again.
  await page.getByLabel('Kind to allow').fill('30023');
  await page.getByRole('button', { name: 'Allow kind' }).click();
  await expect(page.getByRole('button', { name: 'Remove 30023' })).toBeVisible();
  expect((await api('POST', '/admin/v1/rpc', { method: 'listallowedkinds', params: [] })).body.result).toEqual([30023]);
  await page.getByRole('button', { name: 'Remove 30023' }).click();
  await expect(page.getByRole('button', { name: 'Remove 30023' })).toHaveCount(0);
  expect((await api('POST', '/admin/v1/rpc', { method: 'listallowedkinds', params: [] })).body.result).toEqual([]);
  const name = `den of ${info.project.name}`;
  await page.getByLabel('Relay name').fill(name);
  await page.getByRole('button', { name: 'Save relay information' }).click();
  await expect(page.locator('#relay-message')).toHaveText('Saved.');
  expect((await api('GET', '/admin/v1/relay')).body.name).toBe(name);
});

test('groups: a closed group, a join request waiting, approved from the page; the group deleted', async ({ page }, info) => {
  const [owner, asker] = [await freshKey(), await freshKey()];
  const id = `den-${info.project.name}`;
  // One event per run of the CLI: each is answered before the next is sent.
  const send = async (key, draft) => {
    const out = await hearth(['publish', '--relay', HTTP().replace('http://', 'ws://'), '--key', key.secret], `${JSON.stringify(draft)}\n`);
    return JSON.parse(out.stdout.trim().split('\n').pop());
  };
  expect((await send(owner, { kind: 9007, content: '', tags: [['h', id]] })).accepted).toBe(true);
  expect((await send(owner, { kind: 9002, content: '', tags: [['h', id], ['name', 'The Den'], ['closed']] })).accepted).toBe(true);
  expect((await send(asker, { kind: 0, content: JSON.stringify({ name: 'Asker' }) })).accepted).toBe(true);
  const request = await send(asker, { kind: 9021, content: '', tags: [['h', id]] });
  expect(request.message).toBe('restricted: the group is closed: your join request waits for an admin to let you in');
  await signIn(page);
  await view(page, 'Groups');
  await page.getByRole('button', { name: `Show group ${id}` }).click();
  await expect(page.locator('#group-title')).toHaveText(`Group ${id} (The Den)`);
  await expect(page.locator('#group-pending')).toContainText('Asker');
  await accessible(page, 'groups');
  await page.screenshot({ path: join(SHOTS, `${info.project.name}-groups.png`), fullPage: true });
  await page.getByRole('button', { name: 'Approve Asker' }).click();
  await expect(page.locator('#groups-message')).toHaveText(`Asker is a member of ${id} now.`);
  await expect(page.locator('#group-members')).toContainText('Asker');
  await expect(page.locator('#group-pending')).toHaveText(/No join requests waiting\./);
  expect((await api('GET', `/admin/v1/groups/${id}`)).body.members.some((m) => m.pubkey === asker.pubkey)).toBe(true);
  await page.getByRole('button', { name: `Delete group ${id}` }).click();
  await expect(page.locator('#groups-message')).toHaveText(`Deleted ${id} and every event of it.`);
  expect((await api('GET', `/admin/v1/groups/${id}`)).status).toBe(404);
  await expect(page.getByRole('button', { name: `Show group ${id}` })).toHaveCount(0);
});

test('reports: a reported note in the queue with its author\'s name; deleted from the page, audited', async ({ page }, info) => {
  const [author, reporter] = [await freshKey(), await freshKey()];
  const relay = HTTP().replace('http://', 'ws://');
  const send = async (key, draft) => {
    const out = await hearth(['publish', '--relay', relay, '--key', key.secret], `${JSON.stringify(draft)}\n`);
    return JSON.parse(out.stdout.trim().split('\n').pop());
  };
  expect((await send(author, { kind: 0, content: JSON.stringify({ name: `Spammer ${info.project.name}` }) })).accepted).toBe(true);
  const note = await send(author, { kind: 1, content: `buy now, ${info.project.name}` });
  expect(note.accepted).toBe(true);
  const report = await send(reporter, { kind: 1984, content: 'plain spam', tags: [['e', note.id, 'spam'], ['p', author.pubkey]] });
  expect(report.accepted).toBe(true);
  await signIn(page);
  await view(page, 'Reports');
  const short = `${note.id.slice(0, 8)}…${note.id.slice(-6)}`;
  const row = page.locator('#reports tbody tr', { hasText: short });
  await expect(row).toContainText(`Spammer ${info.project.name}`);
  await expect(row).toContainText('spam ×1');
  await expect(row).toContainText('plain spam');
  await accessible(page, 'reports');
  await page.screenshot({ path: join(SHOTS, `${info.project.name}-reports.png`), fullPage: true });
  await page.getByRole('button', { name: `Delete reported event ${short}` }).click();
  await expect(page.locator('#reports-message')).toHaveText(`Deleted ${short}; it cannot be sent again.`);
  await expect(page.getByRole('button', { name: `Delete reported event ${short}` })).toHaveCount(0);
  expect((await api('GET', '/admin/v1/audit')).body.entries[0].action).toBe('report.delete');
  expect((await api('POST', '/admin/v1/rpc', { method: 'listbannedevents', params: [] })).body.result.map((b) => b.id)).toContain(note.id);
});

test('media: an uploaded picture with its uploader\'s name, bytes per uploader; deleted from the page', async ({ page }, info) => {
  const key = await freshKey();
  const profile = `${JSON.stringify({ kind: 0, content: JSON.stringify({ name: 'Painter' }) })}\n`;
  const published = await hearth(['publish', '--relay', HTTP().replace('http://', 'ws://'), '--key', key.secret], profile);
  expect(JSON.parse(published.stdout.trim().split('\n').pop()).accepted).toBe(true);
  const sha = await uploadPicture(key, info.project.name);
  await signIn(page);
  await view(page, 'Media');
  const short = `${sha.slice(0, 8)}…${sha.slice(-6)}`;
  const row = page.locator('#media-blobs tbody tr', { hasText: short });
  await expect(row).toContainText('Painter');
  await expect(row).toContainText('image/png');
  // The thumbnail loads under the page's Content-Security-Policy (same origin).
  const thumb = row.getByRole('img', { name: `Blob ${short}` });
  await expect.poll(() => thumb.evaluate((img) => img.complete && img.naturalWidth)).toBe(1);
  await expect(page.locator('#media-usage')).toContainText('Painter');
  await accessible(page, 'media');
  await page.screenshot({ path: join(SHOTS, `${info.project.name}-media.png`), fullPage: true });
  await page.getByRole('button', { name: `Delete blob ${short}` }).click();
  await expect(page.locator('#media-message')).toHaveText(`Deleted ${short} for every key that uploaded it.`);
  await expect(page.getByRole('button', { name: `Delete blob ${short}` })).toHaveCount(0);
  expect((await fetch(`${HTTP()}/${sha}`)).status).toBe(404);
  expect((await api('GET', '/admin/v1/audit')).body.entries[0].action).toBe('media.delete');
});

test('reports: a blob reported over Blossom (BUD-09) in the queue with its uploader; deleted and banned from the page', async ({ page }, info) => {
  const [uploader, reporter] = [await freshKey(), await freshKey()];
  const profile = `${JSON.stringify({ kind: 0, content: JSON.stringify({ name: `Uploader ${info.project.name}` }) })}\n`;
  const published = await hearth(['publish', '--relay', HTTP().replace('http://', 'ws://'), '--key', uploader.secret], profile);
  expect(JSON.parse(published.stdout.trim().split('\n').pop()).accepted).toBe(true);
  const sha = await uploadPicture(uploader, `reported ${info.project.name}`);
  const now = Math.floor(Date.now() / 1000);
  const report = finalizeEvent({ kind: 1984, created_at: now, content: 'not for here', tags: [['x', sha, 'nudity']] }, Buffer.from(reporter.secret, 'hex'));
  const reported = await fetch(`${HTTP()}/report`, { method: 'PUT', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(report) });
  expect(reported.status).toBe(200);
  await signIn(page);
  await view(page, 'Reports');
  const short = `${sha.slice(0, 8)}…${sha.slice(-6)}`;
  const row = page.locator('#reports tbody tr', { hasText: short });
  await expect(row).toContainText(`Uploader ${info.project.name}`);
  await expect(row).toContainText('nudity ×1');
  await expect(row).toContainText('not for here');
  await expect.poll(() => row.getByRole('img', { name: `Reported blob ${short}` }).evaluate((img) => img.complete && img.naturalWidth)).toBe(1);
  await accessible(page, 'reports');
  await row.getByRole('combobox', { name: `Ban reach for ${short}` }).selectOption('writes');
  await page.getByRole('button', { name: `Ban the author of ${short}` }).click();
  await expect(page.locator('#reports-message')).toHaveText(`Banned ${uploader.pubkey.slice(0, 8)}…${uploader.pubkey.slice(-6)} (their future writes).`);
  expect((await fetch(`${HTTP()}/${sha}`)).status).toBe(404);
  expect((await api('GET', '/admin/v1/audit')).body.entries[0].action).toBe('report.ban');
  expect((await api('POST', '/admin/v1/rpc', { method: 'listbannedpubkeys', params: [] })).body.result.map((b) => b.pubkey)).toContain(uploader.pubkey);
});

test("a stranger's HTML, XHTML, SVG and text opened in the admin's tab run nothing: each is saved, not shown", async ({ page }, info) => {
  const key = await freshKey();
  const steal = "fetch('/stolen?' + sessionStorage.getItem('hearth-admin-token'))";
  const blobs = [
    ['text/html', `<!doctype html><title>x</title><script>${steal}</script>`],
    ['application/xhtml+xml', `<html xmlns="http://www.w3.org/1999/xhtml"><body><script>${steal}</script></body></html>`],
    ['image/svg+xml', `<svg xmlns="http://www.w3.org/2000/svg"><script>${steal}</script></svg>`],
    ['text/plain', `<script>${steal}</script>`],
  ];
  const shas = [];
  for (const [type, text] of blobs) {
    const body = Buffer.from(`${text}<!-- ${info.project.name} -->`);
    const sha = createHash('sha256').update(body).digest('hex');
    const now = Math.floor(Date.now() / 1000);
    const auth = finalizeEvent({ kind: 24242, created_at: now, content: 'Upload', tags: [['t', 'upload'], ['x', sha], ['expiration', String(now + 600)]] }, Buffer.from(key.secret, 'hex'));
    const put = await fetch(`${HTTP()}/upload`, {
      method: 'PUT',
      headers: { Authorization: `Nostr ${Buffer.from(JSON.stringify(auth)).toString('base64')}`, 'Content-Type': type },
      body,
    });
    expect(put.status).toBe(201);
    shas.push(sha);
  }
  const stolen = [];
  page.on('request', (r) => { if (r.url().includes('/stolen')) stolen.push(r.url()); });
  await signIn(page);
  for (const sha of shas) {
    // Opened in the admin's own tab: the browser saves the file and the page stays the admin's.
    const saved = page.waitForEvent('download');
    await page.goto(`${HTTP()}/${sha}`).catch((e) => expect(e.message).toContain('Download is starting'));
    expect((await saved).url()).toBe(`${HTTP()}/${sha}`);
  }
  // A round trip to the page: a script the blobs ran would have asked before this answers.
  expect(await page.evaluate(() => sessionStorage.getItem('hearth-admin-token'))).toBe(TOKEN());
  expect(stolen).toEqual([]);
});

test('members: a member added by npub with a note and removed; an invite created, listed and revoked', async ({ page }, info) => {
  const key = await freshKey();
  // Shown by the name of its profile (kind 0), not only its key.
  const profile = `${JSON.stringify({ kind: 0, content: JSON.stringify({ name: `Newcomer ${info.project.name}` }) })}\n`;
  await hearth(['publish', '--relay', HTTP().replace('http://', 'ws://'), '--key', key.secret], profile);
  await signIn(page);
  await view(page, 'Members');
  await page.getByLabel('Member pubkey').fill(key.npub);
  await page.getByLabel('Note', { exact: true }).fill('from the page');
  // In public mode the first member changes who may publish: the page says so and asks again.
  await expect(page.locator('#members-access')).toHaveText('access.mode is public: anyone publishes and reads. Adding a member makes only members publish.');
  await page.getByRole('button', { name: 'Add member' }).click();
  await expect(page.locator('#members-message')).toHaveText('access.mode is public: with a first member, only members may publish and every other key is refused (restricted:). Press Add member again to add it.');
  expect((await api('GET', '/admin/v1/members')).body.members).toEqual([]);
  await page.getByRole('button', { name: 'Add member' }).click();
  await expect(page.locator('#members-message')).toHaveText(/^Added /);
  await expect(page.locator('#members-access')).toHaveText('access.mode is public with a member list: only these 1 members publish; anyone reads.');
  const short = `${key.pubkey.slice(0, 8)}…${key.pubkey.slice(-6)}`;
  await expect(page.getByRole('button', { name: `Remove member ${short}` })).toBeVisible();
  const row = page.locator('#members tbody tr', { hasText: short });
  await expect(row).toContainText(`Newcomer ${info.project.name}`);
  // The key in the form people share (npub, encoded by the page; checked against nostr-tools').
  const npub = npubEncode(key.pubkey);
  await expect(row).toContainText(`${npub.slice(0, 10)}…${npub.slice(-6)}`);
  await expect(page.locator('#invite-new')).toBeHidden();
  const listed = (await api('GET', '/admin/v1/members')).body.members.find((m) => m.pubkey === key.pubkey);
  expect(listed).toEqual({ pubkey: key.pubkey, note: 'from the page', source: 'admin' });
  // The relay publishes its member list (access.publish_members), signed with its own key: an
  // implementation that is not hearth's (nostr-tools) verifies it.
  let list = await memberList();
  expect(verifyEvent(list)).toBe(true);
  expect(list.tags[0]).toEqual(['-']);
  expect(list.tags).toContainEqual(['member', key.pubkey]);
  await page.getByLabel('Uses', { exact: true }).fill('3');
  await page.getByLabel('Invite note').fill('for the meetup');
  await page.getByRole('button', { name: 'Create invite' }).click();
  await expect(page.locator('#members-message')).toHaveText(/^Invite created/);
  const code = await page.getByLabel('New invite code').textContent();
  expect(code).toMatch(/^[0-9a-f]{32}$/);
  const invite = (await api('GET', '/admin/v1/invites')).body.invites.find((i) => i.code === code);
  expect(invite).toMatchObject({ uses: 3, used: 0, note: 'for the meetup', usable: true });
  await expect(page.getByRole('button', { name: `Revoke invite ${code.slice(0, 8)}` })).toBeVisible();
  await expect(page.locator('#invites tbody tr', { hasText: code })).toContainText('open');
  await accessible(page, 'members');
  await page.screenshot({ path: join(SHOTS, `${info.project.name}-members.png`), fullPage: true });
  await page.getByRole('button', { name: `Revoke invite ${code.slice(0, 8)}` }).click();
  await expect(page.getByRole('button', { name: `Revoke invite ${code.slice(0, 8)}` })).toHaveCount(0);
  expect((await api('GET', '/admin/v1/invites')).body.invites.find((i) => i.code === code)).toBeUndefined();
  await page.getByRole('button', { name: `Remove member ${short}` }).click();
  await expect(page.getByRole('button', { name: `Remove member ${short}` })).toHaveCount(0);
  expect((await api('GET', '/admin/v1/members')).body.members.find((m) => m.pubkey === key.pubkey)).toBeUndefined();
  list = await memberList();
  expect(verifyEvent(list)).toBe(true);
  expect(list.tags).not.toContainEqual(['member', key.pubkey]);
  // The audit names the member it added and removed by its profile's name.
  await view(page, 'Audit');
  await expect(page.locator('#audit tbody tr', { hasText: 'member.remove' }).first()).toContainText(`Newcomer ${info.project.name}`);
});

test('store: the figures, and a compaction started from the page', async ({ page }, info) => {
  allowed = [/status of 409/];
  await signIn(page);
  await view(page, 'Store');
  const store = (await api('GET', '/admin/v1/store')).body;
  await expect(page.locator('#store-figures .figure', { hasText: 'Events' }).first().locator('dd')).toHaveText(String(store.events));
  await page.getByRole('button', { name: 'Compact now' }).click();
  await expect(page.locator('#store-message')).toHaveText(/^(A compaction has started\.|A compaction is already running\.)$/);
  await expect.poll(async () => (await api('GET', '/admin/v1/store')).body.last_compaction !== null, { timeout: 20_000 }).toBe(true);
  await accessible(page, 'store');
  await page.screenshot({ path: join(SHOTS, `${info.project.name}-store.png`), fullPage: true });
});

test('store: the sync peer, its last round, and a round started from the page', async ({ page }, info) => {
  const peer = process.env.HEARTH_PEER_WS;
  const sent = await publish(await freshKey(), 2, 'on the peer', peer);
  expect(sent.code).toBe(0);
  const before = (await api('GET', '/admin/v1/sync')).body.peers[0];
  expect(before).toMatchObject({ index: 0, url: peer, direction: 'down', filter: '{}', interval_secs: 3600 });
  await signIn(page);
  await view(page, 'Store');
  await expect(page.getByRole('heading', { name: 'Sync', level: 3 })).toBeVisible();
  const row = page.locator('#sync-peers tbody tr', { hasText: peer });
  await expect(row).toContainText('down');
  await expect(row).toContainText('3600 s');
  await page.getByRole('button', { name: `Sync now with ${peer}` }).click();
  await expect(page.locator('#sync-message')).toHaveText(`A round with ${peer} has started.`);
  await expect.poll(async () => (await api('GET', '/admin/v1/sync')).body.peers[0].rounds, { timeout: 20_000 }).toBeGreaterThan(before.rounds);
  const last = (await api('GET', '/admin/v1/sync')).body.peers[0].last_round;
  expect(last).toMatchObject({ ok: true, need: 2, fetched: 2, stored: 2, refused: 0 });
  // The page shows it on its next refresh.
  await expect(row).toContainText(/: have \d+, need 2, stored 2, published 0, refused 0/, { timeout: 15_000 });
  const ids = sent.lines.map((l) => l.id);
  const response = await fetch(`${HTTP()}/api/v1/query`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ filters: [{ ids }] }),
  });
  const { events } = await response.json();
  expect(events.map((e) => e.id).sort()).toEqual([...ids].sort());
  await accessible(page, 'store with sync');
  await page.screenshot({ path: join(SHOTS, `${info.project.name}-sync.png`), fullPage: true });
});

test('a 401 mid-session stops polling and asks to sign in again', async ({ page }) => {
  allowed = [/401/];
  // The page's timers run on Playwright's clock: the test moves time on instead of waiting.
  await page.clock.install();
  await signIn(page);
  await view(page, 'Store');
  await page.evaluate(() => sessionStorage.setItem('hearth-admin-token', 'revoked'));
  // The next refresh (every 5 s) meets the 401.
  await page.clock.runFor(5_000);
  await expect(page.getByRole('alert')).toHaveText('The relay did not accept the admin token. Sign in again.');
  await expect(page.getByLabel('Admin token')).toBeVisible();
  expect(await page.evaluate(() => sessionStorage.getItem('hearth-admin-token'))).toBeNull();
  // Polling stopped: three more refresh periods pass and no admin request is made.
  let requests = 0;
  page.on('request', (r) => { if (r.url().includes('/admin/v1/')) requests += 1; });
  await page.clock.runFor(15_000);
  // A round trip to the page: a request its timers made is reported before this answers.
  await page.evaluate(() => document.title);
  expect(requests).toBe(0);
});

test('a node that cannot reach its shared Redis says so in a banner on every view', async ({ page }, info) => {
  // A node of a cluster whose Redis is not there (nothing listens on the port).
  const port = await new Promise((ok) => {
    const probe = createServer().listen(0, '127.0.0.1', () => { const p = probe.address().port; probe.close(() => ok(p)); });
  });
  const data = mkdtempSync(join(tmpdir(), 'hearth-admin-ui-redis-'));
  const child = spawn(process.env.HEARTH_BIN, [], {
    env: {
      ...process.env, HEARTH_SERVER__BIND: '127.0.0.1:0', HEARTH_STORAGE__DATA_DIR: data, HEARTH_ADMIN__TOKEN: TOKEN(),
      HEARTH_LIMITS__BACKEND: 'redis', HEARTH_LIMITS__REDIS_URL: `redis://127.0.0.1:${port}/0`, HEARTH_NODE__NAME: 'node-b',
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  try {
    let log = '';
    const addr = await new Promise((ok, fail) => {
      child.stderr.on('data', (chunk) => {
        log += chunk;
        const found = /listening on (\d+\.\d+\.\d+\.\d+:\d+)/.exec(log);
        if (found) ok(found[1]);
      });
      child.on('exit', (code) => fail(new Error(`the relay exited (${code}):\n${log}`)));
    });
    await page.goto(`http://${addr}/admin/`);
    await page.getByLabel('Admin token').fill(TOKEN());
    await page.getByRole('button', { name: 'Sign in' }).click();
    const banner = page.getByRole('alert').filter({ hasText: 'The shared Redis is unavailable' });
    await expect(banner).toContainText('node node-b bills quotas by its own limiter alone');
    await expect(banner).toContainText('limits.redis_unavailable = "local"');
    const figures = page.locator('#overview-figures');
    await expect(figures.locator('.figure', { hasText: 'Quota backend' }).locator('dd')).toHaveText('redis (unavailable)');
    await expect(figures.locator('.figure', { hasText: 'Node' }).locator('dd')).toHaveText('node-b');
    await view(page, 'Limits');
    await expect(banner).toBeVisible();
    await accessible(page, 'the Redis banner');
    await page.screenshot({ path: join(SHOTS, `${info.project.name}-redis-banner.png`), fullPage: true });
  } finally {
    child.kill('SIGTERM');
    await new Promise((ok) => child.once('exit', ok));
    rmSync(data, { recursive: true, force: true });
  }
});

test('keyboard alone: sign in, reach a view, look up a principal', async ({ page }) => {
  await page.goto(`${HTTP()}/admin/`);
  await page.getByLabel('Admin token').focus();
  await page.keyboard.type(TOKEN());
  await page.keyboard.press('Enter');
  await expect(page.getByRole('heading', { name: 'Overview' })).toBeVisible();
  // Tab to the Usage link and follow it.
  for (let i = 0; i < 12; i += 1) {
    await page.keyboard.press('Tab');
    if ((await page.evaluate(() => document.activeElement?.textContent)) === 'Usage') break;
  }
  expect(await page.evaluate(() => document.activeElement?.textContent)).toBe('Usage');
  await page.keyboard.press('Enter');
  await expect(page.getByRole('heading', { name: 'Usage', level: 2 })).toBeVisible();
  await page.keyboard.press('Tab');
  for (let i = 0; i < 12 && (await page.evaluate(() => document.activeElement?.id)) !== 'usage-who'; i += 1) {
    await page.keyboard.press('Tab');
  }
  await page.keyboard.type('127.0.0.1');
  await page.keyboard.press('Enter');
  await expect(page.locator('#usage-report').getByRole('heading', { level: 3 })).toHaveText('127.0.0.1');
});
