// The admin API as the page uses it: the token (sessionStorage only), JSON in and out, and
// errors turned into messages a person can read.

const TOKEN = 'hearth-admin-token';

/** The token was refused (or is missing): the page asks to sign in again. */
export class Unauthorized extends Error {
  constructor() {
    super('The relay did not accept the admin token. Sign in again.');
  }
}

/** Any other refusal, with the relay's own `error` text. */
export class ApiError extends Error {
  constructor(status, body, headers) {
    const said = body && typeof body === 'object' && typeof body.error === 'string' ? body.error : null;
    let message = said ?? `The relay answered ${status}.`;
    if (status === 429) {
      const wait = headers?.get('retry-after');
      message = `Too many attempts from this address${wait ? `: try again in ${wait} s` : ''}.`;
    }
    super(message);
    this.status = status;
    this.body = body;
  }
}

export const token = {
  get: () => sessionStorage.getItem(TOKEN),
  set: (value) => sessionStorage.setItem(TOKEN, value),
  clear: () => sessionStorage.removeItem(TOKEN),
};

/** One call: `{data, headers, status}`, or throws Unauthorized / ApiError / a network error. */
export async function call(method, path, { body, headers = {}, bearer = token.get() } = {}) {
  const sent = { Authorization: `Bearer ${bearer ?? ''}`, ...headers };
  if (body !== undefined) sent['Content-Type'] = 'application/json';
  let response;
  try {
    response = await fetch(path, {
      method,
      headers: sent,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: 'no-store',
    });
  } catch {
    throw new Error('The relay could not be reached.');
  }
  const text = await response.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = text;
    }
  }
  if (response.status === 401) throw new Unauthorized();
  if (!response.ok) throw new ApiError(response.status, data, response.headers);
  return { data, headers: response.headers, status: response.status };
}

export const get = async (path) => (await call('GET', path)).data;

/** A NIP-86 method through `POST /admin/v1/rpc`; its `error` is thrown as an ApiError. */
export async function rpc(method, params = []) {
  const { data } = await call('POST', '/admin/v1/rpc', { body: { method, params } });
  if (data && data.error) throw new ApiError(200, { error: data.error });
  return data ? data.result : null;
}

/** Every item of a paged list (`?limit=…&after=…` answered with `{<key>: [...], next}`). */
export async function getAll(path, key, limit = 500) {
  const items = [];
  let after = '';
  for (;;) {
    const page = await get(`${path}?limit=${limit}${after ? `&after=${encodeURIComponent(after)}` : ''}`);
    items.push(...page[key]);
    if (!page.next) return items;
    after = page.next;
  }
}
