// One execution (/ui/executions/{id}): its status, input, output or error,
// parent and children, the pinned definition, the timeline, the graph and
// the raw history. It follows the history stream while the execution runs
// and redraws as events arrive.

import { get, seg, follow } from './api.js';
import { h, replace, badge, jsonBlock } from './dom.js';
import { TERMINAL, when } from './format.js';
import { drawTimeline } from './timeline.js';
import { drawGraph, nodeStates } from './graph.js';
import { History } from './history.js';
import { actionButtons } from './actions.js';

export async function render(main, ctx) {
  const id = ctx.params[0];
  const path = `/v1/executions/${seg(id)}`;
  const [exec, hist] = await Promise.all([
    get(path, { signal: ctx.signal }),
    get(`${path}/history`, { signal: ctx.signal }),
  ]);
  let definition = null;
  try {
    definition = await get(`/v1/definitions/${seg(exec.workflow)}/${seg(exec.version)}`, { signal: ctx.signal });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
  }
  const state = { exec, events: hist.events || [], definition };

  const head = h('div', {});
  const summary = h('div', {});
  const timeline = h('div', { class: 'timeline-wrap' });
  const graph = h('div', { class: 'graph-wrap' });
  const history = new History(id);
  const live = h('p', { class: 'muted live', id: 'follow-state' });
  replace(main,
    head, live, summary,
    h('section', { 'aria-labelledby': 'tl-title' }, h('h2', { id: 'tl-title' }, 'Timeline'),
      h('p', { class: 'muted small' }, 'One row per unit; each attempt is a bar from scheduled (light) through dispatched to finished. ',
        legend()), timeline),
    h('section', { 'aria-labelledby': 'graph-title' }, h('h2', { id: 'graph-title' }, 'Workflow graph'),
      h('p', { class: 'muted small' }, 'Steps of the pinned definition, arrows from a step to what waits for it; each node coloured by its units in this execution.'),
      graph),
    h('section', { 'aria-labelledby': 'hist-title' }, h('h2', { id: 'hist-title' }, 'History'),
      h('p', { class: 'muted small' }, 'As ', h('code', {}, `orbit logs ${id}`), ' prints it. Select a line for the event’s JSON.'),
      history.element));

  const draw = () => {
    drawHead(head, state, ctx, refresh);
    drawSummary(summary, state);
    drawTimeline(timeline, state.exec, state.events);
    drawGraph(graph, state.definition && state.definition.definition, state.exec, state.events);
  };
  async function refresh() {
    try {
      state.exec = await get(path, { signal: ctx.signal });
      draw();
    } catch (e) {
      if (e.name !== 'AbortError') live.textContent = `Refresh failed: ${e.message}`;
    }
  }
  history.set(state.events);
  draw();
  followLive(ctx, id, state, history, live, refresh);
}

function legend() {
  return h('span', { class: 'legend' },
    ['succeeded', 'failed', 'running', 'uncertain', 'redelivery', 'compensation'].map((k) =>
      h('span', { class: `key k-${k}` }, k)));
}

function drawHead(head, state, ctx, refresh) {
  const { exec } = state;
  replace(head,
    h('p', { class: 'crumbs' }, h('a', { href: '/ui' }, 'Executions'), ' / '),
    h('div', { class: 'title-row' },
      h('h1', { class: 'mono', id: 'execution-title' }, exec.execution_id), badge(exec.status),
      h('div', { class: 'actions' }, actionButtons(exec, ctx.identity, refresh))));
}

function children(events) {
  const out = new Map();
  for (const ev of events) {
    if (ev.type === 'ChildStarted') out.set(ev.child_id, { step: ev.step, state: 'running' });
    if (ev.type === 'ChildCompleted' && out.has(ev.child_id)) out.get(ev.child_id).state = 'completed';
    if (ev.type === 'ChildFailed' && out.has(ev.child_id)) out.get(ev.child_id).state = 'failed';
  }
  return [...out.entries()];
}

