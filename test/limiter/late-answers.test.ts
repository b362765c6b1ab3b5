/**
 * A take that Redis ran in time but whose answer reached us after our timeout: the client got 503, so
 * the take must spend nothing and count toward nothing. Against a real redis-server behind a relay that
 * holds each answer back for a random while, about the timeout (a slow network, or a Redis too busy to
 * write its answers), so that many answers arrive after the timer; Redis's state must then be exactly
 * what the other answers account for: tokens spent, rejections recorded, bans started.
 */
import { expect, test } from 'bun:test'
import type { Limits } from '../../src/domain/plans'
import type { Decision } from '../../src/limiter/limiter'
import { LimiterUnavailableError } from '../../src/limiter/backend'
import { describeWithEngines } from '../support/engines'
import { redisForSuite } from '../support/redis'
import { type Relay, startRelay } from '../support/relay'
import { type AnyLimiter, futureClock, redisLimiter, uniquePrefix, named } from './stores'

const CAPACITY = 3
const LIMITS: Limits = { rpm: CAPACITY, rpd: CAPACITY }
const BAN_AFTER = 2
const BAN_SECONDS = 600
const TIMEOUT_MS = 20
const CALLS = CAPACITY + BAN_AFTER + 12
// The 73 requests of a run come 6 ms apart, so some are sent while a reconnect after an earlier 503 is under way.
const STAGGER_MS = 6

async function eventually(condition: () => Promise<boolean>, ms = 10_000): Promise<void> {
  for (const deadline = Date.now() + ms; !(await condition()); ) {
    if (Date.now() > deadline) throw new Error(`not true within ${ms} ms`)
    await Bun.sleep(2)
  }
}

/** What one subject's client was answered. */
interface Tally {
  allowed: number
  rejected: number
  bannedNow: number
  unavailable: number
}

/** What Redis holds for one subject. */
interface Held {
  tokens: number
  dayTokens: number
  banned: boolean
  rejections: number
}

describeWithEngines(['redis-server'], 'limiter: a take answered after the caller gave up', () => {
  const redis = redisForSuite()

  /**
   * 60 subjects, three at a time, each one's requests one after the other, through a relay that holds
   * each answer back for up to 1.5 times the timeout; `afterUnavailable` runs when a request got 503.
   * Answers the tallies, once Redis holds what `settled` accepts (undos are sent as late answers arrive).
   */
  async function hammer(
    afterUnavailable: (relay: Relay, limiter: AnyLimiter) => Promise<void>,
    settled: (tally: Tally, held: Held) => string | null,
  ) {
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
      const subjects = Array.from({ length: 60 }, (_, i) => `key:late${i}`)
      const tallies = new Map(subjects.map((subject) => [subject, { allowed: 0, rejected: 0, bannedNow: 0, unavailable: 0 } as Tally]))
      const client = async (subject: string) => {
        const tally = tallies.get(subject)!
        for (let i = 0; i < CALLS; i++) {
          try {
            const decision: Decision = await limiter.check(named(subject), LIMITS)
            if (decision.allowed) tally.allowed++
            else if (decision.reason === 'rate_limited' || decision.bannedNow) {
              tally.rejected++
              if (decision.bannedNow) tally.bannedNow++
            }
          } catch (error) {
            expect(error).toBeInstanceOf(LimiterUnavailableError)
            tally.unavailable++
            await afterUnavailable(relay, limiter)
          }
        }
      }
      const queue = [...subjects]
      await Promise.all(
        [1, 2, 3].map(async () => {
          for (let subject = queue.shift(); subject !== undefined; subject = queue.shift()) await client(subject)
        }),
      )
      relay.answerDelayMs = () => 0

      const sum = (kind: keyof Tally) => [...tallies.values()].reduce((total, tally) => total + tally[kind], 0)
      console.error(
        `late-answers: of ${subjects.length * CALLS} takes, ${sum('unavailable')} answered 503, ${sum('allowed')} allowed, ${sum('rejected')} refused, ${sum('bannedNow')} bans`,
      )
      // Enough of each kind that late answers hit takes that took, refused and started bans: a floor, not a
      // figure (runs reach 44 to 60 bans and over 170 of each other kind; with six calls past the ones a ban needs, a loaded
      // host answering half the takes 503 once left 9).
      for (const kind of ['unavailable', 'allowed', 'rejected', 'bannedNow'] as const)
        expect(sum(kind)).toBeGreaterThanOrEqual(subjects.length / 6)

      const mismatches = async () => {
        const wrong: string[] = []
        for (const [subject, tally] of tallies) {
          const [m, d, b] = (await redis.admin.send('HMGET', [`${prefix}s:${subject}`, 'm', 'd', 'b'])) as (string | null)[]
          const held: Held = {
            tokens: Number(m ?? CAPACITY),
            dayTokens: Number(d ?? CAPACITY),
            banned: b !== null && Number(b) > clock.now,
            rejections: (await redis.admin.send('LLEN', [`${prefix}r:${subject}`])) as number,
          }
          const wrongHere = settled(tally, held)
          if (wrongHere) wrong.push(`${subject}: answers ${JSON.stringify(tally)}, Redis holds ${JSON.stringify(held)}: ${wrongHere}`)
        }
        return wrong
      }
      let last: string[] = []
      await eventually(async () => (last = await mismatches()).length === 0, 5_000).catch(() => {})
      expect(last).toEqual([])
    } finally {
      limiter.close()
      relay.close()
    }
  }

  /** Tokens spent are the allowed answers, in both buckets. */
  function tokensWrong(tally: Tally, held: Held): string | null {
    const expected = CAPACITY - tally.allowed
    return held.tokens === expected && held.dayTokens === expected ? null : `expected ${expected} tokens`
  }

  test('spends no token, records no rejection and starts no ban: Redis holds exactly what the other answers say', async () => {
    // A client told 503 waits before trying again (Retry-After): here until the late answers have
    // arrived and what they set off has been sent, so its next request comes after any undo.
    const retryAfter = async (relay: Relay, limiter: AnyLimiter) => {
      await eventually(async () => relay.held() === 0, 5_000)
      await eventually(() => limiter.ping(), 5_000)
      await new Promise((resolve) => setImmediate(resolve))
    }
    await hammer(retryAfter, (tally, held) => {
      // A ban starts the count of rejections afresh; without one, each rejection answered is there but the
      // first, which was sent before any refusal named a time (the clock does not move: every later one is early).
      const expected = { banned: tally.bannedNow > 0, rejections: tally.bannedNow > 0 ? 0 : Math.max(0, tally.rejected - 1) }
      if (tally.bannedNow > 1) return 'more than one ban started'
      return (
        tokensWrong(tally, held) ??
        (Bun.deepEquals({ banned: held.banned, rejections: held.rejections }, expected) ? null : `expected ${JSON.stringify(expected)}`)
      )
    })
  }, 60_000)

  test('with clients that retry at once: tokens spent are the allowed answers, and no ban without banAfter+1 visible refusals', async () => {
    await hammer(
      async () => {},
      (tally, held) => {
        if (held.banned && tally.rejected < BAN_AFTER + 1) return `banned after ${tally.rejected} refusals answered`
        if (!held.banned && held.rejections > tally.rejected) return 'more rejections recorded than answered'
        return tokensWrong(tally, held)
      },
    )
  }, 60_000)
})

