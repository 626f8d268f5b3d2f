// What the interop scripts share: a hearth binary started on a free port in a temporary
// directory (killed and removed when the script exits, pass or fail), and waiting for a
// condition with a deadline.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const children = [];
const dirs = [];
process.on('exit', () => {
  for (const child of children) child.kill('SIGKILL');
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

/** Waits for `ready()` to hold, polling, for at most ten seconds. */
export async function until(what, ready) {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const value = await ready();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((ok) => setTimeout(ok, 25));
  }
}

/** Starts `binary` with `env` on top of a free port and a fresh data directory: `host:port`. */
export async function startHearth(binary, env = {}) {
  const data = mkdtempSync(join(tmpdir(), 'hearth-interop-'));
  dirs.push(data);
  const child = spawn(binary, [], {
    env: { ...process.env, HEARTH_SERVER__BIND: '127.0.0.1:0', HEARTH_STORAGE__DATA_DIR: join(data, 'data'), RUST_LOG: 'info', ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  children.push(child);
  let log = '';
  child.stderr.on('data', (chunk) => { log += chunk; });
  return until('the relay to listen', () => /listening on (\d+\.\d+\.\d+\.\d+:\d+)/.exec(log)?.[1]);
}
