/**
 * The served documents say exactly what the binary does (issue 23 §4), on a staging binary with its
 * console: both documents pass `redocly lint` and Spectral's `spectral:oas` with no error; where a
 * schema states a rule (Idempotency-Key, the console's bodies, the sign-in name, a banned address),
 * the schema (read by Ajv) and the server accept and refuse the same values; every operation takes
 * X-Request-Id; Prefer is text whose scenarios are examples, and Preference-Applied is declared where
 * it is sent; the answers given before routing or by the scenarios' own bounds carry the rate-limit
 * fields the document requires, and the one answer that cannot (the shared limiter away) is
 * documented without them.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { symlinkSync, writeFileSync } from 'node:fs'
import { connect } from 'node:net'
import { join } from 'node:path'
import { cli, createKeyWithCli, eventually, startServer, tempDir } from '../support/binary'
import { Contract } from '../support/contract'
import { type ConsoleServer, parseRawResponse, type RawResponse, startWithConsole } from '../process/helpers'
import { startRedis } from '../support/redis'

type Json = Record<string, any>
const ROOT = join(import.meta.dir, '..', '..')

let server: ConsoleServer
let api: Contract
let consoleDoc: Contract
let key: string
let token: string

beforeAll(async () => {
  server = await startWithConsole({ args: ['--env', 'staging', '--console-address', '127.0.0.1:0', '--no-access-log'] })
  key = createKeyWithCli(server.dataFile, ['--env', 'staging', '--plan', 'enterprise', '--rpm', '100000', '--rpd', '1000000'])
  token = cli(['operators', 'token', 'admin', '--env', 'staging', '--data', server.dataFile]).stdout.trim().split('\n').at(-1)!
  api = await Contract.load(server.origin)
  consoleDoc = await Contract.load(server.console, '/api/openapi.json', { authorization: `Bearer ${token}` })
})
afterAll(() => server?.stop())

const operations = (contract: Contract): [string, Json][] =>
  Object.entries<Json>(contract.doc.paths).flatMap(([path, item]) =>
    Object.entries<Json>(item).map(([method, operation]): [string, Json] => [`${method.toUpperCase()} ${path}`, operation]),
  )
const parameter = (operation: Json, name: string, contract = api): Json | undefined =>
  (operation.parameters ?? []).map((p: Json) => contract.resolve(p)).find((p: Json) => p.name === name)

/** Sends `head` (and no body) on a raw connection, so that a Host fetch would not send can be sent. */
function raw(port: number, head: string): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    let text = ''
    const socket = connect(port, '127.0.0.1', () => socket.write(`${head}\r\nConnection: close\r\n\r\n`))
    socket.on('data', (chunk) => {
      text += chunk
      const parsed = parseRawResponse(text)
      if (parsed) {
        socket.destroy()
        resolve(parsed)
      }
    })
    socket.on('error', reject)
    socket.on('close', () => reject(new Error(`closed without a whole answer: ${text}`)))
  })
}

