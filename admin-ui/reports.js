// The Reports view: the review queue of NIP-56 reports (grouped by what they report, newest
// first), each with the reported event or blob (BUD-09), its author's or uploader's name, the
// report types and counts, and the decisions: dismiss, delete the event or blob, ban the key
// (this event or blob, every event and blob of theirs, or their future writes). The admin API's /admin/v1/reports only; every decision there is audited.

import { call, getAll } from './api.js';
import { el, fill, person, say, short, table, when } from './dom.js';

const $ = (id) => document.getElementById(id);

/** What was reported: the event's words, or the key. */
function what(r) {
  if (r.type === 'event') return el('span', {}, el('q', {}, (r.event.content || '').slice(0, 140)), ' ', el('code', {}, short(r.target)));
  if (r.type === 'blob') {
    const picture = /^image\//.test(r.blob.type) && r.blob.type !== 'image/svg+xml';
    return el('span', {},
      picture ? el('img', { src: `/${r.target}`, alt: `Reported blob ${short(r.target)}`, class: 'thumb', loading: 'lazy' }) : null,
      ' a blob (', r.blob.type, `, ${r.blob.size} bytes) `, el('code', {}, short(r.target)));
  }
  return el('span', {}, 'the key ', el('code', {}, short(r.target)));
}

const types = (r) => Object.entries(r.types).sort((a, b) => b[1] - a[1]).map(([t, n]) => `${t} ×${n}`).join(', ');

/** Fills the queue (every page). */
export async function loadReports(guarded) {
  await guarded(async () => {
    const reports = await getAll('/admin/v1/reports', 'reports', 500);
    const decide = (r, action, body, message) => guarded(async () => {
      await call('POST', `/admin/v1/reports/${r.target}/${action}`, body ? { body } : undefined);
      await loadReports(guarded);
      say($('reports-message'), message);
    }, $('reports-message'));
    table($('reports'), ['Reported', 'Author', 'Why', 'Reports', 'Latest', 'Decide'], reports.map((r) => {
      const label = short(r.target);
      const reach = el('select', { 'aria-label': `Ban reach for ${label}` },
        r.type === 'event' ? el('option', { value: 'event' }, 'this event') : null,
        r.type === 'blob' ? el('option', { value: 'event' }, 'this blob') : null,
        el('option', { value: 'events' }, 'all their events'),
        el('option', { value: 'writes' }, 'their future writes'));
      return [
        what(r), person(r.author), el('span', {}, types(r), r.comments.length ? el('br') : null, r.comments.join(' · ')),
        String(r.count), when(r.latest),
        el('span', { class: 'actions' },
          el('button', { type: 'button', 'aria-label': `Dismiss report of ${label}`, onclick: () => decide(r, 'dismiss', null, `Dismissed the reports of ${label}.`) }, 'Dismiss'),
          r.type === 'event'
            ? el('button', { type: 'button', class: 'danger', 'aria-label': `Delete reported event ${label}`, onclick: () => decide(r, 'delete', null, `Deleted ${label}; it cannot be sent again.`) }, 'Delete')
            : null,
          r.type === 'blob'
            ? el('button', { type: 'button', class: 'danger', 'aria-label': `Delete reported blob ${label}`, onclick: () => decide(r, 'delete', null, `Deleted the blob ${label}.`) }, 'Delete')
            : null,
          reach,
          el('button', {
            type: 'button', class: 'danger', 'aria-label': `Ban the author of ${label}`,
            onclick: () => decide(r, 'ban', { reach: reach.value }, `Banned ${short(r.author.pubkey)} (${reach.selectedOptions[0].textContent}).`),
          }, 'Ban')),
      ];
    }), 'No reports wait.');
  });
}
