// Formatting: times, durations, and the `orbit logs` line of an event
// (the same text as the CLI prints, ported from core/src/history/logs.rs).

export const TERMINAL = ['completed', 'failed', 'cancelled'];
export const STATUSES = ['pending', 'running', 'compensating', 'completed', 'failed', 'cancelled'];

/** An offset as `orbit logs` prints it: `39ms`, `5.1s`. */
export function offset(ms) {
  const m = Math.max(0, Math.round(ms));
  if (m < 1000) return `${m}ms`;
  const tenths = Math.floor((m + 50) / 100);
  return `${Math.floor(tenths / 10)}.${tenths % 10}s`;
}

/** Milliseconds since the epoch of an RFC 3339 string. */
export const ms = (iso) => Date.parse(iso);

/** A local date and time, to the second. */
export function when(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '—';
  return d.toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'medium' });
}

/** `12s ago`, `3m ago`, `2h ago`. */
export function ago(iso, now = Date.now()) {
  const d = (now - ms(iso)) / 1000;
  if (!Number.isFinite(d)) return '—';
  if (d < 1) return 'just now';
  if (d < 60) return `${Math.floor(d)}s ago`;
  if (d < 3600) return `${Math.floor(d / 60)}m ago`;
  if (d < 86400) return `${Math.floor(d / 3600)}h ago`;
  return `${Math.floor(d / 86400)}d ago`;
}

/** One event as `orbit logs` prints it; origin is the first event's time. */
export function logLine(executionId, origin, ev) {
  const rel = (t) => `+${offset(t - origin)}`;
  const f = [];
  const add = (k, v) => f.push(`${k}=${v}`);
  const code = (e) => (e && e.code) || '';
  switch (ev.type) {
    case 'StepFanOut': add('step', ev.step); add('items', (ev.items || []).length); break;
    case 'StepScheduled':
      add('step', ev.step); add('attempt', ev.attempt);
      if (ev.redelivery) add('redelivery', 'true');
      if (ev.idempotency_key !== `${executionId}/${ev.step}`) add('key', ev.idempotency_key);
      break;
    case 'StepDispatched': add('step', ev.step); add('attempt', ev.attempt); add('worker_id', ev.worker_id); break;
    case 'StepAttemptUncertain': add('step', ev.step); add('attempt', ev.attempt); add('reason', ev.reason); break;
    case 'StepSucceeded': add('step', ev.step); add('attempt', ev.attempt); break;
    case 'StepAttemptFailed':
      add('step', ev.step); add('attempt', ev.attempt); add('code', code(ev.error));
      if (ev.retry_at != null) add('retry_at', rel(ev.retry_at));
      break;
    case 'StepFailed': add('step', ev.step); add('code', code(ev.error)); break;
    case 'StepSkipped': add('step', ev.step); break;
    case 'StaleResultIgnored': add('step', ev.step); add('attempt', ev.attempt); add('outcome', ev.outcome); break;
    case 'TimerStarted': add('step', ev.step); add('fire_at', rel(ev.fire_at)); break;
    case 'TimerFired': add('step', ev.step); break;
    case 'SignalReceived': add('name', ev.name); add('seq', ev.seq); break;
    case 'SignalConsumed': add('step', ev.step); add('signal_seq', ev.signal_seq); break;
    case 'ChildStarted': case 'ChildCompleted': case 'ChildFailed':
      add('step', ev.step); add('child_id', ev.child_id); break;
    case 'CompensationStarted': add('reason', ev.reason); add('units', (ev.units || []).join(',')); break;
    case 'WorkflowCancelRequested': if (ev.reason != null) add('reason', ev.reason); break;
    case 'WorkflowFailed':
      add('code', code(ev.error));
      if (ev.error && ev.error.step) add('step', ev.error.step);
      break;
    default: break;
  }
  return [`+ ${offset(ms(ev.at) - origin)}`, `#${ev.seq}`, ev.type, ...f].join(' ');
}

/** The step a unit belongs to: `reserve[2]` and `compensate:reserve[2]` → `reserve`. */
export function stepOf(unit) {
  return unit.replace(/^compensate:/, '').replace(/\[\d+\]$/, '');
}

export const isCompensation = (unit) => unit.startsWith('compensate:');
