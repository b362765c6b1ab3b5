/**
 * A take that Redis ran in time but whose answer reached us after our timeout: the client got 503, so
 * the take must spend nothing and count toward nothing. Against a real redis-server behind a relay that
 * holds each answer back for a random while, about the timeout (a slow network, or a Redis too busy to
 * write its answers), so that many answers arrive after the timer; Redis's state must then be exactly
 * what the other answers account for: tokens spent, rejections recorded, bans started.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test'
import type { Decision, Limits } from '../../src/limiter/limiter'
import { LimiterUnavailableError } from '../../src/limiter/store'
import { describeWithEngines } from '../support/engines'
import { type RedisServer, startRedis } from '../support/redis'
import { startRelay } from '../support/relay'
import { futureClock, redisLimiter, uniquePrefix } from './stores'

const CAPACITY = 3
const LIMITS: Limits = { rpm: CAPACITY, rpd: CAPACITY }
const BAN_AFTER = 2
const BAN_SECONDS = 600
const TIMEOUT_MS = 20
const CALLS = CAPACITY + BAN_AFTER + 5

async function eventually(condition: () => Promise<boolean>, ms = 10_000): Promise<void> {
  for (const deadline = Date.now() + ms; !(await condition()); ) {
    if (Date.now() > deadline) throw new Error(`not true within ${ms} ms`)
    await Bun.sleep(2)
  }
}

interface Tally {
  allowed: number
  rejected: number
  bannedNow: number
  unavailable: number
}

describeWithEngines(['redis-server'], 'limiter: a take answered after the caller gave up', () => {
  let redis: RedisServer
  let admin: Bun.RedisClient
  beforeAll(async () => {
    redis = await startRedis()
    admin = new Bun.RedisClient(redis.url)
  })
  afterAll(async () => {
    admin.close()
    await redis.destroy()
  })

  test('spends no token, records no rejection and starts no ban: Redis holds exactly what the other answers say', async () => {
    // One instant for every take (an injected clock that does not move): nothing refills, nothing ages.
    const { clock } = futureClock()
    const prefix = uniquePrefix()
    const relay = startRelay(redis.port)
    const limiter = redisLimiter(
      `redis://127.0.0.1:${relay.port}`,
      { banAfter: BAN_AFTER, banSeconds: BAN_SECONDS, now: () => clock.now },
      { prefix, timeoutMs: TIMEOUT_MS },
    )
    try {
      await eventually(() => limiter.ping())
      relay.answerDelayMs = () => Math.random() * 1.5 * TIMEOUT_MS
      // Subjects three at a time, each one's requests one after the other, as clients that wait for answers.
      const subjects = Array.from({ length: 60 }, (_, i) => `key:late${i}`)
      const tallies = new Map(subjects.map((subject) => [subject, { allowed: 0, rejected: 0, bannedNow: 0, unavailable: 0 } as Tally]))
      // A client told 503 waits before trying again (Retry-After): here until the late answers have
      // arrived and what they set off has been sent, so its next request comes after any undo.
      const retryAfter = async () => {
        await eventually(async () => relay.held() === 0, 5_000)
        await eventually(() => limiter.ping(), 5_000)
        await new Promise((resolve) => setImmediate(resolve))
      }
      const client = async (subject: string) => {
        const tally = tallies.get(subject)!
        for (let i = 0; i < CALLS; i++) {
          try {
            const decision: Decision = await limiter.check(subject, LIMITS, true)
            if (decision.allowed) tally.allowed++
            else if (decision.reason === 'rate_limited') {
              tally.rejected++
              if (decision.bannedNow) tally.bannedNow++
            }
          } catch (error) {
            expect(error).toBeInstanceOf(LimiterUnavailableError)
            tally.unavailable++
            await retryAfter()
          }
        }
      }
      const queue = [...subjects]
      await Promise.all([1, 2, 3].map(async () => {
        for (let subject = queue.shift(); subject !== undefined; subject = queue.shift()) await client(subject)
      }))
      relay.answerDelayMs = () => 0

      const sum = (kind: keyof Tally) => [...tallies.values()].reduce((total, tally) => total + tally[kind], 0)
      console.error(`late-answers: of ${subjects.length * CALLS} takes, ${sum('unavailable')} answered 503, ${sum('allowed')} allowed, ${sum('rejected')} refused, ${sum('bannedNow')} bans`)
      // Enough of each kind that late answers hit takes that took, refused and started bans.
      for (const kind of ['unavailable', 'allowed', 'rejected', 'bannedNow'] as const) expect(sum(kind)).toBeGreaterThan(subjects.length / 3)

      // Undos of answers that came late are sent when they arrive: Redis settles on the state the
      // answers account for.
      const mismatches = async () => {
        const wrong: string[] = []
        for (const [subject, tally] of tallies) {
          const [m, d, b] = (await admin.send('HMGET', [`${prefix}s:${subject}`, 'm', 'd', 'b'])) as (string | null)[]
          const rejections = (await admin.send('LLEN', [`${prefix}r:${subject}`])) as number
          const banned = b !== null && Number(b) > clock.now
          const expected = {
            tokens: CAPACITY - tally.allowed,
            banned: tally.bannedNow > 0,
            // A ban starts the count of rejections afresh; without one, each rejection answered is there.
            rejections: tally.bannedNow > 0 ? 0 : tally.rejected,
          }
          const actual = { tokens: Number(m ?? CAPACITY), banned, rejections }
          if (Number(d ?? CAPACITY) !== actual.tokens || !Bun.deepEquals(actual, expected))
            wrong.push(`${subject}: answers ${JSON.stringify(tally)} expect ${JSON.stringify(expected)}, Redis holds ${JSON.stringify({ ...actual, day: d })}`)
        }
        return wrong
      }
      let last: string[] = []
      await eventually(async () => (last = await mismatches()).length === 0, 5_000).catch(() => {})
      expect(last).toEqual([])
      for (const tally of tallies.values()) expect(tally.bannedNow).toBeLessThanOrEqual(1)
    } finally {
      limiter.close()
      relay.close()
    }
  }, 60_000)
})
