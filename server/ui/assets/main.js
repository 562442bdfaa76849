// The console's entry point: learns who the token is (GET /v1/whoami), asks
// for a token when the server wants one, and routes /ui URLs to their pages
// on the client. Each page gets an AbortSignal that fires when the operator
// leaves it, which stops its polling and streams.

import { api, setToken, token } from './api.js';
import { h, replace, errorBox } from './dom.js';
import * as list from './list.js';
import * as execution from './execution.js';
import * as definitions from './definitions.js';
import * as workers from './workers.js';

const main = document.getElementById('main');
const who = document.getElementById('who');
let identity = null;
let leave = null;

const ROUTES = [
  [/^\/ui\/?$/, 'executions', list.render],
  [/^\/ui\/executions\/([^/]+)$/, 'executions', execution.render],
  [/^\/ui\/definitions\/([^/]+)\/([^/]+)$/, 'definitions', definitions.renderOne],
  [/^\/ui\/definitions\/?$/, 'definitions', definitions.render],
  [/^\/ui\/workers\/?$/, 'workers', workers.render],
];

export function navigate(url, { replace: swap = false } = {}) {
  if (swap) history.replaceState(null, '', url);
  else history.pushState(null, '', url);
  route();
}

function route() {
  if (leave) leave.abort();
  leave = new AbortController();
  const path = location.pathname;
  for (const [re, section, render] of ROUTES) {
    const m = path.match(re);
    if (!m) continue;
    for (const a of document.querySelectorAll('[data-nav]')) {
      if (a.dataset.nav === section) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
    const params = m.slice(1).map(decodeURIComponent);
    const ctx = { identity, signal: leave.signal, params, query: new URLSearchParams(location.search), navigate };
    // A filter that navigates keeps the keyboard focus on the redrawn control.
    const focused = main.contains(document.activeElement) ? document.activeElement.id : '';
    replace(main, h('p', { class: 'muted' }, 'Loading…'));
    Promise.resolve(render(main, ctx)).then(() => {
      const again = focused && document.getElementById(focused);
      if (again) again.focus();
    }).catch((e) => {
      if (e.name !== 'AbortError') replace(main, errorBox(e, 'This page could not be loaded'));
    });
    return;
  }
  replace(main, h('h1', {}, 'Not found'), h('p', {}, 'No console page here. ', h('a', { href: '/ui' }, 'Go to the executions.')));
}

function showWho() {
  if (!identity) { replace(who); return; }
  if (!identity.auth) {
    replace(who, h('span', { class: 'muted' }, 'No authentication (local server)'));
    return;
  }
  replace(who,
    h('span', {}, 'Signed in as ', h('strong', {}, identity.name), ' ', h('span', { class: 'role', 'data-role': identity.role }, identity.role)),
    h('button', { type: 'button', class: 'link', onclick: () => { setToken(''); identity = null; signIn(); } }, 'Sign out'));
}

function signIn(message) {
  if (leave) leave.abort();
  showWho();
  const input = h('input', { id: 'token', name: 'token', type: 'password', autocomplete: 'off', required: true, 'aria-describedby': 'token-help' });
  const problem = h('div', { 'aria-live': 'assertive' }, message ? errorBox(message) : '');
  const form = h('form', { class: 'panel signin', 'aria-labelledby': 'signin-title' },
    h('h1', { id: 'signin-title' }, 'Sign in'),
    h('p', { id: 'token-help' }, 'This server checks API tokens. Paste yours; it is kept in this tab only (session storage) and sent with every request.'),
    h('label', { for: 'token' }, 'API token'), input,
    h('div', { class: 'row' }, h('button', { type: 'submit', class: 'primary' }, 'Sign in')),
    problem);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    setToken(input.value.trim());
    try {
      await start();
    } catch (err) {
      setToken('');
      replace(problem, errorBox(err, 'That token was refused'));
      input.focus();
    }
  });
  replace(main, form);
  input.focus();
}

async function start() {
  identity = await api('GET', '/v1/whoami');
  showWho();
  route();
}

document.addEventListener('click', (e) => {
  const a = e.target.closest && e.target.closest('a[href]');
  if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin || !url.pathname.startsWith('/ui') || a.target) return;
  e.preventDefault();
  navigate(url.pathname + url.search + url.hash);
  main.focus({ preventScroll: true });
});

window.addEventListener('popstate', route);
window.addEventListener('orbit:unauthenticated', () => {
  if (identity && identity.auth) { identity = null; signIn({ code: 'UNAUTHENTICATED', message: 'the server no longer accepts this token' }); }
});

start().catch((err) => {
  if (err.status === 401) signIn(token() ? err : null);
  else replace(main, errorBox(err, 'The server could not be reached'));
});
