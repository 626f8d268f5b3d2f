// The DM inbox against gift wraps built by a library hearth did not write: nostr-tools' nip17 and
// nip59 (pinned in package-lock.json) wrap real messages; hearth in members-write takes a wrap
// to a member from an authenticated stranger, serves it to the recipient only, lets the
// recipient delete it, and refuses it after. Usage: node nip17.mjs <hearth binary>.
import assert from 'node:assert/strict';

import WebSocket from 'ws';
import { finalizeEvent, generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import { Relay, useWebSocketImplementation } from 'nostr-tools/relay';
import * as nip17 from 'nostr-tools/nip17';
import * as nip59 from 'nostr-tools/nip59';
import { startHearth, until } from './harness.mjs';

useWebSocketImplementation(WebSocket);

const binary = process.argv[2];
const alice = generateSecretKey();
const bob = generateSecretKey();
const carol = generateSecretKey();
const url = `ws://${await startHearth(binary, { HEARTH_ACCESS__MODE: 'members-write', HEARTH_AUTH__MEMBERS: getPublicKey(bob) })}`;

let passed = 0;
const step = async (name, run) => {
  await run();
  passed += 1;
  console.log(`ok - ${name}`);
};

/** A relay connection authenticated (NIP-42) as `sk`. */
async function connect(sk) {
  const relay = await Relay.connect(url);
  await until('the AUTH challenge', () => relay.challenge);
  await relay.auth(async (template) => finalizeEvent(template, sk));
  return relay;
}

/** The events `filter` matches, read by `relay` until EOSE. */
function fetch(relay, filter) {
  return new Promise((ok) => {
    const got = [];
    const sub = relay.subscribe([filter], { onevent: (e) => got.push(e), oneose: () => { sub.close(); ok(got); } });
  });
}

const fromAlice = await connect(alice);
const wrap = nip17.wrapEvent(alice, { publicKey: getPublicKey(bob) }, 'hello bob, from outside');

await step("a stranger's gift wrap to a member is taken (its author is a one-time key)", async () => {
  assert.notEqual(wrap.pubkey, getPublicKey(alice));
  assert.equal(await fromAlice.publish(wrap), '');
});

await step('the recipient reads and unwraps it; another key is given nothing', async () => {
  const b = await connect(bob);
  const inbox = await fetch(b, { kinds: [1059], '#p': [getPublicKey(bob)] });
  assert.deepEqual(inbox.map((e) => e.id), [wrap.id]);
  const rumor = nip17.unwrapEvent(inbox[0], bob);
  assert.equal(rumor.content, 'hello bob, from outside');
  assert.equal(rumor.pubkey, getPublicKey(alice));
  const c = await connect(carol);
  assert.deepEqual(await fetch(c, { kinds: [1059], '#p': [getPublicKey(bob)] }), []);
  b.close();
  c.close();
});

await step('a wrap addressed to two keys is refused', async () => {
  const seal = nip59.createSeal(nip59.createRumor({ kind: 14, content: 'to both', tags: [] }, alice), alice, getPublicKey(bob));
  const twice = nip59.createWrap(seal, getPublicKey(bob));
  // Re-signed by its own one-time key with a second recipient.
  const key = generateSecretKey();
  const forged = finalizeEvent({ kind: 1059, created_at: twice.created_at, content: twice.content, tags: [['p', getPublicKey(bob)], ['p', getPublicKey(carol)]] }, key);
  await assert.rejects(fromAlice.publish(forged), /invalid: a gift wrap is addressed to exactly one recipient/);
});

await step('the recipient deletes it (NIP-09) and it never comes back', async () => {
  const b = await connect(bob);
  const deletion = finalizeEvent({ kind: 5, created_at: Math.floor(Date.now() / 1000), tags: [['e', wrap.id], ['k', '1059']], content: '' }, bob);
  assert.equal(await b.publish(deletion), '');
  assert.deepEqual(await fetch(b, { kinds: [1059], '#p': [getPublicKey(bob)] }), []);
  await assert.rejects(fromAlice.publish(wrap), /blocked: deleted by its recipient/);
  b.close();
});

fromAlice.close();
console.log(`${passed} NIP-17 inbox checks passed against nostr-tools' nip17/nip59`);
process.exit(0);
