/**
 * An address spray against a Redis with a small maxmemory and no eviction (what the README recommends):
 * the store holds at most maxAddresses addresses whatever the spray, so Redis never fills up and a valid
 * key is still decided by Redis, with its bucket intact.
 */
import { expect, test } from 'bun:test'
import type { Limits } from '../../src/domain/plans'
import { describeWithEngines } from '../support/engines'
import { redisForSuite } from '../support/redis'
import { redisLimiter, uniquePrefix, named } from './stores'

const FREE: Limits = { rpm: 60, rpd: 1000 }
// A day bucket in force, which the spray's seconds do not visibly refill.
const KEY: Limits = { rpm: 1000, rpd: 10 }
const MAX_ADDRESSES = 2_000
const SPRAY = 30_000

describeWithEngines(['redis-server'], 'limiter: an address spray against Redis', () => {
  // 30,000 addresses would take about 5 MB: far more than this Redis may hold.
  const redis = redisForSuite({ args: ['--maxmemory', '3mb', '--maxmemory-policy', 'noeviction'] })

  test('Redis holds at most maxAddresses addresses, and a valid key is still served with its own bucket', async () => {
    const prefix = uniquePrefix()
    const limiter = redisLimiter(redis.url, {}, { prefix, maxAddresses: MAX_ADDRESSES, timeoutMs: 1_000 })
    try {
      expect((await limiter.check(named('key:valid'), KEY)).quota.remaining).toBe(9)
      // Rotating IPv6 /64s, 500 in flight at a time.
      let refused = 0
      for (let start = 0; start < SPRAY; start += 500) {
        const batch = Array.from({ length: 500 }, (_, i) => {
          const n = start + i
          return Promise.resolve(
            limiter.check(named(`ip:2001:db8:${(n >> 16).toString(16)}:${(n & 0xffff).toString(16)}::/64`), FREE),
          ).then(
            () => {},
            () => void refused++,
          )
        })
        await Promise.all(batch)
      }
      expect(refused).toBe(0)
      // The key's bucket is exact: its second request leaves 8.
      expect(await limiter.check(named('key:valid'), KEY)).toMatchObject({ allowed: true, quota: { window: 'day', remaining: 8 } })

      const keys = (await redis.admin.send('DBSIZE', [])) as number
      const memory = Number(/used_memory:(\d+)/.exec((await redis.admin.send('INFO', ['memory'])) as string)![1])
      console.error(`address-spray: after ${SPRAY} addresses, Redis holds ${keys} keys, ${(memory / 1024 / 1024).toFixed(1)} MB`)
      // Each address a hash (it makes no rejection here), the set of addresses, the key's hash.
      expect(keys).toBeLessThanOrEqual(MAX_ADDRESSES + 2)
      expect(await redis.admin.send('ZCARD', [`${prefix}addresses`])).toBe(MAX_ADDRESSES)
    } finally {
      limiter.close()
    }
  }, 60_000)
})
