// The Groups view: the relay's NIP-29 groups, one group's members (with their profile's name and
// picture) and the join requests waiting in it, approved or denied, and a group deleted. The
// admin API's /admin/v1/groups only; every change there is a moderation event the relay signs.

import { call, get, getAll } from './api.js';
import { el, fill, person, say, short, table, when } from './dom.js';

const $ = (id) => document.getElementById(id);
let shown = null;

/** `name` of `p` for a button's accessible name: its profile name, else its short key. */
const called = (p) => p.name || short(p.pubkey);

function flags(g) {
  return ['private', 'restricted', 'hidden', 'closed'].filter((f) => g[f]).join(', ') || 'open';
}

/** Runs `work`, then shows the list (and the group) again with `message`. */
async function act(guarded, work, message) {
  await guarded(async () => {
    await work();
    await loadGroups(guarded);
    say($('groups-message'), message);
  }, $('groups-message'));
}

/** One group: its members and the requests waiting. */
async function showGroup(guarded, id) {
  shown = id;
  const g = await get(`/admin/v1/groups/${encodeURIComponent(id)}`);
  const detail = $('group-detail');
  detail.hidden = false;
  fill($('group-title'), `Group ${g.id}`, g.name ? ` (${g.name})` : '');
  table($('group-members'), ['Member', 'Roles'], g.members.map((m) => [person(m), m.roles.join(', ') || 'member']), 'No members.');
  table($('group-pending'), ['Requester', 'Asked', ''], g.pending.map((p) => [
    person(p), when(p.asked_at),
    el('span', { class: 'actions' },
      el('button', {
        type: 'button', 'aria-label': `Approve ${called(p)}`,
        onclick: () => act(guarded, () => call('POST', `/admin/v1/groups/${encodeURIComponent(g.id)}/pending/${p.pubkey}/approve`), `${called(p)} is a member of ${g.id} now.`),
      }, 'Approve'),
      el('button', {
        type: 'button', 'aria-label': `Deny ${called(p)}`,
        onclick: () => act(guarded, () => call('POST', `/admin/v1/groups/${encodeURIComponent(g.id)}/pending/${p.pubkey}/deny`), `${called(p)}'s request to ${g.id} is denied.`),
      }, 'Deny')),
  ]), 'No join requests waiting.');
  fill($('group-actions'), el('button', {
    type: 'button', class: 'danger', 'aria-label': `Delete group ${g.id}`,
    onclick: () => act(guarded, async () => {
      await call('DELETE', `/admin/v1/groups/${encodeURIComponent(g.id)}`);
      shown = null;
    }, `Deleted ${g.id} and every event of it.`),
  }, 'Delete group'));
}

/** Fills the list of groups, and the group shown, if any. */
export async function loadGroups(guarded) {
  await guarded(async () => {
    const groups = await getAll('/admin/v1/groups', 'groups', 1000);
    table($('groups'), ['Group', 'Name', 'Kind', 'Members', 'Waiting', ''], groups.map((g) => [
      el('code', { class: 'wrap' }, g.id), g.name || '—', flags(g), String(g.members), String(g.pending),
      el('button', { type: 'button', 'aria-label': `Show group ${g.id}`, onclick: () => guarded(() => showGroup(guarded, g.id)) }, 'Show'),
    ]), 'No groups yet.');
    if (shown && groups.some((g) => g.id === shown)) await showGroup(guarded, shown);
    else $('group-detail').hidden = true;
  });
}
