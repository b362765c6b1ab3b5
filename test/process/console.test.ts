/**
 * The operators' console over the compiled binary: its own listener (and nothing of it on the API's),
 * sessions and their end, the cross-origin refusal, the sign-in throttle, its security headers, the audit
 * log, and its key and ban actions taking effect on the API. With PostgreSQL, sessions are in storage:
 * a session made on one instance works on another and ends on both.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { existsSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { BINARY, cli, eventually, startServer, tempDir } from '../support/binary'
import { CONSOLE_ROUTES, DECLARED, isPublic } from '../support/console'
import { checkEveryAnswer, Contract } from '../support/contract'
import { type PostgresCluster, startPostgres } from '../support/postgres'
import { type RedisServer, startRedis } from '../support/redis'
import { auth, cliAsync, killSpawned, serveExpectingFailure, startWithConsole, type ConsoleServer } from './helpers'

afterAll(killSpawned)
setDefaultTimeout(30_000)

/** Signs in and returns the session cookie (name=value). */
async function signIn(origin: string, name: string, password: string): Promise<string> {
  const response = await fetch(`${origin}/api/session`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', origin },
    body: JSON.stringify({ name, password }),
  })
  if (response.status !== 200) throw new Error(`sign-in answered ${response.status}: ${await response.text()}`)
  const cookie = response.headers.get('set-cookie')!
  expect(cookie).toMatch(/^petstore_console=[A-Za-z0-9_-]{43}; Path=\/; HttpOnly; SameSite=Strict$/)
  return cookie.split(';')[0]!
}

