// Limits: the limiter's state from /health/readiness/details (mode, Redis breaker,
// script calls) and the rpm/tpm/parallel limits set on keys and teams.
// Live per-key counters are not exposed by any admin endpoint yet, so they
// are not shown.

import { api, query } from '../api.js';
import { h, replace, table, num, notice } from '../dom.js';

function card(label, value) {
  return h('div', { class: 'card' }, h('div', { class: 'label' }, label), h('div', { class: 'value' }, value));
}

const limited = (x) => x.tpm_limit != null || x.rpm_limit != null || x.max_parallel_requests != null;

export async function render(main, title) {
  const ready = await api('GET', '/health/readiness/details');
  const limiter = ready.limiter || {};
  const keys = await api('GET', `/key/list${query({ return_full_object: 'true', size: 100 })}`);
  const teams = await api('GET', '/team/list');
  const rows = (xs) => xs.filter(limited);
  replace(main, h('h1', {}, title),
    h('div', { class: 'cards' },
      card('Limiter mode', limiter.mode || '-'),
      card('Redis breaker', limiter.breaker || 'no Redis'),
      card('Redis script calls', num(limiter.redis_calls)),
      card('Redis', ready.redis || 'not configured')),
    notice('Live rpm/tpm/parallel usage per key or team is not exposed by the admin API yet; the limits set are shown.', 'info'),
    h('div', { class: 'panel' }, h('h2', {}, 'Keys with limits (first 100 keys)'), table([
      ['Key', (k) => k.key_alias || k.key_name || k.token],
      ['TPM', (k) => num(k.tpm_limit)], ['RPM', (k) => num(k.rpm_limit)],
      ['Parallel', (k) => num(k.max_parallel_requests)],
    ], rows(keys.keys || []), 'No key has a limit.')),
    h('div', { class: 'panel' }, h('h2', {}, 'Teams with limits'), table([
      ['Team', (t) => t.team_alias || t.team_id],
      ['TPM', (t) => num(t.tpm_limit)], ['RPM', (t) => num(t.rpm_limit)],
      ['Parallel', (t) => num(t.max_parallel_requests)],
    ], rows(teams || []), 'No team has a limit.')));
}
