/**
 * Per-key usage counted in memory on the request path: an increment into the current minute's row of
 * the key, nothing more. A background job (jobs.ts) takes what was counted every few seconds and adds
 * it to storage; what it could not write is given back and tried again with the next batch.
 */
import { DEPRECATED, emptyCounts, latencySlot, NO_KEY, outcomeOf, type UsageRow } from '../domain/usage'
import { MINUTE_MS } from '../domain/time'

/** Minute rows kept while storage does not take them (about an hour of 500 busy keys); the oldest go first. */
const MAX_UNWRITTEN_ROWS = 30_000

/** Filled by plugins/answer-records.ts with the API's answers only (not /healthz, /metrics, the docs). */
export interface UsageCounterOptions {
  now?: () => number
  /** Said when unwritten rows had to be dropped. */
  onDropped?: (rows: number) => void
}

export class UsageCounter {
  private minute = -1
  /** The current minute's counts, by key id. */
  private current = new Map<string, number[]>()
  /** Minutes counted and not yet taken, or given back after a failed write. */
  private unwritten: UsageRow[] = []
  private readonly now: () => number

  constructor(private readonly options: UsageCounterOptions) {
    this.now = options.now ?? Date.now
  }

  /** Counts one answer. `keyId` is the valid key's, undefined without one. */
  count(keyId: string | undefined, status: number, seconds: number): void {
    const counts = this.countsOf(keyId ?? NO_KEY)
    counts[outcomeOf(status)]!++
    counts[latencySlot(seconds * 1000)]!++
  }

  /** Counts a call of the deprecated operation, told by its handler, as /metrics counts it. */
  deprecatedCall(keyId: string): void {
    this.countsOf(keyId)[DEPRECATED]!++
  }

  /** The current minute's counts of a key (or NO_KEY), the minute closed first when it has passed. */
  private countsOf(id: string): number[] {
    const minute = Math.floor(this.now() / MINUTE_MS)
    if (minute !== this.minute) this.closeMinute(minute)
    let counts = this.current.get(id)
    if (counts === undefined) {
      counts = emptyCounts()
      this.current.set(id, counts)
    }
    return counts
  }

  /** Everything counted since the last take, as minute rows; the counts start again from zero. */
  take(): UsageRow[] {
    this.closeMinute(this.minute)
    const rows = this.unwritten
    this.unwritten = []
    return rows
  }

  /** Rows a write did not take: kept for the next one (up to a bound). */
  giveBack(rows: UsageRow[]): void {
    this.unwritten = rows.concat(this.unwritten)
    const excess = this.unwritten.length - MAX_UNWRITTEN_ROWS
    if (excess > 0) {
      this.unwritten.splice(0, excess)
      this.options.onDropped?.(excess)
    }
  }

  /** Moves the current minute's counts to the unwritten rows and starts `next`. */
  private closeMinute(next: number): void {
    if (this.current.size > 0) {
      const at = this.minute * MINUTE_MS
      for (const [keyId, counts] of this.current) this.unwritten.push({ at, keyId, counts })
      this.current = new Map()
    }
    this.minute = next
  }
}
