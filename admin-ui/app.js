// The admin page: sign-in, the views, and polling. It uses only the documented admin API
// (docs/src/admin-api.md); every error is shown as a message, never a blank page.

import { ApiError, Unauthorized, call, get, rpc, token } from './api.js';
import { draw } from './chart.js';
import { bytes, duration, el, figures, fill, say, short, table, when } from './dom.js';
import { loadGroups } from './groups.js';
import { loadMedia } from './media.js';
import { loadReports } from './reports.js';
import { learn, named } from './names.js';
import { loadMembers, wireMembers } from './members.js';
import { loadSync } from './sync.js';

const $ = (id) => document.getElementById(id);
const VIEWS = ['overview', 'limits', 'usage', 'moderation', 'reports', 'members', 'groups', 'media', 'audit', 'store'];
const REFRESH_MS = 5000;
const TIERS = ['human', 'agent', 'ip'];
const KEYS = ['ws_events_per_sec', 'ws_burst_window_secs', 'ws_reqs_per_sec', 'ws_reqs_burst_window_secs', 'messages_per_min', 'api_calls_per_min', 'upload_bytes_per_day'];
const LIMIT_TYPES = ['ws_events', 'ws_reqs', 'messages', 'api_calls', 'upload_bytes', 'admin_auth', 'unavailable'];

let timer = null;
let nodeTimer = null;

// ---------- sign-in ----------

function showSignIn(message) {
  stopPolling();
  if (nodeTimer) clearInterval(nodeTimer);
  nodeTimer = null;
  showBanner(null);
  token.clear();
  $('signed-in').hidden = true;
  $('sign-out').hidden = true;
  $('sign-in').hidden = false;
  say($('sign-in-error'), message);
  $('token').value = '';
  $('token').focus();
}

async function signIn(event) {
  event.preventDefault();
  const candidate = $('token').value.trim();
  if (!candidate) {
    say($('sign-in-error'), 'Enter the admin token.');
    return;
  }
  try {
    await call('GET', '/admin/v1/relay', { bearer: candidate });
  } catch (e) {
    say($('sign-in-error'), e instanceof Unauthorized ? 'That token was not accepted.' : e.message);
    return;
  }
  token.set(candidate);
  $('token').value = '';
  enter();
}

function enter() {
  $('sign-in').hidden = true;
  say($('sign-in-error'), '');
  $('signed-in').hidden = false;
  $('sign-out').hidden = false;
  if (!location.hash) history.replaceState(null, '', '#overview');
  route();
  loadNode();
  if (!nodeTimer) nodeTimer = setInterval(() => { if (token.get()) loadNode(); }, REFRESH_MS);
}

// ---------- the node and its shared Redis (on every view) ----------

/** The banner while this node cannot reach the Redis the nodes share; hidden otherwise. */
function showBanner(relay) {
  const banner = $('cluster-banner');
  const redis = relay?.limiter?.redis;
  if (!redis || redis.up) {
    banner.hidden = true;
    banner.textContent = '';
    return;
  }
  const does = relay.limiter.redis_unavailable === 'refuse'
    ? 'refuses every billed request (limits.redis_unavailable = "refuse")'
    : 'bills quotas by its own limiter alone, so each node allows a whole quota (limits.redis_unavailable = "local")';
  const since = new Date(redis.since * 1000).toLocaleTimeString();
  banner.textContent = `The shared Redis is unavailable since ${since}: node ${relay.node} ${does}. ${redis.reason ?? ''}`.trim();
  banner.hidden = false;
}

async function loadNode() {
  try {
    showBanner(await get('/admin/v1/relay'));
  } catch (e) {
    if (e instanceof Unauthorized) showSignIn(e.message);
    else showBanner(null);
  }
}

/**
 * Runs `work`; a 401 sends the page back to sign-in, anything else is shown in `where`. Signed out
 * (a 401 met by another request of the same refresh), it does nothing: no request without a token.
 */
async function guarded(work, where = $('page-error')) {
  if (!token.get()) return undefined;
  try {
    const out = await work();
    if (where === $('page-error')) say(where, '');
    return out;
  } catch (e) {
    if (e instanceof Unauthorized) showSignIn(e.message);
    else say(where, e.message);
    return undefined;
  }
}

