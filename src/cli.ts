/**
 * The `petstore` command line: serve, keys, pets, backup, restore, healthcheck. Flags win over their environment
 * variables; every mistake ends with a one-line reason, the usage, and a non-zero exit.
 */
import { parseArgs, type ParseArgsConfig } from 'node:util'
import { createApp, type DataFileWatch, VERSION } from './app'
import { existsSync, mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { basename, dirname, relative, resolve } from 'node:path'
import { bindPort, type Config, ConfigError, dataFileNamed, redactedUrl, resolveDatabase, resolveRedisUrl, envOf, fromFlagOrVariable, hostInUrl, type ConfigInput, parseInteger, resolveConfig, resolveDataFile, ENVIRONMENTS } from './config'
import { checkKeyName, createKey, KeyInputError, limitsFor, makeKey, PLAN_LIMITS } from './modules/keys/service'
import { RedisLimiterStore } from './limiter/redis/store'
import { openPostgresStorage } from './storage/postgres'
import { COMMAND } from './storage/postgres/pool'
import { lockDataFile, lockFileOf } from './storage/sqlite/data-file-lock'
import { openSqliteStorage, prepareDataFolder, type SqliteStorage } from './storage/sqlite'
import { restoreDataFile } from './storage/sqlite/restore'
import { WorkerPetWriter } from './storage/sqlite/writer'
import { StorageOpenError, StorageUnavailableError, type ApiKeyRecord, type NewPet, type PetWriter, type Storage } from './storage/types'
import { notFound } from './errors'
import { errorResponse } from './plugins/errors'

const COMMON = `  --env production|staging   environment (default production; PETSTORE_ENV)
  --data FILE                data file (PETSTORE_DATA; default ./data/petstore.db, staging ./data/petstore-staging.db)
  --database-url URL         PostgreSQL instead of the data file, for several instances: postgres://USER:PASSWORD@HOST/DB
                             (PETSTORE_DATABASE_URL, which keeps the password out of the process list)
  --redis-url URL            Redis for rate limits shared by every instance: redis://HOST:6379 (PETSTORE_REDIS_URL)`

const USAGE = {
  main: `Usage: petstore COMMAND [options]

Commands:
  serve                      run the server
  help [COMMAND]             show the usage of petstore or of one command
  keys create|list|revoke|reset-limits   manage API keys
  pets seed|reset            add sample pets, or delete every pet (keys are kept)
  backup FILE                write a consistent copy of the data file
  restore FILE               put a backup in place of the data file (the server stopped)
  healthcheck                exit 0 when the local server answers /healthz (for container health checks)

Options:
  --help                     show usage (also after a command: petstore serve --help)
  --version                  print the version

Run 'petstore COMMAND --help' for a command's options.`,
  serve: `Usage: petstore serve [options]

${COMMON}
  --host HOST                address to bind (PETSTORE_HOST; default 0.0.0.0)
  --port N                   port, 0 picks a free one (PETSTORE_PORT; default 8080, staging 8081)
  --base-url URL             public base URL with the API path, e.g. https://pets.example.com/v1
                             (PETSTORE_BASE_URL, staging PETSTORE_STAGING_BASE_URL; default http://localhost:PORT/v1)
  --cors-origin ORIGIN       allow browser calls from ORIGIN (repeatable; * for any)
  --trust-proxy ADDR|CIDR    a proxy whose X-Forwarded-For names the client (repeatable; loopback
                             for 127.0.0.0/8 and ::1; PETSTORE_TRUST_PROXY, comma-separated)
  --metrics-address HOST:PORT  serve /metrics there instead of beside the API (PETSTORE_METRICS_ADDRESS)
  --metrics-token TOKEN      require Authorization: Bearer TOKEN for /metrics (PETSTORE_METRICS_TOKEN,
                             which keeps it out of the process list)
  --database-pool N          connections to PostgreSQL per instance (PETSTORE_DATABASE_POOL; default 4)
  --limiter-fallback closed|local  when Redis does not answer: 503 (closed, the default) or limits
                             per instance until it answers again (local; PETSTORE_LIMITER_FALLBACK)
  --ban-after N              429s within a minute before a ban (default 50)
  --ban-seconds N            length of a ban (default 600)
  --no-access-log            do not write the per-request JSON lines to stdout`,
  keys: `Usage: petstore keys create --plan free|pro|business|enterprise [--name TEXT] [--rpm N --rpd N]
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

${COMMON}`,
  pets: `Usage: petstore pets seed --count N
       petstore pets reset --yes

  seed adds N sample pets (1 to 100000) with realistic names, categories and statuses.
  reset deletes every pet and idempotency record; API keys and their limits are kept.
  A running server sees either within a second. Meant for staging and test stores (--env staging).

${COMMON}`,
  backup: `Usage: petstore backup FILE

Writes a consistent copy of the data file to FILE (which must not exist), safe while the server runs.

${COMMON}`,
  restore: `Usage: petstore restore FILE

Puts the backup FILE in place of the data file, with the server stopped (it refuses while one runs).
The backup is copied and checked first; the data file and its -wal and -shm are kept beside it as
FILE.before-restore-DATE (nothing is deleted). An interrupted restore is finished by running it again.

${COMMON}`,
  healthcheck: `Usage: petstore healthcheck [--env production|staging] [--host HOST] [--port N]

Exits 0 when http://HOST:PORT/healthz answers 200 within 2 s, else 1, and says which in one line.
  --host HOST                the server's address (PETSTORE_HOST; 0.0.0.0 and :: are asked on
                             127.0.0.1 and ::1; default 127.0.0.1)
  --port N                   the server's port (PETSTORE_PORT; default 8080, staging 8081)`,
} as const

class UsageError extends Error {
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

function parse(args: string[], options: Options, usage: string) {
  const all = { ...COMMON_OPTIONS, ...options }
  try {
    return parseArgs({ args, options: all, allowPositionals: true, strict: true })
  } catch (error) {
    throw new UsageError(describeParseError((error as Error).message, Object.keys(all)), usage)
  }
}

/** node:util's complaint in one plain line, with the closest known flag for a misspelt one. */
function describeParseError(message: string, known: string[]): string {
  const unknown = /^Unknown option '(-{1,2}[^']*)'/.exec(message)
  if (unknown) {
    const given = unknown[1]!.replace(/^-+/, '').split('=')[0]!
    const close = known.filter((name) => editDistance(name, given) <= 2).sort((a, b) => editDistance(a, given) - editDistance(b, given))
    return `unknown option ${unknown[1]}${close.length ? ` (did you mean --${close[0]}?)` : ''}`
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

function configInput(values: Record<string, unknown>): ConfigInput {
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
    banAfter: values['ban-after'] as string | undefined,
    banSeconds: values['ban-seconds'] as string | undefined,
    accessLog: values['no-access-log'] ? false : undefined,
    databaseUrl: values['database-url'] as string | undefined,
    databasePool: values['database-pool'] as string | undefined,
    redisUrl: values['redis-url'] as string | undefined,
    limiterFallback: values['limiter-fallback'] as string | undefined,
  }
}

export async function main(argv: string[]): Promise<number> {
  try {
    return await run(argv)
  } catch (error) {
    if (error instanceof UsageError) {
      console.error(`petstore: ${error.message}\n\n${error.usage}`)
      return 2
    }
    if (
      error instanceof ConfigError ||
      error instanceof KeyInputError ||
      error instanceof StorageOpenError ||
      error instanceof StorageUnavailableError
    ) {
      console.error(`petstore: ${error.message}`)
      return 1
    }
    // Anything else is a bug; one line says what, instead of a dump of the minified bundle.
    console.error(`petstore: unexpected error: ${(error as Error)?.message ?? error}`)
    return 70
  }
}

async function run(argv: string[]): Promise<number> {
  const [command, ...rest] = argv
  if (command === undefined || command === '--help' || command === '-h') {
    console.log(USAGE.main)
    return command === undefined ? 2 : 0
  }
  if (command === '--version' || command === '-v') {
    console.log(`petstore ${VERSION}`)
    return 0
  }
  switch (command) {
    case 'help':
      return helpFor(rest)
    case 'serve':
      return serve(rest)
    case 'keys':
      return keys(rest)
    case 'pets':
      return pets(rest)
    case 'backup':
      return backup(rest)
    case 'restore':
      return restore(rest)
    case 'healthcheck':
      return healthcheck(rest)
    default:
      throw new UsageError(`unknown command "${command}"`, USAGE.main)
  }
}

async function serve(args: string[]): Promise<number> {
  const { values, positionals } = parse(
    args,
    {
      host: { type: 'string' },
      port: { type: 'string' },
      'base-url': { type: 'string' },
      'cors-origin': { type: 'string', multiple: true },
      'trust-proxy': { type: 'string', multiple: true },
      'metrics-address': { type: 'string' },
      'metrics-token': { type: 'string' },
      'ban-after': { type: 'string' },
      'ban-seconds': { type: 'string' },
      'no-access-log': { type: 'boolean' },
      'database-pool': { type: 'string' },
      'limiter-fallback': { type: 'string' },
    },
    USAGE.serve,
  )
  if (values.help) return help(USAGE.serve)
  if (positionals.length) throw new UsageError(`unexpected argument "${positionals[0]}"`, USAGE.serve)
  const config = asUsageError(() => resolveConfig(configInput(values)), USAGE.serve)
  // Handlers first: a supervisor may signal as soon as it reads the listening line.
  let stop: (reason: string, code?: number) => unknown = (reason) => {
    console.error(`petstore: ${reason} before the server started`)
    process.exit(0)
  }
  process.on('SIGTERM', () => stop('SIGTERM received'))
  process.on('SIGINT', () => stop('SIGINT received'))
  const backend = config.database ? await openSharedBackend(config) : openEmbeddedBackend(config, (reason, code) => stop(reason, code))
  const { storage } = backend
  if (config.database && !config.redisUrl)
    console.error('petstore: rate limits are per instance: with several instances, give them --redis-url to share them')
  const petstore = createApp(config, {
    storage,
    limiterStore: config.redisUrl
      ? (rule) => new RedisLimiterStore(rule, { url: config.redisUrl!, maxAddresses: config.maxTrackedAddresses })
      : undefined,
    petWriter: backend.petWriter,
    dataFile: backend.dataFile,
    onDataFileChanged: backend.onDataFileChanged,
  })
  await petstore.loaded
  if (config.redisUrl && !(await waitFor(() => petstore.limiter.ping(), 3_000)))
    console.error(
      `petstore: Redis at ${redactedUrl(config.redisUrl)} does not answer yet; ` +
        (config.limiterFallback === 'local' ? 'limiting in this process until it does' : 'API requests answer 503 until it does'),
    )
  const { app } = petstore
  let metricsServer: ReturnType<typeof Bun.serve> | undefined
  let binding = `${hostInUrl(config.host)}:${config.port}`
  try {
    // Elysia asks for SO_REUSEPORT by default, which would let a second server start on a port in use
    // and split the traffic between two data files; development mode would show Bun's error pages.
    app.listen({ hostname: config.host, port: config.port, reusePort: false, development: false })
    if (config.metricsAddress) {
      binding = `${hostInUrl(config.metricsAddress.host)}:${config.metricsAddress.port}`
      metricsServer = Bun.serve({
        hostname: config.metricsAddress.host,
        port: config.metricsAddress.port,
        reusePort: false,
        development: false,
        routes: { '/metrics': petstore.answerMetrics },
        fetch: () => errorResponse(notFound('This listener serves /metrics only.')),
      })
    }
  } catch (error) {
    await app.server?.stop(true)
    await petstore.finishWrites()
    await backend.close()
    backend.undo()
    throw new ConfigError(`cannot listen on ${binding}: ${(error as Error).message}`)
  }
  try {
    // Made once the port is ours, so a start that fails never leaves a secret nobody can use yet; and
    // only when there is no key at all, so instances that start together on one database make one.
    if (storage.writable && petstore.keys.size === 0) await bootstrapKey(config, storage, () => petstore.keys.reload())
  } catch (error) {
    // Nothing is served half started: the listener goes, and the start fails with one line.
    await app.server!.stop(true)
    await metricsServer?.stop(true)
    await petstore.finishWrites()
    await petstore.stopBackground()
    await backend.close()
    backend.undo()
    throw error
  }
  bindPort(config, app.server!.port!)
  petstore.startBackground()
  console.error(
    `petstore: ${config.env} listening on http://${hostInUrl(config.host)}:${config.port}, API at ${config.baseUrl}, data ${storage.location}` +
      (config.redisUrl ? `, rate limits in Redis at ${redactedUrl(config.redisUrl)}` : '') +
      (metricsServer ? `, metrics at http://${hostInUrl(config.metricsAddress!.host)}:${metricsServer.port}/metrics` : ''),
  )

  let stopping = false
  stop = async (reason: string, code = 0) => {
    if (stopping) return
    stopping = true
    console.error(`petstore: ${reason}, finishing in-flight requests`)
    const drainEnds = Date.now() + config.shutdownGraceMs
    await Promise.race([app.server!.stop(false), Bun.sleep(config.shutdownGraceMs)])
    await app.server!.stop(true)
    await metricsServer?.stop(true)
    // Storage that does not answer (a frozen database) must not keep the process past its drain.
    const finished = async () => {
      await petstore.finishWrites()
      await petstore.stopBackground()
      await backend.close()
      return true
    }
    if (!(await Promise.race([finished(), Bun.sleep(Math.max(drainEnds - Date.now(), STOP_SAVE_MS)).then(() => false)]))) {
      console.error('petstore: storage did not answer in time: stopped without saving the rate-limit state')
      process.exit(1)
    }
    console.error('petstore: stopped')
    process.exit(code)
  }
  return new Promise<number>(() => {})
}

/** What stopping gives storage to take the last writes and the rate-limit state, even after a full drain. */
const STOP_SAVE_MS = 1_000

/** Asks `check` until it says yes or `ms` have passed; the answer at the end. */
async function waitFor(check: () => Promise<boolean>, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms
  while (!(await check())) {
    if (Date.now() > deadline) return false
    await Bun.sleep(50)
  }
  return true
}

/** The storage a server runs on, with what only that kind of storage needs. */
interface Backend {
  storage: Storage
  petWriter?: PetWriter
  dataFile?: DataFileWatch
  onDataFileChanged?: () => void
  close(): Promise<void>
  /** Removes what a start that failed created. */
  undo(): void
}

/**
 * The data file: one server holds it (FILE.lock), commits on a worker thread, and watches the file.
 * A start that fails removes what opening it created.
 */
function openEmbeddedBackend(config: Config, stop: (reason: string, code: number) => unknown): Backend {
  const created = createdBy(config.dataFile)
  // The lock before the file: while another server or a restore holds it, opening the file (which may
  // migrate it and makes its -wal and -shm) would change a file that is not ours to touch. The lock
  // lives beside the file, so its folder comes first. A refused start undoes nothing: what is there
  // belongs to the holder.
  prepareDataFolder(config.dataFile)
  const lock = lockDataFile(resolve(config.dataFile))
  let storage: SqliteStorage
  try {
    storage = openSqliteStorage(config.dataFile, { verify: true })
  } catch (error) {
    lock?.release()
    created.undo()
    throw error
  }
  if (storage.readOnly) {
    if (storage.keys.list().length === 0) {
      storage.close()
      lock?.release()
      created.undo()
      throw new StorageOpenError(`${config.dataFile} is read-only and holds no API keys, so no request could be served`)
    }
    console.error(`petstore: ${config.dataFile} is read-only: serving reads; creates answer 503 until it is writable and petstore restarts`)
  }
  return {
    storage,
    // Resolved here, beside the entry point: in the compiled binary every module's import.meta.url is
    // the binary itself, and the worker's entry is stored at its path relative to src/.
    petWriter:
      storage.file !== null && !storage.readOnly
        ? new WorkerPetWriter(new URL('./storage/sqlite/commit-worker.ts', import.meta.url), storage.file)
        : undefined,
    dataFile: storage,
    // Exit non-zero so a supervisor restarts the server, and the restart opens the file afresh.
    onDataFileChanged: () => stop('the read-only data file changed on disk; stopping so that a restart reads it afresh', 1),
    async close() {
      storage.close()
      lock?.release()
    },
    undo: () => created.undo(),
  }
}

/** PostgreSQL, shared with other instances: nothing on local disk, nothing to undo. */
async function openSharedBackend(config: Config): Promise<Backend> {
  const storage = await openPostgresStorage(config.database!.url, { pool: config.database!.pool })
  return { storage, close: () => storage.close(), undo() {} }
}

/**
 * The bootstrap key's secret goes to a file beside the data file, readable by its owner only, and
 * never to the log (under systemd and Docker, stderr is the log); stderr says where it is. On an
 * interactive terminal, where nothing is logged, the secret is shown as well.
 */
async function bootstrapKey(config: Config, storage: Storage, reload: () => unknown): Promise<void> {
  const { secret, record } = makeKey({ plan: 'free', name: 'bootstrap' }, Date.now())
  const file = bootstrapKeyFile(config.dataFile)
  const temporary = `${file}.${process.pid}.tmp`
  // The secret is on disk before the key exists, so a key is never made whose secret was lost. With
  // PostgreSQL there is no data file, so the folder may not exist yet.
  try {
    mkdirSync(dirname(file), { recursive: true, mode: 0o700 })
    writeFileSync(temporary, `${secret}\n`, { mode: 0o600, flag: 'wx' })
  } catch (error) {
    throw new StorageOpenError(`cannot write the bootstrap key's secret to ${temporary}: ${(error as Error).message}`)
  }
  let made: boolean
  try {
    made = await storage.keys.insertIfNone(record)
    if (made) renameSync(temporary, file)
  } finally {
    rmSync(temporary, { force: true })
  }
  await reload()
  if (made) announceBootstrapKey(config, record.id, secret, file)
}

function announceBootstrapKey(config: Config, id: string, secret: string, file: string): void {
  // The hint names the store the server uses, so a key made by following it lands there.
  const where = config.database
    ? ' (with the same PETSTORE_DATABASE_URL)'
    : ENVIRONMENTS[config.env].dataFile !== config.dataFile
      ? ` --data ${resolve(config.dataFile)}`
      : config.env === 'staging'
        ? ' --env staging'
        : ''
  console.error(
    `petstore: no API keys yet, so a Free key was created (id ${id}); its secret is in ${file} (readable by this user only)` +
      (process.stderr.isTTY ? `:\n${secret}` : '') +
      `\npetstore: make more with: ${commandName()} keys create --plan pro --name NAME${where}`,
  )
}

/** `data/petstore.db` → `data/petstore-bootstrap-key.txt`, absolute. */
export function bootstrapKeyFile(dataFile: string): string {
  return resolve(dirname(dataFile), `${basename(dataFile).replace(/\.db$/, '')}-bootstrap-key.txt`)
}

/** How the user ran us: the binary by the name they typed, or the sources through Bun. */
function commandName(): string {
  return Bun.main.startsWith('/$bunfs/') || Bun.main.startsWith('B:/~BUN/') ? 'petstore' : `bun ${relative(process.cwd(), Bun.main) || Bun.main}`
}

/**
 * What opening the data file will create (the file, its companions, its lock, missing folders), so a
 * start that fails can take it back: a failed start leaves nothing on disk.
 */
function createdBy(dataFile: string): { undo(): void } {
  const file = resolve(dataFile)
  const folders: string[] = []
  for (let dir = dirname(file); !existsSync(dir); dir = dirname(dir)) folders.push(dir)
  const lock = lockFileOf(file)
  // Undone only by the start that held the lock, so a lock file it made is its own to remove.
  const made = existsSync(file) ? (existsSync(lock) ? [] : [lock]) : [file, `${file}-wal`, `${file}-shm`, lock]
  return {
    undo() {
      for (const path of made) rmSync(path, { force: true })
      for (const dir of folders) rmSync(dir, { recursive: true, force: true })
    },
  }
}

/** Runs a check of command-line values; its complaint is reported with the command's usage. */
function asUsageError<T>(check: () => T, usage: string): T {
  try {
    return check()
  } catch (error) {
    if (error instanceof ConfigError || error instanceof KeyInputError) throw new UsageError(error.message, usage)
    throw error
  }
}

function help(usage: string): number {
  console.log(usage)
  return 0
}

function helpFor(args: string[]): number {
  if (args.length === 0) return help(USAGE.main)
  const topic = args[0]!
  if (args.length > 1 || !(topic in USAGE) || topic === 'main')
    throw new UsageError(`no help for "${args.join(' ')}"; commands are serve, keys, pets, backup, restore, healthcheck`, USAGE.main)
  return help(USAGE[topic as keyof typeof USAGE])
}

/**
 * Opens storage for a command other than serve: PostgreSQL when a database URL is given, else the data
 * file. A new data file is made only when it was named (--data, PETSTORE_DATA): a key created into a
 * new file on the default path, in the wrong folder, would be a key no running server knows.
 */
async function openForCommand(values: Record<string, unknown>, usage: string, mayCreate: boolean): Promise<{ storage: Storage; where: string }> {
  const input = configInput(values)
  const database = asUsageError(() => resolveDatabase(input, process.env), usage)
  // Checked like every value, though these commands leave Redis alone (a running server applies resets).
  asUsageError(() => resolveRedisUrl(input, process.env), usage)
  if (database) {
    const storage = await openPostgresStorage(database.url, { pool: 1, deadlines: COMMAND })
    return { storage, where: storage.location }
  }
  const file = resolve(asUsageError(() => resolveDataFile(input, process.env), usage))
  return { storage: openSqliteStorage(file, { mustExist: !(mayCreate && dataFileNamed(input, process.env)) }), where: file }
}

async function keys(args: string[]): Promise<number> {
  const [sub, ...rest] = args
  if (sub === undefined || sub === '--help' || sub === '-h') {
    console.log(USAGE.keys)
    return sub === undefined ? 2 : 0
  }
  const { values, positionals } = parse(
    rest,
    {
      plan: { type: 'string' },
      name: { type: 'string' },
      rpm: { type: 'string' },
      rpd: { type: 'string' },
      json: { type: 'boolean' },
    },
    USAGE.keys,
  )
  if (values.help) return help(USAGE.keys)
  const allowed: Record<string, string[]> = {
    create: ['plan', 'name', 'rpm', 'rpd'],
    list: ['json'],
    revoke: [],
    'reset-limits': [],
  }
  if (!(sub in allowed)) throw new UsageError(`unknown keys command "${sub}"`, USAGE.keys)
  for (const flag of ['plan', 'name', 'rpm', 'rpd', 'json'])
    if (values[flag] !== undefined && !allowed[sub]!.includes(flag))
      throw new UsageError(`--${flag} does not apply to keys ${sub}`, USAGE.keys)
  const expected = sub === 'revoke' || sub === 'reset-limits' ? 1 : 0
  if (positionals.length !== expected)
    throw new UsageError(
      expected ? `keys ${sub} needs exactly one key ID` : `unexpected argument "${positionals[0]}"`,
      USAGE.keys,
    )

  if (sub === 'create' && values.plan === undefined) throw new UsageError('keys create needs --plan', USAGE.keys)
  const limit = (flag: 'rpm' | 'rpd') =>
    values[flag] === undefined ? undefined : parseInteger(`--${flag}`, values[flag] as string, 1, 1_000_000_000)
  const input = asUsageError(() => {
    const checked = { plan: values.plan as string, name: values.name as string | undefined, rpm: limit('rpm'), rpd: limit('rpd') }
    if (sub === 'create') {
      limitsFor(checked)
      checkKeyName(checked.name)
    }
    return checked
  }, USAGE.keys)
  const { storage, where } = await openForCommand(values, USAGE.keys, sub === 'create')
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

async function pets(args: string[]): Promise<number> {
  const [sub, ...rest] = args
  if (sub === undefined || sub === '--help' || sub === '-h') {
    console.log(USAGE.pets)
    return sub === undefined ? 2 : 0
  }
  const { values, positionals } = parse(rest, { count: { type: 'string' }, yes: { type: 'boolean' } }, USAGE.pets)
  if (values.help) return help(USAGE.pets)
  if (sub !== 'seed' && sub !== 'reset') throw new UsageError(`unknown pets command "${sub}"`, USAGE.pets)
  if (positionals.length) throw new UsageError(`unexpected argument "${positionals[0]}"`, USAGE.pets)
  if (sub === 'seed' && values.yes !== undefined) throw new UsageError('--yes does not apply to pets seed', USAGE.pets)
  if (sub === 'reset' && values.count !== undefined) throw new UsageError('--count does not apply to pets reset', USAGE.pets)
  if (sub === 'seed' && values.count === undefined) throw new UsageError('pets seed needs --count N', USAGE.pets)
  const count = sub === 'seed' ? asUsageError(() => parseInteger('--count', values.count as string, 1, 100_000), USAGE.pets) : 0
  const { storage, where } = await openForCommand(values, USAGE.pets, sub === 'seed')
  try {
    if (sub === 'seed') {
      await storage.pets.seed(samplePets(count), Date.now())
      console.error(`petstore: added ${count} sample pets to ${where}`)
      return 0
    }
    if (values.yes !== true) {
      console.error(`petstore: pets reset deletes all ${await storage.pets.count()} pets in ${where} (keys are kept); run it again with --yes`)
      return 2
    }
    const deleted = await storage.pets.reset()
    console.error(`petstore: deleted ${deleted} pets from ${where}; API keys are kept`)
    return 0
  } finally {
    await storage.close()
  }
}

const SAMPLE_NAMES = [
  'Rex', 'Bella', 'Luna', 'Max', 'Charlie', 'Lucy', 'Cooper', 'Daisy', 'Milo', 'Bailey', 'Coco', 'Rocky',
  'Nala', 'Oliver', 'Lola', 'Tucker', 'Zoe', 'Bear', 'Ruby', 'Leo', 'Pepper', 'Simba', 'Willow', 'Ziggy',
  'Biscuit', 'Mochi', 'Pumpkin', 'Shadow', 'Ginger', 'Oscar', 'Hazel', 'Finn', 'Olive', 'Toby', 'Nova', 'Bruno',
]
/** Realistic enough to page, filter and show: a name, one of five categories, mostly available. */
function samplePets(count: number): NewPet[] {
  const statuses = ['available', 'available', 'available', 'available', 'available', 'available', 'pending', 'pending', 'sold', 'sold'] as const
  return Array.from({ length: count }, (_, i) => ({
    name: SAMPLE_NAMES[i % SAMPLE_NAMES.length]!,
    categoryId: 1 + Math.floor(Math.random() * 5),
    status: statuses[Math.floor(Math.random() * statuses.length)]!,
  }))
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

/** The one FILE that backup and restore take; an empty name would otherwise fail later as a path. */
function oneFile(positionals: string[], command: string, usage: string): string {
  if (positionals.length !== 1) throw new UsageError(`${command} needs exactly one FILE`, usage)
  if (positionals[0] === '') throw new UsageError(`${command} needs a file name, and the FILE given is empty`, usage)
  return positionals[0]!
}

async function backup(args: string[]): Promise<number> {
  const { values, positionals } = parse(args, {}, USAGE.backup)
  if (values.help) return help(USAGE.backup)
  const target = oneFile(positionals, 'backup', USAGE.backup)
  if (asUsageError(() => resolveDatabase(configInput(values), process.env), USAGE.backup))
    throw new UsageError('backup copies the data file; with PostgreSQL, use pg_dump (see the README)', USAGE.backup)
  const file = resolve(asUsageError(() => resolveDataFile(configInput(values), process.env), USAGE.backup))
  const storage = openSqliteStorage(file, { mustExist: true })
  try {
    storage.backup(target)
  } finally {
    storage.close()
  }
  console.error(`petstore: backup written to ${target}`)
  return 0
}

async function restore(args: string[]): Promise<number> {
  const { values, positionals } = parse(args, {}, USAGE.restore)
  if (values.help) return help(USAGE.restore)
  const given = oneFile(positionals, 'restore', USAGE.restore)
  if (asUsageError(() => resolveDatabase(configInput(values), process.env), USAGE.restore))
    throw new UsageError('restore replaces the data file; with PostgreSQL, use pg_restore (see the README)', USAGE.restore)
  const file = resolve(asUsageError(() => resolveDataFile(configInput(values), process.env), USAGE.restore))
  const backup = resolve(given)
  const done = restoreDataFile(file, backup, Date.now())
  const kept = done.keptParts.length ? `the previous data file is kept as ${done.keptParts.join(', ')}` : 'there was no data file before'
  if (!done.resumed) {
    console.error(`petstore: restored ${backup} into ${file}; ${kept}`)
    return 0
  }
  console.error(`petstore: finished an interrupted restore of ${done.backup} into ${file}; ${kept}`)
  if (done.backup === backup) return 0
  console.error(`petstore: ${backup} was not restored; run petstore restore again to restore it instead`)
  return 1
}

async function healthcheck(args: string[]): Promise<number> {
  const { values, positionals } = parse(args, { host: { type: 'string' }, port: { type: 'string' } }, USAGE.healthcheck)
  if (values.help) return help(USAGE.healthcheck)
  if (positionals.length) throw new UsageError(`unexpected argument "${positionals[0]}"`, USAGE.healthcheck)
  const env = asUsageError(() => envOf(values as { env?: string }, process.env), USAGE.healthcheck)
  const portText = fromFlagOrVariable('--port', values.port as string | undefined, 'PETSTORE_PORT', process.env)
  const port =
    portText.value === undefined
      ? ENVIRONMENTS[env].port
      : asUsageError(() => parseInteger(portText.name, portText.value!, 1, 65535), USAGE.healthcheck)
  // A server bound to every address is asked on loopback of the same family.
  const bound = (values.host as string | undefined) ?? process.env.PETSTORE_HOST ?? '127.0.0.1'
  const host = bound === '0.0.0.0' ? '127.0.0.1' : bound === '::' ? '::1' : bound
  const url = `http://${hostInUrl(host)}:${port}/healthz`
  try {
    const response = await fetch(url, { signal: AbortSignal.timeout(2000) })
    if (response.status === 200) {
      console.log(`petstore: healthy (${url} answered 200)`)
      return 0
    }
    console.log(`petstore: unhealthy (${url} answered ${response.status})`)
  } catch (error) {
    const reason = (error as Error).name === 'TimeoutError' ? 'no answer within 2 s' : (error as Error).message
    console.log(`petstore: unhealthy (${url}: ${reason})`)
  }
  return 1
}
