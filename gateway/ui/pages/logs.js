// Logs: the spend log from /gateway/logs, newest first, a page at a time by
// page token (every page costs what the first does), filtered by key, user,
// team, model, status, request id and dates (from today, UTC, unless
// changed); a filter by user, team, model or status alone searches a bounded
// number of rows a call and says how far back it got ("Older" goes on). A
// request's row opens to show every attempt (a retry or fallback's failed
// primary included).

import { api, newestOnly, query } from '../api.js';
import { h, replace, table, field, values, notice, usd, num, when } from '../dom.js';

const SIZES = ['100', '25', '10'];

/** Rows of one page grouped by call id, the calls in the order first seen. */
function calls(rows) {
  const byCall = new Map();
  for (const r of rows) {
    const id = r.call_id || r.request_id;
    if (!byCall.has(id)) byCall.set(id, []);
    byCall.get(id).push(r);
  }
  return [...byCall.values()].map((attempts) => {
    attempts.sort((a, b) => (a.attempt || 0) - (b.attempt || 0));
    return { last: attempts[attempts.length - 1], attempts };
  });
}

function ms(a, b) {
  const d = new Date(b) - new Date(a);
  return Number.isFinite(d) ? `${d} ms` : '-';
}

function statusTag(r) {
  const ok = r.status === 'success';
  return h('span', { class: `tag ${ok ? 'ok' : 'bad'}` }, `${r.status_code || ''} ${r.status}`);
}

export async function render(main, title) {
  const today = new Date().toISOString().slice(0, 10);
  // tokens[i] is the page token of page i + 1 (null: the newest rows).
  const state = { tokens: [null], filters: { start_date: today } };
  const status = h('div', {});
  const listPanel = h('div', { class: 'panel' });
  const form = h('form', { class: 'toolbar', id: 'log-filters' },
    field('Key (sk-… or hash)', 'api_key'), field('User id', 'user_id'), field('Team id', 'team_id'),
    field('Model', 'model'), field('Status (empty: any)', 'status', { options: ['', 'success', 'failure'] }),
    field('Request id', 'request_id'), field('From', 'start_date', { type: 'date', value: today }),
    field('To', 'end_date', { type: 'date' }), field('Rows a page', 'page_size', { options: SIZES }),
    h('button', { type: 'submit', class: 'secondary' }, 'Filter'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    state.filters = values(form);
    state.tokens = [null];
    load().catch((e) => replace(status, notice(e.message)));
  });

  function attemptsRow(call, cols) {
    return h('tr', { class: 'attempts' }, h('td', { colspan: cols },
      table([
        ['Attempt', (r) => r.attempt],
        ['Deployment', (r) => h('span', { class: 'mono' }, `${r.model_id} (${r.custom_llm_provider}/${r.model})`)],
        ['Region', (r) => r.region || '-'],
        ['Status', statusTag],
        ['Error class', (r) => r.error_class || '-'],
        ['Error', (r) => r.error_message || ''],
        ['Duration', (r) => ms(r.startTime, r.endTime)],
        ['Tokens', (r) => num(r.total_tokens)],
        ['Cost', (r) => usd(r.spend)],
      ], call.attempts)));
  }

  const fresh = newestOnly();
  async function load() {
    const page = state.tokens.length;
    const token = state.tokens[page - 1];
    const answer = await fresh(api('GET', `/gateway/logs${query({ ...state.filters, page_token: token })}`));
    if (!answer) return;
    const rows = answer.data || [];
    const list = calls(rows);
    const cols = 9;
    const body = h('tbody', {});
    const none = answer.partial ? 'No requests match among the rows searched so far.' : 'No requests match.';
    if (!list.length) body.append(h('tr', {}, h('td', { colspan: cols, class: 'empty' }, none)));
    for (const call of list) {
      const r = call.last;
      const tr = h('tr', { class: 'clickable', 'data-call': r.call_id, title: 'Show the attempts' },
        h('td', {}, when(r.startTime)),
        h('td', { class: 'mono' }, r.call_id || r.request_id),
        h('td', {}, r.model_group || r.model),
        h('td', {}, statusTag(r)),
        h('td', {}, call.attempts.length > 1 ? h('span', { class: 'tag warn' }, `${call.attempts.length} attempts`) : '1'),
        h('td', {}, `${num(r.prompt_tokens)} / ${num(r.completion_tokens)}`),
        h('td', {}, usd(call.attempts.reduce((s, a) => s + (Number(a.spend) || 0), 0))),
        h('td', {}, ms(call.attempts[0].startTime, r.endTime)),
        h('td', { class: 'mono nowrap', title: r.api_key }, `${String(r.api_key).slice(0, 10)}…`));
      let open = null;
      tr.addEventListener('click', () => {
        if (open) { open.remove(); open = null; return; }
        open = attemptsRow(call, cols);
        tr.after(open);
      });
      body.append(tr);
    }
    const head = h('thead', {}, h('tr', {},
      ['Time (UTC)', 'Request', 'Model group', 'Status', 'Attempts', 'Tokens in / out', 'Cost', 'Duration', 'Key']
        .map((t) => h('th', {}, t))));
    const newer = h('button', { class: 'secondary small', id: 'logs-newer', disabled: page <= 1 }, 'Newer');
    const older = h('button', { class: 'secondary small', id: 'logs-older', disabled: !answer.next_page_token }, 'Older');
    newer.addEventListener('click', () => { state.tokens.pop(); load().catch((e) => replace(status, notice(e.message))); });
    older.addEventListener('click', () => {
      state.tokens.push(answer.next_page_token);
      load().catch((e) => replace(status, notice(e.message)));
    });
    const searched = answer.partial
      ? notice(`Searched back to ${when(answer.searched_to)} (UTC) so far; "Older" searches further back.`, 'info')
      : '';
    replace(status);
    replace(listPanel, searched, h('table', { id: 'logs-table' }, head, body),
      h('div', { class: 'pager', id: 'logs-pager' }, newer, `Page ${page}, newest first`, older));
  }

  replace(main, h('h1', {}, title), status, h('div', { class: 'panel' }, form), listPanel);
  await load();
}
