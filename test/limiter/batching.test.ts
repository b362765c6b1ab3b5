/**
 * Takes sent within one turn of the event loop share one script call (Bun.redis costs our process about
 * as much per call as per take), and are decided exactly as if each had been sent alone: many at once on
 * one subject and on many, through two instances sharing one Redis, counted by Redis's own statistics.
 */
import { expect, test } from 'bun:test'
import type { Limits } from '../../src/domain/plans'
import { LimiterUnavailableError } from '../../src/limiter/backend'
import type { Decision } from '../../src/limiter/limiter'
import { describeWithEngines } from '../support/engines'
import { redisForSuite } from '../support/redis'
import { startRelay } from '../support/relay'
import { futureClock, named, redisLimiter, uniquePrefix } from './stores'

const LIMITS: Limits = { rpm: 40, rpd: 1000 }
const BAN_AFTER = 30

/** Script calls Redis has run since its statistics were reset (EVALSHA and EVAL after a NOSCRIPT). */
async function scriptCalls(admin: Bun.RedisClient): Promise<number> {
  const info = (await admin.send('INFO', ['commandstats'])) as string
  let calls = 0
  for (const [, n] of info.matchAll(/^cmdstat_eval(?:sha)?:calls=(\d+)/gm)) calls += Number(n)
  return calls
}

describeWithEngines(['redis-server'], 'limiter: takes sent together share one script call', () => {
  const redis = redisForSuite()

  test('200 simultaneous takes on one subject and 100 on others, through two instances: a few calls, exact decisions', async () => {
    const { clock } = futureClock()
    const prefix = uniquePrefix()
    const settings = { banAfter: BAN_AFTER, banSeconds: 600, now: () => clock.now }
    // Slow answers are not what this test is about: a loaded host must not turn takes into 503s.
    const instances = [0, 1].map(() => redisLimiter(redis.url, settings, { prefix, timeoutMs: 5_000 }))
    try {
      for (const instance of instances) expect(await instance.ping()).toBe(true)
      await redis.admin.send('CONFIG', ['RESETSTAT'])

      const hot = Array.from({ length: 200 }, (_, i) => instances[i % 2]!.check(named('key:hot'), LIMITS))
      const others = Array.from({ length: 100 }, (_, i) => instances[i % 2]!.check(named(`ip:10.0.0.${i}`), LIMITS))
      const decisions: Decision[] = await Promise.all(hot)
      const elsewhere = await Promise.all(others)

      const calls = await scriptCalls(redis.admin)
      console.error(`batching: 300 takes in ${calls} script calls`)
      // 150 takes an instance, at most 16 a call: ten calls each when nothing else splits them.
      expect(calls).toBeLessThanOrEqual(30)

      // Exactly as sent one by one: the capacity allowed, the minute's remaining counting down without a
      // gap or a repeat, banAfter plain refusals, then the one that starts the ban, then banned.
      const allowed = decisions.filter((d) => d.allowed)
      expect(allowed.length).toBe(LIMITS.rpm)
      expect(allowed.map((d) => d.quota.remaining).sort((a, b) => b - a)).toEqual(
        Array.from({ length: LIMITS.rpm }, (_, i) => LIMITS.rpm - 1 - i),
      )
      const refused = decisions.filter((d) => !d.allowed)
      expect(refused.filter((d) => d.reason === 'rate_limited').length).toBe(BAN_AFTER + 1)
      expect(refused.filter((d) => d.bannedNow).length).toBe(1)
      expect(refused.filter((d) => d.reason === 'key_banned').length).toBe(200 - LIMITS.rpm - BAN_AFTER - 1)
      expect(elsewhere.every((d) => d.allowed && d.quota.remaining === LIMITS.rpm - 1)).toBe(true)

      // Redis holds what the answers say.
      expect(Number(await redis.admin.send('HGET', [`${prefix}s:key:hot`, 'm']))).toBe(0)
    } finally {
      instances.forEach((instance) => instance.close())
    }
  })

  test('each take of a call fails at its own deadline: one given later in the same turn outlives the first', async () => {
    const { clock } = futureClock()
    const prefix = uniquePrefix()
    const relay = startRelay(redis.port)
    const limiter = redisLimiter(`redis://127.0.0.1:${relay.port}`, { now: () => clock.now }, { prefix, timeoutMs: 1_000 })
    try {
      expect(await limiter.ping()).toBe(true)
      relay.answerDelayMs = () => Number.POSITIVE_INFINITY
      const outcome = (name: string) =>
        Promise.resolve(limiter.check(named(name), LIMITS)).then(
          (d) => d,
          (error: unknown) => error,
        )
      const early = outcome('key:early')
      // The same turn of the event loop, 700 ms on: the two share a call, their deadlines 700 ms apart.
      const until = performance.now() + 700
      while (performance.now() < until) {}
      let late: unknown = 'waiting'
      const lateDone = outcome('key:late').then((answer) => {
        late = answer
      })
      expect(await early).toBeInstanceOf(LimiterUnavailableError)
      await new Promise((resolve) => setImmediate(resolve))
      expect(late).toBe('waiting')
      relay.answerDelayMs = () => 0
      relay.release()
      await lateDone
      expect(late).toMatchObject({ allowed: true })
    } finally {
      limiter.close()
      relay.close()
    }
  })

  test('a take Redis refuses fails alone: the takes sent with it are answered, and spend what their answers say', async () => {
    const { clock } = futureClock()
    const prefix = uniquePrefix()
    const limiter = redisLimiter(redis.url, { now: () => clock.now }, { prefix, timeoutMs: 5_000 })
    try {
      // A subject's key of another type (an operator's mistake): Redis refuses its take with WRONGTYPE.
      await redis.admin.send('SET', [`${prefix}s:key:broken`, 'x'])
      const names = Array.from({ length: 40 }, (_, i) => (i === 20 ? 'key:broken' : `key:fine${i}`))
      const outcomes = await Promise.all(
        names.map((name) =>
          Promise.resolve(limiter.check(named(name), LIMITS)).then(
            (decision) => decision.allowed,
            (error: unknown) => error,
          ),
        ),
      )
      expect(outcomes[20]).toBeInstanceOf(LimiterUnavailableError)
      expect(outcomes.filter((outcome) => outcome === true).length).toBe(39)
      for (const [i, name] of names.entries())
        if (i !== 20) expect(Number(await redis.admin.send('HGET', [`${prefix}s:${name}`, 'm']))).toBe(LIMITS.rpm - 1)
    } finally {
      limiter.close()
    }
  })
})
