/**
 * The Redis store must decide exactly as the in-process one: fast-check drives both through RateLimiter
 * with random request sequences (subjects, changing limits, forgotten keys, time steps from none and
 * sub-millisecond to many hours) at the same injected times, and every decision must be equal: allowed
 * or not, reason, quota, Retry-After, ban starts. The script repeats the arithmetic of token-bucket.ts
 * operation for operation; a formula equal on paper but rounding differently changes a decision only
 * where a bucket is a hair from a whole token, so the same sequences also drive the two bare stores,
 * whose states (tokens, times, ban) must be the same doubles.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test'
import fc from 'fast-check'
import type { Limits } from '../../src/domain/plans'
import { addressSubject, keySubject } from '../../src/domain/subject'
import { MemoryLimiterBackend } from '../../src/limiter/memory/backend'
import { DAY_MS, MINUTE_MS } from '../../src/domain/time'
import { RedisLimiterBackend } from '../../src/limiter/redis/backend'
import type { TakeResult } from '../../src/limiter/backend'
import { describeWithEngines } from '../support/engines'
import { type RedisServer, startRedis } from '../support/redis'
import { futureClock, memoryLimiter, redisLimiter, uniquePrefix } from './stores'

const LIMITS: Limits[] = [
  { rpm: 1, rpd: 1000 },
  { rpm: 2, rpd: 3 },
  { rpm: 60, rpd: 1000 },
  { rpm: 7, rpd: 11 },
  { rpm: 300, rpd: 5 },
]
const SUBJECTS = [keySubject('a'), keySubject('b'), addressSubject('192.0.2.1'), addressSubject('2001:db8:1:2::/64')]

// The time one or a few tokens take to come back, to land buckets right on a whole token.
const tokenTimes = LIMITS.flatMap(({ rpm, rpd }) => [1, 2, 3].flatMap((k) => [(k * MINUTE_MS) / rpm, (k * DAY_MS) / rpd]))

// Mostly bursts, so rejections pile up into bans; then waits of every size, refilling part or all.
const step = fc.oneof(
  { arbitrary: fc.constantFrom(...tokenTimes), weight: 2 },
  { arbitrary: fc.constant(0), weight: 4 },
  { arbitrary: fc.double({ min: 0, max: 1, noNaN: true }), weight: 3 },
  { arbitrary: fc.integer({ min: 1, max: 2_000 }), weight: 2 },
  { arbitrary: fc.double({ min: 2_000, max: 120_000, noNaN: true }), weight: 1 },
  { arbitrary: fc.integer({ min: 3_600_000, max: 30 * 3_600_000 }), weight: 1 },
)

const action = fc.record({
  subject: fc.integer({ min: 0, max: SUBJECTS.length - 1 }),
  // Usually the subject's limits stay; now and then they change, which starts the subject afresh.
  limits: fc.oneof({ arbitrary: fc.constant(null), weight: 9 }, { arbitrary: fc.integer({ min: 0, max: LIMITS.length - 1 }), weight: 1 }),
  forget: fc.oneof({ arbitrary: fc.constant(false), weight: 30 }, { arbitrary: fc.constant(true), weight: 1 }),
  step,
})

const scenario = fc.record({
  banAfter: fc.integer({ min: 1, max: 4 }),
  banSeconds: fc.constantFrom(0, 1, 10, 600),
  initialLimits: fc.array(fc.integer({ min: 0, max: LIMITS.length - 1 }), { minLength: SUBJECTS.length, maxLength: SUBJECTS.length }),
  actions: fc.array(action, { minLength: 20, maxLength: 200, size: 'max' }),
})

/** A copy: the in-process store hands out one result object, refilled by every take. */
function stateOf(taken: TakeResult): TakeResult {
  return { ...taken, minute: { ...taken.minute }, day: { ...taken.day } }
}

describeWithEngines(['redis-server'], 'limiter: the Redis store decides as the in-process store', () => {
  let redis: RedisServer
  beforeAll(async () => {
    redis = await startRedis()
  })
  afterAll(() => redis.destroy())

  test('random request sequences get identical decisions', async () => {
    // What the sequences reached, so a generator that never bans cannot pass for a thorough one.
    const seen = { allowed: 0, rate_limited: 0, key_banned: 0, bannedNow: 0 }
    await fc.assert(
      fc.asyncProperty(scenario, async ({ banAfter, banSeconds, initialLimits, actions }) => {
        const { clock, advance } = futureClock()
        const settings = { banAfter, banSeconds, now: () => clock.now }
        const memory = memoryLimiter(settings)
        const shared = redisLimiter(redis.url, settings, { timeoutMs: 5_000 })
        const memoryStore = new MemoryLimiterBackend({ banAfter, banSeconds }, { maxAddresses: 100_000 })
        const redisStore = new RedisLimiterBackend({ banAfter, banSeconds }, { url: redis.url, prefix: uniquePrefix(), timeoutMs: 5_000 })
        const limitsOf = initialLimits.map((i) => LIMITS[i]!)
        try {
          for (const [n, { subject, limits, forget, step }] of actions.entries()) {
            advance(step)
            const who = SUBJECTS[subject]!
            const id = who.name
            if (limits !== null) limitsOf[subject] = LIMITS[limits]!
            // Keys are reset: the in-process store keeps addresses in a map of their own.
            if (forget && who.kind === 'key') {
              memory.forget(who)
              await shared.forget(who)
              memoryStore.forget(who)
              await redisStore.forget(who)
              continue
            }
            const state = stateOf(memoryStore.take(who, limitsOf[subject]!, clock.now))
            const redisState = stateOf(await redisStore.take(who, limitsOf[subject]!, clock.now))
            if (!Bun.deepEquals(redisState, state, true))
              throw new Error(
                `request ${n} (${id} at ${clock.now}): Redis left ${JSON.stringify(redisState)}, in process ${JSON.stringify(state)}`,
              )
            const expected = await memory.check(who, limitsOf[subject]!)
            const actual = await shared.check(who, limitsOf[subject]!)
            if (!Bun.deepEquals(actual, expected, true))
              throw new Error(
                `request ${n} (${id} at ${clock.now}): Redis ${JSON.stringify(actual)}, in process ${JSON.stringify(expected)}`,
              )
            seen[expected.allowed ? 'allowed' : expected.reason]++
            if (!expected.allowed && expected.bannedNow) seen.bannedNow++
          }
        } finally {
          shared.close()
          redisStore.close()
        }
      }),
      { numRuns: 100 },
    )
    // A floor, not a figure: 100 random runs reach each kind about 50 to 1,500 times, and a generator that
    // never bans reaches it never.
    expect(Math.min(...Object.values(seen)), `too few of a kind: ${JSON.stringify(seen)}`).toBeGreaterThanOrEqual(10)
  }, 60_000)
})
