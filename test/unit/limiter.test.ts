/**
 * The RateLimiter with an injected clock: both buckets, quotas, Retry-After, ban edges, the memory
 * bound on addresses, and saved day buckets.
 */
import { describe, expect, test } from 'bun:test'
import type { Limits } from '../../src/domain/plans'
import { type Decision, RateLimiter } from '../../src/limiter/limiter'

const T0 = Date.UTC(2026, 0, 1)
const FREE: Limits = { rpm: 60, rpd: 1000 }

function make(options: Partial<{ banAfter: number; banSeconds: number; maxAddresses: number }> = {}, saved?: Map<string, { tokens: number; updatedAt: number }>) {
  const clock = { now: T0 }
  const limiter = new RateLimiter(
    { banAfter: 50, banSeconds: 600, maxAddresses: 1000, ...options, now: () => clock.now },
    saved,
  )
  return { limiter, clock, advance: (ms: number) => (clock.now += ms) }
}

/** The in-process limiter decides at once, with no promise: these tests read its decisions directly. */
function decided(answer: Decision | Promise<Decision>): Decision {
  if (answer instanceof Promise) throw new Error('the in-process limiter answered with a promise')
  return answer
}

function run(limiter: RateLimiter, n: number, subject = 'key:a', limits = FREE, isKey = true): Decision[] {
  return Array.from({ length: n }, () => decided(limiter.check(subject, limits, isKey)))
}

describe('RateLimiter buckets', () => {
  test('allows the minute capacity, then refuses with retryAfter in whole seconds', () => {
    const { limiter } = make()
    const allowed = run(limiter, 60)
    expect(allowed.every((d) => d.allowed)).toBe(true)
    expect(allowed.map((d) => d.quota.remaining)).toEqual(Array.from({ length: 60 }, (_, i) => 59 - i))
    const refused = decided(limiter.check('key:a', FREE, true))
    expect(refused).toMatchObject({ allowed: false, reason: 'rate_limited', retryAfter: 1, bannedNow: false })
  })

  test('reports the bucket in force: capacity, whole tokens left, reset time', () => {
    const { limiter } = make()
    const first = decided(limiter.check('key:a', FREE, true))
    expect(first.quota).toEqual({ window: 'minute', limit: 60, remaining: 59, resetAt: T0 / 1000 + 1, resetIn: 1 })
    const dayish = decided(limiter.check('key:b', { rpm: 100, rpd: 5 }, true))
    expect(dayish.quota).toEqual({ window: 'day', limit: 5, remaining: 4, resetAt: T0 / 1000 + 17_280, resetIn: 17_280 })
  })

  test('a request needs a token in both buckets', () => {
    const { limiter, advance } = make()
    const limits = { rpm: 2, rpd: 3 }
    expect(run(limiter, 2, 'key:a', limits).every((d) => d.allowed)).toBe(true)
    // Minute bucket empty, day bucket has one.
    expect(decided(limiter.check('key:a', limits, true)).allowed).toBe(false)
    advance(60_000)
    expect(decided(limiter.check('key:a', limits, true)).allowed).toBe(true)
    // Minute bucket has one, day bucket is empty: refused, and Retry-After is the day's wait.
    const refused = decided(limiter.check('key:a', limits, true))
    expect(refused.allowed).toBe(false)
    if (!refused.allowed) {
      // A day token takes 86 400 / 3 s = 28 800 s; 60 s of it have passed since the first request.
      expect(refused.retryAfter).toBe(28_800 - 60)
      expect(refused.quota.window).toBe('day')
    }
  })

  test('Retry-After is the longer wait of the exhausted buckets, rounded up, at least 1', () => {
    const { limiter, advance } = make()
    run(limiter, 60)
    advance(999)
    const d = decided(limiter.check('key:a', FREE, true))
    expect(d.allowed).toBe(false)
    if (!d.allowed) expect(d.retryAfter).toBe(1)
    advance(1)
    expect(decided(limiter.check('key:a', FREE, true)).allowed).toBe(true)
  })

  test('refused requests take no token', () => {
    const { limiter, advance } = make()
    run(limiter, 60)
    expect(run(limiter, 30).every((d) => !d.allowed)).toBe(true)
    advance(1_000)
    expect(decided(limiter.check('key:a', FREE, true)).allowed).toBe(true)
    expect(decided(limiter.check('key:a', FREE, true)).allowed).toBe(false)
  })

  test('subjects are independent', () => {
    const { limiter } = make()
    run(limiter, 61, 'key:a')
    expect(decided(limiter.check('key:b', FREE, true)).allowed).toBe(true)
    expect(decided(limiter.check('ip:1.2.3.4', FREE, false)).allowed).toBe(true)
  })

  test('new limits for a subject apply at once', () => {
    const { limiter } = make()
    run(limiter, 60)
    expect(decided(limiter.check('key:a', FREE, true)).allowed).toBe(false)
    const pro = { rpm: 300, rpd: 10_000 }
    const d = decided(limiter.check('key:a', pro, true))
    expect(d.allowed).toBe(true)
    expect(d.quota.limit).toBe(300)
  })

  test('forgetKey drops a key\'s state', () => {
    const { limiter } = make()
    run(limiter, 60)
    limiter.forgetKey('key:a')
    expect(decided(limiter.check('key:a', FREE, true)).quota.remaining).toBe(59)
  })

  test('rejects nonsensical options', () => {
    expect(() => make({ banAfter: 0 })).toThrow()
    expect(() => make({ maxAddresses: 0 })).toThrow()
  })
})