/** A console request as its own page makes it: the cookie, and its Origin on a change. */
function call(origin: string, cookie: string, method: string, path: string, body?: unknown) {
  return fetch(`${origin}${path}`, {
    method,
    headers: { cookie, origin, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
}

/** Every route of the console's API (the page's files aside), read from the app. */
const API_ROUTES = DECLARED.filter(([, path]) => path.startsWith('/api/'))
/** Those that need an operator. */
const GUARDED = API_ROUTES.filter((route) => !isPublic(route))

describe('console on its own listener', () => {
  let server: ConsoleServer
  let cookie: string
  beforeAll(async () => {
    server = await startWithConsole({ args: ['--ban-after', '1', '--ban-seconds', '600'] })
    cookie = await signIn(server.console, 'admin', server.password)
  })
  afterAll(() => server.stop())

  test('the first serve makes an operator whose password is in a 0600 file beside the data file, never in the log', () => {
    const file = join(server.dataFile, '..', 'petstore-console-password.txt')
    expect(statSync(file).mode & 0o777).toBe(0o600)
    expect(server.password).toMatch(/^[A-Za-z0-9_-]{22}$/)
    expect(server.stderr()).toContain(`"admin" was created; its password is in ${file}`)
    expect(server.stderr()).not.toContain(server.password)
    expect(server.stdout()).not.toContain(server.password)
  })

  test('nothing on the API listener serves the console, and nothing on the console serves the API', async () => {
    for (const [method, path] of API_ROUTES) {
      const response = await fetch(`${server.origin}${path}`, { method, headers: { cookie, origin: server.origin } })
      expect([404, 405]).toContain(response.status)
      expect(await response.text()).not.toContain('petstore_console')
    }
    // The suite's contract check would take the console for an API server and ask it for /openapi.json.
    checkEveryAnswer.enabled = false
    try {
      for (const path of ['/v1/pets', '/healthz', '/openapi.json', '/docs', '/metrics']) {
        const response = await fetch(`${server.console}${path}`, { headers: { cookie, ...auth(server.bootstrapKey!) } })
        expect(response.status).toBe(404)
      }
    } finally {
      checkEveryAnswer.enabled = true
    }
  })

  test('no API answer without a session, or with one that does not exist', async () => {
    for (const cookieHeader of [undefined, 'petstore_console=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA']) {
      for (const [method, path] of GUARDED) {
        const response = await fetch(`${server.console}${path}`, {
          method,
          headers: { origin: server.console, 'content-type': 'application/json', ...(cookieHeader ? { cookie: cookieHeader } : {}) },
          body: method === 'GET' || method === 'DELETE' ? undefined : '{"plan":"free"}',
        })
        expect(`${method} ${path} ${response.status}`).toBe(`${method} ${path} 401`)
        expect((await response.json()) as any).toMatchObject({ code: 'unauthorized', status: 401 })
      }
    }
    // An API key is not an operator's token.
    expect((await fetch(`${server.console}/api/keys`, { headers: auth(server.bootstrapKey!) })).status).toBe(401)
  })

  test('a request that changes something, with the cookie but from another origin (or none), is refused and changes nothing', async () => {
    const before = ((await (await call(server.console, cookie, 'GET', '/api/keys')).json()) as any).keys.length
    for (const origin of ['http://evil.example', 'null', server.origin, undefined]) {
      const response = await fetch(`${server.console}/api/keys`, {
        method: 'POST',
        headers: { cookie, 'content-type': 'application/json', ...(origin === undefined ? {} : { origin }) },
        body: JSON.stringify({ plan: 'pro', name: 'csrf' }),
      })
      expect(response.status).toBe(403)
      expect((await response.json()) as any).toMatchObject({ code: 'forbidden', status: 403 })
    }
    const after = ((await (await call(server.console, cookie, 'GET', '/api/keys')).json()) as any).keys
    expect(after.length).toBe(before)
    expect(after.map((key: { name: string }) => key.name)).not.toContain('csrf')
  })

  test('every answer carries the CSP without inline script and refuses framing', async () => {
    const answers = [
      await call(server.console, cookie, 'GET', '/api/me'),
      await fetch(`${server.console}/api/keys`),
      await fetch(`${server.console}/nowhere`),
      await fetch(`${server.console}/api/session`, {
        method: 'POST',
        headers: { origin: server.console, 'content-type': 'application/json' },
        body: '{}',
      }),
    ]
    expect(answers.map((response) => response.status)).toEqual([200, 401, 404, 400])
    for (const response of answers) {
      const csp = response.headers.get('content-security-policy')!
      expect(csp).toContain("frame-ancestors 'none'")
      expect(csp).toContain("script-src 'self'")
      expect(csp).not.toContain('unsafe-inline')
      expect(response.headers.get('x-frame-options')).toBe('DENY')
      expect(response.headers.get('x-content-type-options')).toBe('nosniff')
    }
  })

  test('bad input gets a 400 naming its field', async () => {
    const cases: [string, string, unknown, string][] = [
      ['POST', '/api/keys', { plan: 'gold' }, 'plan: must be one of free, pro, business, enterprise'],
      ['POST', '/api/keys', { plan: 'pro', rpm: 5 }, 'rpm: only an enterprise key has its own rpm and rpd'],
      ['POST', '/api/keys', { plan: 'free', rpm: 5, rpd: 5 }, 'rpm: only an enterprise key has its own rpm and rpd'],
      ['POST', '/api/keys', { plan: 'enterprise' }, 'rpm: an enterprise key needs rpm and rpd'],
      [
        'POST',
        '/api/keys',
        { plan: 'free', name: 'a\tb' },
        'name: must be a string of at most 200 characters, with no control or bidirectional formatting characters',
      ],
      [
        'POST',
        '/api/keys',
        { plan: 'free', name: 'x'.repeat(201) },
        'name: must be a string of at most 200 characters, with no control or bidirectional formatting characters',
      ],
      ['PUT', '/api/keys/key_x/plan', { plan: 'enterprise', rpm: 5 }, 'rpm: an enterprise key needs rpm and rpd'],
      ['POST', '/api/keys', { plan: 'pro', colour: 'red' }, 'colour: is not a known property; allowed are plan, name, rpm, rpd'],
      ['PUT', '/api/keys/key_x/plan', { plan: 'pro', rpd: 0 }, 'rpd: must be an integer from 1 to 1000000000'],
    ]
    for (const [method, path, body, message] of cases) {
      const response = await call(server.console, cookie, method, path, body)
      expect((await response.json()) as any).toEqual({ code: 'invalid_request', message, status: 400 })
    }
    const query = await call(server.console, cookie, 'GET', '/api/requests?limit=0')
    expect((await query.json()) as any).toEqual({
      code: 'invalid_request',
      message: 'limit: must be an integer from 1 to 5000',
      status: 400,
    })
  })

  test('a key created in the console works on the API at once, its secret shown once; revoked in the console, it is refused within a second', async () => {
    const created = await call(server.console, cookie, 'POST', '/api/keys', { plan: 'pro', name: 'from the console' })
    expect(created.status).toBe(201)
    const { key, secret } = (await created.json()) as any
    expect(secret).toMatch(/^psk_/)
    expect(key).toMatchObject({ name: 'from the console', plan: 'pro', rpm: 300, rpd: 10000, dayQuotaLeft: 10000, bannedUntil: null })
    expect((await fetch(`${server.base}/pets`, { headers: auth(secret) })).status).toBe(200)
    // Never again: the list carries no secret, nor its hash.
    const listed = await (await call(server.console, cookie, 'GET', '/api/keys')).text()
    expect(listed).not.toContain(secret)
    expect(listed).not.toMatch(/secret|hash/i)
    // The day quota left, read without taking a token: one request was made.
    const row = JSON.parse(listed).keys.find((k: { id: string }) => k.id === key.id)
    expect(row.dayQuotaLeft).toBe(9999)
    expect(
      (await call(server.console, cookie, 'GET', '/api/keys').then((r) => r.json() as Promise<any>)).keys.find(
        (k: { id: string }) => k.id === key.id,
      ).dayQuotaLeft,
    ).toBe(9999)

    const revoked = await call(server.console, cookie, 'DELETE', `/api/keys/${key.id}`)
    expect(revoked.status).toBe(204)
    const start = Date.now()
    await eventually(async () => (await fetch(`${server.base}/pets`, { headers: auth(secret) })).status === 401, 1_000)
    expect(Date.now() - start).toBeLessThan(1_000)
    expect((await call(server.console, cookie, 'DELETE', '/api/keys/key_nope')).status).toBe(404)
  })

  test('30 revocations of one key at once all answer 204 and write one audit entry; its limits then cannot be reset', async () => {
    const { key } = (await (
      await call(server.console, cookie, 'POST', '/api/keys', { plan: 'pro', name: 'revoked at once' })
    ).json()) as any
    const answers = await Promise.all(Array.from({ length: 30 }, () => call(server.console, cookie, 'DELETE', `/api/keys/${key.id}`)))
    expect(answers.map((answer) => answer.status)).toEqual(Array(30).fill(204))
    const { entries } = (await (await call(server.console, cookie, 'GET', '/api/audit?limit=5000')).json()) as any
    const ofKey = entries.filter((entry: { target: string }) => entry.target === key.id).map((entry: { action: string }) => entry.action)
    expect(ofKey).toEqual(['key.revoke', 'key.create'])
    for (const path of [`/api/keys/${key.id}/reset-limits`, `/api/bans/keys/${key.id}`]) {
      const reset = await call(server.console, cookie, path.includes('bans') ? 'DELETE' : 'POST', path)
      expect(reset.status).toBe(404)
      expect(((await reset.json()) as any).message).toBe(`No key with id "${key.id}" (or it is revoked).`)
    }
  })

  test('a revoked key is listed on request (revoked=include), for the record, and not by default; the parameter is documented and checked', async () => {
    const { key } = (await (await call(server.console, cookie, 'POST', '/api/keys', { plan: 'pro', name: 'retired' })).json()) as any
    expect((await call(server.console, cookie, 'DELETE', `/api/keys/${key.id}`)).status).toBe(204)
    const ids = async (query: string) =>
      (((await (await call(server.console, cookie, 'GET', `/api/keys${query}`)).json()) as any).keys as { id: string }[]).map((k) => k.id)
    expect(await ids('')).not.toContain(key.id)
    expect(await ids('?revoked=exclude')).not.toContain(key.id)
    const listed = ((await (await call(server.console, cookie, 'GET', '/api/keys?revoked=include')).json()) as any).keys.find(
      (k: { id: string }) => k.id === key.id,
    )
    expect(listed).toMatchObject({ name: 'retired', dayQuotaLeft: null, bannedUntil: null })
    expect(Date.parse(listed.revokedAt)).toBeGreaterThan(Date.now() - 60_000)
    const bad = await call(server.console, cookie, 'GET', '/api/keys?revoked=yes')
    expect(bad.status).toBe(400)
    expect((await bad.json()) as any).toEqual({ code: 'invalid_request', message: 'revoked: must be one of exclude, include', status: 400 })
    const document = (await (await call(server.console, cookie, 'GET', '/api/openapi.json')).json()) as any
    const parameter = document.paths['/api/keys'].get.parameters.find((p: { name: string }) => p.name === 'revoked')
    expect(parameter).toMatchObject({ in: 'query', required: false })
    expect(JSON.stringify(parameter.schema)).toContain('include')
    expect(parameter.description).toContain('revoked keys too')
  })

  test('the key list pages: a limit gives that many keys in id order and the cursor of the next page, every key once; a bad cursor is a 400', async () => {
    for (let i = 0; i < 5; i++) await call(server.console, cookie, 'POST', '/api/keys', { plan: 'free', name: `paged ${i}` })
    const list = async (query: string) => (await (await call(server.console, cookie, 'GET', `/api/keys${query}`)).json()) as any
    const whole = await list('?revoked=include')
    expect(whole.next).toBeUndefined()
    const paged: string[] = []
    let page = await list('?revoked=include&limit=2')
    for (;;) {
      expect(page.keys.length).toBeLessThanOrEqual(2)
      paged.push(...page.keys.map((key: { id: string }) => key.id))
      if (page.next === null) break
      expect(page.next).toBe(page.keys.at(-1).id)
      page = await list(`?revoked=include&limit=2&cursor=${encodeURIComponent(page.next)}`)
    }
    const ids = whole.keys.map((key: { id: string }) => key.id)
    expect(ids.length).toBeGreaterThan(4)
    expect(paged).toEqual([...ids].sort())
    // The rows are the same rows, a page at a time. A key's usage figures are written up to 2 s after its
    // traffic (an earlier test's requests): both are read again until no such write lands between them.
    const byId = (a: { id: string }, b: { id: string }) => (a.id < b.id ? -1 : 1)
    let [one, all]: unknown[] = []
    await eventually(async () => {
      one = (await list(`?revoked=include&limit=${ids.length}`)).keys
      all = (await list('?revoked=include')).keys.sort(byId)
      return Bun.deepEquals(one, all)
    }).catch(() => {})
    expect(one).toEqual(all)
    for (const [query, message] of [
      ['?limit=0', 'limit: must be an integer from 1 to 5000'],
      ['?limit=2&cursor=nope', "cursor: is not a cursor this server issued; give it with the limit, as the previous page's next"],
      [`?cursor=${ids[0]}`, "cursor: is not a cursor this server issued; give it with the limit, as the previous page's next"],
    ]) {
      const bad = await call(server.console, cookie, 'GET', `/api/keys${query}`)
      expect([bad.status, ((await bad.json()) as any).message]).toEqual([400, message])
    }
  })

  test("every guarded route takes only the query parameters its document declares, each once, as the API's do: 400 before the handler, nothing changed", async () => {
    const document = (await (await call(server.console, cookie, 'GET', '/api/openapi.json')).json()) as any
    const declared = (method: string, path: string): string[] =>
      (document.paths[path.replace('key_x', '{id}').replace('127.0.0.1', '{address}')]?.[method.toLowerCase()]?.parameters ?? [])
        .filter((parameter: { in: string }) => parameter.in === 'query')
        .map((parameter: { name: string }) => parameter.name)
    const answers = await Promise.all(
      GUARDED.map(async ([method, path]) => {
        const answer = await call(server.console, cookie, method, `${path}?nope=1`)
        const text = await answer.text()
        return [method, path, answer.status, text && JSON.parse(text).message]
      }),
    )
    expect(answers).toEqual(
      GUARDED.map(([method, path]) => {
        const allowed = declared(method, path)
        const rest = allowed.length ? `allowed are ${allowed.join(', ')}` : 'this route takes none'
        return [method, path, 400, `nope: is not a known query parameter; ${rest}`]
      }),
    )
    // Still signed in: the sign-out's handler did not run.
    expect((await call(server.console, cookie, 'GET', '/api/me')).status).toBe(200)

    const cases: [string, string][] = [
      ['/api/keys?revoked=include&revoked=exclude', 'revoked: is given more than once'],
      ['/api/keys?Revoked=include', 'Revoked: is not a known query parameter; allowed are revoked, limit, cursor'],
      ['/api/audit?limt=1', 'limt: is not a known query parameter; allowed are limit'],
      ['/api/audit?limit=1&limit=2', 'limit: is given more than once'],
      ['/api/requests?status=200&key=a&key=b', 'key: is given more than once'],
      ['/api/overview?hour', 'hour: is not a known query parameter; this route takes none'],
    ]
    for (const [path, message] of cases) {
      const answer = await call(server.console, cookie, 'GET', path)
      expect([path, answer.status, (await answer.json()) as any]).toEqual([path, 400, { code: 'invalid_request', message, status: 400 }])
    }
    expect((await call(server.console, cookie, 'GET', '/api/audit?limit=1')).status).toBe(200)
    expect((await call(server.console, cookie, 'GET', '/api/requests?key=k&status=200&limit=5')).status).toBe(200)

    // A change with a stray parameter is refused whole; without credentials, the 401 comes first.
    const { key } = (await (await call(server.console, cookie, 'POST', '/api/keys', { plan: 'pro', name: 'kept' })).json()) as any
    expect((await call(server.console, cookie, 'DELETE', `/api/keys/${key.id}?force=1`)).status).toBe(400)
    const listed = ((await (await call(server.console, cookie, 'GET', '/api/keys')).json()) as any).keys
    expect(listed.find((row: { id: string }) => row.id === key.id)).toMatchObject({ revokedAt: null })
    expect((await fetch(`${server.console}/api/audit?limt=1`)).status).toBe(401)
  })

  test("recent requests are the API's answers (its 404s included), not /healthz, /metrics or the docs", async () => {
    const origin = new URL(server.base).origin
    const marker = `recent-${Date.now()}`
    for (const path of ['/healthz', '/readyz', '/openapi.json', '/docs', '/favicon.ico', '/metrics'])
      await (await fetch(`${origin}${path}`)).arrayBuffer()
    await (await fetch(`${server.base}/${marker}`)).arrayBuffer()
    const { requests } = (await (await call(server.console, cookie, 'GET', '/api/requests?limit=5000')).json()) as {
      requests: { path: string }[]
    }
    expect(requests.map((request) => request.path).filter((path) => !path.startsWith('/v1/') && path !== '/v1')).toEqual([])
    expect(requests[0]!.path).toBe(`/v1/${marker}`)
  })

  test('a plan change in the console applies to the API within a second', async () => {
    const { key, secret } = (await (await call(server.console, cookie, 'POST', '/api/keys', { plan: 'free', name: 'mover' })).json()) as any
    expect((await fetch(`${server.base}/pets`, { headers: auth(secret) })).headers.get('ratelimit-policy')).toContain('"minute";q=60')
    expect((await call(server.console, cookie, 'PUT', `/api/keys/${key.id}/plan`, { plan: 'enterprise', rpm: 7, rpd: 70 })).status).toBe(
      204,
    )
    await eventually(
      async () => (await fetch(`${server.base}/pets`, { headers: auth(secret) })).headers.get('ratelimit-policy')!.includes('"minute";q=7'),
      1_000,
    )
    const row = ((await (await call(server.console, cookie, 'GET', '/api/keys')).json()) as any).keys.find(
      (k: { id: string }) => k.id === key.id,
    )
    expect(row).toMatchObject({ plan: 'enterprise', rpm: 7, rpd: 70 })
  })

  test('a banned key and a banned address are listed, and lifting each in the console gives 200 again', async () => {
    const { key, secret } = (await (
      await call(server.console, cookie, 'POST', '/api/keys', { plan: 'enterprise', rpm: 2, rpd: 1000, name: 'noisy' })
    ).json()) as any
    // Two allowed, then 429s: the first names the wait; with --ban-after 1, the second sent before it starts the ban.
    const statuses: number[] = []
    for (let i = 0; i < 5; i++) statuses.push((await fetch(`${server.base}/pets`, { headers: auth(secret) })).status)
    expect(statuses).toEqual([200, 200, 429, 429, 429])
    const banned = await fetch(`${server.base}/pets`, { headers: auth(secret) })
    expect(((await banned.json()) as any).code).toBe('key_banned')

    // The recent requests show the refusals, filtered by key and status, with the key's name and no secret.
    const recent = await (await call(server.console, cookie, 'GET', `/api/requests?key=${key.id}&status=429`)).text()
    expect(recent).not.toContain(secret)
    const requests = JSON.parse(recent).requests
    expect(requests.length).toBe(4)
    for (const entry of requests)
      expect(entry).toMatchObject({ method: 'GET', path: '/v1/pets', status: 429, keyId: key.id, keyName: 'noisy', client: null })

    // An address with no key: the Free plan's 60 a minute (earlier tests spent a few), then a ban.
    let noKey = 0
    while ((await fetch(`${server.base}/pets`)).status !== 429) expect(++noKey).toBeLessThanOrEqual(60)
    // The first refusal names the wait; the second sent before it starts the ban (--ban-after 1), and says so.
    expect((await fetch(`${server.base}/pets`)).status).toBe(429)
    expect(((await (await fetch(`${server.base}/pets`)).json()) as any).code).toBe('address_banned')

    const bans = ((await (await call(server.console, cookie, 'GET', '/api/bans')).json()) as any).bans
    expect(bans).toContainEqual({ kind: 'key', keyId: key.id, keyName: 'noisy', bannedUntil: expect.any(String) })
    expect(bans).toContainEqual({ kind: 'address', address: '127.0.0.1', bannedUntil: expect.any(String) })
    const keyRow = ((await (await call(server.console, cookie, 'GET', '/api/keys')).json()) as any).keys.find(
      (k: { id: string }) => k.id === key.id,
    )
    expect(Date.parse(keyRow.bannedUntil)).toBeGreaterThan(Date.now() + 500_000)

    expect((await call(server.console, cookie, 'DELETE', `/api/bans/keys/${key.id}`)).status).toBe(204)
    await eventually(async () => (await fetch(`${server.base}/pets`, { headers: auth(secret) })).status === 200, 1_000)
    expect((await call(server.console, cookie, 'DELETE', '/api/bans/addresses/127.0.0.1')).status).toBe(204)
    // No key after the lift: a 401 (the key is missing), no longer a 429.
    expect((await fetch(`${server.base}/pets`)).status).toBe(401)
    expect(((await (await call(server.console, cookie, 'GET', '/api/bans')).json()) as any).bans).toEqual([])

    const byAddress = ((await (await call(server.console, cookie, 'GET', '/api/requests?status=401&limit=1')).json()) as any).requests
    expect(byAddress).toEqual([
      {
        time: expect.any(String),
        method: 'GET',
        path: '/v1/pets',
        status: 401,
        keyId: null,
        keyName: null,
        client: '127.0.0.1',
        durationMs: expect.any(Number),
        requestId: expect.any(String),
      },
    ])
  })

  test('the audit log records each action: who, what, when', async () => {
    const since = Date.now()
    const { key } = (await (await call(server.console, cookie, 'POST', '/api/keys', { plan: 'pro', name: 'audited' })).json()) as any
    await call(server.console, cookie, 'PUT', `/api/keys/${key.id}/plan`, { plan: 'business' })
    await call(server.console, cookie, 'POST', `/api/keys/${key.id}/reset-limits`)
    await call(server.console, cookie, 'DELETE', `/api/bans/keys/${key.id}`)
    // Not banned: lifting changes nothing, and writes nothing.
    await call(server.console, cookie, 'DELETE', '/api/bans/addresses/10.0.0.9')
    await call(server.console, cookie, 'DELETE', `/api/keys/${key.id}`)
    await fetch(`${server.console}/api/session`, {
      method: 'POST',
      headers: { origin: server.console, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'admin', password: 'wrong' }),
    })
    const other = await signIn(server.console, 'admin', server.password)
    expect((await call(server.console, other, 'DELETE', '/api/session')).status).toBe(204)
    expect((await call(server.console, other, 'GET', '/api/me')).status).toBe(401)

    const entries = ((await (await call(server.console, cookie, 'GET', '/api/audit?limit=8')).json()) as any).entries.reverse()
    expect(entries.map((entry: { action: string; target: string; actor: string }) => [entry.actor, entry.action, entry.target])).toEqual([
      ['admin', 'key.create', key.id],
      ['admin', 'key.set-plan', `${key.id} business`],
      ['admin', 'key.reset-limits', key.id],
      ['admin', 'ban.lift', key.id],
      ['admin', 'key.revoke', key.id],
      ['admin', 'operator.sign-in-refused', 'admin'],
      ['admin', 'operator.sign-in', 'admin'],
      ['admin', 'operator.sign-out', 'admin'],
    ])
    for (const entry of entries) expect(Date.parse(entry.at)).toBeGreaterThanOrEqual(since - 5)
  })

  test('the whole page (HTML, script with uPlot, stylesheets) weighs under 200 KB gzipped, all from the console itself', async () => {
    const html = await (await fetch(`${server.console}/`)).text()
    const assets = [...html.matchAll(/(?:src|href)="([^"]+)"/g)].map((match) => match[1]!)
    expect(assets.every((asset) => !/^(https?:)?\/\//.test(asset))).toBe(true)
    const bodies = [
      html,
      ...(await Promise.all(
        assets.map(async (asset) => {
          const response = await fetch(new URL(asset, `${server.console}/`))
          expect(response.status).toBe(200)
          return response.text()
        }),
      )),
    ]
    const scripts = bodies.filter((_, i) => i > 0 && assets[i - 1]!.endsWith('.js'))
    const styles = bodies.filter((_, i) => i > 0 && assets[i - 1]!.endsWith('.css'))
    // uPlot and its stylesheet are in the bundle.
    expect(scripts.join('')).toContain('"uplot"')
    expect(styles.join('')).toContain('.u-legend')
    const gzipped = bodies.reduce((sum, body) => sum + Bun.gzipSync(body).length, 0)
    console.log(`the console's page: ${bodies.reduce((sum, body) => sum + body.length, 0)} bytes, ${gzipped} gzipped`)
    expect(gzipped).toBeLessThan(200_000)
  })

  test("its OpenAPI document is made from the routes it serves: each with an operationId, the guard's answers and the 8 KiB limit", async () => {
    const document = (await (await call(server.console, cookie, 'GET', '/api/openapi.json')).json()) as any
    const described = Object.entries(document.paths).flatMap(([path, item]) =>
      Object.keys(item as object).map((method) => `${method.toUpperCase()} ${path}`),
    )
    const served = CONSOLE_ROUTES.filter(({ path }) => path.startsWith('/api/')).map(
      ({ method, path }) => `${method} ${path.replace(/:(\w+)/g, '{$1}')}`,
    )
    expect(described.sort()).toEqual(served.sort())
    const operations = Object.values(document.paths).flatMap((item) => Object.entries(item as Record<string, any>))
    const ids = operations.map(([, operation]) => operation.operationId)
    expect(ids.every((id) => typeof id === 'string' && id.length > 0)).toBe(true)
    expect(new Set(ids).size).toBe(ids.length)
    for (const [method, operation] of operations) {
      // Every route: the host check and the body's size before routing; every route answers 401 (sign-in for a wrong password).
      expect(
        `${operation.operationId} ${Object.keys(operation.responses).filter((status) => ['401', '413', '421'].includes(status))}`,
      ).toBe(`${operation.operationId} 401,413,421`)
      if (method !== 'get') expect(Object.keys(operation.responses)).toContain('403')
      for (const parameter of operation.parameters ?? []) expect(parameter.description).toBeString()
    }
    const signIn = document.paths['/api/session'].post
    expect(signIn.security).toEqual([])
    expect(signIn.responses['429'].headers['Retry-After']).toMatchObject({ required: true, schema: { type: 'integer' } })
    expect(signIn.requestBody.description).toContain('8 KiB')
    expect(signIn.responses['413'].description).toContain('8 KiB')
    expect(document.info.description).toContain('8 KiB')
  })

  test('its answers are checked against its document, and a drifted answer would be caught', async () => {
    // The suite's hook has checked this console's answers against its served document.
    console.log(`console answers checked against the console's document so far: ${checkEveryAnswer.consoleChecked}`)
    expect(checkEveryAnswer.consoleChecked).toBeGreaterThan(20)
    const contract = new Contract((await (await call(server.console, cookie, 'GET', '/api/openapi.json')).json()) as any)
    const me = await call(server.console, cookie, 'GET', '/api/me')
    const body = await me.text()
    expect(() => contract.check('GET', '/api/me', me, body)).not.toThrow()
    expect(() => contract.check('GET', '/api/me', { status: 418, headers: me.headers }, body)).toThrow(/not documented/)
    expect(() => contract.check('GET', '/api/me', me, '{"name":"admin","via":"carrier pigeon"}')).toThrow(/schema/)
    const keys = await call(server.console, cookie, 'GET', '/api/keys')
    const list = (await keys.json()) as any
    delete list.keys[0].plan
    expect(() => contract.check('GET', '/api/keys', keys, JSON.stringify(list))).toThrow(/schema/)
    expect(() => contract.check('DELETE', '/api/keys/key_x', { status: 204, headers: new Headers() }, '{}')).toThrow(
      /no(ne)? is documented/,
    )
    const throttled = new Headers({ 'content-type': 'application/json' })
    expect(() =>
      contract.check('POST', '/api/session', { status: 429, headers: throttled }, '{"code":"rate_limited","message":"x","status":429}'),
    ).toThrow(/Retry-After/)
    expect(() => contract.check('PATCH', '/api/keys', me, body)).toThrow(/not a documented operation/)
  })
})

describe('usage in the console', () => {
  test('known traffic from two keys: the console API gives exactly the figures of `keys usage --json`', async () => {
    const server = await startWithConsole({ args: ['--no-access-log', '--ban-after', '1', '--ban-seconds', '600'] })
    const cookie = await signIn(server.console, 'admin', server.password)
    const make = async (name: string, args: string[]) => {
      const result = await cliAsync(['keys', 'create', '--data', server.dataFile, '--name', name, ...args])
      return result.stdout.trim().split('\n').at(-1)!
    }
    const limited = await make('limited', ['--plan', 'enterprise', '--rpm', '3', '--rpd', '1000'])
    const caller = await make('caller', ['--plan', 'pro'])
    await eventually(async () => (await fetch(`${server.base}/pets`, { headers: auth(caller) })).status === 200, 2_000)

    // "limited": 3 a minute, then refused and (--ban-after 1) banned: 3 answered, 4 refused.
    const statuses: number[] = []
    for (let i = 0; i < 7; i++) statuses.push((await fetch(`${server.base}/pets`, { headers: auth(limited) })).status)
    expect(statuses).toEqual([200, 200, 200, 429, 429, 429, 429])
    // "caller": its first listing above, then getPet 4 times (404: no such pet).
    for (let i = 0; i < 4; i++) expect((await fetch(`${server.base}/pets/999999`, { headers: auth(caller) })).status).toBe(404)

    type Usage = {
      keyId: string | null
      name: string | null
      today: Record<'requests' | 'ok' | 'clientErrors' | 'limited' | 'notImplemented' | 'serverErrors', number>
      deprecated: { day: number; week: number; last: string | null }
    }
    const usage = async () => {
      const result = await cliAsync(['keys', 'usage', '--json', '--data', server.dataFile])
      return (JSON.parse(result.stdout) as { keys: Usage[] }).keys
    }
    const byName = (rows: Usage[], name: string) => rows.find((row) => row.name === name)!
    await eventually(async () => {
      const rows = await usage()
      return byName(rows, 'limited').today.requests === 7 && byName(rows, 'caller').today.requests >= 5
    }, 15_000)
    const rows = await usage()
    const limitedRow = byName(rows, 'limited')
    const callerRow = byName(rows, 'caller')
    expect(limitedRow.today).toEqual({ requests: 7, ok: 3, clientErrors: 0, limited: 4, notImplemented: 0, serverErrors: 0 })
    expect(callerRow.deprecated).toMatchObject({ day: 4, week: 4 })

    const get = async (path: string) => {
      const response = await call(server.console, cookie, 'GET', path)
      expect(response.status).toBe(200)
      return (await response.json()) as any
    }
    // The keys list: requests and 429s today, getPet calls, as `keys usage` says.
    const { keys } = await get('/api/keys')
    for (const row of [limitedRow, callerRow]) {
      const key = keys.find((k: any) => k.id === row.keyId)
      expect({ requestsToday: key.requestsToday, limitedToday: key.limitedToday, deprecatedWeek: key.deprecatedWeek }).toEqual({
        requestsToday: row.today.requests,
        limitedToday: row.today.limited,
        deprecatedWeek: row.deprecated.week,
      })
    }
    // One key: its figures, its series (summed) and its refusals.
    const one = await get(`/api/keys/${limitedRow.keyId}/usage?window=hour`)
    expect(one.key.today).toEqual(limitedRow.today)
    expect(one.series.resolution).toBe('minute')
    expect(one.series.ok.length).toBeGreaterThanOrEqual(60)
    const sum = (column: number[]) => column.reduce((a, b) => a + b, 0)
    expect([sum(one.series.ok), sum(one.series.limited)]).toEqual([3, 4])
    expect(one.series.total).toMatchObject({ requests: 7, ok: 3, limited: 4 })
    expect(one.refusals.map((r: any) => [r.status, r.keyName, r.path])).toEqual(Array(4).fill([429, 'limited', '/v1/pets']))
    // Deprecation: the caller, with the API's Sunset date.
    const deprecation = await get('/api/deprecation')
    expect(deprecation.callers).toEqual([{ keyId: callerRow.keyId, name: 'caller', day: 4, week: 4, lastCall: callerRow.deprecated.last }])
    const sunset = (await fetch(`${server.base}/pets/999999`, { headers: auth(caller) })).headers.get('sunset')!
    expect(deprecation.sunset).toBe(new Date(sunset).toISOString())
    expect(deprecation.daysLeft).toBe(Math.ceil((Date.parse(sunset) - Date.now()) / 86_400_000))
    // The overview: the fleet's hour, with the ban.
    const overview = await get('/api/overview')
    const everyone = rows.reduce((total, row) => total + row.today.requests, 0)
    expect(sum(overview.hour.ok) + sum(overview.hour.clientErrors) + sum(overview.hour.limited) + sum(overview.hour.serverErrors)).toBe(
      everyone,
    )
    expect(overview.hour.total.requests).toBe(everyone)
    expect(overview.activeKeysToday).toBe(rows.filter((row) => row.keyId !== null && row.today.requests > 0).length)
    expect(overview.bansNow).toBe(1)
    expect(overview.week.resolution).toBe('hour')
    // Bad input: a 400 naming the field; an unknown key: 404.
    expect(await (await call(server.console, cookie, 'GET', `/api/keys/${limitedRow.keyId}/usage?window=year`)).json()).toEqual({
      code: 'invalid_request',
      message: 'window: must be one of hour, day, week',
      status: 400,
    })
    expect((await call(server.console, cookie, 'GET', '/api/keys/key_nope/usage')).status).toBe(404)
    await server.stop()
  })
})

describe('sign-in throttle', () => {
  test('after 5 failed sign-ins for a name within 15 minutes, that name gets 429 with Retry-After, even with the right password; other names do not', async () => {
    const server = await startWithConsole()
    const attempt = (name: string, password: string) =>
      fetch(`${server.console}/api/session`, {
        method: 'POST',
        headers: { origin: server.console, 'content-type': 'application/json' },
        body: JSON.stringify({ name, password }),
      })
    for (let i = 0; i < 5; i++) expect((await attempt('admin', `wrong-${i}`)).status).toBe(401)
    const throttled = await attempt('admin', server.password)
    expect(throttled.status).toBe(429)
    const retryAfter = Number(throttled.headers.get('retry-after'))
    expect(retryAfter).toBeGreaterThan(880)
    expect(retryAfter).toBeLessThanOrEqual(900)
    expect((await throttled.json()) as any).toMatchObject({ code: 'rate_limited', status: 429 })
    // Names that do not exist are throttled alike (nothing tells which names exist) and apart.
    for (let i = 0; i < 5; i++) expect((await attempt('ghost', 'x')).status).toBe(401)
    expect((await attempt('ghost', 'x')).status).toBe(429)
    // Another operator is not held back by them.
    const added = await cliAsync(['operators', 'add', 'bea', '--data', server.dataFile])
    expect(added.code).toBe(0)
    expect((await attempt('bea', added.stdout.trim().split('\n').at(-1)!)).status).toBe(200)
    await server.stop()
  })
})

describe('sessions end', () => {
  test('on a password reset and on removal of the operator; a token works for scripts until the operator is removed', async () => {
    const server = await startWithConsole()
    const added = cli(['operators', 'add', 'carla', '--data', server.dataFile])
    const first = added.stdout.trim().split('\n').at(-1)!
    const session = await signIn(server.console, 'carla', first)
    expect((await (await call(server.console, session, 'GET', '/api/me')).json()) as any).toEqual({ name: 'carla', via: 'session' })
    const token = cli(['operators', 'token', 'carla', '--data', server.dataFile]).stdout.trim().split('\n').at(-1)!
    expect(token).toMatch(/^pso_/)
    const byToken = () => fetch(`${server.console}/api/me`, { headers: auth(token) })
    expect((await (await byToken()).json()) as any).toEqual({ name: 'carla', via: 'token' })
    // A script changes things with its token and no Origin.
    const created = await fetch(`${server.console}/api/keys`, {
      method: 'POST',
      headers: { ...auth(token), 'content-type': 'application/json' },
      body: '{"plan":"free"}',
    })
    expect(created.status).toBe(201)

    const reset = cli(['operators', 'reset-password', 'carla', '--data', server.dataFile])
    expect(reset.code).toBe(0)
    const second = reset.stdout.trim().split('\n').at(-1)!
    expect(second).not.toBe(first)
    expect((await call(server.console, session, 'GET', '/api/me')).status).toBe(401)
    expect((await byToken()).status).toBe(200)
    const old = await fetch(`${server.console}/api/session`, {
      method: 'POST',
      headers: { origin: server.console, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'carla', password: first }),
    })
    expect(old.status).toBe(401)
    const again = await signIn(server.console, 'carla', second)
    expect((await call(server.console, again, 'GET', '/api/me')).status).toBe(200)

    expect(cli(['operators', 'remove', 'carla', '--data', server.dataFile]).code).toBe(0)
    expect((await call(server.console, again, 'GET', '/api/me')).status).toBe(401)
    expect((await byToken()).status).toBe(401)
    await server.stop()
  })

  test('with PostgreSQL, a session made on one instance works on another, and a password reset ends it on both', async () => {
    let cluster: PostgresCluster | undefined
    try {
      cluster = await startPostgres()
      const url = await cluster.createDatabase('console_sessions')
      const a = await startWithConsole({ databaseUrl: url })
      const b = await startWithConsole({ databaseUrl: url, cwd: join(a.dataFile, '..', '..') })
      const added = await cliAsync(['operators', 'add', 'dana'], { env: { PETSTORE_DATABASE_URL: url } })
      expect(added.code).toBe(0)
      const session = await signIn(a.console, 'dana', added.stdout.trim().split('\n').at(-1)!)
      expect((await call(b.console, session, 'GET', '/api/me')).status).toBe(200)
      // A key made through one instance's console works on the other's API within a second.
      const { secret } = (await (await call(a.console, session, 'POST', '/api/keys', { plan: 'pro' })).json()) as any
      await eventually(async () => (await fetch(`${b.base}/pets`, { headers: auth(secret) })).status === 200, 1_000)
      expect((await cliAsync(['operators', 'reset-password', 'dana'], { env: { PETSTORE_DATABASE_URL: url } })).code).toBe(0)
      expect((await call(a.console, session, 'GET', '/api/me')).status).toBe(401)
      expect((await call(b.console, session, 'GET', '/api/me')).status).toBe(401)
      await a.stop()
      await b.stop()
    } finally {
      await cluster?.destroy()
    }
  })
})

describe('with Redis', () => {
  test("the day quota left and a key's ban are read from Redis without taking a token, and the lift applies there", async () => {
    let redis: RedisServer | undefined
    try {
      redis = await startRedis()
      const server = await startWithConsole({ args: ['--redis-url', redis.url, '--ban-after', '1'] })
      const cookie = await signIn(server.console, 'admin', server.password)
      const { key, secret } = (await (
        await call(server.console, cookie, 'POST', '/api/keys', { plan: 'enterprise', rpm: 2, rpd: 50 })
      ).json()) as any
      const row = async () =>
        ((await (await call(server.console, cookie, 'GET', '/api/keys')).json()) as any).keys.find((k: { id: string }) => k.id === key.id)
      expect((await row()).dayQuotaLeft).toBe(50)
      const statuses: number[] = []
      for (let i = 0; i < 5; i++) statuses.push((await fetch(`${server.base}/pets`, { headers: auth(secret) })).status)
      expect(statuses).toEqual([200, 200, 429, 429, 429])
      // Looking twice takes nothing: two requests were allowed, so 48 are left.
      expect((await row()).dayQuotaLeft).toBe(48)
      expect((await row()).dayQuotaLeft).toBe(48)
      expect((await row()).bannedUntil).not.toBeNull()
      const bans = ((await (await call(server.console, cookie, 'GET', '/api/bans')).json()) as any).bans
      expect(bans).toEqual([{ kind: 'key', keyId: key.id, keyName: '', bannedUntil: expect.any(String) }])
      expect((await call(server.console, cookie, 'DELETE', `/api/bans/keys/${key.id}`)).status).toBe(204)
      await eventually(async () => (await fetch(`${server.base}/pets`, { headers: auth(secret) })).status === 200, 1_000)
      expect((await row()).bannedUntil).toBeNull()

      // Redis away: lifting an address's ban is the documented 503, not a 500 with a trace in the log.
      await redis.stop()
      const lift = await call(server.console, cookie, 'DELETE', '/api/bans/addresses/192.0.2.7')
      expect([lift.status, lift.headers.get('retry-after'), ((await lift.json()) as any).code]).toEqual([503, '1', 'unavailable'])
      expect(server.stderr()).not.toContain('internal error')
      await server.stop()
    } finally {
      await redis?.destroy()
    }
  })
})

describe('--console-address', () => {
  test('off: no console, and no operator made', async () => {
    const server = await startServer({ args: ['--console-address', 'off'] })
    // The binary's own path (in "make more with: …") may hold the word wherever the checkout is.
    expect(server.stderr().replaceAll(BINARY, 'petstore')).not.toContain('console')
    expect(JSON.parse(cli(['operators', 'list', '--json', '--data', server.dataFile]).stdout)).toEqual([])
    await server.stop()
  })

  test('PETSTORE_CONSOLE_ADDRESS names it; a bad value stops the start with a usage line', async () => {
    const dir = tempDir()
    const server = await startWithConsole({ env: { PETSTORE_CONSOLE_ADDRESS: '127.0.0.1:0' }, dataFile: join(dir, 'petstore.db') })
    expect((await fetch(`${server.console}/api/me`)).status).toBe(401)
    await server.stop()
    const bad = cli(['serve', '--console-address', 'localhost', '--data', join(dir, 'petstore.db')])
    expect(bad.code).toBe(2)
    expect(bad.stderr).toContain('--console-address must be HOST:PORT')
  })

  test('a console port in use stops the start with one line, and leaves no password file behind', async () => {
    const taken = Bun.listen({ hostname: '127.0.0.1', port: 0, socket: { data() {} } })
    try {
      const dir = tempDir()
      const result = await serveExpectingFailure([
        '--port',
        '0',
        '--host',
        '127.0.0.1',
        '--data',
        join(dir, 'petstore.db'),
        '--console-address',
        `127.0.0.1:${taken.port}`,
      ])
      expect(result.listened).toBe(false)
      expect(result.code).toBe(1)
      expect(result.stderr).toContain(`petstore: cannot listen on 127.0.0.1:${taken.port}, the console's address (--console-address): `)
      expect(existsSync(join(dir, 'petstore-console-password.txt'))).toBe(false)
    } finally {
      taken.stop(true)
    }
  })
})
