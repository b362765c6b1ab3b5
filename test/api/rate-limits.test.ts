/**
 * Rate limiting over real HTTP with a fake clock: the X-RateLimit-* and draft RateLimit fields, 429s
 * with Retry-After, refill, the day bucket, bans, per-key isolation and per-address limiting.
 */
import { describe, expect, test } from 'bun:test'
import { appsPerTest, auth, postPet, type TestApp } from '../support/app'
import { inTurn } from '../support/unavailable'

/** A response body as loosely typed JSON (the DOM typings say unknown). */
const jsonOf = (res: Response): Promise<any> => res.json()

const FREE_POLICY = '"minute";q=60;w=60, "day";q=1000;w=86400'

const fresh = appsPerTest()

/** The fake clock's current Unix time in seconds. */
const unixNow = (app: TestApp) => Math.ceil(app.clock.now / 1000)

function list(app: TestApp, headers: Record<string, string> = {}) {
  return fetch(`${app.base}/pets`, { headers })
}

function rl(res: Response) {
  return {
    limit: res.headers.get('x-ratelimit-limit'),
    remaining: res.headers.get('x-ratelimit-remaining'),
    reset: res.headers.get('x-ratelimit-reset'),
  }
}

async function expect429(res: Response, code: 'rate_limited' | 'key_banned' | 'address_banned') {
  expect(res.status).toBe(429)
  expect(res.headers.get('content-type')).toStartWith('application/json')
  expect(await jsonOf(res)).toEqual({ code, message: expect.any(String), status: 429 })
  const retryAfter = res.headers.get('retry-after')
  expect(retryAfter).toMatch(/^\d+$/)
  expect(Number(retryAfter)).toBeGreaterThanOrEqual(1)
  return Number(retryAfter)
}

