/** `petstore keys create|list|revoke|reset-limits|set-plan|set-expiry|roll|usage`: API keys, straight in storage; a running server follows. */
import { ConfigError, resolveRedisUrl } from '../config'
import { flagLines, integer, option, reader, toggle } from '../flags/table'
import { type ApiKeyRecord, looksLikeSecret } from '../domain/api-key'
import { durationMs, isoTimeMs } from '../domain/duration'
import { CUSTOM_LIMIT, checkKeyName, DEFAULT_OVERLAP_MS, LONGEST_OVERLAP_MS, limitsFor } from '../domain/key-input'
import { PLAN_LIMITS, PLANS } from '../domain/plans'
import { DAY_MS, HOUR_MS, iso } from '../domain/time'
import { createKey, rollKey, setKeyPlan } from '../modules/keys/service'
import { auditCommand } from './audit'
import { noKey, printUsage } from './keys-usage'
import { asUsageError, COMMON, parseSub, printTable, UsageError, withEarlierNames, withStorage } from './options'

/** An enterprise key's own limit, per minute or per day. */
function ownLimit(flag: 'rpm' | 'rpd', per: string) {
  return option({
    flag,
    value: 'N',
    help: `requests per ${per} of an enterprise key`,
    parse: integer(CUSTOM_LIMIT),
    only: ['create', 'set-plan'],
  })
}

/** A parser for a duration (90s, 30m, 24h, 7d) from `shortest` to `longest`, which its complaint names with `examples`. */
function duration(shortest: string, longest: string, examples = '90s, 30m, 24h or 7d') {
  const [min, max] = [durationMs(shortest), durationMs(longest)]
  // Checked when the flag table is built: a bound that is not a duration would refuse every value.
  if (min === null || max === null) throw new Error(`duration bounds ${shortest} and ${longest} must be durations`)
  return (text: string, name: string): number => {
    const ms = durationMs(text)
    if (ms === null || ms < min || ms > max)
      throw new ConfigError(`${name} must be a duration from ${shortest} to ${longest} such as ${examples}, not "${text.slice(0, 40)}"`)
    return ms
  }
}

/** A parser for an ISO 8601 time with its zone; whether it is still to come is checked when it is used. */
const time = (text: string, name: string): number => {
  const ms = isoTimeMs(text)
  if (ms === null)
    throw new ConfigError(`${name} must be an ISO 8601 time with its zone, such as 2027-01-31T18:00:00Z, not "${text.slice(0, 40)}"`)
  return ms
}

/** How long from now a key may be given to live: at most ten years. */
const expiryIn = duration('1s', '3650d')

/** Each flag with the sub-commands it applies to. */
const FLAGS = {
  plan: option({ flag: 'plan', value: 'PLAN', help: `the key's plan: ${PLANS.join(', ')}`, only: ['create'] }),
  name: option({ flag: 'name', value: 'TEXT', help: 'what the key is for, as keys list shows it', only: ['create'] }),
  rpm: ownLimit('rpm', 'minute'),
  rpd: ownLimit('rpd', 'day'),
  expiresIn: option({
    flag: 'expires-in',
    value: 'DURATION',
    help: 'the key expires this long from now (90s, 30m, 24h, 7d)',
    parse: expiryIn,
    only: ['create'],
  }),
  expiresAt: option({
    flag: 'expires-at',
    value: 'TIME',
    help: 'the key expires at this time (ISO 8601 with its zone: 2027-01-31T18:00:00Z)',
    parse: time,
    only: ['create'],
  }),
  in: option({ flag: 'in', value: 'DURATION', help: 'the key expires this long from now', parse: expiryIn, only: ['set-expiry'] }),
  at: option({
    flag: 'at',
    value: 'TIME',
    help: 'the key expires at this time (ISO 8601 with its zone)',
    parse: time,
    only: ['set-expiry'],
  }),
  never: toggle({ flag: 'never', help: 'the key never expires (an expired key works again)', only: ['set-expiry'] }),
  overlap: option({
    flag: 'overlap',
    value: 'DURATION',
    help: 'how long the previous secret keeps working (0s ends it now)',
    parse: duration('0s', `${LONGEST_OVERLAP_MS / DAY_MS}d`),
    default: () => DEFAULT_OVERLAP_MS,
    shownDefault: () => `${DEFAULT_OVERLAP_MS / HOUR_MS}h`,
    only: ['roll'],
  }),
  json: toggle({ flag: 'json', help: 'print JSON', only: ['list', 'usage'] }),
  since: option({
    flag: 'since',
    value: 'DURATION',
    help: 'how far back usage looks',
    parse: duration('1m', '90d', '30m, 24h or 7d'),
    default: () => DAY_MS,
    shownDefault: () => `${DAY_MS / HOUR_MS}h`,
    only: ['usage'],
  }),
}

