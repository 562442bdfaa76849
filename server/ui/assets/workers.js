// Worker sessions (/ui/workers): who is connected, for which task patterns,
// when each was last heard from, and the deliveries each holds. Refreshed
// every two seconds.

import { get, seg } from './api.js';
import { h, replace, errorBox } from './dom.js';
import { ago, when } from './format.js';

export async function render(main, ctx) {
  const body = h('tbody', {});
  const note = h('p', { class: 'muted' });
  const problem = h('div', {});
  const live = h('p', { class: 'muted live' });
  replace(main,
    h('div', { class: 'title-row' }, h('h1', {}, 'Workers'), live),
    note, problem,
    h('div', { class: 'table-wrap' }, h('table', { class: 'data', id: 'workers' },
      h('thead', {}, h('tr', {}, ['Worker', 'Task patterns', 'Last contact', 'Held tasks'].map((t) => h('th', { scope: 'col' }, t)))),
      body)));
  const load = async () => {
    try {
      const r = await get('/v1/workers', { signal: ctx.signal });
      replace(problem);
      note.textContent = `A session that neither polls nor heartbeats for ${Math.round(r.session_timeout_ms / 1000)} s is dropped, and the tasks it held are delivered again.`;
      draw(body, r.sessions || []);
      live.textContent = `Live · updated ${new Date().toLocaleTimeString()}`;
    } catch (e) {
      if (e.name === 'AbortError') return;
      replace(problem, errorBox(e, 'Worker sessions could not be listed'));
    }
  };
  await load();
  const timer = setInterval(load, 2000);
  ctx.signal.addEventListener('abort', () => clearInterval(timer));
}

function draw(body, sessions) {
  if (!sessions.length) {
    replace(body, h('tr', {}, h('td', { colspan: 4, class: 'empty' }, 'No worker is connected. Workers appear here when they register.')));
    return;
  }
  replace(body, sessions.map((w) => h('tr', { 'data-session': w.session_id },
    h('td', {}, h('strong', {}, w.worker_id), h('div', { class: 'muted small mono' }, `session ${w.session_id}`)),
    h('td', {}, h('ul', { class: 'chips' }, w.task_patterns.map((p) => h('li', { class: 'chip mono' }, p)))),
    h('td', { title: when(w.last_seen) }, ago(w.last_seen)),
    h('td', {}, w.held.length
      ? h('ul', { class: 'plain' }, w.held.map((t) => h('li', {},
        h('a', { class: 'mono', href: `/ui/executions/${seg(t.execution_id)}` }, t.execution_id), ' · ',
        h('span', { class: 'mono' }, t.unit), t.task ? ` (${t.task}, attempt ${t.attempt})` : '',
        h('span', { class: 'muted small' }, ` · dispatched ${ago(t.dispatched_at)}`))))
      : h('span', { class: 'muted' }, 'none')))));
}
