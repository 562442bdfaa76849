// The timeline: one row per unit, each attempt a bar from scheduled (light)
// through dispatched to its end, coloured by how it ended. Uncertain
// attempts end in a hatched cap and a "?", redeliveries are outlined and
// marked ↻, compensation rows are marked ↺ and tinted; the start of
// compensation and a cancel request are vertical rules. Built from the
// history alone, so it reads like `orbit logs` laid out in time.

import { h, s, replace } from './dom.js';
import { ms, offset, isCompensation, TERMINAL } from './format.js';

const W = 1000;
const LABEL = 230;
const ROW = 26;
const TOP = 56;

/** Units with their attempts, in order of first appearance. */
export function units(events) {
  const rows = new Map();
  const row = (unit, kind) => {
    if (!rows.has(unit)) rows.set(unit, { unit, kind, attempts: [], marks: [], compensation: isCompensation(unit) });
    return rows.get(unit);
  };
  const open = (r) => [...r.attempts].reverse().find((a) => a.end === null);
  const close = (unit, t, outcome, note) => {
    const r = rows.get(unit);
    const a = r && open(r);
    if (a) { a.end = t; a.outcome = outcome; a.note = note; } else if (r) r.marks.push({ t, outcome, note });
  };
  const rules = [];
  const signals = [];
  for (const ev of events) {
    const t = ms(ev.at);
    switch (ev.type) {
      case 'StepScheduled':
        row(ev.step, 'task').attempts.push({ attempt: ev.attempt, redelivery: !!ev.redelivery, scheduled: t, dispatched: null, end: null, outcome: null, task: ev.task });
        break;
      case 'StepDispatched': {
        const r = rows.get(ev.step);
        const a = r && open(r);
        if (a) { a.dispatched = t; a.worker = ev.worker_id; }
        break;
      }
      case 'StepSucceeded': close(ev.step, t, 'succeeded'); break;
      case 'StepAttemptFailed': close(ev.step, t, 'failed', ev.error && ev.error.code); break;
      case 'StepAttemptUncertain': close(ev.step, t, 'uncertain', ev.reason); break;
      case 'StepFailed':
        if (rows.has(ev.step)) close(ev.step, t, 'failed', ev.error && ev.error.code);
        else row(ev.step, 'step').marks.push({ t, outcome: 'failed', note: ev.error && ev.error.code });
        break;
      case 'StepSkipped': row(ev.step, 'step').marks.push({ t, outcome: 'skipped', note: 'skipped' }); break;
      case 'StaleResultIgnored': row(ev.step, 'task').marks.push({ t, outcome: 'stale', note: `stale ${ev.outcome}` }); break;
      case 'TimerStarted': row(ev.step, 'sleep').attempts.push({ attempt: 1, scheduled: t, dispatched: t, end: null, outcome: null }); break;
      case 'TimerFired': close(ev.step, t, 'succeeded', 'timer fired'); break;
      case 'ChildStarted': row(ev.step, 'child').attempts.push({ attempt: 1, scheduled: t, dispatched: t, end: null, outcome: null, child: ev.child_id }); break;
      case 'ChildCompleted': close(ev.step, t, 'succeeded', ev.child_id); break;
      case 'ChildFailed': close(ev.step, t, 'failed', ev.error && ev.error.code); break;
      case 'SignalReceived': signals.push({ t, name: ev.name, seq: ev.seq }); break;
      case 'SignalConsumed': row(ev.step, 'signal').marks.push({ t, outcome: 'succeeded', note: `signal #${ev.signal_seq}` }); break;
      case 'CompensationStarted': rules.push({ t, kind: 'compensation', label: `compensation (${ev.reason})` }); break;
      case 'WorkflowCancelRequested': rules.push({ t, kind: 'cancel', label: 'cancel requested' }); break;
      default: break;
    }
  }
  return { rows: [...rows.values()], rules, signals };
}

function describe(r, a, t0) {
  const parts = [`${r.unit} attempt ${a.attempt}${a.redelivery ? ' (redelivery)' : ''}`,
    `scheduled +${offset(a.scheduled - t0)}`];
  if (a.dispatched !== null && r.kind === 'task') parts.push(`dispatched +${offset(a.dispatched - t0)}${a.worker ? ` to ${a.worker}` : ''}`);
  if (a.end !== null) parts.push(`${a.outcome} +${offset(a.end - t0)}${a.note ? ` (${a.note})` : ''}`);
  else parts.push('still running');
  return parts.join(' · ');
}

