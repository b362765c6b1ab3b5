/**
 * The console's seam (SubjectReader, through the limiter's `admin`): one suite every backend passes, in
 * process and in Redis, on an injected clock. Inspecting takes nothing; a subject not held, or held under
 * other limits, has a full day (the latter keeps its ban); the bans started here are listed, inspected and lifted.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { addressSubject } from '../../src/domain/subject'
import { describeWithEngines } from '../support/engines'
import { type RedisServer, startRedis } from '../support/redis'
import { type AnyLimiter, futureClock, type LimiterSettings, memoryLimiter, named, redisLimiter } from './stores'

function conformance(makeLimiter: () => (settings: LimiterSettings) => AnyLimiter) {
  const made: AnyLimiter[] = []
  afterAll(() => made.forEach((limiter) => limiter.close()))

  function make() {
    const time = futureClock()
    const limiter = makeLimiter()({ banAfter: 1, banSeconds: 600, now: () => time.clock.now })
    made.push(limiter)
    return { limiter, ...time }
  }

  test("inspect says a subject's day left without taking; not held, or held under other limits, is a full day", async () => {
    const { limiter } = make()
    const key = named('key:looked')
    const limits = { rpm: 5, rpd: 10 }
    expect(await limiter.admin.inspect(key, limits)).toEqual({ dayLeft: 10, bannedUntil: null })
    await limiter.check(key, limits)
    await limiter.check(key, limits)
    expect(await limiter.admin.inspect(key, limits)).toEqual({ dayLeft: 8, bannedUntil: null })
    expect(await limiter.admin.inspect(key, limits)).toEqual({ dayLeft: 8, bannedUntil: null })
    expect(await limiter.admin.inspect(key, { rpm: 5, rpd: 20 })).toEqual({ dayLeft: 20, bannedUntil: null })
    expect((await limiter.check(key, limits)).quota.remaining).toBe(2)
  })

  test('a ban started here is listed and inspected; an address ban is lifted with its buckets', async () => {
    const { limiter, start } = make()
    const address = addressSubject('192.0.2.7')
    const limits = { rpm: 1, rpd: 1000 }
    // One allowed, a refusal naming the wait, then two early ones: the second starts the ban (banAfter 1).
    for (let i = 0; i < 4; i++) await limiter.check(address, limits)
    expect(limiter.admin.bans(start)).toEqual([{ subject: address, until: start + 600_000 }])
    expect(await limiter.admin.inspect(address, limits)).toEqual({ dayLeft: 999, bannedUntil: start + 600_000 })
    // Read under other limits (a key given another plan): the day is afresh, the ban stands, as a take finds it.
    const other = { rpm: 2, rpd: 50 }
    expect(await limiter.admin.inspect(address, other)).toEqual({ dayLeft: 50, bannedUntil: start + 600_000 })
    expect(await limiter.check(address, other)).toMatchObject({ allowed: false, reason: 'key_banned' })
    await limiter.admin.liftAddress(address)
    expect(limiter.admin.bans(start)).toEqual([])
    expect(await limiter.admin.inspect(address, limits)).toEqual({ dayLeft: 1000, bannedUntil: null })
    expect((await limiter.check(address, limits)).allowed).toBe(true)
  })
}

describe('console reads: in process', () => conformance(() => memoryLimiter))

describeWithEngines(['redis-server'], 'console reads: Redis', () => {
  let redis: RedisServer
  beforeAll(async () => {
    redis = await startRedis()
  })
  afterAll(() => redis.destroy())

  conformance(() => (settings) => redisLimiter(redis.url, settings, { timeoutMs: 2_000 }))
})
