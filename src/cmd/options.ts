/**
 * What every command shares: the storage flags and their usage lines, flag parsing with one-line
 * complaints, and opening storage for a command. A mistake on the command line is a UsageError: the
 * command's usage, then one line saying what was wrong (last, where it is seen), exit 2.
 */
import { parseArgs, type ParseArgsConfig } from 'node:util'
import { resolve } from 'node:path'
import { ConfigError, type ConfigInput, dataFileNamed, resolveDatabase, resolveDataFile, resolveRedisUrl } from '../config'
import { KeyInputError } from '../domain/api-key'
import { openPostgresStorage } from '../storage/postgres'
import { COMMAND } from '../storage/postgres/pool'
import { openSqliteStorage } from '../storage/sqlite'
import type { Storage } from '../domain/repositories'

export const COMMON = `  --env production|staging   environment (default production; PETSTORE_ENV)
  --data FILE                data file (PETSTORE_DATA; default ./data/petstore.db, staging ./data/petstore-staging.db)
  --database-url URL         PostgreSQL instead of the data file, for several instances: postgres://USER:PASSWORD@HOST/DB
                             (PETSTORE_DATABASE_URL, which keeps the password out of the process list)
  --redis-url URL            Redis for rate limits shared by every instance: redis://HOST:6379 (PETSTORE_REDIS_URL)`

export class UsageError extends Error {
  constructor(
    message: string,
    readonly usage: string,
  ) {
    super(message)
  }
}

type Options = NonNullable<ParseArgsConfig['options']>
const COMMON_OPTIONS: Options = {
  env: { type: 'string' },
  data: { type: 'string' },
  'database-url': { type: 'string' },
  'redis-url': { type: 'string' },
  help: { type: 'boolean' },
}

export function parse(args: string[], options: Options, usage: string) {
  const all = { ...COMMON_OPTIONS, ...options }
  let parsed
  try {
    parsed = parseArgs({ args, options: all, allowPositionals: true, strict: true })
  } catch (error) {
    throw new UsageError(describeParseError((error as Error).message, Object.keys(all)), usage)
  }
  // An empty variable counts as unset (config.ts), but an empty flag was typed: `--data ""` would
  // otherwise become some other file than the one meant.
  for (const [name, value] of Object.entries(parsed.values))
    if (value === '' || (Array.isArray(value) && value.includes('')))
      throw new UsageError(`--${name} needs a value, and the one given is empty`, usage)
  return parsed
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
        : known.filter((name) => editDistance(name, given) <= 2).sort((a, b) => editDistance(a, given) - editDistance(b, given)).slice(0, 1)
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

export function configInput(values: Record<string, unknown>): ConfigInput {
  return {
    env: values.env as string | undefined,
    data: values.data as string | undefined,
    host: values.host as string | undefined,
    port: values.port as string | undefined,
    baseUrl: values['base-url'] as string | undefined,
    corsOrigin: values['cors-origin'] as string[] | undefined,
    trustProxy: values['trust-proxy'] as string[] | undefined,
    metricsAddress: values['metrics-address'] as string | undefined,
    metricsToken: values['metrics-token'] as string | undefined,
    consoleAddress: values['console-address'] as string | undefined,
    consoleHost: values['console-host'] as string[] | undefined,
    banAfter: values['ban-after'] as string | undefined,
    banSeconds: values['ban-seconds'] as string | undefined,
    accessLog: values['no-access-log'] ? false : undefined,
    databaseUrl: values['database-url'] as string | undefined,
    databasePool: values['database-pool'] as string | undefined,
    redisUrl: values['redis-url'] as string | undefined,
    limiterFallback: values['limiter-fallback'] as string | undefined,
    usageMinutesDays: values['usage-minutes-days'] as string | undefined,
    usageHoursDays: values['usage-hours-days'] as string | undefined,
    scenarios: values.scenarios as string | undefined,
  }
}

/** Runs a check of command-line values; its complaint is reported with the command's usage. */
export function asUsageError<T>(check: () => T, usage: string): T {
  try {
    return check()
  } catch (error) {
    if (error instanceof ConfigError || error instanceof KeyInputError) throw new UsageError(error.message, usage)
    throw error
  }
}

/** No command (or subcommand) at all, or a request for the usage instead of one. */
export function isBare(word: string | undefined): word is undefined | '--help' | '-h' {
  return word === undefined || word === '--help' || word === '-h'
}

/** The usage for a bare command line: a success when asked for, a failure when nothing was said. */
export function bareUsage(word: undefined | '--help' | '-h', usage: string): number {
  console.log(usage)
  return word === undefined ? 2 : 0
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

/** The data file a command other than serve works on, checked and absolute; PostgreSQL is refused with `refusal`. */
export function dataFileFor(values: Record<string, unknown>, usage: string, refusal: string): string {
  if (asUsageError(() => resolveDatabase(configInput(values), process.env), usage)) throw new UsageError(refusal, usage)
  return resolve(asUsageError(() => resolveDataFile(configInput(values), process.env), usage))
}

/**
 * What a command other than serve does with the data file. `mayCreate`: a new data file is made, but
 * only when it was named (--data, PETSTORE_DATA), since a key created into a new file on the default
 * path, in the wrong folder, would be a key no running server knows. Unless it `readsOnly`, the command
 * refuses, before it starts, a data file this user may read but not write.
 */
export interface CommandAccess {
  mayCreate?: boolean
  readsOnly?: boolean
}

/** Opens storage for a command other than serve: PostgreSQL when a database URL is given, else the data file. */
export async function openForCommand(
  values: Record<string, unknown>,
  usage: string,
  access: CommandAccess = {},
): Promise<{ storage: Storage; where: string }> {
  const input = configInput(values)
  const database = asUsageError(() => resolveDatabase(input, process.env), usage)
  // Checked like every value, though these commands leave Redis alone (a running server applies resets).
  asUsageError(() => resolveRedisUrl(input, process.env), usage)
  if (database) {
    const storage = await openPostgresStorage(database.url, { pool: 1, deadlines: COMMAND })
    return { storage, where: storage.location }
  }
  const file = resolve(asUsageError(() => resolveDataFile(input, process.env), usage))
  return { storage: openSqliteStorage(file, { mustExist: !(access.mayCreate && dataFileNamed(input, process.env)), mustWrite: !access.readsOnly }), where: file }
}

/** Rows under a header, in columns as wide as their widest cell. */
export function printTable(header: string[], rows: string[][]): void {
  const table = [header, ...rows]
  const widths = header.map((_, i) => Math.max(...table.map((row) => row[i]!.length)))
  for (const row of table) console.log(row.map((cell, i) => cell.padEnd(widths[i]!)).join('  ').trimEnd())
}