describe('the served documents, as the project’s OpenAPI tools read them', () => {
  const lint = (name: string, text: string) => {
    const dir = tempDir()
    writeFileSync(join(dir, name), text)
    writeFileSync(join(dir, '.spectral.yaml'), 'extends: ["spectral:oas"]\n')
    symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'))
    const env = { ...process.env, NO_COLOR: '1', REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true' }
    const run = (command: string[]) => {
      const result = Bun.spawnSync(command, { cwd: dir, env, stdout: 'pipe', stderr: 'pipe' })
      return { code: result.exitCode, output: result.stdout.toString() + result.stderr.toString() }
    }
    const redocly = run([join(ROOT, 'node_modules', '.bin', 'redocly'), 'lint', name])
    expect(redocly.output).not.toMatch(/\b[1-9]\d* errors?\b/)
    expect(redocly.code).toBe(0)
    const spectral = run([join(ROOT, 'node_modules', '.bin', 'spectral'), 'lint', name, '--ruleset', '.spectral.yaml', '-f', 'json', '-q'])
    const problems = JSON.parse(spectral.output.slice(spectral.output.indexOf('['))) as { severity: number; code: string }[]
    expect(problems.filter((problem) => problem.severity === 0)).toEqual([])
  }

  test('the API document with scenarios on, and the console document: redocly lint and spectral:oas report no error', () => {
    lint('openapi.json', JSON.stringify(api.doc))
    lint('console.json', JSON.stringify(consoleDoc.doc))
  }, 60_000)
})

describe('the API document', () => {
  test("Idempotency-Key's pattern refuses exactly what the server refuses", async () => {
    const schema = parameter(api.doc.paths['/pets'].post, 'Idempotency-Key')!.schema
    expect(schema.pattern).toBeString()
    const values = ['a', '!', '~'.repeat(255), 'order-1234-create', '', 'x'.repeat(256), 'a b', 'é', '"quoted"']
    const answers = await Promise.all(
      values.map(async (value, i) => {
        const response = await fetch(`${server.base}/pets`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'idempotency-key': value },
          body: JSON.stringify({ name: `Rex ${i}`, categoryId: 1 }),
        })
        await response.text()
        return response.status
      }),
    )
    const label = (value: string) => JSON.stringify(value.slice(0, 20))
    expect(values.map((value) => `${label(value)}: document ${api.accepts(schema, value)}`)).toEqual(
      values.map((value, i) => `${label(value)}: document ${answers[i] === 201}`),
    )
    expect(answers.filter((status) => status === 201)).toHaveLength(5)
  })

  test('every operation takes X-Request-Id as a header parameter (any text: an insane one is replaced, never refused)', async () => {
    for (const [name, operation] of operations(api)) {
      const requestId = parameter(operation, 'X-Request-Id')
      expect(`${name}: ${JSON.stringify(requestId && { in: requestId.in, required: requestId.required })}`).toBe(
        `${name}: {"in":"header","required":false}`,
      )
      expect(requestId!.schema).toEqual({ type: 'string' })
      expect(requestId!.description).toContain('1 to 128 of A-Z a-z 0-9 . _ : @ + = -')
    }
    const sane = await fetch(`${server.base}/pets`, { headers: { authorization: `Bearer ${key}`, 'x-request-id': 'my-id.1' } })
    expect([sane.status, sane.headers.get('x-request-id')]).toEqual([200, 'my-id.1'])
    const insane = await fetch(`${server.base}/pets`, { headers: { authorization: `Bearer ${key}`, 'x-request-id': 'has space' } })
    expect(insane.status).toBe(200)
    expect(insane.headers.get('x-request-id')).not.toBe('has space')
  })

  test("getPet's Link (its successor) is a required header of every answer, and the contract check holds the server to it", async () => {
    const getPet = api.doc.paths['/pets/{petId}'].get
    for (const [status, response] of Object.entries<Json>(getPet.responses)) {
      const link = api.resolve(api.resolve(response).headers.Link)
      expect(`${status} ${link.required}`).toBe(`${status} true`)
    }
    const answer = await fetch(`${server.base}/pets/999999`, { headers: { authorization: `Bearer ${key}` } })
    const body = await answer.text()
    expect(answer.headers.get('link')).toEndWith('>; rel="successor-version"')
    const without = new Headers(answer.headers)
    without.delete('link')
    expect(() => api.check('GET', '/v1/pets/999999', { status: 404, headers: without }, body)).toThrow(/required header Link/)
  })

  test('Prefer is any text, its scenarios examples in the description only (nothing Swagger UI would send by itself)', () => {
    for (const [name, operation] of operations(api)) {
      const prefer = parameter(operation, 'Prefer')!
      expect(`${name} ${JSON.stringify(prefer.schema)}`).toBe(`${name} {"type":"string"}`)
      expect(prefer.example ?? prefer.examples ?? prefer.schema.examples ?? prefer.schema.default).toBeUndefined()
      expect(prefer.description).toMatch(/Examples: `code=\d{3}`/)
      expect(prefer.description).toContain('`code=429`')
      expect(prefer.description).toContain('ignored')
    }
    const create = parameter(api.doc.paths['/pets'].post, 'Prefer')!
    expect(create.description).toContain('`fail=2; code=503`')
    expect(create.description).toMatch(/fail=N.*Idempotency-Key/)
  })

  test('Preference-Applied is declared on every answer of every operation, and the server sends it where declared', async () => {
    for (const [name, operation] of operations(api))
      for (const [status, response] of Object.entries<Json>(operation.responses)) {
        const applied = api.resolve(response).headers?.['Preference-Applied']
        expect(`${name} ${status} ${applied && api.resolve(applied).required}`).toBe(`${name} ${status} false`)
      }
    const cases: [string, RequestInit, number, string | null][] = [
      ['/pets', { headers: { prefer: 'code=503' } }, 503, 'code=503'],
      ['/pets', { headers: { prefer: 'delay=0' } }, 200, 'delay=0'],
      ['/pets/1', { headers: { prefer: 'code=404' } }, 404, 'code=404'],
      ['/store/orders', { headers: { prefer: 'code=429' } }, 429, 'code=429'],
      ['/pets', { headers: { prefer: 'return=minimal' } }, 200, null],
      [
        '/pets',
        { method: 'POST', headers: { prefer: 'fail=1', 'content-type': 'application/json' }, body: '{"name":"Rex","categoryId":1}' },
        400,
        null,
      ],
    ]
    for (const [path, init, status, applied] of cases) {
      const response = await fetch(`${server.base}${path}`, { ...init, headers: { ...init.headers, authorization: `Bearer ${key}` } })
      const body = await response.text()
      expect(
        `${path} ${init.headers && JSON.stringify(init.headers)}: ${response.status} ${response.headers.get('preference-applied')}`,
      ).toBe(`${path} ${init.headers && JSON.stringify(init.headers)}: ${status} ${applied}`)
      api.check(init.method ?? 'GET', `/v1${path}`, response, body)
    }
  })

  test('GET /store/orders documents its 503 and 400; a 503 documents the rate-limit fields as absent only when the limiter is away', () => {
    const orders = api.doc.paths['/store/orders'].get
    expect(Object.keys(orders.responses)).toEqual(expect.arrayContaining(['400', '401', '429', '501', '503']))
    const unavailable = api.resolve(orders.responses['503'])
    expect(unavailable.description).toContain('shared rate limiter (Redis) does not answer')
    expect(unavailable.description).toContain('no rate-limit fields')
    for (const name of ['X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset', 'RateLimit', 'RateLimit-Policy']) {
      const header = api.resolve(unavailable.headers[name])
      expect(`${name} ${header.required}`).toBe(`${name} false`)
      expect(header.description).toContain('Absent when the shared rate limiter does not answer')
    }
  })
})