/** Each sub-command, with how many words it takes after its name: none, a key's ID, or (set-plan) an ID and a plan. */
const WORDS = { create: [0], list: [0], revoke: [1], 'reset-limits': [1], 'set-plan': [2], 'set-expiry': [1], roll: [1], usage: [0, 1] }

/** 10000 → 10,000; not toLocaleString, which loads the locale data at every start (see SUNSET_DAY). */
const thousands = (n: number) => String(n).replace(/\B(?=(\d{3})+$)/g, ',')

export const USAGE = `Usage: petstore keys create --plan free|pro|business|enterprise [--name TEXT] [--rpm N --rpd N]
                            [--expires-in DURATION | --expires-at TIME]
       petstore keys list [--json]
       petstore keys revoke ID
       petstore keys reset-limits ID
       petstore keys set-plan ID free|pro|business|enterprise [--rpm N --rpd N]
       petstore keys set-expiry ID (--in DURATION | --at TIME | --never)
       petstore keys roll ID [--overlap DURATION]
       petstore keys usage [ID] [--since DURATION] [--json]

  reset-limits refills the key's buckets and lifts its ban; a running server applies it within a second.
  set-plan gives the key the plan's limits (enterprise: its own); a running server applies it within a second.
  usage prints requests and 429s today (the UTC day) and since DURATION ago (30m, 24h, 7d; default 24h),
  the last use, and the deprecated getPet calls of the last day and week; with ID, one key and its
  requests per minute (per hour beyond 24h). A key banned now is marked only with --redis-url (the
  Redis the servers share): without it, a ban lives in a server's memory. See docs/usage.md.

  create and roll print the new secret once, alone, as the last line of stdout. roll keeps the key's id,
  plan, limits, ban, usage and expiry; its previous secret works until the overlap ends (at most two
  secrets work at once: a roll ends one kept from an earlier roll at once). An expired key, or a secret
  past its overlap, gets 401 key_expired. See docs/keys.md.
  Plans (requests per minute / per day):
${Object.entries(PLAN_LIMITS)
  .map(([plan, limits]) => `    ${plan.padEnd(11)}${`${limits.rpm}`.padStart(6)} / ${thousands(limits.rpd)}`)
  .join('\n')}
    enterprise   --rpm N / --rpd N (its own limits)
  Without --data or PETSTORE_DATA, the commands use the environment's default data file, which must
  exist (start the server once); a file named with --data is made when missing by create alone, and
  the other commands refuse a missing file.

${flagLines(FLAGS)}
${COMMON}`

