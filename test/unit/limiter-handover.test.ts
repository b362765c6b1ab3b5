/**
 * The in-process limiter's state handed over in a takeover or a restart, through the file the data file's folder
 * holds (handover.ts), on an injected clock: bans, the rejections toward one, and addresses' buckets
 * arrive as they left; the console lists the bans; a file from a petstore that handed over only the
 * keys' minute buckets is still read. The binary's takeover is tested in test/process/takeover.test.ts.
 */
import { describe, expect, test } from 'bun:test'
import { symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Limits } from '../../src/domain/plans'
import { RateLimiter } from '../../src/limiter/limiter'
import { named } from '../limiter/stores'
import { takeHandover, writeHandover } from '../../src/storage/sqlite/handover'
import { tempDir } from '../support/binary'

const T0 = Date.UTC(2026, 0, 1)
const TINY: Limits = { rpm: 2, rpd: 1000 }
const FREE: Limits = { rpm: 60, rpd: 1000 }

function make(clock: { now: number }, handedOver?: ReturnType<RateLimiter['handover']>) {
  return new RateLimiter({ banAfter: 3, banSeconds: 600, maxAddresses: 1000, now: () => clock.now }, new Map(), handedOver)
}

describe('limiter hand-over', () => {
  test('bans, rejections toward a ban and address buckets arrive as they left, through the file', async () => {
    const clock = { now: T0 }
    const old = make(clock)
    // The key: 2 allowed, a refusal naming the wait, then the fourth early one starts its ban.
    for (let i = 0; i < 7; i++) await old.check(named('key:a'), TINY)
    expect(await old.check(named('key:a'), TINY)).toMatchObject({ allowed: false, reason: 'key_banned' })
    // One address spends its 60 and is refused three times: the first names the wait, the other two
    // are two of the four early refusals a ban needs (the time the last one named is handed over too).
    for (let i = 0; i < 63; i++) await old.check(named('ip:203.0.113.5'), FREE)
    // Another address is seen once: handed over until its buckets are full again.
    await old.check(named('ip:203.0.113.9'), FREE)
    clock.now += 500

    const file = join(tempDir(), 'petstore.db')
    writeHandover(file, old.handover())
    const state = takeHandover(file)
    expect([...state.addresses.keys()]).toEqual(['ip:203.0.113.5', 'ip:203.0.113.9'])
    const next = make(clock, state)
    expect(next.admin.bans(clock.now)).toEqual([{ subject: named('key:a'), until: T0 + 600_000 }])
    expect(await next.check(named('key:a'), TINY)).toMatchObject({ allowed: false, reason: 'key_banned', retryAfter: 600 })
    // Two more early refusals make four within the minute: the ban starts on the second.
    expect(await next.check(named('ip:203.0.113.5'), FREE)).toMatchObject({ allowed: false, bannedNow: false })
    expect(await next.check(named('ip:203.0.113.5'), FREE)).toMatchObject({ allowed: false, bannedNow: true })
    // The file is read once.
    expect(takeHandover(file)).toEqual({ keys: new Map(), addresses: new Map() })
    // 100 s on, the address seen once has refilled its day's one token (1,000 a day): as a new one.
    clock.now += 100_000
    expect([...old.handover().addresses.keys()]).toEqual(['ip:203.0.113.5'])
  })

  test('the turns its 429s told are handed over: clients back at their times are on time after the restart', async () => {
    const clock = { now: T0 }
    const old = make(clock)
    // The key's 60, then three refusals at once: told 1, 2 and 3 s, the last two early (two of the four a ban needs).
    for (let i = 0; i < 60; i++) await old.check(named('key:a'), FREE)
    expect((await Promise.all([1, 2, 3].map(() => old.check(named('key:a'), FREE)))).map((d) => !d.allowed && d.retryAfter)).toEqual([
      1, 2, 3,
    ])
    clock.now += 500
    const file = join(tempDir(), 'petstore.db')
    writeHandover(file, old.handover())
    const next = make(clock, takeHandover(file))
    // Each client comes back at its own time, is let through, and asks again at once: refused, but
    // forgiven, as it came back on time. Had only the last time told been handed over, the first two
    // would be early, their second requests counted, and the second would start a ban.
    for (const at of [1_000, 2_000, 3_000]) {
      clock.now = T0 + at
      expect(await next.check(named('key:a'), FREE)).toMatchObject({ allowed: true })
      clock.now += 1
      expect(await next.check(named('key:a'), FREE)).toMatchObject({ allowed: false, reason: 'rate_limited', bannedNow: false })
    }
  })

  test('what would be as a new subject is not handed on: a key whose minute refilled, an unused one whose ban ended', async () => {
    const clock = { now: T0 }
    const old = make(clock)
    for (let i = 0; i < 7; i++) await old.check(named('key:a'), TINY)
    await old.check(named('key:b'), FREE)
    // The stop saved the keys' day buckets in storage, as it does unless storage refuses.
    old.markSaved(old.unsavedDayBuckets())
    clock.now += 500
    expect([...old.handover().keys.keys()].sort()).toEqual(['key:a', 'key:b'])
    // key:b's minute is full a minute on; key:a's ban still holds, so it is handed on unused.
    clock.now += 60_000
    const next = make(clock, old.handover())
    expect([...next.handover().keys.keys()]).toEqual(['key:a'])
    // Its ban over, with nothing in the last minute, it goes.
    clock.now += 600_000
    expect(next.handover()).toEqual({ keys: new Map(), addresses: new Map() })
  })

  test("a key's day bucket the stop could not save is handed over, counted on, and saved by the next server", async () => {
    const clock = { now: T0 }
    const DAILY: Limits = { rpm: 1000, rpd: 3 }
    const old = make(clock)
    for (let i = 0; i < 3; i++) await old.check(named('key:d'), DAILY)
    clock.now += 500
    const state = old.handover()
    expect(state.keys.get('key:d')?.day?.tokens).toBeLessThan(1)
    // Its day saved earlier in storage, before the three: the handed-over one is newer, and counts.
    const next = new RateLimiter(
      { banAfter: 3, banSeconds: 600, maxAddresses: 1000, now: () => clock.now },
      new Map([['key:d', { tokens: 3, updatedAt: T0 - 1_000 }]]),
      state,
    )
    expect(await next.check(named('key:d'), DAILY)).toMatchObject({ allowed: false, reason: 'rate_limited' })
    expect(next.unsavedDayBuckets().get('key:d')?.tokens).toBeLessThan(1)
    // A day bucket that was saved is not handed over: storage has it.
    old.markSaved(old.unsavedDayBuckets())
    expect(old.handover().keys.get('key:d')?.day).toBeUndefined()
  })

  test('a key handed over under other limits starts afresh, its saved day bucket too, and keeps its ban; the console reads it so', async () => {
    const clock = { now: T0 }
    const old = make(clock)
    for (let i = 0; i < 7; i++) await old.check(named('key:a'), TINY)
    for (let i = 0; i < 2; i++) await old.check(named('key:b'), TINY)
    const file = join(tempDir(), 'petstore.db')
    writeHandover(file, old.handover())
    const state = takeHandover(file, clock.now)
    expect(state.keys.get('key:b')?.limits).toEqual(TINY)
    // Addresses are always limited as the Free plan: no limits written for them.
    const OTHER: Limits = { rpm: 5, rpd: 100 }
    const next = new RateLimiter(
      { banAfter: 3, banSeconds: 600, maxAddresses: 1000, now: () => clock.now },
      new Map([['key:b', { tokens: 3, updatedAt: T0 }]]),
      state,
    )
    expect(await next.admin.inspect(named('key:b'), OTHER)).toEqual({ dayLeft: OTHER.rpd, bannedUntil: null })
    expect(await next.check(named('key:b'), OTHER)).toMatchObject({ allowed: true, quota: { remaining: OTHER.rpm - 1 } })
    expect(await next.check(named('key:a'), OTHER)).toMatchObject({ allowed: false, reason: 'key_banned' })
  })

  test('the day handed over wins over the one saved; a saved one under other limits than the handover says is stale: the take and the console agree', async () => {
    const clock = { now: T0 }
    const L0: Limits = { rpm: 60, rpd: 10 }
    const L1: Limits = { rpm: 60, rpd: 40 }
    const limiterWith = (handed: Parameters<typeof make>[1], saved: [string, { tokens: number; updatedAt: number; limits?: Limits }][]) =>
      new RateLimiter({ banAfter: 3, banSeconds: 600, maxAddresses: 1000, now: () => clock.now }, new Map(saved), handed)
    // Moved to L1 while serving, used under it, and the stop's save refused: the handover has the day.
    const handedDay = limiterWith(
      {
        keys: new Map([['key:a', { limits: L1, minute: { tokens: 60, updatedAt: T0 }, day: { tokens: 5, updatedAt: T0 } }]]),
        addresses: new Map(),
      },
      [['key:a', { tokens: 2, updatedAt: T0, limits: L0 }]],
    )
    expect(await handedDay.admin.inspect(named('key:a'), L1)).toEqual({ dayLeft: 5, bannedUntil: null })
    expect(await handedDay.check(named('key:a'), L1)).toMatchObject({ allowed: true, quota: { window: 'day', remaining: 4 } })
    // Handed over under L1 without a day (it was saved, under L0 before the move): that day is stale.
    const handedNoDay = limiterWith(
      { keys: new Map([['key:a', { limits: L1, minute: { tokens: 59, updatedAt: T0 } }]]), addresses: new Map() },
      [['key:a', { tokens: 2, updatedAt: T0, limits: L0 }]],
    )
    expect(await handedNoDay.admin.inspect(named('key:a'), L1)).toEqual({ dayLeft: 40, bannedUntil: null })
    expect(await handedNoDay.check(named('key:a'), L1)).toMatchObject({ allowed: true, quota: { window: 'day', remaining: 39 } })
  })

  test('a file from a petstore that handed over only minute buckets gives those; a damaged one gives nothing', async () => {
    const clock = { now: T0 }
    const file = join(tempDir(), 'petstore.db')
    writeFileSync(`${file}.handover`, JSON.stringify({ minutes: { 'key:a': { tokens: 0, updatedAt: T0 }, 'key:b': { tokens: 'x' } } }))
    const state = takeHandover(file)
    expect(state).toEqual({ keys: new Map([['key:a', { minute: { tokens: 0, updatedAt: T0 } }]]), addresses: new Map() })
    expect(await make(clock, state).check(named('key:a'), TINY)).toMatchObject({ allowed: false, reason: 'rate_limited' })
    writeFileSync(`${file}.handover`, '{"minutes":')
    expect(takeHandover(file)).toEqual({ keys: new Map(), addresses: new Map() })
  })

  test('restarts do not add up addresses: a hand-over holds at most the cap, the ones served first, then the newest handed', async () => {
    const clock = { now: T0 }
    const capped = (handedOver?: ReturnType<RateLimiter['handover']>) =>
      new RateLimiter({ banAfter: 3, banSeconds: 600, maxAddresses: 3, now: () => clock.now }, new Map(), handedOver)
    const first = capped()
    for (const address of ['ip:10.0.0.1', 'ip:10.0.0.2', 'ip:10.0.0.3']) await first.check(named(address), FREE)
    clock.now += 1_000
    const second = capped(first.handover())
    // Two others are served after the restart: they are kept, with the newest handed one beside them.
    await second.check(named('ip:10.0.0.8'), FREE)
    clock.now += 1_000
    await second.check(named('ip:10.0.0.9'), FREE)
    const handed = second.handover()
    expect(handed.addresses.size).toBe(3)
    expect([...handed.addresses.keys()].sort()).toEqual(['ip:10.0.0.3', 'ip:10.0.0.8', 'ip:10.0.0.9'])
  })

  test('only a regular file of a sane size is read, and values no server writes are brought within what one could', () => {
    const file = join(tempDir(), 'petstore.db')
    const none = { keys: new Map(), addresses: new Map() }
    // A FIFO would hang the start; a link to /dev/zero would fill its memory.
    Bun.spawnSync(['mkfifo', `${file}.handover`])
    expect(takeHandover(file, T0)).toEqual(none)
    symlinkSync('/dev/zero', `${file}.handover`)
    expect(takeHandover(file, T0)).toEqual(none)
    writeFileSync(
      `${file}.handover`,
      JSON.stringify({
        keys: {
          'key:a': {
            minute: { tokens: -1e300, updatedAt: T0 + 9e12 },
            bannedUntil: 1e300,
            rejections: [T0 + 9e12],
          },
          // Turns are kept up to a second after the last time told, and no more of them than a server keeps.
          'key:b': { minute: { tokens: 0, updatedAt: T0 }, retryAt: T0 + 5_000, turns: [T0 + 9e12, T0 + 6_000, T0 + 1_000] },
          'key:c': { minute: { tokens: 0, updatedAt: T0 }, retryAt: T0 + 5_000, turns: Array.from({ length: 65 }, () => T0) },
          'key:d': { minute: { tokens: 0, updatedAt: T0 }, turns: [T0 + 1_000] },
        },
        addresses: {},
      }),
    )
    const taken = takeHandover(file, T0)
    expect(taken.keys.get('key:a')).toEqual({
      minute: { tokens: 0, updatedAt: T0 },
      bannedUntil: T0 + 31_536_000_000,
      rejections: [T0],
    })
    expect(taken.keys.get('key:b')?.turns).toEqual([T0 + 1_000, T0 + 6_000])
    expect(taken.keys.get('key:c')?.turns).toBeUndefined()
    expect(taken.keys.get('key:d')?.turns).toBeUndefined()
  })
})
