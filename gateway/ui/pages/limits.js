// Limits: the limiter's state from /health/readiness/details (mode, Redis breaker,
// script calls), a key's or team's limits beside their current use
// (/gateway/limits, whose `counted_in` says where the count lives: this
// replica's counters in local mode and while Redis is unusable, else the
// fleet's in Redis, read there), and the rpm/tpm/parallel limits set
// on keys (every key with one, paged on the server: /key/list?has_limits=true)
// and teams.

import { api, query } from '../api.js';
import { h, replace, table, num, notice, field, values } from '../dom.js';

function card(label, value) {
  return h('div', { class: 'card' }, h('div', { class: 'label' }, label), h('div', { class: 'value' }, value));
}

const limited = (x) => x.tpm_limit != null || x.rpm_limit != null || x.max_parallel_requests != null;

function liveView() {
  const out = h('div', { id: 'live-limits' });
  const form = h('form', { class: 'toolbar', id: 'live-limits-form' },
    field('Key (sk-… or its hash)', 'api_key'), field('or team id', 'team_id'),
    h('button', { type: 'submit', class: 'secondary' }, 'Show live use'));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const v = values(form);
    try {
      const live = await api('GET', `/gateway/limits${query({ api_key: v.api_key, team_id: v.team_id })}`);
      const unread = live.limits.some((l) => l.current == null);
      const where = live.counted_in === 'replica'
        ? notice(`Use as counted by this replica (${live.mode === 'local' ? 'local mode: each replica counts its own traffic' : 'Redis is unusable, so each replica counts alone'}), over a ${live.window_secs} s window.`, 'info')
        : notice(unread
          ? 'The fleet counts in Redis, which did not answer in time, so the limits are shown without their use.'
          : `Use as the fleet counts it in Redis, over a ${live.window_secs} s window.`, 'info');
      replace(out, where,
        table([
          ['Scope', (l) => l.scope], ['Id', (l) => h('span', { class: 'mono' }, `${String(l.id).slice(0, 16)}`)],
          ['Type', (l) => l.type], ['Limit', (l) => num(l.limit)],
          ['Current', (l) => (l.current == null ? '-' : num(l.current))],
          ['Remaining', (l) => (l.remaining == null ? '-' : num(l.remaining))],
        ], live.limits, 'No limit is set here.'));
    } catch (e) {
      replace(out, notice(e.message));
    }
  });
  return h('div', { class: 'panel' }, h('h2', {}, 'Live use'), form, out);
}

const KEYS_PAGE = 25;

/** The keys with limits, a page at a time. */
function limitedKeys() {
  const out = h('div', { id: 'limited-keys' });
  let page = 1;
  async function load() {
    const list = await api('GET', `/key/list${query({ return_full_object: 'true', has_limits: 'true', size: KEYS_PAGE, page })}`);
    const pages = Math.max(list.total_pages || 0, 1);
    const prev = h('button', { class: 'secondary small', disabled: page <= 1 }, 'Earlier');
    const next = h('button', { class: 'secondary small', disabled: page >= pages }, 'Later');
    prev.addEventListener('click', () => { page -= 1; load().catch((e) => replace(out, notice(e.message))); });
    next.addEventListener('click', () => { page += 1; load().catch((e) => replace(out, notice(e.message))); });
    replace(out, table([
      ['Key', (k) => k.key_alias || k.key_name || k.token],
      ['TPM', (k) => num(k.tpm_limit)], ['RPM', (k) => num(k.rpm_limit)],
      ['Parallel', (k) => num(k.max_parallel_requests)],
    ], list.keys || [], 'No key has a limit.'),
    h('div', { class: 'pager' }, prev, `Page ${page} of ${pages} (${num(list.total_count)} keys with limits)`, next));
  }
  return { out, load };
}

export async function render(main, title) {
  const ready = await api('GET', '/health/readiness/details');
  const limiter = ready.limiter || {};
  const keys = limitedKeys();
  await keys.load();
  const teams = await api('GET', '/team/list');
  const state = await api('GET', '/gateway/limits');
  const rows = (xs) => xs.filter(limited);
  replace(main, h('h1', {}, title),
    h('div', { class: 'cards' },
      card('Limiter mode', limiter.mode || '-'),
      card('Redis breaker', limiter.breaker || 'no Redis'),
      card('Redis script calls', num(limiter.redis_calls)),
      card('Redis', ready.redis || 'not configured'),
      card('TPM reservation', state.reservation ? 'on' : 'off')),
    liveView(),
    h('div', { class: 'panel' }, h('h2', {}, 'Keys with limits'), keys.out),
    h('div', { class: 'panel' }, h('h2', {}, 'Teams with limits'), table([
      ['Team', (t) => t.team_alias || t.team_id],
      ['TPM', (t) => num(t.tpm_limit)], ['RPM', (t) => num(t.rpm_limit)],
      ['Parallel', (t) => num(t.max_parallel_requests)],
    ], rows(teams || []), 'No team has a limit.')));
}
