/**
 * Prometheus counters and a latency histogram, kept as plain numbers: an increment per request and
 * text rendering only when /metrics is scraped. Labels are operation names, statuses and key ids,
 * never secrets.
 */
import { DEPRECATED_OPERATION } from '../domain/deprecation'

/** The /metrics histogram's upper bounds, in seconds (Prometheus's `le`). */
const LATENCY_BOUNDS_SECONDS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5]

/** A value kept elsewhere, as render takes it. */
export type Figure = { help: string; value: number; type?: 'gauge' | 'counter' }

interface OperationStats {
  statuses: Map<number, number>
  /** Non-cumulative counts per latency bucket; the last slot is beyond the largest bound. */
  counts: number[]
  sum: number
  count: number
}

export class Metrics {
  // By operation name first: names are a few constants, so this lookup needs no per-request string.
  private readonly operations = new Map<string, OperationStats>()
  private readonly rejections = new Map<string, number>()
  private readonly deprecatedCalls = new Map<string, number>()
  private bans = 0

  observe(operation: string, status: number, seconds: number): void {
    let stats = this.operations.get(operation)
    if (!stats) {
      stats = { statuses: new Map(), counts: new Array(LATENCY_BOUNDS_SECONDS.length + 1).fill(0), sum: 0, count: 0 }
      this.operations.set(operation, stats)
    }
    stats.statuses.set(status, (stats.statuses.get(status) ?? 0) + 1)
    stats.sum += seconds
    stats.count++
    let bucket = 0
    while (bucket < LATENCY_BOUNDS_SECONDS.length && seconds > LATENCY_BOUNDS_SECONDS[bucket]!) bucket++
    stats.counts[bucket]!++
  }

  rateLimited(reason: 'rate_limited' | 'key_banned'): void {
    this.rejections.set(reason, (this.rejections.get(reason) ?? 0) + 1)
  }

  banned(): void {
    this.bans++
  }

  deprecatedCall(keyId: string): void {
    this.deprecatedCalls.set(keyId, (this.deprecatedCalls.get(keyId) ?? 0) + 1)
  }

  /** The text exposition; `extra` adds values kept elsewhere (gauges unless said to be counters). */
  render(extra: Record<string, Figure> = {}): string {
    const lines: string[] = []
    const family = (name: string, type: string, help: string) => lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`)

    family('petstore_requests_total', 'counter', 'Requests answered, by operation and status.')
    for (const [operation, stats] of this.operations)
      for (const [status, value] of stats.statuses)
        lines.push(`petstore_requests_total{operation="${operation}",status="${status}"} ${value}`)
    family('petstore_request_duration_seconds', 'histogram', 'Time from request to response, by operation.')
    for (const [operation, h] of this.operations) {
      let cumulative = 0
      LATENCY_BOUNDS_SECONDS.forEach((bound, i) => {
        cumulative += h.counts[i]!
        lines.push(`petstore_request_duration_seconds_bucket{operation="${operation}",le="${bound}"} ${cumulative}`)
      })
      lines.push(`petstore_request_duration_seconds_bucket{operation="${operation}",le="+Inf"} ${h.count}`)
      lines.push(`petstore_request_duration_seconds_sum{operation="${operation}"} ${h.sum}`)
      lines.push(`petstore_request_duration_seconds_count{operation="${operation}"} ${h.count}`)
    }
    family('petstore_rate_limit_rejections_total', 'counter', 'Requests refused with 429, by reason.')
    for (const reason of ['rate_limited', 'key_banned'])
      lines.push(`petstore_rate_limit_rejections_total{reason="${reason}"} ${this.rejections.get(reason) ?? 0}`)
    family('petstore_bans_total', 'counter', 'Keys or addresses banned for ignoring 429s.')
    lines.push(`petstore_bans_total ${this.bans}`)
    family('petstore_deprecated_calls_total', 'counter', `Calls of deprecated operations (${DEPRECATED_OPERATION}), by key id.`)
    for (const [keyId, value] of this.deprecatedCalls)
      lines.push(`petstore_deprecated_calls_total{operation="${DEPRECATED_OPERATION}",key_id="${keyId}"} ${value}`)
    for (const [name, value] of Object.entries(extra)) {
      family(name, value.type ?? 'gauge', value.help)
      lines.push(`${name} ${value.value}`)
    }
    return `${lines.join('\n')}\n`
  }
}
