// Deployed definitions (/ui/definitions) and one definition
// (/ui/definitions/{name}/{version}): its hash, graph and source.

import { get, seg } from './api.js';
import { h, replace } from './dom.js';
import { when } from './format.js';
import { drawGraph } from './graph.js';

export async function render(main, ctx) {
  const { definitions = [] } = await get('/v1/definitions', { signal: ctx.signal });
  const rows = [...definitions].sort((a, b) => a.name.localeCompare(b.name) || b.version.localeCompare(a.version, undefined, { numeric: true }));
  replace(main,
    h('h1', {}, 'Definitions'),
    h('p', { class: 'muted' }, 'Every workflow version deployed to this server. Executions stay pinned to the hash they started with.'),
    h('div', { class: 'table-wrap' }, h('table', { class: 'data', id: 'definitions' },
      h('thead', {}, h('tr', {}, ['Workflow', 'Version', 'Definition hash', 'Deployed', ''].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, rows.length ? rows.map((d) => h('tr', {},
        h('td', {}, h('a', { href: `/ui/definitions/${seg(d.name)}/${seg(d.version)}` }, d.name)),
        h('td', {}, d.version),
        h('td', {}, h('code', { class: 'hash', title: d.definition_hash }, d.definition_hash.slice(0, 16), '…')),
        h('td', { title: d.registered_at }, when(d.registered_at)),
        h('td', {}, h('a', { href: `/ui?workflow=${seg(d.name)}&version=${seg(d.version)}` }, 'Executions'))))
        : h('tr', {}, h('td', { colspan: 5, class: 'empty' }, 'Nothing deployed yet. Deploy with `orbit deploy FILE`.')))))
  );
}

export async function renderOne(main, ctx) {
  const [name, version] = ctx.params;
  const d = await get(`/v1/definitions/${seg(name)}/${seg(version)}`, { signal: ctx.signal });
  const graph = h('div', { class: 'graph-wrap' });
  replace(main,
    h('p', { class: 'crumbs' }, h('a', { href: '/ui/definitions' }, 'Definitions'), ' / '),
    h('div', { class: 'title-row' }, h('h1', {}, `${d.name} ${d.version}`),
      h('a', { class: 'button', href: `/ui?workflow=${seg(d.name)}&version=${seg(d.version)}` }, 'Its executions')),
    h('dl', { class: 'facts' },
      h('dt', {}, 'Definition hash'), h('dd', {}, h('code', { class: 'hash', id: 'definition-hash' }, d.definition_hash)),
      h('dt', {}, 'Deployed'), h('dd', {}, when(d.registered_at)),
      h('dt', {}, 'Steps'), h('dd', {}, String(((d.definition || {}).steps || []).length))),
    h('section', { 'aria-labelledby': 'g-title' }, h('h2', { id: 'g-title' }, 'Graph'), graph),
    h('section', { 'aria-labelledby': 's-title' }, h('h2', { id: 's-title' }, 'Source'),
      h('p', { class: 'muted small' }, 'The file this workflow was deployed from.'),
      h('pre', { class: 'source', id: 'source', tabindex: 0 }, d.source || '(no source stored)')));
  drawGraph(graph, d.definition, null, null);
}
