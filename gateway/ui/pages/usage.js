// Usage: spend, requests and tokens per day (SVG charts), the same per day
// split by model group, key, user, team or tag (a stacked chart, the
// choice's largest six on their own), and each breakdown's top 20 over
// the range, from LiteLLM's daily aggregate tables
// through /user/daily/activity (its `entities` are the users; a team's
// through /team/daily/activity, tags' through /tag/daily/activity), beside LiteLLM's /global/spend (every
// request's spend over the last 30 days). The tables count every request,
// whether or not the spend log keeps its row.

import { api, query } from '../api.js';
import { h, replace, table, field, values, notice, usd, num } from '../dom.js';
import { barChart, shareBar, stackedChart } from '../chart.js';

const PAGE = 1000;
const MAX_PAGES = 20;

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

/** Every page of a daily-activity endpoint; the days and whether it stopped early. */
async function activity(path, params) {
  const results = [];
  for (let page = 1; page <= MAX_PAGES; page += 1) {
    const answer = await api('GET', `${path}${query({ ...params, page, page_size: PAGE })}`);
    results.push(...answer.results);
    if (!answer.metadata.has_more) return { results, capped: false };
  }
  return { results, capped: true };
}

function add(into, m) {
  into.spend += Number(m.spend) || 0;
  into.requests += Number(m.api_requests) || 0;
  into.failed += Number(m.failed_requests) || 0;
  into.tokens += Number(m.total_tokens) || 0;
}

const zero = () => ({ spend: 0, requests: 0, failed: 0, tokens: 0 });

/** Sums a breakdown (`models`, `api_keys`, `entities`...) over days, named by `nameOf`. */
function by(results, part, nameOf = (id) => id) {
  const m = new Map();
  for (const day of results) {
    for (const [id, entry] of Object.entries(day.breakdown[part] || {})) {
      const e = m.get(id) || { name: nameOf(id, entry.metadata || {}), ...zero() };
      add(e, entry.metrics);
      m.set(id, e);
    }
  }
  return [...m.values()].sort((a, b) => b.spend - a.spend || b.requests - a.requests).slice(0, 20);
}

/** A breakdown's rows (the top 20 by spend), each with its share of the spend drawn. */
const breakdown = (rows) => {
  const top = Math.max(0, ...rows.map((e) => e.spend));
  const total = rows.reduce((a, e) => a + e.spend, 0);
  const share = (e) => `${total > 0 ? ((e.spend / total) * 100).toFixed(1) : '0.0'}% of the spend listed`;
  return table([
    ['Name', (e) => h('span', { class: 'mono' }, e.name)],
    ['Spend', (e) => h('span', { class: 'budget' }, shareBar(e.spend, top, share(e)), usd(e.spend))],
    ['Requests', (e) => num(e.requests)],
    ['Failed', (e) => num(e.failed)],
    ['Tokens', (e) => num(e.tokens)],
  ], rows, 'No traffic in this range.');
};

/**
 * Each entry of a breakdown as a series of one metric per day of `dayList`,
 * largest total first.
 */
function perDay(results, part, nameOf, metric, dayList) {
  const index = new Map(dayList.map((d, i) => [d, i]));
  const m = new Map();
  for (const day of results) {
    const i = index.get(String(day.date));
    if (i === undefined) continue;
    for (const [id, entry] of Object.entries(day.breakdown[part] || {})) {
      const s = m.get(id) || { name: nameOf(id, entry.metadata || {}), values: dayList.map(() => 0), total: 0 };
      const v = Number(entry.metrics[metric]) || 0;
      s.values[i] += v;
      s.total += v;
      m.set(id, s);
    }
  }
  return [...m.values()].filter((s) => s.total > 0).sort((a, b) => b.total - a.total);
}

const METRICS = {
  spend: { field: 'spend', title: 'Spend', format: (v) => `$${v.toFixed(v && v < 1 ? 4 : 2)}` },
  requests: { field: 'api_requests', title: 'Requests', format: (v) => String(Math.round(v)) },
  tokens: { field: 'total_tokens', title: 'Tokens', format: (v) => String(Math.round(v)) },
};

