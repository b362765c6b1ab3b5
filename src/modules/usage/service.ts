/**
 * Usage figures for operators (the console, `keys usage`) from storage's per-key minute and hour rows, so
 * the whole fleet's in PostgreSQL. "Today" is the UTC day; up to 24 hours are read by the minute, longer by
 * the hour. They count what has been written: a few seconds behind the traffic.
 */
import { type ApiKeyRecord, type SecretUse, secretUses } from '../../domain/api-key'
import type { Plan } from '../../domain/plans'
import type { KeyRepository, UsageRepository } from '../../domain/repositories'
import {
  addCounts,
  bucketStart,
  CLIENT_ERRORS,
  DEPRECATED,
  emptyCounts,
  type KeyTotals,
  LIMITED,
  NO_KEY,
  NOT_IMPLEMENTED,
  OK,
  percentileMs,
  requestsIn,
  type Resolution,
  RESOLUTION_MS,
  SERVER_ERRORS,
  utcDayStart,
} from '../../domain/usage'
import { DAY_MS, HOUR_MS } from '../../domain/time'

/**
 * Requests by outcome class: 2xx, 4xx other than 429, 429, 501 (an operation this server does not
 * implement, by design: no failure), 5xx other than 501.
 */
export interface Outcomes {
  requests: number
  ok: number
  clientErrors: number
  limited: number
  notImplemented: number
  serverErrors: number
}

export interface KeyUsage {
  /** null for the requests without a valid key (one bucket for all of them). */
  keyId: string | null
  name: string | null
  plan: Plan | null
  rpm: number | null
  rpd: number | null
  revoked: boolean
  /** From this time on (ms) the key is refused as expired; null: never (or the keyless bucket). */
  expiresAt: number | null
  /** The UTC day so far. */
  today: Outcomes
  /** From `since` (to the minute, or the hour beyond 24 hours) to now. */
  window: Outcomes
  /** The key's last request (ms), as the server recorded it; for the keyless bucket, the start of its last minute (hour past 24 hours). */
  lastUsed: number | null
  /** The key's working secrets, each with its last use (none for the keyless bucket). */
  secrets: SecretUse[]
  deprecated: {
    /** getPet calls in the last 24 hours (to the minute). */
    day: number
    /** getPet calls in the last 7 days (from the start of the hour 7 days ago). */
    week: number
    /** Start of the minute (or hour, past 24 hours) of the last getPet call in the last 7 days; null when none. */
    last: number | null
  }
}

export interface UsagePoint extends Outcomes {
  /** Start of the minute or hour. */
  at: number
  /** Median and 99th percentile of durations, in ms: the upper bound of their histogram bucket (within 2×). */
  p50: number | null
  p99: number | null
}

export interface UsageSeries {
  resolution: Resolution
  from: number
  /** Every minute or hour from `from` to now, zeros included. */
  points: UsagePoint[]
  total: UsagePoint
}

export type Window = 'hour' | 'day' | 'week'
export const WINDOWS: Record<Window, { ms: number; resolution: Resolution }> = {
  hour: { ms: HOUR_MS, resolution: 'minute' },
  day: { ms: DAY_MS, resolution: 'minute' },
  week: { ms: 7 * DAY_MS, resolution: 'hour' },
}

/** A series for each window, and the keys (not the keyless bucket) with a request in the UTC day so far. */
export interface Overview extends Record<Window, UsageSeries> {
  activeKeysToday: number
}

/** Windows up to a day are read by the minute, longer ones by the hour. */
const resolutionOf = (sinceMs: number): Resolution => (sinceMs <= DAY_MS ? 'minute' : 'hour')

export class UsageService {
  constructor(
    private readonly storage: { usage: UsageRepository; keys: KeyRepository },
    private readonly now: () => number = Date.now,
  ) {}

  /** Every key, and the keyless bucket when it has requests, with its figures; `sinceMs` sets the window. */
  async keys(sinceMs = DAY_MS): Promise<KeyUsage[]> {
    const [records, totals] = await Promise.all([this.storage.keys.list(), this.windows(sinceMs)])
    const keyless = [NO_KEY].filter((id) => [totals.today, totals.window, totals.week].some((sums) => sums.has(id)))
    return [...records.map((record) => figures(record.id, record, totals)), ...keyless.map((id) => figures(id, undefined, totals))]
  }

  /** One key's figures, from its own rows alone; null when there is no such key. */
  async key(id: string, sinceMs = DAY_MS): Promise<KeyUsage | null> {
    const [record, totals] = await Promise.all([this.storage.keys.get(id), this.windows(sinceMs, id)])
    return record ? figures(id, record, totals) : null
  }

