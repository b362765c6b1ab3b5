#!/usr/bin/env bun
/**
 * The Pet Store benchmark: `bun run bench` (see test/bench/README.md).
 *
 * Builds or reuses dist/petstore, seeds a fresh data file and, where PostgreSQL and Redis are installed,
 * a throwaway PostgreSQL + Redis, starts a server on each (access log on, written to a file) and a bare
 * Bun.serve baseline that replays the server's own answers, then drives them with the same load
 * generator, interleaved, and reports medians and server CPU per request as markdown tables and a JSON
 * document.
 * It is a benchmark, not a test: a missed goal is printed, never an exit code.
 */
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  closeSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
  ftruncateSync,
  fstatSync,
} from 'node:fs'
import os from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { parseArgs } from 'node:util'
import type { Subprocess } from 'bun'
import type { Captured, Captures } from './baseline'
import { runLoad, toolAvailable, toolVersion, type LoadResult, type Tool } from './lib/load'
import {
  cleanEnv,
  cpuSecondsOf,
  installExitHandlers,
  systemBusySeconds,
  median,
  memoryOf,
  onCleanup,
  round,
  runCleanups,
  stop,
  StreamTail,
  track,
} from './lib/procs'
import {
  comparison,
  markdown,
  RESULT_VERSION,
  type BenchResult,
  type RunFigures,
  type ScenarioResult,
  type TargetSummary,
} from './lib/report'
import { countPets, countPostgresPets, seed, seedPostgres } from './lib/seed'
import { concrete, SCENARIOS, type BenchContext, type LoadSpec, type RequestShape, type Scenario } from './lib/scenarios'
import { postgresBinaries } from '../support/postgres'
import { redisBinary } from '../support/redis'

const ROOT = resolve(import.meta.dir, '..', '..')
const BINARY = join(ROOT, 'dist', 'petstore')
const DEFAULT_OUT = join(import.meta.dir, 'results', 'latest.json')
const LISTENING = /listening on http:\/\/(?:\[[^\]]+\]|[^\s:/]+):(\d+)/
const GOALS = { startupMs: 150, rssMb: 150, rssAfterSprayMb: 200 }
/** Headers Bun.serve writes itself: the baseline must not send them twice. */
const NOT_REPLAYED = new Set(['date', 'content-length', 'transfer-encoding', 'connection', 'keep-alive'])

const USAGE = `Usage: bun run bench [options]
       bun run bench compare BEFORE.json AFTER.json

  --quick              tiny configuration for a smoke run (1 run × 1 s, 16 connections, 1,000 pets, 3 starts)
  --runs N             measured runs per target and scenario (default 3)
  --duration S         seconds per run (default 5)
  --warmup S           seconds of unmeasured load per target before a scenario's runs (default 2)
  --connections N      concurrent connections (default 64)
  --threads N          load generator threads (wrk only; default 1, leaving the other core to the server)
  --tool wrk|autocannon  load generator (default wrk when installed, else autocannon)
  --scenarios A,B      only these scenarios (names: ${SCENARIOS.map((s) => s.name).join(', ')})
  --pets N             pets seeded into the data file (default 10000)
  --starts N           starts timed for exec → first /healthz 200 (default 10)
  --out FILE           JSON result (default test/bench/results/latest.json; a .md copy of the table is written beside it)
  --compare FILE       also print a comparison with an earlier JSON result
  --build              rebuild dist/petstore first (default: build only when missing)
  --keep               keep the temporary directory (data file, access log, scripts)
  --backend both|sqlite|postgres  both (the default where Debian's postgresql and redis-server are
                       installed, else sqlite): the embedded data file and PostgreSQL + Redis started for
                       the run, measured interleaved, with server CPU per request side by side; or one of
                       them alone (default out file for postgres: results/latest-postgres.json)
  --instances N        with PostgreSQL: instances sharing it (default 1); the load is split evenly
                       between them, and the figures are their sums
  --strict             also measure the stricter baseline, which replays Headers built once at start`

interface Options {
  quick: boolean
  runs: number
  durationS: number
  warmupS: number
  connections: number
  threads: number
  tool: Tool
  scenarios: Scenario[]
  pets: number
  starts: number
  out: string
  compare?: string
  build: boolean
  keep: boolean
  backend: 'sqlite' | 'postgres' | 'both'
  instances: number
  strict: boolean
}

