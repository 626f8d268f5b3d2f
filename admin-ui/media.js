// The Media view: the relay's Blossom blobs (a thumbnail for pictures), who uploaded each (the
// name and picture of their kind 0), the bytes each key holds against the relay's bound, and a
// blob deleted for everyone. The admin API's /admin/v1/media only.

import { call, get } from './api.js';
import { bytes, el, figures, fill, person, say, short, table, when } from './dom.js';

const $ = (id) => document.getElementById(id);

/** A picture's thumbnail (this relay serves it, same origin); other types by name. */
function preview(blob) {
  if (!/^image\//.test(blob.type)) return el('span', { class: 'muted' }, blob.type.split('/')[0] || 'file');
  return el('img', { src: blob.path, alt: `Blob ${short(blob.sha256)}`, class: 'thumb', loading: 'lazy' });
}

/** Fills the view: the figures, the blobs (every page), the bytes per key. */
export async function loadMedia(guarded) {
  await guarded(async () => {
    const blobs = [];
    let after = '';
    let doc;
    for (;;) {
      doc = await get(`/admin/v1/media?limit=500${after ? `&after=${after}` : ''}`);
      blobs.push(...doc.blobs);
      if (!doc.next) break;
      after = doc.next;
    }
    figures($('media-figures'), [
      ['Media server', doc.enabled ? 'on' : 'off (media.enabled)'],
      ['Stored', `${bytes(doc.used_bytes)} of ${bytes(doc.max_total_bytes)}`],
      ['Blobs', String(blobs.length)],
    ]);
    table($('media-blobs'), ['Preview', 'Blob', 'Type', 'Size', 'Uploaded by', 'First uploaded', ''], blobs.map((b) => [
      preview(b),
      el('a', { href: b.path, class: 'wrap' }, el('code', {}, short(b.sha256))),
      b.type,
      bytes(b.size),
      el('span', { class: 'people' }, b.owners.map((o) => person(o))),
      when(b.uploaded),
      el('button', {
        type: 'button', class: 'danger', 'aria-label': `Delete blob ${short(b.sha256)}`,
        onclick: () => guarded(async () => {
          await call('DELETE', `/admin/v1/media/${b.sha256}`);
          await loadMedia(guarded);
          say($('media-message'), `Deleted ${short(b.sha256)} for every key that uploaded it.`);
        }, $('media-message')),
      }, 'Delete'),
    ]), 'No blobs yet.');
    table($('media-usage'), ['Uploader', 'Stored', 'Blobs'], doc.by_pubkey.map((p) => [
      person(p), bytes(p.bytes), String(p.blobs),
    ]), 'No uploads yet.');
  });
}
