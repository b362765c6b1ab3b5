/**
 * What the server counts of its use, per key and minute: answers by outcome class, deprecated getPet
 * calls, and a histogram of durations. Counts only add up (across instances, minutes into hours), so
 * every figure is a sum and percentiles are read from the summed histogram.
 */

import { DAY_MS, HOUR_MS, MINUTE_MS } from './time'

/** How often usage counted in memory is added to storage: what a `kill -9` can lose, and how far figures lag. */
export const USAGE_WRITE_MS = 2_000

/** The key id of requests without a valid key: one bucket for all of them, by nothing more. */
export const NO_KEY = ''

/**
 * Upper bounds of the duration histogram, in ms: powers of two from 0.25 ms to 32.768 s, and one more
 * bucket beyond. A percentile is reported as the upper bound of the bucket it falls in, so it is never
 * below the true value and at most twice it (and "at least 32768" past the last bound).
 */
export const LATENCY_BOUNDS_MS: readonly number[] = Array.from({ length: 18 }, (_, i) => 0.25 * 2 ** i)
/** How many histogram counters a row has: one per bound, and one beyond the last. */
export const LATENCY_SLOTS = LATENCY_BOUNDS_MS.length + 1

/**
 * The counters of one row, in one fixed order: the outcome classes, deprecated calls, the histogram, then
 * the 501s (an outcome class counted apart since a later schema step; before it they were among the 5xx).
 */
export const OK = 0
export const CLIENT_ERRORS = 1
export const LIMITED = 2
export const SERVER_ERRORS = 3
export const DEPRECATED = 4
export const FIRST_LATENCY = 5
export const NOT_IMPLEMENTED = FIRST_LATENCY + LATENCY_SLOTS
export const COUNTERS = NOT_IMPLEMENTED + 1

export type Resolution = 'minute' | 'hour'
export const RESOLUTION_MS: Record<Resolution, number> = { minute: MINUTE_MS, hour: HOUR_MS }

/** One key's counts in one minute or hour. */
export interface UsageRow {
  /** Start of the minute or hour, ms since the epoch (UTC). */
  at: number
  /** NO_KEY for requests without a valid key. */
  keyId: string
  /** COUNTERS numbers, in the order above. */
  counts: number[]
}

/**
 * The slot an answer counts in: 2xx (and the rest below 400), 4xx other than 429, 429, 501, other 5xx.
 * A client that went away (499) counts as a 4xx. A 501 is an operation this server does not implement,
 * by design (GET /store/orders): what it was asked is known and answered, so it is no failure.
 */
export function outcomeOf(status: number): number {
  if (status < 400) return OK
  if (status === 429) return LIMITED
  if (status === 501) return NOT_IMPLEMENTED
  return status < 500 ? CLIENT_ERRORS : SERVER_ERRORS
}

/** The histogram slot of a duration in ms. */
export function latencySlot(ms: number): number {
  let slot = 0
  while (slot < LATENCY_BOUNDS_MS.length && ms > LATENCY_BOUNDS_MS[slot]!) slot++
  return FIRST_LATENCY + slot
}

export function emptyCounts(): number[] {
  return new Array<number>(COUNTERS).fill(0)
}

export function addCounts(into: number[], from: readonly number[]): number[] {
  for (let i = 0; i < COUNTERS; i++) into[i]! += from[i]!
  return into
}

export function requestsIn(counts: readonly number[]): number {
  return counts[OK]! + counts[CLIENT_ERRORS]! + counts[LIMITED]! + counts[NOT_IMPLEMENTED]! + counts[SERVER_ERRORS]!
}

/** The q-quantile (0.5, 0.99) of the durations counted, in ms as LATENCY_BOUNDS_MS says; null for none. */
export function percentileMs(counts: readonly number[], q: number): number | null {
  const total = requestsIn(counts)
  if (total === 0) return null
  const rank = Math.ceil(q * total)
  let seen = 0
  for (let slot = 0; slot < LATENCY_SLOTS; slot++) {
    seen += counts[FIRST_LATENCY + slot]!
    if (seen >= rank) return LATENCY_BOUNDS_MS[Math.min(slot, LATENCY_BOUNDS_MS.length - 1)]!
  }
  return LATENCY_BOUNDS_MS.at(-1)!
}

/** Start of the bucket of `resolution` holding `time`. */
export function bucketStart(time: number, resolution: Resolution): number {
  const size = RESOLUTION_MS[resolution]
  return Math.floor(time / size) * size
}

/** Start of the UTC day holding `time`: "today" in every usage figure. */
export function utcDayStart(time: number): number {
  return Math.floor(time / DAY_MS) * DAY_MS
}

/**
 * Rows summed into one row per bucket of `resolution` and key, in write order (below): minutes into
 * hours, and a batch's rows for one minute (counted before and after a failed write) into one.
 */
export function summed(rows: readonly UsageRow[], resolution: Resolution): UsageRow[] {
  const buckets = new Map<string, UsageRow>()
  for (const row of rows) {
    const at = bucketStart(row.at, resolution)
    const id = `${at} ${row.keyId}`
    const bucket = buckets.get(id)
    if (bucket) addCounts(bucket.counts, row.counts)
    else buckets.set(id, { at, keyId: row.keyId, counts: [...row.counts] })
  }
  // One ordering for every batch of rows written: two instances adding to the same rows at once take
  // their row locks in the same order, so neither waits on the other in a ring (PostgreSQL).
  return [...buckets.values()].sort((a, b) => a.at - b.at || (a.keyId < b.keyId ? -1 : a.keyId > b.keyId ? 1 : 0))
}

/** A key's sums over a period, with the newest bucket that had any request and any deprecated call. */
export interface KeyTotals {
  keyId: string
  counts: number[]
  /** Start of the newest minute or hour with a request; null when none. */
  lastAt: number | null
  /** Start of the newest minute or hour with a deprecated call; null when none. */
  lastDeprecatedAt: number | null
}
