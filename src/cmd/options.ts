/**
 * What every command shares: parsing and usage lines from its table of flags (flags/table.ts), the storage
 * flags, and opening storage. A mistake on the command line is a UsageError: the usage, then one line
 * saying what was wrong, exit 2.
 */
import { integerRule } from '../domain/integer-range'
import { parseArgs } from 'node:util'
import { COMMON_FLAGS, ConfigError, dataFileNamed, resolveDatabase, resolveDataFile, resolveRedisUrl } from '../config'
import { type FlagTable, flagLines, type InputOf } from '../flags/table'
import { CUSTOM_LIMIT, KEY_NAME_MAX, KeyInputError, type KeyRule } from '../domain/key-input'
import { OperatorInputError } from '../domain/operators'
import { PLANS } from '../domain/plans'
import { COMMAND, openPostgresStorage } from '../storage/postgres'
import { COMMAND_BUSY_MS, damagedFile, dataFilePath, openSqliteStorage } from '../storage/sqlite'
import type { Storage } from '../domain/repositories'

export const COMMON = flagLines(COMMON_FLAGS)

export class UsageError extends Error {
  constructor(
    message: string,
    readonly usage: string,
  ) {
    super(message)
  }
}

/** What a command line gave for a command's table (and the flags every command takes), by row. */
export type Values<T extends FlagTable> = InputOf<typeof COMMON_FLAGS & T> & { help?: boolean }

/** Parses a command line with node:util, from the command's table and the common flags. */
export function parse<T extends FlagTable>(args: string[], table: T, usage: string): { values: Values<T>; positionals: string[] } {
  const rows: FlagTable = { ...COMMON_FLAGS, ...table }
  const options = Object.fromEntries(
    Object.values(rows).map((row) => {
      const type = row.kind === 'switch' ? ('boolean' as const) : ('string' as const)
      return [row.flag, { type, multiple: row.kind === 'list' }]
    }),
  )
  let parsed: ReturnType<typeof parseArgs<{ options: typeof options; allowPositionals: true; strict: true; tokens: true }>>
  try {
    parsed = parseArgs({ args, options: { ...options, help: { type: 'boolean' } }, allowPositionals: true, strict: true, tokens: true })
  } catch (error) {
    throw new UsageError(describeParseError((error as Error).message, [...Object.keys(options), 'help']), usage)
  }
  // node:util keeps the last of a repeated flag: `--plan pro --plan free` would make a free key unasked.
  const seen = new Set<string>()
  for (const token of parsed.tokens)
    if (token.kind === 'option' && options[token.name]?.type === 'string' && !options[token.name]?.multiple) {
      if (seen.has(token.name)) throw new UsageError(`--${token.name} is given twice; give it once`, usage)
      seen.add(token.name)
    }
  const given: Record<string, string | boolean | (string | boolean)[] | undefined> = parsed.values
  // An empty variable counts as unset (config.ts), but an empty flag was typed: `--data ""` would
  // otherwise become some other file than the one meant.
  for (const [name, value] of Object.entries(given))
    if (value === '' || (Array.isArray(value) && value.includes('')))
      throw new UsageError(`--${name} needs a value, and the one given is empty`, usage)
  const values: Record<string, unknown> = { help: given.help }
  for (const [key, row] of Object.entries(rows)) values[key] = given[row.flag]
  return { values: values as Values<T>, positionals: parsed.positionals }
}

/** A command of sub-commands (`keys create`): the sub-command and its line, or the exit code once the usage is shown. */
export function parseSub<T extends FlagTable, S extends string>(
  args: string[],
  table: T,
  usage: string,
  command: string,
  subs: readonly S[],
): { sub: S; values: Values<T>; positionals: string[] } | number {
  const [sub, ...rest] = args
  if (isBare(sub)) return bareUsage(sub, usage, `${command} needs a command: ${subs.join(', ')}`)
  const { values, positionals } = parse(rest, table, usage)
  if (values.help) return help(usage)
  if (!subs.includes(sub as S)) throw new UsageError(`unknown ${command} command "${sub}"`, usage)
  // A flag given to a sub-command its row does not name (`only`): `--json does not apply to keys create`.
  for (const [key, row] of Object.entries(table))
    if (row.only && !row.only.includes(sub) && (values as Record<string, unknown>)[key] !== undefined)
      throw new UsageError(`--${row.flag} does not apply to ${command} ${sub}`, usage)
  return { sub: sub as S, values, positionals }
}

/** node:util's complaint in one plain line, with the closest known flag for a misspelt one. */
function describeParseError(message: string, known: string[]): string {
  const unknown = /^Unknown option '(-{1,2}[^']*)'/.exec(message)
  if (unknown) {
    const given = unknown[1]!.replace(/^-+/, '').split('=')[0]!
    // A single letter is a short flag from habit (-p, -d): the long ones it starts.
    const close =
      given.length === 1
        ? known.filter((name) => name.startsWith(given) && name !== 'help')
        : known
            .filter((name) => editDistance(name, given) <= 2)
            .sort((a, b) => editDistance(a, given) - editDistance(b, given))
            .slice(0, 1)
    return `unknown option ${unknown[1]}${close.length ? ` (did you mean ${close.map((name) => `--${name}`).join(' or ')}?)` : ''}`
  }
  const missing = /^Option '(-{1,2}[\w-]+)[^']*' argument missing/.exec(message)
  if (missing) return `${missing[1]} needs a value`
  const ambiguous = /^Option '(-{1,2}[\w-]+)[^']*' argument is ambiguous/.exec(message)
  if (ambiguous) return `${ambiguous[1]} needs a value; to pass one that starts with a dash, write ${ambiguous[1]}=VALUE`
  const extra = /^Option '(-{1,2}[\w-]+)' does not take an argument/.exec(message)
  if (extra) return `${extra[1]} takes no value`
  return message.split('\n')[0]!.replace(/'/g, '')
}

