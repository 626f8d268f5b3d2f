// Flotilla, unmodified (../shared/clients/flotilla/build), in Debian's Chromium, as the people of
// a community use it on hearth at its production quotas (the defaults, not `hearth dev`'s),
// behind a TLS front: each step is asserted on what the page shows.
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, expect, chromium } from '@playwright/test';
import { generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import { nsecEncode } from 'nostr-tools/nip19';
import { startRelay, stopRelay, tlsFront, serveBuild, chromiumOptions, SHARED } from './harness.mjs';

const BUILD = join(SHARED, 'flotilla', 'build');
const SHOTS = join(import.meta.dirname, 'screenshots');
mkdirSync(SHOTS, { recursive: true });

let app;
let browser;
test.beforeAll(async () => {
  app = await serveBuild(BUILD);
  browser = await chromium.launch(chromiumOptions());
});
test.afterAll(async () => {
  await browser?.close();
  app?.server.close();
});

/**
 * A hearth for one test, behind its TLS front, with `env` (HEARTH_… settings); `space` is the
 * address a person types into Flotilla. `stop()` ends both.
 */
async function community(env) {
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
  return {
    space,
    host: `127.0.0.1:${front.port}`,
    relay,
    admin,
    stop: async () => {
      front.close();
      await stopRelay(relay);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A person: a key, a browser context of their own, logged in to Flotilla with "Log in with Key". */
async function person(name) {
  const secret = generateSecretKey();
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  const frames = [];
  page.on('websocket', (ws) => {
    ws.on('framesent', (f) => frames.push(`> ${f.payload}`));
    ws.on('framereceived', (f) => frames.push(`< ${f.payload}`));
  });
  await page.goto(app.url);
  await page.getByText('Log in', { exact: true }).click();
  await page.getByRole('button', { name: 'Log in with Key' }).click();
  await page.getByPlaceholder('nsec1...').fill(nsecEncode(secret));
  await page.getByRole('button', { name: 'Log in', exact: true }).click();
  await expect(page.getByRole('button', { name: /Add a space/ })).toBeVisible();
  return { name, secret, pubkey: getPublicKey(secret), context, page, frames };
}

/** Adds the space at `space` the way Flotilla offers first: "Add a space", "Join a space", its address or link. */
async function addSpace(who, space) {
  const { page } = who;
  await page.getByRole('button', { name: /Add a space/ }).click();
  await page.getByRole('button', { name: /Join a space/ }).click();
  await page.locator('input[type=text]').last().fill(space);
  await page.getByRole('button', { name: /Join Space/i }).click();
}

async function shot(who, what) {
  await who.page.screenshot({ path: join(SHOTS, `flotilla-${what}-${who.name}.png`) });
}

/** Sends `text` in the open room through Flotilla's composer. */
async function say(who, text) {
  const box = who.page.locator('[contenteditable=true][role=textbox]').last();
  await box.click();
  await box.pressSequentially(text);
  await box.press('Enter');
}

test('a public space: joined by its address, the operator creates a room, others see no button, messages go live both ways', async () => {
  const operator = await person('operator');
  const place = await community({ HEARTH_ADMIN__PUBKEYS: operator.pubkey });
  const alice = await person('alice');
  try {
    // Joining by the relay's address: the NIP-43 join (claim "") is accepted on a public relay.
    await addSpace(operator, place.space);
    await expect(operator.page.getByText('Welcome to the space!')).toBeVisible();
    expect(await joinAnswer(operator)).toEqual([true, '']);
    // The operator is a NIP-86 admin: "Create room", and Flotilla's own form makes the room.
    await operator.page.getByText('Create room').click();
    await operator.page.locator('input[type=text]').first().fill('general');
    await operator.page.getByRole('button', { name: 'Create Room', exact: true }).click();
    await expect(operator.page.getByText('general').first()).toBeVisible();
    await shot(operator, 'room-created');

    // A newcomer joins by address and finds the room at once; no "Create room" for them.
    await addSpace(alice, place.space);
    await expect(alice.page.getByText('Welcome to the space!')).toBeVisible();
    await expect(alice.page.getByText('general').first()).toBeVisible();
    await expect(alice.page.getByText('Create room')).toHaveCount(0);
    expect(alice.frames.filter((f) => f.startsWith('< ["NEG-ERR"'))).toEqual([]);

    // Live messages both ways.
    await operator.page.getByText('general').first().click();
    await alice.page.getByText('general').first().click();
    await say(operator, 'Welcome, everyone');
    await expect(alice.page.getByText('Welcome, everyone')).toBeVisible();
    await say(alice, 'Glad to be here');
    await expect(operator.page.getByText('Glad to be here')).toBeVisible();
    await shot(alice, 'conversation');
    await shot(operator, 'conversation');
  } finally {
    await operator.context.close();
    await alice.context.close();
    await place.stop();
  }
});

test('a members-only space: a join without a code is refused in words, an invite link lets the person in', async () => {
  const operator = await person('operator');
  const place = await community({ HEARTH_ADMIN__PUBKEYS: operator.pubkey, HEARTH_ACCESS__MODE: 'members-only' });
  const bob = await person('bob');
  try {
    // Without a code: Flotilla shows its refusal and bob is not in.
    await addSpace(bob, place.space);
    expect(await joinAnswer(bob)).toEqual([
      false,
      'restricted: only members publish here: join with an invite code from a member',
    ]);
    // Flotilla's own words for a refusal that names an invite code.
    await expect(bob.page.getByText('join request rejected')).toBeVisible();
    await expect(bob.page.getByText('Welcome to the space!')).toHaveCount(0);
    await shot(bob, 'refused');

    // The operator is an admin, so the relay lets it in, and its "Create Invite" gets a code.
    const added = await place.admin('PUT', `/admin/v1/members/${operator.pubkey}`, { note: 'operator' });
    expect(added.status).toBe(200);
    await addSpace(operator, place.space);
    await expect(operator.page.getByText('Welcome to the space!')).toBeVisible();
    await operator.page.getByText(place.host).first().click();
    await operator.page.getByText('Create Invite').click();
    const linkOf = () => operator.page.locator('input').evaluateAll((els) => els.map((e) => e.value).find((v) => v.includes('/join?r=')));
    await expect.poll(linkOf).toContain('&c=');
    const invite = await linkOf();
    await operator.page.getByRole('button', { name: 'Done' }).click();

    // Bob pastes the link into the same form ("Join a Space" takes an address or a link): a
    // member now.
    await bob.page.locator('input[type=text]').last().fill(invite);
    await bob.page.getByRole('button', { name: /Join Space/i }).click();
    await expect(bob.page.getByText('Welcome to the space!')).toBeVisible();
    const members = await place.admin('GET', '/admin/v1/members');
    expect(members.body.members.map((m) => m.pubkey)).toContain(bob.pubkey);
    await shot(bob, 'joined');
  } finally {
    await operator.context.close();
    await bob.context.close();
    await place.stop();
  }
});

test('a members-write space: a member groups.create allows is offered "Create room" by the relay\'s 19004 and makes a room', async () => {
  const carol = await person('carol');
  const place = await community({ HEARTH_ACCESS__MODE: 'members-write', HEARTH_GROUPS__CREATE: 'members' });
  try {
    const added = await place.admin('PUT', `/admin/v1/members/${carol.pubkey}`, { note: 'carol' });
    expect(added.status).toBe(200);
    // Her join: she is a member already, which the relay says (OK true, a duplicate).
    await addSpace(carol, place.space);
    await expect(carol.page.getByText('Welcome to the space!')).toBeVisible();
    expect(await joinAnswer(carol)).toEqual([true, 'duplicate: you are already a member']);
    // Not an admin (NIP-86 says 401): the button comes from the relay's kind 19004 naming her.
    await expect(carol.page.getByText('Create room')).toBeVisible();
    expect(carol.frames.some((f) => f.startsWith('< ["EVENT"') && f.includes('"kind":19004') && f.includes(carol.pubkey))).toBe(true);
    await carol.page.getByText('Create room').click();
    await carol.page.locator('input[type=text]').first().fill('book club');
    await carol.page.getByRole('button', { name: 'Create Room', exact: true }).click();
    await carol.page.getByText('book club').first().click();
    await say(carol, 'First meeting on Friday');
    await expect(carol.page.getByText('First meeting on Friday')).toBeVisible();
    const groups = await place.admin('GET', '/admin/v1/groups');
    expect(groups.body.groups.map((g) => g.name)).toEqual(['book club']);
    await shot(carol, 'member-room');
  } finally {
    await carol.context.close();
    await place.stop();
  }
});

/** The relay's answer (`[accepted, message]`) to the first join request (28934) `who`'s page sent, waited for. */
async function joinAnswer(who) {
  const answer = () => {
    const sent = who.frames
      .filter((f) => f.startsWith('> ["EVENT"'))
      .map((f) => JSON.parse(f.slice(2))[1])
      .find((e) => e.kind === 28934);
    const ok = sent && who.frames
      .filter((f) => f.startsWith('< ["OK"'))
      .map((f) => JSON.parse(f.slice(2)))
      .find((frame) => frame[1] === sent.id);
    return ok && ok.slice(2);
  };
  await expect.poll(answer, { timeout: 15_000 }).toBeTruthy();
  return answer();
}
