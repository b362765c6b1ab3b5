#!/usr/bin/env bun
/**
 * The Pet Store benchmark: `bun run bench` (see test/bench/README.md). It measures as the project's
 * yardstick does (../shared/bench/yardstick.ts): the compiled binary against a bare Bun.serve that replays
 * the same status, header fields and body (baseline.ts), with wrk, adjacent pairs (petstore, then the bare
 * server at once), the median of the pair ratios, and each server's CPU per request from /proc. It does so
 * for the yardstick's five scenarios in both modes, the data file and PostgreSQL + Redis (started for the
 * run), the modes taking turns pair by pair, and prints markdown tables and writes a JSON document.
 * It is a benchmark, not a test: a missed goal is printed, never an exit code.
 */
import {
  closeSync,
  existsSync,
  fstatSync,
  ftruncateSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs'
import os from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { parseArgs } from 'node:util'
import type { Subprocess } from 'bun'
import { binaryStale } from '../support/build'
import type { Captured, Captures } from './baseline'
import { runWrk, wrkAvailable, wrkVersion, type LoadResult } from './lib/load'
import {
  cleanEnv,
  cpuSecondsOf,
  installExitHandlers,
  median,
  memoryOf,
  onCleanup,
  round,
  runCleanups,
  stop,
  StreamTail,
  systemBusySeconds,
  track,
} from './lib/procs'
import {
  comparison,
  markdown,
  MODE_TITLE,
  RESULT_VERSION,
  type BenchResult,
  type Mode,
  type ModeFigures,
  type ModeSummary,
  type Pair,
  type RunFigures,
  type ScenarioResult,
} from './lib/report'
import { countPets, countPostgresPets, seed, seedPostgres } from './lib/seed'
import { banClient, concrete, randomTokenPrefix, SCENARIOS, type LoadSpec, type RequestShape, type Scenario } from './lib/scenarios'
import { postgresBinaries } from '../support/postgres'
import { redisBinary } from '../support/redis'

const ROOT = resolve(import.meta.dir, '..', '..')
const BINARY = join(ROOT, 'dist', 'petstore')
const DEFAULT_OUT = join(import.meta.dir, 'results', 'latest.json')
const LISTENING = /listening on http:\/\/(?:\[[^\]]+\]|[^\s:/]+):(\d+)/
/** Headers Bun.serve writes itself: the baseline must not send them twice. */
const NOT_REPLAYED = new Set(['date', 'content-length', 'transfer-encoding', 'connection', 'keep-alive'])
/** Each run's new clients start this far from the previous run's: no address or token is sent twice. */
const CLIENTS_PER_RUN = 10_000_000

const USAGE = `Usage: bun run bench [options]
       bun run bench compare BEFORE.json AFTER.json

  --rounds N           rounds (default 1); each runs every scenario in both modes, which take turns
                       pair by pair and go first in turn from round to round
  --pairs N            adjacent pairs (petstore, then the bare server) per scenario, mode and round (default 3)
  --duration S         seconds per wrk run (default 4)
  --warmup S           seconds of unmeasured load on each target before a scenario in a round (default 1; 0: none)
  --connections N      concurrent connections (default 64)
  --threads N          wrk threads (default 1, leaving the other core to the server)
  --scenarios A,B      only these scenarios (${SCENARIOS.map((s) => s.name).join(', ')})
  --mode both|embedded|shared  the data file, PostgreSQL + Redis started for the run, or both (the default
                       where Debian's postgresql and redis-server are installed, else embedded)
  --pets N             pets seeded (default 2000; get picks a random id among them)
  --out FILE           JSON result (default test/bench/results/latest.json; the table is written beside it as .md)
  --compare FILE       also print a comparison with an earlier JSON result
  --build              rebuild dist/petstore first (default: build only when missing)
  --keep               keep the temporary directory (data file, access logs, wrk scripts)`

interface Options {
  rounds: number
  pairs: number
  durationS: number
  warmupS: number
  connections: number
  threads: number
  scenarios: Scenario[]
  modes: Mode[]
  pets: number
  out: string
  compare?: string
  build: boolean
  keep: boolean
}

