// The Store view's Sync section: the peers of [[sync.peers]] (NIP-77), each one's last round and
// when the next runs, and a round started by hand. The admin API's /admin/v1/sync only.

import { ApiError, call, get } from './api.js';
import { el, say, table, when } from './dom.js';

const $ = (id) => document.getElementById(id);

/** What a finished round did, in a line. */
function outcome(last) {
  if (!last) return 'not yet';
  const moved = `have ${last.have}, need ${last.need}, stored ${last.stored}, published ${last.published}, refused ${last.refused}`;
  const at = `${when(last.finished_at)} (${last.seconds.toFixed(1)} s)`;
  return last.ok ? `${at}: ${moved}` : `${at}: failed: ${last.error || 'unknown'}; ${moved}`;
}

/** Fills the peers table. */
export async function loadSync(guarded) {
  await guarded(async () => {
    const { peers } = await get('/admin/v1/sync');
    table($('sync-peers'), ['Peer', 'Direction', 'Filter', 'Every', 'Last round', 'Next round', ''], peers.map((p) => [
      el('code', { class: 'wrap' }, p.url), p.direction, el('code', { class: 'wrap' }, p.filter), `${p.interval_secs} s`,
      outcome(p.last_round), p.running ? 'running now' : when(p.next_round_at),
      el('button', {
        type: 'button', 'aria-label': `Sync now with ${p.url}`, disabled: p.running,
        onclick: () => start(guarded, p),
      }, 'Sync now'),
    ]), 'No sync peers are configured ([[sync.peers]] in relay.toml).');
  });
}

async function start(guarded, peer) {
  await guarded(async () => {
    try {
      await call('POST', `/admin/v1/sync/peers/${peer.index}/start`);
      say($('sync-message'), `A round with ${peer.url} has started.`);
    } catch (e) {
      if (!(e instanceof ApiError) || e.status !== 409) throw e;
      say($('sync-message'), `A round with ${peer.url} is already running.`);
    }
    await loadSync(guarded);
  }, $('sync-message'));
}
