// Chachi (NDK-based), unmodified (../shared/clients/chachi/build), in Debian's Chromium, on hearth
// at its production quotas behind a TLS front. Chachi always writes `wss://` and drops ports from
// some links, so hearth's front listens on port 443 of 127.0.0.2; its one discovery relay,
// purplepag.es, is mapped by Chromium to a stand-in (a second hearth, behind a front on port 443
// of 127.0.0.3). People log in with a NIP-07 signer the test gives the page (Chachi's own nsec
// login does not finish offline). Each step is asserted on what the page shows and what the
// relay holds.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, expect, chromium } from '@playwright/test';
import { finalizeEvent, generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import { startRelay, stopRelay, tlsFront, serveBuild, chromiumOptions, SHARED, exported, sentEvent } from './harness.mjs';

const BUILD = join(SHARED, 'chachi', 'build');
const HOST = '127.0.0.2';
const DISCOVERY = '127.0.0.3';

test.skip(!existsSync(BUILD), `the Chachi build is not at ${BUILD}`);

let app;
let browser;
let discovery;
let scratch;
test.beforeAll(async () => {
  scratch = mkdtempSync(join(tmpdir(), 'hearth-chachi-'));
  app = await serveBuild(BUILD);
  const front = await tlsFront(scratch, 443, DISCOVERY);
  const relay = await startRelay({});
  front.target = relay.addr;
  discovery = { front, relay };
  browser = await chromium.launch(chromiumOptions([`--host-resolver-rules=MAP purplepag.es ${DISCOVERY}`]));
});
test.afterAll(async () => {
  await browser?.close();
  app?.server.close();
  discovery?.front.close();
  if (discovery) await stopRelay(discovery.relay);
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});

/** A person with a NIP-07 signer in their page, logged in to Chachi through "Browser extension". */
async function person(name) {
  const secret = generateSecretKey();
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, serviceWorkers: 'block' });
  await context.exposeBinding('hearthSigner', (_, op, template) => (op === 'pubkey' ? getPublicKey(secret) : finalizeEvent(template, secret)));
  await context.addInitScript(() => {
    window.nostr = {
      getPublicKey: () => window.hearthSigner('pubkey'),
      signEvent: (template) => window.hearthSigner('sign', template),
      getRelays: async () => ({}),
    };
  });
  const page = await context.newPage();
  const frames = [];
  page.on('websocket', (ws) => {
    if (!ws.url().startsWith(`wss://${HOST}`)) return;
    ws.on('framesent', (f) => frames.push(`> ${f.payload}`));
    ws.on('framereceived', (f) => frames.push(`< ${f.payload}`));
  });
  await page.goto(app.url);
  await page.getByRole('button', { name: 'Get started' }).click();
  await page.getByRole('button', { name: 'Connect' }).first().click();
  await expect(page.getByRole('button', { name: 'New group' })).toBeVisible();
  return { name, pubkey: getPublicKey(secret), context, page, frames };
}

/**
 * Waits until the clock is past the second `event` is dated in, as a person's next message is:
 * Chachi asks again from the second after the newest event it holds (`since` + 1), so an event
 * dated in that same second would be missed by it, on any relay.
 */
async function nextSecond(event) {
  expect(event).toBeTruthy();
  await expect.poll(() => Math.floor(Date.now() / 1000)).toBeGreaterThan(event.created_at);
}

/** The open group's chat, as `who` sees it. */
const chat = (who) => who.page.getByRole('tabpanel', { name: 'Chat' });

/** Sends `text` through Chachi's composer in the open group. */
async function say(who, text) {
  const box = who.page.getByRole('textbox', { name: 'Message' });
  await box.fill(text);
  await box.press('Enter');
}