describe('answers the gate does not give carry the rate-limit fields the document requires', () => {
  test('a 400 for a Host the router cannot read: the key’s bucket with a key, the address’s without; nothing taken', async () => {
    const port = server.port
    const withKey = await raw(port, `GET /v1/pets HTTP/1.1\r\nHost: a@b\r\nAuthorization: Bearer ${key}`)
    const anonymous = await raw(port, 'GET /v1/store/orders HTTP/1.1\r\nHost: [zz]')
    for (const [answer, path, limit] of [
      [withKey, '/v1/pets', '100000'],
      [anonymous, '/v1/store/orders', '60'],
    ] as const) {
      expect([answer.status, JSON.parse(answer.body).message]).toEqual([400, expect.stringMatching(/^Host:/)])
      expect(answer.headers['x-ratelimit-limit']).toBe(limit)
      api.check('GET', path, { status: answer.status, headers: new Headers(answer.headers) }, answer.body)
    }
    // Read as it stands: the next request still finds the whole minute bucket of the key.
    const after = await fetch(`${server.base}/pets`, { headers: { authorization: `Bearer ${key}` } })
    expect(Number(after.headers.get('x-ratelimit-remaining'))).toBeGreaterThanOrEqual(Number(withKey.headers['x-ratelimit-remaining']) - 1)
    // Outside the API, no bucket applies and none is given.
    const outside = await raw(port, 'GET /healthz HTTP/1.1\r\nHost: a@b')
    expect([outside.status, outside.headers['x-ratelimit-limit']]).toEqual([400, undefined])
  })

  test('a 503 of the scenarios’ own bound (101 delayed answers waiting for one key) carries the key’s fields', async () => {
    const delayed = createKeyWithCli(server.dataFile, ['--env', 'staging', '--plan', 'pro'])
    // Known to the running server once a request finds it.
    expect((await fetch(`${server.base}/pets`, { headers: { authorization: `Bearer ${delayed}` } })).status).toBe(200)
    const answers = await Promise.all(
      Array.from({ length: 101 }, () =>
        fetch(`${server.base}/pets`, { headers: { authorization: `Bearer ${delayed}`, prefer: 'delay=3000' } }).then(async (response) => ({
          response,
          body: await response.text(),
        })),
      ),
    )
    const refused = answers.filter(({ response }) => response.status === 503)
    expect(refused).toHaveLength(1)
    const [{ response, body }] = refused as [(typeof answers)[number]]
    expect(JSON.parse(body).message).toContain('delayed answers')
    expect(response.headers.get('x-ratelimit-limit')).toBe('300')
    expect(response.headers.get('retry-after')).toBe('1')
    api.check('GET', '/v1/pets', response, body)
    expect(answers.filter(({ response }) => response.status === 200)).toHaveLength(100)
  })
})

