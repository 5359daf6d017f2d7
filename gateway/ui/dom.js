// Building the page. Every value is set as text (textContent, attributes),
// never parsed as HTML: aliases, metadata, model names and error texts from
// users or upstreams cannot inject markup.

/** An element: `attrs` are attributes (`on*` functions become listeners), children are nodes or text. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'value') el.value = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** Replaces the contents of `el`. */
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
}

/** A table: `columns` are [heading, row => cell]. */
export function table(columns, rows, emptyText = 'Nothing here yet.') {
  const head = h('tr', {}, columns.map(([title]) => h('th', {}, title)));
  const body = rows.length
    ? rows.map((r) => h('tr', {}, columns.map(([, cell]) => h('td', {}, cell(r)))))
    : [h('tr', {}, h('td', { colspan: columns.length, class: 'empty' }, emptyText))];
  return h('table', {}, h('thead', {}, head), h('tbody', {}, body));
}

/** A labelled form field (`opts.options`: a select of values, or [value, label] pairs). */
export function field(label, name, opts = {}) {
  const input = opts.options
    ? h('select', { name }, opts.options.map((o) => (Array.isArray(o)
      ? h('option', { value: o[0] }, o[1])
      : h('option', { value: o }, o))))
    : h(opts.multiline ? 'textarea' : 'input', {
        name,
        type: opts.type || 'text',
        placeholder: opts.placeholder || '',
        value: opts.value ?? '',
        required: opts.required || false,
        step: opts.type === 'number' ? 'any' : undefined,
        autocomplete: opts.autocomplete || 'off',
      });
  return h('label', { class: 'field' }, h('span', {}, label), input);
}

/** The values of a form's fields, trimmed; empty ones left out. */
export function values(form) {
  const out = {};
  for (const el of form.elements) {
    if (!el.name) continue;
    const v = el.value.trim();
    if (v !== '') out[el.name] = v;
  }
  return out;
}

/** A status message (error or notice) shown at the top of a page. */
export function notice(text, kind = 'error') {
  return h('div', { class: `notice ${kind}`, role: kind === 'error' ? 'alert' : 'status' }, text);
}

/** Money, USD. */
export function usd(n) {
  if (n === null || n === undefined) return '-';
  const v = Number(n);
  return `$${v.toFixed(v !== 0 && Math.abs(v) < 0.01 ? 6 : 2)}`;
}

/** A number or a dash. */
export function num(n) {
  return n === null || n === undefined ? '-' : Number(n).toLocaleString('en-US');
}

/** A count and its noun, singular for one: `plural(2, 'team')` is "2 teams". */
export function plural(n, noun) {
  return `${num(n ?? 0)} ${noun}${Number(n) === 1 ? '' : 's'}`;
}

/** Spend against a budget, as text and a bar. */
export function budgetBar(spend, max) {
  const label = `${usd(spend)} / ${max === null || max === undefined ? 'no budget' : usd(max)}`;
  if (max === null || max === undefined || Number(max) <= 0) return h('span', {}, label);
  const ratio = Math.min(1, Number(spend) / Number(max));
  const bar = h('span', { class: `bar${ratio >= 1 ? ' over' : ratio >= 0.8 ? ' near' : ''}` });
  bar.append(h('span', { class: 'fill' }));
  bar.firstChild.style.width = `${(ratio * 100).toFixed(1)}%`;
  return h('span', { class: 'budget' }, bar, label);
}

/** A date-time in UTC, short. */
export function when(s) {
  if (!s) return '-';
  const d = new Date(s);
  return Number.isNaN(d.getTime()) ? String(s) : d.toISOString().replace('T', ' ').slice(0, 19);
}

/** A modal dialog with `content`; resolves when closed. */
export function dialog(title, content) {
  const d = h('dialog', { class: 'modal' },
    h('h2', {}, title), content,
    h('form', { method: 'dialog', class: 'actions' }, h('button', { class: 'secondary', type: 'submit' }, 'Close')));
  document.body.append(d);
  d.showModal();
  return new Promise((resolve) => d.addEventListener('close', () => { d.remove(); resolve(); }));
}

/** Asks for confirmation. */
export function confirmAction(text) {
  return window.confirm(text);
}

/** Splits a comma-separated list. */
export function list(s) {
  return String(s || '').split(',').map((x) => x.trim()).filter(Boolean);
}

/** Previous/next buttons around `label` for page `page` of `pages`; `go(page)` loads another page. */
export function pager(page, pages, label, go) {
  const last = page >= pages;
  const prev = h('button', { class: 'secondary small', 'data-action': 'previous', disabled: page <= 1 }, 'Previous');
  const next = h('button', { class: 'secondary small', 'data-action': 'next', disabled: last }, 'Next');
  prev.addEventListener('click', () => go(page - 1));
  next.addEventListener('click', () => go(page + 1));
  return h('div', { class: 'pager' }, prev, label, next);
}
