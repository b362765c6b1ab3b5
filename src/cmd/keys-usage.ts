/** `petstore keys usage [ID] [--since DURATION] [--json]`: the usage figures (modules/usage) of every key, or of one. */
import type { Storage } from '../domain/repositories'
import { iso } from '../domain/time'
import { utcDayStart } from '../domain/usage'
import { printTable, withEarlierNames } from './options'
import { type KeyUsage, UsageService } from '../modules/usage/service'
import { type KeyBans, keyBans } from './key-bans'

/** The key named is not there (or not active): its id cut short, since what was given may be anything. */
export function noKey(what: 'key' | 'active key', id: string, where: string): number {
  console.error(`petstore: no ${what} with id "${id.slice(0, 64)}" in ${where}`)
  return 1
}

export async function printUsage(
  storage: Storage,
  options: { id: string | undefined; sinceMs: number; json: boolean; where: string; redisUrl: string | null },
): Promise<number> {
  // After the reads, so that a failed read is the only line; a ban that cannot be known is said, not guessed.
  const heading = (bans: KeyBans) => {
    console.error(`petstore: usage in ${options.where}`)
    if ('unknown' in bans) console.error(`petstore: keys banned now are not marked: ${bans.unknown}`)
  }
  const bansOf = (keys: KeyUsage[]) =>
    keyBans(
      options.redisUrl,
      keys.flatMap((k) => (k.keyId === null ? [] : [k.keyId])),
    )
  const service = new UsageService(storage)
  const now = Date.now()
  const since = iso(now - options.sinceMs)
  const dayStart = iso(utcDayStart(now))
  const printJson = (bans: KeyBans, fields: object) => {
    // When bans cannot be known, the JSON says why (and no key has a bannedUntil).
    const unknown = 'unknown' in bans ? { bansUnknown: bans.unknown } : {}
    console.log(JSON.stringify({ dayStart, since, ...unknown, ...fields }, null, 2))
  }
  if (options.id === undefined) {
    const keys = await service.keys(options.sinceMs)
    const bans = await bansOf(keys)
    if (options.json) printJson(bans, { keys: keys.map((k) => asJson(k, bans)) })
    else {
      heading(bans)
      printKeys(keys, bans)
    }
    return 0
  }
  const key = await service.key(options.id, options.sinceMs)
  if (!key) return noKey('key', options.id, options.where)
  const series = await service.series(options.sinceMs, key.keyId)
  const bans = await bansOf([key])
  const points = series.points.filter((point) => point.requests > 0)
  if (options.json) {
    printJson(bans, {
      ...asJson(key, bans),
      series: { resolution: series.resolution, points: points.map((p) => ({ ...p, at: iso(p.at) })) },
    })
    return 0
  }
  heading(bans)
  printKeys([key], bans)
  console.log('\nSecrets (after a roll, the previous one works until its overlap ends):')
  printTable(
    ['SECRET', 'LAST USED', 'WORKS UNTIL'],
    key.secrets.map((s) => [s.secret, iso(s.lastUsedAt) ?? '-', iso(s.endsAt) ?? 'no expiry']),
  )
  console.log(`\nRequests per ${series.resolution} since ${since} (only ${series.resolution}s with requests):`)
  printTable(
    ['AT', 'REQUESTS', '2XX', '4XX', '429', '501', '5XX', 'P50 MS', 'P99 MS'],
    points.map((p) => [
      iso(p.at)!,
      ...[p.requests, p.ok, p.clientErrors, p.limited, p.notImplemented, p.serverErrors, p.p50, p.p99].map(String),
    ]),
  )
  return 0
}

/** The key's ban end, when bans are known: null when it is not banned. */
function bannedUntil(usage: KeyUsage, bans: KeyBans): number | null | undefined {
  if ('unknown' in bans || usage.keyId === null) return undefined
  return bans.until.get(usage.keyId) ?? null
}

function asJson(usage: KeyUsage, bans: KeyBans) {
  const until = bannedUntil(usage, bans)
  const { lastUsed, ...rest } = usage
  // A last request is `lastUsedAt`, the console's name, as in `keys list --json`.
  const earlier = { lastUsed: 'lastUsedAt' } as const
  return withEarlierNames(
    {
      ...rest,
      ...(until === undefined ? {} : { bannedUntil: iso(until) }),
      lastUsedAt: iso(lastUsed),
      expiresAt: iso(usage.expiresAt),
      secrets: usage.secrets.map((s) =>
        withEarlierNames({ secret: s.secret, lastUsedAt: iso(s.lastUsedAt), worksUntil: iso(s.endsAt) }, earlier),
      ),
      deprecated: { ...usage.deprecated, last: iso(usage.deprecated.last) },
    },
    earlier,
  )
}

/** The plan, marked when the key is refused whatever it sends: revoked, expired, or banned right now. */
function planCell(k: KeyUsage, bans: KeyBans): string {
  if (!k.plan) return '-'
  if (k.revoked) return `${k.plan} (revoked)`
  if (k.expiresAt !== null && k.expiresAt <= Date.now()) return `${k.plan} (expired)`
  return bannedUntil(k, bans) ? `${k.plan} (banned)` : k.plan
}

function printKeys(keys: KeyUsage[], bans: KeyBans): void {
  printTable(
    ['ID', 'NAME', 'PLAN', 'TODAY', '429 TODAY', 'SINCE', '429 SINCE', 'LAST USED', 'GETPET 24H', 'GETPET 7D', 'LAST GETPET'],
    keys.map((k) => [
      k.keyId ?? '(no key)',
      k.name ?? '-',
      planCell(k, bans),
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