export async function keys(args: string[]): Promise<number> {
  const line = parseSub(args, FLAGS, USAGE, 'keys', Object.keys(WORDS) as (keyof typeof WORDS)[])
  if (typeof line === 'number') return line
  const { sub, values, positionals } = line
  // A secret pasted among the words: refused without repeating it, as every message may end up in a
  // log; checked before their count, whose complaint may quote one.
  if (positionals.some(looksLikeSecret))
    throw new UsageError(
      `keys ${sub} takes a key's ID (key_…, as keys list shows), and what was given is shaped like a key's secret (psk_…), which is not repeated here`,
      USAGE,
    )
  const expected = WORDS[sub]
  if (!expected.includes(positionals.length))
    throw new UsageError(
      sub === 'set-plan'
        ? 'keys set-plan needs a key ID and a plan'
        : expected[0]
          ? `keys ${sub} needs exactly one key ID`
          : `unexpected argument "${positionals[expected.at(-1)!]}"`,
      USAGE,
    )
  if (sub === 'create' && values.plan === undefined) throw new UsageError('keys create needs --plan', USAGE)
  const read = reader(FLAGS, values, process.env)
  const input = asUsageError(() => {
    const plan = sub === 'set-plan' ? positionals[1]! : values.plan!
    const checked = { plan, name: values.name, rpm: read.value('rpm'), rpd: read.value('rpd') }
    if (sub === 'create' || sub === 'set-plan') {
      limitsFor(checked)
      checkKeyName(checked.name)
    }
    return checked
  }, USAGE)
  const since = sub === 'usage' ? asUsageError(() => read.value('since')!, USAGE) : 0
  const now = Date.now()
  const expiresAt = asUsageError(() => expiryOf(sub, read, now), USAGE)
  const overlapMs = sub === 'roll' ? asUsageError(() => read.value('overlap')!, USAGE) : 0
  const access = { mayCreate: sub === 'create', readsOnly: sub === 'list' || sub === 'usage' }
  const id = positionals[0]!
  return withStorage(values, USAGE, access, async (storage, where) => {
    if (sub === 'create') {
      const { secret, record } = await createKey(storage.keys, input, now, expiresAt)
      console.error(
        `petstore: created ${record.plan} key ${record.id} (${record.rpm}/min, ${record.rpd}/day${expiresAt === null ? '' : `, expires ${iso(expiresAt)}`}) in ${where}. ` +
          'Its secret, shown only now, is the next line:',
      )
      console.log(secret)
      // After the secret: a key made is never left without it, whatever the audit write does.
      await auditCommand(storage, 'key.create', record.id)
    } else if (sub === 'roll') {
      const rolled = await rollKey(storage.keys, id, overlapMs, now)
      if (!rolled) return noKey('active key', id, where)
      console.error(
        `petstore: rolled ${id} in ${where}: its previous secret ${overlapMs === 0 ? 'gets 401 key_expired from now on (on a running server within a second)' : `works until ${iso(rolled.previousEndsAt)}, then gets 401 key_expired`}; ` +
          'a running server takes the new one at once. The new secret, shown only now, is the next line:',
      )
      console.log(rolled.secret)
      await auditCommand(storage, 'key.roll', `${id} previous secret until ${iso(rolled.previousEndsAt)}`)
    } else if (sub === 'set-expiry') {
      if (!(await storage.keys.setExpiry(id, expiresAt))) return noKey('active key', id, where)
      const when = expiresAt === null ? 'never' : iso(expiresAt)
      await auditCommand(storage, 'key.set-expiry', `${id} ${when}`)
      console.error(
        `petstore: ${id} ${expiresAt === null ? 'now never expires' : `now expires at ${when}`} in ${where}; a running server applies it within a second`,
      )
    } else if (sub === 'list') {
      const listed = await storage.keys.list()
      if (values.json !== true) console.error(`petstore: keys in ${where}`)
      printKeys(listed, values.json === true)
    } else if (sub === 'usage') {
      const redisUrl = resolveRedisUrl(values, process.env)
      return await printUsage(storage, { id: positionals[0], sinceMs: since, json: values.json === true, where, redisUrl })
    } else if (sub === 'set-plan') {
      if (!(await setKeyPlan(storage.keys, id, input))) return noKey('active key', id, where)
      await auditCommand(storage, 'key.set-plan', `${id} ${input.plan}`)
      const { rpm, rpd } = limitsFor(input)
      console.error(
        `petstore: ${id} is now on the ${input.plan} plan (${rpm}/min, ${rpd}/day) in ${where}; a running server applies it within a second`,
      )
    } else if (sub === 'revoke') {
      const done = await storage.keys.revoke(id, Date.now())
      if (done === 'no-key') return noKey('key', id, where)
      if (done === 'already-revoked') {
        console.error(`petstore: ${id} was already revoked in ${where}; nothing changed`)
        return 0
      }
      await auditCommand(storage, 'key.revoke', id)
      console.error(`petstore: revoked ${id} in ${where}; a running server refuses it within a second`)
    } else {
      if (!(await storage.keys.resetLimits(id, Date.now()))) return noKey('active key', id, where)
      await auditCommand(storage, 'key.reset-limits', id)
      console.error(`petstore: reset the limits of ${id} in ${where}: full buckets, no ban; a running server applies it within a second`)
    }
    return 0
  })
}

