// The Members view: who belongs to the relay (access.mode), added and removed by pubkey, and the
// invite codes a NIP-43 join request claims, created and revoked. The admin API's
// /admin/v1/members and /admin/v1/invites only.

import { call, get, getAll } from './api.js';
import { learn, named } from './names.js';
import { el, say, short, table, when } from './dom.js';

const $ = (id) => document.getElementById(id);

/** Runs `work`, showing its outcome (or error) in the view's status line. */
async function act(guarded, work, message) {
  await guarded(async () => {
    await work();
    await loadMembers(guarded);
    say($('members-message'), message);
  }, $('members-message'));
}

/** The relay's access (GET /admin/v1/relay), kept for the first-member warning. */
let access = null;
/** True once the first-member warning was shown for the pubkey now in the form. */
let warned = null;

/** What the access mode means for members, said above the table. */
function describe(a) {
  if (a.mode === 'public' && a.members === 0) {
    return 'access.mode is public: anyone publishes and reads. Adding a member makes only members publish.';
  }
  if (a.mode === 'public') return `access.mode is public with a member list: only these ${a.members} members publish; anyone reads.`;
  if (a.mode === 'members-write') return 'access.mode is members-write: only members publish; anyone reads.';
  return 'access.mode is members-only: only members publish and read (after signing in with NIP-42).';
}

/** The status of an invite code: open, spent, expired or revoked. */
function status(i) {
  if (i.usable) return 'open';
  if (i.used >= i.uses) return 'spent';
  if (i.expires_at && i.expires_at * 1000 <= Date.now()) return 'expired';
  return 'revoked';
}

/** Fills the member and invite tables. */
export async function loadMembers(guarded) {
  await guarded(async () => {
    access = (await get('/admin/v1/relay')).access;
    $('members-access').textContent = describe(access);
    const members = await getAll('/admin/v1/members', 'members', 1000);
    await learn(members.map((m) => m.pubkey));
    table($('members'), ['Member', 'Note', 'Source', ''], members.map((m) => [
      named(m.pubkey), m.note || '—', m.source === 'config' ? 'configuration' : 'admin',
      m.source === 'config' ? el('span', { class: 'muted' }, 'in relay.toml') : el('button', {
        type: 'button', 'aria-label': `Remove member ${short(m.pubkey)}`,
        onclick: () => act(guarded, () => call('DELETE', `/admin/v1/members/${m.pubkey}`), `Removed ${short(m.pubkey)}.`),
      }, 'Remove'),
    ]), 'No members yet.');
    const { invites } = await get('/admin/v1/invites');
    table($('invites'), ['Code', 'Status', 'Used', 'Expires', 'Note', ''], invites.map((i) => [
      el('code', { class: 'wrap' }, i.code), status(i), `${i.used} of ${i.uses}`, i.expires_at ? when(i.expires_at) : 'never', i.note || '—',
      el('button', {
        type: 'button', 'aria-label': `Revoke invite ${i.code.slice(0, 8)}`,
        onclick: () => act(guarded, () => call('DELETE', `/admin/v1/invites/${i.code}`), `Revoked ${i.code.slice(0, 8)}….`),
      }, i.usable ? 'Revoke' : 'Remove'),
    ]), 'No invite codes yet.');
  });
}

/** `Add member` and `Create invite`. */
export function wireMembers(guarded) {
  $('member-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const pubkey = $('member-pubkey').value.trim();
    if (!pubkey) {
      say($('members-message'), 'Enter a pubkey (hex or npub).');
      return;
    }
    if (access && access.mode === 'public' && access.members === 0 && warned !== pubkey) {
      warned = pubkey;
      say($('members-message'), 'access.mode is public: with a first member, only members may publish and every other key is refused (restricted:). Press Add member again to add it.');
      return;
    }
    warned = null;
    act(guarded, async () => {
      await call('PUT', `/admin/v1/members/${encodeURIComponent(pubkey)}`, { body: { note: $('member-note').value.trim() } });
      $('member-pubkey').value = '';
      $('member-note').value = '';
    }, `Added ${short(pubkey)}.`);
  });
  $('invite-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const uses = Number($('invite-uses').value || '1');
    const days = Number($('invite-days').value || '7');
    if (!Number.isInteger(uses) || uses < 1 || !(days >= 0)) {
      say($('members-message'), 'Uses must be a whole number from 1, and days 0 (never) or more.');
      return;
    }
    act(guarded, async () => {
      const { data } = await call('POST', '/admin/v1/invites', { body: { uses, expires_in_secs: Math.round(days * 86400), note: $('invite-note').value.trim() } });
      $('invite-note').value = '';
      $('invite-code').textContent = data.code;
      $('invite-new').hidden = false;
    }, 'Invite created: give its code to the person you invite.');
  });
}
