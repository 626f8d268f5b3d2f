// What the chat-client tests stand on: hearth (the debug build of this checkout) on an ephemeral
// port with a temporary data directory, a TLS front before it (Flotilla's invite links and
// Chachi's relay links are always `wss://`; a self-signed certificate made here, Chromium started
// with --ignore-certificate-errors), and the client's unmodified web build served over HTTP with
// a fallback to index.html. Every process started here is stopped by `stop()`.
import { spawn, execFileSync } from 'node:child_process';
import { createServer as createHttp } from 'node:http';
import { connect } from 'node:net';
import { createServer as createTls } from 'node:tls';
import { mkdtempSync, readFileSync, rmSync, statSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { extname, join, normalize, resolve } from 'node:path';

export const ROOT = resolve(import.meta.dirname, '..', '..');
export const SHARED = resolve(ROOT, '..', 'shared', 'clients');
export const BINARY = process.env.HEARTH_BIN || join(ROOT, 'target', 'debug', 'hearth');

/** Resolves once `listener` listens on a free port of 127.0.0.1; its port. */
function listen(server) {
  return new Promise((ok, fail) => {
    server.once('error', fail);
    server.listen(0, '127.0.0.1', () => ok(server.address().port));
  });
}

/**
 * Every relay started here and not yet stopped: killed when this process ends, however it ends
 * short of SIGKILL (a test that timed out never reaches its own `stopRelay`).
 */
const running = new Set();
process.on('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

/**
 * Starts hearth with `env` (HEARTH_… settings) in a fresh data directory; resolves to
 * `{ addr, child, dir, log() }` once it logs where it listens.
 */
export async function startRelay(env = {}, args = []) {
  const dir = mkdtempSync(join(tmpdir(), 'hearth-clients-'));
  const child = spawn(BINARY, args, {
    env: {
      ...process.env,
      HEARTH_SERVER__BIND: '127.0.0.1:0',
      HEARTH_STORAGE__DATA_DIR: join(dir, 'data'),
      RUST_LOG: 'info',
      ...env,
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  running.add(child);
  child.once('exit', () => running.delete(child));
  let log = '';
  child.stderr.on('data', (chunk) => { log += chunk; });
  const addr = await new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`the relay did not start:\n${log}`)), 60_000);
    const check = () => {
      const found = /listening on (\d+\.\d+\.\d+\.\d+:\d+)/.exec(log);
      if (found) {
        clearTimeout(timer);
        ok(found[1]);
      }
    };
    child.stderr.on('data', check);
    child.once('exit', (code) => { clearTimeout(timer); fail(new Error(`the relay exited (${code}):\n${log}`)); });
  });
  return { addr, child, dir, log: () => log };
}

/** A self-signed certificate for 127.0.0.1 and localhost, made with openssl in `dir`. */
function certificate(dir) {
  const key = join(dir, 'key.pem');
  const cert = join(dir, 'cert.pem');
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
    '-subj', '/CN=localhost', '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1', '-days', '2',
    '-keyout', key, '-out', cert], { stdio: 'ignore' });
  return { key: readFileSync(key), cert: readFileSync(cert) };
}

/**
 * A TLS front on `host:port` (`port` 0: a free one), before a relay named later with
 * `front.target = 'host:port'` (the relay must know the front's address first: its
 * `server.public_url`, which NIP-98 signatures name). Every connection's bytes, decrypted, go to
 * the relay and back, HTTP and WebSocket alike. Resolves to `{ port, server, target }`.
 */
export async function tlsFront(dir, port = 0, host = '127.0.0.1') {
  const sockets = new Set();
  const front = { target: null, port: 0, server: null };
  const server = createTls(certificate(dir), (client) => {
    const [targetHost, targetPort] = front.target.split(':');
    const upstream = connect(Number(targetPort), targetHost);
    sockets.add(client);
    sockets.add(upstream);
    const end = () => { client.destroy(); upstream.destroy(); sockets.delete(client); sockets.delete(upstream); };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
    client.pipe(upstream).pipe(client);
  });
  await new Promise((ok, fail) => {
    server.once('error', fail);
    server.listen(port, host, ok);
  });
  front.server = server;
  front.port = server.address().port;
  front.close = () => { for (const s of sockets) s.destroy(); server.close(); };
  return front;
}

const TYPES = {
  '.html': 'text/html; charset=utf-8', '.js': 'text/javascript', '.mjs': 'text/javascript', '.css': 'text/css',
  '.json': 'application/json', '.webmanifest': 'application/manifest+json', '.png': 'image/png',
  '.svg': 'image/svg+xml', '.woff2': 'font/woff2', '.woff': 'font/woff', '.ttf': 'font/ttf', '.mp3': 'audio/mpeg',
  '.ico': 'image/x-icon', '.txt': 'text/plain', '.wasm': 'application/wasm',
};

/** Serves the static build in `root` over HTTP, unknown paths answered with index.html. */
export async function serveBuild(root) {
  const server = createHttp((req, res) => {
    const path = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    let file = normalize(join(root, path));
    if (!file.startsWith(root) || !existsSync(file) || statSync(file).isDirectory()) {
      file = join(root, 'index.html');
    }
    res.writeHead(200, { 'Content-Type': TYPES[extname(file)] || 'application/octet-stream' });
    res.end(readFileSync(file));
  });
  const port = await listen(server);
  return { url: `http://127.0.0.1:${port}`, server };
}

/** Stops a relay started by `startRelay` (SIGTERM, then SIGKILL), and removes its directory. */
export async function stopRelay(relay) {
  if (relay.child.exitCode === null) {
    const exited = new Promise((ok) => relay.child.once('exit', ok));
    relay.child.kill('SIGTERM');
    const timer = setTimeout(() => relay.child.kill('SIGKILL'), 15_000);
    await exited;
    clearTimeout(timer);
  }
  rmSync(relay.dir, { recursive: true, force: true });
}

/** Chromium's launch options: Debian's build, offline-friendly, certificates of the TLS front trusted. */
export function chromiumOptions(extra = []) {
  return {
    executablePath: process.env.HEARTH_CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--ignore-certificate-errors', ...extra],
  };
}

/** The first event a page sent, among `frames` (`> …` lines of its WebSocket log), that `pick` chooses. */
export function sentEvent(frames, pick) {
  return frames.filter((f) => f.startsWith('> ["EVENT"')).map((f) => JSON.parse(f.slice(2))[1]).find(pick);
}

/** The relay's `[accepted, message]` to the event `id`, among `frames`, once it came. */
export function answerTo(frames, id) {
  const ok = frames.filter((f) => f.startsWith('< ["OK"')).map((f) => JSON.parse(f.slice(2))).find((f) => f[1] === id);
  return ok && ok.slice(2);
}

/** The events the relay at `addr` stores that `filter` matches, through its admin API's export. */
export async function exported(addr, token, filter) {
  const url = `http://${addr}/admin/v1/export?filter=${encodeURIComponent(JSON.stringify(filter))}`;
  const response = await fetch(url, { headers: { Authorization: `Bearer ${token}` } });
  if (response.status !== 200) throw new Error(`export answered ${response.status}`);
  return (await response.text()).split('\n').filter(Boolean).map((line) => JSON.parse(line));
}