function parseOptions(argv: string[]): Options | null {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    strict: true,
    options: {
      rounds: { type: 'string' },
      pairs: { type: 'string' },
      duration: { type: 'string' },
      warmup: { type: 'string' },
      connections: { type: 'string' },
      threads: { type: 'string' },
      scenarios: { type: 'string' },
      mode: { type: 'string' },
      pets: { type: 'string' },
      out: { type: 'string' },
      compare: { type: 'string' },
      build: { type: 'boolean' },
      keep: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  })
  if (values.help) {
    console.log(USAGE)
    return null
  }
  if (positionals.length) throw new Error(`unexpected argument "${positionals[0]}"`)
  const number = (name: string, text: string | undefined, fallback: number, min: number, max: number) => {
    if (text === undefined) return fallback
    const value = Number(text)
    if (!Number.isInteger(value) || value < min || value > max) throw new Error(`--${name} must be a whole number from ${min} to ${max}`)
    return value
  }
  if (!wrkAvailable()) throw new Error('wrk is not installed (apt-get install -y wrk)')
  let scenarios = SCENARIOS
  if (values.scenarios !== undefined) {
    const names = values.scenarios
      .split(',')
      .map((name) => name.trim())
      .filter(Boolean)
    for (const name of names)
      if (!SCENARIOS.some((s) => s.name === name))
        throw new Error(`unknown scenario "${name}"; known: ${SCENARIOS.map((s) => s.name).join(', ')}`)
    scenarios = SCENARIOS.filter((s) => names.includes(s.name))
  }
  const installed = postgresBinaries() !== null && redisBinary() !== null
  const mode = values.mode ?? (installed ? 'both' : 'embedded')
  if (mode !== 'both' && mode !== 'embedded' && mode !== 'shared') throw new Error('--mode must be both, embedded or shared')
  if (values.mode === undefined && !installed)
    log('PostgreSQL or Redis is not installed (apt-get install -y postgresql redis-server): measuring the data file alone')
  return {
    rounds: number('rounds', values.rounds, 1, 1, 100),
    pairs: number('pairs', values.pairs, 3, 1, 100),
    durationS: number('duration', values.duration, 4, 1, 3600),
    warmupS: number('warmup', values.warmup, 1, 0, 600),
    connections: number('connections', values.connections, 64, 1, 10_000),
    threads: number('threads', values.threads, 1, 1, 64),
    scenarios,
    modes: mode === 'both' ? ['embedded', 'shared'] : [mode],
    pets: number('pets', values.pets, 2_000, 100, 10_000_000),
    out: resolve(values.out ?? DEFAULT_OUT),
    compare: values.compare,
    build: values.build === true,
    keep: values.keep === true,
  }
}

function log(message: string): void {
  console.error(`bench: ${message}`)
}

// ---------------------------------------------------------------------------------------------------
// The binary

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
  const stale = binaryStale()
  if (stale) log('warning: dist/petstore is older than its sources; measuring it anyway (pass --build to rebuild)')
  return {
    path: BINARY,
    sizeMb: round(stat.size / 1024 / 1024, 1),
    built,
    staleVsSources: stale,
    commit: git(['rev-parse', '--short', 'HEAD']) || 'unknown',
    dirtySources: git(['status', '--porcelain', '--', 'src', 'package.json']) !== '',
  }
}

// ---------------------------------------------------------------------------------------------------
// Processes

/** The flags of every server: behind a trusted proxy, so the made-up scenario can name its client. */
// No console: its default address is fixed (a server of the user's may hold it) and nothing here measures it.
const SERVE_FLAGS = ['serve', '--host', '127.0.0.1', '--port', '0', '--trust-proxy', 'loopback', '--console-address', 'off']

/**
 * The server's access log: emptied before a measured run, counted by status after it. The server writes
 * its lines every 50 ms, so both wait for the file to stop growing: lines of requests made before the run
 * (the captures, a banned client's setup) land before it is emptied, not in the run's count.
 */
class AccessLogWindow {
  constructor(
    readonly path: string,
    private readonly fd: number,
  ) {}

  /** Waits for the lines already buffered to land, then empties the log. */
  async open(): Promise<void> {
    await this.settled()
    ftruncateSync(this.fd, 0)
  }

