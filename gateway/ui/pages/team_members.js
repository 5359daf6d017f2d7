// A team's members in a dialog: add one (/team/member_add), change a
// role (/team/member_update), remove one (/team/member_delete).

import { api } from '../api.js';
import { h, replace, table, field, values, notice, dialog } from '../dom.js';

const ROLES = ['user', 'admin'];

function roleSelect(current, onchange) {
  const select = h('select', { 'aria-label': 'Role' },
    ...ROLES.map((r) => h('option', { value: r, ...(r === current ? { selected: 'selected' } : {}) }, r)));
  select.addEventListener('change', () => onchange(select.value));
  return select;
}

/** Opens the members dialog of `team`; resolves once it is closed. */
export async function editMembers(team) {
  const status = h('div', {});
  const listed = h('div', { id: 'team-members' });
  const id = team.team_id;

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
    const info = await api('GET', `/team/info?team_id=${encodeURIComponent(id)}`);
    const members = (info.team_info && info.team_info.members_with_roles) || [];
    replace(listed, table([
      ['User', (m) => h('span', { class: 'mono' }, m.user_id || m.user_email || '-')],
      ['Role', (m) => roleSelect(m.role, (role) => act(
        () => api('POST', '/team/member_update', { team_id: id, user_id: m.user_id, role }),
        `${m.user_id} is now ${role}.`))],
      ['', (m) => h('button', {
        class: 'small danger',
        onclick: () => act(() => api('POST', '/team/member_delete', { team_id: id, user_id: m.user_id }),
          `${m.user_id} removed.`),
      }, 'Remove')],
    ], members, 'No members.'));
  }

  const form = h('form', { class: 'toolbar', id: 'add-member-form' },
    field('User id', 'user_id', { required: true }),
    h('label', {}, 'Role', roleSelect('user', () => {})),
    h('button', { type: 'submit' }, 'Add member'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const v = values(form);
    const role = form.querySelector('select').value;
    act(async () => {
      await api('POST', '/team/member_add', { team_id: id, member: { user_id: v.user_id, role } });
      form.reset();
    }, `${v.user_id} added as ${role}.`);
  });
  await load();
  await dialog(`Members of ${team.team_alias || id}`, h('div', {}, status, form, listed));
}
