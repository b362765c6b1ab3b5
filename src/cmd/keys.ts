/** `petstore keys create|list|revoke|reset-limits|set-plan|usage`: API keys, straight in storage; a running server follows. */
import { integer, option, reader, toggle, flagLines } from '../flags/table'
import { type ApiKeyRecord, looksLikeSecret } from '../domain/api-key'
import { CUSTOM_LIMIT, checkKeyName, limitsFor } from '../domain/key-input'
import { PLAN_LIMITS, PLANS } from '../domain/plans'
import { DAY_MS } from '../domain/time'
import { createKey, setKeyPlan } from '../modules/keys/service'
import { auditCommand } from './audit'
import { noKey, parseSince, printUsage } from './keys-usage'
import { asUsageError, COMMON, parseSub, printTable, UsageError, withStorage } from './options'

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

/** Each flag with the sub-commands it applies to. */
const FLAGS = {
  plan: option({ flag: 'plan', value: 'PLAN', help: `the key's plan: ${PLANS.join(', ')}`, only: ['create'] }),
  name: option({ flag: 'name', value: 'TEXT', help: 'what the key is for, as keys list shows it', only: ['create'] }),
  rpm: ownLimit('rpm', 'minute'),
  rpd: ownLimit('rpd', 'day'),
  json: toggle({ flag: 'json', help: 'print JSON', only: ['list', 'usage'] }),
  since: option({
    flag: 'since',
    value: 'DURATION',
    help: 'how far back usage looks',
    parse: parseSince,
    default: () => DAY_MS,
    shownDefault: () => '24h',
    only: ['usage'],
  }),
}

export const USAGE = `Usage: petstore keys create --plan free|pro|business|enterprise [--name TEXT] [--rpm N --rpd N]
       petstore keys list [--json]
       petstore keys revoke ID
       petstore keys reset-limits ID
       petstore keys set-plan ID free|pro|business|enterprise [--rpm N --rpd N]
       petstore keys usage [ID] [--since DURATION] [--json]

  reset-limits refills the key's buckets and lifts its ban; a running server applies it within a second.
  set-plan gives the key the plan's limits (enterprise: its own); a running server applies it within a second.
  usage prints requests and 429s today (the UTC day) and since DURATION ago (30m, 24h, 7d; default 24h),
  the last use, and the deprecated getPet calls of the last day and week; with ID, one key and its
  requests per minute (per hour beyond 24h). See docs/usage.md.

  create prints the new key's secret once, alone, as the last line of stdout.
  Plans (requests per minute / per day):
${Object.entries(PLAN_LIMITS)
  .map(([plan, limits]) => `    ${plan.padEnd(11)}${`${limits.rpm}`.padStart(6)} / ${limits.rpd.toLocaleString('en')}`)
  .join('\n')}
    enterprise   --rpm N / --rpd N (its own limits)
  Without --data or PETSTORE_DATA, the commands use the environment's default data file, which must
  exist (start the server once); naming the file with --data creates it when missing.

${flagLines(FLAGS)}
${COMMON}`

export async function keys(args: string[]): Promise<number> {
  const line = parseSub(args, FLAGS, USAGE, 'keys', ['create', 'list', 'revoke', 'reset-limits', 'set-plan', 'usage'])
  if (typeof line === 'number') return line
  const { sub, values, positionals } = line
  // A secret pasted among the words: refused without repeating it, as every message may end up in a
  // log; checked before their count, whose complaint may quote one.
  if (positionals.some(looksLikeSecret))
    throw new UsageError(
      `keys ${sub} takes a key's ID (key_…, as keys list shows), and what was given is shaped like a key's secret (psk_…), which is not repeated here`,
      USAGE,
    )
  const expected = sub === 'revoke' || sub === 'reset-limits' ? [1] : sub === 'set-plan' ? [2] : sub === 'usage' ? [0, 1] : [0]
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
  const access = { mayCreate: sub === 'create', readsOnly: sub === 'list' || sub === 'usage' }
  const id = positionals[0]!
  return withStorage(values, USAGE, access, async (storage, where) => {
    if (sub === 'create') {
      const { secret, record } = await createKey(storage.keys, input, Date.now())
      console.error(
        `petstore: created ${record.plan} key ${record.id} (${record.rpm}/min, ${record.rpd}/day) in ${where}. ` +
          'Its secret, shown only now, is the next line:',
      )
      console.log(secret)
      // After the secret: a key made is never left without it, whatever the audit write does.
      await auditCommand(storage, 'key.create', record.id)
    } else if (sub === 'list') {
      const listed = await storage.keys.list()
      if (values.json !== true) console.error(`petstore: keys in ${where}`)
      printKeys(listed, values.json === true)
    } else if (sub === 'usage') {
      return await printUsage(storage, { id: positionals[0], sinceMs: since, json: values.json === true, where })
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

function printKeys(records: ApiKeyRecord[], json: boolean): void {
  const rows = records.map((r) => ({
    id: r.id,
    name: r.name,
    plan: r.plan,
    rpm: r.rpm,
    rpd: r.rpd,
    created: new Date(r.createdAt).toISOString(),
    lastUsed: r.lastUsedAt === null ? null : new Date(r.lastUsedAt).toISOString(),
    revoked: r.revokedAt === null ? null : new Date(r.revokedAt).toISOString(),
  }))
  if (json) {
    console.log(JSON.stringify(rows, null, 2))
    return
  }
  printTable(
    ['ID', 'NAME', 'PLAN', 'RPM', 'RPD', 'CREATED', 'LAST USED', 'REVOKED'],
    rows.map((r) => [r.id, r.name, r.plan, String(r.rpm), String(r.rpd), r.created, r.lastUsed ?? '-', r.revoked ?? '-']),
  )
}
