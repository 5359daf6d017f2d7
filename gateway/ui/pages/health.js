// Health: readiness (database, Redis, change listener, limiter, version), the
// replicas alive in the fleet (/gateway/replicas: their heartbeats in Redis;
// without Redis, this replica alone) and every deployment's health from
// /health (a check made now, or the background loop's last).

import { api } from '../api.js';
import { h, replace, table, notice, when } from '../dom.js';

function card(label, value, cls = '') {
  return h('div', { class: 'card' }, h('div', { class: 'label' }, label), h('div', { class: `value ${cls}` }, value));
}

function replicasPanel(fleet) {
  const n = fleet.replicas.length;
  const how = fleet.shared
    ? `Each replica writes a heartbeat to Redis every ${fleet.heartbeat_secs} s and drops off this list when none has come for ${fleet.lapse_secs} s. Read at ${when(fleet.as_of)} UTC.`
    : 'No Redis is configured: replicas cannot see each other, so this one is listed alone.';
  return h('div', { class: 'panel', id: 'replicas' },
    h('h2', {}, `Replicas (${n} alive)`),
    fleet.error ? notice(`The last heartbeat failed (${fleet.error}); the list is the last one read.`, 'info') : null,
    h('p', { class: 'muted' }, how),
    table([
      ['Replica', (r) => h('span', { class: 'mono' }, r.id.slice(0, 12))],
      ['', (r) => (r.this_replica ? h('span', { class: 'tag ok' }, 'this replica') : '')],
      ['Host', (r) => r.hostname || '-'],
      ['Address', (r) => h('span', { class: 'mono' }, r.address)],
      ['Process', (r) => String(r.pid)],
      ['Cores', (r) => String(r.workers)],
      ['Version', (r) => r.version],
      ['Started (UTC)', (r) => when(r.started_at)],
      ['Last heartbeat (UTC)', (r) => when(r.last_seen)],
    ], fleet.replicas, 'No replica.'));
}

export async function render(main, title) {
  const ready = await api('GET', '/health/readiness/details');
  const fleet = await api('GET', '/gateway/replicas');
  const cards = h('div', { class: 'cards' },
    card('Status', ready.status || '-'),
    card('Database', String(ready.db ?? '-')),
    card('Redis', ready.redis || 'not configured'),
    card('Change listener', ready.change_listener || '-'),
    card('Limiter', (ready.limiter && ready.limiter.mode) || '-'),
    card('Replicas', String(fleet.replicas.length)),
    card('Panics caught', String(ready.panics_caught ?? 0)),
    card('Version', ready.litellm_version || '-'));
  const deployments = h('div', { class: 'panel' }, h('p', { class: 'muted' }, 'Checking deployments…'));
  const recheck = h('button', { class: 'secondary', id: 'recheck' }, 'Check again');
  replace(main, h('h1', {}, title), cards, replicasPanel(fleet),
    h('h2', {}, 'Deployments'), h('div', { class: 'toolbar' }, recheck), deployments);

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