// ---------- routing and polling ----------

function current() {
  const name = location.hash.slice(1);
  return VIEWS.includes(name) ? name : 'overview';
}

function route() {
  if (!token.get()) return;
  const name = current();
  for (const view of VIEWS) $(`view-${view}`).hidden = view !== name;
  for (const link of document.querySelectorAll('nav a')) {
    if (link.getAttribute('href') === `#${name}`) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  say($('page-error'), '');
  stopPolling();
  const load = LOADERS[name];
  load(true);
  if (name === 'overview' || name === 'usage' || name === 'store') {
    timer = setInterval(() => { if (token.get()) load(false); }, REFRESH_MS);
  }
}

function stopPolling() {
  if (timer) clearInterval(timer);
  timer = null;
}

// ---------- overview ----------

async function loadOverview() {
  await guarded(async () => {
    const [relay, stats, store] = await Promise.all([
      get('/admin/v1/relay'), get('/admin/v1/stats'), get('/admin/v1/store'),
    ]);
    const last = stats.samples[stats.samples.length - 1] ?? {};
    $('relay-line').textContent = `${relay.name || 'unnamed relay'} · hearth ${relay.version}`;
    figures($('overview-figures'), [
      ['Uptime', duration(relay.uptime_secs)],
      ['Version', relay.version],
      ['Node', relay.node],
      ['Access', accessText(relay.access)],
      ['Quota backend', relay.limiter.redis ? `redis (${relay.limiter.redis.up ? 'up' : 'unavailable'})` : relay.limiter.backend],
      ['Connections', last.connections ?? 0],
      ['Subscriptions', last.subscriptions ?? 0],
      ['Events stored', store.events],
      ['Admission p99', last.admission_p99_us == null ? '—' : `≤ ${last.admission_p99_us} µs`],
    ]);
    draw($('events-chart'), [stats.samples.map((s) => s.events_stored_per_sec)], {
      label: 'Events stored per second', interval: stats.interval_secs,
    });
    draw($('refusals-chart'), LIMIT_TYPES.map((t) => stats.samples.map((s) => s.refusals_per_sec[t] || 0)), {
      label: 'Refusals per second, all limit types', interval: stats.interval_secs,
    });
    fill($('refusals-legend'), LIMIT_TYPES.map((t, n) => el('li', {}, el('span', { class: `swatch series-${n}`, 'aria-hidden': 'true' }), t)));
  });
}

/** access.mode and who may write and read under it, in words. */
function accessText(access) {
  const who = (w) => (w === 'members' ? `members (${access.members})` : 'anyone');
  return `${access.mode} (publish: ${who(access.writes)}; read: ${who(access.reads)})`;
}

// ---------- limits ----------

let limits = { doc: null, etag: null };
let previewTimer = null;

function limitInput(tier, key) {
  return $(`limit-${tier}-${key}`);
}

function changedValues() {
  const patch = {};
  for (const tier of TIERS) {
    for (const key of KEYS) {
      const input = limitInput(tier, key);
      if (!input || input.value === '' || input.value === String(limits.doc[tier][key].value)) continue;
      const number = Number(input.value);
      (patch[tier] ??= {})[key] = Number.isFinite(number) ? number : input.value;
    }
  }
  return patch;
}

function clearFieldErrors() {
  for (const node of document.querySelectorAll('.field-error')) say(node, '');
  for (const node of document.querySelectorAll('#limits-tables input')) node.removeAttribute('aria-invalid');
}

/** The API names the field it refused (`` `human.messages_per_min` must be … ``): shown beside it. */
function showFieldError(message) {
  const named = /`(\w+)\.(\w+)`/.exec(message);
  const input = named && limitInput(named[1], named[2]);
  if (!input) return false;
  input.setAttribute('aria-invalid', 'true');
  say($(`${input.id}-error`), message);
  input.focus();
  return true;
}

function renderLimits() {
  const doc = limits.doc;
  fill($('limits-tables'), TIERS.filter((tier) => doc[tier]).map((tier) => {
    const rows = KEYS.map((key) => {
      const { value, source } = doc[tier][key];
      const id = `limit-${tier}-${key}`;
      return el('tr', {},
        el('th', { scope: 'row' }, el('label', { for: id }, `${tier} ${key}`)),
        el('td', {},
          el('input', { id, type: 'number', inputmode: 'numeric', min: 1, step: 1, value, 'aria-describedby': `${id}-source ${id}-error`, oninput: schedulePreview }),
          el('p', { id: `${id}-error`, class: 'field-error error', hidden: true })),
        el('td', { id: `${id}-source`, class: `source source-${source}` }, source),
        el('td', {}, source === 'admin'
          ? el('button', { type: 'button', 'aria-label': `Reset ${tier} ${key}`, onclick: () => resetLimit(tier, key) }, 'Reset')
          : ''));
    });
    return el('div', { class: 'table-wrap', tabindex: 0, role: 'region', 'aria-label': `Tier ${tier} limits` }, el('table', { class: 'limits' },
      el('caption', {}, `Tier ${tier}`),
      el('thead', {}, el('tr', {}, ['Limit', 'Value', 'Source', ''].map((h) => el('th', { scope: 'col' }, h)))),
      el('tbody', {}, rows)));
  }));
}

async function loadLimits(first) {
  if (!first) return;
  await guarded(async () => {
    const { data, headers } = await call('GET', '/admin/v1/limits');
    limits = { doc: data, etag: headers.get('etag') };
    renderLimits();
    say($('limits-preview'), '');
  });
}

function schedulePreview() {
  clearTimeout(previewTimer);
  previewTimer = setTimeout(preview, 300);
}

async function preview() {
  const patch = changedValues();
  clearFieldErrors();
  if (!Object.keys(patch).length) {
    say($('limits-preview'), '');
    return;
  }
  try {
    const { data } = await call('POST', '/admin/v1/limits/preview', { body: patch });
    const n = data.would_refuse.any;
    say($('limits-preview'), `Would refuse ${n} principal${n === 1 ? '' : 's'} now (${data.refused_now.any} under the limits in force, of ${data.tracked} tracked).`);
  } catch (e) {
    if (e instanceof Unauthorized) showSignIn(e.message);
    else if (!(e instanceof ApiError && e.status === 400 && showFieldError(e.message))) say($('limits-preview'), e.message);
    else say($('limits-preview'), '');
  }
}

async function applyLimits(event) {
  event.preventDefault();
  clearFieldErrors();
  const patch = changedValues();
  if (!Object.keys(patch).length) {
    say($('limits-message'), 'Nothing changed.');
    return;
  }
  try {
    const { data, headers } = await call('PATCH', '/admin/v1/limits', { body: patch, headers: { 'If-Match': limits.etag } });
    limits = { doc: data, etag: headers.get('etag') };
    renderLimits();
    say($('limits-preview'), '');
    say($('limits-message'), 'Applied.');
  } catch (e) {
    if (e instanceof Unauthorized) showSignIn(e.message);
    else if (e instanceof ApiError && e.status === 412) {
      await loadLimits(true);
      say($('limits-message'), 'Another admin changed the limits meanwhile: the values shown are the current ones now, nothing was applied.');
    } else if (!(e instanceof ApiError && e.status === 400 && showFieldError(e.message))) say($('limits-message'), e.message);
    else say($('limits-message'), 'Not applied: see the field marked.');
  }
}

async function resetLimit(tier, key) {
  await guarded(async () => {
    const { data, headers } = await call('DELETE', `/admin/v1/limits/overrides/${tier}/${key}`);
    limits = { doc: data, etag: headers.get('etag') };
    renderLimits();
    say($('limits-message'), `${tier} ${key} is back to its configured value.`);
  }, $('limits-message'));
}

async function resetAll() {
  await guarded(async () => {
    const { data, headers } = await call('DELETE', '/admin/v1/limits/overrides');
    limits = { doc: data, etag: headers.get('etag') };
    renderLimits();
    say($('limits-message'), 'Every limit is back to its configured value.');
  }, $('limits-message'));
}

// ---------- usage ----------

let looked = null;

const isIp = (text) => text.includes('.') || text.includes(':');

function usagePath(who) {
  return isIp(who) ? `/admin/v1/usage/ip/${encodeURIComponent(who)}` : `/admin/v1/usage/${encodeURIComponent(who)}`;
}

function actions(principal, tier, where) {
  const ip = isIp(principal);
  const name = short(principal);
  const other = tier === 'agent' ? 'human' : 'agent';
  return el('span', { class: 'row-actions' },
    ip ? '' : el('button', { type: 'button', 'aria-label': `Make ${name} ${other}`, onclick: () => setTier(principal, other, where) }, `Make ${other}`),
    el('button', { type: 'button', class: 'danger', 'aria-label': `${ip ? 'Block' : 'Ban'} ${name}`, onclick: () => ban(principal, where) }, ip ? 'Block' : 'Ban'));
}

function renderReport(report) {
  const meters = Object.entries(report.limits).map(([type, l]) => el('div', { class: 'meter-row' },
    el('label', { for: `meter-${type}` }, type),
    el('meter', { id: `meter-${type}`, min: 0, max: l.limit, value: l.used, low: l.limit * 0.5, high: l.limit * 0.9, optimum: 0 }),
    el('span', {}, `used ${l.used} of ${l.limit}, ${l.remaining} remaining, refills in ${l.window_secs} s, retry in ${l.retry_in_secs} s`)));
  const refusals = Object.entries(report.refusals).map(([type, n]) => `${type} ${n}`).join(', ');
  const tierSelect = isIp(report.principal) ? '' : el('form', { class: 'inline', onsubmit: (e) => { e.preventDefault(); setTier(report.principal, $('usage-tier').value, 'report'); } },
    el('label', { for: 'usage-tier' }, 'Tier'),
    el('select', { id: 'usage-tier' }, ['human', 'agent'].map((t) => el('option', { value: t, selected: t === report.tier }, t))),
    el('button', { type: 'submit' }, 'Change tier'));
  fill($('usage-report'),
    el('h3', {}, el('code', { class: 'wrap' }, report.principal)),
    figures(el('dl', { class: 'figures' }), [['Tier', report.tier], ['Connections', report.connections],
      ['Subscriptions', report.subscriptions], ['Stored events', report.stored_events], ['Refusals', refusals || 'none'],
      ['First seen', when(report.first_seen)], ['Last seen', when(report.last_seen)]]),
    el('div', { class: 'meters' }, meters),
    tierSelect,
    el('div', { class: 'actions' }, el('button', { type: 'button', class: 'danger', onclick: () => ban(report.principal, 'report') }, isIp(report.principal) ? 'Block this IP' : 'Ban this pubkey')),
    el('p', { id: 'usage-message', role: 'status', 'aria-live': 'polite' }));
}

async function lookUp(event) {
  event?.preventDefault();
  const who = $('usage-who').value.trim();
  if (!who) {
    fill($('usage-report'), el('p', { class: 'error', role: 'alert' }, 'Enter a pubkey (hex or npub) or an IP address.'));
    return;
  }
  try {
    renderReport(await get(usagePath(who)));
    looked = who;
  } catch (e) {
    if (e instanceof Unauthorized) showSignIn(e.message);
    else fill($('usage-report'), el('p', { class: 'error', role: 'alert' }, e.message));
  }
}

async function loadBusiest() {
  await guarded(async () => {
    const sort = $('busiest-sort').value;
    const data = await get(`/admin/v1/usage?sort=${sort}&limit=20`);
    await learn(data.principals.map((p) => p.principal));
    const sum = (o) => Object.values(o).reduce((a, b) => a + (typeof b === 'number' ? b : b.used), 0);
    table($('busiest'), ['Principal', 'Tier', 'In use', 'Refusals', 'Connections', 'Actions'],
      data.principals.map((p) => [
        el('button', { type: 'button', class: 'link', 'aria-label': `Look up ${short(p.principal)}`, onclick: () => { $('usage-who').value = p.principal; lookUp(); } }, isIp(p.principal) ? el('code', {}, short(p.principal)) : named(p.principal)),
        p.tier, sum(p.limits), sum(p.refusals), p.connections, actions(p.principal, p.tier, 'table'),
      ]), 'No principal is tracked yet.');
  });
}

async function loadUsage(first) {
  await loadBusiest();
  if (!first && looked && $('usage-who').value.trim() === looked) {
    await guarded(async () => renderReport(await get(usagePath(looked))));
  }
}

function usageMessage(where, text) {
  // A row's action is reported below the report; the report's own, inside it.
  const node = where === 'report' ? $('usage-message') : $('usage-status');
  if (node) say(node, text);
}

async function setTier(pubkey, tier, where) {
  await guarded(async () => {
    await call('PUT', `/admin/v1/pubkeys/${encodeURIComponent(pubkey)}/tier`, { body: { tier } });
    await loadUsage(false);
    if (looked === pubkey) renderReport(await get(usagePath(pubkey)));
    usageMessage(where, `${short(pubkey)} is in the ${tier} tier now.`);
  });
}

async function ban(principal, where) {
  await guarded(async () => {
    if (isIp(principal)) await rpc('blockip', [principal, 'from the admin page']);
    else await rpc('banpubkey', [principal, 'from the admin page']);
    usageMessage(where, `${short(principal)} is ${isIp(principal) ? 'blocked' : 'banned'}.`);
  });
}

// ---------- moderation ----------

const LISTS = [
  { title: 'Banned pubkeys', list: 'listbannedpubkeys', field: 'pubkey', remove: 'unbanpubkey', verb: 'Unban',
    add: { method: 'banpubkey', label: 'Pubkey to ban', button: null } },
  { title: 'Banned events', list: 'listbannedevents', field: 'id', remove: 'allowevent', verb: 'Allow',
    add: { method: 'banevent', label: 'Event id to ban', button: 'Ban event' } },
  { title: 'Allowed kinds', list: 'listallowedkinds', field: null, remove: 'disallowkind', verb: 'Remove',
    add: { method: 'allowkind', label: 'Kind to allow', button: 'Allow kind', number: true } },
  { title: 'Blocked IPs', list: 'listblockedips', field: 'ip', remove: 'unblockip', verb: 'Unblock',
    add: { method: 'blockip', label: 'IP to block', button: 'Block IP' } },
];

async function moderate(method, params, message) {
  await guarded(async () => {
    await rpc(method, params);
    await loadModeration(true);
    say($('moderation-message'), message);
  }, $('moderation-message'));
}

async function loadModeration(first) {
  if (!first) return;
  await guarded(async () => {
    const lists = await Promise.all(LISTS.map((l) => rpc(l.list)));
    await learn(lists.flat().map((item) => item?.pubkey).filter(Boolean));
    const sections = LISTS.map((l, n) => {
      const id = `list-${l.list}`;
      const items = lists[n] ?? [];
      const rows = items.map((item) => {
        const value = l.field ? item[l.field] : item;
        const reason = l.field ? item.reason : '';
        const shown = l.field === 'pubkey' ? named(String(value)) : el('code', { class: 'wrap' }, String(value));
        return el('li', {}, shown, reason ? el('span', { class: 'muted' }, ` ${reason}`) : '',
          el('button', { type: 'button', 'aria-label': `${l.verb} ${short(String(value))}`, onclick: () => moderate(l.remove, [value], `${l.verb}: ${short(String(value))}.`) }, l.verb));
      });
      const form = l.add.button ? el('form', { class: 'inline', novalidate: true, onsubmit: (e) => {
        e.preventDefault();
        const input = $(`${id}-add`);
        const raw = input.value.trim();
        if (!raw) return;
        const value = l.add.number ? Number(raw) : raw;
        moderate(l.add.method, [value], `${l.add.button}: ${short(raw)}.`);
      } }, el('label', { for: `${id}-add` }, l.add.label), el('input', { id: `${id}-add`, autocomplete: 'off', spellcheck: 'false', inputmode: l.add.number ? 'numeric' : undefined }), el('button', { type: 'submit' }, l.add.button)) : '';
      return el('section', { class: 'list', 'aria-labelledby': `${id}-title` },
        el('h3', { id: `${id}-title` }, `${l.title} (${items.length})`),
        rows.length ? el('ul', { class: 'items' }, rows) : el('p', { class: 'muted' }, 'None.'),
        form);
    });
    fill($('moderation-lists'), sections);
    const relay = await get('/admin/v1/relay');
    $('relay-name').value = relay.name ?? '';
    $('relay-description').value = relay.description ?? '';
    $('relay-icon').value = relay.icon ?? '';
  });
}

async function banFromForm(event) {
  event.preventDefault();
  const pubkey = $('ban-pubkey').value.trim();
  if (!pubkey) {
    say($('moderation-message'), 'Enter a pubkey (hex or npub).');
    return;
  }
  await moderate('banpubkey', [pubkey, $('ban-reason').value.trim()], `Banned ${short(pubkey)}.`);
  $('ban-pubkey').value = '';
  $('ban-reason').value = '';
}

async function saveRelay(event) {
  event.preventDefault();
  await guarded(async () => {
    const relay = await get('/admin/v1/relay');
    const changes = [['changerelayname', 'relay-name', relay.name], ['changerelaydescription', 'relay-description', relay.description], ['changerelayicon', 'relay-icon', relay.icon]];
    let changed = 0;
    for (const [method, id, was] of changes) {
      const value = $(id).value.trim();
      if (value !== (was ?? '')) {
        await rpc(method, [value]);
        changed += 1;
      }
    }
    say($('relay-message'), changed ? 'Saved.' : 'Nothing changed.');
  }, $('relay-message'));
}

// ---------- audit ----------

const show = (v) => (v === null || v === undefined ? '—' : typeof v === 'string' ? v : JSON.stringify(v));

async function loadAudit(first) {
  if (!first) return;
  await guarded(async () => {
    const { entries } = await get('/admin/v1/audit?limit=200');
    await learn(entries.flatMap((e) => [e.who, e.target]));
    // A key (an admin signing with NIP-98, a key that vanished, a member or ban target) by name.
    const key = (text, wrap) => (/^[0-9a-f]{64}$/.test(text) ? named(text) : el('code', wrap ? { class: 'wrap' } : {}, short(text)));
    table($('audit'), ['When', 'Who', 'What', 'Target', 'Old → new'],
      entries.map((e) => [when(e.at), key(e.who, false), e.action, key(e.target, true), `${show(e.old)} → ${show(e.new)}`]),
      'No change has been made yet.');
  });
}

// ---------- store ----------

async function loadStore() {
  await guarded(async () => {
    const s = await get('/admin/v1/store');
    const last = s.last_compaction;
    figures($('store-figures'), [
      ['Events', s.events], ['Live bytes', bytes(s.live_bytes)], ['Dead bytes', bytes(s.dead_bytes)],
      ['Log bytes', bytes(s.log_bytes)], ['Index bytes', bytes(s.index_bytes)], ['Index segments', s.index_segments],
      ['Log generation', s.log_generation], ['Compacting', s.compacting ? 'yes' : 'no'],
      ['Last compaction', last ? `${when(last.at)}: ${bytes(last.before_bytes)} → ${bytes(last.after_bytes)} in ${last.seconds.toFixed(1)} s` : 'never'],
    ]);
    $('store-compact').disabled = s.compacting;
  });
  await loadSync(guarded);
}

async function compactNow() {
  try {
    await call('POST', '/admin/v1/store/compact');
    say($('store-message'), 'A compaction has started.');
  } catch (e) {
    if (e instanceof Unauthorized) showSignIn(e.message);
    else say($('store-message'), e instanceof ApiError && e.status === 409 ? 'A compaction is already running.' : e.message);
  }
  await loadStore();
}

const LOADERS = {
  overview: loadOverview,
  limits: loadLimits,
  usage: loadUsage,
  moderation: loadModeration,
  members: () => loadMembers(guarded),
  groups: () => loadGroups(guarded),
  media: () => loadMedia(guarded),
  reports: () => loadReports(guarded),
  audit: loadAudit,
  store: loadStore,
};

// ---------- start ----------

window.addEventListener('hashchange', route);
document.addEventListener('DOMContentLoaded', () => {
  $('sign-in-form').addEventListener('submit', signIn);
  $('sign-out').addEventListener('click', () => showSignIn(''));
  $('limits-form').addEventListener('submit', applyLimits);
  $('limits-reset-all').addEventListener('click', resetAll);
  $('usage-form').addEventListener('submit', lookUp);
  $('busiest-sort').addEventListener('change', loadBusiest);
  $('ban-form').addEventListener('submit', banFromForm);
  $('relay-form').addEventListener('submit', saveRelay);
  $('store-compact').addEventListener('click', compactNow);
  wireMembers(guarded);
  if (token.get()) enter();
  else showSignIn('');
});
