/**
 * Idempotency-Key on POST /pets: replays, conflicts, scope per API key, concurrency, header checks.
 */
import { afterEach, beforeEach, describe, expect, test } from 'bun:test'
import { auth, postPet, startApp, type TestApp } from '../support/app'

/** A response body as loosely typed JSON (the DOM typings say unknown). */
const jsonOf = (res: Response): Promise<any> => res.json()

const UNLIMITED = { rpm: 1_000_000, rpd: 100_000_000 }

let app: TestApp
let key: string

beforeEach(async () => {
  app = await startApp()
  key = await app.key('enterprise', UNLIMITED)
})
afterEach(() => app.stop())

async function petCount(k = key): Promise<number> {
  const res = await fetch(`${app.base}/pets?limit=100`, { headers: auth(k) })
  expect(res.status).toBe(200)
  return ((await jsonOf(res)) as unknown[]).length
}

describe('Idempotency-Key', () => {
  test('the same key and body replays the first response with Idempotent-Replayed: true', async () => {
    const body = { name: 'Rex', categoryId: 3 }
    const first = await postPet(app.base, key, body, { 'idempotency-key': 'order-1' })
    expect(first.status).toBe(201)
    expect(first.headers.get('idempotent-replayed')).toBeNull()
    const firstText = await first.text()

    const second = await postPet(app.base, key, body, { 'idempotency-key': 'order-1' })
    expect(second.status).toBe(201)
    expect(second.headers.get('idempotent-replayed')).toBe('true')
    expect(await second.text()).toBe(firstText)
    expect(second.headers.get('location')).toBe(first.headers.get('location'))
    expect(await petCount()).toBe(1)
  })

  test('a replay is served also after other pets were created', async () => {
    const first = await postPet(app.base, key, { name: 'A', categoryId: 1 }, { 'idempotency-key': 'k' })
    const firstPet = await jsonOf(first)
    await postPet(app.base, key, { name: 'B', categoryId: 1 })
    const again = await postPet(app.base, key, { name: 'A', categoryId: 1 }, { 'idempotency-key': 'k' })
    expect(again.status).toBe(201)
    expect(await jsonOf(again)).toEqual(firstPet)
    expect(await petCount()).toBe(2)
  })

  test('the same key with another body is a 409 idempotency_conflict and creates nothing', async () => {
    const first = await postPet(app.base, key, { name: 'Rex', categoryId: 3 }, { 'idempotency-key': 'order-2' })
    expect(first.status).toBe(201)
    for (const other of [
      { name: 'Max', categoryId: 3 },
      { name: 'Rex', categoryId: 4 },
      { name: 'Rex', categoryId: 3, status: 'sold' },
    ]) {
      const res = await postPet(app.base, key, other, { 'idempotency-key': 'order-2' })
      expect(res.status).toBe(409)
      expect(res.headers.get('content-type')).toStartWith('application/json')
      expect(await jsonOf(res)).toEqual({ code: 'idempotency_conflict', message: expect.any(String), status: 409 })
    }
    expect(await petCount()).toBe(1)
  })

  test('keys are scoped per API key: another API key with the same Idempotency-Key creates a new pet', async () => {
    const other = await app.key('enterprise', UNLIMITED)
    const body = { name: 'Rex', categoryId: 3 }
    const a = await postPet(app.base, key, body, { 'idempotency-key': 'shared' })
    const b = await postPet(app.base, other, body, { 'idempotency-key': 'shared' })
    expect(a.status).toBe(201)
    expect(b.status).toBe(201)
    expect(b.headers.get('idempotent-replayed')).toBeNull()
    expect((await jsonOf(b)).id).not.toBe((await jsonOf(a)).id)
    expect(await petCount()).toBe(2)
    // The other key's own record is replayed for it.
    const c = await postPet(app.base, other, body, { 'idempotency-key': 'shared' })
    expect(c.headers.get('idempotent-replayed')).toBe('true')
  })

  test('different Idempotency-Keys create different pets', async () => {
    const body = { name: 'Rex', categoryId: 3 }
    await postPet(app.base, key, body, { 'idempotency-key': 'one' })
    await postPet(app.base, key, body, { 'idempotency-key': 'two' })
    expect(await petCount()).toBe(2)
  })

  test('without the header, identical requests create separate pets', async () => {
    const body = { name: 'Rex', categoryId: 3 }
    await postPet(app.base, key, body)
    await postPet(app.base, key, body)
    expect(await petCount()).toBe(2)
  })

  test('concurrent identical requests create exactly one pet and all answer with it', async () => {
    const body = { name: 'Burst', categoryId: 9 }
    const responses = await Promise.all(Array.from({ length: 20 }, () => postPet(app.base, key, body, { 'idempotency-key': 'burst' })))
    const texts = await Promise.all(responses.map((r) => r.text()))
    for (const res of responses) expect(res.status).toBe(201)
    expect(new Set(texts).size).toBe(1)
    expect(responses.filter((r) => r.headers.get('idempotent-replayed') === 'true')).toHaveLength(19)
    expect(await petCount()).toBe(1)
  })

  test('concurrent requests with the same key and different bodies: one 201, the rest 409', async () => {
    const responses = await Promise.all(
      Array.from({ length: 5 }, (_, i) => postPet(app.base, key, { name: `n${i}`, categoryId: 1 }, { 'idempotency-key': 'race' })),
    )
    const statuses = responses.map((r) => r.status).sort()
    expect(statuses).toEqual([201, 409, 409, 409, 409])
    expect(await petCount()).toBe(1)
  })

  test('a refused (400) request does not use up the Idempotency-Key', async () => {
    const bad = await postPet(app.base, key, { name: '', categoryId: 1 }, { 'idempotency-key': 'retry-me' })
    expect(bad.status).toBe(400)
    const good = await postPet(app.base, key, { name: 'ok', categoryId: 1 }, { 'idempotency-key': 'retry-me' })
    expect(good.status).toBe(201)
    expect(good.headers.get('idempotent-replayed')).toBeNull()
  })

  test('records are kept 24 h: after that the same key creates a new pet', async () => {
    const body = { name: 'Old', categoryId: 1 }
    const first = await jsonOf(await postPet(app.base, key, body, { 'idempotency-key': 'day' }))
    app.clock.advance(23 * 3600 * 1000)
    const within = await postPet(app.base, key, body, { 'idempotency-key': 'day' })
    expect(within.headers.get('idempotent-replayed')).toBe('true')
    app.clock.advance(3600 * 1000 + 1)
    const after = await postPet(app.base, key, body, { 'idempotency-key': 'day' })
    expect(after.status).toBe(201)
    expect(after.headers.get('idempotent-replayed')).toBeNull()
    expect((await jsonOf(after)).id).not.toBe(first.id)
  })

  test('255 visible ASCII characters is a valid key', async () => {
    const res = await postPet(app.base, key, { name: 'x', categoryId: 1 }, { 'idempotency-key': 'k'.repeat(255) })
    expect(res.status).toBe(201)
  })

  for (const [label, value] of [
    ['empty', ''],
    ['256 characters', 'k'.repeat(256)],
    ['containing a space', 'a b'],
    ['containing a tab', 'a\tb'],
  ]) {
    test(`an Idempotency-Key ${label} is a 400 naming the header`, async () => {
      const res = await postPet(app.base, key, { name: 'x', categoryId: 1 }, { 'idempotency-key': value! })
      expect(res.status).toBe(400)
      expect(await jsonOf(res)).toEqual({
        code: 'invalid_request',
        message: expect.stringContaining('Idempotency-Key'),
        status: 400,
      })
      expect(await petCount()).toBe(0)
    })
  }
})