describe('the one answer without rate-limit fields', () => {
  test('with Redis stopped, every request under the base is the 503 the document describes without them, an unreadable Host included', async () => {
    const redis = await startRedis()
    const limited = await startServer({ args: ['--redis-url', redis.url, '--no-access-log'] })
    try {
      const contract = await Contract.load(limited.origin)
      const headers = { authorization: `Bearer ${limited.bootstrapKey}` }
      expect((await fetch(`${limited.base}/pets`, { headers })).status).toBe(200)
      await redis.stop()
      await eventually(async () => (await fetch(`${limited.base}/pets`, { headers })).status === 503)
      const answers = [
        await raw(limited.port, `GET /v1/pets HTTP/1.1\r\nHost: a@b\r\nAuthorization: Bearer ${limited.bootstrapKey}`),
        await raw(limited.port, 'GET /v1/store/orders HTTP/1.1\r\nHost: [zz]'),
        await raw(limited.port, `GET /v1/store/orders HTTP/1.1\r\nHost: 127.0.0.1:${limited.port}`),
      ]
      for (const [answer, path] of [
        [answers[0]!, '/v1/pets'],
        [answers[1]!, '/v1/store/orders'],
        [answers[2]!, '/v1/store/orders'],
      ] as const) {
        expect([answer.status, JSON.parse(answer.body).code, answer.headers['retry-after']]).toEqual([503, 'unavailable', '1'])
        expect(Object.keys(answer.headers).filter((name) => name.includes('ratelimit'))).toEqual([])
        contract.check('GET', path, { status: answer.status, headers: new Headers(answer.headers) }, answer.body)
      }
    } finally {
      await limited.stop()
      await redis.destroy()
    }
  })
})

