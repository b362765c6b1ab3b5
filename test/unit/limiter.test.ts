/**
 * The RateLimiter with an injected clock: both buckets, quotas, Retry-After, ban edges, the memory
 * bound on addresses, and saved day buckets.
 */
import { describe, expect, test } from 'bun:test'
import type { Limits } from '../../src/domain/plans'
import { type Decision, RateLimiter } from '../../src/limiter/limiter'
import { named } from '../limiter/stores'

const T0 = Date.UTC(2026, 0, 1)
const FREE: Limits = { rpm: 60, rpd: 1000 }

function make(
  options: Partial<{ banAfter: number; banSeconds: number; maxAddresses: number }> = {},
  saved?: Map<string, { tokens: number; updatedAt: number }>,
) {
  const clock = { now: T0 }
  const limiter = new RateLimiter({ banAfter: 50, banSeconds: 600, maxAddresses: 1000, ...options, now: () => clock.now }, saved)
  return { limiter, clock, advance: (ms: number) => (clock.now += ms) }
}

/** n checks one after the other, as requests in a row. */
async function run(limiter: RateLimiter, n: number, subject = 'key:a', limits = FREE): Promise<Decision[]> {
  const decisions: Decision[] = []
  for (let i = 0; i < n; i++) decisions.push(await limiter.check(named(subject), limits))
  return decisions
}

describe('RateLimiter buckets', () => {
  test('allows the minute capacity, then refuses with retryAfter in whole seconds', async () => {
    const { limiter } = make()
    const allowed = await run(limiter, 60)
    expect(allowed.every((d) => d.allowed)).toBe(true)
    expect(allowed.map((d) => d.quota.remaining)).toEqual(Array.from({ length: 60 }, (_, i) => 59 - i))
    const refused = await limiter.check(named('key:a'), FREE)
    expect(refused).toMatchObject({ allowed: false, reason: 'rate_limited', retryAfter: 1, bannedNow: false })
  })

  test('reports the bucket in force: capacity, whole tokens left, reset time', async () => {
    const { limiter } = make()
    const first = await limiter.check(named('key:a'), FREE)
    expect(first.quota).toEqual({ window: 'minute', limit: 60, remaining: 59, resetAt: T0 / 1000 + 1, resetIn: 1 })
    const dayish = await limiter.check(named('key:b'), { rpm: 100, rpd: 5 })
    expect(dayish.quota).toEqual({ window: 'day', limit: 5, remaining: 4, resetAt: T0 / 1000 + 17_280, resetIn: 17_280 })
  })

  test('a request needs a token in both buckets', async () => {
    const { limiter, advance } = make()
    const limits = { rpm: 2, rpd: 3 }
    expect((await run(limiter, 2, 'key:a', limits)).every((d) => d.allowed)).toBe(true)
    // Minute bucket empty, day bucket has one.
    expect((await limiter.check(named('key:a'), limits)).allowed).toBe(false)
    advance(60_000)
    expect((await limiter.check(named('key:a'), limits)).allowed).toBe(true)
    // Minute bucket has one, day bucket is empty: refused, and Retry-After is the day's wait.
    const refused = await limiter.check(named('key:a'), limits)
    expect(refused.allowed).toBe(false)
    if (!refused.allowed) {
      // A day token takes 86 400 / 3 s = 28 800 s; 60 s of it have passed since the first request.
      expect(refused.retryAfter).toBe(28_800 - 60)
      expect(refused.quota.window).toBe('day')
    }
  })

  test('Retry-After is the longer wait of the exhausted buckets, rounded up, at least 1', async () => {
    const { limiter, advance } = make()
    await run(limiter, 60)
    advance(999)
    const d = await limiter.check(named('key:a'), FREE)
    expect(d.allowed).toBe(false)
    if (!d.allowed) expect(d.retryAfter).toBe(1)
    // The token comes a millisecond later, kept for the turn told: a second on.
    advance(1)
    expect((await limiter.check(named('key:a'), FREE)).allowed).toBe(false)
    advance(999)
    expect((await limiter.check(named('key:a'), FREE)).allowed).toBe(true)
  })

  test('refused requests take no token', async () => {
    const { limiter, advance } = make()
    await run(limiter, 60)
    expect((await run(limiter, 30)).every((d) => !d.allowed)).toBe(true)
    advance(1_000)
    expect((await limiter.check(named('key:a'), FREE)).allowed).toBe(true)
    expect((await limiter.check(named('key:a'), FREE)).allowed).toBe(false)
  })

  test('subjects are independent', async () => {
    const { limiter } = make()
    await run(limiter, 61, 'key:a')
    expect((await limiter.check(named('key:b'), FREE)).allowed).toBe(true)
    expect((await limiter.check(named('ip:1.2.3.4'), FREE)).allowed).toBe(true)
  })

  test('new limits for a subject apply at once', async () => {
    const { limiter } = make()
    await run(limiter, 60)
    expect((await limiter.check(named('key:a'), FREE)).allowed).toBe(false)
    const pro = { rpm: 300, rpd: 10_000 }
    const d = await limiter.check(named('key:a'), pro)
    expect(d.allowed).toBe(true)
    expect(d.quota.limit).toBe(300)
  })

  test("forget drops a key's state", async () => {
    const { limiter } = make()
    await run(limiter, 60)
    limiter.forget(named('key:a'))
    expect((await limiter.check(named('key:a'), FREE)).quota.remaining).toBe(59)
  })

  test('rejects nonsensical options', async () => {
    expect(() => make({ banAfter: 0 })).toThrow()
    expect(() => make({ maxAddresses: 0 })).toThrow()
  })
})

