// Users: /user/list a page at a time, searched on the server (part of
// the id or email, role), or the users named (user_ids); create (/user/new, which also issues a key, shown once),
// edit (/user/update: email, role, budget, models) and delete.

import { api, newestOnly, query } from '../api.js';
import { h, replace, table, field, values, notice, budgetBar, num, dialog, pager, plural } from '../dom.js';

const SIZE = 25;
const ROLES = ['internal_user', 'internal_user_viewer', 'proxy_admin', 'proxy_admin_viewer'];

/** A /user/update body from form values: an emptied budget is removed (null). */
function userChanges(v) {
  const body = { user_email: v.user_email || null, user_role: v.user_role };
  if (v.max_budget !== undefined) {
    body.max_budget = Number(v.max_budget);
    if (!Number.isFinite(body.max_budget)) throw new Error('max_budget must be a number');
  } else {
    body.max_budget = null;
  }
  body.models = String(v.models || '').split(',').map((m) => m.trim()).filter(Boolean);
  return body;
}

export async function render(main, title) {
  const state = { page: 1, ids: '', search: '', role: '' };
  const status = h('div', {});
  const listPanel = h('div', {});
  const form = h('form', { class: 'grid', id: 'create-user-form' },
    field('User id (empty: generated)', 'user_id'),
    field('Email', 'user_email', { type: 'email' }),
    field('Role', 'user_role', { options: ROLES }),
    field('Max budget (USD)', 'max_budget', { type: 'number' }),
    h('div', {}, h('button', { type: 'submit' }, 'Create user')));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const v = values(form);
    try {
      if (v.max_budget !== undefined) {
        v.max_budget = Number(v.max_budget);
        if (!Number.isFinite(v.max_budget)) throw new Error('max_budget must be a number');
      }
      const answer = await api('POST', '/user/new', v);
      form.reset();
      replace(status, notice(`User ${answer.user_id} created.`, 'ok'));
      await load();
      if (answer.key) {
        await dialog('Key of the new user', h('div', {},
          h('p', {}, 'Copy this key now: it is shown once.'), h('div', { class: 'secret' }, answer.key)));
      }
    } catch (e) {
      replace(status, notice(e.message));
    }
  });

  const search = h('form', { class: 'toolbar', id: 'user-search' },
    field('Id or email contains', 'search'),
    field('Role', 'role', { options: [['', 'any'], ...ROLES] }),
    field('User ids (comma-separated)', 'user_ids'),
    h('button', { type: 'submit', class: 'secondary' }, 'Search'));
  search.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const v = values(search);
    Object.assign(state, { page: 1, ids: v.user_ids || '', search: v.search || '', role: v.role || '' });
    load().catch((e) => replace(status, notice(e.message)));
  });

  function edit(u) {
    const role = field('Role', 'user_role', { options: ROLES });
    role.querySelector('select').value = u.user_role || 'internal_user';
    const form = h('form', { class: 'grid', id: 'edit-user-form' },
      field('Email', 'user_email', { type: 'email', value: u.user_email }),
      role,
      field('Max budget (USD, empty: none)', 'max_budget', { type: 'number', value: u.max_budget }),
      field('Models (comma-separated, empty: all)', 'models', { value: (u.models || []).join(', ') }),
      h('div', {}, h('button', { type: 'submit' }, 'Save')));
    const err = h('div', {});
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      try {
        await api('POST', '/user/update', { user_id: u.user_id, ...userChanges(values(form)) });
        form.closest('dialog').close();
        replace(status, notice(`User ${u.user_id} updated.`, 'ok'));
        await load();
      } catch (e) {
        replace(err, notice(e.message));
      }
    });
    return dialog(`Edit user ${u.user_id}`, h('div', {}, err, form));
  }

  const fresh = newestOnly();
  async function load() {
    const answer = await fresh(api('GET', `/user/list${query({
      page: state.page, page_size: SIZE, user_ids: state.ids, search: state.search, role: state.role,
    })}`));
    if (!answer) return;
    const pages = Math.max(1, answer.total_pages || 1);
    replace(listPanel, table([
      ['User id', (u) => h('span', { class: 'mono' }, u.user_id)],
      ['Email', (u) => u.user_email || '-'],
      ['Role', (u) => h('span', { class: 'tag' }, u.user_role || '-')],
      ['Teams', (u) => (u.teams || []).map((t) => h('span', { class: 'tag' }, t))],
      ['Spend / budget', (u) => budgetBar(u.spend, u.max_budget)],
      ['Models', (u) => (u.models && u.models.length ? u.models.map((m) => h('span', { class: 'tag' }, m)) : 'all')],
      ['', (u) => h('span', { class: 'actions' },
        h('button', { class: 'small secondary', 'data-action': 'edit', onclick: () => edit(u) }, 'Edit'),
        h('button', {
          class: 'small danger',
          'data-action': 'delete',
          onclick: async () => {
            if (!window.confirm(`Delete user ${u.user_id}?`)) return;
            try {
              await api('POST', '/user/delete', { user_ids: [u.user_id] });
              replace(status, notice('User deleted.', 'ok'));
            } catch (e) {
              replace(status, notice(e.message));
            }
            await load();
          },
        }, 'Delete'))],
    ], answer.users || [], state.ids || state.search || state.role ? 'No user matches.' : 'No users.'),
    pager(state.page, pages, `Page ${state.page} of ${pages} · ${plural(answer.total, 'user')}`,
      (page) => { state.page = page; load(); }));
    const trs = listPanel.querySelectorAll('tbody tr');
    (answer.users || []).forEach((u, i) => { if (trs[i]) trs[i].dataset.user = u.user_id; });
  }

  replace(main, h('h1', {}, title), status,
    h('div', { class: 'panel' }, h('h2', {}, 'Create a user'), form),
    h('div', { class: 'panel' }, search, listPanel));
  await load();
}