describeWithEngines(['redis-server'], 'limiter: many takes at once, answered about the deadline', () => {
  const redis = redisForSuite()

  // Issue 21: with answers held 90 to 120 ms behind the default 100 ms deadline, a run of 73 requests at
  // once on a 1,000 a minute key once spent 27 tokens for 25 allowed. Every run must be exact.
  test('20 runs of 73 simultaneous takes: the tokens spent are exactly the takes allowed, every run', async () => {
    const { clock } = futureClock()
    const prefix = uniquePrefix()
    const relay = startRelay(redis.port)
    const limits: Limits = { rpm: 1_000, rpd: 1_000 }
    // A reconnect may take 400 ms (1,000 by default): a few answers held 100 ms each use that up, as a busy machine does.
    const limiter = redisLimiter(`redis://127.0.0.1:${relay.port}`, { now: () => clock.now }, { prefix, connectTimeoutMs: 400 })
    const wrong: string[] = []
    const counts: string[] = []
    try {
      await eventually(() => limiter.ping())
      for (let run = 0; run < 20; run++) {
        const subject = `key:run${run}`
        relay.answerDelayMs = () => 90 + Math.random() * 30
        const answers = await Promise.all(
          Array.from({ length: 73 }, async (_, i) => {
            await Bun.sleep(i * STAGGER_MS)
            return Promise.resolve(limiter.check(named(subject), limits)).then(
              (decision) => (decision.allowed ? 'allowed' : 'refused'),
              (error: unknown) => (error instanceof LimiterUnavailableError ? 'unavailable' : 'failed'),
            )
          }),
        )
        relay.answerDelayMs = () => 0
        const allowed = answers.filter((answer) => answer === 'allowed').length
        counts.push(`${allowed}/${answers.filter((answer) => answer === 'unavailable').length}`)
        // Late answers arrive and their undos are sent; then Redis must hold exactly the allowed takes.
        const spent = async () => {
          const [m, d] = (await redis.admin.send('HMGET', [`${prefix}s:${subject}`, 'm', 'd'])) as (string | null)[]
          return `${1_000 - Number(m ?? 1_000)} ${1_000 - Number(d ?? 1_000)}`
        }
        let held = ''
        await eventually(async () => relay.held() === 0 && (held = await spent()) === `${allowed} ${allowed}`, 3_000).catch(() => {})
        if (held !== `${allowed} ${allowed}`) wrong.push(`run ${run}: ${allowed} allowed, Redis spent (minute, day) ${held}`)
        await eventually(() => limiter.ping(), 5_000)
      }
      console.error(`late-answers: allowed/503 per run: ${counts.join(' ')}`)
      expect(wrong).toEqual([])
    } finally {
      limiter.close()
      relay.close()
    }
  }, 120_000)
})