function parseOptions(argv: string[]): Options | null {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    strict: true,
    options: {
      quick: { type: 'boolean' },
      runs: { type: 'string' },
      duration: { type: 'string' },
      warmup: { type: 'string' },
      connections: { type: 'string' },
      threads: { type: 'string' },
      tool: { type: 'string' },
      scenarios: { type: 'string' },
      pets: { type: 'string' },
      starts: { type: 'string' },
      out: { type: 'string' },
      compare: { type: 'string' },
      build: { type: 'boolean' },
      keep: { type: 'boolean' },
      backend: { type: 'string' },
      instances: { type: 'string' },
      strict: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  })
  if (values.help) {
    console.log(USAGE)
    return null
  }
  if (positionals.length) throw new Error(`unexpected argument "${positionals[0]}"`)
  const quick = values.quick === true
  const number = (name: string, text: string | undefined, fallback: number, min: number, max: number) => {
    if (text === undefined) return fallback
    const value = Number(text)
    if (!Number.isFinite(value) || value < min || value > max) throw new Error(`--${name} must be a number from ${min} to ${max}`)
    return value
  }
  let tool: Tool
  if (values.tool === undefined) tool = toolAvailable('wrk') ? 'wrk' : 'autocannon'
  else if (values.tool === 'wrk' || values.tool === 'autocannon') tool = values.tool
  else throw new Error('--tool must be wrk or autocannon')
  if (!toolAvailable(tool))
    throw new Error(tool === 'wrk' ? 'wrk is not installed (apt-get install -y wrk)' : 'autocannon is missing (bun install)')
  let scenarios = SCENARIOS
  if (values.scenarios !== undefined) {
    const names = values.scenarios
      .split(',')
      .map((name) => name.trim())
      .filter(Boolean)
    for (const name of names)
      if (!SCENARIOS.some((s) => s.name === name))
        throw new Error(`unknown scenario "${name}"; known: ${SCENARIOS.map((s) => s.name).join(', ')}`)
    // Always in the canonical order: the spray runs last so the RSS before it means something.
    scenarios = SCENARIOS.filter((s) => names.includes(s.name))
  }
  const connections = Math.round(number('connections', values.connections, quick ? 16 : 64, 1, 10_000))
  const backend = values.backend ?? (postgresBinaries() !== null && redisBinary() !== null ? 'both' : 'sqlite')
  if (backend !== 'sqlite' && backend !== 'postgres' && backend !== 'both') throw new Error('--backend must be both, sqlite or postgres')
  if (values.backend === undefined && backend === 'sqlite')
    log('PostgreSQL or Redis is not installed (apt-get install -y postgresql redis-server): measuring the data file alone')
  const instances = Math.round(number('instances', values.instances, 1, 1, 8))
  if (backend === 'sqlite' && instances !== 1) throw new Error('--instances needs PostgreSQL (one server per data file)')
  return {
    quick,
    runs: Math.round(number('runs', values.runs, quick ? 1 : 3, 1, 100)),
    durationS: Math.round(number('duration', values.duration, quick ? 1 : 5, 1, 3600)),
    warmupS: Math.round(number('warmup', values.warmup, quick ? 0 : 2, 0, 600)),
    connections,
    threads: Math.round(number('threads', values.threads, 1, 1, 64)),
    tool,
    scenarios,
    pets: Math.round(number('pets', values.pets, quick ? 1_000 : 10_000, 100, 10_000_000)),
    starts: Math.round(number('starts', values.starts, quick ? 3 : 10, 1, 100)),
    out: resolve(
      values.out ??
        (backend === 'postgres' ? DEFAULT_OUT.replace(/\.json$/, `-postgres${instances > 1 ? `-${instances}` : ''}.json`) : DEFAULT_OUT),
    ),
    backend,
    instances,
    compare: values.compare,
    build: values.build === true,
    keep: values.keep === true,
    strict: values.strict === true,
  }
}

function log(message: string): void {
  console.error(`bench: ${message}`)
}

// ---------------------------------------------------------------------------------------------------
// The binary

function newestMtime(dir: string): number {
  let newest = 0
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name)
    newest = Math.max(newest, entry.isDirectory() ? newestMtime(path) : statSync(path).mtimeMs)
  }
  return newest
}

function git(args: string[]): string {
  const out = Bun.spawnSync(['git', '-C', ROOT, ...args], { stdout: 'pipe', stderr: 'ignore' })
  return out.exitCode === 0 ? out.stdout.toString().trim() : ''
}

function ensureBinary(force: boolean): BenchResult['binary'] {
  let built = false
  if (force || !existsSync(BINARY)) {
    log(force ? 'rebuilding dist/petstore (--build)' : 'dist/petstore is missing: bun run build')
    const build = Bun.spawnSync(['bun', 'run', 'build'], { cwd: ROOT, stdout: 'inherit', stderr: 'inherit' })
    if (build.exitCode !== 0) throw new Error('bun run build failed')
    built = true
  }
  const stat = statSync(BINARY)
  const stale = newestMtime(join(ROOT, 'src')) > stat.mtimeMs
  if (stale) log('warning: dist/petstore is older than src/; measuring it anyway (pass --build to rebuild)')
  return {
    path: BINARY,
    sizeBytes: stat.size,
    sizeMb: round(stat.size / 1024 / 1024, 1),
    built,
    staleVsSources: stale,
    commit: git(['rev-parse', '--short', 'HEAD']) || 'unknown',
    dirtySources: git(['status', '--porcelain', '--', 'src', 'package.json']) !== '',
  }
}

