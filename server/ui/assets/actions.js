// The operator's actions on an execution: send a signal (name + JSON
// payload) and cancel. Each opens a dialog with a confirmation step, sends
// one request with a fresh Idempotency-Key, and shows the API's error if the
// server refuses. Nothing is shown to a token that may not perform it, nor
// on a finished execution.

import { api, newKey, seg } from './api.js';
import { h, replace, errorBox, notify } from './dom.js';
import { TERMINAL } from './format.js';

export function actionButtons(exec, identity, done) {
  const may = identity && identity.permissions && identity.permissions.control;
  if (TERMINAL.includes(exec.status)) return [];
  if (!may) return [h('span', { class: 'muted small', id: 'read-only' }, `Read-only: a ${identity && identity.role} token cannot signal or cancel.`)];
  return [
    h('button', { type: 'button', id: 'signal-button', onclick: () => signalDialog(exec, done) }, 'Send signal…'),
    h('button', { type: 'button', id: 'cancel-button', class: 'danger', onclick: () => cancelDialog(exec, done) }, 'Cancel execution…'),
  ];
}

function dialog(title, id) {
  const d = h('dialog', { id, 'aria-labelledby': `${id}-title` });
  d.addEventListener('close', () => d.remove());
  document.body.append(d);
  return { d, title: h('h2', { id: `${id}-title` }, title) };
}

function signalDialog(exec, done) {
  const { d, title } = dialog('Send a signal', 'signal-dialog');
  const name = h('input', { id: 'signal-name', name: 'name', required: true, maxlength: 255, autocomplete: 'off', spellcheck: 'false' });
  const payload = h('textarea', { id: 'signal-payload', name: 'payload', rows: 6, spellcheck: 'false', 'aria-describedby': 'payload-help' }, '{}');
  const problem = h('div', { 'aria-live': 'assertive' });
  const key = newKey();
  const edit = () => {
    replace(d, h('form', { method: 'dialog', class: 'stack' },
      title,
      h('p', {}, 'To ', h('code', {}, exec.execution_id), '. A signal step waiting for this name consumes it; otherwise it is kept until one does.'),
      h('label', { for: 'signal-name' }, 'Signal name'), name,
      h('label', { for: 'signal-payload' }, 'Payload (JSON)'), payload,
      h('p', { id: 'payload-help', class: 'muted small' }, 'Any JSON value; leave empty for null.'),
      problem,
      h('div', { class: 'row' },
        h('button', { type: 'button', onclick: () => d.close() }, 'Close'),
        h('button', { type: 'submit', class: 'primary', id: 'signal-review', onclick: review }, 'Review…'))));
    name.focus();
  };
  function review(e) {
    e.preventDefault();
    replace(problem);
    const n = name.value.trim();
    if (!n) { replace(problem, errorBox({ code: 'MISSING_NAME', message: 'give the signal a name' })); name.focus(); return; }
    let value = null;
    if (payload.value.trim()) {
      try { value = JSON.parse(payload.value); } catch (err) {
        replace(problem, errorBox({ code: 'INVALID_JSON', message: `the payload is not JSON: ${err.message}` }));
        payload.focus();
        return;
      }
    }
    const send = h('button', { type: 'button', class: 'primary', id: 'signal-send' }, 'Send signal');
    const result = h('div', { 'aria-live': 'assertive' });
    replace(d, h('div', { class: 'stack' }, title,
      h('p', {}, 'Send signal ', h('code', {}, n), ' to ', h('code', {}, exec.execution_id), ' with this payload?'),
      h('pre', { class: 'json' }, JSON.stringify(value, null, 2)),
      result,
      h('div', { class: 'row' }, h('button', { type: 'button', onclick: edit }, 'Back'), send)));
    send.addEventListener('click', async () => {
      send.disabled = true;
      try {
        const r = await api('POST', `/v1/executions/${seg(exec.execution_id)}/signals/${seg(n)}`, { body: { payload: value }, key });
        d.close();
        notify(`Signal ${n} recorded as event #${r.seq}.`, 'ok');
        done();
      } catch (err) {
        send.disabled = false;
        replace(result, errorBox(err, 'The server refused the signal'));
      }
    });
    send.focus();
  }
  edit();
  d.showModal();
}

function cancelDialog(exec, done) {
  const { d, title } = dialog('Cancel this execution?', 'cancel-dialog');
  const reason = h('input', { id: 'cancel-reason', name: 'reason', maxlength: 4096, autocomplete: 'off' });
  const result = h('div', { 'aria-live': 'assertive' });
  const confirm = h('button', { type: 'button', class: 'danger', id: 'cancel-confirm' }, 'Cancel execution');
  const key = newKey();
  replace(d, h('div', { class: 'stack' }, title,
    h('p', {}, h('code', {}, exec.execution_id), ' stops: queued steps are withdrawn, and steps that already succeeded are compensated, newest first. This cannot be undone.'),
    h('label', { for: 'cancel-reason' }, 'Reason (optional, recorded in the history)'), reason,
    result,
    h('div', { class: 'row' }, h('button', { type: 'button', id: 'cancel-keep', onclick: () => d.close() }, 'Keep it running'), confirm)));
  confirm.addEventListener('click', async () => {
    confirm.disabled = true;
    try {
      const body = reason.value.trim() ? { reason: reason.value.trim() } : {};
      await api('POST', `/v1/executions/${seg(exec.execution_id)}/cancel`, { body, key });
      d.close();
      notify('Cancellation recorded.', 'ok');
      done();
    } catch (err) {
      confirm.disabled = false;
      replace(result, errorBox(err, 'The server refused to cancel'));
    }
  });
  d.showModal();
  reason.focus();
}
