// Flotilla, unmodified (../shared/clients/flotilla/build), in Debian's Chromium, as the people of
// a community use it on hearth at its production quotas, behind a TLS front: joining a space by
// its address in each access mode, and who is offered "Create room". Each step is asserted on
// what the page shows.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, expect } from '@playwright/test';
import { addSpace, community, flotilla, joinAnswer, person, png, say, shot } from './flotilla.mjs';

flotilla();

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
    await operator.context.close().catch(() => {});
    await alice.context.close().catch(() => {});
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
    await operator.context.close().catch(() => {});
    await bob.context.close().catch(() => {});
    await place.stop();
  }
});

test('a members-write space: a member groups.create allows is offered "Create room" by the relay\'s 19004 and makes a room', async () => {
  const carol = await person('carol');
  // Production quotas but for uploads: 20,000 bytes a day, so one picture goes over.
  const place = await community({
    HEARTH_ACCESS__MODE: 'members-write',
    HEARTH_GROUPS__CREATE: 'members',
    HEARTH_LIMITS__HUMAN__UPLOAD_BYTES_PER_DAY: '20000',
  });
  const scratch = mkdtempSync(join(tmpdir(), 'hearth-flotilla-quota-'));
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
    // A picture over her day's upload quota: Flotilla shows the relay's sentence (inside the
    // JSON body it reads verbatim; hearth's X-Reason says the same).
    const big = join(scratch, 'scan.png');
    writeFileSync(big, png(120, 120, null));
    // Flotilla reads and hashes the picture before its PUT: on a loaded 2-core machine that has
    // taken over 30 s (the upload's own deadline is the test's).
    const refused = carol.page.waitForResponse(
      (r) => r.url() === `https://${place.host}/upload` && r.request().method() === 'PUT',
      { timeout: 90_000 },
    );
    const [chooser] = await Promise.all([
      carol.page.waitForEvent('filechooser'),
      carol.page.getByRole('button', { name: 'Add an image' }).click(),
    ]);
    await chooser.setFiles(big);
    const answer = await refused;
    const reason = 'invalid: the blob is larger than your daily upload quota of 19456 bytes';
    expect([answer.status(), await answer.headerValue('x-reason')]).toEqual([413, reason]);
    await expect(carol.page.getByRole('alert').filter({ hasText: reason })).toBeVisible();
    await shot(carol, 'over-quota');
    await shot(carol, 'member-room');
  } finally {
    await carol.context.close().catch(() => {});
    await place.stop();
    rmSync(scratch, { recursive: true, force: true });
  }
});
