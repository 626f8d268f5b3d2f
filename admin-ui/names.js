// People by name: the kind 0 name and picture of the keys a view shows (members, bans, the
// busiest principals), asked of /admin/v1/profiles once per key and kept for the session.

import { get } from './api.js';
import { person } from './dom.js';

const known = new Map();
const HEX = /^[0-9a-f]{64}$/;

/** Learns the profiles of `pubkeys` (hex; anything else is left alone) not asked for yet. */
export async function learn(pubkeys) {
  const fresh = [...new Set(pubkeys)].filter((p) => HEX.test(p) && !known.has(p));
  for (let i = 0; i < fresh.length; i += 500) {
    const batch = fresh.slice(i, i + 500);
    const { profiles } = await get(`/admin/v1/profiles?pubkeys=${batch.join(',')}`);
    for (const p of batch) known.set(p, profiles[p] || null);
  }
}

/** The key as a person: its name and picture where its profile is known. */
export function named(pubkey) {
  return person({ pubkey, ...(known.get(pubkey) || {}) });
}
