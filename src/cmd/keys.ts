/** `petstore keys create|list|revoke|reset-limits`: API keys, straight in storage; a running server follows. */
import { parseInteger } from '../config'
import { type ApiKeyRecord, checkKeyName, limitsFor, looksLikeSecret } from '../domain/api-key'
import { PLAN_LIMITS } from '../domain/plans'
import { createKey } from '../modules/keys/service'
import { asUsageError, bareUsage, COMMON, help, isBare, openForCommand, parse, UsageError } from './options'

export const USAGE = `Usage: petstore keys create --plan free|pro|business|enterprise [--name TEXT] [--rpm N --rpd N]
       petstore keys list [--json]
       petstore keys revoke ID
       petstore keys reset-limits ID

  reset-limits refills the key's buckets and lifts its ban; a running server applies it within a second.

  create prints the new key's secret once, alone, as the last line of stdout.
  Plans (requests per minute / per day):
${Object.entries(PLAN_LIMITS)
  .map(([plan, limits]) => `    ${plan.padEnd(11)}${`${limits.rpm}`.padStart(6)} / ${limits.rpd.toLocaleString('en')}`)
  .join('\n')}
    enterprise   --rpm N / --rpd N (its own limits)
  Without --data or PETSTORE_DATA, the commands use the environment's default data file, which must
  exist (start the server once); naming the file with --data creates it when missing.

${COMMON}`

export async function keys(args: string[]): Promise<number> {
  const [sub, ...rest] = args
  if (isBare(sub)) return bareUsage(sub, USAGE)
  const { values, positionals } = parse(
    rest,
    {
      plan: { type: 'string' },
      name: { type: 'string' },
      rpm: { type: 'string' },
      rpd: { type: 'string' },
      json: { type: 'boolean' },
    },
    USAGE,
  )
  if (values.help) return help(USAGE)
  const allowed: Record<string, string[]> = {
    create: ['plan', 'name', 'rpm', 'rpd'],
    list: ['json'],
    revoke: [],
    'reset-limits': [],
  }
  if (!(sub in allowed)) throw new UsageError(`unknown keys command "${sub}"`, USAGE)
  for (const flag of ['plan', 'name', 'rpm', 'rpd', 'json'])
    if (values[flag] !== undefined && !allowed[sub]!.includes(flag))
      throw new UsageError(`--${flag} does not apply to keys ${sub}`, USAGE)
  const expected = sub === 'revoke' || sub === 'reset-limits' ? 1 : 0
  if (positionals.length !== expected)
    throw new UsageError(
      expected ? `keys ${sub} needs exactly one key ID` : `unexpected argument "${positionals[0]}"`,
      USAGE,
    )
  // A secret pasted where the id goes: refused without repeating it, as every message may end up in a log.
  if (expected && looksLikeSecret(positionals[0]!))
    throw new UsageError(
      `keys ${sub} takes a key's ID (key_…, as keys list shows), and what was given is shaped like a key's secret (psk_…), which is not repeated here`,
      USAGE,
    )
  if (sub === 'create' && values.plan === undefined) throw new UsageError('keys create needs --plan', USAGE)
  const limit = (flag: 'rpm' | 'rpd') =>
    values[flag] === undefined ? undefined : parseInteger(`--${flag}`, values[flag] as string, 1, 1_000_000_000)
  const input = asUsageError(() => {
    const checked = { plan: values.plan as string, name: values.name as string | undefined, rpm: limit('rpm'), rpd: limit('rpd') }
    if (sub === 'create') {
      limitsFor(checked)
      checkKeyName(checked.name)
    }
    return checked
  }, USAGE)
  const { storage, where } = await openForCommand(values, USAGE, sub === 'create', sub !== 'list')
  try {
    if (sub === 'create') {
      const { secret, record } = await createKey(storage.keys, input, Date.now())
      console.error(
        `petstore: created ${record.plan} key ${record.id} (${record.rpm}/min, ${record.rpd}/day) in ${where}. ` +
          'Its secret, shown only now, is the next line:',
      )
      console.log(secret)
    } else if (sub === 'list') {
      if (values.json !== true) console.error(`petstore: keys in ${where}`)
      printKeys(await storage.keys.list(), values.json === true)
    } else {
      const id = positionals[0]!
      const done = sub === 'revoke' ? await storage.keys.revoke(id, Date.now()) : await storage.keys.resetLimits(id, Date.now())
      if (!done) {
        console.error(`petstore: no key with id "${id.slice(0, 64)}" in ${where}`)
        return 1
      }
      console.error(
        sub === 'revoke'
          ? `petstore: revoked ${id} in ${where}; a running server refuses it within a second`
          : `petstore: reset the limits of ${id} in ${where}: full buckets, no ban; a running server applies it within a second`,
      )
    }
    return 0
  } finally {
    await storage.close()
  }
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
  const header = ['ID', 'NAME', 'PLAN', 'RPM', 'RPD', 'CREATED', 'LAST USED', 'REVOKED']
  const table = [
    header,
    ...rows.map((r) => [r.id, r.name, r.plan, String(r.rpm), String(r.rpd), r.created, r.lastUsed ?? '-', r.revoked ?? '-']),
  ]
  const widths = header.map((_, i) => Math.max(...table.map((row) => row[i]!.length)))
  for (const row of table) console.log(row.map((cell, i) => cell.padEnd(widths[i]!)).join('  ').trimEnd())
}
