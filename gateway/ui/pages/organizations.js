// Organizations: /organization/list a page at a time, searched by alias
// on the server, with budgets, models and teams;
// create (/organization/new), edit (PATCH /organization/update: alias,
// models, budget) and delete (/organization/delete).

import { api, newestOnly, query } from '../api.js';
import { h, replace, table, field, values, notice, budgetBar, list, dialog, pager, plural } from '../dom.js';

const SIZE = 25;

export async function render(main, title) {
  const state = { page: 1, alias: '' };
  const status = h('div', {});
  const listPanel = h('div', {});
  const form = h('form', { class: 'grid', id: 'create-org-form' },
    field('Alias', 'organization_alias', { required: true }),
    field('Models (comma-separated)', 'models'),
    field('Max budget (USD)', 'max_budget', { type: 'number' }),
    h('div', {}, h('button', { type: 'submit' }, 'Create organization')));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const v = values(form);
    const body = { organization_alias: v.organization_alias };
    try {
      if (v.models) body.models = list(v.models);
      if (v.max_budget !== undefined) {
        body.max_budget = Number(v.max_budget);
        if (!Number.isFinite(body.max_budget)) throw new Error('max_budget must be a number');
      }
      await api('POST', '/organization/new', body);
      form.reset();
      replace(status, notice(`Organization ${v.organization_alias} created.`, 'ok'));
    } catch (e) {
      replace(status, notice(e.message));
    }
    await load();
  });

  function edit(o) {
    const budget = o.litellm_budget_table ? o.litellm_budget_table.max_budget : null;
    const editForm = h('form', { class: 'grid', id: 'edit-org-form' },
      field('Alias', 'organization_alias', { required: true, value: o.organization_alias }),
      field('Models (comma-separated, empty: all)', 'models', { value: (o.models || []).join(', ') }),
      field('Max budget (USD, empty: none)', 'max_budget', { type: 'number', value: budget }),
      h('div', {}, h('button', { type: 'submit' }, 'Save')));
    const err = h('div', {});
    editForm.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const v = values(editForm);
      try {
        const body = {
          organization_id: o.organization_id, organization_alias: v.organization_alias,
          models: list(v.models), max_budget: null,
        };
        if (v.max_budget !== undefined) {
          body.max_budget = Number(v.max_budget);
          if (!Number.isFinite(body.max_budget)) throw new Error('max_budget must be a number');
        }
        await api('PATCH', '/organization/update', body);
        editForm.closest('dialog').close();
        replace(status, notice(`Organization ${v.organization_alias} updated.`, 'ok'));
        await load();
      } catch (e) {
        replace(err, notice(e.message));
      }
    });
    return dialog(`Edit ${o.organization_alias || o.organization_id}`, h('div', {}, err, editForm));
  }

  const search = h('form', { class: 'toolbar', id: 'org-search' },
    field('Alias contains', 'org_alias'),
    h('button', { type: 'submit', class: 'secondary' }, 'Search'));
  search.addEventListener('submit', (ev) => {
    ev.preventDefault();
    Object.assign(state, { page: 1, alias: values(search).org_alias || '' });
    load().catch((e) => replace(status, notice(e.message)));
  });

  const fresh = newestOnly();
  async function load() {
    const answer = await fresh(api('GET', `/organization/list${query({ page: state.page, page_size: SIZE, org_alias: state.alias })}`));
    if (!answer) return;
    const orgs = answer.organizations || [];
    const pages = Math.max(1, answer.total_pages || 1);
    replace(listPanel, table([
      ['Alias', (o) => o.organization_alias || '-'],
      ['Id', (o) => h('span', { class: 'mono' }, o.organization_id)],
      ['Spend / budget', (o) => budgetBar(o.spend, o.litellm_budget_table ? o.litellm_budget_table.max_budget : null)],
      ['Models', (o) => (o.models && o.models.length ? o.models.map((m) => h('span', { class: 'tag' }, m)) : 'all')],
      ['Teams', (o) => ((o.teams || []).length
        ? o.teams.map((t) => h('span', { class: 'tag' }, t.team_alias || t.team_id || String(t)))
        : '-')],
      ['Members', (o) => String((o.members || []).length)],
      ['', (o) => h('span', { class: 'actions' },
        h('button', { class: 'small secondary', 'data-action': 'edit', onclick: () => edit(o) }, 'Edit'),
        h('button', {
          class: 'small danger',
          'data-action': 'delete',
          onclick: async () => {
            if (!window.confirm(`Delete ${o.organization_alias || o.organization_id} with its teams and their keys?`)) return;
            try {
              await api('DELETE', '/organization/delete', { organization_ids: [o.organization_id] });
              replace(status, notice('Organization deleted.', 'ok'));
            } catch (e) {
              replace(status, notice(e.message));
            }
            await load();
          },
        }, 'Delete'))],
    ], orgs, state.alias ? 'No organization matches.' : 'No organizations.'),
    pager(state.page, pages, `Page ${state.page} of ${pages} · ${plural(answer.total, 'organization')}`,
      (page) => { state.page = page; load(); }));
    const trs = listPanel.querySelectorAll('tbody tr');
    orgs.forEach((o, i) => { if (trs[i]) trs[i].dataset.org = o.organization_alias || ''; });
  }

  replace(main, h('h1', {}, title), status,
    h('div', { class: 'panel' }, h('h2', {}, 'Create an organization'), form),
    h('div', { class: 'panel' }, search, listPanel));
  await load();
}