describe('RateLimiter bans', () => {
  const limits = { rpm: 1, rpd: 1000 }

  function exhausted(banAfter = 3, banSeconds = 10) {
    const made = make({ banAfter, banSeconds })
    expect(decided(made.limiter.check('key:a', limits, true)).allowed).toBe(true)
    return made
  }

  test('exactly banAfter rejections within a minute do not ban', () => {
    const { limiter, advance } = exhausted()
    const refused = run(limiter, 3, 'key:a', limits)
    expect(refused.every((d) => !d.allowed && d.reason === 'rate_limited' && !d.bannedNow)).toBe(true)
    advance(60_000)
    expect(decided(limiter.check('key:a', limits, true)).allowed).toBe(true)
  })

  test('banAfter + 1 rejections within a minute ban for banSeconds', () => {
    const { limiter, advance } = exhausted()
    run(limiter, 3, 'key:a', limits)
    advance(59_999)
    // The bucket has refilled almost one token, still none whole: the 4th rejection, within 60 s of the 1st.
    const fourth = decided(limiter.check('key:a', limits, true))
    expect(fourth).toMatchObject({ allowed: false, reason: 'rate_limited', bannedNow: true, retryAfter: 10 })
    const banned = decided(limiter.check('key:a', limits, true))
    expect(banned).toMatchObject({ allowed: false, reason: 'key_banned', bannedNow: false, retryAfter: 10 })
    advance(9_001)
    expect(decided(limiter.check('key:a', limits, true))).toMatchObject({ allowed: false, reason: 'key_banned', retryAfter: 1 })
    advance(999)
    expect(decided(limiter.check('key:a', limits, true)).allowed).toBe(true)
  })

  test('rejections spread over more than a minute do not ban', () => {
    const { limiter, advance } = exhausted()
    run(limiter, 3, 'key:a', limits)
    advance(60_000)
    expect(decided(limiter.check('key:a', limits, true)).allowed).toBe(true)
    const fourth = decided(limiter.check('key:a', limits, true))
    expect(fourth).toMatchObject({ allowed: false, reason: 'rate_limited', bannedNow: false })
    advance(60_000)
    expect(decided(limiter.check('key:a', limits, true)).allowed).toBe(true)
  })

  test('requests while banned do not extend the ban or count as new rejections', () => {
    const { limiter, advance } = exhausted(1, 60)
    run(limiter, 2, 'key:a', limits) // the 2nd rejection starts a 60 s ban
    run(limiter, 100, 'key:a', limits)
    advance(60_000)
    expect(decided(limiter.check('key:a', limits, true)).allowed).toBe(true)
  })

  test('a ban shorter than the wait for a token says the longer wait, and a retry then is let through', () => {
    const { limiter, advance } = exhausted(1, 5)
    run(limiter, 1, 'key:a', limits)
    const start = decided(limiter.check('key:a', limits, true))
    expect(start).toMatchObject({ allowed: false, reason: 'rate_limited', bannedNow: true, retryAfter: 60 })
    advance(1_000)
    const banned = decided(limiter.check('key:a', limits, true))
    expect(banned).toMatchObject({ allowed: false, reason: 'key_banned', retryAfter: 59 })
    advance(59_000)
    expect(decided(limiter.check('key:a', limits, true)).allowed).toBe(true)
  })

  test('after a ban ends, the count of rejections starts afresh', () => {
    const { limiter, advance } = exhausted(3, 10)
    run(limiter, 4, 'key:a', limits) // banned now
    advance(10_000)
    expect(decided(limiter.check('key:a', limits, true)).allowed).toBe(false) // bucket still empty: a plain 429
    const next = run(limiter, 2, 'key:a', limits)
    expect(next.every((d) => !d.allowed && d.reason === 'rate_limited' && !d.bannedNow)).toBe(true)
  })

  test('the default ban is after more than 50 rejections', () => {
    const { limiter } = make()
    decided(limiter.check('key:a', limits, true))
    const refused = run(limiter, 51, 'key:a', limits)
    expect(refused.slice(0, 50).some((d) => !d.allowed && d.bannedNow)).toBe(false)
    expect(refused[50]).toMatchObject({ bannedNow: true, retryAfter: 600 })
  })

  test('addresses are banned the same way as keys', () => {
    const { limiter } = make({ banAfter: 2, banSeconds: 10 })
    run(limiter, 60, 'ip:9.9.9.9', FREE, false)
    run(limiter, 3, 'ip:9.9.9.9', FREE, false)
    expect(decided(limiter.check('ip:9.9.9.9', FREE, false))).toMatchObject({ allowed: false, reason: 'key_banned' })
  })
})