export function drawTimeline(box, exec, events) {
  if (!events.length) { replace(box, h('p', { class: 'muted' }, 'No events yet.')); return; }
  const { rows, rules, signals } = units(events);
  const t0 = ms(events[0].at);
  const running = !TERMINAL.includes(exec.status);
  const last = ms(events[events.length - 1].at);
  const t1 = Math.max(last, running ? Date.now() : last, t0 + 1);
  const span = t1 - t0;
  const x = (t) => LABEL + ((t - t0) / span) * (W - LABEL - 12);
  const lines = rows.length + (signals.length ? 1 : 0);
  const height = TOP + lines * ROW + 8;
  const svg = s('svg', {
    viewBox: `0 0 ${W} ${height}`, class: 'timeline', id: 'timeline', role: 'group',
    'aria-label': `Timeline of ${rows.length} units over ${offset(span)}`,
  });
  svg.append(s('defs', {}, s('pattern', { id: 'hatch', width: 6, height: 6, patternUnits: 'userSpaceOnUse', patternTransform: 'rotate(45)' },
    s('rect', { width: 6, height: 6, class: 'hatch-bg' }), s('line', { x1: 0, y1: 0, x2: 0, y2: 6, class: 'hatch-line' }))));
  for (let i = 0; i <= 4; i += 1) {
    const t = t0 + (span * i) / 4;
    svg.append(s('line', { x1: x(t), x2: x(t), y1: TOP - 6, y2: height - 4, class: 'grid' }),
      s('text', { x: x(t), y: 14, class: 'axis', 'text-anchor': i === 0 ? 'start' : i === 4 ? 'end' : 'middle' }, `+${offset(t - t0)}`));
  }
  rows.forEach((r, i) => {
    const y = TOP + i * ROW;
    const g = s('g', { class: `unit${r.compensation ? ' compensation' : ''}`, 'data-unit': r.unit, 'data-kind': r.kind });
    if (r.compensation) g.append(s('rect', { x: 0, y, width: W, height: ROW, class: 'comp-band' }));
    g.append(s('text', { x: 8, y: y + 17, class: 'label' }, `${r.compensation ? '↺ ' : ''}${r.unit}`));
    for (const a of r.attempts) {
      const end = a.end !== null ? a.end : t1;
      const disp = a.dispatched !== null ? a.dispatched : end;
      const text = describe(r, a, t0);
      const cls = ['bar', a.outcome || 'open', a.redelivery && 'redelivery'].filter(Boolean).join(' ');
      const bar = s('g', { class: cls, 'data-attempt': a.attempt, 'data-outcome': a.outcome || 'running', tabindex: 0, role: 'img', 'aria-label': text }, s('title', {}, text));
      if (disp > a.scheduled) bar.append(s('rect', { x: x(a.scheduled), y: y + 7, width: Math.max(2, x(disp) - x(a.scheduled)), height: ROW - 14, class: 'queued' }));
      bar.append(s('rect', { x: x(disp), y: y + 5, width: Math.max(4, x(end) - x(disp)), height: ROW - 10, rx: 3, class: 'run' }));
      if (a.outcome === 'uncertain') {
        bar.append(s('rect', { x: x(end) - 2, y: y + 3, width: 10, height: ROW - 6, class: 'uncertain-cap', fill: 'url(#hatch)' }),
          s('text', { x: x(end) + 11, y: y + 17, class: 'mark' }, '?'));
      }
      if (a.redelivery) bar.append(s('text', { x: x(a.scheduled) - 12, y: y + 17, class: 'mark' }, '↻'));
      g.append(bar);
    }
    for (const m of r.marks) {
      g.append(s('g', { class: `point ${m.outcome}` }, s('title', {}, `${r.unit}: ${m.note || m.outcome} +${offset(m.t - t0)}`),
        s('circle', { cx: x(m.t), cy: y + ROW / 2, r: 5 })));
    }
    svg.append(g);
  });
  if (signals.length) {
    const y = TOP + rows.length * ROW;
    const g = s('g', { class: 'unit signals', 'data-unit': 'signals' }, s('text', { x: 8, y: y + 17, class: 'label' }, 'signals received'));
    for (const sg of signals) {
      g.append(s('g', { class: 'point signal' }, s('title', {}, `signal ${sg.name} (#${sg.seq}) +${offset(sg.t - t0)}`),
        s('path', { d: `M ${x(sg.t)} ${y + 6} l 6 7 l -6 7 l -6 -7 z` })));
    }
    svg.append(g);
  }
  rules.forEach((rule, i) => {
    // Labels alternate between two lines so that rules close in time stay
    // readable; near the right edge they extend to the left of their rule.
    const rx = x(rule.t);
    const right = rx > W - 220;
    svg.append(s('g', { class: `rule ${rule.kind}`, 'data-rule': rule.kind },
      s('line', { x1: rx, x2: rx, y1: TOP - 4, y2: height - 4 }),
      s('text', { x: right ? rx - 4 : rx + 4, y: TOP - 8 - (i % 2) * 13, class: 'rule-label', 'text-anchor': right ? 'end' : 'start' }, rule.label)));
  });
  replace(box, svg);
}
