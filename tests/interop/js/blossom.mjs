// Blossom against a client library hearth did not write: blossom-client-sdk (by Blossom's
// author, pinned in package-lock.json) uploads, checks, lists, downloads, mirrors and deletes
// against hearth untouched, signing its own kind 24242 authorizations through its own helpers.
// Usage: node blossom.mjs <hearth binary>. Starts its relays on free ports in temporary
// directories and kills them, pass or fail.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { finalizeEvent, generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import {
  Actions,
  createDeleteAuth,
  createDownloadAuth,
  createListAuth,
  createMirrorAuth,
  createUploadAuth,
  getBlobSha256,
} from 'blossom-client-sdk';
import { startHearth } from './harness.mjs';

const binary = process.argv[2];

/** Starts a relay with `env` and returns its HTTP address. */
const relay = async (env) => `http://${await startHearth(binary, env)}`;

let passed = 0;
const step = async (name, run) => {
  await run();
  passed += 1;
  console.log(`ok - ${name}`);
};

const alice = generateSecretKey();
const bob = generateSecretKey();
const signer = (sk) => async (draft) => finalizeEvent(draft, sk);

const members = getPublicKey(alice);
// A: members write (and upload), anyone reads. B: public. C: members only.
const a = await relay({ HEARTH_ACCESS__MODE: 'members-write', HEARTH_AUTH__MEMBERS: members });
const b = await relay({});
const c = await relay({ HEARTH_ACCESS__MODE: 'members-only', HEARTH_AUTH__MEMBERS: members });

const bytes = new TextEncoder().encode('a picture of a pizza, in bytes');
const blob = new Blob([bytes], { type: 'image/png' });
const sha256 = await getBlobSha256(blob);
let descriptor;

await step('uploadBlob: HEAD /upload asks for auth, the SDK signs, PUT stores it (201 descriptor)', async () => {
  descriptor = await Actions.uploadBlob(a, blob, { onAuth: (server, hash) => createUploadAuth(signer(alice), hash) });
  assert.equal(descriptor.sha256, sha256);
  assert.equal(descriptor.size, bytes.length);
  assert.equal(descriptor.type, 'image/png');
  assert.equal(descriptor.url, `${a}/${sha256}.png`);
  assert.ok(Number.isInteger(descriptor.uploaded));
});

await step('hasBlob and downloadBlob see exactly the bytes uploaded', async () => {
  assert.equal(await Actions.hasBlob(a, sha256), true);
  assert.equal(await Actions.hasBlob(a, '0'.repeat(64)), false);
  const response = await Actions.downloadBlob(a, sha256);
  assert.deepEqual(new Uint8Array(await response.arrayBuffer()), bytes);
  assert.equal(response.headers.get('content-type'), 'image/png');
});

await step('listBlobs lists the descriptor for its owner', async () => {
  const listed = await Actions.listBlobs(a, getPublicKey(alice), { onAuth: () => createListAuth(signer(alice)) });
  assert.deepEqual(listed, [descriptor]);
});

await step("a stranger's upload to a members relay is refused with the relay's words", async () => {
  const other = new Blob([new TextEncoder().encode('not a member')], { type: 'text/plain' });
  await assert.rejects(
    Actions.uploadBlob(a, other, { onAuth: (server, hash) => createUploadAuth(signer(bob), hash) }),
    (e) => e.status === 403 && e.message === 'restricted: only members of this relay may upload here',
  );
});

await step('mirrorBlob: a second hearth fetches the blob from the first and stores it', async () => {
  const mirrored = await Actions.mirrorBlob(b, descriptor, { onAuth: (server, hash) => createMirrorAuth(signer(bob), hash) });
  assert.equal(mirrored.sha256, sha256);
  assert.equal(mirrored.url, `${b}/${sha256}.png`);
  const response = await Actions.downloadBlob(b, sha256);
  assert.deepEqual(new Uint8Array(await response.arrayBuffer()), bytes);
});

await step('deleteBlob by its owner removes it', async () => {
  assert.equal(await Actions.deleteBlob(a, sha256, { onAuth: (server, hash) => createDeleteAuth(signer(alice), hash) }), true);
  assert.equal(await Actions.hasBlob(a, sha256), false);
});

await step('members only: downloadBlob is asked for auth and signs a get authorization for this server', async () => {
  await Actions.uploadBlob(c, blob, { onAuth: (server, hash) => createUploadAuth(signer(alice), hash) });
  await assert.rejects(Actions.downloadBlob(c, sha256, { auth: false }), /Authorization disabled/);
  const response = await Actions.downloadBlob(c, sha256, { onAuth: (server) => createDownloadAuth(signer(alice), server) });
  assert.deepEqual(new Uint8Array(await response.arrayBuffer()), bytes);
  await assert.rejects(
    Actions.downloadBlob(c, sha256, { onAuth: (server) => createDownloadAuth(signer(bob), server) }),
    (e) => e.status === 403,
  );
});

await step('uploadMedia (BUD-05): a photo comes back without its place, under the hash of what is served', async () => {
  const photo = new Uint8Array(readFileSync(new URL('../../fixtures/media/gps.jpg', import.meta.url)));
  const sent = new Blob([photo], { type: 'image/jpeg' });
  const media = await Actions.uploadMedia(b, sent, {
    onAuth: (server, hash) => createUploadAuth(signer(bob), hash, { type: 'media' }),
  });
  assert.notEqual(media.sha256, await getBlobSha256(sent));
  const served = new Uint8Array(await (await Actions.downloadBlob(b, media.sha256)).arrayBuffer());
  assert.equal(media.size, served.length);
  assert.equal(media.sha256, await getBlobSha256(new Blob([served])));
  const text = Buffer.from(served).toString('latin1');
  for (const secret of ['HEARTH-SERIAL-4711', 'HearthCam', 'hearth-secret-place']) {
    assert.ok(Buffer.from(photo).toString('latin1').includes(secret));
    assert.ok(!text.includes(secret), `${secret} is served`);
  }
});

await step('reportBlobs (BUD-09): the report is taken; a report of a blob not held is refused', async () => {
  const report = finalizeEvent(
    { kind: 1984, created_at: Math.floor(Date.now() / 1000), tags: [['x', sha256, 'spam']], content: '' },
    alice,
  );
  const errors = [];
  const results = await Actions.reportBlobs([b], report, { onError: (server, e) => errors.push(e.message) });
  assert.equal(results.get(b), true, errors.join());
  const elsewhere = await Actions.reportBlobs([a], report, { onError: (server, e) => errors.push(e.message) });
  assert.equal(elsewhere.get(a), undefined);
  assert.match(errors.at(-1), new RegExp(`no blob ${sha256} is held here`));
});

console.log(`${passed} Blossom checks passed against blossom-client-sdk`);
process.exit(0);
