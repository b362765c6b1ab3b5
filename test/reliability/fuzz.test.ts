/**
 * Property-based fuzzing of the compiled server over HTTP with fast-check. Whatever the input (bodies,
 * query strings, path ids, headers; valid, boundary or hostile), the server never answers 5xx, every
 * error is the Error body with the HTTP status, every 201 reads back identical, and nothing invalid is
 * stored. PETSTORE_FUZZ_RUNS sets the runs per property (default 500).
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import fc from 'fast-check'
import { join } from 'node:path'
import { createKeyWithCli, type Server, startServer, tempDir } from '../support/binary'
import { checkEveryAnswer, Contract } from '../support/contract'

const RUNS = Number(process.env.PETSTORE_FUZZ_RUNS ?? 500)
const STATUSES = ['available', 'pending', 'sold']
let server: Server
let key: string
let contract: Contract
let inputs = 0

beforeAll(async () => {
  // This suite checks every answer against the contract itself, without the global hook's copy.
  checkEveryAnswer.enabled = false
  const dataFile = join(tempDir(), 'petstore.db')
  key = createKeyWithCli(dataFile, ['--plan', 'enterprise', '--rpm', '100000000', '--rpd', '100000000'])
  server = await startServer({ dataFile, args: ['--no-access-log'] })
  contract = await Contract.load(server.origin)
})

afterAll(async () => {
  checkEveryAnswer.enabled = true
  console.log(`fuzz: ${inputs} generated inputs sent, ${contract?.checked} answers checked against /openapi.json`)
  await server?.stop()
})

function isValidPet(pet: unknown): boolean {
  if (typeof pet !== 'object' || pet === null || Array.isArray(pet)) return false
  const { id, name, categoryId, status, ...rest } = pet as Record<string, unknown>
  return (
    Object.keys(rest).length === 0 &&
    Number.isSafeInteger(id) &&
    (id as number) > 0 &&
    typeof name === 'string' &&
    [...name].length >= 1 &&
    [...name].length <= 200 &&
    !/[\u0000-\u001f\u007f-\u009f]/.test(name) &&
    name.isWellFormed() &&
    // Any int64; read here as a double, so 2^63 − 1 shows as 2^63 (the 201 is also compared as text).
    Number.isInteger(categoryId) &&
    Math.abs(categoryId as number) <= 2 ** 63 &&
    STATUSES.includes(status as string)
  )
}

/** Checks the invariants every answer must keep, and the contract; returns the parsed body. */
async function checkAnswer(method: string, response: Response, allowed: number[]): Promise<unknown> {
  inputs++
  const text = await response.text()
  contract.check(method, new URL(response.url).pathname, response, text)
  expect(response.status).toBeLessThan(500)
  expect(allowed).toContain(response.status)
  expect(response.headers.get('content-type')).toStartWith('application/json')
  const body = JSON.parse(text)
  if (response.status >= 400) {
    expect(Object.keys(body).sort()).toEqual(['code', 'message', 'status'])
    expect(body.status).toBe(response.status)
    expect(typeof body.code).toBe('string')
    expect(typeof body.message).toBe('string')
    expect(text).not.toContain('    at ')
  }
  return body
}

const auth = () => ({ authorization: `Bearer ${key}` })

/** Percent-encodes any string; a lone surrogate becomes the invalid UTF-8 bytes it would have been. */
const pct = (text: string) => (text.isWellFormed() ? encodeURIComponent(text) : `${encodeURIComponent(text.toWellFormed())}%ED%A0%80`)

const hostileString = fc.oneof(
  fc.string({ unit: 'grapheme', maxLength: 60 }),
  fc.string({ unit: 'binary', maxLength: 60 }),
  fc.string({ maxLength: 300 }),
  fc.constantFrom('', ' ', '\u0000', 'a\u0000b', '\u0085', '\ud800', '😀'.repeat(200), '😀'.repeat(201), 'x'.repeat(201)),
)
const hugeNumber = fc.oneof(
  fc.integer(),
  fc.double(),
  fc.bigInt({ min: -(2n ** 70n), max: 2n ** 70n }).map(Number),
  fc.constantFrom(2 ** 53, -(2 ** 53), 2 ** 53 - 1, 1e308, -0, 0.5),
)
const petLike = fc.record(
  {
    name: fc.oneof(hostileString, fc.constant('Rex')),
    categoryId: fc.oneof(hugeNumber, fc.string(), fc.constant(null)),
    status: fc.oneof(fc.constantFrom(...STATUSES), hostileString),
    id: fc.integer(),
    extra: fc.anything(),
  },
  { requiredKeys: [] },
)
const rawBody = fc.oneof(
  petLike.map((pet) => JSON.stringify(pet)),
  fc.jsonValue({ maxDepth: 4 }).map((value) => JSON.stringify(value)),
  fc.string({ maxLength: 200 }),
  fc.integer({ min: 1, max: 3000 }).map((depth) => '['.repeat(depth) + ']'.repeat(depth)),
  fc.integer({ min: 1, max: 3000 }).map((depth) => `${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`),
  fc.tuple(hostileString, hostileString).map(([a, b]) => `{"name":${JSON.stringify(a)},"name":${JSON.stringify(b)},"categoryId":1}`),
  fc.constantFrom(
    '{"name":"a","categoryId":9007199254740993}',
    '{"name":"a","categoryId":1e400}',
    '{"name":"a","categoryId":1.0000000000000001}',
    '{"name":"a\\u0000","categoryId":1}',
  ),
)

