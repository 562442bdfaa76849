// The workflow graph of a definition (its compiled steps): one node per
// step in columns by dependency depth, an arrow from each step to the steps
// that wait for it, fan-out steps drawn as a stack with their element
// count, and each compensation as a dashed node under its step. Given an
// execution, every node is coloured — and labelled, colour is never the only
// cue — by the state of its units.

import { h, s, replace } from './dom.js';
import { stepOf, isCompensation } from './format.js';

const NW = 176;
const NH = 56;
const COL = 222;
const GAP = 26;
const PAD = 20;

function kindText(step) {
  const k = step.kind || {};
  switch (k.kind) {
    case 'task': return `task ${k.task}`;
    case 'workflow': return `workflow ${k.workflow} ${k.version}`;
    case 'sleep': return 'sleep';
    case 'signal': return `signal "${k.name}"`;
    default: return k.kind || '';
  }
}

/** State of a node from its units: failed > running > queued > succeeded. */
function aggregate(states) {
  if (!states.length) return { state: 'idle', text: 'not reached' };
  const count = (x) => states.filter((st) => st === x).length;
  const done = count('succeeded');
  const n = states.length;
  const of = n > 1 ? ` ${done}/${n}` : '';
  if (count('failed')) return { state: 'failed', text: `failed${n > 1 ? ` (${count('failed')}/${n})` : ''}` };
  if (count('running') || count('retrying')) return { state: 'running', text: `running${of}` };
  if (count('queued')) return { state: 'queued', text: `queued${of}` };
  if (count('skipped')) return { state: 'skipped', text: 'skipped' };
  return { state: 'succeeded', text: n > 1 ? `succeeded ${done}/${n}` : 'succeeded' };
}

/** Unit states by step (and by compensated step), from the execution and its history. */
function stepStates(exec, events) {
  const byStep = new Map();
  const byComp = new Map();
  const push = (m, k, v) => { if (!m.has(k)) m.set(k, []); m.get(k).push(v); };
  for (const [unit, u] of Object.entries((exec && exec.units) || {})) {
    push(isCompensation(unit) ? byComp : byStep, stepOf(unit), u.status);
  }
  // Sleep and signal steps have no units: read them from the history.
  const fanout = new Map();
  const timers = new Map();
  for (const ev of events || []) {
    if (ev.type === 'StepSkipped') push(byStep, ev.step, 'skipped');
    if (ev.type === 'StepFanOut') fanout.set(ev.step, (ev.items || []).length);
    if (ev.type === 'TimerStarted') timers.set(ev.step, 'running');
    if (ev.type === 'TimerFired' || ev.type === 'SignalConsumed') timers.set(ev.step, 'succeeded');
  }
  for (const [step, st] of timers) if (!byStep.has(step)) push(byStep, step, st);
  return { byStep, byComp, fanout };
}

function depths(steps) {
  const depth = new Map();
  const depthOf = (name, seen = new Set()) => {
    if (depth.has(name)) return depth.get(name);
    const st = steps.find((x) => x.name === name);
    if (!st || seen.has(name)) return 0;
    seen.add(name);
    const d = (st.depends_on || []).reduce((m, dep) => Math.max(m, depthOf(dep, seen) + 1), 0);
    depth.set(name, d);
    return d;
  };
  steps.forEach((st) => depthOf(st.name));
  return depth;
}

/**
 * The state of every step of `workflow` in an execution, and of its
 * compensation: a map from step name to `{ step, comp }`, each
 * `{ state, text }`. A signal step whose dependencies are done waits.
 */
export function nodeStates(workflow, exec, events) {
  const steps = workflow.steps;
  const depth = depths(steps);
  const states = stepStates(exec, events);
  const finished = ['completed', 'failed', 'cancelled', 'compensating'].includes(exec.status);
  const out = new Map();
  const ordered = [...steps].sort((a, b) => (depth.get(a.name) || 0) - (depth.get(b.name) || 0));
  for (const st of ordered) {
    let step = aggregate(states.byStep.get(st.name) || []);
    const ready = (st.depends_on || []).every((d) => out.get(d) && ['succeeded', 'skipped'].includes(out.get(d).step.state));
    if (step.state === 'idle' && (st.kind || {}).kind === 'signal' && !finished && ready) {
      step = { state: 'running', text: 'waiting for the signal' };
    }
    let comp = aggregate(states.byComp.get(st.name) || []);
    if (comp.state === 'idle') comp = { state: 'idle', text: 'not run' };
    out.set(st.name, { step, comp, count: states.fanout.get(st.name) });
  }
  return out;
}

