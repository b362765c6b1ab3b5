/**
 * Around the API: health and readiness, Prometheus metrics, request ids, the JSON access log, CORS.
 */
import { describe, expect, test } from 'bun:test'
import { connect } from 'node:net'
import { hashSecret } from '../../src/domain/api-key'
import { appsPerTest, auth, postPet, type TestApp } from '../support/app'
import { eventually } from '../support/binary'

/** A response body as loosely typed JSON (the DOM typings say unknown). */
const jsonOf = (res: Response): Promise<any> => res.json()

const fresh = appsPerTest()

async function keyIdOf(app: TestApp, secret: string): Promise<string> {
  return (await app.storage.keys.list()).find((k) => k.secretHash === hashSecret(secret))!.id
}

/** Sends raw bytes over TCP (for header values fetch would refuse) and returns the response head. */
function rawRequest(origin: string, head: Buffer): Promise<{ status: number; headers: Map<string, string> }> {
  const url = new URL(origin)
  return new Promise((resolve, reject) => {
    const socket = connect(Number(url.port), url.hostname, () => socket.write(head))
    let data = ''
    socket.setEncoding('latin1')
    socket.on('data', (chunk) => (data += chunk))
    socket.on('error', reject)
    socket.on('end', () => {
      const [statusLine, ...lines] = data.split('\r\n\r\n')[0]!.split('\r\n')
      const headers = new Map<string, string>()
      for (const line of lines) {
        const i = line.indexOf(':')
        headers.set(line.slice(0, i).trim().toLowerCase(), line.slice(i + 1).trim())
      }
      resolve({ status: Number(statusLine!.split(' ')[1]), headers })
    })
  })
}