  /**
   * Requests per minute (or hour) from `sinceMs` ago to now, by outcome, with p50/p99: of one key,
   * of the keyless bucket (null), or of every request (undefined).
   */
  async series(sinceMs: number, keyId?: string | null): Promise<UsageSeries> {
    const resolution = resolutionOf(sinceMs)
    const now = this.now()
    const step = RESOLUTION_MS[resolution]
    const from = bucketStart(now - sinceMs, resolution)
    const rows = await this.storage.usage.series(resolution, from, keyId === null ? NO_KEY : keyId)
    const byAt = new Map(rows.map((row) => [row.at, row.counts]))
    const points: UsagePoint[] = []
    const sum = emptyCounts()
    for (let at = from; at <= now; at += step) {
      const counts = byAt.get(at) ?? emptyCounts()
      addCounts(sum, counts)
      points.push(point(at, counts))
    }
    return { resolution, from, points, total: point(from, sum) }
  }

  /** The fleet: requests over the last hour, day and week by outcome with p50/p99, and active keys today. */
  async overview(): Promise<Overview> {
    const [today, hour, day, week] = await Promise.all([
      this.totals('hour', utcDayStart(this.now())),
      ...(['hour', 'day', 'week'] as const).map((window) => this.series(WINDOWS[window].ms)),
    ])
    const activeKeysToday = [...today.values()].filter((t) => t.keyId !== NO_KEY && requestsIn(t.counts) > 0).length
    return { activeKeysToday, hour: hour!, day: day!, week: week! }
  }

  /** The sums each figure is made of, per key (of one key, `keyId`): today, the window, the last day and week. */
  private async windows(sinceMs: number, keyId?: string): Promise<Windows> {
    const now = this.now()
    const windowResolution = resolutionOf(sinceMs)
    const [today, window, day, week] = await Promise.all([
      this.totals('hour', utcDayStart(now), keyId),
      this.totals(windowResolution, bucketStart(now - sinceMs, windowResolution), keyId),
      this.totals('minute', bucketStart(now - DAY_MS, 'minute'), keyId),
      this.totals('hour', bucketStart(now - 7 * DAY_MS, 'hour'), keyId),
    ])
    return { today: today!, window: window!, day: day!, week: week! }
  }

  private async totals(resolution: Resolution, from: number, keyId?: string): Promise<Map<string, KeyTotals>> {
    return new Map((await this.storage.usage.totals(resolution, from, keyId)).map((totals) => [totals.keyId, totals]))
  }
}

type Windows = Record<'today' | 'window' | 'day' | 'week', Map<string, KeyTotals>>

/** A key's figures (or the keyless bucket's, without a record) from the sums of every window. */
function figures(keyId: string, record: ApiKeyRecord | undefined, { today, window, day, week }: Windows): KeyUsage {
  const dayTotals = day.get(keyId)
  const weekTotals = week.get(keyId)
  return {
    keyId: record?.id ?? null,
    name: record?.name ?? null,
    plan: record?.plan ?? null,
    rpm: record?.rpm ?? null,
    rpd: record?.rpd ?? null,
    revoked: record ? record.revokedAt !== null : false,
    expiresAt: record?.expiresAt ?? null,
    today: outcomes(today.get(keyId)?.counts),
    window: outcomes(window.get(keyId)?.counts),
    lastUsed: record ? record.lastUsedAt : (dayTotals?.lastAt ?? weekTotals?.lastAt ?? null),
    secrets: record ? secretUses(record) : [],
    deprecated: {
      day: dayTotals?.counts[DEPRECATED] ?? 0,
      week: weekTotals?.counts[DEPRECATED] ?? 0,
      last: dayTotals?.lastDeprecatedAt ?? weekTotals?.lastDeprecatedAt ?? null,
    },
  }
}

function outcomes(counts: readonly number[] = emptyCounts()): Outcomes {
  return {
    requests: requestsIn(counts),
    ok: counts[OK]!,
    clientErrors: counts[CLIENT_ERRORS]!,
    limited: counts[LIMITED]!,
    notImplemented: counts[NOT_IMPLEMENTED]!,
    serverErrors: counts[SERVER_ERRORS]!,
  }
}

function point(at: number, counts: readonly number[]): UsagePoint {
  return { at, ...outcomes(counts), p50: percentileMs(counts, 0.5), p99: percentileMs(counts, 0.99) }
}
