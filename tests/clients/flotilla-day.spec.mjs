// A community's day in Flotilla, unmodified, on one hearth at its production quotas behind a TLS
// front: the operator and two people in a public space. A private room stays out of a
// stranger's sight; a picture goes over Blossom; a reaction; a thread and a reply; a person joins
// a room's member list and leaves it; and the operator moderates from the client: removes a
// member, deletes a message, bans a key, renames the space (NIP-86 and NIP-29). Each step is
// asserted on what the pages show and on what the relay holds.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, expect } from '@playwright/test';
import { npubEncode } from 'nostr-tools/nip19';
import { addSpace, community, flotilla, person, png, say, shot } from './flotilla.mjs';
import { answerTo, sentEvent } from './harness.mjs';

flotilla();

/** The message of the open room that shows `text`, as Flotilla lists it (a button per message). */
const message = (who, text) => who.page.getByRole('button', { name: new RegExp(text) }).last();

/** Opens the menu Flotilla shows over `text`'s message on hover: its buttons, left to right. */
async function hoverMenu(who, text) {
  const row = message(who, text);
  await row.hover();
  return row.locator('button.join-item');
}

/** The group the relay holds under `name`, with its members, through the admin API. */
async function room(place, name) {
  const list = await place.admin('GET', '/admin/v1/groups');
  const found = list.body.groups.find((g) => g.name === name);
  return found && (await place.admin('GET', `/admin/v1/groups/${encodeURIComponent(found.id)}`)).body;
}
const memberKeys = async (place, name) => ((await room(place, name))?.members ?? []).map((m) => m.pubkey).sort();

/** The check boxes of Flotilla's "Create a Room" form, in the order it shows them. */
const ROOM_FLAGS = [
  'Only allow members to send messages',
  'Only allow members to read messages',
  'Hide this group from non-members',
  'Ignore requests to join',
];

/** Creates a room from Flotilla's "Create room" form; `flags` are the form's check boxes to tick. */
async function createRoom(who, name, flags = []) {
  await who.page.getByRole('button', { name: 'Create room', exact: true }).click();
  await who.page.locator('input[type=text]').first().fill(name);
  for (const flag of flags) await who.page.getByRole('checkbox').nth(ROOM_FLAGS.indexOf(flag)).check();
  const create = who.page.getByRole('button', { name: 'Create Room', exact: true });
  await create.click();
  await expect(create).toHaveCount(0);
  await expect(who.page.getByRole('link', { name })).toBeVisible();
}

/** `who`'s "Room information" dialog for the open room. */
const roomInfo = (who) => who.page.getByRole('button', { name: 'Room information' }).click();