describe('RateLimiter bans', () => {
  const limits = { rpm: 1, rpd: 1000 }

  /** The bucket emptied, then the first refusal, which names the wait and counts toward nothing. */
  async function exhausted(banAfter = 3, banSeconds = 10) {
    const made = make({ banAfter, banSeconds })
    expect((await made.limiter.check(named('key:a'), limits)).allowed).toBe(true)
    expect(await made.limiter.check(named('key:a'), limits)).toMatchObject({ allowed: false, reason: 'rate_limited', retryAfter: 60 })
    return made
  }

  test('exactly banAfter rejections sent before the named wait, within a minute, do not ban', async () => {
    const { limiter, advance } = await exhausted()
    const refused = await run(limiter, 3, 'key:a', limits)
    expect(refused.every((d) => !d.allowed && d.reason === 'rate_limited' && !d.bannedNow)).toBe(true)
    advance(60_000)
    expect((await limiter.check(named('key:a'), limits)).allowed).toBe(true)
  })

  test('banAfter + 1 rejections sent before the named wait, within a minute, ban for banSeconds, and that refusal says so', async () => {
    const { limiter, advance } = await exhausted()
    await run(limiter, 3, 'key:a', limits)
    advance(59_999)
    // The bucket has refilled almost one token, still none whole: the 4th early rejection, within 60 s of the 1st.
    const fourth = await limiter.check(named('key:a'), limits)
    expect(fourth).toMatchObject({ allowed: false, reason: 'key_banned', bannedNow: true, retryAfter: 10 })
    const banned = await limiter.check(named('key:a'), limits)
    expect(banned).toMatchObject({ allowed: false, reason: 'key_banned', bannedNow: false, retryAfter: 10 })
    // Started 59.999 s in, it ends 10 s after the whole second it started in: at 69 s.
    advance(9_000)
    expect(await limiter.check(named('key:a'), limits)).toMatchObject({ allowed: false, reason: 'key_banned', retryAfter: 1 })
    advance(1)
    expect((await limiter.check(named('key:a'), limits)).allowed).toBe(true)
  })

  test('a refusal at or after the time the last refusal named counts toward nothing, however many', async () => {
    const { limiter, advance } = make({ banAfter: 1, banSeconds: 600 })
    const fast = { rpm: 2, rpd: 1000 }
    await run(limiter, 2, 'key:a', fast)
    for (let i = 0; i < 50; i++) {
      // At the named time, or right after the token it names was taken: never early.
      const refused = await limiter.check(named('key:a'), fast)
      expect(refused).toMatchObject({ allowed: false, reason: 'rate_limited', bannedNow: false, retryAfter: 30 })
      advance(30_000)
      expect((await limiter.check(named('key:a'), fast)).allowed).toBe(true)
    }
    // Then asking at once, again and again: the first refusal names a turn, the next six are early but
    // forgiven (as many as its on-time requests let through, at most six); with --ban-after 1, the
    // second counted one bans.
    await limiter.check(named('key:a'), fast)
    for (let i = 0; i < 7; i++)
      expect(await limiter.check(named('key:a'), fast)).toMatchObject({ reason: 'rate_limited', bannedNow: false })
    expect(await limiter.check(named('key:a'), fast)).toMatchObject({ reason: 'key_banned', bannedNow: true })
  })

  test('a client that waits out every Retry-After is never banned, and its request after each wait is let through', async () => {
    const { limiter, advance } = make({ banAfter: 1, banSeconds: 600 })
    let afterWait = 0
    let allowedAfterWait = 0
    let refusals = 0
    for (let elapsed = 0; elapsed < 10 * 60_000; ) {
      const decision = await limiter.check(named('key:a'), FREE)
      if (decision.allowed) {
        advance(7) // as fast as it is let
        elapsed += 7
        continue
      }
      expect(decision).toMatchObject({ reason: 'rate_limited', bannedNow: false })
      refusals++
      advance(decision.retryAfter * 1000)
      elapsed += decision.retryAfter * 1000
      afterWait++
      if ((await limiter.check(named('key:a'), FREE)).allowed) allowedAfterWait++
    }
    expect(refusals).toBeGreaterThan(100)
    expect(allowedAfterWait).toBe(afterWait)
  })

  test('rejections spread over more than a minute do not ban', async () => {
    const { limiter, advance } = await exhausted()
    await run(limiter, 3, 'key:a', limits)
    advance(60_000)
    expect((await limiter.check(named('key:a'), limits)).allowed).toBe(true)
    const fourth = await limiter.check(named('key:a'), limits)
    expect(fourth).toMatchObject({ allowed: false, reason: 'rate_limited', bannedNow: false })
    advance(60_000)
    expect((await limiter.check(named('key:a'), limits)).allowed).toBe(true)
  })

  test('requests while banned do not extend the ban or count as new rejections', async () => {
    const { limiter, advance } = await exhausted(1, 60)
    await run(limiter, 2, 'key:a', limits) // the 2nd early rejection starts a 60 s ban
    await run(limiter, 100, 'key:a', limits)
    advance(60_000)
    expect((await limiter.check(named('key:a'), limits)).allowed).toBe(true)
  })

  test('a ban shorter than the wait for a token says the longer wait, and a retry then is let through', async () => {
    const { limiter, advance } = await exhausted(1, 5)
    await run(limiter, 1, 'key:a', limits)
    const start = await limiter.check(named('key:a'), limits)
    expect(start).toMatchObject({ allowed: false, reason: 'key_banned', bannedNow: true, retryAfter: 60 })
    advance(1_000)
    const banned = await limiter.check(named('key:a'), limits)
    expect(banned).toMatchObject({ allowed: false, reason: 'key_banned', retryAfter: 59 })
    advance(59_000)
    expect((await limiter.check(named('key:a'), limits)).allowed).toBe(true)
  })

  test('after a ban ends, the count of rejections starts afresh', async () => {
    const { limiter, advance } = await exhausted(3, 10)
    await run(limiter, 4, 'key:a', limits) // banned now
    advance(10_000)
    // Still before the 60 s the last refusal named: an early one, the first of a new count.
    expect((await limiter.check(named('key:a'), limits)).allowed).toBe(false)
    const next = await run(limiter, 2, 'key:a', limits)
    expect(next.every((d) => !d.allowed && d.reason === 'rate_limited' && !d.bannedNow)).toBe(true)
  })

  test('the default ban is after more than 50 early rejections', async () => {
    const { limiter } = make()
    await limiter.check(named('key:a'), limits)
    const refused = await run(limiter, 52, 'key:a', limits)
    expect(refused.slice(0, 51).some((d) => !d.allowed && d.bannedNow)).toBe(false)
    expect(refused[51]).toMatchObject({ reason: 'key_banned', bannedNow: true, retryAfter: 600 })
  })

  test('addresses are banned the same way as keys', async () => {
    const { limiter } = make({ banAfter: 2, banSeconds: 10 })
    await run(limiter, 60, 'ip:9.9.9.9', FREE)
    await run(limiter, 3, 'ip:9.9.9.9', FREE)
    expect(await limiter.check(named('ip:9.9.9.9'), FREE)).toMatchObject({ allowed: false, reason: 'key_banned' })
  })
})

