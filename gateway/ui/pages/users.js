// Users: /user/list a page at a time; create (/user/new, which also issues
// a key, shown once) and delete.

import { api, query } from '../api.js';
import { h, replace, table, field, values, notice, budgetBar, num, dialog } from '../dom.js';

const SIZE = 25;

export async function render(main, title) {
  const state = { page: 1 };
  const status = h('div', {});
  const listPanel = h('div', { class: 'panel' });
  const form = h('form', { class: 'grid', id: 'create-user-form' },
    field('User id (empty: generated)', 'user_id'),
    field('Email', 'user_email', { type: 'email' }),
    field('Role', 'user_role', { options: ['internal_user', 'internal_user_viewer', 'proxy_admin', 'proxy_admin_viewer'] }),
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

  async function load() {
    const answer = await api('GET', `/user/list${query({ page: state.page, page_size: SIZE })}`);
    const pages = Math.max(1, answer.total_pages || 1);
    const prev = h('button', { class: 'secondary small', disabled: state.page <= 1 }, 'Previous');
    const next = h('button', { class: 'secondary small', disabled: state.page >= pages }, 'Next');
    prev.addEventListener('click', () => { state.page -= 1; load(); });
    next.addEventListener('click', () => { state.page += 1; load(); });
    replace(listPanel, table([
      ['User id', (u) => h('span', { class: 'mono' }, u.user_id)],
      ['Email', (u) => u.user_email || '-'],
      ['Role', (u) => h('span', { class: 'tag' }, u.user_role || '-')],
      ['Teams', (u) => (u.teams || []).map((t) => h('span', { class: 'tag' }, t))],
      ['Spend / budget', (u) => budgetBar(u.spend, u.max_budget)],
      ['', (u) => h('button', {
        class: 'small danger',
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
      }, 'Delete')],
    ], answer.users || [], 'No users.'),
    h('div', { class: 'pager' }, prev, `Page ${state.page} of ${pages} · ${num(answer.total)} users`, next));
  }

  replace(main, h('h1', {}, title), status,
    h('div', { class: 'panel' }, h('h2', {}, 'Create a user'), form), listPanel);
  await load();
}
