/**
 * The Redis store when Redis misbehaves, against a real redis-server: a flushed script cache, keys that
 * must expire, Redis stopped and started again on the same port (with each fallback), and Redis too
 * slow to answer in time, where the take it gave up on must not happen once Redis resumes.
 */
import { afterEach, expect, test } from 'bun:test'
import type { Limits } from '../../src/domain/plans'
import type { Decision } from '../../src/limiter/limiter'
import { LIMITER_SCRIPT } from '../../src/limiter/redis/script'
import { LimiterUnavailableError } from '../../src/limiter/backend'
import { describeWithEngines } from '../support/engines'
import { redisForSuite } from '../support/redis'
import { startRelay } from '../support/relay'
import { type AnyLimiter, type LimiterSettings, redisLimiter, uniquePrefix, named } from './stores'

const FREE: Limits = { rpm: 60, rpd: 1000 }

/** Polls until `condition` holds, failing after `ms`. */
async function eventually(condition: () => Promise<boolean>, ms = 5_000): Promise<void> {
  for (const deadline = Date.now() + ms; !(await condition()); ) {
    if (Date.now() > deadline) throw new Error(`not true within ${ms} ms`)
    await Bun.sleep(10)
  }
}

/** The check's promise settled: its decision, or the error it rejected with. */
async function settle<T = Decision>(answer: T | Promise<T>): Promise<T | Error> {
  try {
    return await answer
  } catch (error) {
    return error as Error
  }
}