describe('RateLimiter memory', () => {
  test('remembers at most maxAddresses addresses, however many it sees', () => {
    const { limiter } = make({ maxAddresses: 100 })
    for (let i = 0; i < 1_000; i++) decided(limiter.check(`ip:10.0.${i >> 8}.${i & 255}`, FREE, false))
    expect(limiter.trackedAddresses).toBeLessThanOrEqual(100)
    expect(limiter.trackedAddresses).toBeGreaterThan(0)
  })

  test('evicts the least recently seen address first, keeping an active one limited', () => {
    const { limiter } = make({ maxAddresses: 10 })
    run(limiter, 60, 'ip:attacker', FREE, false)
    expect(decided(limiter.check('ip:attacker', FREE, false)).allowed).toBe(false)
    for (let round = 0; round < 10; round++) {
      for (let i = 0; i < 5; i++) decided(limiter.check(`ip:spray-${round}-${i}`, FREE, false))
      // The attacker keeps sending: it stays the most recent, so its empty bucket is not forgotten.
      expect(decided(limiter.check('ip:attacker', FREE, false)).allowed).toBe(false)
    }
    expect(limiter.trackedAddresses).toBeLessThanOrEqual(10)
  })

  test('key subjects are not evicted by address floods', () => {
    const { limiter } = make({ maxAddresses: 5 })
    run(limiter, 60, 'key:a')
    for (let i = 0; i < 100; i++) decided(limiter.check(`ip:${i}`, FREE, false))
    expect(decided(limiter.check('key:a', FREE, true)).allowed).toBe(false)
  })
})

describe('RateLimiter saved day buckets', () => {
  test('a saved day bucket is restored for its key', () => {
    const saved = new Map([['key:a', { tokens: 2, updatedAt: T0 }]])
    const { limiter } = make({}, saved)
    const d = decided(limiter.check('key:a', FREE, true))
    expect(d.allowed).toBe(true)
    expect(d.quota).toMatchObject({ window: 'day', remaining: 1 })
    expect(decided(limiter.check('key:a', FREE, true)).allowed).toBe(true)
    expect(decided(limiter.check('key:a', FREE, true)).allowed).toBe(false)
  })

  test('a saved bucket never exceeds the key\'s current daily capacity', () => {
    const saved = new Map([['key:a', { tokens: 5000, updatedAt: T0 }]])
    const { limiter } = make({}, saved)
    run(limiter, 60, 'key:a', { rpm: 1000, rpd: 10 })
    expect(decided(limiter.check('key:a', { rpm: 1000, rpd: 10 }, true)).allowed).toBe(false)
  })

  test('unsaved day buckets are key buckets only, and stay unsaved until a save is marked', () => {
    const { limiter, advance } = make()
    decided(limiter.check('key:a', FREE, true))
    decided(limiter.check('ip:1.1.1.1', FREE, false))
    const dirty = limiter.unsavedDayBuckets()
    expect([...dirty.keys()]).toEqual(['key:a'])
    expect(dirty.get('key:a')).toEqual({ tokens: 999, updatedAt: T0 })
    // A failed save marks nothing: the next one writes the bucket again.
    expect(limiter.unsavedDayBuckets()).toEqual(dirty)
    limiter.markSaved(dirty)
    expect(limiter.unsavedDayBuckets().size).toBe(0)
    // A bucket that changed between the snapshot and the mark stays unsaved.
    advance(1000)
    decided(limiter.check('key:a', FREE, true))
    const second = limiter.unsavedDayBuckets()
    advance(1000)
    decided(limiter.check('key:a', FREE, true))
    limiter.markSaved(second)
    expect(limiter.unsavedDayBuckets().size).toBe(1)
  })
})
