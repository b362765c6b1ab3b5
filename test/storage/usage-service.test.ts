/**
 * The usage service's figures (modules/usage/service.ts) over a real store with known rows and a fixed
 * clock: "today" is the UTC day, windows of 24 hours or less are read by the minute and longer ones by
 * the hour, gaps are zeros, percentiles come from the summed histogram, the keyless bucket is its own.
 */
import { afterAll, expect, test } from 'bun:test'
import { makeKey } from '../../src/domain/api-key'
import { CLIENT_ERRORS, DEPRECATED, emptyCounts, FIRST_LATENCY, LIMITED, NO_KEY, OK, type UsageRow } from '../../src/domain/usage'
import { DAY_MS, HOUR_MS, MINUTE_MS } from '../../src/domain/time'
import { UsageService } from '../../src/modules/usage/service'
import { openSqliteStorage } from '../../src/storage/sqlite'

const storage = openSqliteStorage(':memory:')
afterAll(() => storage.close())

/** 00:30 UTC: the day is half an hour old, so the last hour reaches into yesterday. */
const NOW = Date.UTC(2026, 0, 15, 0, 30, 20)
const DAY = Date.UTC(2026, 0, 15)

function row(at: number, keyId: string, slots: Record<number, number>): UsageRow {
  const counts = emptyCounts()
  for (const [slot, value] of Object.entries(slots)) counts[Number(slot)] = value
  return { at, keyId, counts }
}

test('per key, per bucket and for the fleet, the figures are the rows written', async () => {
  const [a, b, c] = ['a', 'b', 'c'].map((name) => makeKey({ plan: 'pro', name }, NOW - 10 * DAY_MS).record)
  for (const record of [a!, b!, c!]) storage.keys.insert(record)
  storage.usage.add([
    row(DAY - 10 * MINUTE_MS, a!.id, { [OK]: 5, [FIRST_LATENCY]: 5 }),
    row(DAY + 10 * MINUTE_MS, a!.id, { [OK]: 3, [LIMITED]: 2, [FIRST_LATENCY + 2]: 5 }),
    row(DAY + 20 * MINUTE_MS, b!.id, { [OK]: 1, [DEPRECATED]: 1, [FIRST_LATENCY + 10]: 1 }),
    row(DAY + 25 * MINUTE_MS, NO_KEY, { [CLIENT_ERRORS]: 4, [FIRST_LATENCY]: 4 }),
    row(DAY - 3 * DAY_MS + 5 * MINUTE_MS, c!.id, { [OK]: 7, [DEPRECATED]: 2, [FIRST_LATENCY]: 7 }),
  ])
  const service = new UsageService(storage, () => NOW)

  const keys = await service.keys()
  const byName = Object.fromEntries(keys.map((k) => [k.name ?? '(no key)', k]))
  expect(Object.keys(byName).sort()).toEqual(['(no key)', 'a', 'b', 'c'])
  expect(byName.a!.today).toEqual({ requests: 5, ok: 3, clientErrors: 0, limited: 2, notImplemented: 0, serverErrors: 0 })
  expect(byName.a!.window).toEqual({ requests: 10, ok: 8, clientErrors: 0, limited: 2, notImplemented: 0, serverErrors: 0 })
  expect(byName.b!.deprecated).toEqual({ day: 1, week: 1, last: DAY + 20 * MINUTE_MS })
  // Three days ago: outside the last day, inside the week, and known to the hour.
  expect(byName.c!.deprecated).toEqual({ day: 0, week: 2, last: DAY - 3 * DAY_MS })
  expect(byName.c!.today.requests).toBe(0)
  expect(byName['(no key)']).toMatchObject({
    keyId: null,
    plan: null,
    today: { requests: 4, clientErrors: 4 },
    lastUsed: DAY + 25 * MINUTE_MS,
  })
  // A 4-day window is read by the hour.
  expect((await service.key(c!.id, 4 * DAY_MS))!.window.ok).toBe(7)
  expect(await service.key('key_missing')).toBeNull()

  const overview = await service.overview()
  expect(overview.activeKeysToday).toBe(2)
  expect(overview.hour.resolution).toBe('minute')
  expect(overview.hour.from).toBe(DAY - 30 * MINUTE_MS)
  expect(overview.hour.points).toHaveLength(61)
  expect(overview.hour.points.filter((p) => p.requests > 0).map((p) => [p.at, p.requests])).toEqual([
    [DAY - 10 * MINUTE_MS, 5],
    [DAY + 10 * MINUTE_MS, 5],
    [DAY + 20 * MINUTE_MS, 1],
    [DAY + 25 * MINUTE_MS, 4],
  ])
  // 15 durations: 9 up to 0.25 ms, 5 up to 1 ms, 1 up to 256 ms.
  expect(overview.hour.total).toMatchObject({ requests: 15, ok: 9, clientErrors: 4, limited: 2, p50: 0.25, p99: 256 })
  expect(overview.day.points).toHaveLength(24 * 60 + 1)
  expect(overview.week.resolution).toBe('hour')
  expect(overview.week.points).toHaveLength(7 * 24 + 1)
  expect(overview.week.total).toMatchObject({ requests: 22, ok: 16, p50: 0.25, p99: 256 })

  const one = await service.series(HOUR_MS, a!.id)
  expect(one.points.filter((p) => p.requests > 0).map((p) => [p.at, p.limited, p.p99])).toEqual([
    [DAY - 10 * MINUTE_MS, 0, 0.25],
    [DAY + 10 * MINUTE_MS, 2, 1],
  ])
  expect((await service.series(HOUR_MS, null)).total.requests).toBe(4)
})
