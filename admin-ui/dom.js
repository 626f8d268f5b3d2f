// Building the page's elements. Text always goes in as text (never as HTML), so nothing a client
// sent (a reason, a relay name) can become markup.

/** `el('p', {class: 'x'}, 'text', child)`; attributes starting with `on` are listeners. */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? '' : String(value));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replaces a node's children. */
export function fill(node, ...children) {
  node.replaceChildren();
  append(node, children);
}

/** A message in a status or alert element; hidden when empty. */
export function say(node, text) {
  if (!node) return;
  node.textContent = text ?? '';
  node.hidden = !text;
}

/** Fills a `<dl>` with [term, value] pairs; returns it. */
export function figures(node, pairs) {
  fill(node, pairs.map(([term, value]) => el('div', { class: 'figure' }, el('dt', {}, term), el('dd', {}, value))));
  return node;
}

/** A table with a header row and body rows (cells are nodes or text). */
export function table(node, headings, rows, empty = 'Nothing yet.') {
  const head = el('thead', {}, el('tr', {}, headings.map((h) => el('th', { scope: 'col' }, h))));
  const body = rows.length
    ? el('tbody', {}, rows.map((cells) => el('tr', {}, cells.map((c) => el('td', {}, c)))))
    : el('tbody', {}, el('tr', {}, el('td', { colspan: headings.length }, empty)));
  fill(node, head, body);
}

export const short = (text) => (text.length > 20 ? `${text.slice(0, 8)}…${text.slice(-6)}` : text);

export function when(unixSeconds) {
  if (!unixSeconds) return '—';
  return new Date(unixSeconds * 1000).toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC');
}

export function duration(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  const d = Math.floor(s / 86400);
  const h = Math.floor((s % 86400) / 3600);
  const m = Math.floor((s % 3600) / 60);
  if (d) return `${d} d ${h} h`;
  if (h) return `${h} h ${m} min`;
  if (m) return `${m} min ${s % 60} s`;
  return `${s} s`;
}

export function bytes(n) {
  if (n === null || n === undefined) return '—';
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let value = n;
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit += 1;
  }
  return `${unit ? value.toFixed(1) : value} ${units[unit]}`;
}

/** A person as the page shows one: the picture and name of its kind 0 (when known), and its key. */
export function person(p) {
  if (!p) return '—';
  const picture = /^https:\/\//.test(p.picture || '')
    ? el('img', { src: p.picture, alt: '', class: 'avatar', referrerpolicy: 'no-referrer', loading: 'lazy' })
    : null;
  const hex = /^[0-9a-f]{64}$/.test(p.pubkey);
  const key = hex ? npub(p.pubkey) : p.pubkey;
  return el('span', { class: 'person', title: hex ? `${key}\n${p.pubkey}` : key }, picture, p.name ? el('strong', {}, p.name) : null, ' ',
    el('code', {}, hex ? `${key.slice(0, 10)}…${key.slice(-6)}` : short(key)), hex ? el('code', { class: 'muted' }, ` ${short(p.pubkey)}`) : null);
}

const BECH32 = 'qpzry9x8gf2tvdw0s3jn54khce6mua7l';

/** BIP-173's checksum over `values`. */
function polymod(values) {
  const gen = [0x3b6a57b2, 0x26508e6d, 0x1ea119fa, 0x3d4233dd, 0x2a1462b3];
  let chk = 1;
  for (const v of values) {
    const top = chk >>> 25;
    chk = ((chk & 0x1ffffff) << 5) ^ v;
    for (let i = 0; i < 5; i += 1) if ((top >>> i) & 1) chk ^= gen[i];
  }
  return chk;
}

/** A hex pubkey as NIP-19 `npub` (bech32). */
export function npub(hex) {
  const words = [];
  let acc = 0;
  let bits = 0;
  for (const byte of hex.match(/../g).map((b) => parseInt(b, 16))) {
    acc = ((acc << 8) | byte) & 0xffff;
    bits += 8;
    while (bits >= 5) {
      bits -= 5;
      words.push((acc >>> bits) & 31);
    }
  }
  if (bits > 0) words.push((acc << (5 - bits)) & 31);
  const hrp = [...'npub'].map((c) => c.charCodeAt(0));
  const mod = polymod([...hrp.map((c) => c >> 5), 0, ...hrp.map((c) => c & 31), ...words, 0, 0, 0, 0, 0, 0]) ^ 1;
  const checksum = [0, 1, 2, 3, 4, 5].map((i) => (mod >>> (5 * (5 - i))) & 31);
  return `npub1${[...words, ...checksum].map((w) => BECH32[w]).join('')}`;
}
