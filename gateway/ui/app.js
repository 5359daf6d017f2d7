// The console's shell: the login form, the navigation and the page router
// (#/keys, #/models, ...). Each page is a module under pages/ exporting
// `render(main)`.

import { api, setCsrf, whenUnauthorized, ApiError } from './api.js';
import { h, replace, field, notice } from './dom.js';
import * as keys from './pages/keys.js';
import * as teams from './pages/teams.js';
import * as users from './pages/users.js';
import * as organizations from './pages/organizations.js';
import * as models from './pages/models.js';
import * as usage from './pages/usage.js';
import * as logs from './pages/logs.js';
import * as limits from './pages/limits.js';
import * as health from './pages/health.js';

const PAGES = [
  ['keys', 'Keys', keys],
  ['teams', 'Teams', teams],
  ['users', 'Users', users],
  ['organizations', 'Organizations', organizations],
  ['models', 'Models', models],
  ['usage', 'Usage', usage],
  ['logs', 'Logs', logs],
  ['limits', 'Limits', limits],
  ['health', 'Health', health],
];

const root = document.getElementById('app');
let session = null;

function showLogin(message) {
  session = null;
  setCsrf(null);
  const status = h('div', { id: 'login-status' }, message ? notice(message) : null);
  const form = h('form', { id: 'login-form' },
    field('Username', 'username', { value: 'admin', autocomplete: 'username' }),
    field('Password', 'password', { type: 'password', autocomplete: 'current-password' }),
    h('button', { type: 'submit', id: 'login-submit' }, 'Log in'));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const body = { username: form.username.value, password: form.password.value };
    try {
      const answer = await api('POST', '/ui/login', body);
      session = answer;
      setCsrf(answer.csrf_token);
      form.password.value = '';
      if (!location.hash || location.hash === '#/') location.hash = '#/keys';
      showShell();
    } catch (e) {
      replace(status, notice(e instanceof ApiError ? e.message : String(e)));
    }
  });
  replace(root, h('div', { class: 'login' },
    h('h1', {}, 'Gateway console'),
    h('p', { class: 'muted' }, 'Log in with UI_USERNAME and UI_PASSWORD (or the master key when UI_PASSWORD is unset); an internal user logs in with one of its keys as the password.'),
    status, form));
}

async function logout() {
  try {
    await api('POST', '/ui/logout');
  } finally {
    showLogin('Logged out.');
  }
}

/** The pages this session may see: an internal user sees its own keys, teams, usage and logs. */
function pages() {
  if (session && session.role === 'internal_user') {
    return PAGES.filter(([pid]) => ['keys', 'teams', 'usage', 'logs'].includes(pid));
  }
  return PAGES;
}

function currentPage() {
  const id = (location.hash.replace(/^#\/?/, '').split('?')[0] || 'keys');
  const allowed = pages();
  return allowed.find(([pid]) => pid === id) || allowed[0];
}

function showShell() {
  const [id] = currentPage();
  const nav = h('nav', { class: 'side', 'aria-label': 'Console' },
    h('div', { class: 'brand' }, 'Gateway'),
    pages().map(([pid, title]) => h('a', { href: `#/${pid}`, class: pid === id ? 'active' : '', 'data-page': pid }, title)),
    h('div', { class: 'who', id: 'who' }, session && session.login_required === false ? 'No master key: open gateway'
      : session.role === 'internal_user' ? `Logged in as ${session.user_id} (internal user)` : 'Logged in as admin'),
    session && session.login_required === false ? null
      : h('div', { class: 'who' }, h('button', { class: 'secondary small', id: 'logout', onclick: logout }, 'Log out')));
  const main = h('main', { id: 'page' });
  replace(root, h('div', { class: 'layout' }, nav, main));
  renderPage(main);
}

async function renderPage(main) {
  const [, title, page] = currentPage();
  document.title = `${title} · Gateway console`;
  replace(main, h('h1', {}, title), h('p', { class: 'muted' }, 'Loading…'));
  try {
    await page.render(main, title, session);
  } catch (e) {
    replace(main, h('h1', {}, title), notice(e instanceof ApiError ? e.message : String(e)));
  }
}

window.addEventListener('hashchange', () => {
  if (session) showShell();
});

whenUnauthorized(() => {
  if (session) showLogin('Your session has ended; log in again.');
});

async function start() {
  try {
    const answer = await api('GET', '/ui/session');
    if (answer && answer.authenticated) {
      session = answer;
      setCsrf(answer.csrf_token);
      showShell();
      return;
    }
  } catch (e) {
    showLogin(String(e.message || e));
    return;
  }
  showLogin();
}

start();
