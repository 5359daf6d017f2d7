// Teams: /team/list with members and roles, budgets, models and limits;
// create (/team/new), edit members (./team_members.js), block/unblock,
// delete.

import { api } from '../api.js';
import { h, replace, table, field, values, notice, budgetBar, num, list } from '../dom.js';
import { editMembers } from './team_members.js';

export async function render(main, title) {
  const status = h('div', {});
  const listPanel = h('div', { class: 'panel' });
  const form = h('form', { class: 'grid', id: 'create-team-form' },
    field('Alias', 'team_alias', { required: true }),
    field('Models (comma-separated)', 'models'),
    field('Max budget (USD)', 'max_budget', { type: 'number' }),
    field('Budget duration', 'budget_duration', { placeholder: '30d' }),
    field('TPM limit', 'tpm_limit', { type: 'number' }),
    field('RPM limit', 'rpm_limit', { type: 'number' }),
    h('div', {}, h('button', { type: 'submit' }, 'Create team')));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const v = values(form);
    const body = { team_alias: v.team_alias };
    try {
      if (v.models) body.models = list(v.models);
      if (v.budget_duration) body.budget_duration = v.budget_duration;
      for (const k of ['max_budget', 'tpm_limit', 'rpm_limit']) {
        if (v[k] !== undefined) {
          const n = Number(v[k]);
          if (!Number.isFinite(n)) throw new Error(`${k} must be a number`);
          body[k] = n;
        }
      }
      await api('POST', '/team/new', body);
      form.reset();
      replace(status, notice(`Team ${v.team_alias} created.`, 'ok'));
    } catch (e) {
      replace(status, notice(e.message));
    }
    await load();
  });

  async function act(fn, done) {
    try {
      await fn();
      replace(status, notice(done, 'ok'));
    } catch (e) {
      replace(status, notice(e.message));
    }
    await load();
  }

  async function load() {
    const teams = await api('GET', '/team/list');
    replace(listPanel, table([
      ['Alias', (t) => t.team_alias || '-'],
      ['Id', (t) => h('span', { class: 'mono' }, t.team_id)],
      ['Members (role)', (t) => (t.members_with_roles || []).map((m) =>
        h('span', { class: 'tag' }, `${m.user_id || m.user_email} (${m.role})`))],
      ['Spend / budget', (t) => budgetBar(t.spend, t.max_budget)],
      ['TPM / RPM', (t) => `${num(t.tpm_limit)} / ${num(t.rpm_limit)}`],
      ['Models', (t) => (t.models && t.models.length ? t.models.map((m) => h('span', { class: 'tag' }, m)) : 'all')],
      ['Status', (t) => h('span', { class: `tag ${t.blocked ? 'bad' : 'ok'}` }, t.blocked ? 'blocked' : 'active')],
      ['', (t) => h('span', {},
        h('button', {
          class: 'small secondary',
          'data-action': 'members',
          onclick: async () => {
            await editMembers(t).catch((e) => replace(status, notice(e.message)));
            await load();
          },
        }, 'Members'),
        h('button', {
          class: 'small secondary',
          onclick: () => act(() => api('POST', t.blocked ? '/team/unblock' : '/team/block', { team_id: t.team_id }),
            `Team ${t.team_alias || t.team_id} ${t.blocked ? 'unblocked' : 'blocked'}.`),
        }, t.blocked ? 'Unblock' : 'Block'),
        h('button', {
          class: 'small danger',
          onclick: () => {
            if (window.confirm(`Delete team ${t.team_alias || t.team_id} and its keys?`)) {
              act(() => api('POST', '/team/delete', { team_ids: [t.team_id] }), 'Team deleted.');
            }
          },
        }, 'Delete'))],
    ], teams || [], 'No teams.'));
  }

  replace(main, h('h1', {}, title), status,
    h('div', { class: 'panel' }, h('h2', {}, 'Create a team'), form), listPanel);
  await load();
}