// ---------------------------------------------------------------------------------------------------
// Processes

/** Where a server keeps its data: `--data FILE`, or `--database-url URL --redis-url URL`. */
const serveArgs = (storageArgs: string[]) => [BINARY, 'serve', '--host', '127.0.0.1', '--port', '0', ...storageArgs]

/** Exec to the first 200 on /healthz, in ms; the server is stopped afterwards. */
async function timeStart(storageArgs: string[]): Promise<number> {
  const started = performance.now()
  const proc = track(Bun.spawn(serveArgs(storageArgs), { env: cleanEnv(), stdin: 'ignore', stdout: 'ignore', stderr: 'pipe' }))
  try {
    const stderr = new StreamTail(proc.stderr)
    const port = Number((await stderr.waitFor(LISTENING, 15_000, proc.exited))[1])
    for (;;) {
      try {
        const res = await fetch(`http://127.0.0.1:${port}/healthz`, { headers: { connection: 'close' } })
        await res.arrayBuffer()
        if (res.status === 200) return performance.now() - started
      } catch {}
      if (performance.now() - started > 15_000) throw new Error('no 200 from /healthz within 15 s')
      await Bun.sleep(1)
    }
  } finally {
    await stop(proc, 'SIGTERM')
  }
}

interface Petstore {
  proc: Subprocess<'ignore', number, 'pipe'>
  port: number
  stderr: StreamTail
  args: string[]
}

async function startPetstore(storageArgs: string[], logFd: number): Promise<Petstore> {
  // --trust-proxy: the 401 and spray scenarios send X-Forwarded-For. A huge --ban-after with a zero
  // --ban-seconds keeps the exhausted key on rate_limited instead of key_banned. Neither touches the
  // path of requests with a valid key.
  const extra = ['--trust-proxy', 'loopback', '--ban-after', '100000', '--ban-seconds', '0']
  const args = [...serveArgs(storageArgs), ...extra]
  const proc = track(Bun.spawn(args, { env: cleanEnv(), stdin: 'ignore', stdout: logFd, stderr: 'pipe' }))
  const stderr = new StreamTail(proc.stderr)
  const port = Number((await stderr.waitFor(LISTENING, 15_000, proc.exited))[1])
  return { proc, port, stderr, args: ['serve', ...args.slice(2)] }
}

/** The baseline process: its per-request listener (the yardstick) and its prebuilt one (stricter). */
async function startBaseline(capturesFile: string): Promise<{ proc: Subprocess; port: number; prebuiltPort: number }> {
  const proc = track(
    Bun.spawn([process.execPath, join(import.meta.dir, 'baseline.ts'), capturesFile], {
      env: cleanEnv(),
      stdin: 'ignore',
      stdout: 'pipe',
      stderr: 'pipe',
    }),
  )
  const stdout = new StreamTail(proc.stdout)
  void new StreamTail(proc.stderr)
  const port = Number((await stdout.waitFor(/baseline per-request listening on http:\/\/[^\s:/]+:(\d+)/, 15_000, proc.exited))[1])
  const prebuiltPort = Number((await stdout.waitFor(/baseline prebuilt listening on http:\/\/[^\s:/]+:(\d+)/, 15_000, proc.exited))[1])
  return { proc, port, prebuiltPort }
}

/** The server's access log: truncated before a measured run, counted by status after it. */
class AccessLogWindow {
  constructor(
    readonly path: string,
    private readonly fd: number,
  ) {}

  reset(): void {
    ftruncateSync(this.fd, 0)
  }

  /** Waits for the buffered lines to land (the log flushes every 50 ms), counts statuses, truncates. */
  async collect(): Promise<Record<string, number>> {
    let size = -1
    for (let i = 0; i < 40; i++) {
      await Bun.sleep(100)
      const now = fstatSync(this.fd).size
      if (now === size) break
      size = now
    }
    const text = readFileSync(this.path, 'latin1')
    this.reset()
    const counts: Record<string, number> = {}
    const pattern = /"status":(\d{3})/g
    for (let match = pattern.exec(text); match; match = pattern.exec(text)) counts[match[1]!] = (counts[match[1]!] ?? 0) + 1
    return counts
  }
}

// ---------------------------------------------------------------------------------------------------
// Capturing the server's answers

async function capture(port: number, shape: RequestShape): Promise<Captured> {
  const res = await fetch(`http://127.0.0.1:${port}${shape.path}`, { method: shape.method, headers: shape.headers, body: shape.body })
  const body = await res.text()
  const headers: [string, string][] = []
  res.headers.forEach((value, name) => {
    if (!NOT_REPLAYED.has(name.toLowerCase())) headers.push([name, value])
  })
  return { status: res.status, headers, body }
}