describe('RateLimiter memory', () => {
  test('remembers at most maxAddresses addresses, however many it sees', async () => {
    const { limiter } = make({ maxAddresses: 100 })
    for (let i = 0; i < 1_000; i++) await limiter.check(named(`ip:10.0.${i >> 8}.${i & 255}`), FREE)
    expect(limiter.trackedAddresses).toBeLessThanOrEqual(100)
    expect(limiter.trackedAddresses).toBeGreaterThan(0)
  })

  test('evicts the least recently seen address first, keeping an active one limited', async () => {
    const { limiter } = make({ maxAddresses: 10 })
    await run(limiter, 60, 'ip:attacker', FREE)
    expect((await limiter.check(named('ip:attacker'), FREE)).allowed).toBe(false)
    for (let round = 0; round < 10; round++) {
      for (let i = 0; i < 5; i++) await limiter.check(named(`ip:spray-${round}-${i}`), FREE)
      // The attacker keeps sending: it stays the most recent, so its empty bucket is not forgotten.
      expect((await limiter.check(named('ip:attacker'), FREE)).allowed).toBe(false)
    }
    expect(limiter.trackedAddresses).toBeLessThanOrEqual(10)
  })

  test('key subjects are not evicted by address floods', async () => {
    const { limiter } = make({ maxAddresses: 5 })
    await run(limiter, 60, 'key:a')
    for (let i = 0; i < 100; i++) await limiter.check(named(`ip:${i}`), FREE)
    expect((await limiter.check(named('key:a'), FREE)).allowed).toBe(false)
  })
})