export function drawGraph(box, workflow, exec, events) {
  if (!workflow || !Array.isArray(workflow.steps)) {
    replace(box, h('p', { class: 'muted' }, 'The definition is not available, so the graph cannot be drawn.'));
    return;
  }
  const steps = workflow.steps;
  const depth = depths(steps);
  const columns = [];
  for (const st of steps) {
    const d = depth.get(st.name) || 0;
    (columns[d] ||= []).push(st);
  }
  const pos = new Map();
  let height = 0;
  columns.forEach((col, c) => {
    let y = PAD + 18;
    for (const st of col) {
      pos.set(st.name, { x: PAD + c * COL, y });
      y += NH + GAP;
      if (st.compensate) { pos.set(`compensate:${st.name}`, { x: PAD + c * COL, y: y - GAP + 18 }); y += NH + 18; }
    }
    height = Math.max(height, y);
  });
  const width = PAD * 2 + Math.max(1, columns.length) * COL - (COL - NW);
  const states = exec ? nodeStates(workflow, exec, events) : null;
  const svg = s('svg', {
    viewBox: `0 0 ${width} ${height}`, width, height, class: 'graph', id: 'graph', role: 'group',
    'aria-label': `Graph of ${workflow.name} ${workflow.version}: ${steps.length} steps`,
  });
  svg.append(s('defs', {}, s('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
    s('path', { d: 'M 0 0 L 10 5 L 0 10 z', class: 'arrow-head' }))));
  for (const st of steps) {
    const to = pos.get(st.name);
    for (const dep of st.depends_on || []) {
      const from = pos.get(dep);
      if (!from) continue;
      const x1 = from.x + NW; const y1 = from.y + NH / 2; const x2 = to.x; const y2 = to.y + NH / 2;
      const mx = (x1 + x2) / 2;
      svg.append(s('path', { d: `M ${x1} ${y1} C ${mx} ${y1}, ${mx} ${y2}, ${x2 - 2} ${y2}`, class: 'edge', 'marker-end': 'url(#arrow)', 'data-from': dep, 'data-to': st.name }));
    }
  }
  for (const st of steps) {
    const p = pos.get(st.name);
    const ns = states ? states.get(st.name) : null;
    const count = ns ? ns.count : undefined;
    const fan = st.for_each ? `for ${st.for_each.var} in …${count !== undefined ? ` (×${count})` : ''}` : '';
    svg.append(node(p, st.name, st.name, kindText(st), ns && ns.step, { fan, kind: (st.kind || {}).kind }));
    if (st.compensate) {
      const c = pos.get(`compensate:${st.name}`);
      svg.append(s('path', { d: `M ${p.x + NW / 2} ${p.y + NH} L ${c.x + NW / 2} ${c.y}`, class: 'edge comp-edge' }));
      const task = st.compensate.call && st.compensate.call.task;
      svg.append(node(c, `compensate:${st.name}`, `↺ compensate ${st.name}`, `task ${task}`, ns && ns.comp, { comp: true }));
    }
  }
  replace(box, svg);
}

function node(p, id, title, sub, agg, { fan = '', comp = false, kind = '' } = {}) {
  const state = agg ? agg.state : 'plain';
  const text = `${title} — ${sub}${fan ? ` — ${fan}` : ''}${agg ? ` — ${agg.text}` : ''}`;
  const g = s('g', { class: `node st-${state}${comp ? ' comp' : ''}${fan ? ' fan' : ''}`, 'data-node': id, 'data-state': state, 'data-kind': kind, tabindex: 0, role: 'img', 'aria-label': text });
  g.append(s('title', {}, text));
  if (fan) {
    g.append(s('rect', { x: p.x + 8, y: p.y - 8, width: NW, height: NH, rx: 7, class: 'box shadow' }),
      s('rect', { x: p.x + 4, y: p.y - 4, width: NW, height: NH, rx: 7, class: 'box shadow' }));
  }
  g.append(s('rect', { x: p.x, y: p.y, width: NW, height: NH, rx: 7, class: 'box' }),
    s('text', { x: p.x + 10, y: p.y + 19, class: 'name' }, clip(title, 23)),
    s('text', { x: p.x + 10, y: p.y + 35, class: 'sub' }, clip(fan || sub, 29)));
  if (agg) g.append(s('text', { x: p.x + 10, y: p.y + 49, class: 'state' }, agg.text));
  return g;
}

function clip(text, n) {
  return text.length > n ? `${text.slice(0, n - 1)}…` : text;
}