describe('the console document', () => {
  const call = (method: string, path: string, body?: unknown, headers: Record<string, string> = {}) =>
    fetch(`${server.console}${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', ...headers },
      body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
    })
  const schemaOf = (path: string, method: string) => consoleDoc.doc.paths[path][method].requestBody.content['application/json'].schema

  test('each operation has an operationId; each that takes a body documents 415, and the server answers it so', async () => {
    for (const [name, operation] of operations(consoleDoc)) {
      expect(`${name} ${typeof operation.operationId}`).toBe(`${name} string`)
      if (operation.requestBody) {
        expect(`${name} ${Object.keys(operation.responses).includes('415')}`).toBe(`${name} true`)
        expect(operation.requestBody.description).toContain('8 KiB')
      }
    }
    const created = (await (await call('POST', '/api/keys', { plan: 'free' })).json()) as Json
    for (const [method, path] of [
      ['POST', '/api/session'],
      ['POST', '/api/keys'],
      ['PUT', `/api/keys/${created.key.id}/plan`],
    ] as const) {
      const response = await call(method, path, '{"plan":"pro"}', { 'content-type': 'text/plain', origin: server.console })
      const body = await response.text()
      expect(`${method} ${path} ${response.status}`).toBe(`${method} ${path} 415`)
      consoleDoc.check(method, path, response, body)
    }
  })

  test('NewKey and PlanChange refuse exactly what the server refuses (rpm and rpd only, and always, for enterprise)', async () => {
    const bodies = [
      { plan: 'free' },
      { plan: 'pro', name: 'ci' },
      { plan: 'enterprise', rpm: 5, rpd: 50 },
      { plan: 'enterprise', rpm: 5 },
      { plan: 'enterprise' },
      { plan: 'business', rpm: 5, rpd: 50 },
      { plan: 'pro', rpd: 50 },
      { plan: 'gold' },
      { plan: 'free', id: 'x' },
      { plan: 'enterprise', rpm: 0, rpd: 50 },
      { plan: 'free', name: 'bell\u0007' },
    ]
    const { key: made } = (await (await call('POST', '/api/keys', { plan: 'free' })).json()) as Json
    // A plan change takes no name: two of the bodies are valid there, three for a new key.
    for (const [path, method, status, valid] of [
      ['/api/keys', 'post', 201, 3],
      ['/api/keys/{id}/plan', 'put', 204, 2],
    ] as const) {
      const schema = schemaOf(path, method)
      const verdicts: string[] = []
      const expected: string[] = []
      for (const body of bodies) {
        const response = await call(method.toUpperCase(), path.replace('{id}', made.id), body)
        await response.text()
        verdicts.push(`${JSON.stringify(body)}: document ${consoleDoc.accepts(schema, body)}, server ${response.status === status}`)
        const accepted = response.status === status
        expected.push(`${JSON.stringify(body)}: document ${accepted}, server ${accepted}`)
        expect([status, 400]).toContain(response.status)
      }
      expect(verdicts).toEqual(expected)
      // And the server took the valid ones.
      expect(verdicts.filter((verdict) => verdict.endsWith('server true'))).toHaveLength(valid)
    }
  })

  test("the sign-in name's rule and the banned address's format refuse exactly what the server refuses", async () => {
    const signIn = schemaOf('/api/session', 'post')
    for (const name of ['admin', 'ana.b@example-1', 'a b', '', 'x'.repeat(65), 'ä']) {
      const response = await call('POST', '/api/session', { name, password: 'not-the-password' }, { origin: server.console })
      await response.text()
      // A well-formed name is checked (401: wrong password); any other is a 400 before anything is looked up.
      expect(`${name}: document ${consoleDoc.accepts(signIn, { name, password: 'x' })}`).toBe(
        `${name}: document ${response.status === 401}`,
      )
      expect([400, 401]).toContain(response.status)
    }
    const address = parameter(consoleDoc.doc.paths['/api/bans/addresses/{address}'].delete, 'address', consoleDoc)!.schema
    for (const text of ['198.51.100.7', '2001:db8::1', '2001:db8:1:2::/64', 'abc', '1.2.3', '2001:db8::/48', '198.51.100.7/32']) {
      const response = await call('DELETE', `/api/bans/addresses/${encodeURIComponent(text)}`)
      await response.text()
      expect(`${text}: document ${consoleDoc.accepts(address, text)}`).toBe(`${text}: document ${response.status === 204}`)
      expect([204, 400]).toContain(response.status)
    }
  })
})
