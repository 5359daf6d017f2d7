// Models: every deployment (config and database) from /model/info; add one
// with /model/new, delete a database one with /model/delete, check one with
// /health?model_id= (a real request to the deployment).

import { api, query } from '../api.js';
import { h, replace, table, field, values, notice, num } from '../dom.js';

export async function render(main, title) {
  const status = h('div', {});
  const listPanel = h('div', { class: 'panel' });
  const health = new Map();

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
    const params = { model: v.model };
    for (const k of ['api_base', 'api_key']) if (v[k]) params[k] = v[k];
    try {
      for (const k of ['rpm', 'tpm']) {
        if (v[k]) {
          const n = Number(v[k]);
          if (!Number.isInteger(n) || n < 0) throw new Error(`${k} must be a whole number`);
          params[k] = n;
        }
      }
      await api('POST', '/model/new', { model_name: v.model_name, litellm_params: params, model_info: {} });
      form.reset();
      replace(status, notice(`Model ${v.model_name} added.`, 'ok'));
    } catch (e) {
      replace(status, notice(e.message));
    }
    await load();
  });

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

  async function load() {
    const answer = await api('GET', '/model/info');
    const rows = answer.data || [];
    replace(listPanel, table([
      ['Model name', (m) => m.model_name],
      ['LiteLLM model', (m) => h('span', { class: 'mono' }, m.litellm_params.model || '-')],
      ['API base', (m) => h('span', { class: 'mono' }, m.litellm_params.api_base || '-')],
      ['RPM / TPM', (m) => `${num(m.litellm_params.rpm)} / ${num(m.litellm_params.tpm)}`],
      ['Source', (m) => h('span', { class: 'tag' }, m.model_info.db_model ? 'database' : 'config')],
      ['Id', (m) => h('span', { class: 'mono' }, m.model_info.id)],
      ['Health', (m) => healthTag(m.model_info.id)],
      ['', (m) => h('span', {},
        h('button', { class: 'small secondary', onclick: () => check(m.model_info.id) }, 'Check'),
        m.model_info.db_model
          ? h('button', {
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
    ], rows, 'No models.'));
  }

  replace(main, h('h1', {}, title), status,
    h('div', { class: 'panel' }, h('h2', {}, 'Add a model'), form,
      h('p', { class: 'muted' }, 'Models from config.yaml are changed in the file (then POST /config/reload); models added here are kept in the database.')),
    listPanel);
  await load();
}
