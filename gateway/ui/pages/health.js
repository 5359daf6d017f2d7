// Health: readiness (database, Redis, change listener, limiter, version) and every deployment's
// health from /health (a check made now, or the background loop's last).

import { api } from '../api.js';
import { h, replace, table, notice } from '../dom.js';

function card(label, value, cls = '') {
  return h('div', { class: 'card' }, h('div', { class: 'label' }, label), h('div', { class: `value ${cls}` }, value));
}

export async function render(main, title) {
  const ready = await api('GET', '/health/readiness/details');
  const cards = h('div', { class: 'cards' },
    card('Status', ready.status || '-'),
    card('Database', String(ready.db ?? '-')),
    card('Redis', ready.redis || 'not configured'),
    card('Change listener', ready.change_listener || '-'),
    card('Limiter', (ready.limiter && ready.limiter.mode) || '-'),
    card('Panics caught', String(ready.panics_caught ?? 0)),
    card('Version', ready.litellm_version || '-'));
  const deployments = h('div', { class: 'panel' }, h('p', { class: 'muted' }, 'Checking deployments…'));
  const recheck = h('button', { class: 'secondary', id: 'recheck' }, 'Check again');
  replace(main, h('h1', {}, title), cards, h('div', { class: 'toolbar' }, recheck), deployments);

  async function load() {
    try {
      const report = await api('GET', '/health');
      const rows = [
        ...(report.healthy_endpoints || []).map((e) => ({ ...e, healthy: true })),
        ...(report.unhealthy_endpoints || []).map((e) => ({ ...e, healthy: false })),
      ];
      replace(deployments,
        h('p', {}, `${report.healthy_count ?? 0} healthy, ${report.unhealthy_count ?? 0} unhealthy`),
        table([
          ['Model', (e) => h('span', { class: 'mono' }, e.model || '-')],
          ['API base', (e) => h('span', { class: 'mono' }, e.api_base || '-')],
          ['State', (e) => h('span', { class: `tag ${e.healthy ? 'ok' : 'bad'}` }, e.healthy ? 'healthy' : 'unhealthy')],
          ['Error', (e) => e.error || ''],
        ], rows, 'No deployments.'));
    } catch (e) {
      replace(deployments, notice(e.message));
    }
  }
  recheck.addEventListener('click', load);
  await load();
}
