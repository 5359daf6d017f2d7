// Models: the deployments (config and database) from /v2/model/info, a
// page at a time, searched by model name on the server; add one
// with /model/new, edit a database one with /model/update, delete one with
// /model/delete, check one with /health?model_id= (its health state), test
// one with /health/test_connection (a small request now, its answer or
// error shown).

import { api, newestOnly, query } from '../api.js';
import { h, replace, table, field, values, notice, num, dialog, pager, plural } from '../dom.js';

const SIZE = 25;

export async function render(main, title) {
  const status = h('div', {});
  const tested = h('div', { id: 'model-test' });
  const listPanel = h('div', {});
  const health = new Map();
  const state = { page: 1, search: '' };
  const search = h('form', { class: 'toolbar', id: 'model-search' },
    field('Model name contains', 'search'),
    h('button', { type: 'submit', class: 'secondary' }, 'Search'));
  search.addEventListener('submit', (ev) => {
    ev.preventDefault();
    Object.assign(state, { page: 1, search: values(search).search || '' });
    load().catch((e) => replace(status, notice(e.message)));
  });

  const form = h('form', { class: 'grid', id: 'add-model-form' },
    field('Model name (group)', 'model_name', { required: true, placeholder: 'gpt-4o' }),
    field('LiteLLM model', 'model', { required: true, placeholder: 'openai/gpt-4o' }),
    field('API base', 'api_base', { placeholder: 'https://api.openai.com/v1' }),
    field('API key (or os.environ/NAME)', 'api_key', { type: 'password' }),
    field('RPM', 'rpm', { type: 'number' }),
    field('TPM', 'tpm', { type: 'number' }),
    h('div', {}, h('button', { type: 'submit' }, 'Add model')));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const v = values(form);
    try {
      const params = { model: v.model, ...limits(v, false) };
      for (const k of ['api_base', 'api_key']) if (v[k]) params[k] = v[k];
      await api('POST', '/model/new', { model_name: v.model_name, litellm_params: params, model_info: {} });
      form.reset();
      replace(status, notice(`Model ${v.model_name} added.`, 'ok'));
    } catch (e) {
      replace(status, notice(e.message));
    }
    await load();
  });

  function edit(m) {
    const p = m.litellm_params;
    const editForm = h('form', { class: 'grid', id: 'edit-model-form' },
      field('Model name (group)', 'model_name', { required: true, value: m.model_name }),
      field('LiteLLM model', 'model', { required: true, value: p.model }),
      field('API base', 'api_base', { value: p.api_base }),
      field('API key (empty: unchanged)', 'api_key', { type: 'password' }),
      field('RPM', 'rpm', { type: 'number', value: p.rpm }),
      field('TPM', 'tpm', { type: 'number', value: p.tpm }),
      h('div', {}, h('button', { type: 'submit' }, 'Save')));
    const err = h('div', {});
    editForm.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const v = values(editForm);
      try {
        // LiteLLM's updateDeployment: the fields sent replace the stored
        // ones; null removes one (an emptied API base, RPM or TPM).
        const params = { model: v.model, api_base: v.api_base || null, ...limits(v, true) };
        if (v.api_key) params.api_key = v.api_key;
        await api('POST', '/model/update', {
          model_name: v.model_name, litellm_params: params, model_info: { id: m.model_info.id },
        });
        editForm.closest('dialog').close();
        replace(status, notice(`Model ${v.model_name} updated.`, 'ok'));
      } catch (e) {
        replace(err, notice(e.message));
      }
      await load();
    });
    return dialog(`Edit ${m.model_name}`, h('div', {}, err, editForm));
  }

  async function test(m) {
    const id = m.model_info.id;
    replace(tested, notice(`Testing ${m.model_name} (${id})…`, 'info'));
    const started = performance.now();
    try {
      const answer = await api('POST', '/health/test_connection', {
        mode: 'chat', litellm_params: { model: m.model_name }, model_info: { id },
      });
      const ms = Math.round(performance.now() - started);
      const ok = answer.status === 'success';
      const text = ok
        ? `Test of ${m.model_name} (${id}): success, answered in ${ms} ms.`
        : `Test of ${m.model_name} (${id}) failed after ${ms} ms: ${answer.result.error || 'no detail'}`;
      replace(tested, notice(text, ok ? 'ok' : 'error'));
    } catch (e) {
      replace(tested, notice(`Test of ${m.model_name} (${id}) not run: ${e.message}`));
    }
  }

  async function check(id) {
    health.set(id, 'checking');
    await load();
    try {
      const answer = await api('GET', `/health${query({ model_id: id })}`);
      health.set(id, answer.healthy_count > 0 ? 'healthy' : 'unhealthy');
    } catch (e) {
      health.set(id, e.status === 503 ? 'unhealthy' : e.message);
    }
    await load();
  }

  function healthTag(id) {
    const s = health.get(id);
    if (!s) return h('span', { class: 'muted' }, 'not checked');
    const cls = s === 'healthy' ? 'ok' : s === 'checking' ? '' : 'bad';
    return h('span', { class: `tag ${cls}` }, s);
  }

  const fresh = newestOnly();
  async function load() {
    const answer = await fresh(api('GET', `/v2/model/info${query({ page: state.page, size: SIZE, search: state.search })}`));
    if (!answer) return;
    const rows = answer.data || [];
    const pages = Math.max(1, answer.total_pages || 1);
    replace(listPanel, table([
      ['Model name', (m) => m.model_name],
      ['LiteLLM model', (m) => h('span', { class: 'mono' }, m.litellm_params.model || '-')],
      ['API base', (m) => h('span', { class: 'mono' }, m.litellm_params.api_base || '-')],
      ['RPM / TPM', (m) => `${num(m.litellm_params.rpm)} / ${num(m.litellm_params.tpm)}`],
      ['Source', (m) => h('span', { class: 'tag' }, m.model_info.db_model ? 'database' : 'config')],
      ['Id', (m) => h('span', { class: 'mono' }, m.model_info.id)],
      ['Health', (m) => healthTag(m.model_info.id)],
      ['Cooldown', (m) => (m.model_info.cooling_down
        ? h('span', { class: 'tag warn' }, 'cooling down')
        : h('span', { class: 'muted' }, 'no'))],
      ['', (m) => h('span', {},
        h('button', { class: 'small secondary', 'data-action': 'check', onclick: () => check(m.model_info.id) }, 'Check'),
        h('button', { class: 'small secondary', 'data-action': 'test', onclick: () => test(m) }, 'Test'),
        m.model_info.db_model
          ? h('button', { class: 'small secondary', 'data-action': 'edit', onclick: () => edit(m) }, 'Edit')
          : null,
        m.model_info.db_model
          ? h('button', {
              'data-action': 'delete',
              class: 'small danger',
              onclick: async () => {
                if (!window.confirm(`Delete ${m.model_name} (${m.model_info.id})?`)) return;
                try {
                  await api('POST', '/model/delete', { id: m.model_info.id });
                  replace(status, notice(`Model ${m.model_name} deleted.`, 'ok'));
                } catch (e) {
                  replace(status, notice(e.message));
                }
                await load();
              },
            }, 'Delete')
          : null)],
    ], rows, state.search ? 'No model matches.' : 'No models.'),
    pager(state.page, pages, `Page ${state.page} of ${pages} · ${plural(answer.total_count, 'deployment')}`,
      (page) => { state.page = page; load(); }));
    const trs = listPanel.querySelectorAll('tbody tr');
    rows.forEach((m, i) => { if (trs[i]) trs[i].dataset.model = m.model_name; });
  }

  replace(main, h('h1', {}, title), status, tested,
    h('div', { class: 'panel' }, h('h2', {}, 'Add a model'), form,
      h('p', { class: 'muted' }, 'Models from config.yaml are changed in the file (then POST /config/reload); models added here are kept in the database.')),
    h('div', { class: 'panel' }, search, listPanel));
  await load();
}

/** The rpm and tpm of form values as whole numbers; an empty one is left
 *  out, or sent as null (removed) when `clear`. */
function limits(v, clear) {
  const out = {};
  for (const k of ['rpm', 'tpm']) {
    if (v[k]) {
      const n = Number(v[k]);
      if (!Number.isInteger(n) || n < 0) throw new Error(`${k} must be a whole number`);
      out[k] = n;
    } else if (clear) {
      out[k] = null;
    }
  }
  return out;
}