function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j)
  for (let i = 1; i <= a.length; i++) {
    const current = [i]
    for (let j = 1; j <= b.length; j++)
      current[j] = Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1))
    previous = current
  }
  return previous[b.length]!
}

/** Runs a check of command-line values; its complaint is reported with the command's usage. */
export function asUsageError<T>(check: () => T, usage: string): T {
  try {
    return check()
  } catch (error) {
    if (error instanceof ConfigError || error instanceof OperatorInputError) throw new UsageError(error.message, usage)
    // A key's rule, with its fields named as this command's flags.
    if (error instanceof KeyInputError) throw new UsageError(keyRuleMessage(error), usage)
    throw error
  }
}

/** A key's rule broken, in the command line's words: its fields are flags. */
function keyRuleMessage({ field, rule, given }: KeyInputError): string {
  const sentences: Record<KeyRule, string> = {
    'unknown-plan': `--plan must be one of ${PLANS.join(', ')}, not "${given}"`,
    'limits-needed': 'an enterprise key needs its own limits: --rpm N --rpd N',
    'limits-only-enterprise': '--rpm and --rpd are only for --plan enterprise',
    'limit-range': `--${field} ${integerRule(CUSTOM_LIMIT.min, CUSTOM_LIMIT.max)}`,
    name: `--name must be at most ${KEY_NAME_MAX} characters with no control or bidirectional formatting characters`,
  }
  return sentences[rule]
}

/** No command (or subcommand) at all, or a request for the usage instead of one. */
export function isBare(word: string | undefined): word is undefined | '--help' | '-h' {
  return word === undefined || word === '--help' || word === '-h'
}

/**
 * The usage for a bare command line: asked for (`--help`), on stdout and a success; nothing said
 * (`petstore keys` alone), a usage error like any other: the usage and the reason on stderr, exit 2.
 */
export function bareUsage(word: undefined | '--help' | '-h', usage: string, missing: string): number {
  if (word === undefined) throw new UsageError(missing, usage)
  return help(usage)
}

export function help(usage: string): number {
  console.log(usage)
  return 0
}

/** The one FILE that backup and restore take; an empty name would otherwise fail later as a path. */
export function oneFile(positionals: string[], command: string, usage: string): string {
  if (positionals.length !== 1) throw new UsageError(`${command} needs exactly one FILE`, usage)
  if (positionals[0] === '') throw new UsageError(`${command} needs a file name, and the FILE given is empty`, usage)
  return positionals[0]!
}

/** The data file a command other than serve works on, checked, by its own path (links resolved); PostgreSQL is refused with `refusal`. */
export function dataFileFor(values: Values<FlagTable>, usage: string, refusal: string): string {
  if (asUsageError(() => resolveDatabase(values, process.env), usage)) throw new UsageError(refusal, usage)
  return dataFilePath(asUsageError(() => resolveDataFile(values, process.env), usage))
}

/**
 * Runs `work` on the storage of a command other than serve, and closes it: PostgreSQL when a database URL
 * is given, else the data file. `mayCreate`: only a named file (--data, PETSTORE_DATA), as a key put in a
 * new file on the default path is one no server knows. Unless it `readsOnly`, a file this user may not
 * write is refused before the command starts; if it does, an older schema is refused, not upgraded
 * (storage/shared/open-errors.ts).
 */
export async function withStorage<T>(
  input: Values<FlagTable>,
  usage: string,
  access: { mayCreate?: boolean; readsOnly?: boolean },
  work: (storage: Storage, where: string) => Promise<T>,
): Promise<T> {
  const database = asUsageError(() => resolveDatabase(input, process.env), usage)
  const olderSchema = access.readsOnly ? 'refuse' : 'upgrade'
  // Checked like every value, though these commands leave Redis alone (a running server applies resets).
  asUsageError(() => resolveRedisUrl(input, process.env), usage)
  const storage: Storage = database
    ? await openPostgresStorage(database.url, { pool: 1, deadlines: COMMAND, olderSchema })
    : openSqliteStorage(dataFilePath(asUsageError(() => resolveDataFile(input, process.env), usage)), {
        mustExist: !(access.mayCreate && dataFileNamed(input, process.env)),
        mustWrite: !access.readsOnly,
        olderSchema,
        busyTimeoutMs: COMMAND_BUSY_MS,
      })
  try {
    return await work(storage, storage.location)
  } catch (error) {
    // The open checks the schema, not every page: a page found damaged later is the same one line, not a bug.
    const code = storage.damagedCode?.(error)
    throw code ? damagedFile(storage.location, code) : error
  } finally {
    await storage.close()
  }
}

/**
 * A JSON object with the names of earlier releases beside the current ones, for scripts, until the next
 * release (docs/upgrading.md): `earlier` maps each earlier name to the current one whose value it repeats.
 */
export function withEarlierNames<T extends object>(row: T, earlier: Record<string, keyof T>): T & Record<string, unknown> {
  return { ...row, ...Object.fromEntries(Object.entries(earlier).map(([name, current]) => [name, row[current]])) }
}

/** Rows under a header, in columns as wide as their widest cell. */
export function printTable(header: string[], rows: string[][]): void {
  const table = [header, ...rows]
  const widths = header.map((_, i) => Math.max(...table.map((row) => row[i]!.length)))
  for (const row of table)
    console.log(
      row
        .map((cell, i) => cell.padEnd(widths[i]!))
        .join('  ')
        .trimEnd(),
    )
}
