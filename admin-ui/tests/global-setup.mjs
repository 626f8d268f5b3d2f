// Starts the relay the browser tests use: the debug build of this checkout (run.sh builds it),
// on an ephemeral port, a temporary data directory, a random admin token, and quotas small
// enough that the tests' traffic shows exact counts (one `messages` cell refills every 15 s); it
// publishes its member list (NIP-43), which the members test verifies with nostr-tools.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

export default async function globalSetup() {
  const root = resolve(import.meta.dirname, '..', '..');
  const binary = process.env.HEARTH_BIN || join(root, 'target', 'debug', 'hearth');
  const data = mkdtempSync(join(tmpdir(), 'hearth-admin-ui-'));
  const token = randomBytes(16).toString('hex');
  const relay = spawn(binary, [], {
    env: {
      ...process.env,
      HEARTH_SERVER__BIND: '127.0.0.1:0',
      HEARTH_STORAGE__DATA_DIR: data,
      HEARTH_ADMIN__TOKEN: token,
      HEARTH_LIMITS__HUMAN__MESSAGES_PER_MIN: '4',
      HEARTH_ACCESS__PUBLISH_MEMBERS: 'true',
      RUST_LOG: 'info',
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let log = '';
  const addr = await new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`the relay did not start:\n${log}`)), 30_000);
    relay.stderr.on('data', (chunk) => {
      log += chunk;
      const found = /listening on (\d+\.\d+\.\d+\.\d+:\d+)/.exec(log);
      if (found) {
        clearTimeout(timer);
        ok(found[1]);
      }
    });
    relay.on('exit', (code) => fail(new Error(`the relay exited (${code}):\n${log}`)));
  });
  relay.stderr.on('data', () => {});
  process.env.HEARTH_HTTP = `http://${addr}`;
  process.env.HEARTH_WS = `ws://${addr}`;
  process.env.HEARTH_TOKEN = token;
  process.env.HEARTH_BIN = binary;
  return async () => {
    relay.kill('SIGTERM');
    await new Promise((ok) => relay.once('exit', ok));
    rmSync(data, { recursive: true, force: true });
  };
}