describe('fuzzing over HTTP', () => {
  test('POST /pets: any body is a 201 that reads back identical, or a 4xx Error body', async () => {
    await fc.assert(
      fc.asyncProperty(
        rawBody,
        fc.constantFrom('application/json', 'application/json; charset=utf-8', 'text/plain', 'application/jsonx'),
        async (body, type) => {
          const response = await fetch(`${server.base}/pets`, { method: 'POST', headers: { ...auth(), 'content-type': type }, body })
          const answer = await checkAnswer('POST', response, [201, 400, 413, 415])
          if (response.status === 201) {
            expect(isValidPet(answer)).toBe(true)
            const read = await fetch(`${server.base}/pets/${(answer as { id: number }).id}`, { headers: auth() })
            expect(await checkAnswer('GET', read, [200])).toEqual(answer)
          }
        },
      ),
      { numRuns: RUNS * 3 },
    )
  })

  test('GET /pets: any query string is a page of valid pets or a 400', async () => {
    const name = fc.oneof(fc.constantFrom('limit', 'status', 'cursor'), fc.string({ maxLength: 8 }))
    const value = fc.oneof(fc.integer({ min: -5, max: 200 }).map(String), fc.constantFrom(...STATUSES), hostileString)
    await fc.assert(
      fc.asyncProperty(fc.array(fc.tuple(name, value), { maxLength: 4 }), async (pairs) => {
        const query = pairs.map(([n, v]) => `${pct(n)}=${pct(v)}`).join('&')
        const response = await fetch(`${server.base}/pets?${query}`, { headers: auth() })
        const answer = await checkAnswer('GET', response, [200, 400])
        if (response.status === 200) {
          expect(Array.isArray(answer)).toBe(true)
          for (const pet of answer as unknown[]) expect(isValidPet(pet)).toBe(true)
        }
      }),
      { numRuns: RUNS },
    )
  })

  test('GET /pets/{petId}: any path id is a pet, a 404 or a 400', async () => {
    // "." and ".." are dot segments: the URL parser removes them, so they never reach /pets/{petId}.
    const id = fc.oneof(
      hostileString.filter((s) => s !== '' && s !== '.' && s !== '..'),
      fc.bigInt({ min: -(2n ** 70n), max: 2n ** 70n }).map(String),
      fc.integer().map(String),
    )
    await fc.assert(
      fc.asyncProperty(id, async (petId) => {
        const response = await fetch(`${server.base}/pets/${pct(petId)}`, { headers: auth() })
        const answer = await checkAnswer('GET', response, [200, 400, 404])
        if (response.status === 200) expect(isValidPet(answer)).toBe(true)
      }),
      { numRuns: RUNS },
    )
  })

  test('hostile headers never cause a 5xx', async () => {
    const ascii = fc.string({ unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)), maxLength: 300 })
    await fc.assert(
      fc.asyncProperty(
        fc.record(
          {
            authorization: fc.oneof(
              ascii,
              ascii.map((s) => `Bearer ${s}`),
              fc.constant(`Bearer ${key}`),
              fc.constant(`bEaReR ${key}`),
            ),
            'idempotency-key': ascii,
            'x-request-id': ascii,
            'content-type': fc.oneof(ascii, fc.constant('application/json')),
          },
          { requiredKeys: [] },
        ),
        async (headers) => {
          const response = await fetch(`${server.base}/pets`, { method: 'POST', headers, body: '{"name":"Header","categoryId":2}' })
          await checkAnswer('POST', response, [201, 400, 401, 409, 415, 429])
          const requestId = response.headers.get('x-request-id')
          expect(requestId).toMatch(/^[A-Za-z0-9._:@+=-]{1,128}$/)
        },
      ),
      { numRuns: RUNS },
    )
  })

  test('a 10 MB body is refused with 413 without being stored', async () => {
    const body = `{"name":"${'x'.repeat(10 * 1024 * 1024)}","categoryId":1}`
    const response = await fetch(`${server.base}/pets`, {
      method: 'POST',
      headers: { ...auth(), 'content-type': 'application/json' },
      body,
    })
    expect(((await checkAnswer('POST', response, [413])) as { code: string }).code).toBe('payload_too_large')
  })

  test('a slow sender does not hold up other clients', async () => {
    let received = ''
    const socket = await Bun.connect({
      hostname: '127.0.0.1',
      port: server.port,
      socket: {
        data: (_socket, data) => {
          received += data.toString()
        },
      },
    })
    socket.write(
      `POST /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{"na`,
    )
    const others = await Promise.all(Array.from({ length: 20 }, () => fetch(`${server.base}/pets?limit=1`, { headers: auth() })))
    for (const response of others) expect(response.status).toBe(200)
    socket.end()
    expect(received).not.toContain('HTTP/1.1 5')
  })

  test('afterwards every stored pet is valid and the server is healthy', async () => {
    let next: string | null = `${server.base}/pets?limit=100`
    let count = 0
    while (next) {
      const page: Response = await fetch(next, { headers: auth() })
      const pets = (await checkAnswer('GET', page, [200])) as unknown[]
      for (const pet of pets) expect(isValidPet(pet)).toBe(true)
      count += pets.length
      next = /<([^>]+)>; rel="next"/.exec(page.headers.get('link') ?? '')?.[1] ?? null
    }
    expect(count).toBeGreaterThan(0)
    expect((await fetch(`${server.origin}/healthz`)).status).toBe(200)
    expect((await fetch(`${server.origin}/readyz`)).status).toBe(200)
  })
})
