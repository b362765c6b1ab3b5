/**
 * Bearer authentication (RFC 6750) over real HTTP: the 401s and their WWW-Authenticate challenges,
 * scheme case-insensitivity, and revocation taking effect.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { hashSecret } from '../../src/domain/api-key'
import { postPet, startApp, type TestApp } from '../support/app'

/** A response body as loosely typed JSON (the DOM typings say unknown). */
const jsonOf = (res: Response): Promise<any> => res.json()

const REALM = 'Bearer realm="petstore"'
const INVALID = 'Bearer realm="petstore", error="invalid_token"'

let app: TestApp
let key: string

beforeAll(async () => {
  // Generous per-address limits are not configurable, so keep the number of keyless requests < 60.
  app = await startApp()
  key = await app.key('enterprise', { rpm: 100_000, rpd: 1_000_000 })
})
afterAll(() => app.stop())

const listWith = (headers: Record<string, string>) => fetch(`${app.base}/pets`, { headers })

async function expect401(res: Response, challenge: string | RegExp) {
  expect(res.status).toBe(401)
  expect(res.headers.get('content-type')).toStartWith('application/json')
  expect(await jsonOf(res)).toEqual({ code: 'unauthorized', message: expect.any(String), status: 401 })
  const header = res.headers.get('www-authenticate')
  if (typeof challenge === 'string') expect(header).toBe(challenge)
  else expect(header).toMatch(challenge)
}

async function revoke(t: TestApp, secret: string) {
  const record = (await t.storage.keys.list()).find((k) => k.secretHash === hashSecret(secret))!
  expect(await t.storage.keys.revoke(record.id, t.clock.now)).toBe('revoked')
  await t.reloadKeys()
}

describe('missing credentials', () => {
  test('no Authorization header is a 401 with WWW-Authenticate: Bearer realm="petstore"', async () => {
    await expect401(await listWith({}), REALM)
  })

  test('every operation requires the key', async () => {
    await expect401(
      await fetch(`${app.base}/pets`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{"name":"x","categoryId":1}',
      }),
      REALM,
    )
    await expect401(await fetch(`${app.base}/pets/1`), REALM)
    await expect401(await fetch(`${app.base}/store/orders`), REALM)
  })

  test('an unauthenticated POST creates nothing', async () => {
    await fetch(`${app.base}/pets`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"name":"x","categoryId":1}',
    })
    const res = await listWith({ authorization: `Bearer ${key}` })
    expect(await jsonOf(res)).toEqual([])
  })

  test('another scheme (Basic) is a 401 without an error code (RFC 6750 §3.1)', async () => {
    await expect401(await listWith({ authorization: `Basic ${btoa('user:pass')}` }), REALM)
  })

  test('the key in another scheme is not accepted', async () => {
    await expect401(await listWith({ authorization: `Token ${key}` }), REALM)
  })

  test('the key sent bare, without a scheme, is not accepted', async () => {
    await expect401(await listWith({ authorization: key }), REALM)
  })

  test('"Bearer" with an empty token is a 401 with a Bearer challenge', async () => {
    for (const value of ['Bearer', 'Bearer ', 'Bearer    ']) {
      const res = await listWith({ authorization: value })
      await expect401(res, /^Bearer realm="petstore"/)
    }
  })
})

describe('wrong or revoked keys', () => {
  test('a wrong key is a 401 with error="invalid_token"', async () => {
    await expect401(await listWith({ authorization: 'Bearer psk_thisisnotakey' }), INVALID)
  })

  test('a key with one character changed is refused', async () => {
    const last = key.at(-1) === 'A' ? 'B' : 'A'
    await expect401(await listWith({ authorization: `Bearer ${key.slice(0, -1)}${last}` }), INVALID)
  })

  test('a key with extra characters is refused', async () => {
    await expect401(await listWith({ authorization: `Bearer ${key}x` }), INVALID)
  })

  test('a token with characters outside the token68 set is refused as invalid', async () => {
    await expect401(await listWith({ authorization: 'Bearer a,b;c' }), INVALID)
  })

  test('an absurdly long token is refused as invalid', async () => {
    await expect401(await listWith({ authorization: `Bearer ${'a'.repeat(5000)}` }), INVALID)
  })

  test('a key revoked in storage stops working once the registry reloads', async () => {
    const t = await startApp()
    try {
      const secret = await t.key()
      expect((await fetch(`${t.base}/pets`, { headers: { authorization: `Bearer ${secret}` } })).status).toBe(200)
      await revoke(t, secret)
      const res = await fetch(`${t.base}/pets`, { headers: { authorization: `Bearer ${secret}` } })
      await expect401(res, INVALID)
      // Other keys keep working.
      const other = await t.key()
      expect((await fetch(`${t.base}/pets`, { headers: { authorization: `Bearer ${other}` } })).status).toBe(200)
    } finally {
      t.stop()
    }
  })

  test('a revoked key cannot create pets', async () => {
    const t = await startApp()
    try {
      const secret = await t.key()
      await revoke(t, secret)
      const res = await postPet(t.base, secret, { name: 'x', categoryId: 1 })
      await expect401(res, INVALID)
      expect(await t.storage.pets.count()).toBe(0)
    } finally {
      t.stop()
    }
  })
})

describe('valid keys', () => {
  test('Authorization: Bearer KEY is accepted', async () => {
    expect((await listWith({ authorization: `Bearer ${key}` })).status).toBe(200)
  })

  for (const scheme of ['bearer', 'BEARER', 'BeArEr']) {
    test(`the scheme is case-insensitive: "${scheme}"`, async () => {
      const res = await listWith({ authorization: `${scheme} ${key}` })
      expect(res.status).toBe(200)
      expect(res.headers.get('www-authenticate')).toBeNull()
    })
  }

  test("every plan's key works", async () => {
    for (const plan of ['free', 'pro', 'business']) {
      const secret = await app.key(plan)
      expect((await listWith({ authorization: `Bearer ${secret}` })).status).toBe(200)
    }
  })
})