/** The per-day chart split by one breakdown, with its choices. */
function splitPanel(sources, dayList) {
  const names = Object.keys(sources);
  const chart = h('div', { id: 'usage-split-chart' });
  const form = h('form', { class: 'toolbar', id: 'usage-split' },
    field('Per day by', 'by', { options: names }),
    field('Measure', 'metric', { options: Object.keys(METRICS) }));
  function draw() {
    const v = values(form);
    const src = sources[v.by] || sources[names[0]];
    const metric = METRICS[v.metric] || METRICS.spend;
    const series = perDay(src.results, src.part, src.nameOf, metric.field, dayList);
    replace(chart, stackedChart(`${metric.title} per day by ${v.by}`, dayList.map((d) => d.slice(5)), series, metric.format));
  }
  form.addEventListener('change', draw);
  form.addEventListener('submit', (ev) => { ev.preventDefault(); draw(); });
  draw();
  return h('div', { class: 'panel', id: 'usage-split-panel' }, form, chart);
}

const keyName = (id, meta) => meta.key_alias || `${String(id).slice(0, 12)}…`;
const teamName = (id, meta) => (meta.team_alias ? `${meta.team_alias} (${id})` : id);
const userName = (id, meta) => {
  const label = meta.user_alias || meta.user_email;
  return label ? `${label} (${id})` : id;
};

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
    field('Key (optional)', 'api_key'),
    admin ? field('Team id (optional)', 'team_id') : null,
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
    replace(body, h('p', { class: 'muted' }, 'Reading the daily totals…'));
    const range = { start_date: state.start_date, end_date: state.end_date, api_key: state.api_key };
    const team = admin && state.team_id;
    const data = team
      ? await activity('/team/daily/activity', { ...range, team_ids: state.team_id })
      : await activity('/user/daily/activity', range);
    const teams = admin && !team ? await activity('/team/daily/activity', range) : null;
    const tags = admin ? await activity('/tag/daily/activity', range) : null;
    const global = admin ? await api('GET', '/global/spend').catch(() => null) : null;
    const dayList = days(state.start_date, state.end_date);
    const daily = new Map(dayList.map((d) => [d, zero()]));
    for (const day of data.results) {
      const d = daily.get(String(day.date));
      if (d) add(d, day.metrics);
    }
    const series = (k) => [...daily.entries()].map(([day, v]) => ({ label: day.slice(5), value: v[k] }));
    const sources = {
      'model group': { results: data.results, part: 'model_groups', nameOf: (id) => id },
      key: { results: data.results, part: 'api_keys', nameOf: keyName },
    };
    if (admin && !team) sources.user = { results: data.results, part: 'entities', nameOf: userName };
    if (teams) sources.team = { results: teams.results, part: 'entities', nameOf: teamName };
    if (team) sources.team = { results: data.results, part: 'entities', nameOf: teamName };
    if (tags) sources.tag = { results: tags.results, part: 'entities', nameOf: (id) => id };
    const total = [...daily.values()].reduce((a, v) => {
      add(a, { spend: v.spend, api_requests: v.requests, failed_requests: v.failed, total_tokens: v.tokens });
      return a;
    }, zero());
    const capped = data.capped || (teams && teams.capped) || (tags && tags.capped);
    replace(body,
      capped ? notice(`Only the first ${num(PAGE * MAX_PAGES)} daily rows were read; narrow the range.`, 'info') : null,
      h('div', { class: 'cards' },
        card('Spend in range', usd(total.spend)),
        card('Requests in range', num(total.requests)),
        card('Failed requests', num(total.failed)),
        card('Tokens in range', num(total.tokens)),
        admin ? card('Spend, last 30 days', global ? usd(global.spend) : '-') : null),
      h('div', { class: 'panel', id: 'usage-charts' },
        barChart('Spend per day (USD)', series('spend'), (v) => `$${v.toFixed(v && v < 1 ? 4 : 2)}`),
        barChart('Requests per day', series('requests'), (v) => String(Math.round(v))),
        barChart('Tokens per day', series('tokens'), (v) => String(Math.round(v)))),
      splitPanel(sources, dayList),
      h('div', { class: 'panel' }, h('h2', {}, 'By model group'), breakdown(by(data.results, 'model_groups'))),
      h('div', { class: 'panel' }, h('h2', {}, 'By key'), breakdown(by(data.results, 'api_keys', keyName))),
      admin && !team
        ? h('div', { class: 'panel', id: 'usage-by-user' }, h('h2', {}, 'By user'),
          breakdown(by(data.results, 'entities', userName)))
        : null,
      teams ? h('div', { class: 'panel' }, h('h2', {}, 'By team'), breakdown(by(teams.results, 'entities', teamName))) : null,
      tags ? h('div', { class: 'panel' }, h('h2', {}, 'By tag'), breakdown(by(tags.results, 'entities'))) : null);
  }

  replace(main, h('h1', {}, title), h('div', { class: 'panel' }, form), body);
  await load();
}