  /** Waits for the buffered lines to land, counts statuses, empties the log. */
  async collect(): Promise<Record<string, number>> {
    await this.settled()
    const text = readFileSync(this.path, 'latin1')
    ftruncateSync(this.fd, 0)
    const counts: Record<string, number> = {}
    const pattern = /"status":(\d{3})/g
    for (let match = pattern.exec(text); match; match = pattern.exec(text)) counts[match[1]!] = (counts[match[1]!] ?? 0) + 1
    return counts
  }

  private async settled(): Promise<void> {
    let size = -1
    for (let i = 0; i < 40; i++) {
      await Bun.sleep(100)
      const now = fstatSync(this.fd).size
      if (now === size) break
      size = now
    }
  }
}

/** One server under test, with what it was seeded with and what it answered. */
interface Server {
  mode: Mode
  proc: Subprocess<'ignore', number, 'pipe'>
  port: number
  stderr: StreamTail
  accessLog: AccessLogWindow
  countRows: () => Promise<number>
  specs: Map<string, LoadSpec>
  created201: number
  idleRssMb: number | null
}

/** Seeds the mode's storage (PostgreSQL and Redis started for the run) and starts one server on it. */
async function startServer(mode: Mode, options: Options, dir: string): Promise<Server> {
  let storageArgs: string[]
  let countRows: () => Promise<number>
  let key: string
  if (mode === 'shared') {
    const shared = await startShared()
    storageArgs = ['--database-url', shared.databaseUrl, '--redis-url', shared.redisUrl]
    log(`seeding ${options.pets.toLocaleString('en')} pets into PostgreSQL; rate limits in Redis`)
    key = await seedPostgres([BINARY], shared.databaseUrl, options.pets)
    countRows = () => countPostgresPets(shared.databaseUrl)
  } else {
    const dataFile = join(dir, 'petstore.db')
    storageArgs = ['--data', dataFile]
    log(`seeding ${options.pets.toLocaleString('en')} pets into ${dataFile}`)
    key = seed([BINARY], dataFile, options.pets)
    countRows = async () => countPets(dataFile)
  }
  const logPath = join(dir, `access-${mode}.log`)
  const logFd = openSync(logPath, 'a')
  onCleanup(() => closeSync(logFd))
  const proc = track(
    // In the run's folder: whatever a server writes by default beside where it starts goes with the run.
    Bun.spawn([BINARY, ...SERVE_FLAGS, ...storageArgs], { cwd: dir, env: cleanEnv(), stdin: 'ignore', stdout: logFd, stderr: 'pipe' }),
  )
  const stderr = new StreamTail(proc.stderr)
  const port = Number((await stderr.waitFor(LISTENING, 15_000, proc.exited))[1])
  log(`petstore on the ${MODE_TITLE[mode]} (pid ${proc.pid}) on port ${port}, access log → ${logPath}`)
  const ctx = { key, pets: options.pets, tokenPrefix: randomTokenPrefix() }
  const specs = new Map(options.scenarios.map((s) => [s.name, s.load(ctx)]))
  return { mode, proc, port, stderr, accessLog: new AccessLogWindow(logPath, logFd), countRows, specs, created201: 0, idleRssMb: null }
}

async function startBaseline(capturesFile: string): Promise<{ proc: Subprocess; port: number }> {
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
  const port = Number((await stdout.waitFor(/baseline listening on http:\/\/[^\s:/]+:(\d+)/, 15_000, proc.exited))[1])
  return { proc, port }
}

