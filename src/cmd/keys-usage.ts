/** `petstore keys usage [ID] [--since DURATION] [--json]`: the usage figures (modules/usage) of every key, or of one. */
import { ConfigError } from '../config'
import type { Storage } from '../domain/repositories'
import { durationMs } from '../domain/duration'
import { DAY_MS, iso, MINUTE_MS } from '../domain/time'
import { utcDayStart } from '../domain/usage'
import { printTable } from './options'
import { type KeyUsage, type Outcomes, type UsagePoint, UsageService } from '../modules/usage/service'

const LONGEST_MS = 90 * DAY_MS

/** A duration such as 30m, 24h or 7d, from a minute to 90 days. */
export function parseSince(value: string): number {
  const ms = durationMs(value) ?? 0
  if (ms < MINUTE_MS || ms > LONGEST_MS)
    throw new ConfigError(`--since must be a duration from 1m to 90d such as 30m, 24h or 7d, not "${value.slice(0, 40)}"`)
  return ms
}

/** The key named is not there (or not active): its id cut short, since what was given may be anything. */
export function noKey(what: 'key' | 'active key', id: string, where: string): number {
  console.error(`petstore: no ${what} with id "${id.slice(0, 64)}" in ${where}`)
  return 1
}

export async function printUsage(
  storage: Storage,
  options: { id: string | undefined; sinceMs: number; json: boolean; where: string },
): Promise<number> {
  // After the reads, so that a failed read is the only line.
  const heading = () => console.error(`petstore: usage in ${options.where}`)
  const service = new UsageService(storage)
  const now = Date.now()
  const since = iso(now - options.sinceMs)
  const dayStart = iso(utcDayStart(now))
  if (options.id === undefined) {
    const keys = await service.keys(options.sinceMs)
    if (options.json) console.log(JSON.stringify({ dayStart, since, keys: keys.map(asJson) }, null, 2))
    else {
      heading()
      printKeys(keys)
    }
    return 0
  }
  const key = await service.key(options.id, options.sinceMs)
  if (!key) return noKey('key', options.id, options.where)
  const series = await service.series(options.sinceMs, key.keyId)
  const points = series.points.filter((point) => point.requests > 0)
  if (options.json) {
    console.log(
      JSON.stringify(
        { dayStart, since, ...asJson(key), series: { resolution: series.resolution, points: points.map(pointJson) } },
        null,
        2,
      ),
    )
    return 0
  }
  heading()
  printKeys([key])
  console.log('\nSecrets (after a roll, the previous one works until its overlap ends):')
  printTable(
    ['SECRET', 'LAST USED', 'WORKS UNTIL'],
    key.secrets.map((s) => [s.secret, iso(s.lastUsedAt) ?? '-', iso(s.endsAt) ?? 'no expiry']),
  )
  console.log(`\nRequests per ${series.resolution} since ${since} (only ${series.resolution}s with requests):`)
  printTable(
    ['AT', 'REQUESTS', '2XX', '4XX', '429', '501', '5XX', 'P50 MS', 'P99 MS'],
    points.map((p) => [iso(p.at)!, ...outcomeCells(p), String(p.p50), String(p.p99)]),
  )
  return 0
}

function asJson(usage: KeyUsage) {
  return {
    ...usage,
    lastUsed: iso(usage.lastUsed),
    expiresAt: iso(usage.expiresAt),
    secrets: usage.secrets.map((s) => ({ secret: s.secret, lastUsed: iso(s.lastUsedAt), worksUntil: iso(s.endsAt) })),
    deprecated: { ...usage.deprecated, last: iso(usage.deprecated.last) },
  }
}

function pointJson(point: UsagePoint) {
  return { ...point, at: iso(point.at) }
}

function outcomeCells(o: Outcomes): string[] {
  return [o.requests, o.ok, o.clientErrors, o.limited, o.notImplemented, o.serverErrors].map(String)
}

function printKeys(keys: KeyUsage[]): void {
  printTable(
    ['ID', 'NAME', 'PLAN', 'TODAY', '429 TODAY', 'SINCE', '429 SINCE', 'LAST USED', 'GETPET 24H', 'GETPET 7D', 'LAST GETPET'],
    keys.map((k) => [
      k.keyId ?? '(no key)',
      k.name ?? '-',
      k.plan ? `${k.plan}${k.revoked ? ' (revoked)' : k.expiresAt !== null && k.expiresAt <= Date.now() ? ' (expired)' : ''}` : '-',
      String(k.today.requests),
      String(k.today.limited),
      String(k.window.requests),
      String(k.window.limited),
      iso(k.lastUsed) ?? '-',
      String(k.deprecated.day),
      String(k.deprecated.week),
      iso(k.deprecated.last) ?? '-',
    ]),
  )
}
