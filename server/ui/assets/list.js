// The executions list (/ui): filters by status, workflow and version, search
// by id or id prefix, newest first, a page at a time, refreshed every two
// seconds while the page is open. The filters live in the URL, so a
// filtered view can be bookmarked or shared.

import { get, seg } from './api.js';
import { h, replace, badge, errorBox } from './dom.js';
import { STATUSES, when, ago } from './format.js';

const PAGE = 25;
const REFRESH_MS = 2000;

function select(id, label, value, options, onchange) {
  const el = h('select', { id, name: id, onchange },
    options.map(([v, text]) => h('option', { value: v, selected: v === value }, text)));
  return h('div', { class: 'field' }, h('label', { for: id }, label), el);
}

export async function render(main, ctx) {
  const q = ctx.query;
  const filters = {
    status: q.get('status') || '',
    workflow: q.get('workflow') || '',
    version: q.get('version') || '',
    id_prefix: q.get('id_prefix') || '',
  };
  const cursor = q.get('cursor') || '';
  let definitions = [];
  try {
    definitions = (await get('/v1/definitions', { signal: ctx.signal })).definitions || [];
  } catch (e) {
    if (e.name === 'AbortError') throw e;
  }
  const names = [...new Set(definitions.map((d) => d.name))].sort();
  const versions = [...new Set(definitions
    .filter((d) => !filters.workflow || d.name === filters.workflow)
    .map((d) => d.version))].sort();

  const apply = (changes) => {
    const next = { ...filters, ...changes };
    if ('workflow' in changes && changes.workflow !== filters.workflow) next.version = '';
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries(next)) if (v) p.set(k, v);
    ctx.navigate(`/ui${p.toString() ? `?${p}` : ''}`);
  };

  const search = h('input', {
    id: 'id_prefix', name: 'id_prefix', type: 'search', value: filters.id_prefix,
    placeholder: 'order-1002 or a prefix', autocomplete: 'off', spellcheck: 'false',
  });
  const form = h('form', { class: 'filters', role: 'search', 'aria-label': 'Filter executions' },
    select('status', 'Status', filters.status, [['', 'Any status'], ...STATUSES.map((s) => [s, s])], (e) => apply({ status: e.target.value })),
    select('workflow', 'Workflow', filters.workflow, [['', 'Any workflow'], ...names.map((n) => [n, n])], (e) => apply({ workflow: e.target.value })),
    select('version', 'Version', filters.version, [['', 'Any version'], ...versions.map((v) => [v, v])], (e) => apply({ version: e.target.value })),
    h('div', { class: 'field grow' }, h('label', { for: 'id_prefix' }, 'Execution id or prefix'), search),
    h('div', { class: 'field buttons' }, h('button', { type: 'submit', class: 'primary' }, 'Search'),
      h('a', { class: 'button', href: '/ui' }, 'Clear')));
  form.addEventListener('submit', (e) => { e.preventDefault(); apply({ id_prefix: search.value.trim() }); });

  const live = h('p', { class: 'muted live', 'aria-live': 'off' }, '');
  const body = h('tbody', {});
  const table = h('table', { class: 'data', id: 'executions' },
    h('caption', { class: 'sr-only' }, 'Executions, newest first'),
    h('thead', {}, h('tr', {},
      ['Execution', 'Workflow', 'Version', 'Status', 'Started', 'Last change'].map((t) => h('th', { scope: 'col' }, t)))),
    body);
  const pager = h('nav', { class: 'pager', 'aria-label': 'Pages' });
  const problem = h('div', {});
  replace(main,
    h('div', { class: 'title-row' }, h('h1', {}, 'Executions'), live),
    form, problem, h('div', { class: 'table-wrap' }, table), pager);

  let shown = '';
  const load = async () => {
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries(filters)) if (v) p.set(k, v);
    p.set('limit', String(PAGE));
    if (cursor) p.set('cursor', cursor);
    try {
      const page = await get(`/v1/executions?${p}`, { signal: ctx.signal });
      replace(problem);
      const rows = page.executions || [];
      const key = JSON.stringify(rows.map((r) => [r.execution_id, r.status, r.updated_at]));
      if (key !== shown) {
        shown = key;
        draw(body, rows, filters);
      } else {
        for (const cell of body.querySelectorAll('[data-ago]')) cell.textContent = ago(cell.dataset.ago);
      }
      const links = [];
      if (cursor) links.push(h('a', { class: 'button', href: `/ui?${withoutCursor(filters)}` }, '⟵ Newest'));
      if (page.next_cursor) {
        const n = new URLSearchParams(withoutCursor(filters));
        n.set('cursor', page.next_cursor);
        links.push(h('a', { class: 'button', href: `/ui?${n}`, rel: 'next' }, 'Older ⟶'));
      }
      replace(pager, links);
      live.textContent = `Live · updated ${new Date().toLocaleTimeString()}`;
    } catch (e) {
      if (e.name === 'AbortError') return;
      replace(problem, errorBox(e, 'Executions could not be listed'));
      live.textContent = 'Live updates paused: the last refresh failed';
    }
  };
  await load();
  const timer = setInterval(load, REFRESH_MS);
  ctx.signal.addEventListener('abort', () => clearInterval(timer));
}

function withoutCursor(filters) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(filters)) if (v) p.set(k, v);
  return p.toString();
}

function draw(body, rows, filters) {
  if (!rows.length) {
    const any = Object.values(filters).some(Boolean);
    replace(body, h('tr', {}, h('td', { colspan: 6, class: 'empty' },
      any ? 'No execution matches these filters.' : 'No executions yet. Start one with `orbit run` or POST /v1/executions.')));
    return;
  }
  replace(body, rows.map((r) => h('tr', { 'data-id': r.execution_id },
    h('td', {}, h('a', { href: `/ui/executions/${seg(r.execution_id)}`, class: 'mono' }, r.execution_id),
      r.parent ? h('div', { class: 'muted small' }, 'child of ', h('a', { href: `/ui/executions/${seg(r.parent)}`, class: 'mono' }, r.parent)) : ''),
    h('td', {}, r.workflow),
    h('td', {}, r.version),
    h('td', {}, badge(r.status)),
    h('td', { title: r.created_at }, when(r.created_at)),
    h('td', { title: r.updated_at, 'data-ago': r.updated_at }, ago(r.updated_at)))));
}