describeWithEngines(['redis-server'], 'limiter: the Redis store when Redis fails', () => {
  const redis = redisForSuite()
  const limiters: AnyLimiter[] = []

  function limiter(settings: LimiterSettings = {}, prefix = uniquePrefix(), timeoutMs?: number) {
    const made = redisLimiter(redis.url, settings, { prefix, timeoutMs })
    limiters.push(made)
    return made
  }

  afterEach(async () => {
    limiters.splice(0).forEach((made) => made.close())
    // A test that stopped Redis leaves it running for the next.
    if (!redis.running) await redis.start()
  })

  test('a flushed script cache (NOSCRIPT) is answered by sending the script again', async () => {
    const made = limiter()
    expect((await made.check(named('key:a'), FREE)).quota.remaining).toBe(59)
    await redis.admin.send('SCRIPT', ['FLUSH'])
    expect((await made.check(named('key:a'), FREE)).quota.remaining).toBe(58)
    const sha = new Bun.CryptoHasher('sha1').update(LIMITER_SCRIPT).digest('hex')
    expect(await redis.admin.send('SCRIPT', ['EXISTS', sha])).toEqual([1])
  })

  test('every key expires once its buckets are full again and its ban and rejections are over', async () => {
    const prefix = uniquePrefix()
    // Expiries are checked here, not deadlines: 500 checks at once on a loaded host may take a while.
    const made = limiter({ banAfter: 1, banSeconds: 600 }, prefix, 2_000)
    const pttl = (key: string): Promise<number> => redis.admin.send('PTTL', [`${prefix}${key}`])

    // One day token of 1000 comes back in 86.4 s; the key lasts that and a second more.
    await made.check(named('key:a'), FREE)
    expect(await pttl('s:key:a')).toBeGreaterThan(86_400)
    expect(await pttl('s:key:a')).toBeLessThanOrEqual(87_401)

    // A rejection sent before the wait named (a minute here) is remembered for a minute, and the key
    // until the time the last refusal named (the next token after the one the first refusal named).
    const minuteOnly = { rpm: 1, rpd: 86_400_000 }
    await made.check(named('key:r'), minuteOnly)
    expect(await made.check(named('key:r'), minuteOnly)).toMatchObject({ allowed: false, retryAfter: 60 })
    expect(await made.check(named('key:r'), minuteOnly)).toMatchObject({ allowed: false, bannedNow: false, retryAfter: 120 })
    for (const key of ['s:key:r', 'r:key:r']) {
      expect(await pttl(key)).toBeGreaterThan(120_000)
      expect(await pttl(key)).toBeLessThanOrEqual(121_001)
    }

    // A ban outlasts both.
    expect(await made.check(named('key:r'), minuteOnly)).toMatchObject({ allowed: false, bannedNow: true })
    expect(await pttl('s:key:r')).toBeGreaterThan(600_000)
    expect(await pttl('s:key:r')).toBeLessThanOrEqual(601_001)
    expect(await pttl('r:key:r')).toBe(-2) // the ban starts the count of rejections afresh

    // Buckets that refill within a millisecond are gone a second later.
    await made.check(named('key:quick'), { rpm: 60_000, rpd: 86_400_000 })
    expect(await redis.admin.send('EXISTS', [`${prefix}s:key:quick`])).toBe(1)
    await eventually(async () => (await redis.admin.send('EXISTS', [`${prefix}s:key:quick`])) === 0)

    // However many addresses spray, none is kept for ever.
    await Promise.all(Array.from({ length: 500 }, (_, i) => made.check(named(`ip:10.0.${i >> 8}.${i & 255}`), FREE)))
    const [, keys] = (await redis.admin.send('SCAN', ['0', 'MATCH', `${prefix}*`, 'COUNT', '10000'])) as [string, string[]]
    expect(keys.length).toBeGreaterThanOrEqual(500)
    const ttls = await Promise.all(keys.map((key) => redis.admin.send('PTTL', [key]) as Promise<number>))
    expect(ttls.every((ttl) => ttl > 0)).toBe(true)
  })

  test('closed: with Redis stopped, check rejects with LimiterUnavailableError at once, and recovers by itself', async () => {
    const prefix = uniquePrefix()
    const made = redisLimiter(redis.url, {}, { prefix, reconnectEveryMs: 50 })
    limiters.push(made)
    expect((await made.check(named('key:a'), FREE)).allowed).toBe(true)
    await redis.stop()

    for (let i = 0; i < 5; i++) {
      const started = performance.now()
      expect(await settle(made.check(named('key:a'), FREE))).toBeInstanceOf(LimiterUnavailableError)
      expect(performance.now() - started).toBeLessThan(300)
    }
    expect(await made.ping()).toBe(false)
    // An outage of a few hundred milliseconds: reconnects (one per 50 ms here) fail meanwhile, and none
    // of them may leave the store failed for good.
    for (const until = performance.now() + 400; performance.now() < until; await Bun.sleep(20))
      expect(await settle(made.check(named('key:a'), FREE))).toBeInstanceOf(LimiterUnavailableError)

    await redis.start()
    await eventually(async () => !((await settle(made.check(named('key:b'), FREE))) instanceof Error))
    expect(await made.ping()).toBe(true)
    // Decided in Redis: another instance sharing the prefix sees the same buckets.
    const other = limiter({}, prefix)
    const first = await made.check(named('key:c'), FREE)
    const second = await other.check(named('key:c'), FREE)
    expect([first.quota.remaining, second.quota.remaining]).toEqual([59, 58])
  })

  test('local: with Redis stopped, check decides in process and says degraded; Redis decides again once back', async () => {
    const events: boolean[] = []
    const prefix = uniquePrefix()
    const made = limiter({ fallback: 'local', onUnavailable: (unavailable) => events.push(unavailable) }, prefix)
    for (let i = 0; i < 10; i++) await made.check(named('key:a'), FREE)
    expect(made.degraded).toBe(false)
    await redis.stop()

    const started = performance.now()
    const local = await made.check(named('key:a'), FREE)
    expect(performance.now() - started).toBeLessThan(300)
    // This process has not seen key:a before: a full bucket, not Redis's 50 left.
    expect(local).toMatchObject({ allowed: true, quota: { remaining: 59 } })
    expect(made.degraded).toBe(true)
    expect((await made.check(named('key:a'), FREE)).quota.remaining).toBe(58)
    expect(events).toEqual([true])

    await redis.start()
    await eventually(async () => {
      await made.check(named('key:b'), FREE)
      return !made.degraded
    })
    expect(events).toEqual([true, false])
    // Redis started empty (no persistence): Redis's own count, shared with another instance.
    const other = limiter({ fallback: 'local' }, prefix)
    expect((await made.check(named('key:a'), FREE)).quota.remaining).toBe(59)
    expect((await other.check(named('key:a'), FREE)).quota.remaining).toBe(58)
  })

  test('try counts: with Redis stopped, counted in process with the local fallback, refused without it', async () => {
    const local = limiter({ fallback: 'local' })
    const closed = limiter()
    expect(await local.tries.countTry('k', 'a', 60_000)).toBe(1)
    expect(await closed.tries.countTry('k', 'b', 60_000)).toBe(1)
    await redis.stop()
    // This process has not counted 'a' before: its own count starts at 1.
    expect(await local.tries.countTry('k', 'a', 60_000)).toBe(1)
    expect(await local.tries.countTry('k', 'a', 60_000)).toBe(2)
    expect(await closed.tries.countTry('k', 'b', 60_000).catch((error: unknown) => error)).toBeInstanceOf(LimiterUnavailableError)
  })

  test('a store left idle through a Redis restart reconnects by itself: its first request afterwards is decided', async () => {
    const made = limiter()
    expect((await made.check(named('key:idle'), FREE)).allowed).toBe(true)
    await redis.stop()
    await redis.start()
    // No request meanwhile: the store alone must notice and reconnect, which Redis sees as a client of
    // its own (other than this test's) whose last command is the store's health check (a GET of the
    // count of lifts, sent only once a reconnect has loaded the scripts and read the clock).
    const storeConnected = async () => {
      const clients = ((await redis.admin.send('CLIENT', ['LIST'])) as string).split('\n')
      return clients.some((client) => / cmd=get /.test(client))
    }
    await eventually(storeConnected, 5_000).catch(() => {})
    expect(await settle(made.check(named('key:idle'), FREE))).toMatchObject({ allowed: true, quota: { remaining: 59 } })
  })

  test('a take that timed out while Redis was paused does not happen once Redis resumes', async () => {
    const prefix = uniquePrefix()
    const made = limiter({}, prefix)
    expect((await made.check(named('key:warm'), FREE)).allowed).toBe(true)

    // Every client's commands wait, the limiter's script included, until the pause ends.
    await redis.admin.send('CLIENT', ['PAUSE', '500', 'ALL'])
    const started = performance.now()
    expect(await settle(made.check(named('key:late'), FREE))).toBeInstanceOf(LimiterUnavailableError)
    const waited = performance.now() - started
    expect(waited).toBeGreaterThanOrEqual(90)
    expect(waited).toBeLessThan(300)

    // Answered after the pause: by then the script has run, and must have changed nothing.
    await redis.admin.send('PING', [])
    expect(await redis.admin.send('EXISTS', [`${prefix}s:key:late`])).toBe(0)
    await eventually(async () => (await settle(made.check(named('key:late'), FREE))) instanceof Error === false)
    expect(await redis.admin.send('HGET', [`${prefix}s:key:late`, 'm'])).toBe('59')
  })

  test("what answers a person waits for a slow Redis longer than a request does: the console's read and lift, not a reset", async () => {
    const prefix = uniquePrefix()
    const made = limiter({}, prefix)
    const address = named('ip:192.0.2.7')
    if (address.kind !== 'address') throw new Error('an address subject')
    for (let i = 0; i < 3; i++) expect((await made.check(address, FREE)).allowed).toBe(true)

    // Redis answers nobody for a second: more than a request's 100 ms, well within an operator's 2 s.
    await redis.admin.send('CLIENT', ['PAUSE', '1000', 'ALL'])
    const take = settle(made.check(named('ip:192.0.2.8'), FREE))
    // A key's reset applied by the change poll waits as a request does: the poll must not be held up.
    const reset = settle(made.forget(named('key:reset')))
    const read = made.admin.inspect(address, FREE)
    const lift = made.admin.liftAddress(address)
    expect(await take).toBeInstanceOf(LimiterUnavailableError)
    expect(await reset).toBeInstanceOf(LimiterUnavailableError)
    expect(await read).toEqual({ dayLeft: FREE.rpd - 3, bannedUntil: null })
    await lift
    expect(await redis.admin.send('EXISTS', [`${prefix}s:ip:192.0.2.7`])).toBe(0)
  })

  test('Redis cut off without a word (a lost network): calls fail at once after the first, and recover when it is back', async () => {
    const cut = startRelay(redis.port)
    try {
      const made = redisLimiter(`redis://127.0.0.1:${cut.port}`, {}, { connectTimeoutMs: 300, reconnectEveryMs: 100 })
      limiters.push(made)
      // Connected and answering first (on a loaded host the first connection may take longer than a call may).
      await eventually(async () => !((await settle(made.check(named('ip:cut'), FREE))) instanceof Error), 5_000)
      cut.silent = true
      // The first call waits out its timeout; the store then finds the connection dead and drops it.
      expect(await settle(made.check(named('ip:cut'), FREE))).toBeInstanceOf(LimiterUnavailableError)
      await eventually(async () => {
        const started = performance.now()
        const answer = await settle(made.check(named('ip:cut'), FREE))
        return answer instanceof LimiterUnavailableError && performance.now() - started < 30
      }, 3_000)
      // From then on none waits for the reconnects going on in the background.
      const times: number[] = []
      for (let i = 0; i < 30; i++) {
        const started = performance.now()
        expect(await settle(made.check(named('ip:cut'), FREE))).toBeInstanceOf(LimiterUnavailableError)
        times.push(performance.now() - started)
        await Bun.sleep(10)
      }
      expect(Math.max(...times)).toBeLessThan(30)
      cut.silent = false
      await eventually(async () => !((await settle(made.check(named('ip:cut'), FREE))) instanceof Error), 5_000)
    } finally {
      cut.close()
    }
  })
})
