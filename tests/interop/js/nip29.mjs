// NIP-29 against libraries hearth did not write: groups made with @welshman/util's room event
// templates (what Flotilla sends), read back with nostr-tools' nip29 module exactly as a client
// calls it (`fetchGroup…Event` through a SimplePool, which looks the relay's key up in NIP-11),
// and checked with both libraries' validators and parsers; a pin list (9010 → the relay's 39005). Usage: node nip29.mjs <hearth binary>.
// Starts its own relay on a free port in a temporary directory and kills it, pass or fail.
import assert from 'node:assert/strict';

import WebSocket from 'ws';
import { startHearth, until } from './harness.mjs';
import { finalizeEvent, generateSecretKey, getPublicKey, verifyEvent } from 'nostr-tools/pure';
import { Relay, useWebSocketImplementation } from 'nostr-tools/relay';
import { SimplePool, useWebSocketImplementation as usePoolWebSocket } from 'nostr-tools/pool';
import * as nip29 from 'nostr-tools/nip29';
import { makeRoomCreateEvent, makeRoomEditEvent, makeRoomJoinEvent, makeRoomMeta, readRoomMeta } from '@welshman/util';

useWebSocketImplementation(WebSocket);
usePoolWebSocket(WebSocket);

const binary = process.argv[2];

let passed = 0;
const step = async (name, run) => {
  await run();
  passed += 1;
  console.log(`ok - ${name}`);
};


try {
  const url = `ws://${await startHearth(binary)}`;

  /** A relay connection authenticated (NIP-42) as `sk`. */
  async function connect(sk) {
    const relay = await Relay.connect(url);
    await until('the AUTH challenge', () => relay.challenge);
    await relay.auth(async (template) => finalizeEvent(template, sk));
    return relay;
  }
  const sign = (template, sk) => finalizeEvent(template, sk);

  const alice = generateSecretKey();
  const bob = generateSecretKey();
  const room = makeRoomMeta({ name: 'Pizza Lovers', about: 'a group for people who love pizza', isClosed: true });
  const a = await connect(alice);

  // welshman dates its events by its own clock; ours are dated no earlier than its create.
  const created = sign(makeRoomCreateEvent(room), alice);
  const at = () => Math.max(Math.floor(Date.now() / 1000), created.created_at);
  await step('a room created and edited with welshman templates in the same second is accepted', async () => {
    assert.equal(await a.publish(created), '');
    assert.equal(await a.publish(sign(makeRoomEditEvent(room), alice)), '');
  });

  const pool = new SimplePool();
  const groupReference = { id: room.h, host: url };
  const info = await nip29.fetchRelayInformationByGroupReference(groupReference);

  await step("nostr-tools finds the group's metadata by NIP-11's pubkey, signed by the relay's own key", async () => {
    assert.equal(info.pubkey, info.self);
    assert.ok(info.supported_nips.includes(29));
    const event = await until('the metadata', async () => {
      const found = await nip29.fetchGroupMetadataEvent({ pool, groupReference }).catch(() => null);
      return found && found.tags.some(([t]) => t === 'name') ? found : null;
    });
    assert.equal(event.pubkey, info.self);
    assert.ok(nip29.validateGroupMetadataEvent(event));
    const metadata = nip29.parseGroupMetadataEvent(event);
    assert.deepEqual(
      { id: metadata.id, name: metadata.name, about: metadata.about, isClosed: metadata.isClosed, isPrivate: metadata.isPrivate },
      { id: room.h, name: 'Pizza Lovers', about: 'a group for people who love pizza', isClosed: true, isPrivate: undefined },
    );
    const welshman = readRoomMeta(event);
    assert.deepEqual([welshman.h, welshman.name, welshman.isClosed, welshman.isRestricted], [room.h, 'Pizza Lovers', true, false]);
  });

  await step('admins, members and roles parse with nostr-tools', async () => {
    const admins = nip29.parseGroupAdminsEvent(await nip29.fetchGroupAdminsEvent({ pool, groupReference }));
    assert.deepEqual(admins, [{ pubkey: getPublicKey(alice), label: 'admin', permissions: [] }]);
    const members = nip29.parseGroupMembersEvent(await nip29.fetchGroupMembersEvent({ pool, groupReference }));
    assert.deepEqual(members.map((m) => m.pubkey), [getPublicKey(alice)]);
    const roles = nip29.parseGroupRolesEvent(await nip29.fetchGroupRolesEvent({ pool, groupReference }));
    assert.deepEqual(roles.map((r) => r.name), ['admin', 'moderator']);
  });

  const b = await connect(bob);
  await step('a join without a code is told it waits for an admin; with an invite it is let in', async () => {
    await assert.rejects(b.publish(sign(makeRoomJoinEvent(room), bob)), /restricted: the group is closed: your join request waits for an admin to let you in/);
    const invite = { kind: 9009, created_at: at(), tags: [['h', room.h], ['code', 'slice']], content: '' };
    assert.equal(await a.publish(sign(invite, alice)), '');
    const join = makeRoomJoinEvent(room);
    join.tags.push(['code', 'slice']);
    join.created_at = Math.max(join.created_at, at());
    assert.equal(await b.publish(sign(join, bob)), '');
    const members = await until('bob among the members', async () => {
      const event = await nip29.fetchGroupMembersEvent({ pool, groupReference });
      const parsed = nip29.parseGroupMembersEvent(event);
      return parsed.length === 2 ? parsed : null;
    });
    assert.deepEqual(members.map((m) => m.pubkey).sort(), [getPublicKey(alice), getPublicKey(bob)].sort());
  });

  const message = sign({ kind: 9, created_at: at(), tags: [['h', room.h]], content: 'margherita' }, bob);
  await step('a member talks; a stranger may not forge the group metadata', async () => {
    assert.equal(await b.publish(message), '');
    const forged = sign(nip29.generateGroupMetadataEventTemplate({ relay: url, reference: groupReference, metadata: { id: room.h, pubkey: getPublicKey(bob), name: 'Mine' } }), bob);
    await assert.rejects(b.publish(forged), /restricted: kinds 39000-39009 are signed by this relay's own key/);
  });

  await step("the admin pins the member's message: nostr-tools reads the relay's 39005; the member may not pin", async () => {
    const pin = { kind: 9010, created_at: at(), tags: [['h', room.h], ['e', message.id]], content: '' };
    assert.equal(await a.publish(sign(pin, alice)), '');
    const pins = await until('the pin list', () => pool.get([url], { kinds: [39005], authors: [info.self], '#d': [room.h] }));
    assert.deepEqual(pins.tags, [['d', room.h], ['e', message.id]]);
    assert.ok(verifyEvent(pins));
    const mine = { kind: 9010, created_at: at(), tags: [['h', room.h]], content: '' };
    await assert.rejects(b.publish(sign(mine, bob)), /restricted: only the group's admins and moderators may pin events/);
  });

  pool.close([url]);
  a.close();
  b.close();
  console.log(`${passed} passed, 0 failed`);
} catch (error) {
  console.error(error);
  console.log(`${passed} passed, 1 failed`);
  process.exitCode = 1;
}
// The relay's pipes and the pool's timers would keep Node running: end here, the relay with it.
process.exit();
