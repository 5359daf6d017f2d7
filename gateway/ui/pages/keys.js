// Keys: LiteLLM's virtual keys through /key/*: a server-side paged list
// (filtered by alias, team or user), spend against budget, limits; create
// (the new key shown once), edit, block/unblock, regenerate, delete. An
// internal user sees its own keys only (the gateway forces the filter), read-only.

import { api, newestOnly, query } from '../api.js';
import { h, replace, table, field, values, notice, budgetBar, num, when, dialog, list, plural } from '../dom.js';

const SIZE = 25;
const NUMBERS = ['max_budget', 'soft_budget', 'tpm_limit', 'rpm_limit', 'max_parallel_requests'];
const INTEGERS = ['tpm_limit', 'rpm_limit', 'max_parallel_requests'];

/** A /key/generate or /key/update body from form values. */
function keyBody(v) {
  const body = {};
  for (const [k, raw] of Object.entries(v)) {
    if (NUMBERS.includes(k)) {
      const n = Number(raw);
      if (!Number.isFinite(n) || (INTEGERS.includes(k) && !Number.isInteger(n))) {
        throw new Error(`${k} must be a ${INTEGERS.includes(k) ? 'whole ' : ''}number`);
      }
      body[k] = n;
    } else if (k === 'models') {
      body.models = list(raw);
    } else if (k === 'metadata') {
      try {
        body.metadata = JSON.parse(raw);
      } catch {
        throw new Error('metadata must be a JSON object');
      }
    } else {
      body[k] = raw;
    }
  }
  return body;
}

function keyFields(k = {}) {
  return [
    field('Alias', 'key_alias', { value: k.key_alias }),
    field('Models (comma-separated, empty: all)', 'models', { value: (k.models || []).join(', ') }),
    field('Max budget (USD)', 'max_budget', { type: 'number', value: k.max_budget }),
    field('Budget duration (e.g. 30d)', 'budget_duration', { value: k.budget_duration }),
    field('TPM limit', 'tpm_limit', { type: 'number', value: k.tpm_limit }),
    field('RPM limit', 'rpm_limit', { type: 'number', value: k.rpm_limit }),
    field('Max parallel requests', 'max_parallel_requests', { type: 'number', value: k.max_parallel_requests }),
    field('Team id', 'team_id', { value: k.team_id }),
    field('User id', 'user_id', { value: k.user_id }),
  ];
}

function showSecret(title, key) {
  return dialog(title, h('div', {},
    h('p', {}, 'Copy this key now: it is shown once and cannot be read back.'),
    h('div', { class: 'secret', id: 'new-key' }, key)));
}

