// Limits: the limiter's state from /health/readiness/details (mode, Redis
// breaker, script calls), a key's or team's limits beside their current
// use (/gateway/limits: every limit a request of the key's is checked
// against, its team's, organization's and user's, a budget row's, per-model
// and per-tag ones included; `counted_in` says where the count lives: this
// replica's counters in local mode and while Redis is unusable, else the
// fleet's in Redis, read there), and the keys (every key with a limit,
// paged on the server: /key/list?has_limits=true) and teams with limits
// (paged on the server too: /v2/team/list?has_limits=true), each with a
// button that shows its live use.

import { api, query } from '../api.js';
import { h, replace, table, num, notice, field, values, pager, plural } from '../dom.js';
import { shareBar } from '../chart.js';

function card(label, value) {
  return h('div', { class: 'card' }, h('div', { class: 'label' }, label), h('div', { class: 'value' }, value));
}

const SCOPES = {
  server: 'Server', organization: 'Organization', team: 'Team', user: 'User', api_key: 'Key',
  model_per_key: 'Key, per model', model_per_team: 'Team, per model',
  model_per_organization: 'Organization, per model', tag_per_key: 'Key, per tag',
  team_member: 'Team member', end_user: 'End user',
};

/** A limit's use as a bar and "used of limit". */
function useCell(l) {
  if (l.current == null) return '-';
  const label = `${num(l.current)} of ${num(l.limit)}`;
  return h('span', { class: 'budget' }, shareBar(l.current, l.limit, label), label);
}

/** Per-model limits of a row (`{model: n}` maps) as text. */
function perModel(row) {
  const meta = row.metadata || {};
  const rpm = row.model_rpm_limit || meta.model_rpm_limit || {};
  const tpm = row.model_tpm_limit || meta.model_tpm_limit || {};
  const models = [...new Set([...Object.keys(rpm), ...Object.keys(tpm)])].sort();
  if (!models.length) return '-';
  return models.map((m) => {
    const parts = [rpm[m] != null ? `${num(rpm[m])} rpm` : null, tpm[m] != null ? `${num(tpm[m])} tpm` : null];
    return h('span', { class: 'tag' }, `${m}: ${parts.filter(Boolean).join(', ')}`);
  });
}

function liveView() {
  const out = h('div', { id: 'live-limits' });
  const form = h('form', { class: 'toolbar', id: 'live-limits-form' },
    field('Key (sk-… or its hash)', 'api_key'), field('or team id', 'team_id'),
    field('Model group (optional)', 'model'),
    h('button', { type: 'submit', class: 'secondary' }, 'Show live use'));
  async function show(v) {
    try {
      const live = await api('GET', `/gateway/limits${query({ api_key: v.api_key, team_id: v.team_id, model: v.model })}`);
      const unread = live.limits.some((l) => l.current == null);
      const where = live.counted_in === 'replica'
        ? notice(`Use as counted by this replica (${live.mode === 'local' ? 'local mode: each replica counts its own traffic' : 'Redis is unusable, so each replica counts alone'}), over a ${live.window_secs} s window.`, 'info')
        : notice(unread
          ? 'The fleet counts in Redis, which did not answer in time, so the limits are shown without their use.'
          : `Use as the fleet counts it in Redis (every replica's requests), over a ${live.window_secs} s window.`, 'info');
      replace(out, where,
        table([
          ['Scope', (l) => SCOPES[l.scope] || l.scope],
          ['Id', (l) => h('span', { class: 'mono', title: l.id }, String(l.id).length > 24 ? `${String(l.id).slice(0, 16)}…` : l.id)],
          ['Model / tag', (l) => l.model || l.tag || '-'],
          ['Type', (l) => l.type], ['Limit', (l) => num(l.limit)],
          ['Used', useCell],
          ['Remaining', (l) => (l.remaining == null ? '-' : num(l.remaining))],
        ], live.limits, 'No limit applies here.'));
    } catch (e) {
      replace(out, notice(e.message));
    }
  }
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    show(values(form));
  });
  /** Fills the form with `v` and shows its use. */
  function open(v) {
    for (const el of form.elements) if (el.name) el.value = v[el.name] || '';
    form.scrollIntoView({ block: 'start' });
    return show(v);
  }
  return { panel: h('div', { class: 'panel' }, h('h2', {}, 'Live use'), form, out), open };
}

