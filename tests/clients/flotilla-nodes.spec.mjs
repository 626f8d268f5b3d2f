// Flotilla, unmodified, on two nodes of one relay (PostgreSQL for the events, Redis for the
// quotas and live delivery between nodes), each behind a TLS front of its own: the operator on
// node A and a neighbour on node B are in the same room and see each other's messages live.
import { test, expect } from '@playwright/test';
import { addSpace, community, flotilla, person, say, shot } from './flotilla.mjs';
import { startPostgres, startRedis } from './services.mjs';

flotilla();

/** The relay's key, the same on every node (NIP-11 `self`; it signs the rooms' state). */
const RELAY_KEY = '5c0c523f52a5b6fad39ed2403092df8cebc36318b39383bca6c00808626fab3a';

test('two nodes on one PostgreSQL and Redis: the operator on node A and a neighbour on node B talk in one room, live both ways', async () => {
  const pg = await startPostgres();
  const redis = await startRedis();
  const operator = await person('operator');
  const alice = await person('alice');
  const shared = {
    HEARTH_STORAGE__BACKEND: 'postgres',
    HEARTH_STORAGE__POSTGRES_URL: pg.url,
    HEARTH_LIMITS__BACKEND: 'redis',
    HEARTH_LIMITS__REDIS_URL: redis.url,
    HEARTH_RELAY__SECRET_KEY: RELAY_KEY,
    HEARTH_ADMIN__PUBKEYS: operator.pubkey,
  };
  const places = [];
  try {
    const a = await community({ ...shared, HEARTH_NODE__NAME: 'node-a' });
    places.push(a);
    const b = await community({ ...shared, HEARTH_NODE__NAME: 'node-b' });
    places.push(b);
    const info = async (place) => (await fetch(`http://${place.relay.addr}/`, { headers: { Accept: 'application/nostr+json' } })).json();
    expect((await info(a)).self).toBe((await info(b)).self);

    // The operator makes the room through node A.
    await addSpace(operator, a.space);
    await expect(operator.page.getByText('Welcome to the space!')).toBeVisible();
    await operator.page.getByRole('button', { name: 'Create room', exact: true }).click();
    await operator.page.locator('input[type=text]').first().fill('town square');
    await operator.page.getByRole('button', { name: 'Create Room', exact: true }).click();
    await operator.page.getByRole('link', { name: 'town square' }).click();

    // Alice adds node B's address: the same room is there.
    await addSpace(alice, b.space);
    await expect(alice.page.getByText('Welcome to the space!')).toBeVisible();
    await alice.page.getByRole('link', { name: 'town square' }).click();

    await say(operator, 'The market opens at nine');
    await expect(alice.page.getByText('The market opens at nine')).toBeVisible();
    await say(alice, 'I will bring apples');
    await expect(operator.page.getByText('I will bring apples')).toBeVisible();
    // Each person talked to their own node only.
    const sentTo = (who) => who.frames.filter((f) => f.startsWith('> ["EVENT"') && f.includes('"kind":9,'));
    expect(sentTo(alice).length).toBe(1);
    expect(alice.sockets.filter((url) => url.includes(a.host))).toEqual([]);
    expect(operator.sockets.filter((url) => url.includes(b.host))).toEqual([]);
    // One store: both messages are there once, whichever node is asked.
    for (const place of [a, b]) {
      const said = (await place.stored({ kinds: [9] })).map((e) => e.content).sort();
      expect(said).toEqual(['I will bring apples', 'The market opens at nine']);
    }
    await shot(alice, 'node-b');
    await shot(operator, 'node-a');
  } finally {
    await operator.context.close().catch(() => {});
    await alice.context.close().catch(() => {});
    for (const place of places) await place.stop();
    await redis.stop();
    await pg.stop();
  }
});