function errorCode(body: string): string | undefined {
  try {
    const parsed = JSON.parse(body) as { code?: unknown }
    return typeof parsed === 'object' && parsed !== null && typeof parsed.code === 'string' ? parsed.code : undefined
  } catch {
    return undefined
  }
}

// ---------------------------------------------------------------------------------------------------
// Measuring

function summarise(runs: RunFigures[]): TargetSummary {
  return {
    rps: round(median(runs.map((r) => r.rps)), 0),
    p50Ms: round(median(runs.map((r) => r.p50Ms)), 3),
    p99Ms: round(median(runs.map((r) => r.p99Ms)), 3),
    targetCpuPct: round(median(runs.map((r) => r.targetCpuPct)), 0),
    cpuUsPerRequest: round(median(runs.map((r) => r.cpuUsPerRequest)), 1),
    generatorCpuPct: round(median(runs.map((r) => r.generatorCpuPct)), 0),
    otherCpuPct: round(median(runs.map((r) => r.otherCpuPct)), 0),
    requests: runs.reduce((sum, r) => sum + r.requests, 0),
    unexpected: runs.reduce((sum, r) => sum + r.unexpected, 0),
    runs,
  }
}

function unexpectedOf(statuses: Record<string, number>, expected: number[]): number {
  let count = 0
  for (const [status, n] of Object.entries(statuses)) if (!expected.includes(Number(status))) count += n
  return count
}

/** Unexpected answers as the generator saw them (the baseline has no access log). */
function unexpectedFromGenerator(load: LoadResult, expected: number[]): number {
  if (load.statuses) return unexpectedOf(load.statuses, expected) + load.socketErrors
  // wrk counts only statuses of 400 and more; with one expected class that is enough.
  const errorStatuses = load.errorStatuses ?? 0
  const expectsErrors = expected.every((s) => s >= 400)
  return (expectsErrors ? load.requests - errorStatuses : errorStatuses) + load.socketErrors
}

function figures(load: LoadResult, unexpected: number, targetCpuS: number, busyS: number, statuses?: Record<string, number>): RunFigures {
  return {
    requests: load.requests,
    rps: round(load.rps, 0),
    p50Ms: round(load.p50Ms, 3),
    p99Ms: round(load.p99Ms, 3),
    maxMs: round(load.maxMs, 3),
    socketErrors: load.socketErrors,
    unexpected,
    ...(statuses ? { statuses } : {}),
    targetCpuPct: round((targetCpuS / load.durationS) * 100, 0),
    cpuUsPerRequest: load.requests > 0 ? round((targetCpuS / load.requests) * 1e6, 1) : NaN,
    generatorCpuPct: round((load.generatorCpuS / load.durationS) * 100, 0),
    otherCpuPct: round(Math.max(0, (busyS - targetCpuS - load.generatorCpuS) / load.durationS) * 100, 0),
  }
}

// ---------------------------------------------------------------------------------------------------

/** One storage under test: the embedded data file, or PostgreSQL + Redis with its instances. */
interface Store {
  backend: 'sqlite' | 'postgres'
  countRows: () => Promise<number>
  key: string
  exhaustedKey: string
  startSamplesMs: number[]
  petstores: Petstore[]
  accessLog: AccessLogWindow
  specs: Map<string, LoadSpec>
  created201: number
}

/** Seeds the storage, times its starts, then starts the server(s) measured on it. */
async function prepareStore(backend: Store['backend'], options: Options, dir: string, notes: string[]): Promise<Store> {
  let storageArgs: string[]
  let countRows: () => Promise<number>
  let keys: { key: string; exhaustedKey: string }
  if (backend === 'postgres') {
    const shared = await startShared()
    storageArgs = ['--database-url', shared.databaseUrl, '--redis-url', shared.redisUrl]
    log(`seeding ${options.pets.toLocaleString('en')} pets into PostgreSQL; rate limits in Redis`)
    keys = await seedPostgres([BINARY], shared.databaseUrl, options.pets)
    countRows = () => countPostgresPets(shared.databaseUrl)
    notes.push(`PostgreSQL and Redis ran on this machine, sharing its ${os.cpus().length} cores with ${options.instances} instance(s).`)
  } else {
    const dataFile = join(dir, 'petstore.db')
    storageArgs = ['--data', dataFile]
    log(`seeding ${options.pets.toLocaleString('en')} pets into ${dataFile}`)
    keys = seed([BINARY], dataFile, options.pets)
    countRows = async () => countPets(dataFile)
  }
  log(`timing ${options.starts} starts on ${backend === 'postgres' ? 'PostgreSQL + Redis' : 'the data file'} (exec → first /healthz 200)`)
  const startSamplesMs: number[] = []
  for (let i = 0; i < options.starts; i++) startSamplesMs.push(round(await timeStart(storageArgs), 1))
  const logPath = join(dir, `access-${backend}.log`)
  const logFd = openSync(logPath, 'a')
  onCleanup(() => closeSync(logFd))
  // Several instances share the access log (appends of whole lines) and split the load evenly.
  const count = backend === 'postgres' ? options.instances : 1
  const petstores = await Promise.all(Array.from({ length: count }, () => startPetstore(storageArgs, logFd)))
  log(
    `petstore on ${backend} (pid ${petstores.map((p) => p.proc.pid).join(', ')}) on ${petstores.map((p) => p.port).join(', ')}, access log → ${logPath}`,
  )
  return {
    backend,
    countRows,
    ...keys,
    startSamplesMs,
    petstores,
    accessLog: new AccessLogWindow(logPath, logFd),
    specs: new Map(),
    created201: 0,
  }
}