/** The expiry a create or set-expiry asks for (null: never), refused when it is not still to come. */
function expiryOf(sub: string, read: ReturnType<typeof reader<typeof FLAGS>>, now: number): number | null {
  if (sub !== 'create' && sub !== 'set-expiry') return null
  const [inFlag, atFlag] = sub === 'create' ? (['expiresIn', 'expiresAt'] as const) : (['in', 'at'] as const)
  const given = [inFlag, atFlag, ...(sub === 'set-expiry' ? (['never'] as const) : [])].filter(
    (flag) => read.given(flag).given && read.value(flag) !== false,
  )
  const names = given.map((flag) => read.given(flag).name)
  if (given.length > 1) throw new ConfigError(`${names.join(' and ')} cannot be given together`)
  if (sub === 'set-expiry' && given.length === 0) throw new ConfigError('keys set-expiry needs one of --in, --at or --never')
  const within = read.value(inFlag)
  if (within !== undefined) return now + within
  const at = read.value(atFlag)
  if (at === undefined) return null
  if (at <= now) throw new ConfigError(`${read.given(atFlag).name} must be a time still to come, not ${iso(at)}`)
  return at
}

function printKeys(records: ApiKeyRecord[], json: boolean): void {
  const now = Date.now()
  // The console's API's names (createdAt, lastUsedAt, revokedAt, expiresAt): one shape of a key.
  const rows = records.map((r) => ({
    id: r.id,
    name: r.name,
    plan: r.plan,
    rpm: r.rpm,
    rpd: r.rpd,
    createdAt: iso(r.createdAt),
    lastUsedAt: iso(r.lastUsedAt),
    revokedAt: iso(r.revokedAt),
    expiresAt: iso(r.expiresAt),
    format: r.secretFormat,
    previousSecretEndsAt: r.previousSecretHash !== null && r.previousEndsAt! > now ? iso(r.previousEndsAt!) : null,
  }))
  if (json) {
    const earlier = { created: 'createdAt', lastUsed: 'lastUsedAt', revoked: 'revokedAt' } as const
    console.log(
      JSON.stringify(
        rows.map((row) => withEarlierNames(row, earlier)),
        null,
        2,
      ),
    )
    return
  }
  printTable(
    ['ID', 'NAME', 'PLAN', 'RPM', 'RPD', 'CREATED', 'LAST USED', 'EXPIRES', 'FORMAT', 'REVOKED'],
    records.map((r, i) => {
      const row = rows[i]!
      const expires = r.expiresAt === null ? 'never' : `${row.expiresAt}${r.expiresAt <= now ? ' (expired)' : ''}`
      return [
        r.id,
        r.name,
        r.plan,
        String(r.rpm),
        String(r.rpd),
        row.createdAt,
        row.lastUsedAt ?? '-',
        expires,
        r.secretFormat,
        row.revokedAt ?? '-',
      ]
    }),
  )
}
