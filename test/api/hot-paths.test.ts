/**
 * The answers the benchmark drives hardest (listPets, getPet, and the gate's 401 and 429), whole: the
 * exact set of header fields, the exact body, and one access-log line each. However the gate and the
 * handlers are written (answered from the hook or thrown, awaited or not), on whichever backend, these
 * bytes must not change; their speed is the benchmark's business (test/bench).
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { auth, postPet, startApp, type TestApp } from '../support/app'
import { eventually } from '../support/binary'

const RATE_FIELDS = ['ratelimit', 'ratelimit-policy', 'x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset']
const ALWAYS = ['content-length', 'content-type', 'date', 'x-request-id', ...RATE_FIELDS]
const DEPRECATION = ['deprecation', 'link', 'sunset']

let app: TestApp
let key: string
let petJson: string

beforeAll(async () => {
  app = await startApp()
  key = await app.key('enterprise', { rpm: 1_000, rpd: 100_000 })
  for (const name of ['Rex', 'Bo']) expect((await postPet(app.base, key, { name, categoryId: 1 })).status).toBe(201)
  petJson = JSON.stringify({ id: 1, name: 'Rex', categoryId: 1, status: 'available' })
})
afterAll(() => app.stop())

/** The answer's status, sorted field names and body, after checking it was logged once with that status. */
async function answer(res: Response) {
  const body = await res.text()
  const requestId = res.headers.get('x-request-id')!
  // The log hands its lines over every 50 ms (observability/access-log.ts).
  await eventually(() => app.logLines.some((line) => line.includes(`"${requestId}"`)))
  const logged = app.logLines.map((line) => JSON.parse(line)).filter((entry) => entry.requestId === requestId)
  expect(logged.map((entry) => entry.status)).toEqual([res.status])
  return { status: res.status, fields: [...res.headers.keys()].sort(), body }
}

describe('the hot answers, whole', () => {
  test('listPets: a page, its next link and the rate-limit fields', async () => {
    const res = await fetch(`${app.base}/pets?limit=1`, { headers: auth(key) })
    expect(res.headers.get('link')).toMatch(/^<http:\/\/[^>]+\/v1\/pets\?limit=1&cursor=[^>]+>; rel="next"$/)
    expect(await answer(res)).toEqual({ status: 200, fields: [...ALWAYS, 'link'].sort(), body: `[${petJson}]` })
  })

  test('getPet: the pet with the deprecation fields', async () => {
    const res = await fetch(`${app.base}/pets/1`, { headers: auth(key) })
    expect(res.headers.get('content-type')).toBe('application/json')
    expect(await answer(res)).toEqual({ status: 200, fields: [...ALWAYS, ...DEPRECATION].sort(), body: petJson })
  })

  test('getPet without a key: the 401 from the gate, with the challenge and the deprecation fields', async () => {
    expect(await answer(await fetch(`${app.base}/pets/1`))).toEqual({
      status: 401,
      fields: [...ALWAYS, ...DEPRECATION, 'www-authenticate'].sort(),
      body: JSON.stringify({ code: 'unauthorized', message: 'An API key is required: send Authorization: Bearer <key>.', status: 401 }),
    })
  })

  test('listPets with an unknown key: the 401 names the invalid token', async () => {
    const res = await fetch(`${app.base}/pets`, { headers: { authorization: 'Bearer no-such-key' } })
    expect(res.headers.get('www-authenticate')).toBe('Bearer realm="petstore", error="invalid_token"')
    expect(await answer(res)).toEqual({
      status: 401,
      fields: [...ALWAYS, 'www-authenticate'].sort(),
      body: JSON.stringify({ code: 'unauthorized', message: 'The API key is invalid or has been revoked.', status: 401 }),
    })
  })

  test('an exhausted key: the 429 from the gate, with Retry-After', async () => {
    const spent = await app.key('enterprise', { rpm: 1, rpd: 100 })
    expect((await fetch(`${app.base}/pets`, { headers: auth(spent) })).status).toBe(200)
    const res = await fetch(`${app.base}/pets/1`, { headers: auth(spent) })
    const retryAfter = res.headers.get('retry-after')
    expect(retryAfter).toMatch(/^\d+$/)
    expect(await answer(res)).toEqual({
      status: 429,
      fields: [...ALWAYS, ...DEPRECATION, 'retry-after'].sort(),
      body: JSON.stringify({
        code: 'rate_limited',
        message: `Rate limit exceeded; retry after ${retryAfter} s. Requests sent before then count toward a ban: after 50 of them within a minute, the next one starts it.`,
        status: 429,
      }),
    })
  })
})
