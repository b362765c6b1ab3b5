/**
 * One suite, run through RateLimiter against each store (in process and Redis), with an injected clock:
 * both stores must keep the same rules, the ones the unit tests pin down for the in-process store.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import type { Limits } from '../../src/domain/plans'
import type { AddressSubject } from '../../src/domain/subject'
import type { Decision } from '../../src/limiter/limiter'
import { describeWithEngines } from '../support/engines'
import { type RedisServer, startRedis } from '../support/redis'
import { type AnyLimiter, futureClock, type LimiterSettings, memoryLimiter, redisLimiter, uniquePrefix, named } from './stores'

const FREE: Limits = { rpm: 60, rpd: 1000 }

type Make = (settings: LimiterSettings) => AnyLimiter

function conformance(makeLimiter: () => Make) {
  const made: AnyLimiter[] = []
  afterAll(() => made.forEach((limiter) => limiter.close()))

  function make(settings: LimiterSettings = {}) {
    const time = futureClock()
    const limiter = makeLimiter()({ ...settings, now: () => time.clock.now })
    made.push(limiter)
    const check = (subject = 'key:a', limits = FREE): Promise<Decision> => Promise.resolve(limiter.check(named(subject), limits))
    const run = async (n: number, subject = 'key:a', limits = FREE) => {
      const decisions: Decision[] = []
      for (let i = 0; i < n; i++) decisions.push(await check(subject, limits))
      return decisions
    }
    return { limiter, check, run, ...time }
  }

  test('allows the minute capacity, then refuses with Retry-After in whole seconds', async () => {
    const { check, run, start } = make()
    const allowed = await run(60)
    expect(allowed.every((d) => d.allowed)).toBe(true)
    expect(allowed.map((d) => d.quota.remaining)).toEqual(Array.from({ length: 60 }, (_, i) => 59 - i))
    expect(allowed[0]!.quota).toEqual({ window: 'minute', limit: 60, remaining: 59, resetAt: start / 1000 + 1, resetIn: 1 })
    expect(await check()).toMatchObject({ allowed: false, reason: 'rate_limited', retryAfter: 1, bannedNow: false })
  })

  test("X-RateLimit-Reset is the second the bucket is full, rounded up once; RateLimit's t the seconds until then", async () => {
    const { check, advance, start } = make()
    expect((await check()).quota).toMatchObject({ remaining: 59, resetAt: start / 1000 + 1, resetIn: 1 })
    // 250 ms later: 59.25 left, one taken: full 1.75 s on, at 2 s exactly (not the next second up from
    // 0.25 s plus 1.75 s rounded up, which said 3).
    advance(250)
    expect((await check()).quota).toMatchObject({ remaining: 58, resetAt: start / 1000 + 2, resetIn: 2 })
  })

  test('the day bucket is in force when it holds fewer whole tokens', async () => {
    const { check, run, start } = make()
    const limits = { rpm: 100, rpd: 5 }
    const first = await check('key:b', limits)
    expect(first.quota).toEqual({ window: 'day', limit: 5, remaining: 4, resetAt: start / 1000 + 17_280, resetIn: 17_280 })
    expect((await run(4, 'key:b', limits)).every((d) => d.allowed)).toBe(true)
    const refused = await check('key:b', limits)
    expect(refused).toMatchObject({ allowed: false, reason: 'rate_limited', retryAfter: 17_280 })
    expect(refused.quota.window).toBe('day')
  })

  test('peek says the quota a request would see, taking nothing; a subject not seen, or seen with other limits, is full', async () => {
    const { limiter, check, run, advance, start } = make()
    const peek = (subject = 'key:a', limits = FREE) => Promise.resolve(limiter.peek(named(subject), limits))
    expect(await peek('key:new')).toEqual({ window: 'minute', limit: 60, remaining: 60, resetAt: start / 1000, resetIn: 0 })
    await run(10)
    const peeked = await peek()
    expect(peeked).toEqual({ window: 'minute', limit: 60, remaining: 50, resetAt: start / 1000 + 10, resetIn: 10 })
    expect(await peek()).toEqual(peeked)
    advance(2_000)
    expect((await peek()).remaining).toBe(52)
    expect((await check()).quota.remaining).toBe(51)
    expect((await peek('key:a', { rpm: 5, rpd: 50 })).remaining).toBe(5)
  })

  test('a request needs a token in both buckets, and a refusal takes none', async () => {
    const { check, run, advance } = make()
    const limits = { rpm: 2, rpd: 3 }
    expect((await run(2, 'key:a', limits)).every((d) => d.allowed)).toBe(true)
    expect(await check('key:a', limits)).toMatchObject({ allowed: false, retryAfter: 30 })
    advance(60_000)
    expect((await check('key:a', limits)).allowed).toBe(true)
    const refused = await check('key:a', limits)
    expect(refused).toMatchObject({ allowed: false, retryAfter: 28_800 - 60 })
  })

  test('refusals in a row name the tokens in turn, so clients sharing a subject come back one at a time', async () => {
    const { check, run, advance } = make()
    await run(60)
    const refused = await run(5)
    expect(refused.map((d) => !d.allowed && d.retryAfter)).toEqual([1, 2, 3, 4, 5])
    // Each named time finds its token, if each client comes back at its own.
    for (let i = 0; i < 5; i++) {
      advance(1_000)
      expect((await check()).allowed).toBe(true)
    }
    // Once every named time has passed, a refusal names the next token alone.
    expect(await check()).toMatchObject({ allowed: false, retryAfter: 1 })
    // Only the minute paces the turns: asking again while a day token is hours away names about the same time.
    const { run: runDay } = make()
    const dayLimits = { rpm: 60, rpd: 2 }
    await runDay(2, 'key:d', dayLimits)
    expect((await runDay(2, 'key:d', dayLimits)).map((d) => !d.allowed && d.retryAfter)).toEqual([43_200, 43_201])
  })

  /**
   * `workers` workers on one subject (8 unless said), each sending as soon as it is let and waiting its
   * Retry-After after a 429, for `steps` requests in all on an injected clock: every refusal must be
   * rate_limited (no ban). Answers the requests allowed, the time it took, and of the requests sent after
   * waiting out a 429, how many there were and how many were let through.
   */
  async function politeFleet(
    subject: string,
    limits: Limits,
    steps: number,
    {
      workers = 8,
      banAfter = 7,
      // When a worker sends next, after an answer: at once after a 200, its Retry-After after a 429.
      nextDelay = (decision: Decision) => (decision.allowed ? 1 : decision.retryAfter * 1000),
      // Milliseconds between the workers' first requests.
      startApart = 0,
    } = {},
  ): Promise<{ allowed: number; elapsed: number; afterWait: number; allowedAfterWait: number }> {
    const { check, advance } = make({ banAfter, banSeconds: 600 })
    const nextAt = Array.from({ length: workers }, (_, i) => i * startApart)
    const waited = Array.from({ length: workers }, () => false)
    let clock = 0
    let allowed = 0
    let afterWait = 0
    let allowedAfterWait = 0
    for (let step = 0; step < steps; step++) {
      const worker = nextAt.indexOf(Math.min(...nextAt))
      if (nextAt[worker]! > clock) {
        advance(nextAt[worker]! - clock)
        clock = nextAt[worker]!
      }
      const decision = await check(subject, limits)
      if (decision.allowed) allowed++
      else expect(decision.reason).toBe('rate_limited')
      if (waited[worker]) {
        afterWait++
        if (decision.allowed) allowedAfterWait++
      }
      waited[worker] = !decision.allowed
      nextAt[worker] = clock + nextDelay(decision)
    }
    return { allowed, elapsed: clock, afterWait, allowedAfterWait }
  }

  /** Over a hundred requests sent after a wait, and more than `share` of them let through. */
  function expectWaitsEndInToken(fleet: { afterWait: number; allowedAfterWait: number }, share: number): void {
    expect(fleet.afterWait).toBeGreaterThan(100)
    expect(fleet.allowedAfterWait / fleet.afterWait).toBeGreaterThan(share)
  }

  /** Whole numbers below `range` from a seeded generator (Lehmer's), so a run is the same every time. */
  function seeded(seed: number): (range: number) => number {
    let state = seed
    return (range) => {
      state = (state * 16_807) % 2_147_483_647
      return state % range
    }
  }

  test('clients sharing a key of a faster plan (a token every 0.2 s) that each wait out their Retry-After are never banned', async () => {
    // Retry-After is in whole seconds: times named closer than a second apart would send the workers back together.
    await politeFleet('key:pro', { rpm: 300, rpd: 1_000_000 }, 3_000)
  })

  test('clients sharing a subject that each wait out their own Retry-After are never banned', async () => {
    // When the bucket first runs dry all eight are refused at once, before the time the first 429 named:
    // seven early refusals, which --ban-after (7 here) must allow; after that none is early.
    const { allowed, elapsed } = await politeFleet('key:a', { rpm: 60, rpd: 100_000 }, 2_000)
    // Past the first minute's 60, about one a second: the bucket's rate, none lost to a ban.
    expect(allowed).toBeGreaterThan(60 + (elapsed - 60_000) / 1000 - 10)
  })

  test('a fleet as large as --ban-after allows (here 30 workers, bans after 50) is told a time apart for each, never banned', async () => {
    // Every worker needs a time of its own: were the times told apart capped below the fleet's size,
    // workers told the same time would come back together, be refused early, and get the key banned.
    const { allowed, elapsed } = await politeFleet('key:a', { rpm: 60, rpd: 100_000 }, 3_000, { workers: 30, banAfter: 50 })
    expect(allowed).toBeGreaterThan(60 + (elapsed - 60_000) / 1000 - 10)
  })

  /**
   * One client sending about every `everyMs` on an injected clock for `ms`, whatever it is told: its
   * answers in order. Its pace wavers by up to a tenth, as a real client's does: one exactly in step
   * with whole seconds comes back to some earlier 429's time at each request (see docs/api.md).
   */
  async function steady(limits: Limits, everyMs: number, ms: number, settings: LimiterSettings) {
    const { check, advance } = make(settings)
    const decisions: Decision[] = []
    for (let at = 0, i = 0; at < ms; i++) {
      decisions.push(await check('key:a', limits))
      const step = everyMs * (1 + (((i * 7) % 11) - 5) / 50)
      advance(step)
      at += step
    }
    return decisions
  }

  test('a client that alternates allowed and refused without waiting its Retry-After (Pro, ten a second) is banned', async () => {
    // The bucket's 300 last a minute at ten a second; then every other request is refused before the time it was told.
    const decisions = await steady({ rpm: 300, rpd: 1_000_000 }, 100, 180_000, { banAfter: 50, banSeconds: 600 })
    const banned = decisions.findIndex((d) => !d.allowed && d.bannedNow)
    expect(banned).toBeGreaterThan(600)
    expect(banned).toBeLessThan(600 + 30 * 10)
    // Until then the times told stay within a minute: a flood of refusals does not send the key's other clients further.
    expect(Math.max(...decisions.slice(0, banned).map((d) => (d.allowed ? 0 : d.retryAfter)))).toBeLessThanOrEqual(60)
  })

  test('a client at three times its bucket rate (Free) is banned, and the times told stay within a minute meanwhile', async () => {
    const decisions = await steady(FREE, 333, 240_000, { banAfter: 50, banSeconds: 600 })
    const banned = decisions.findIndex((d) => !d.allowed && d.bannedNow)
    expect(banned).toBeGreaterThan(0)
    expect(banned).toBeLessThan(120_000 / 333)
    const before = decisions.slice(0, banned).filter((d) => !d.allowed)
    expect(before.every((d) => !d.allowed && d.reason === 'rate_limited' && d.retryAfter <= 60)).toBe(true)
  })

  test('workers sharing a key that each wait out their Retry-After and work a while after each answer let through are never banned', async () => {
    // Let through, a worker spends 0.9 s on the answer before its next request: by then others wait for
    // their turns, so that request is early, and refused. The request let through at its turn forgives it.
    const nextDelay = (decision: Decision) => (decision.allowed ? 900 : decision.retryAfter * 1000)
    await politeFleet('key:a', FREE, 3_000, { workers: 8, banAfter: 50, nextDelay, startApart: 1 })
    const pro = await politeFleet('key:b', { rpm: 300, rpd: 1_000_000 }, 3_000, { workers: 30, banAfter: 50, nextDelay, startApart: 1 })
    const minute = await politeFleet('key:c', { rpm: 60, rpd: 100_000 }, 3_000, { workers: 8, banAfter: 50, nextDelay, startApart: 1 })
    // The token a 429 told of is kept for its turn: a worker let through, back before others' turns, does
    // not take it, so a wait mostly ends in a 200 (without keeping it, half or more of them ended in a 429).
    for (const fleet of [pro, minute]) expectWaitsEndInToken(fleet, 0.9)
  })

  test('workers that work a while between requests, and come back a little after their time, mostly find their token', async () => {
    // Three on a Free-rate key, working 0.5 to 1.5 s on each answer let through, back 0 to 20 ms after their
    // time (a network's delay); seeded, so the run is the same every time.
    const next = seeded(11)
    const nextDelay = (decision: Decision) => (decision.allowed ? 500 + next(1_000) : decision.retryAfter * 1000 + next(20))
    const fleet = await politeFleet('key:a', { rpm: 60, rpd: 100_000 }, 1_500, { workers: 3, banAfter: 50, nextDelay, startApart: 1 })
    expectWaitsEndInToken(fleet, 0.95)
  })

  test('workers that come back later than told (a backoff of their own, up to 5 s more) still find a turn and are never banned', async () => {
    // 40 on a Free key; a turn waits a minute past its time for its client, and any request may take it then.
    // Extra waits of 0 to 5 s from a seeded generator, so the run is the same every time.
    const next = seeded(7)
    const nextDelay = (decision: Decision) => {
      const extra = next(5_000)
      return decision.allowed ? 5 : decision.retryAfter * 1000 + extra
    }
    await politeFleet('key:a', FREE, 4_000, { workers: 40, banAfter: 50, nextDelay, startApart: 1 })
  })

  test('buckets refill over time: one token per second at 60 a minute, full after a minute', async () => {
    const { check, run, advance } = make()
    await run(60)
    advance(999)
    expect(await check()).toMatchObject({ allowed: false, retryAfter: 1 })
    // The token comes a millisecond later, and is kept for the turn that 429 told (a second on).
    advance(1)
    expect(await check()).toMatchObject({ allowed: false, reason: 'rate_limited' })
    advance(999)
    expect((await check()).allowed).toBe(true)
    expect((await check()).allowed).toBe(false)
    advance(60_000)
    expect((await check()).quota.remaining).toBe(59)
  })

  test('subjects are independent, and new limits for a subject apply at once', async () => {
    const { check, run } = make()
    await run(61)
    expect((await check('key:b')).allowed).toBe(true)
    expect((await check('ip:1.2.3.4', FREE)).allowed).toBe(true)
    const pro = await check('key:a', { rpm: 300, rpd: 10_000 })
    expect(pro).toMatchObject({ allowed: true, quota: { limit: 300, remaining: 299 } })
  })

  test('new limits start the buckets afresh but keep a ban until it ends', async () => {
    const { check, run, advance } = make({ banAfter: 1, banSeconds: 600 })
    await run(62)
    expect(await check()).toMatchObject({ reason: 'key_banned' })
    const pro = { rpm: 300, rpd: 10_000 }
    expect(await check('key:a', pro)).toMatchObject({ allowed: false, reason: 'key_banned' })
    advance(600_000)
    expect(await check('key:a', pro)).toMatchObject({ allowed: true, quota: { limit: 300, remaining: 299 } })
  })

  test("forget drops a key's buckets and ban", async () => {
    const { limiter, check, run } = make({ banAfter: 1, banSeconds: 600 })
    await run(62)
    expect(await check()).toMatchObject({ reason: 'key_banned' })
    await limiter.forget(named('key:a'))
    expect(await check()).toMatchObject({ allowed: true, quota: { remaining: 59 } })
  })

  describe('bans', () => {
    const limits = { rpm: 1, rpd: 1000 }

    /** The bucket emptied, then the first refusal, which names the wait and counts toward nothing. */
    async function exhausted(banAfter = 3, banSeconds = 10) {
      const made = make({ banAfter, banSeconds })
      expect((await made.check('key:a', limits)).allowed).toBe(true)
      expect(await made.check('key:a', limits)).toMatchObject({ allowed: false, reason: 'rate_limited', retryAfter: 60 })
      return made
    }

    test('banAfter early rejections within a minute do not ban', async () => {
      const { check, run, advance } = await exhausted()
      expect((await run(3, 'key:a', limits)).every((d) => !d.allowed && d.reason === 'rate_limited' && !d.bannedNow)).toBe(true)
      advance(60_000)
      expect((await check('key:a', limits)).allowed).toBe(true)
    })

    test('banAfter + 1 early rejections within a minute ban, the refusal that starts it says so, and Retry-After covers it', async () => {
      const { check, run, advance } = await exhausted()
      await run(3, 'key:a', limits)
      advance(59_999)
      expect(await check('key:a', limits)).toMatchObject({ allowed: false, reason: 'key_banned', bannedNow: true, retryAfter: 10 })
      expect(await check('key:a', limits)).toMatchObject({ allowed: false, reason: 'key_banned', bannedNow: false, retryAfter: 10 })
      // Started 59.999 s in, it ends 10 s after the whole second it started in: at 69 s.
      advance(9_000)
      expect(await check('key:a', limits)).toMatchObject({ reason: 'key_banned', retryAfter: 1 })
      advance(1)
      expect((await check('key:a', limits)).allowed).toBe(true)
    })

    test("a ban answer's X-RateLimit-Reset is the second Retry-After names, counted from the second it is given in, and the ban ends then", async () => {
      const { check, run, advance, start } = make({ banAfter: 3, banSeconds: 10 })
      // The bucket emptied, the refusal naming the wait, three early ones; 250 ms later the 4th early one bans.
      await run(64)
      advance(250)
      const seen: Decision[] = [await check()]
      for (const step of [4_350, 5_399]) {
        advance(step)
        seen.push(await check())
      }
      // At 0.25 s, 4.6 s and 9.999 s: Retry-After counts from the whole second the answer is in (its Date),
      // to the ban's end, which is banSeconds after the whole second it started in.
      expect(seen.map((d) => d.allowed || [d.reason, d.retryAfter, d.quota.resetAt - start / 1000, d.quota.resetIn])).toEqual([
        ['key_banned', 10, 10, 10],
        ['key_banned', 6, 10, 6],
        ['key_banned', 1, 10, 1],
      ])
      advance(1)
      expect((await check()).allowed).toBe(true)
    })

    test('rejections spread over more than a minute do not ban', async () => {
      const { check, run, advance } = await exhausted()
      await run(3, 'key:a', limits)
      advance(60_000)
      expect((await check('key:a', limits)).allowed).toBe(true)
      expect(await check('key:a', limits)).toMatchObject({ reason: 'rate_limited', bannedNow: false })
    })

    test('a ban shorter than the wait for a token says the longer wait', async () => {
      const { check, advance } = await exhausted(1, 5)
      await check('key:a', limits)
      expect(await check('key:a', limits)).toMatchObject({ reason: 'key_banned', bannedNow: true, retryAfter: 60 })
      advance(1_000)
      expect(await check('key:a', limits)).toMatchObject({ reason: 'key_banned', retryAfter: 59 })
      advance(59_000)
      expect((await check('key:a', limits)).allowed).toBe(true)
    })

    test('requests while banned do not extend it, and after it the count starts afresh', async () => {
      const { check, run, advance } = await exhausted(1, 60)
      await run(2, 'key:a', limits)
      expect((await run(50, 'key:a', limits)).every((d) => !d.allowed && d.reason === 'key_banned')).toBe(true)
      advance(60_000)
      expect((await check('key:a', limits)).allowed).toBe(true)
      expect(await check('key:a', limits)).toMatchObject({ reason: 'rate_limited', bannedNow: false })
    })

    test('a refusal at or after the time the last one named counts toward nothing', async () => {
      const { check, run, advance } = make({ banAfter: 1, banSeconds: 600 })
      const two = { rpm: 2, rpd: 1000 }
      await run(2, 'key:a', two)
      for (let i = 0; i < 5; i++) {
        expect(await check('key:a', two)).toMatchObject({ reason: 'rate_limited', bannedNow: false, retryAfter: 30 })
        advance(30_000)
        expect((await check('key:a', two)).allowed).toBe(true)
      }
      // Then it asks at once, again and again: the first refusal names a turn; the next five are early
      // but forgiven, as many as its requests let through at their turn (at most six); two more ban.
      await check('key:a', two)
      for (let i = 0; i < 6; i++) expect(await check('key:a', two)).toMatchObject({ reason: 'rate_limited', bannedNow: false })
      expect(await check('key:a', two)).toMatchObject({ reason: 'key_banned', bannedNow: true })
    })

    test('addresses are banned the same way as keys', async () => {
      const { check, run } = make({ banAfter: 2, banSeconds: 10 })
      await run(63, 'ip:9.9.9.9', FREE)
      expect(await check('ip:9.9.9.9', FREE)).toMatchObject({ allowed: false, reason: 'key_banned' })
    })
  })
}