/** What a running execution waits on: its steps (or compensations) in flight. */
function waitingOn(state) {
  const { exec, events, definition } = state;
  if (TERMINAL.includes(exec.status)) return h('span', { class: 'muted' }, 'nothing (finished)');
  const workflow = definition && definition.definition;
  if (!workflow || !Array.isArray(workflow.steps)) return h('span', { class: 'muted' }, 'unknown');
  const busy = ['running', 'queued'];
  const items = [];
  for (const [name, ns] of nodeStates(workflow, exec, events)) {
    if (busy.includes(ns.step.state)) items.push(h('li', {}, h('code', {}, name), ` — ${ns.step.text}`));
    if (busy.includes(ns.comp.state)) items.push(h('li', {}, h('code', {}, `compensate:${name}`), ` — ${ns.comp.text}`));
  }
  return items.length ? h('ul', { class: 'plain', id: 'waiting-on' }, items) : h('span', { class: 'muted' }, 'the scheduler (nothing in flight)');
}

function drawSummary(box, state) {
  const { exec, events } = state;
  const kids = children(events);
  const def = `/ui/definitions/${seg(exec.workflow)}/${seg(exec.version)}`;
  const rows = [
    ['Waiting on', waitingOn(state)],
    ['Workflow', h('a', { href: def }, `${exec.workflow} ${exec.version}`)],
    ['Definition hash', h('code', { class: 'hash' }, exec.definition_hash)],
    ['Started', h('span', { title: exec.created_at }, when(exec.created_at))],
    ['Last change', h('span', { title: exec.updated_at }, when(exec.updated_at))],
    ['Parent', exec.parent ? h('a', { class: 'mono', href: `/ui/executions/${seg(exec.parent)}` }, exec.parent) : h('span', { class: 'muted' }, 'none')],
    ['Children', kids.length
      ? h('ul', { class: 'plain' }, kids.map(([cid, c]) => h('li', {},
        h('a', { class: 'mono', href: `/ui/executions/${seg(cid)}` }, cid), ` (step ${c.step}, ${c.state})`)))
      : h('span', { class: 'muted' }, 'none')],
  ];
  const io = [h('div', { class: 'io' }, h('h3', {}, 'Input'), jsonBlock(exec.input, 'input'))];
  if (exec.status === 'completed') io.push(h('div', { class: 'io' }, h('h3', {}, 'Output'), jsonBlock(exec.output, 'output')));
  if (exec.error) io.push(h('div', { class: 'io error' }, h('h3', {}, 'Error'), jsonBlock(exec.error, 'error')));
  replace(box, h('div', { class: 'summary' },
    h('dl', { class: 'facts' }, rows.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])),
    h('div', { class: 'ios' }, io)));
}

function followLive(ctx, id, state, history, live, refresh) {
  const terminal = () => TERMINAL.includes(state.exec.status);
  if (terminal()) { live.textContent = 'Finished; the history is complete.'; return; }
  let pending = null;
  const soon = () => {
    clearTimeout(pending);
    pending = setTimeout(refresh, 250);
  };
  const lastSeq = () => (state.events.length ? state.events[state.events.length - 1].seq : 0);
  const loop = async () => {
    while (!ctx.signal.aborted && !terminal()) {
      live.textContent = 'Following live…';
      try {
        await follow(id, lastSeq(), (ev) => {
          if (ev.seq <= lastSeq()) return;
          state.events.push(ev);
          history.add(ev);
          soon();
        }, ctx.signal);
      } catch (e) {
        if (e.name === 'AbortError') return;
        live.textContent = `Live stream interrupted (${e.message}); retrying…`;
      }
      await refresh();
      if (terminal()) break;
      await new Promise((r) => setTimeout(r, 1000));
    }
    if (!ctx.signal.aborted) live.textContent = 'Finished; the history is complete.';
  };
  loop();
  ctx.signal.addEventListener('abort', () => clearTimeout(pending));
}