describe('health, readiness and metrics', () => {
  test('/healthz and /readyz answer 200 without a key', async () => {
    const app = await fresh()
    const health = await fetch(`${app.origin}/healthz`)
    expect(health.status).toBe(200)
    const ready = await fetch(`${app.origin}/readyz`)
    expect(ready.status).toBe(200)
  })

  test('/readyz answers 503 when storage does not answer', async () => {
    const app = await fresh()
    await app.closeStorage()
    const res = await fetch(`${app.origin}/readyz`)
    expect(res.status).toBe(503)
    // Any client may ask: the answer does not say where the data lives.
    expect(await jsonOf(res)).toEqual({ code: 'unavailable', message: 'Storage does not answer.', status: 503 })
    // healthz only says the process runs.
    expect((await fetch(`${app.origin}/healthz`)).status).toBe(200)
  })

  test('/metrics is Prometheus text with requests by operation and status and a latency histogram', async () => {
    const app = await fresh()
    const key = await app.key('free')
    await (await fetch(`${app.base}/pets`, { headers: auth(key) })).arrayBuffer()
    await (await fetch(`${app.base}/pets`, { headers: auth(key) })).arrayBuffer()
    await (await postPet(app.base, key, { name: 'x', categoryId: 1 })).arrayBuffer()
    await (await fetch(`${app.base}/pets?limit=0`, { headers: auth(key) })).arrayBuffer()
    await (await fetch(`${app.base}/pets/1`, { headers: auth(key) })).arrayBuffer()
    await (await fetch(`${app.base}/store/orders`, { headers: auth(key) })).arrayBuffer()

    const res = await fetch(`${app.origin}/metrics`)
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toStartWith('text/plain')
    await res.arrayBuffer()
    const text = await app.metrics()
    expect(text).toContain('# TYPE petstore_requests_total counter')
    expect(text).toContain('petstore_requests_total{operation="listPets",status="200"} 2')
    expect(text).toContain('petstore_requests_total{operation="listPets",status="400"} 1')
    expect(text).toContain('petstore_requests_total{operation="createPet",status="201"} 1')
    expect(text).toContain('petstore_requests_total{operation="getPet",status="200"} 1')
    expect(text).toContain('petstore_requests_total{operation="listOrders",status="501"} 1')
    expect(text).toContain('# TYPE petstore_request_duration_seconds histogram')
    expect(text).toMatch(/^petstore_request_duration_seconds_bucket\{operation="listPets",le="\+Inf"\} 3$/m)
    expect(text).toMatch(/^petstore_request_duration_seconds_count\{operation="listPets"\} 3$/m)
    expect(text).toMatch(/^petstore_request_duration_seconds_sum\{operation="listPets"\} [0-9.e-]+$/m)
    // Every sample line parses as Prometheus text: name{labels} value.
    for (const line of text.trimEnd().split('\n')) {
      if (line.startsWith('#')) expect(line).toMatch(/^# (HELP|TYPE) [a-z_]+ .+$/)
      else expect(line).toMatch(/^[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? [0-9.e+-]+$/)
    }
  })

  test('/metrics counts refused requests under the operation they were for', async () => {
    const app = await fresh()
    const key = await app.key('enterprise', { rpm: 1, rpd: 100 })
    await (await fetch(`${app.base}/pets`)).arrayBuffer() // 401
    await (await fetch(`${app.base}/pets`, { headers: auth(key) })).arrayBuffer() // 200
    await (await fetch(`${app.base}/pets`, { headers: auth(key) })).arrayBuffer() // 429
    const text = await app.metrics()
    expect(text).toContain('petstore_requests_total{operation="listPets",status="401"} 1')
    expect(text).toContain('petstore_requests_total{operation="listPets",status="429"} 1')
    expect(text).toContain('petstore_rate_limit_rejections_total{reason="rate_limited"} 1')
  })

  test('/metrics never contains a key secret', async () => {
    const app = await fresh()
    const key = await app.key('free')
    const secretPart = key.slice(4)
    await (await fetch(`${app.base}/pets`, { headers: auth(key) })).arrayBuffer()
    await (await fetch(`${app.base}/pets/1`, { headers: auth(key) })).arrayBuffer()
    await (await fetch(`${app.base}/pets`, { headers: auth('psk_wrongsecretvalue') })).arrayBuffer()
    const text = await (await fetch(`${app.origin}/metrics`)).text()
    expect(text).not.toContain(secretPart)
    expect(text).not.toContain('wrongsecretvalue')
    expect(text).not.toContain(hashSecret(key))
    // The key id is what identifies the caller.
    expect(text).toContain(await keyIdOf(app, key))
  })
})

describe('X-Request-Id', () => {
  test('a sane incoming id is echoed', async () => {
    const app = await fresh()
    for (const id of ['abc-123', 'f47ac10b-58cc-4372-a567-0e02b2c3d479', 'trace.1:span@x+y=z_']) {
      const res = await fetch(`${app.base}/pets`, { headers: { 'x-request-id': id } })
      expect(res.headers.get('x-request-id')).toBe(id)
    }
  })

  test('an insane incoming id is replaced by a new one', async () => {
    const app = await fresh()
    for (const id of ['x'.repeat(500), 'has space', 'semi;colon', '<script>', '"quoted"']) {
      const res = await fetch(`${app.base}/pets`, { headers: { 'x-request-id': id } })
      const got = res.headers.get('x-request-id')
      expect(got).not.toBeNull()
      expect(got).not.toBe(id)
      expect(got!).toMatch(/^[A-Za-z0-9._:@+=-]{1,128}$/)
    }
  })

  test('a non-ASCII incoming id is replaced', async () => {
    const app = await fresh()
    const { origin } = app
    const host = new URL(origin).host
    const head = Buffer.concat([
      Buffer.from(`GET /v1/pets HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\nX-Request-Id: caf`),
      Buffer.from([0xc3, 0xa9]),
      Buffer.from('\r\n\r\n'),
    ])
    const res = await rawRequest(origin, head)
    expect(res.status).toBe(401)
    const id = res.headers.get('x-request-id')
    expect(id).toBeDefined()
    expect(id!).toMatch(/^[\x21-\x7e]+$/)
    expect(id!.startsWith('caf')).toBe(false)
  })

  test('every response carries one, and generated ids differ', async () => {
    const app = await fresh({ banAfter: '1', banSeconds: '60' })
    const key = await app.key('enterprise', { rpm: 1, rpd: 100 })
    const responses = [
      await fetch(`${app.base}/pets`, { headers: auth(key) }), // 200
      await fetch(`${app.base}/pets`, { headers: auth(key) }), // 429
      await fetch(`${app.base}/pets`), // 401
      await fetch(`${app.base}/nothing`), // 401 (no key) under base
      await fetch(`${app.origin}/nope`), // 404
      await fetch(`${app.origin}/healthz`),
      await fetch(`${app.origin}/metrics`),
      await fetch(`${app.origin}/openapi.json`),
      await fetch(`${app.base}/pets`, { method: 'DELETE' }),
    ]
    const ids = responses.map((r) => r.headers.get('x-request-id'))
    for (const id of ids) expect(id).toMatch(/^[A-Za-z0-9._:@+=-]{1,128}$/)
    expect(new Set(ids).size).toBe(ids.length)
  })
})

describe('access log', () => {
  async function lineFor(app: TestApp, requestId: string) {
    await eventually(() => app.logLines.some((l) => l.includes(`"${requestId}"`)))
    const lines = app.logLines.map((l) => JSON.parse(l)).filter((e) => e.requestId === requestId)
    expect(lines).toHaveLength(1)
    return lines[0]
  }

  test('one JSON line per request with time, requestId, method, path, status, durationMs and keyId', async () => {
    const app = await fresh()
    const key = await app.key('free')
    await (await fetch(`${app.base}/pets?limit=5`, { headers: auth(key, { 'x-request-id': 'log-1' }) })).arrayBuffer()
    const entry = await lineFor(app, 'log-1')
    expect(entry).toEqual({
      time: expect.any(String),
      requestId: 'log-1',
      method: 'GET',
      path: '/v1/pets',
      status: 200,
      durationMs: expect.any(Number),
      keyId: await keyIdOf(app, key),
    })
    expect(Number.isNaN(Date.parse(entry.time))).toBe(false)
    expect(entry.durationMs).toBeGreaterThanOrEqual(0)
  })

  test('a path longer than 2,048 characters is logged as its first 2,048 and …, whoever sends it', async () => {
    const app = await fresh()
    const long = `/v1/${'\u00ff'.repeat(1_500)}`
    await (await fetch(`${app.origin}${long}`, { headers: { 'x-request-id': 'long-1' } })).arrayBuffer()
    const { path } = await lineFor(app, 'long-1')
    expect(path.length).toBe(2_049)
    expect(path.startsWith('/v1/%C3%BF%C3%BF')).toBe(true)
    expect(path.endsWith('…')).toBe(true)
  })

  test('every line is a single JSON object, one per request', async () => {
    const app = await fresh()
    const key = await app.key('free')
    for (let i = 0; i < 5; i++)
      await (await fetch(`${app.base}/pets`, { headers: auth(key, { 'x-request-id': `many-${i}` }) })).arrayBuffer()
    const apiLines = () => app.logLines.map((line) => JSON.parse(line)).filter((entry) => entry.path.startsWith('/v1/'))
    await eventually(() => apiLines().length >= 5)
    // Lines outside the API (the suite's contract check reads /openapi.json) are one per request too.
    // Sorted: with two instances (PostgreSQL + Redis) each hands over its own batch of lines.
    expect(
      apiLines()
        .map((entry) => entry.requestId)
        .sort(),
    ).toEqual(['many-0', 'many-1', 'many-2', 'many-3', 'many-4'])
    expect(app.logLines.every((line) => line.startsWith('{') && line.endsWith('}') && !line.includes('\n'))).toBe(true)
  })

  test('requests without a valid key log the client address, never the attempted secret', async () => {
    const app = await fresh()
    const key = await app.key('free')
    await (await fetch(`${app.base}/pets`, { headers: auth('psk_leakedsecret', { 'x-request-id': 'anon-1' }) })).arrayBuffer()
    await (await postPet(app.base, key, { name: 'x', categoryId: 1 }, { 'x-request-id': 'post-1' })).arrayBuffer()
    const anon = await lineFor(app, 'anon-1')
    expect(anon.status).toBe(401)
    expect(anon.client).toBe('127.0.0.1')
    expect(anon.keyId).toBeUndefined()
    const post = await lineFor(app, 'post-1')
    expect(post).toMatchObject({ method: 'POST', path: '/v1/pets', status: 201, keyId: await keyIdOf(app, key) })
    const all = app.logLines.join('\n')
    expect(all).not.toContain('leakedsecret')
    expect(all).not.toContain(key.slice(4))
    expect(all).not.toContain('authorization')
  })

  test('the logged path has no query string and error statuses are logged as sent', async () => {
    const app = await fresh()
    const key = await app.key('free')
    await (await fetch(`${app.base}/pets?limit=0`, { headers: auth(key, { 'x-request-id': 'bad-1' }) })).arrayBuffer()
    await (await fetch(`${app.origin}/nope`, { headers: { 'x-request-id': 'nf-1' } })).arrayBuffer()
    expect(await lineFor(app, 'bad-1')).toMatchObject({ path: '/v1/pets', status: 400 })
    expect(await lineFor(app, 'nf-1')).toMatchObject({ path: '/nope', status: 404 })
  })

  test('with trustProxy the logged client is the forwarded address', async () => {
    const app = await fresh({ trustProxy: ['loopback'] })
    await (await fetch(`${app.base}/pets`, { headers: { 'x-forwarded-for': '203.0.113.9', 'x-request-id': 'xff-1' } })).arrayBuffer()
    expect((await lineFor(app, 'xff-1')).client).toBe('203.0.113.9')
  })
})

describe('CORS', () => {
  const ORIGIN = 'https://app.example'

  test('a preflight from the allowed origin is a 204 with the allow headers and needs no key', async () => {
    const app = await fresh({ corsOrigin: [ORIGIN] })
    const res = await fetch(`${app.base}/pets`, {
      method: 'OPTIONS',
      headers: {
        origin: ORIGIN,
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'authorization, content-type, idempotency-key',
      },
    })
    expect(res.status).toBe(204)
    expect(res.headers.get('access-control-allow-origin')).toBe(ORIGIN)
    const methods = res.headers
      .get('access-control-allow-methods')!
      .split(',')
      .map((m) => m.trim())
    expect(methods).toEqual(expect.arrayContaining(['GET', 'POST']))
    const allowed = res.headers
      .get('access-control-allow-headers')!
      .toLowerCase()
      .split(',')
      .map((h) => h.trim())
    expect(allowed).toEqual(expect.arrayContaining(['authorization', 'content-type', 'idempotency-key']))
    expect(res.headers.get('www-authenticate')).toBeNull()
  })

  test('a preflight for the pet path with an id also works', async () => {
    const app = await fresh({ corsOrigin: [ORIGIN] })
    const res = await fetch(`${app.base}/pets/1`, {
      method: 'OPTIONS',
      headers: { origin: ORIGIN, 'access-control-request-method': 'GET', 'access-control-request-headers': 'authorization' },
    })
    expect(res.status).toBe(204)
    expect(res.headers.get('access-control-allow-origin')).toBe(ORIGIN)
  })

  test('actual responses to the allowed origin expose Link, Location, Retry-After, X-Request-Id and X-RateLimit-*', async () => {
    const app = await fresh({ corsOrigin: [ORIGIN] })
    const key = await app.key('free')
    const responses = [
      await fetch(`${app.base}/pets`, { headers: auth(key, { origin: ORIGIN }) }),
      await postPet(app.base, key, { name: 'x', categoryId: 1 }, { origin: ORIGIN }),
      await fetch(`${app.base}/pets`, { headers: { origin: ORIGIN } }), // 401: scripts must read it too
    ]
    expect(responses.map((r) => r.status)).toEqual([200, 201, 401])
    for (const res of responses) {
      expect(res.headers.get('access-control-allow-origin')).toBe(ORIGIN)
      const exposed = res.headers
        .get('access-control-expose-headers')!
        .toLowerCase()
        .split(',')
        .map((h) => h.trim())
      expect(exposed).toEqual(
        expect.arrayContaining([
          'link',
          'location',
          'retry-after',
          'x-request-id',
          'x-ratelimit-limit',
          'x-ratelimit-remaining',
          'x-ratelimit-reset',
        ]),
      )
      expect(res.headers.get('vary') ?? '').toMatch(/origin/i)
    }
  })

  test('other origins get no Access-Control-Allow-Origin', async () => {
    const app = await fresh({ corsOrigin: [ORIGIN] })
    const key = await app.key('free')
    const get = await fetch(`${app.base}/pets`, { headers: auth(key, { origin: 'https://evil.example' }) })
    expect(get.status).toBe(200)
    expect(get.headers.get('access-control-allow-origin')).toBeNull()
    const preflight = await fetch(`${app.base}/pets`, {
      method: 'OPTIONS',
      headers: { origin: 'https://evil.example', 'access-control-request-method': 'GET' },
    })
    expect(preflight.headers.get('access-control-allow-origin')).toBeNull()
    expect(preflight.headers.get('access-control-allow-methods')).toBeNull()
  })

  test('with CORS on, every response says Vary: Origin, whatever its origin and path', async () => {
    const app = await fresh({ corsOrigin: [ORIGIN] })
    const key = await app.key('free')
    const responses = [
      await fetch(`${app.base}/pets`, { headers: auth(key) }),
      await fetch(`${app.base}/pets`, { headers: auth(key, { origin: 'https://evil.example' }) }),
      await fetch(`${app.base}/pets`),
      await fetch(`${app.base}/nope`, { headers: auth(key) }),
      await fetch(`${app.origin}/healthz`),
      await fetch(`${app.origin}/nope`),
    ]
    expect(responses.map((r) => r.status)).toEqual([200, 200, 401, 404, 200, 404])
    for (const res of responses) expect(res.headers.get('vary')).toBe('Origin')
  })

  test('an OPTIONS request that is not a preflight goes through the gate like any other method', async () => {
    const app = await fresh({ corsOrigin: [ORIGIN] })
    const key = await app.key('free')
    const keyless = await fetch(`${app.base}/pets`, { method: 'OPTIONS', headers: { origin: ORIGIN } })
    expect(keyless.status).toBe(401)
    const keyed = await fetch(`${app.base}/pets`, { method: 'OPTIONS', headers: auth(key) })
    expect(keyed.status).toBe(405)
    expect(keyed.headers.get('allow')).toBe('GET, POST')
    expect(keyed.headers.get('x-ratelimit-limit')).toBe('60')
  })

  test('without corsOrigin there are no CORS headers at all', async () => {
    const app = await fresh()
    const key = await app.key('free')
    const get = await fetch(`${app.base}/pets`, { headers: auth(key, { origin: ORIGIN }) })
    expect(get.headers.get('access-control-allow-origin')).toBeNull()
    expect(get.headers.get('access-control-expose-headers')).toBeNull()
    const preflight = await fetch(`${app.base}/pets`, {
      method: 'OPTIONS',
      headers: { origin: ORIGIN, 'access-control-request-method': 'GET' },
    })
    expect(preflight.headers.get('access-control-allow-origin')).toBeNull()
    expect(preflight.headers.get('access-control-allow-methods')).toBeNull()
  })
})