/** Uses the 1-per-day key once and follows the first page's next link: what the scenarios need. */
async function contextOf(store: Store, options: Options, notes: string[]): Promise<BenchContext> {
  const origin = `http://127.0.0.1:${store.petstores[0]!.port}`
  const first = await fetch(`${origin}/v1/pets?limit=1`, { headers: { authorization: `Bearer ${store.exhaustedKey}` } })
  await first.arrayBuffer()
  if (first.status !== 200) notes.push(`${store.backend}: the exhausted key's first request got ${first.status}, not 200.`)
  const firstPage = await fetch(`${origin}/v1/pets?limit=20`, { headers: { authorization: `Bearer ${store.key}` } })
  await firstPage.arrayBuffer()
  const next = /<([^>]+)>;\s*rel="next"/.exec(firstPage.headers.get('link') ?? '')
  if (!next) throw new Error(`GET /v1/pets?limit=20 gave no Link: rel="next" (status ${firstPage.status})`)
  const nextUrl = new URL(next[1]!)
  return { key: store.key, exhaustedKey: store.exhaustedKey, cursorPath: nextUrl.pathname + nextUrl.search, pets: options.pets }
}

async function bench(options: Options): Promise<BenchResult> {
  const startedAt = new Date().toISOString()
  const loadAvgStart = os.loadavg().map((v) => round(v, 2))
  const binary = ensureBinary(options.build)
  const dir = mkdtempSync(join(os.tmpdir(), 'petstore-bench-'))
  if (options.keep) log(`temporary directory kept: ${dir}`)
  else onCleanup(() => rmSync(dir, { recursive: true, force: true }))
  const notes: string[] = []

  // The first store is the one the baseline replays and the main table shows; with both, the embedded one.
  const backends: Store['backend'][] = options.backend === 'both' ? ['sqlite', 'postgres'] : [options.backend]
  const stores: Store[] = []
  for (const backend of backends) stores.push(await prepareStore(backend, options, dir, notes))
  const main = stores[0]!
  const shared = stores.length > 1 ? stores[1]! : undefined
  const petstore = main.petstores[0]!
  const origin = `http://127.0.0.1:${petstore.port}`
  await Bun.sleep(200)
  const idle = memoryOf(petstore.proc.pid)

  for (const store of stores) {
    const ctx = await contextOf(store, options, notes)
    for (const s of options.scenarios) store.specs.set(s.name, s.load(ctx))
  }

  // One real answer per scenario and method: what the baseline will replay.
  const captures: Captures = {}
  const capturedInfo = new Map<string, ScenarioResult['captured']>()
  for (const scenario of options.scenarios) {
    const spec = main.specs.get(scenario.name)!
    const entry: Captures[string] = {}
    const info: ScenarioResult['captured'] = []
    for (const shape of [spec.read, ...(spec.write ? [spec.write.request] : [])]) {
      const request = concrete(shape, spec, '192.0.2.1', Math.min(42, options.pets))
      const answer = await capture(petstore.port, request)
      if (answer.status === 201) main.created201++
      entry[shape.method] = answer
      info.push({
        method: request.method,
        path: request.path,
        status: answer.status,
        code: errorCode(answer.body),
        bytes: Buffer.byteLength(answer.body),
      })
      if (!scenario.expected.includes(answer.status))
        notes.push(
          `${scenario.name}: the captured ${request.method} answer was ${answer.status} (${errorCode(answer.body) ?? 'no code'}), expected ${scenario.expected.join('/')}.`,
        )
    }
    captures[scenario.name] = entry
    capturedInfo.set(scenario.name, info)
  }
  const capturesFile = join(dir, 'captures.json')
  writeFileSync(capturesFile, JSON.stringify(captures))
  const baseline = await startBaseline(capturesFile)
  log(`baseline (pid ${baseline.proc.pid}) on http://127.0.0.1:${baseline.port} (per-request headers), ${baseline.prebuiltPort} (prebuilt)`)

  const load = (port: number, durationS: number, spec: LoadSpec, connections = options.connections) =>
    runLoad({
      tool: options.tool,
      port,
      connections,
      threads: options.threads,
      durationS,
      spec,
      workDir: dir,
      offset: Math.floor(Math.random() * 1_000_000),
    })

  const measureStore = async (store: Store, durationS: number, scenario: Scenario): Promise<RunFigures> => {
    const spec = store.specs.get(scenario.name)!
    const serverCpu = () => store.petstores.reduce((sum, p) => sum + cpuSecondsOf(p.proc.pid), 0)
    store.accessLog.reset()
    const cpuBefore = serverCpu()
    const busyBefore = systemBusySeconds()
    const result =
      store.petstores.length === 1
        ? await load(store.petstores[0]!.port, durationS, spec)
        : combined(
            await Promise.all(
              store.petstores.map((p) =>
                load(p.port, durationS, spec, Math.max(1, Math.round(options.connections / store.petstores.length))),
              ),
            ),
          )
    const cpu = serverCpu() - cpuBefore
    const busy = systemBusySeconds() - busyBefore
    const statuses = await store.accessLog.collect()
    store.created201 += statuses['201'] ?? 0
    return figures(result, unexpectedOf(statuses, scenario.expected) + result.socketErrors, cpu, busy, statuses)
  }
  const measureBaseline = async (port: number, durationS: number, scenario: Scenario): Promise<RunFigures> => {
    const cpuBefore = cpuSecondsOf(baseline.proc.pid)
    const busyBefore = systemBusySeconds()
    const b = await load(port, durationS, main.specs.get(scenario.name)!)
    const busy = systemBusySeconds() - busyBefore
    return figures(b, unexpectedFromGenerator(b, scenario.expected), cpuSecondsOf(baseline.proc.pid) - cpuBefore, busy, b.statuses)
  }

  const results: ScenarioResult[] = []
  let peakBeforeSpray: number | null = null
  let peakAfterSpray: number | null = null
  let trackedAddresses: number | null = null
  for (const scenario of options.scenarios) {
    if (scenario.name === 'spray') peakBeforeSpray = memoryOf(petstore.proc.pid)?.peakRssMb ?? null
    for (const port of [baseline.port, baseline.prebuiltPort]) {
      const select = await fetch(`http://127.0.0.1:${port}/${scenario.name}`, { method: 'PUT' })
      await select.arrayBuffer()
      if (select.status !== 200) throw new Error(`baseline refused scenario ${scenario.name}`)
    }
    const loadAvg1m = round(os.loadavg()[0]!, 2)
    const targets = ['baseline', ...(options.strict ? ['prebuilt baseline'] : []), ...stores.map((s) => `petstore (${s.backend})`)]
    log(
      `${scenario.name}: ${options.warmupS ? `warm-up ${options.warmupS} s each, then ` : ''}${options.runs} × (${targets.map((t) => `${t} ${options.durationS} s`).join(', ')})`,
    )
    if (options.warmupS > 0) {
      await measureBaseline(baseline.port, options.warmupS, scenario)
      for (const store of stores) await measureStore(store, options.warmupS, scenario)
    }
    const baselineRuns: RunFigures[] = []
    const prebuiltRuns: RunFigures[] = []
    const storeRuns = stores.map((): RunFigures[] => [])
    for (let run = 0; run < options.runs; run++) {
      baselineRuns.push(await measureBaseline(baseline.port, options.durationS, scenario))
      if (options.strict) prebuiltRuns.push(await measureBaseline(baseline.prebuiltPort, options.durationS, scenario))
      // Interleaved, and in turn first: neither storage always follows the other.
      const order = stores.map((_, i) => i)
      if (run % 2 === 1) order.reverse()
      for (const i of order) storeRuns[i]!.push(await measureStore(stores[i]!, options.durationS, scenario))
      log(
        `  run ${run + 1}: baseline ${Math.round(baselineRuns[run]!.rps).toLocaleString('en')} req/s, ` +
          stores
            .map(
              (s, i) =>
                `${s.backend} ${Math.round(storeRuns[i]![run]!.rps).toLocaleString('en')} req/s ${storeRuns[i]![run]!.cpuUsPerRequest} µs CPU/req`,
            )
            .join(', '),
      )
    }
    const baselineSummary = summarise(baselineRuns)
    const petstoreSummary = summarise(storeRuns[0]!)
    const ratio = round(petstoreSummary.rps / baselineSummary.rps, 2)
    const prebuilt = options.strict ? summarise(prebuiltRuns) : undefined
    const sharedSummary = shared ? summarise(storeRuns[1]!) : undefined
    results.push({
      name: scenario.name,
      title: scenario.title,
      describe: scenario.describe,
      expected: scenario.expected,
      captured: capturedInfo.get(scenario.name)!,
      baseline: baselineSummary,
      petstore: petstoreSummary,
      ratio,
      ...(prebuilt ? { prebuiltBaseline: prebuilt, prebuiltRatio: round(petstoreSummary.rps / prebuilt.rps, 2) } : {}),
      ...(sharedSummary
        ? {
            shared: sharedSummary,
            sharedRatio: round(sharedSummary.rps / baselineSummary.rps, 2),
            // Median of the interleaved pairs' ratios: a busy moment weighs on both sides of a pair.
            cpuRatio: round(median(storeRuns[1]!.map((r, i) => r.cpuUsPerRequest / storeRuns[0]![i]!.cpuUsPerRequest)), 2),
          }
        : {}),
      goal: {
        kind: scenario.goal.kind,
        ratio: scenario.goal.ratio,
        met: ratio >= scenario.goal.ratio,
        ...(scenario.p99GoalMs === undefined ? {} : { p99Ms: scenario.p99GoalMs, p99Met: petstoreSummary.p99Ms <= scenario.p99GoalMs }),
      },
      loadAvg1m,
      peakRssMbAfter: memoryOf(petstore.proc.pid)?.peakRssMb ?? null,
    })
    if (scenario.name === 'spray') {
      peakAfterSpray = memoryOf(petstore.proc.pid)?.peakRssMb ?? null
      const metrics = await (await fetch(`${origin}/metrics`)).text()
      const tracked = /^petstore_rate_limiter_tracked_addresses (\d+)/m.exec(metrics)
      trackedAddresses = tracked ? Number(tracked[1]) : null
    }
  }
  const endMemory = memoryOf(petstore.proc.pid)
  const afterScenarios = peakBeforeSpray ?? endMemory?.peakRssMb ?? null
  const baselineMemory = memoryOf(baseline.proc.pid)
  for (const store of stores)
    for (const p of store.petstores)
      if (p.proc.exitCode !== null) notes.push(`petstore on ${store.backend} exited early (code ${p.proc.exitCode}).`)

  // Durability: kill without warning; every 201 must already be a row.
  for (const store of stores) for (const p of store.petstores) await stop(p.proc, 'SIGKILL')
  await stop(baseline.proc, 'SIGTERM')
  const durabilityOf = async (store: Store): Promise<BenchResult['durability']> => {
    const rowsAdded = (await store.countRows()) - options.pets
    return { created201: store.created201, rowsAdded, ok: rowsAdded >= store.created201, checkedAfter: 'SIGKILL' }
  }
  for (const store of stores) {
    const warnings = store.petstores
      .flatMap((p) => p.stderr.text.split('\n'))
      .filter((line) => /internal error|could not/i.test(line))
      .slice(0, 5)
    for (const line of warnings) notes.push(`server stderr (${store.backend}): ${line.slice(0, 300)}`)
  }
  if (binary.staleVsSources) notes.push('dist/petstore was older than src/ when measured.')
  if (options.tool === 'autocannon')
    notes.push(
      'Measured with autocannon (wrk is not installed): a JavaScript load generator saturates its core before the baseline does, ' +
        'so ratios are pushed towards 1. Install wrk for figures worth comparing with the goals.',
    )
  const generatorBound = results.filter((r) => r.baseline.generatorCpuPct >= 90 && r.baseline.targetCpuPct < 90).map((r) => r.name)
  if (generatorBound.length)
    notes.push(
      `The load generator, not the baseline, was the limit in: ${generatorBound.join(', ')} (generator ≥ 90 % of a core, baseline < 90 %).`,
    )
  const noisy = results.filter((r) => Math.max(r.baseline.otherCpuPct, r.petstore.otherCpuPct) >= 10).map((r) => r.name)
  if (noisy.length)
    notes.push(
      `Other processes used ≥ 10 % of a core during: ${noisy.join(', ')} (see otherCpuPct in the JSON); those figures are noisier.`,
    )

  const startupOf = (store: Store) => {
    const medianMs = round(median(store.startSamplesMs), 1)
    return { samplesMs: store.startSamplesMs, medianMs, goalMs: GOALS.startupMs, met: medianMs <= GOALS.startupMs }
  }
  const dataFile = join(dir, 'petstore.db')
  return {
    version: RESULT_VERSION,
    startedAt,
    finishedAt: new Date().toISOString(),
    quick: options.quick,
    machine: {
      cpus: os.cpus().length,
      cpuModel: os.cpus()[0]?.model.trim() ?? 'unknown',
      memoryMb: Math.round(os.totalmem() / 1024 / 1024),
      kernel: os.release(),
      bun: Bun.version,
      loadAvgStart,
      loadAvgEnd: os.loadavg().map((v) => round(v, 2)),
    },
    config: {
      tool: options.tool,
      toolVersion: toolVersion(options.tool),
      connections: options.connections,
      threads: options.tool === 'wrk' ? options.threads : 1,
      durationS: options.durationS,
      runs: options.runs,
      warmupS: options.warmupS,
      pets: options.pets,
      startSamples: options.starts,
      serverArgs: petstore.args.map((arg, i, args) =>
        arg === dataFile
          ? 'DATA_FILE'
          : args[i - 1] === '--database-url'
            ? 'DATABASE_URL'
            : args[i - 1] === '--redis-url'
              ? 'REDIS_URL'
              : arg,
      ),
      backend: options.backend,
      instances: options.instances,
      baseline: options.strict ? 'per-request headers, and prebuilt' : 'per-request headers',
      accessLog: 'stdout to a file',
    },
    binary,
    startup: startupOf(main),
    memory: {
      idleRssMb: idle?.rssMb ?? null,
      peakRssMbAfterScenarios: afterScenarios,
      peakRssMbAfterSpray: peakAfterSpray,
      rssMbEnd: endMemory?.rssMb ?? null,
      goalMb: GOALS.rssMb,
      goalAfterSprayMb: GOALS.rssAfterSprayMb,
      metAfterScenarios: afterScenarios === null ? null : afterScenarios <= GOALS.rssMb,
      metAfterSpray: peakAfterSpray === null ? null : peakAfterSpray <= GOALS.rssAfterSprayMb,
      trackedAddressesAfterSpray: trackedAddresses,
      baselinePeakRssMb: baselineMemory?.peakRssMb ?? null,
    },
    durability: await durabilityOf(main),
    ...(shared ? { shared: { instances: options.instances, startup: startupOf(shared), durability: await durabilityOf(shared) } } : {}),
    scenarios: results,
    notes,
  }
}

