// The console's calls to the gateway: the session cookie authenticates
// them (same origin only); calls that change state repeat the session's
// CSRF token in x-csrf-token. Errors carry the gateway's message.

let csrf = null;

/** Remembers the session's CSRF token (memory only, never storage). */
export function setCsrf(token) {
  csrf = token;
}

/** A failed call: HTTP status and the gateway's error message. */
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/**
 * A list's loads, newest wins: `fresh(api(...))` resolves to the answer, or
 * to `null` once a later load of the same list has started (a slow answer to
 * an earlier search must not replace the newer one's rows).
 */
export function newestOnly() {
  let started = 0;
  return async (pending) => {
    const mine = ++started;
    const answer = await pending;
    return mine === started ? answer : null;
  };
}

/** Calls `path` with `method` and an optional JSON body; resolves to the parsed answer. */
export async function api(method, path, body) {
  const headers = { accept: 'application/json' };
  const init = { method, headers, credentials: 'same-origin', cache: 'no-store' };
  if (body !== undefined) {
    headers['content-type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  if (method !== 'GET' && method !== 'HEAD' && csrf) {
    headers['x-csrf-token'] = csrf;
  }
  const res = await fetch(path, init);
  const text = await res.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = text;
  }
  if (!res.ok) {
    const message = (data && data.error && data.error.message) || `HTTP ${res.status}`;
    if (res.status === 401 && onUnauthorized) onUnauthorized();
    throw new ApiError(res.status, String(message));
  }
  return data;
}

let onUnauthorized = null;

/** Sets what happens when a call finds the session gone (back to the login form). */
export function whenUnauthorized(fn) {
  onUnauthorized = fn;
}

/** A query string from an object, leaving out empty values. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : '';
}
