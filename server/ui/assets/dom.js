// DOM helpers: build elements from data without innerHTML, so that nothing
// read from the API is ever parsed as markup.

const SVG_NS = 'http://www.w3.org/2000/svg';

function fill(el, attrs, children) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.setAttribute('class', v);
    else if (k === 'text') el.textContent = v;
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/** An HTML element: h('a', {href: '/ui'}, 'text', child...). */
export function h(tag, attrs, ...children) {
  return fill(document.createElement(tag), attrs, children);
}

/** An SVG element. */
export function s(tag, attrs, ...children) {
  return fill(document.createElementNS(SVG_NS, tag), attrs, children);
}

/** Replaces an element's children. */
export function replace(el, ...children) {
  el.replaceChildren();
  return fill(el, {}, children);
}

/** Shows a short message in the page's live region. */
export function notify(message, kind = 'info') {
  const box = document.getElementById('notice');
  if (!box) return;
  box.className = `notice ${kind}`;
  box.textContent = message;
  clearTimeout(notify.timer);
  notify.timer = setTimeout(() => { box.textContent = ''; box.className = 'notice'; }, 6000);
}

/** A status badge: the word is always shown, colour only adds to it. */
export function badge(status) {
  return h('span', { class: `badge st-${status}`, 'data-status': status }, status);
}

/** A block of pretty-printed JSON. */
export function jsonBlock(value, label) {
  return h('pre', { class: 'json', tabindex: 0, 'aria-label': label },
    value === undefined ? '—' : JSON.stringify(value, null, 2));
}

/** A panel showing an API error: its code and message. */
export function errorBox(err, what) {
  return h('div', { class: 'error-box', role: 'alert' },
    h('strong', {}, what ? `${what}: ` : ''),
    err && err.code ? h('code', {}, err.code) : '',
    ' ', err && err.message ? err.message : String(err));
}