export async function render(main, title, session) {
  const admin = !session || session.role !== 'internal_user';
  const state = { page: 1, alias: '', team: '', user: '' };
  const status = h('div', {});
  const listPanel = h('div', { class: 'panel' });

  const createForm = h('form', { class: 'grid', id: 'create-key-form' },
    keyFields(),
    field('Duration (e.g. 30d, empty: never expires)', 'duration'),
    field('Metadata (JSON)', 'metadata', { placeholder: '{"team": "search"}' }),
    h('div', {}, h('button', { type: 'submit', id: 'create-key-submit' }, 'Create key')));
  createForm.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    try {
      const answer = await api('POST', '/key/generate', keyBody(values(createForm)));
      createForm.reset();
      replace(status, notice(`Key ${answer.key_alias || answer.key_name || ''} created.`, 'ok'));
      await load();
      await showSecret('New key', answer.key);
    } catch (e) {
      replace(status, notice(e.message));
    }
  });

  const search = h('form', { class: 'toolbar', id: 'key-search' },
    field('Alias', 'alias'), field('Team id', 'team'), field('User id', 'user'),
    h('button', { type: 'submit', class: 'secondary' }, 'Search'));
  search.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const v = values(search);
    Object.assign(state, { page: 1, alias: v.alias || '', team: v.team || '', user: v.user || '' });
    load();
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

  function edit(k) {
    const form = h('form', { class: 'grid', id: 'edit-key-form' }, keyFields(k),
      h('div', {}, h('button', { type: 'submit' }, 'Save')));
    const err = h('div', {});
    const closed = dialog(`Edit ${k.key_alias || k.key_name || 'key'}`, h('div', {}, err, form));
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      try {
        const body = keyBody(values(form));
        await api('POST', '/key/update', { key: k.token, ...body });
        form.closest('dialog').close();
        replace(status, notice('Key updated.', 'ok'));
        await load();
      } catch (e) {
        replace(err, notice(e.message));
      }
    });
    return closed;
  }

  function actions(k) {
    const name = k.key_alias || k.key_name || 'this key';
    return h('span', { class: 'actions' },
      h('button', { class: 'small secondary', 'data-action': 'edit', onclick: () => edit(k) }, 'Edit'),
      h('button', {
        class: 'small secondary',
        'data-action': k.blocked ? 'unblock' : 'block',
        onclick: () => act(() => api('POST', k.blocked ? '/key/unblock' : '/key/block', { key: k.token }),
          `${name} ${k.blocked ? 'unblocked' : 'blocked'}.`),
      }, k.blocked ? 'Unblock' : 'Block'),
      h('button', {
        class: 'small secondary',
        'data-action': 'regenerate',
        onclick: async () => {
          if (!window.confirm(`Regenerate ${name}? The old key stops working.`)) return;
          try {
            const answer = await api('POST', '/key/regenerate', { key: k.token });
            await load();
            await showSecret('Regenerated key', answer.key);
          } catch (e) {
            replace(status, notice(e.message));
          }
        },
      }, 'Regenerate'),
      h('button', {
        class: 'small danger',
        'data-action': 'delete',
        onclick: () => {
          if (window.confirm(`Delete ${name}?`)) {
            act(() => api('POST', '/key/delete', { keys: [k.token] }), `${name} deleted.`);
          }
        },
      }, 'Delete'));
  }

  function statusTag(k) {
    if (k.blocked) return h('span', { class: 'tag bad' }, 'blocked');
    if (k.expires && new Date(k.expires) < new Date()) return h('span', { class: 'tag warn' }, 'expired');
    return h('span', { class: 'tag ok' }, 'active');
  }

  const fresh = newestOnly();
  async function load() {
    const answer = await fresh(api('GET', `/key/list${query({
      return_full_object: 'true', page: state.page, size: SIZE,
      key_alias: state.alias, team_id: state.team, user_id: state.user,
    })}`));
    if (!answer) return;
    const rows = answer.keys || [];
    const pages = Math.max(1, answer.total_pages || 1);
    const prev = h('button', { class: 'secondary small', disabled: state.page <= 1 }, 'Previous');
    const next = h('button', { class: 'secondary small', disabled: state.page >= pages }, 'Next');
    prev.addEventListener('click', () => { state.page -= 1; load(); });
    next.addEventListener('click', () => { state.page += 1; load(); });
    replace(listPanel,
      table([
        ['Alias', (k) => k.key_alias || '-'],
        ['Key', (k) => h('span', { class: 'mono' }, k.key_name || `${String(k.token).slice(0, 10)}…`)],
        ['Team', (k) => k.team_id || '-'],
        ['User', (k) => k.user_id || '-'],
        ['Spend / budget', (k) => budgetBar(k.spend, k.max_budget)],
        ['TPM / RPM / parallel', (k) => `${num(k.tpm_limit)} / ${num(k.rpm_limit)} / ${num(k.max_parallel_requests)}`],
        ['Models', (k) => (k.models && k.models.length ? k.models.map((m) => h('span', { class: 'tag' }, m)) : 'all')],
        ['Status', statusTag],
        ['Expires', (k) => when(k.expires)],
        ['', (k) => (admin ? actions(k) : '')],
      ], rows.map((k) => k), 'No keys match.'),
      h('div', { class: 'pager' }, prev, `Page ${state.page} of ${pages} · ${plural(answer.total_count, 'key')}`, next));
    const trs = listPanel.querySelectorAll('tbody tr');
    rows.forEach((k, i) => { if (trs[i]) trs[i].dataset.alias = k.key_alias || ''; });
  }

  replace(main, h('h1', {}, title), status,
    admin ? h('div', { class: 'panel' }, h('h2', {}, 'Create a key'), createForm)
      : notice(`Your keys (user ${session.user_id}); ask an admin to create or change one.`, 'info'),
    h('div', { class: 'panel' }, search, listPanel));
  await load();
}