/** One load split over several instances: requests, rates and CPU add up; latencies are the worst. */
function combined(results: LoadResult[]): LoadResult {
  const sum = (pick: (r: LoadResult) => number) => results.reduce((total, r) => total + pick(r), 0)
  const statuses: Record<string, number> = {}
  for (const r of results) for (const [status, n] of Object.entries(r.statuses ?? {})) statuses[status] = (statuses[status] ?? 0) + n
  return {
    requests: sum((r) => r.requests),
    durationS: Math.max(...results.map((r) => r.durationS)),
    rps: sum((r) => r.rps),
    p50Ms: Math.max(...results.map((r) => r.p50Ms)),
    p99Ms: Math.max(...results.map((r) => r.p99Ms)),
    maxMs: Math.max(...results.map((r) => r.maxMs)),
    socketErrors: sum((r) => r.socketErrors),
    ...(results.some((r) => r.statuses) ? { statuses } : {}),
    ...(results.some((r) => r.errorStatuses !== undefined) ? { errorStatuses: sum((r) => r.errorStatuses ?? 0) } : {}),
    generatorCpuS: sum((r) => r.generatorCpuS),
  }
}

/** PostgreSQL and Redis for the run, from the test suite's harness; stopped by the cleanups. */
async function startShared(): Promise<{ databaseUrl: string; redisUrl: string }> {
  const [{ startPostgres }, { startRedis }] = await Promise.all([import('../support/postgres'), import('../support/redis')])
  const [cluster, redis] = await Promise.all([startPostgres(), startRedis()])
  onCleanup(() => void cluster.destroy())
  onCleanup(() => void redis.destroy())
  return { databaseUrl: await cluster.createDatabase('bench'), redisUrl: redis.url }
}

