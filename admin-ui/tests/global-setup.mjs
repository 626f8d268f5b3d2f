// Starts the relay the browser tests use: the debug build of this checkout (run.sh builds it),
// on an ephemeral port, a temporary data directory, a random admin token, and quotas small
// enough that the tests' traffic shows exact counts (one `messages` cell refills every 15 s); it
// publishes its member list (NIP-43), which the members test verifies with nostr-tools. A second
// relay is its one sync peer ([[sync.peers]] in a relay.toml written here), for the Store view.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

/** Starts `binary` with `args` and `env`; resolves to the process and its `ip:port`. */
async function start(binary, args, env) {
  const relay = spawn(binary, args, {
    env: { ...process.env, HEARTH_SERVER__BIND: '127.0.0.1:0', RUST_LOG: 'info', ...env },
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
  return { relay, addr };
}

export default async function globalSetup() {
  const root = resolve(import.meta.dirname, '..', '..');
  const binary = process.env.HEARTH_BIN || join(root, 'target', 'debug', 'hearth');
  const data = mkdtempSync(join(tmpdir(), 'hearth-admin-ui-'));
  const peerData = mkdtempSync(join(tmpdir(), 'hearth-admin-ui-peer-'));
  const token = randomBytes(16).toString('hex');
  const peer = await start(binary, [], { HEARTH_STORAGE__DATA_DIR: peerData });
  const config = join(data, 'relay.toml');
  writeFileSync(config, `[[sync.peers]]\nurl = "ws://${peer.addr}"\ndirection = "down"\ninterval_secs = 3600\n`);
  const { relay, addr } = await start(binary, ['--config', config], {
    HEARTH_STORAGE__DATA_DIR: join(data, 'data'),
    HEARTH_ADMIN__TOKEN: token,
    HEARTH_LIMITS__HUMAN__MESSAGES_PER_MIN: '4',
    HEARTH_ACCESS__PUBLISH_MEMBERS: 'true',
  });
  process.env.HEARTH_PEER_HTTP = `http://${peer.addr}`;
  process.env.HEARTH_PEER_WS = `ws://${peer.addr}`;
  process.env.HEARTH_HTTP = `http://${addr}`;
  process.env.HEARTH_WS = `ws://${addr}`;
  process.env.HEARTH_TOKEN = token;
  process.env.HEARTH_BIN = binary;
  return async () => {
    for (const child of [relay, peer.relay]) {
      child.kill('SIGTERM');
      await new Promise((ok) => child.once('exit', ok));
    }
    rmSync(data, { recursive: true, force: true });
    rmSync(peerData, { recursive: true, force: true });
  };
}
