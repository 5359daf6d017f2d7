// Teams: /v2/team/list a page at a time, searched on the server (id or
// alias, organization, member), with members and roles, budgets, models
// and limits;
// create (/team/new), edit (/team/update: alias, models, budget, limits),
// edit members (./team_members.js), block/unblock, delete. An internal
// user sees the teams it is a member of (the gateway pins the member
// filter to it), read-only, as in LiteLLM's UI.

import { api, newestOnly, query } from '../api.js';
import { h, replace, table, field, values, notice, budgetBar, num, list, dialog, pager, plural } from '../dom.js';
import { editMembers } from './team_members.js';

const SIZE = 25;

/** A /team/update body from form values: an emptied number is removed (null). */
function teamChanges(v) {
  const body = { team_alias: v.team_alias, models: list(v.models), budget_duration: v.budget_duration || null };
  for (const k of ['max_budget', 'tpm_limit', 'rpm_limit']) {
    if (v[k] === undefined) {
      body[k] = null;
    } else {
      const n = Number(v[k]);
      if (!Number.isFinite(n) || (k !== 'max_budget' && !Number.isInteger(n))) throw new Error(`${k} must be a number`);
      body[k] = n;
    }
  }
  return body;
}

export async function render(main, title, session) {
  const admin = !session || session.role !== 'internal_user';
  const state = { page: 1, search: '', org: '', user: '' };
  const status = h('div', {});
  const listPanel = h('div', {});
  const search = h('form', { class: 'toolbar', id: 'team-search' },
    field('Team id or alias', 'search'), field('Organization id', 'org'),
    admin ? field('Member user id', 'user') : null,
    h('button', { type: 'submit', class: 'secondary' }, 'Search'));
  search.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const v = values(search);
    Object.assign(state, { page: 1, search: v.search || '', org: v.org || '', user: v.user || '' });
    load().catch((e) => replace(status, notice(e.message)));
  });
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

  function edit(t) {
    const form = h('form', { class: 'grid', id: 'edit-team-form' },
      field('Alias', 'team_alias', { required: true, value: t.team_alias }),
      field('Models (comma-separated, empty: all)', 'models', { value: (t.models || []).join(', ') }),
      field('Max budget (USD, empty: none)', 'max_budget', { type: 'number', value: t.max_budget }),
      field('Budget duration', 'budget_duration', { value: t.budget_duration }),
      field('TPM limit', 'tpm_limit', { type: 'number', value: t.tpm_limit }),
      field('RPM limit', 'rpm_limit', { type: 'number', value: t.rpm_limit }),
      h('div', {}, h('button', { type: 'submit' }, 'Save')));
    const err = h('div', {});
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      try {
        await api('POST', '/team/update', { team_id: t.team_id, ...teamChanges(values(form)) });
        form.closest('dialog').close();
        replace(status, notice(`Team ${values(form).team_alias} updated.`, 'ok'));
        await load();
      } catch (e) {
        replace(err, notice(e.message));
      }
    });
    return dialog(`Edit team ${t.team_alias || t.team_id}`, h('div', {}, err, form));
  }

  const fresh = newestOnly();
  async function load() {
    const answer = await fresh(api('GET', `/v2/team/list${query({
      page: state.page, page_size: SIZE, search: state.search, organization_id: state.org, user_id: state.user,
    })}`));
    if (!answer) return;
    const teams = answer.teams || [];
    const pages = Math.max(1, answer.total_pages || 1);
    replace(listPanel, table([
      ['Alias', (t) => t.team_alias || '-'],
      ['Id', (t) => h('span', { class: 'mono' }, t.team_id)],
      ['Members (role)', (t) => (t.members_with_roles || []).map((m) =>
        h('span', { class: 'tag' }, `${m.user_id || m.user_email} (${m.role})`))],
      ['Spend / budget', (t) => budgetBar(t.spend, t.max_budget)],
      ['TPM / RPM', (t) => `${num(t.tpm_limit)} / ${num(t.rpm_limit)}`],
      ['Models', (t) => (t.models && t.models.length ? t.models.map((m) => h('span', { class: 'tag' }, m)) : 'all')],
      ['Status', (t) => h('span', { class: `tag ${t.blocked ? 'bad' : 'ok'}` }, t.blocked ? 'blocked' : 'active')],
      ['', (t) => (!admin ? '' : h('span', {},
        h('button', {
          class: 'small secondary',
          'data-action': 'members',
          onclick: async () => {
            await editMembers(t).catch((e) => replace(status, notice(e.message)));
            await load();
          },
        }, 'Members'),
        h('button', { class: 'small secondary', 'data-action': 'edit', onclick: () => edit(t) }, 'Edit'),
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
        }, 'Delete')))],
    ], teams, state.search || state.org || state.user ? 'No team matches.' : 'No teams.'),
    pager(state.page, pages, `Page ${state.page} of ${pages} · ${plural(answer.total, 'team')}`,
      (page) => { state.page = page; load(); }));
  }

  replace(main, h('h1', {}, title), status,
    admin ? h('div', { class: 'panel' }, h('h2', {}, 'Create a team'), form)
      : notice(`The teams you are a member of (user ${session.user_id}); ask an admin to change one.`, 'info'),
    h('div', { class: 'panel' }, search, listPanel));
  await load();
}