async function compareFiles(before: string, after: string): Promise<void> {
  const read = (file: string) => JSON.parse(readFileSync(file, 'utf8')) as BenchResult
  console.log(comparison(read(before), read(after)))
}

async function main(argv: string[]): Promise<number> {
  if (argv[0] === 'compare') {
    if (argv.length !== 3) {
      console.error(USAGE)
      return 2
    }
    await compareFiles(argv[1]!, argv[2]!)
    return 0
  }
  let options: Options | null
  try {
    options = parseOptions(argv)
  } catch (error) {
    console.error(`bench: ${(error as Error).message}\n\n${USAGE}`)
    return 2
  }
  if (!options) return 0
  installExitHandlers()
  try {
    const result = await bench(options)
    const table = markdown(result)
    mkdirSync(dirname(options.out), { recursive: true })
    writeFileSync(options.out, `${JSON.stringify(result, null, 2)}\n`)
    writeFileSync(`${options.out.replace(/\.json$/, '')}.md`, table)
    console.log(table)
    log(`JSON written to ${options.out}`)
    if (options.compare) console.log(comparison(JSON.parse(readFileSync(options.compare, 'utf8')) as BenchResult, result))
    return 0
  } finally {
    runCleanups()
  }
}

try {
  process.exitCode = await main(process.argv.slice(2))
} catch (error) {
  console.error(`bench: failed: ${(error as Error)?.stack ?? error}`)
  runCleanups()
  process.exitCode = 1
}
