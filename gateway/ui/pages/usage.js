// Usage: spend, requests and tokens per day (SVG charts), and by model,
// key and team, added up in the browser from /spend/logs over a date range
// (at most MAX_ROWS attempt rows are read; the page says when it stopped
// there), beside the total of /global/spend.

import { api, query } from '../api.js';
import { h, replace, table, field, values, notice, usd, num } from '../dom.js';
import { barChart } from '../chart.js';

const PAGE = 1000;
const MAX_ROWS = 20000;

function isoDay(d) {
  return d.toISOString().slice(0, 10);
}

function days(from, to) {
  const out = [];
  const d = new Date(`${from}T00:00:00Z`);
  const end = new Date(`${to}T00:00:00Z`);
  while (d <= end && out.length < 366) {
    out.push(isoDay(d));
    d.setUTCDate(d.getUTCDate() + 1);
  }
  return out;
}

function card(label, value) {
  return h('div', { class: 'card' }, h('div', { class: 'label' }, label), h('div', { class: 'value' }, value));
}

function by(rows, keyOf) {
  const m = new Map();
  for (const r of rows) {
    const k = keyOf(r) || '-';
    const e = m.get(k) || { name: k, spend: 0, requests: 0, tokens: 0 };
    e.spend += Number(r.spend) || 0;
    e.tokens += Number(r.total_tokens) || 0;
    if ((r.attempt || 1) === 1) e.requests += 1;
    m.set(k, e);
  }
  return [...m.values()].sort((a, b) => b.spend - a.spend || b.requests - a.requests).slice(0, 20);
}

const breakdown = (rows) => table([
  ['Name', (e) => h('span', { class: 'mono' }, e.name)],
  ['Spend', (e) => usd(e.spend)],
  ['Requests', (e) => num(e.requests)],
  ['Tokens', (e) => num(e.tokens)],
], rows, 'No traffic in this range.');

export async function render(main, title, session) {
  const admin = !session || session.role !== 'internal_user';
  const to = isoDay(new Date());
  const fromDate = new Date();
  fromDate.setUTCDate(fromDate.getUTCDate() - 13);
  const state = { start_date: isoDay(fromDate), end_date: to };
  const body = h('div', {});
  const form = h('form', { class: 'toolbar', id: 'usage-range' },
    field('From', 'start_date', { type: 'date', value: state.start_date }),
    field('To', 'end_date', { type: 'date', value: state.end_date }),
    field('Key (optional)', 'api_key'), field('Team id (optional)', 'team_id'),
    h('button', { type: 'submit', class: 'secondary' }, 'Show'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const v = values(form);
    state.start_date = v.start_date || state.start_date;
    state.end_date = v.end_date || state.end_date;
    state.api_key = v.api_key;
    state.team_id = v.team_id;
    load().catch((e) => replace(body, notice(e.message)));
  });

  async function load() {
    replace(body, h('p', { class: 'muted' }, 'Adding up the spend log…'));
    const rows = [];
    let capped = false;
    for (let page = 1; ; page += 1) {
      const batch = await api('GET', `/spend/logs${query({ ...state, page, page_size: PAGE })}`);
      rows.push(...batch);
      if (batch.length < PAGE) break;
      if (rows.length >= MAX_ROWS) { capped = true; break; }
    }
    const global = admin ? await api('GET', '/global/spend').catch(() => null) : null;
    const perDay = new Map(days(state.start_date, state.end_date).map((d) => [d, { spend: 0, requests: 0, tokens: 0 }]));
    for (const r of rows) {
      const d = perDay.get(String(r.startTime).slice(0, 10));
      if (!d) continue;
      d.spend += Number(r.spend) || 0;
      d.tokens += Number(r.total_tokens) || 0;
      if ((r.attempt || 1) === 1) d.requests += 1;
    }
    const series = (k) => [...perDay.entries()].map(([day, v]) => ({ label: day.slice(5), value: v[k] }));
    const total = [...perDay.values()].reduce((a, v) => ({
      spend: a.spend + v.spend, requests: a.requests + v.requests, tokens: a.tokens + v.tokens,
    }), { spend: 0, requests: 0, tokens: 0 });
    replace(body,
      capped ? notice(`Only the first ${num(MAX_ROWS)} attempt rows of this range were added up; narrow the range.`, 'info') : null,
      h('div', { class: 'cards' },
        card('Spend in range', usd(total.spend)),
        card('Requests in range', num(total.requests)),
        card('Tokens in range', num(total.tokens)),
        admin ? card('Spend, all time', global ? usd(global.spend) : '-') : null),
      h('div', { class: 'panel', id: 'usage-charts' },
        barChart('Spend per day (USD)', series('spend'), (v) => `$${v.toFixed(v && v < 1 ? 4 : 2)}`),
        barChart('Requests per day', series('requests'), (v) => String(Math.round(v))),
        barChart('Tokens per day', series('tokens'), (v) => String(Math.round(v)))),
      h('div', { class: 'panel' }, h('h2', {}, 'By model group'), breakdown(by(rows, (r) => r.model_group || r.model))),
      h('div', { class: 'panel' }, h('h2', {}, 'By key'), breakdown(by(rows, (r) => `${String(r.api_key).slice(0, 12)}…`))),
      h('div', { class: 'panel' }, h('h2', {}, 'By team'), breakdown(by(rows, (r) => r.team_id))));
  }

  replace(main, h('h1', {}, title), h('div', { class: 'panel' }, form), body);
  await load();
}