const KEYS_PAGE = 25;

/** The keys with limits, a page at a time. */
function limitedKeys(live) {
  const out = h('div', { id: 'limited-keys' });
  let page = 1;
  async function load() {
    const list = await api('GET', `/key/list${query({ return_full_object: 'true', has_limits: 'true', size: KEYS_PAGE, page })}`);
    const pages = Math.max(list.total_pages || 0, 1);
    const shared = (k) => (k.budget_id && !String(k.budget_id).startsWith('key-') ? k.budget_id : null);
    replace(out, table([
      ['Key', (k) => k.key_alias || k.key_name || k.token],
      ['TPM', (k) => num(k.tpm_limit)], ['RPM', (k) => num(k.rpm_limit)],
      ['Parallel', (k) => num(k.max_parallel_requests)],
      ['Per model', perModel],
      ['Budget row', (k) => (shared(k) ? h('span', { class: 'mono', title: 'Its rpm/tpm limits apply where the key sets none' }, shared(k)) : '-')],
      ['', (k) => h('button', { class: 'secondary small', onclick: () => live.open({ api_key: k.token }) }, 'Live use')],
    ], list.keys || [], 'No key has a limit.'),
    pager(page, pages, `Page ${page} of ${pages} (${plural(list.total_count, 'key')} with limits)`,
      (p) => { page = p; load().catch((e) => replace(out, notice(e.message))); }));
  }
  return { out, load };
}

/** The teams with limits, a page at a time. */
function limitedTeams(live) {
  const out = h('div', { id: 'limited-teams' });
  let page = 1;
  async function load() {
    const list = await api('GET', `/v2/team/list${query({ has_limits: 'true', sort_by: 'team_id', page_size: KEYS_PAGE, page })}`);
    const pages = Math.max(list.total_pages || 0, 1);
    replace(out, table([
      ['Team', (t) => t.team_alias || t.team_id],
      ['TPM', (t) => num(t.tpm_limit)], ['RPM', (t) => num(t.rpm_limit)],
      ['Parallel', (t) => num(t.max_parallel_requests)],
      ['Per model', perModel],
      ['', (t) => h('button', { class: 'secondary small', onclick: () => live.open({ team_id: t.team_id }) }, 'Live use')],
    ], list.teams || [], 'No team has a limit.'),
    pager(page, pages, `Page ${page} of ${pages} (${plural(list.total, 'team')} with limits)`,
      (p) => { page = p; load().catch((e) => replace(out, notice(e.message))); }));
  }
  return { out, load };
}

export async function render(main, title) {
  const ready = await api('GET', '/health/readiness/details');
  const limiter = ready.limiter || {};
  const live = liveView();
  const keys = limitedKeys(live);
  await keys.load();
  const teams = limitedTeams(live);
  await teams.load();
  const state = await api('GET', '/gateway/limits');
  replace(main, h('h1', {}, title),
    h('div', { class: 'cards' },
      card('Limiter mode', limiter.mode || '-'),
      card('Redis breaker', limiter.breaker || 'no Redis'),
      card('Redis script calls', num(limiter.redis_calls)),
      card('Redis', ready.redis || 'not configured'),
      card('TPM reservation', state.reservation ? 'on' : 'off'),
      card('Use counted', state.counted_in === 'fleet' ? 'fleet (Redis)' : 'this replica')),
    live.panel,
    h('div', { class: 'panel' }, h('h2', {}, 'Keys with limits'), keys.out),
    h('div', { class: 'panel' }, h('h2', {}, 'Teams with limits'), teams.out));
}
