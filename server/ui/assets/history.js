// The raw history in `orbit logs` format: one line per event, each a button
// that shows or hides the event's JSON. New events are appended as they
// stream in.

import { h } from './dom.js';
import { logLine, ms } from './format.js';

export class History {
  constructor(executionId) {
    this.id = executionId;
    this.origin = null;
    this.element = h('ol', { class: 'history', id: 'history' });
  }

  set(events) {
    this.element.replaceChildren();
    this.origin = null;
    for (const ev of events) this.add(ev);
  }

  add(ev) {
    if (this.origin === null) this.origin = ms(ev.at);
    const detail = h('pre', { class: 'json event-json', hidden: true }, JSON.stringify(ev, null, 2));
    const button = h('button', {
      type: 'button', class: `line ev-${ev.type}`, 'aria-expanded': 'false', 'data-seq': ev.seq,
    }, logLine(this.id, this.origin, ev));
    button.addEventListener('click', () => {
      const open = button.getAttribute('aria-expanded') === 'true';
      button.setAttribute('aria-expanded', String(!open));
      detail.hidden = open;
    });
    this.element.append(h('li', {}, button, detail));
  }
}