describe('limiter conformance: in process', () => {
  conformance(() => memoryLimiter)
})

describeWithEngines(['redis-server'], 'limiter conformance: Redis', () => {
  let redis: RedisServer
  beforeAll(async () => {
    redis = await startRedis()
  })
  afterAll(() => redis.destroy())

  // Decisions, not deadlines, are what these tests check: a loaded host must not turn a slow answer into a failure.
  conformance(() => (settings) => redisLimiter(redis.url, settings, { timeoutMs: 2_000 }))

  test('a ban is answered from memory until it ends, with no script call; a lift on one instance reaches the other within a second', async () => {
    const prefix = uniquePrefix()
    // The real clock: the held ban ends by it. Health checks (and with them the count of lifts) every 100 ms.
    const make = () => redisLimiter(redis.url, { banAfter: 1, banSeconds: 600 }, { prefix, timeoutMs: 2_000, reconnectEveryMs: 100 })
    const [one, other] = [make(), make()]
    const limits = { rpm: 1, rpd: 1000 }
    const address = named('ip:198.51.100.77')
    try {
      const first = await Promise.all([1, 2, 3, 4].map(() => one.check(address, limits)))
      expect(first.map((d) => (d.allowed ? 'allowed' : d.reason))).toEqual(['allowed', 'rate_limited', 'rate_limited', 'key_banned'])
      // The other instance learns of the ban with one call.
      expect(await other.check(address, limits)).toMatchObject({ reason: 'key_banned' })
      const scriptCalls = async () => {
        const stats = (await redis.admin.send('INFO', ['commandstats'])) as string
        return Number(/cmdstat_evalsha:calls=(\d+)/.exec(stats)?.[1] ?? 0) + Number(/cmdstat_eval:calls=(\d+)/.exec(stats)?.[1] ?? 0)
      }
      const before = await scriptCalls()
      const refusals = await Promise.all(Array.from({ length: 400 }, (_, i) => (i % 2 ? one : other).check(address, limits)))
      expect(refusals.every((d) => !d.allowed && d.reason === 'key_banned' && d.retryAfter > 590)).toBe(true)
      // Asking whether it would be refused (a staging Prefer does, before its take) is answered from memory too.
      expect(await Promise.all([one.refuses(address, limits), other.refuses(address, limits)])).toEqual([true, true])
      expect((await scriptCalls()) - before).toBe(0)

      // Lifted through one instance (the console's address lift): the other lets its held ban go.
      await one.admin.liftAddress(address as AddressSubject)
      const liftedAt = performance.now()
      while (!(await other.check(address, limits)).allowed) {
        expect(performance.now() - liftedAt).toBeLessThan(1_000)
        await Bun.sleep(10)
      }
    } finally {
      one.close()
      other.close()
    }
  })

  test('two instances sharing Redis decide one subject exactly, however their requests interleave', async () => {
    const { clock } = futureClock()
    const settings = { banAfter: 50, now: () => clock.now }
    const prefix = uniquePrefix()
    const instances = [
      redisLimiter(redis.url, settings, { prefix, timeoutMs: 2_000 }),
      redisLimiter(redis.url, settings, { prefix, timeoutMs: 2_000 }),
    ]
    const limits = { rpm: 100, rpd: 1000 }
    const decisions = await Promise.all(Array.from({ length: 300 }, (_, i) => instances[i % 2]!.check(named('key:shared'), limits)))
    const count = (f: (d: Decision) => boolean) => decisions.filter(f).length
    expect(count((d) => d.allowed)).toBe(100)
    expect(count((d) => !d.allowed && d.reason === 'rate_limited')).toBe(51)
    expect(count((d) => !d.allowed && d.bannedNow)).toBe(1)
    expect(count((d) => !d.allowed && d.reason === 'key_banned')).toBe(149)
    instances.forEach((limiter) => limiter.close())
  })
})
