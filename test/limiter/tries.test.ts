/**
 * The try counts' seam (TryStore, Prefer: fail=N): one suite every store passes, in process and in Redis,
 * through the limiter's `tries`. Then the in-process store's bound on an injected clock: past 10,000 in
 * all, a new id is refused (TriesFullError, with the time until the oldest count is forgotten) and no
 * other key's count is forgotten; a key at its own bound of 1,000 forgets its own oldest; expired counts
 * make room.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { TriesFullError } from '../../src/limiter/backend'
import { describeWithEngines } from '../support/engines'
import { type RedisServer, startRedis } from '../support/redis'
import { type AnyLimiter, futureClock, type LimiterSettings, memoryLimiter, named, redisLimiter } from './stores'

const KEEP_MS = 3_600_000

function conformance(makeLimiter: () => (settings: LimiterSettings) => AnyLimiter) {
  const made: AnyLimiter[] = []
  afterAll(() => made.forEach((limiter) => limiter.close()))

  test('countTry numbers the tries under an id within its group, and starts afresh once the count is kept no more', async () => {
    const { clock, advance } = futureClock()
    const limiter = makeLimiter()({ now: () => clock.now })
    made.push(limiter)
    const count = (group: string, id: string) => limiter.tries.countTry(group, id, 1_000)
    expect([
      await count('k1', 'a'),
      await count('k1', 'a'),
      await count('k1', 'b'),
      await count('k2', 'a'),
      await count('k1', 'a'),
    ]).toEqual([1, 2, 1, 1, 3])
    // Counting takes no token.
    expect((await limiter.check(named('key:a'), { rpm: 60, rpd: 1000 })).quota.remaining).toBe(59)
    // The process forgets by the injected clock, Redis by its own (real time must pass for it): both after keepMs.
    advance(1_000)
    await Bun.sleep(1_100)
    expect(await count('k1', 'a')).toBe(1)
  })
}

describe('try counts: in process', () => conformance(() => memoryLimiter))

describeWithEngines(['redis-server'], 'try counts: Redis', () => {
  let redis: RedisServer
  beforeAll(async () => {
    redis = await startRedis()
  })
  afterAll(() => redis.destroy())

  conformance(() => (settings) => redisLimiter(redis.url, settings, { timeoutMs: 2_000 }))
})

test('past 10,000 counts a new id is refused, not counted over another key; expired ones make room', async () => {
  const { clock, advance } = futureClock()
  const limiter = memoryLimiter({ now: () => clock.now })
  expect(await limiter.tries.countTry('victim', 'retry', KEEP_MS)).toBe(1)
  advance(1_000)
  for (let group = 0; group < 10; group++)
    for (let id = 0; id < 1_000; id++)
      if (group * 1_000 + id < 9_999) expect(await limiter.tries.countTry(`flood${group}`, `id${id}`, KEEP_MS)).toBe(1)
  // 10,000 held: one more new id is refused, for as long as the victim's count (the oldest) is kept.
  const refused = await limiter.tries.countTry('flood9', 'one-more', KEEP_MS).catch((error: unknown) => error)
  expect(refused).toBeInstanceOf(TriesFullError)
  expect((refused as TriesFullError).retryAfter).toBe(KEEP_MS / 1_000 - 1)
  // Counts already held go on being counted.
  expect(await limiter.tries.countTry('victim', 'retry', KEEP_MS)).toBe(2)
  expect(await limiter.tries.countTry('flood0', 'id0', KEEP_MS)).toBe(2)
  // A key at its own bound forgets its own oldest for a new id, even with all held.
  expect(await limiter.tries.countTry('flood0', 'id1000', KEEP_MS)).toBe(1)
  expect(await limiter.tries.countTry('flood0', 'id0', KEEP_MS)).toBe(1)
  expect(await limiter.tries.countTry('victim', 'retry', KEEP_MS)).toBe(3)
  // Once the victim's count has expired, the sweep makes room.
  advance(KEEP_MS - 500)
  expect(await limiter.tries.countTry('flood9', 'one-more', KEEP_MS)).toBe(1)
})
