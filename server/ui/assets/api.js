// The console's only way to the server: the public /v1 API, with the bearer
// token kept in this tab's sessionStorage. A 401 anywhere asks for a token.

const TOKEN_KEY = 'orbit.console.token';

export function token() {
  try { return sessionStorage.getItem(TOKEN_KEY) || ''; } catch { return ''; }
}

export function setToken(value) {
  try {
    if (value) sessionStorage.setItem(TOKEN_KEY, value);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch { /* storage disabled: the token lives only as long as the page */ }
}

/** An error answer of the API (or a network failure: status 0). */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function headers(extra) {
  const out = { Accept: 'application/json', ...extra };
  const t = token();
  if (t) out.Authorization = `Bearer ${t}`;
  return out;
}

/** A fresh Idempotency-Key, so a repeated click cannot act twice. */
export function newKey() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

/** Calls the API; resolves with the JSON body, rejects with an ApiError. */
export async function api(method, path, { body, signal, key } = {}) {
  const extra = {};
  if (body !== undefined) extra['Content-Type'] = 'application/json';
  if (key) extra['Idempotency-Key'] = key;
  let res;
  try {
    res = await fetch(path, {
      method, signal, cache: 'no-store', headers: headers(extra),
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, 'NETWORK', `cannot reach the server (${e.message})`);
  }
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (!res.ok) {
    const err = (data && data.error) || {};
    if (res.status === 401) window.dispatchEvent(new CustomEvent('orbit:unauthenticated'));
    throw new ApiError(res.status, err.code || `HTTP_${res.status}`, err.message || res.statusText);
  }
  return data;
}

export const get = (path, opts) => api('GET', path, opts);

/** Percent-encodes one path segment. */
export const seg = (x) => encodeURIComponent(x);

/**
 * Follows an execution's history over server-sent events (fetch, not
 * EventSource, so the token travels in a header). Calls onEvent for every
 * event after `afterSeq`; resolves when the stream ends (the execution
 * finished, or the connection dropped), rejects on an error answer.
 */
export async function follow(id, afterSeq, onEvent, signal) {
  const res = await fetch(`/v1/executions/${seg(id)}/history?after_seq=${afterSeq}`, {
    signal, cache: 'no-store', headers: headers({ Accept: 'text/event-stream' }),
  });
  if (!res.ok || !res.body) throw new ApiError(res.status, `HTTP_${res.status}`, 'the history stream was refused');
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  let data = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let nl;
    while ((nl = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, nl).replace(/\r$/, '');
      buffer = buffer.slice(nl + 1);
      if (line === '') {
        if (data.length) {
          try { onEvent(JSON.parse(data.join('\n'))); } catch { /* keep-alive or junk */ }
        }
        data = [];
      } else if (line.startsWith('data:')) {
        data.push(line.slice(5).replace(/^ /, ''));
      }
    }
  }
}