function expectRateLimitFields(res: Response) {
  for (const name of ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset'])
    expect(res.headers.get(name), name).toMatch(/^\d+$/)
  expect(res.headers.get('ratelimit-policy')).toMatch(/^"minute";q=\d+;w=60, "day";q=\d+;w=86400$/)
  expect(res.headers.get('ratelimit')).toMatch(/^"(minute|day)";r=\d+;t=\d+$/)
}

describe('rate-limit fields on every response under the base', () => {
  test('200, 201, 400, 401, 404, 405, 429 and 501 all carry X-RateLimit-*, RateLimit and RateLimit-Policy', async () => {
    const app = await fresh()
    const key = await app.key('enterprise', { rpm: 1000, rpd: 10000 })
    const tiny = await app.key('enterprise', { rpm: 1, rpd: 10 })
    const responses: [number, Response][] = [
      [200, await list(app, auth(key))],
      [201, await postPet(app.base, key, { name: 'x', categoryId: 1 })],
      [400, await fetch(`${app.base}/pets?limit=0`, { headers: auth(key) })],
      [401, await list(app)],
      [401, await list(app, auth('psk_wrong'))],
      [404, await fetch(`${app.base}/pets/99`, { headers: auth(key) })],
      [404, await fetch(`${app.base}/nothing`, { headers: auth(key) })],
      [405, await fetch(`${app.base}/pets`, { method: 'DELETE', headers: auth(key) })],
      [501, await fetch(`${app.base}/store/orders`, { headers: auth(key) })],
      [200, await list(app, auth(tiny))],
      [429, await list(app, auth(tiny))],
    ]
    for (const [status, res] of responses) {
      expect(res.status).toBe(status)
      expectRateLimitFields(res)
    }
  })

  test('paths outside the base carry no rate-limit fields and are not limited', async () => {
    const app = await fresh()
    await inTurn(61, () => list(app))
    expect((await list(app)).status).toBe(429)
    for (const path of ['/healthz', '/readyz', '/metrics', '/openapi.json']) {
      const res = await fetch(`${app.origin}${path}`)
      expect(res.status).toBe(200)
      expect(res.headers.get('x-ratelimit-limit')).toBeNull()
    }
  })
})

describe('Free plan: 60 per minute, 1000 per day', () => {
  test('remaining counts down 59..0 with exact limit, reset and draft fields; the 61st is a 429', async () => {
    const app = await fresh()
    const key = await app.key('free')
    const start = unixNow(app)
    for (let i = 1; i <= 60; i++) {
      const res = await list(app, auth(key))
      expect(res.status).toBe(200)
      expect(rl(res)).toEqual({ limit: '60', remaining: String(60 - i), reset: String(start + i) })
      expect(res.headers.get('ratelimit')).toBe(`"minute";r=${60 - i};t=${i}`)
      expect(res.headers.get('ratelimit-policy')).toBe(FREE_POLICY)
      await res.arrayBuffer()
    }
    const res = await list(app, auth(key))
    const retryAfter = await expect429(res, 'rate_limited')
    expect(retryAfter).toBe(1)
    expect(rl(res)).toEqual({ limit: '60', remaining: '0', reset: String(start + 60) })
    expect(res.headers.get('ratelimit-policy')).toBe(FREE_POLICY)
  })

  test('the minute bucket refills continuously as the clock advances', async () => {
    const app = await fresh()
    const key = await app.key('free')
    await inTurn(60, () => list(app, auth(key)))
    await expect429(await list(app, auth(key)), 'rate_limited')

    // Asked again before the time the first 429 named: the token after that one, 1.5 s on, rounded up.
    app.clock.advance(500)
    expect(await expect429(await list(app, auth(key)), 'rate_limited')).toBe(2)

    app.clock.advance(500)
    const one = await list(app, auth(key))
    expect(one.status).toBe(200)
    expect(one.headers.get('x-ratelimit-remaining')).toBe('0')
    await expect429(await list(app, auth(key)), 'rate_limited')

    app.clock.advance(10_000)
    const after = await inTurn(11, () => list(app, auth(key)))
    expect(after.map((r) => r.status)).toEqual([...Array(10).fill(200), 429])

    app.clock.advance(60_000)
    const full = await list(app, auth(key))
    expect(full.status).toBe(200)
    expect(full.headers.get('x-ratelimit-remaining')).toBe('59')
  })

  test('a rejected request takes no token', async () => {
    const app = await fresh()
    const key = await app.key('free')
    await inTurn(60, () => list(app, auth(key)))
    const rejected = await inTurn(20, () => list(app, auth(key)))
    expect(rejected.every((r) => r.status === 429)).toBe(true)
    app.clock.advance(1000)
    expect((await list(app, auth(key))).status).toBe(200)
  })

  test('POST counts against the same buckets as GET', async () => {
    const app = await fresh()
    const key = await app.key('free')
    await inTurn(30, () => list(app, auth(key)))
    await inTurn(30, () => postPet(app.base, key, { name: 'x', categoryId: 1 }))
    const res = await postPet(app.base, key, { name: 'x', categoryId: 1 })
    await expect429(res, 'rate_limited')
    expect(await app.storage.pets.count()).toBe(30)
  })

  test('Pro keys get 300 per minute', async () => {
    const app = await fresh()
    const res = await list(app, auth(await app.key('pro')))
    expect(rl(res).limit).toBe('300')
    expect(rl(res).remaining).toBe('299')
    expect(res.headers.get('ratelimit-policy')).toBe('"minute";q=300;w=60, "day";q=10000;w=86400')
  })

  test('Business keys get 1000 per minute', async () => {
    const app = await fresh()
    const res = await list(app, auth(await app.key('business')))
    expect(res.headers.get('ratelimit-policy')).toBe('"minute";q=1000;w=60, "day";q=100000;w=86400')
  })
})

describe('the day bucket', () => {
  test('is the one in force when it has fewer tokens, and limits on its own', async () => {
    const app = await fresh()
    const key = await app.key('enterprise', { rpm: 100, rpd: 5 })
    const start = unixNow(app)
    for (let i = 1; i <= 5; i++) {
      const res = await list(app, auth(key))
      expect(res.status).toBe(200)
      expect(rl(res).limit).toBe('5')
      expect(rl(res).remaining).toBe(String(5 - i))
      // The day bucket refills one token per 17 280 s.
      expect(rl(res).reset).toBe(String(start + 17_280 * i))
      expect(res.headers.get('ratelimit')).toBe(`"day";r=${5 - i};t=${17_280 * i}`)
      expect(res.headers.get('ratelimit-policy')).toBe('"minute";q=100;w=60, "day";q=5;w=86400')
    }
    const res = await list(app, auth(key))
    expect(await expect429(res, 'rate_limited')).toBe(17_280)
    expect(rl(res).limit).toBe('5')

    // A minute later the minute bucket is full, but the day bucket still has no token.
    app.clock.advance(60_000)
    const stillLimited = await list(app, auth(key))
    const wait = await expect429(stillLimited, 'rate_limited')
    // The token the first 429 named, a minute token's refill (1 s at 100 a minute) after it, rounded up.
    expect(wait).toBe(17_280 - 60 + 1)

    app.clock.advance(wait * 1000)
    expect((await list(app, auth(key))).status).toBe(200)
    await expect429(await list(app, auth(key)), 'rate_limited')
  })

  test('the minute bucket is in force while it has fewer tokens', async () => {
    const app = await fresh()
    const key = await app.key('enterprise', { rpm: 2, rpd: 1000 })
    const res = await list(app, auth(key))
    expect(rl(res).limit).toBe('2')
    expect(rl(res).remaining).toBe('1')
  })

  test('rejections take no token from the day bucket either', async () => {
    const app = await fresh()
    const key = await app.key('enterprise', { rpm: 3, rpd: 5 })
    await inTurn(3, () => list(app, auth(key)))
    const rejected = await inTurn(5, () => list(app, auth(key)))
    expect(rejected.every((r) => r.status === 429)).toBe(true)
    app.clock.advance(60_000)
    const res = await list(app, auth(key))
    expect(res.status).toBe(200)
    // 5 - 3 allowed - this one = 1 left in the day bucket, now the one in force.
    expect(rl(res)).toMatchObject({ limit: '5', remaining: '1' })
    expect((await list(app, auth(key))).status).toBe(200)
    await expect429(await list(app, auth(key)), 'rate_limited')
  })
})

describe('bans', () => {
  test('more than banAfter 429s sent before the wait they were told, within a minute, ban the key until the ban ends', async () => {
    const app = await fresh({ banAfter: '3', banSeconds: '60' })
    const key = await app.key('free')
    await inTurn(60, () => list(app, auth(key)))
    // The first refusal names the wait (1 s); the next three, sent before it, are plain 429s that count.
    for (let i = 0; i < 4; i++) await expect429(await list(app, auth(key)), 'rate_limited')
    // The 4th early one (> banAfter) starts the ban and says so; its Retry-After covers it.
    expect(await expect429(await list(app, auth(key)), 'key_banned')).toBe(60)
    // From then on: key_banned, even once the minute bucket has tokens again.
    expect(await expect429(await list(app, auth(key)), 'key_banned')).toBe(60)
    app.clock.advance(30_000)
    const banned = await list(app, auth(key))
    expect(await expect429(banned, 'key_banned')).toBe(30)
    expectRateLimitFields(banned)
    app.clock.advance(29_000)
    expect(await expect429(await list(app, auth(key)), 'key_banned')).toBe(1)
    app.clock.advance(1_000)
    const ok = await list(app, auth(key))
    expect(ok.status).toBe(200)

    const metrics = await app.metrics()
    expect(metrics).toMatch(/^petstore_bans_total 1$/m)
    expect(metrics).toMatch(/^petstore_rate_limit_rejections_total\{reason="key_banned"\} 4$/m)
    expect(metrics).toMatch(/^petstore_rate_limit_rejections_total\{reason="rate_limited"\} 4$/m)
  })

  test('exactly banAfter 429s sent before the wait they were told, within a minute, do not ban', async () => {
    const app = await fresh({ banAfter: '3', banSeconds: '60' })
    const key = await app.key('free')
    await inTurn(60, () => list(app, auth(key)))
    for (let i = 0; i < 4; i++) await expect429(await list(app, auth(key)), 'rate_limited')
    app.clock.advance(1000)
    expect((await list(app, auth(key))).status).toBe(200)
  })

  test('429s spread over more than a minute do not ban', async () => {
    const app = await fresh({ banAfter: '3', banSeconds: '60' })
    const key = await app.key('free')
    await inTurn(60, () => list(app, auth(key)))
    for (let i = 0; i < 3; i++) await expect429(await list(app, auth(key)), 'rate_limited')
    app.clock.advance(61_000)
    await inTurn(60, () => list(app, auth(key)))
    await expect429(await list(app, auth(key)), 'rate_limited')
    app.clock.advance(1000)
    expect((await list(app, auth(key))).status).toBe(200)
  })

  test('the default: after 50 early 429s within a minute, the next early request (the 51st) starts the ban, as the answers say', async () => {
    const app = await fresh()
    const key = await app.key('enterprise', { rpm: 1, rpd: 1000 })
    await list(app, auth(key))
    // The first refusal names the wait (it is not early), then 50 sent before it: each a plain 429 that
    // says how many the rule allows.
    const warning = 'Requests sent before then count toward a ban: after 50 of them within a minute, the next one starts it.'
    for (let i = 0; i < 51; i++) {
      const refused = await list(app, auth(key))
      expect(((await jsonOf(refused.clone() as Response)) as { message: string }).message).toEndWith(warning)
      await expect429(refused, 'rate_limited')
    }
    // The 51st early one starts the ban and says so.
    const banned = await list(app, auth(key))
    expect(((await jsonOf(banned.clone() as Response)) as { message: string }).message).toBe(
      'Banned for 600 s: more than 50 requests within a minute were sent before the time a 429 told them to wait for.',
    )
    await expect429(banned, 'key_banned')
    app.clock.advance(599_000)
    await expect429(await list(app, auth(key)), 'key_banned')
    app.clock.advance(1_000)
    expect((await list(app, auth(key))).status).toBe(200)
  })

  test('an address without a valid key is banned the same way, and the answer says the address is banned', async () => {
    const app = await fresh({ banAfter: '3', banSeconds: '60' })
    await inTurn(60, () => list(app))
    await inTurn(4, () => list(app))
    const banned = await list(app, auth('psk_wrong'))
    const body = await jsonOf(banned.clone() as Response)
    await expect429(banned, 'address_banned')
    expect(body.message).toBe(
      'Your address is banned for 60 s: more than 3 requests without a valid key within a minute were sent before the time a 429 told them to wait for.',
    )
  })

  test("while banned, X-RateLimit-Remaining is 0 and X-RateLimit-Reset is the ban's end, as Retry-After says", async () => {
    const app = await fresh({ banAfter: '3', banSeconds: '60' })
    const key = await app.key('free')
    // 60 allowed, a refusal naming the wait and 3 early ones; the 4th early one starts the ban.
    await inTurn(64, () => list(app, auth(key)))
    const starts = await list(app, auth(key))
    expect(await expect429(starts, 'key_banned')).toBe(60)
    expect(rl(starts)).toEqual({ limit: '60', remaining: '0', reset: String(unixNow(app) + 60) })
    // Half-way through the ban the minute bucket holds 30 tokens again: none of them can be spent. Half a
    // second into a second, Reset is still the ban's end, Retry-After's seconds from the second it is in.
    const end = unixNow(app) + 60
    app.clock.advance(30_500)
    const banned = await list(app, auth(key))
    const retryAfter = await expect429(banned, 'key_banned')
    expect(retryAfter).toBe(30)
    expect(rl(banned)).toEqual({ limit: '60', remaining: '0', reset: String(end) })
    expect(Math.floor(app.clock.now / 1000) + retryAfter).toBe(end)
    expect(banned.headers.get('ratelimit')).toBe(`"minute";r=0;t=${retryAfter}`)
  })

  test('a banned key does not ban other keys', async () => {
    const app = await fresh({ banAfter: '3', banSeconds: '60' })
    const a = await app.key('free')
    const b = await app.key('free')
    await inTurn(65, () => list(app, auth(a)))
    await expect429(await list(app, auth(a)), 'key_banned')
    expect((await list(app, auth(b))).status).toBe(200)
  })
})

describe('isolation and per-address limiting', () => {
  test('two keys have separate buckets', async () => {
    const app = await fresh()
    const a = await app.key('free')
    const b = await app.key('free')
    await inTurn(60, () => list(app, auth(a)))
    await expect429(await list(app, auth(a)), 'rate_limited')
    const res = await list(app, auth(b))
    expect(res.status).toBe(200)
    expect(rl(res).remaining).toBe('59')
  })

  test('requests without a valid key are limited per address with Free numbers: the 61st is a 429, not a 401', async () => {
    const app = await fresh()
    for (let i = 1; i <= 60; i++) {
      // Missing and wrong keys share the address's bucket.
      const res = await list(app, i % 2 ? {} : auth(`psk_guess${i}`))
      expect(res.status).toBe(401)
      expect(rl(res)).toMatchObject({ limit: '60', remaining: String(60 - i) })
      expect(res.headers.get('ratelimit-policy')).toBe(FREE_POLICY)
      await res.arrayBuffer()
    }
    await expect429(await list(app), 'rate_limited')
    await expect429(await list(app, auth('psk_another_guess')), 'rate_limited')
    // A valid key from the same address is limited by its own buckets.
    const res = await list(app, auth(await app.key('free')))
    expect(res.status).toBe(200)
    expect(rl(res).remaining).toBe('59')
  })

  test('with trustProxy the rightmost X-Forwarded-For entry is the client address', async () => {
    const app = await fresh({ trustProxy: ['loopback'] })
    await inTurn(60, () => list(app, { 'x-forwarded-for': '10.0.0.1, 203.0.113.5' }))
    // Same rightmost address, different leftmost (client-supplied) part: same bucket.
    await expect429(await list(app, { 'x-forwarded-for': '198.51.100.7, 203.0.113.5' }), 'rate_limited')
    await expect429(await list(app, { 'x-forwarded-for': '203.0.113.5' }), 'rate_limited')
    // Another rightmost address has its own bucket.
    const other = await list(app, { 'x-forwarded-for': '203.0.113.5, 203.0.113.6' })
    expect(other.status).toBe(401)
    expect(rl(other).remaining).toBe('59')
    // The socket address itself (no header) also has its own bucket.
    expect((await list(app)).status).toBe(401)
  })

  test('without trustProxy X-Forwarded-For is ignored', async () => {
    const app = await fresh()
    await inTurn(60, () => list(app, { 'x-forwarded-for': '203.0.113.5' }))
    await expect429(await list(app, { 'x-forwarded-for': '203.0.113.6' }), 'rate_limited')
    await expect429(await list(app), 'rate_limited')
  })
})

describe('under concurrency', () => {
  /** Sends `n` requests at once over `connections` parallel clients; returns the status counts. */
  async function concurrently(n: number, connections: number, send: (i: number) => Promise<Response>) {
    const counts: Record<number, number> = {}
    let next = 0
    await Promise.all(
      Array.from({ length: connections }, async () => {
        while (next < n) {
          const res = await send(next++)
          await res.arrayBuffer()
          counts[res.status] = (counts[res.status] ?? 0) + 1
        }
      }),
    )
    return counts
  }

  test('64 concurrent clients on one key get exactly the minute bucket of 200s, then exactly the refill', async () => {
    const app = await fresh({ banAfter: '100000' })
    const key = await app.key('enterprise', { rpm: 250, rpd: 100_000 })
    expect(await concurrently(600, 64, () => list(app, auth(key)))).toEqual({ 200: 250, 429: 350 })
    app.clock.advance(30_000)
    expect(await concurrently(300, 64, () => list(app, auth(key)))).toEqual({ 200: 125, 429: 175 })
  })

  test('two keys hammered at the same time each get exactly their own numbers', async () => {
    const app = await fresh({ banAfter: '100000' })
    const a = await app.key('enterprise', { rpm: 100, rpd: 100_000 })
    const b = await app.key('free')
    expect(await concurrently(400, 64, (i) => (i % 2 ? postPet(app.base, a, { name: 'a', categoryId: 1 }) : list(app, auth(b))))).toEqual({
      200: 60,
      201: 100,
      429: 240,
    })
  })

  test('the day bucket holds under concurrency across minutes', async () => {
    const app = await fresh({ banAfter: '100000' })
    const key = await app.key('enterprise', { rpm: 100, rpd: 250 })
    const per = [] as Record<number, number>[]
    for (let minute = 0; minute < 4; minute++) {
      per.push(await concurrently(150, 32, () => list(app, auth(key))))
      app.clock.advance(60_000)
    }
    expect(per).toEqual([{ 200: 100, 429: 50 }, { 200: 100, 429: 50 }, { 200: 50, 429: 100 }, { 429: 150 }])
  })
})
