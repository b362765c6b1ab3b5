/**
 * GET /pets/{petId}, the deprecated operation: lookups, petId validation, the deprecation fields on
 * every answer (401 included), and per-key counting in /metrics.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { hashSecret } from '../../src/domain/api-key'
import { auth, postPet, startApp, type TestApp } from '../support/app'

/** A response body as loosely typed JSON (the DOM typings say unknown). */
const jsonOf = (res: Response): Promise<any> => res.json()

const SUNSET = 'Thu, 05 Dec 2030 00:00:00 GMT'

let app: TestApp
let key: string
let linkBase: string

beforeAll(async () => {
  app = await startApp()
  key = await app.key('enterprise', { rpm: 100_000, rpd: 1_000_000 })
  linkBase = `http://localhost:${new URL(app.origin).port}/v1`
})
afterAll(() => app.stop())

const get = (id: string, headers: Record<string, string> = auth(key)) => fetch(`${app.base}/pets/${id}`, { headers })

async function keyIdOf(t: TestApp, secret: string): Promise<string> {
  const record = (await t.storage.keys.list()).find((k) => k.secretHash === hashSecret(secret))
  if (!record) throw new Error('key not found')
  return record.id
}

function expectDeprecationFields(res: Response) {
  const deprecation = res.headers.get('deprecation')
  expect(deprecation).not.toBeNull()
  // RFC 9745: a Structured Field date, "@" followed by Unix seconds.
  expect(deprecation).toMatch(/^@\d+$/)
  expect(res.headers.get('sunset')).toBe(SUNSET)
  expect(res.headers.get('link')).toBe(`<${linkBase}/pets>; rel="successor-version"`)
  const deprecatedAt = Number(deprecation!.slice(1)) * 1000
  expect(deprecatedAt).toBeLessThanOrEqual(Date.parse(SUNSET))
}

describe('GET /pets/{petId} lookups', () => {
  test('returns the pet', async () => {
    const created = await jsonOf(await postPet(app.base, key, { name: 'Rex', categoryId: 5, status: 'sold' }))
    const res = await get(String(created.id))
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toStartWith('application/json')
    expect(await jsonOf(res)).toEqual({ id: created.id, name: 'Rex', categoryId: 5, status: 'sold' })
  })

  test('an unknown id is a 404 with the Error body', async () => {
    const res = await get('424242')
    expect(res.status).toBe(404)
    expect(res.headers.get('content-type')).toStartWith('application/json')
    expect(await jsonOf(res)).toEqual({ code: 'not_found', message: expect.any(String), status: 404 })
  })

  test('the largest int64, 9223372036854775807, is a valid id that is not found (404)', async () => {
    const res = await get('9223372036854775807')
    expect(res.status).toBe(404)
    expect((await jsonOf(res)).code).toBe('not_found')
  })

  test('an id just above 2^53 is a 404, not a lookup of a rounded id', async () => {
    // 9007199254740993 would round to ...992 as a double; neither exists, but it must not be a 400 or 500.
    const res = await get('9007199254740993')
    expect(res.status).toBe(404)
  })

  for (const id of ['0', '-1', 'abc', '1.5', '9223372036854775808', '99999999999999999999', '01', '1e3', '%201', '+1', '0x10']) {
    test(`petId ${decodeURIComponent(id)} is a 400 naming petId`, async () => {
      const res = await get(id)
      expect(res.status).toBe(400)
      expect(await jsonOf(res)).toEqual({
        code: 'invalid_request',
        message: expect.stringContaining('petId'),
        status: 400,
      })
    })
  }
})

describe('GET /pets/{petId} deprecation fields', () => {
  test('on a 200', async () => {
    const created = await jsonOf(await postPet(app.base, key, { name: 'Rex', categoryId: 5 }))
    const res = await get(String(created.id))
    expect(res.status).toBe(200)
    expectDeprecationFields(res)
  })

  test('on a 404', async () => {
    const res = await get('777777')
    expect(res.status).toBe(404)
    expectDeprecationFields(res)
  })

  test('on a 400', async () => {
    const res = await get('abc')
    expect(res.status).toBe(400)
    expectDeprecationFields(res)
  })

  test('on a 401 without a key', async () => {
    const res = await get('1', {})
    expect(res.status).toBe(401)
    expectDeprecationFields(res)
  })

  test('on a 401 with a wrong key', async () => {
    const res = await get('1', auth('psk_wrong'))
    expect(res.status).toBe(401)
    expectDeprecationFields(res)
  })

  test('on a 429', async () => {
    const limited = await startApp()
    try {
      const k = await limited.key('enterprise', { rpm: 1, rpd: 100 })
      expect((await fetch(`${limited.base}/pets/1`, { headers: auth(k) })).status).toBe(404)
      const res = await fetch(`${limited.base}/pets/1`, { headers: auth(k) })
      expect(res.status).toBe(429)
      expect(res.headers.get('sunset')).toBe(SUNSET)
      expect(res.headers.get('deprecation')).toMatch(/^@\d+$/)
      expect(res.headers.get('link')).toContain('rel="successor-version"')
    } finally {
      limited.stop()
    }
  })

  test('other operations do not carry the deprecation fields', async () => {
    const list = await fetch(`${app.base}/pets`, { headers: auth(key) })
    expect(list.headers.get('deprecation')).toBeNull()
    expect(list.headers.get('sunset')).toBeNull()
    const created = await postPet(app.base, key, { name: 'x', categoryId: 1 })
    expect(created.headers.get('deprecation')).toBeNull()
    expect(created.headers.get('sunset')).toBeNull()
  })
})

describe('GET /pets/{petId} usage counting', () => {
  test('calls are counted per key id in /metrics as petstore_deprecated_calls_total', async () => {
    const counted = await startApp()
    try {
      const a = await counted.key('enterprise', { rpm: 1000, rpd: 1000 })
      const b = await counted.key('enterprise', { rpm: 1000, rpd: 1000 })
      const pet = await jsonOf(await postPet(counted.base, a, { name: 'x', categoryId: 1 }))
      for (const id of [String(pet.id), '999', String(pet.id)]) await fetch(`${counted.base}/pets/${id}`, { headers: auth(a) })
      await fetch(`${counted.base}/pets/${pet.id}`, { headers: auth(b) })
      // Listing is not deprecated and is not counted.
      await fetch(`${counted.base}/pets`, { headers: auth(b) })

      const metrics = await counted.metrics()
      const count = (keyId: string) => {
        const line = metrics.split('\n').find((l) => l.startsWith('petstore_deprecated_calls_total{') && l.includes(`"${keyId}"`))
        return line === undefined ? 0 : Number(line.split(' ').at(-1))
      }
      expect(count(await keyIdOf(counted, a))).toBe(3)
      expect(count(await keyIdOf(counted, b))).toBe(1)
      expect(metrics).toContain('# TYPE petstore_deprecated_calls_total counter')
    } finally {
      counted.stop()
    }
  })
})
