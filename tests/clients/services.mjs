// The servers several nodes share, for a browser test: Debian's PostgreSQL and redis-server
// (tests/postgres/install.sh and tests/redis/install.sh install them when missing), each on a
// free port of 127.0.0.1 with a temporary directory. Each runs under a shell that stops it the
// moment this process lets go of the shell's standard input: at `stop()`, and equally when the
// test process dies, so no server outlives its test.
import { execFileSync, spawn } from 'node:child_process';
import { chownSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer, connect } from 'node:net';
import { join } from 'node:path';

/** A port of 127.0.0.1 free a moment ago. */
async function freePort() {
  const server = createServer();
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  const { port } = server.address();
  await new Promise((ok) => server.close(ok));
  return port;
}

/** Resolves once `check()` is true (within a minute). */
async function ready(check, what) {
  const deadline = Date.now() + 60_000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`${what} did not become ready within a minute`);
    await new Promise((ok) => setTimeout(ok, 100));
  }
}

/** True once something accepts TCP connections on `port`. */
const accepting = (port) => new Promise((ok) => {
  const socket = connect(port, '127.0.0.1', () => { socket.destroy(); ok(true); });
  socket.once('error', () => ok(false));
});

/** Runs `argv` under a shell that kills it when our end of its stdin closes. */
function guarded(argv, env = {}) {
  const quoted = argv.map((a) => `'${a.replaceAll("'", "'\\''")}'`).join(' ');
  // setsid: the server and whatever it starts (runuser's child, PostgreSQL's workers) are one
  // process group, killed together.
  const child = spawn('sh', ['-c', `setsid ${quoted} & pid=$!; read _; kill -9 -$pid; wait $pid 2>/dev/null`], {
    stdio: ['pipe', 'ignore', 'inherit'],
    env: { ...process.env, ...env },
  });
  return {
    stop: () => new Promise((ok) => {
      if (child.exitCode !== null) return ok();
      child.once('exit', ok);
      child.stdin.end();
    }),
  };
}

/** PostgreSQL's programs: `pg_config --bindir`, else the newest /usr/lib/postgresql/N/bin. */
function postgresBin() {
  try {
    return execFileSync('pg_config', ['--bindir'], { encoding: 'utf8' }).trim();
  } catch {
    const versions = readdirSync('/usr/lib/postgresql').sort((a, b) => Number(b) - Number(a));
    return join('/usr/lib/postgresql', versions[0], 'bin');
  }
}

/**
 * A PostgreSQL in a temporary directory of its own (fsync off: it lives no longer than the
 * test), run as the `postgres` user when the tests run as root (PostgreSQL refuses root).
 * `{ url, stop() }`; `url` names the `postgres` database, user `hearth`.
 */
export async function startPostgres() {
  const dir = mkdtempSync(join(tmpdir(), 'hearth-clients-pg-'));
  const bin = postgresBin();
  const root = process.getuid?.() === 0;
  const as = (argv) => (root ? ['runuser', '-u', 'postgres', '--', ...argv] : argv);
  const data = join(dir, 'pgdata');
  if (root) chownSync(dir, Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' })), Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' })));
  const [program, ...args] = as([join(bin, 'initdb'), '-A', 'trust', '-U', 'hearth', '-E', 'UTF8', '--locale=C', '--no-sync', '-D', data]);
  execFileSync(program, args, { stdio: ['ignore', 'ignore', 'inherit'] });
  const port = await freePort();
  const server = guarded(as([join(bin, 'postgres'), '-D', data, '-p', String(port), '-k', dir,
    '-c', 'listen_addresses=127.0.0.1', '-c', 'fsync=off', '-c', 'log_min_messages=fatal']));
  await ready(() => {
    try {
      execFileSync(join(bin, 'pg_isready'), ['-q', '-U', 'hearth', '-d', 'postgres', '-h', '127.0.0.1', '-p', String(port)]);
      return true;
    } catch {
      return false;
    }
  }, `PostgreSQL on port ${port}`);
  const stop = async () => {
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  };
  return { url: `postgres://hearth@127.0.0.1:${port}/postgres`, stop };
}

/** A redis-server in a temporary directory, nothing saved. `{ url, stop() }`. */
export async function startRedis() {
  const dir = mkdtempSync(join(tmpdir(), 'hearth-clients-redis-'));
  const port = await freePort();
  const server = guarded(['redis-server', '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir]);
  await ready(() => accepting(port), `Redis on port ${port}`);
  const stop = async () => {
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  };
  return { url: `redis://127.0.0.1:${port}/`, stop };
}