test('a group made on hearth from Chachi: found by its link, joined, talked in, quoted, posted in, reacted to, renamed; a visitor invited and kicked; the neighbour leaves', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'hearth-chachi-community-'));
  const front = await tlsFront(dir, 443, HOST);
  const relay = await startRelay({ HEARTH_SERVER__PUBLIC_URL: `wss://${HOST}`, HEARTH_ADMIN__TOKEN: 'clients-token' });
  front.target = relay.addr;
  const admin = async (path) => (await fetch(`http://${relay.addr}${path}`, { headers: { Authorization: 'Bearer clients-token' } })).json();
  const stored = (filter) => exported(relay.addr, 'clients-token', filter);
  const organiser = await person('organiser');
  const neighbour = await person('neighbour');
  try {
    // Chachi's "New group" form on a custom relay: it sends the 9007 before it answers AUTH.
    await organiser.page.getByRole('button', { name: 'New group' }).click();
    await organiser.page.getByText('Create a moderated group').click();
    await organiser.page.getByRole('textbox', { name: 'Name' }).fill('Allotment');
    await organiser.page.getByRole('textbox', { name: 'About' }).fill('the garden plots by the river');
    await organiser.page.getByRole('button', { name: 'Use custom relay' }).click();
    await organiser.page.getByRole('textbox', { name: 'wss://relay.example.com' }).fill(`wss://${HOST}`);
    await organiser.page.getByRole('button', { name: 'Create' }).click();
    await expect(organiser.page.getByRole('heading', { name: 'Allotment', level: 2 })).toBeVisible();
    const groups = (await admin('/admin/v1/groups')).groups;
    expect(groups.map((g) => [g.name, g.about])).toEqual([['Allotment', 'the garden plots by the river']]);
    const [{ id }] = groups;
    await say(organiser, 'Plot 4 has tomatoes');
    await expect(chat(organiser).getByText('Plot 4 has tomatoes')).toBeVisible();

    // The neighbour opens the group's link: the message is there, and "Join".
    await neighbour.page.goto(`${app.url}/${HOST}/${id}`);
    await expect(chat(neighbour).getByText('Plot 4 has tomatoes')).toBeVisible();
    await expect(neighbour.page.getByText('You are not a member of this group yet')).toBeVisible();
    await neighbour.page.getByRole('button', { name: 'Join' }).click();
    await expect(neighbour.page.getByRole('textbox', { name: 'Message' })).toBeVisible();
    await expect.poll(async () => (await admin(`/admin/v1/groups/${id}`)).members.map((m) => m.pubkey).sort())
      .toEqual([organiser.pubkey, neighbour.pubkey].sort());

    await say(neighbour, 'I can water it on Sunday');
    await expect(chat(organiser).getByText('I can water it on Sunday')).toBeVisible();
    await nextSecond(sentEvent(neighbour.frames, (e) => e.content === 'I can water it on Sunday'));
    await say(organiser, 'Thank you!');
    await expect(chat(neighbour).getByText('Thank you!')).toBeVisible();
    // A reaction from the button beside the message.
    const thanks = chat(neighbour).getByText('Thank you!');
    await thanks.hover();
    await neighbour.page.getByRole('button', { name: 'Add emoji reaction' }).last().click();
    await neighbour.page.getByRole('dialog').getByRole('button', { name: '👍' }).first().click();
    const thanked = sentEvent(organiser.frames, (e) => e.content === 'Thank you!');
    await expect.poll(async () => (await stored({ kinds: [7], '#e': [thanked.id] })).map((e) => [e.pubkey, e.content]))
      .toEqual([[neighbour.pubkey, '👍']]);
    await expect(chat(organiser).getByText('👍')).toBeVisible();

    // A reply quoting the message (from its menu), and a post (kind 11) from the Posts tab.
    await nextSecond(sentEvent(neighbour.frames, (e) => e.kind === 7));
    await chat(neighbour).getByText('Thank you!').click({ button: 'right' });
    await neighbour.page.getByRole('menuitem', { name: 'Reply' }).click();
    await say(neighbour, 'You are welcome');
    await expect(chat(organiser).getByText('You are welcome')).toBeVisible();
    const welcome = sentEvent(neighbour.frames, (e) => e.content === 'You are welcome');
    expect(welcome.tags.some((t) => ['q', 'e'].includes(t[0]) && t[1] === sentEvent(organiser.frames, (e) => e.content === 'Thank you!').id)).toBe(true);
    await neighbour.page.getByRole('tab', { name: 'Posts' }).click();
    await neighbour.page.getByRole('button', { name: 'Start a conversation' }).click();
    await neighbour.page.getByRole('textbox', { name: "What's on your mind?" }).fill('Who wants the spare compost bin?');
    await neighbour.page.getByRole('button', { name: 'Post' }).click();
    await expect.poll(async () => (await stored({ kinds: [11], '#h': [id] })).map((e) => [e.pubkey, e.content]))
      .toEqual([[neighbour.pubkey, 'Who wants the spare compost bin?']]);
    await organiser.page.getByRole('tab', { name: 'Posts' }).click();
    await expect(organiser.page.getByText('Who wants the spare compost bin?')).toBeVisible();
    for (const who of [organiser, neighbour]) await who.page.getByRole('tab', { name: 'Chat' }).click();

    // The organiser renames the group from its settings (a 9002): the relay's 39000 says so.
    await organiser.page.getByRole('link', { name: 'Group settings' }).click();
    await organiser.page.getByRole('textbox', { name: 'Group Name' }).fill('Allotment Society');
    await organiser.page.getByRole('button', { name: 'Save Information' }).click();
    await expect.poll(async () => (await admin(`/admin/v1/groups/${id}`)).name).toBe('Allotment Society');
    await expect(organiser.page.getByRole('heading', { name: 'Allotment Society', level: 2 })).toBeVisible();

    // An invite code from the settings' Members tab (a 9009); a visitor joins by its URL (a 9021
    // naming the code); the organiser kicks them from their message's menu (a 9001).
    await organiser.page.getByRole('tab', { name: 'Members' }).click();
    await organiser.page.getByRole('button', { name: 'Create Invite Code' }).click();
    await organiser.page.getByRole('dialog').getByRole('button', { name: 'Create Invite Code' }).click();
    const created = organiser.page.getByRole('dialog', { name: 'Invite Code Created' });
    const inviteUrl = await created.getByRole('textbox').last().inputValue();
    const code = await created.getByRole('textbox').first().inputValue();
    expect(inviteUrl).toBe(`${app.url}/join/${code}/${HOST}/${id}`);
    await expect.poll(async () => (await admin(`/admin/v1/groups/${id}`)).invites.map((i) => i.code)).toEqual([code]);
    await organiser.page.keyboard.press('Escape');
    await organiser.page.goBack();
    await expect(chat(organiser).getByText('You are welcome')).toBeVisible();
    const visitor = await person('visitor');
    try {
      await visitor.page.goto(inviteUrl);
      await expect(visitor.page.getByText("You've been invited to join a group")).toBeVisible();
      await visitor.page.getByRole('button', { name: 'Join Group' }).click();
      await expect(visitor.page.getByRole('textbox', { name: 'Message' })).toBeVisible();
      await say(visitor, 'Selling cheap watches');
      await chat(organiser).getByText('Selling cheap watches').click({ button: 'right' });
      await organiser.page.getByRole('menuitem', { name: 'Kick' }).click();
      const asked = sentEvent(visitor.frames, (e) => e.kind === 9021);
      expect(asked.tags).toContainEqual(['code', code]);
      const members = async () => (await admin(`/admin/v1/groups/${id}`)).members.map((m) => m.pubkey).sort();
      await expect.poll(members).toEqual([organiser.pubkey, neighbour.pubkey].sort());
      const kicked = sentEvent(organiser.frames, (e) => e.kind === 9001);
      expect(kicked.tags).toContainEqual(['p', visitor.pubkey]);
    } finally {
      await visitor.context.close().catch(() => {});
    }

    // The neighbour leaves (a 9022; the relay's 9001).
    await neighbour.page.getByRole('button', { name: 'Group actions' }).click();
    await neighbour.page.getByRole('menuitem', { name: 'Leave' }).click();
    await neighbour.page.getByRole('alertdialog').getByRole('button', { name: 'Leave' }).click();
    await expect.poll(async () => (await admin(`/admin/v1/groups/${id}`)).members.map((m) => m.pubkey)).toEqual([organiser.pubkey]);
    // Chachi takes the person home.
    await expect(neighbour.page.getByRole('heading', { name: 'Home', level: 2 })).toBeVisible();

    // Nothing the relay told either of them was a refusal.
    for (const who of [organiser, neighbour]) {
      expect(who.frames.filter((f) => f.startsWith('< ["OK"') && f.includes(',false,'))).toEqual([]);
    }
  } finally {
    await organiser.context.close().catch(() => {});
    await neighbour.context.close().catch(() => {});
    front.close();
    await stopRelay(relay);
    rmSync(dir, { recursive: true, force: true });
  }
});