test('a day in a public space: a private room, a picture, a reaction, a thread, a member list; the operator removes, deletes, bans and renames', async () => {
  const operator = await person('operator');
  const place = await community({ HEARTH_ADMIN__PUBKEYS: operator.pubkey });
  const alice = await person('alice');
  const bob = await person('bob');
  const scratch = mkdtempSync(join(tmpdir(), 'hearth-flotilla-day-'));
  try {
    await addSpace(operator, place.space);
    await expect(operator.page.getByText('Welcome to the space!')).toBeVisible();
    await createRoom(operator, 'general');
    // A room only its members read, hidden from everyone else: the operator talks in it.
    await createRoom(operator, 'staff', ['Only allow members to read messages', 'Hide this group from non-members']);
    await operator.page.getByRole('link', { name: 'staff' }).click();
    await say(operator, 'the spare keys are under the mat');
    await expect(operator.page.getByText('the spare keys are under the mat')).toBeVisible();
    const staff = await room(place, 'staff');
    expect([staff.private, staff.hidden]).toEqual([true, true]);
    await expect.poll(async () => (await place.stored({ kinds: [9], '#h': [staff.id] })).map((e) => e.content))
      .toEqual(['the spare keys are under the mat']);

    for (const who of [alice, bob]) {
      await addSpace(who, place.space);
      await expect(who.page.getByText('Welcome to the space!')).toBeVisible();
      await expect(who.page.getByRole('link', { name: 'general' })).toBeVisible();
      await who.page.getByRole('link', { name: 'general' }).click();
    }
    // The strangers are listed "general" only; nothing of "staff" ever reached their pages.
    for (const who of [alice, bob]) {
      await expect(who.page.getByRole('link', { name: 'staff' })).toHaveCount(0);
      expect(who.frames.filter((f) => f.includes('spare keys') || f.includes(staff.id))).toEqual([]);
    }

    // Talk, a picture over Blossom, and a reaction.
    await operator.page.getByRole('link', { name: 'general' }).click();
    await say(operator, 'Good morning, neighbours');
    await expect(alice.page.getByText('Good morning, neighbours')).toBeVisible();
    await say(bob, 'Morning! Bob from number 12');
    await expect(operator.page.getByText('Morning! Bob from number 12')).toBeVisible();
    const picture = join(scratch, 'garden.png');
    writeFileSync(picture, png(64, 48, [60, 140, 70]));
    const [chooser] = await Promise.all([
      alice.page.waitForEvent('filechooser'),
      alice.page.getByRole('button', { name: 'Add an image' }).click(),
    ]);
    // Flotilla uploads the picture to the space's relay as soon as it is attached (BUD-02).
    const uploaded = alice.page.waitForResponse((r) => r.url() === `https://${place.host}/upload` && r.request().method() === 'PUT');
    await chooser.setFiles(picture);
    expect((await uploaded).status()).toBe(201);
    const composer = alice.page.locator('[contenteditable=true][role=textbox]').last();
    await expect(composer).toContainText('garden.png');
    await composer.click();
    await composer.press('Enter');
    const shown = bob.page.locator(`img[src^="https://${place.host}/"]`);
    await expect(shown).toBeVisible();
    expect(await shown.evaluate((img) => [img.complete, img.naturalWidth, img.naturalHeight])).toEqual([true, 64, 48]);
    const sha = /([0-9a-f]{64})/.exec(await shown.getAttribute('src'))[1];
    const blobs = (await place.admin('GET', '/admin/v1/media')).body.blobs.map((b) => b.sha256);
    expect(blobs).toEqual([sha]);
    await shot(bob, 'picture');

    const [, emoji] = await hoverMenu(bob, 'Good morning, neighbours').then((b) => b.all());
    await emoji.click();
    await bob.page.getByRole('combobox', { name: 'Search' }).fill('thumbs up');
    await bob.page.getByRole('menuitem', { name: /thumbs up/i }).first().click();
    const morning = sentEvent(operator.frames, (e) => e.content === 'Good morning, neighbours');
    await expect.poll(async () => (await place.stored({ kinds: [7], '#e': [morning.id] })).map((e) => [e.pubkey, e.content.slice(0, 2)]))
      .toEqual([[bob.pubkey, '👍']]);
    await expect(operator.page.getByRole('button', { name: new RegExp(`^${shortName(bob)} reacted 👍`) })).toBeVisible();
    await shot(operator, 'reaction');

    // A thread (kind 11) the operator starts from the space's Threads page, and Alice's reply
    // (kind 1111) from hers: Flotilla lists "Threads" once the space holds one.
    await operator.page.goto(new URL(`/spaces/${encodeURIComponent(place.host)}/threads`, operator.page.url()).href);
    await operator.page.getByRole('button', { name: 'Create a Thread' }).click();
    await operator.page.getByPlaceholder('What is this thread about?').fill('Seed swap');
    const body = operator.page.locator('[contenteditable=true][role=textbox]').last();
    await body.click();
    await body.pressSequentially('Bring your spare seeds on Saturday');
    await operator.page.getByRole('button', { name: 'Create Thread' }).click();
    await expect(operator.page.getByText('Seed swap').first()).toBeVisible();
    await alice.page.getByRole('link', { name: 'Threads' }).click();
    await alice.page.getByText('Seed swap').first().click();
    await alice.page.getByRole('button', { name: 'Reply to thread' }).click();
    const reply = alice.page.locator('[contenteditable=true][role=textbox]').last();
    await reply.click();
    await reply.pressSequentially('I have bean seeds');
    await alice.page.getByRole('button', { name: 'Post Reply' }).click();
    await operator.page.getByText('Seed swap').first().click();
    await expect(operator.page.getByText('I have bean seeds')).toBeVisible();
    const [thread] = await place.stored({ kinds: [11] });
    expect([thread.pubkey, thread.content, thread.tags.find((t) => t[0] === 'title')?.[1]])
      .toEqual([operator.pubkey, 'Bring your spare seeds on Saturday', 'Seed swap']);
    const [answer] = await place.stored({ kinds: [1111] });
    expect([answer.pubkey, answer.content, answer.tags.some((t) => t[0] === 'E' && t[1] === thread.id)])
      .toEqual([alice.pubkey, 'I have bean seeds', true]);
    await shot(operator, 'thread');
    for (const who of [operator, alice]) await who.page.getByRole('link', { name: 'general' }).click();

    // A room only its members write to: Flotilla tells Alice so and offers "Ask to Join" (a 9021,
    // the relay's 9000 for a room that is not closed); then she posts.
    await createRoom(operator, 'notices', ['Only allow members to send messages']);
    await alice.page.getByRole('link', { name: 'notices' }).click();
    await expect(alice.page.getByText('Only members are allowed to post to this room.')).toBeVisible();
    await alice.page.getByRole('button', { name: 'Ask to Join' }).click();
    await expect.poll(() => memberKeys(place, 'notices')).toEqual([operator.pubkey, alice.pubkey].sort());
    await say(alice, 'Bins go out on Tuesday');
    await operator.page.getByRole('link', { name: 'notices' }).click();
    await expect(operator.page.getByText('Bins go out on Tuesday')).toBeVisible();
    await shot(alice, 'members-write-room');
    for (const who of [operator, alice]) await who.page.getByRole('link', { name: 'general' }).click();

    // Alice joins the room's member list (9021; the relay's 9000) and leaves it (9022; its 9001).
    await roomInfo(alice);
    await alice.page.getByRole('button', { name: 'Join member list' }).click();
    await expect(alice.page.getByRole('button', { name: 'Leave member list' })).toBeVisible();
    await expect.poll(() => memberKeys(place, 'general')).toEqual([operator.pubkey, alice.pubkey].sort());
    await alice.page.getByRole('button', { name: 'Leave member list' }).click();
    // The relay lets her out (its 9001 and 39002); Flotilla no longer offers to leave. (It shows
    // "Membership pending" then, from her own join request it keeps, on any relay.)
    await expect.poll(() => memberKeys(place, 'general')).toEqual([operator.pubkey]);
    await expect(alice.page.getByRole('button', { name: 'Leave member list' })).toHaveCount(0);
    await alice.page.keyboard.press('Escape');

    // Bob joins it; the operator removes him from the room's members (9001 from the client).
    await roomInfo(bob);
    await bob.page.getByRole('button', { name: 'Join member list' }).click();
    await expect(bob.page.getByRole('button', { name: 'Leave member list' })).toBeVisible();
    await bob.page.keyboard.press('Escape');
    await roomInfo(operator);
    await operator.page.getByRole('button', { name: 'View All' }).click();
    await expect.poll(() => memberKeys(place, 'general')).toEqual([operator.pubkey, bob.pubkey].sort());
    await operator.page.locator('div.card2').filter({ hasText: shortName(bob) }).locator('button').last().click();
    await operator.page.getByRole('button', { name: 'Remove Member' }).click();
    await operator.page.getByRole('button', { name: 'Confirm', exact: true }).click();
    await expect(operator.page.getByText('Member has successfully been removed!')).toBeVisible();
    await expect.poll(() => memberKeys(place, 'general')).toEqual([operator.pubkey]);
    await operator.page.keyboard.press('Escape');

    // Bob posts something the operator deletes from the client (NIP-86 banevent): the relay
    // serves it no more.
    await say(bob, 'cheap watches, click here');
    await expect(operator.page.getByText('cheap watches, click here')).toBeVisible();
    const spam = sentEvent(bob.frames, (e) => e.content === 'cheap watches, click here');
    expect((await place.stored({ ids: [spam.id] })).map((e) => e.content)).toEqual(['cheap watches, click here']);
    await (await hoverMenu(operator, 'cheap watches')).last().click();
    await operator.page.getByRole('button', { name: 'Delete Message' }).click();
    await operator.page.getByRole('button', { name: 'Confirm', exact: true }).click();
    await expect(operator.page.getByText('cheap watches, click here')).toHaveCount(0);
    await expect.poll(() => place.stored({ ids: [spam.id] })).toEqual([]);

    // The operator bans Bob from his profile (NIP-86 banpubkey): his next message fails, and the
    // relay says why.
    await operator.page.getByRole('button', { name: shortName(bob), exact: true }).first().click();
    await operator.page.locator('button.btn-circle.btn-ghost.btn-sm').last().click();
    await operator.page.getByRole('button', { name: 'Ban User' }).click();
    await operator.page.getByRole('button', { name: 'Confirm', exact: true }).click();
    await expect(operator.page.getByText('User has successfully been banned!')).toBeVisible();
    await say(bob, 'am I still here?');
    await expect(bob.page.getByText('Failed to send!')).toBeVisible();
    const refused = sentEvent(bob.frames, (e) => e.content === 'am I still here?');
    expect(answerTo(bob.frames, refused.id)).toEqual([false, 'blocked: this pubkey is banned from this relay']);
    await shot(bob, 'banned');

    // The operator renames the space (NIP-86 changerelayname): NIP-11 says the new name.
    await operator.page.keyboard.press('Escape');
    await operator.page.getByRole('button', { name: /^hearth / }).click();
    await operator.page.getByRole('button', { name: 'Space Information' }).click();
    await operator.page.getByRole('button', { name: 'Edit' }).click();
    await operator.page.locator('input[type=text]').first().fill('Riverside Commons');
    await operator.page.getByRole('button', { name: 'Save Changes' }).click();
    await expect(operator.page.getByText('Your changes have been saved!')).toBeVisible();
    const info = await fetch(`http://${place.relay.addr}/`, { headers: { Accept: 'application/nostr+json' } }).then((r) => r.json());
    expect(info.name).toBe('Riverside Commons');
    await shot(operator, 'renamed');
  } finally {
    for (const who of [operator, alice, bob]) await who.context.close().catch(() => {});
    await place.stop();
    rmSync(scratch, { recursive: true, force: true });
  }
});

/** How Flotilla names a person without a profile: their npub's first 8 and last 5 characters. */
function shortName(who) {
  const npub = npubEncode(who.pubkey);
  return `${npub.slice(0, 8)}…${npub.slice(-5)}`;
}