describe('RateLimiter saved day buckets', () => {
  test('a saved day bucket is restored for its key', async () => {
    const saved = new Map([['key:a', { tokens: 2, updatedAt: T0 }]])
    const { limiter } = make({}, saved)
    const d = await limiter.check(named('key:a'), FREE)
    expect(d.allowed).toBe(true)
    expect(d.quota).toMatchObject({ window: 'day', remaining: 1 })
    expect((await limiter.check(named('key:a'), FREE)).allowed).toBe(true)
    expect((await limiter.check(named('key:a'), FREE)).allowed).toBe(false)
  })

  test("a saved bucket never exceeds the key's current daily capacity", async () => {
    const saved = new Map([['key:a', { tokens: 5000, updatedAt: T0 }]])
    const { limiter } = make({}, saved)
    await run(limiter, 60, 'key:a', { rpm: 1000, rpd: 10 })
    expect((await limiter.check(named('key:a'), { rpm: 1000, rpd: 10 })).allowed).toBe(false)
  })

  test('unsaved day buckets are key buckets only, and stay unsaved until a save is marked', async () => {
    const { limiter, advance } = make()
    await limiter.check(named('key:a'), FREE)
    await limiter.check(named('ip:1.1.1.1'), FREE)
    const dirty = limiter.unsavedDayBuckets()
    expect([...dirty.keys()]).toEqual(['key:a'])
    // With the limits it was counted under: under others the next start does not take it.
    expect(dirty.get('key:a')).toEqual({ tokens: 999, updatedAt: T0, limits: FREE })
    // A failed save marks nothing: the next one writes the bucket again.
    expect(limiter.unsavedDayBuckets()).toEqual(dirty)
    limiter.markSaved(dirty)
    expect(limiter.unsavedDayBuckets().size).toBe(0)
    // A bucket that changed between the snapshot and the mark stays unsaved.
    advance(1000)
    await limiter.check(named('key:a'), FREE)
    const second = limiter.unsavedDayBuckets()
    advance(1000)
    await limiter.check(named('key:a'), FREE)
    limiter.markSaved(second)
    expect(limiter.unsavedDayBuckets().size).toBe(1)
  })
})