/** PostgreSQL and Redis for the run, from the test suite's harness; stopped by the cleanups. */
async function startShared(): Promise<{ databaseUrl: string; redisUrl: string }> {
  const [{ startPostgres }, { startRedis }] = await Promise.all([import('../support/postgres'), import('../support/redis')])
  const [cluster, redis] = await Promise.all([startPostgres(), startRedis()])
  onCleanup(() => void cluster.destroy())
  onCleanup(() => void redis.destroy())
  return { databaseUrl: await cluster.createDatabase('bench'), redisUrl: redis.url }
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

function unexpectedOf(statuses: Record<string, number>, expected: number[]): number {
  let count = 0
  for (const [status, n] of Object.entries(statuses)) if (!expected.includes(Number(status))) count += n
  return count
}

function figures(load: LoadResult, unexpected: number, targetCpuS: number, busyS: number, statuses?: Record<string, number>): RunFigures {
  return {
    requests: load.requests,
    rps: round(load.rps, 0),
    p99Ms: round(load.p99Ms, 3),
    socketErrors: load.socketErrors,
    unexpected,
    ...(statuses ? { statuses } : {}),
    cpuUsPerRequest: load.requests > 0 ? round((targetCpuS / load.requests) * 1e6, 1) : NaN,
    otherCpuPct: round(Math.max(0, (busyS - targetCpuS - load.generatorCpuS) / load.durationS) * 100, 0),
  }
}

function modeFigures(scenario: Scenario, pairs: Pair[], captured: Captured, rssMbAfter: number[]): ModeFigures {
  const ratio = round(median(pairs.map((p) => p.ratio)), 2)
  return {
    pairs,
    ratio,
    cpuRatio: round(median(pairs.map((p) => p.cpuRatio)), 2),
    rps: round(median(pairs.map((p) => p.petstore.rps)), 0),
    bareRps: round(median(pairs.map((p) => p.bare.rps)), 0),
    cpuUsPerRequest: round(median(pairs.map((p) => p.petstore.cpuUsPerRequest)), 1),
    bareCpuUsPerRequest: round(median(pairs.map((p) => p.bare.cpuUsPerRequest)), 1),
    p99Ms: round(median(pairs.map((p) => p.petstore.p99Ms)), 3),
    unexpected: pairs.reduce((sum, p) => sum + p.petstore.unexpected, 0),
    bareUnexpected: pairs.reduce((sum, p) => sum + p.bare.unexpected, 0),
    met: ratio >= scenario.goal,
    captured: { status: captured.status, code: errorCode(captured.body), bytes: Buffer.byteLength(captured.body) },
    ...(scenario.flood ? { rssMbAfter } : {}),
  }
}

async function bench(options: Options): Promise<BenchResult> {
  const startedAt = new Date().toISOString()
  const loadAvgStart = os.loadavg().map((v) => round(v, 2))
  log(`load average at start: ${loadAvgStart.join(' ')}`)
  const binary = ensureBinary(options.build)
  const dir = mkdtempSync(join(os.tmpdir(), 'petstore-bench-'))
  if (options.keep) log(`temporary directory kept: ${dir}`)
  else onCleanup(() => rmSync(dir, { recursive: true, force: true }))
  const notes: string[] = []

  const servers: Server[] = []
  for (const mode of options.modes) servers.push(await startServer(mode, options, dir))
  await Bun.sleep(1_000)
  for (const server of servers) server.idleRssMb = memoryOf(server.proc.pid)?.rssMb ?? null

  // One real answer per scenario and mode: what the bare server replays beside it.
  const captures: Captures = {}
  for (const scenario of options.scenarios)
    for (const server of servers) {
      const origin = `http://127.0.0.1:${server.port}`
      if (scenario.banned) log(`${MODE_TITLE[server.mode]}: banned 127.0.0.1 after ${await banClient(origin)} requests with a bad token`)
      let answer = await capture(server.port, concrete(server.specs.get(scenario.name)!, Math.min(42, options.pets), 0))
      // A shared limiter that answered late (a loaded host) says 503 unavailable with Retry-After: a client
      // waits it out and asks again, and so does the bench, a few times, before it takes the answer as wrong.
      for (let tries = 0; tries < 5 && answer.status === 503 && errorCode(answer.body) === 'unavailable'; tries++) {
        await Bun.sleep(Number(answer.headers.find(([name]) => name.toLowerCase() === 'retry-after')?.[1] ?? 1) * 1000)
        answer = await capture(server.port, concrete(server.specs.get(scenario.name)!, Math.min(42, options.pets), 0))
      }
      if (answer.status === 201) server.created201++
      const code = errorCode(answer.body)
      if (!scenario.expected.includes(answer.status) || (scenario.code && code !== scenario.code))
        throw new Error(
          `${scenario.name} on the ${MODE_TITLE[server.mode]}: the answer was ${answer.status} (${code ?? 'no code'}), expected ${scenario.expected.join('/')}${scenario.code ? ` ${scenario.code}` : ''}`,
        )
      captures[`${server.mode}/${scenario.name}`] = answer
    }
  const capturesFile = join(dir, 'captures.json')
  writeFileSync(capturesFile, JSON.stringify(captures))
  const bare = await startBaseline(capturesFile)
  log(`bare Bun.serve (pid ${bare.proc.pid}) on port ${bare.port}`)

  let runs = 0
  const load = (port: number, durationS: number, spec: LoadSpec) =>
    runWrk({
      port,
      connections: options.connections,
      threads: options.threads,
      durationS,
      spec,
      workDir: dir,
      offset: ++runs * CLIENTS_PER_RUN,
    })
  const measurePetstore = async (server: Server, scenario: Scenario, durationS: number): Promise<RunFigures> => {
    await server.accessLog.open()
    const cpuBefore = cpuSecondsOf(server.proc.pid)
    const busyBefore = systemBusySeconds()
    const result = await load(server.port, durationS, server.specs.get(scenario.name)!)
    const cpu = cpuSecondsOf(server.proc.pid) - cpuBefore
    const busy = systemBusySeconds() - busyBefore
    const statuses = await server.accessLog.collect()
    server.created201 += statuses['201'] ?? 0
    return figures(result, unexpectedOf(statuses, scenario.expected) + result.socketErrors, cpu, busy, statuses)
  }
  const measureBare = async (server: Server, scenario: Scenario, durationS: number): Promise<RunFigures> => {
    const select = await fetch(`http://127.0.0.1:${bare.port}/${server.mode}/${scenario.name}`, { method: 'PUT' })
    await select.arrayBuffer()
    if (select.status !== 200) throw new Error(`the bare server has no answer for ${server.mode}/${scenario.name}`)
    const cpuBefore = cpuSecondsOf(bare.proc.pid)
    const busyBefore = systemBusySeconds()
    const result = await load(bare.port, durationS, server.specs.get(scenario.name)!)
    const cpu = cpuSecondsOf(bare.proc.pid) - cpuBefore
    const busy = systemBusySeconds() - busyBefore
    // wrk counts only statuses of 400 and more; each scenario expects one class.
    const refusal = scenario.expected.every((s) => s >= 400)
    const unexpected = (refusal ? result.requests - result.errorStatuses : result.errorStatuses) + result.socketErrors
    return figures(result, unexpected, cpu, busy)
  }

  const pairsOf = new Map(servers.map((s) => [s.mode, new Map(options.scenarios.map((sc) => [sc.name, [] as Pair[]]))]))
  const rssOf = new Map(servers.map((s) => [s.mode, new Map(options.scenarios.map((sc) => [sc.name, [] as number[]]))]))
  for (let round_ = 0; round_ < options.rounds; round_++) {
    for (const scenario of options.scenarios) {
      log(
        `round ${round_ + 1}/${options.rounds}, ${scenario.name}: ${options.pairs} × (${servers.map((s) => `${MODE_TITLE[s.mode]}, bare`).join('; ')}), ${options.durationS} s each` +
          (options.warmupS ? `, after ${options.warmupS} s of warm-up each` : ''),
      )
      if (scenario.banned) for (const server of servers) await banClient(`http://127.0.0.1:${server.port}`)
      if (options.warmupS > 0)
        for (const server of servers) {
          await measurePetstore(server, scenario, options.warmupS)
          await measureBare(server, scenario, options.warmupS)
        }
      for (let p = 0; p < options.pairs; p++) {
        // The modes take turns: neither always follows the other.
        const order = (round_ + p) % 2 === 0 ? servers : [...servers].reverse()
        for (const server of order) {
          const petstore = await measurePetstore(server, scenario, options.durationS)
          const bareRun = await measureBare(server, scenario, options.durationS)
          const pair: Pair = {
            round: round_ + 1,
            petstore,
            bare: bareRun,
            ratio: round(petstore.rps / bareRun.rps, 3),
            cpuRatio: round(bareRun.cpuUsPerRequest / petstore.cpuUsPerRequest, 3),
          }
          pairsOf.get(server.mode)!.get(scenario.name)!.push(pair)
          log(
            `  ${MODE_TITLE[server.mode]}: ${Math.round(petstore.rps).toLocaleString('en')} req/s ${petstore.cpuUsPerRequest} µs/req, ` +
              `bare ${Math.round(bareRun.rps).toLocaleString('en')} req/s ${bareRun.cpuUsPerRequest} µs/req: ratio ${pair.ratio.toFixed(2)}`,
          )
        }
      }
      if (scenario.flood)
        for (const server of servers)
          rssOf
            .get(server.mode)!
            .get(scenario.name)!
            .push(memoryOf(server.proc.pid)?.rssMb ?? NaN)
    }
  }

  const scenarios: ScenarioResult[] = options.scenarios.map((scenario) => {
    const modes: ScenarioResult['modes'] = {}
    for (const server of servers) {
      const pairs = pairsOf.get(server.mode)!.get(scenario.name)!
      modes[server.mode] = modeFigures(
        scenario,
        pairs,
        captures[`${server.mode}/${scenario.name}`]!,
        rssOf.get(server.mode)!.get(scenario.name)!,
      )
    }
    const embedded = modes.embedded?.pairs
    const shared = modes.shared?.pairs
    // Pair by pair: the two modes' runs of the same turn were adjacent.
    const sharedOverEmbedded =
      scenario.acrossModes && embedded && shared
        ? round(median(shared.map((p, i) => p.petstore.cpuUsPerRequest / embedded[i]!.petstore.cpuUsPerRequest)), 2)
        : undefined
    return {
      name: scenario.name,
      title: scenario.title,
      describe: scenario.describe,
      goal: scenario.goal,
      modes,
      ...(sharedOverEmbedded === undefined ? {} : { sharedOverEmbedded }),
    }
  })

  // Durability: kill without warning; every 201 must already be a row.
  const summaries: BenchResult['modes'] = {}
  for (const server of servers) {
    if (server.proc.exitCode !== null) notes.push(`petstore on the ${MODE_TITLE[server.mode]} exited early (code ${server.proc.exitCode}).`)
    const peakRssMb = memoryOf(server.proc.pid)?.peakRssMb ?? null
    await stop(server.proc, 'SIGKILL')
    const rowsAdded = (await server.countRows()) - options.pets
    const summary: ModeSummary = {
      idleRssMb: server.idleRssMb,
      peakRssMb,
      durability: { created201: server.created201, rowsAdded, ok: rowsAdded >= server.created201 },
    }
    summaries[server.mode] = summary
    const warnings = server.stderr.text
      .split('\n')
      .filter((line) => /internal error|could not/i.test(line))
      .slice(0, 5)
    for (const line of warnings) notes.push(`server stderr (${MODE_TITLE[server.mode]}): ${line.slice(0, 300)}`)
  }
  await stop(bare.proc, 'SIGTERM')
  if (binary.staleVsSources) notes.push('dist/petstore was older than its sources when measured.')
  if (options.modes.includes('shared'))
    notes.push(`PostgreSQL and Redis ran on this machine, sharing its ${os.cpus().length} cores with the servers and wrk.`)
  const loadAvgEnd = os.loadavg().map((v) => round(v, 2))
  log(`load average at end: ${loadAvgEnd.join(' ')}`)
  return {
    version: RESULT_VERSION,
    startedAt,
    finishedAt: new Date().toISOString(),
    machine: {
      cpus: os.cpus().length,
      cpuModel: os.cpus()[0]?.model.trim() ?? 'unknown',
      kernel: os.release(),
      bun: Bun.version,
      loadAvgStart,
      loadAvgEnd,
    },
    config: {
      wrk: wrkVersion(),
      connections: options.connections,
      threads: options.threads,
      durationS: options.durationS,
      warmupS: options.warmupS,
      pairs: options.pairs,
      rounds: options.rounds,
      pets: options.pets,
      modes: options.modes,
      serverArgs: SERVE_FLAGS,
    },
    binary,
    modes: summaries,
    scenarios,
    notes,
  }
}

async function main(argv: string[]): Promise<number> {
  if (argv[0] === 'compare') {
    if (argv.length !== 3) {
      console.error(USAGE)
      return 2
    }
    const read = (file: string) => JSON.parse(readFileSync(file, 'utf8')) as BenchResult
    console.log(comparison(read(argv[1]!), read(argv[2]!)))
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
