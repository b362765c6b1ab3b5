#!/usr/bin/env bun
/**
 * CPU profile of the server under one benchmark scenario:
 *
 *   bun test/bench/profile.ts --scenario list --duration 10
 *   bun test/bench/profile.ts --scenario get --backend postgres
 *   bun test/bench/profile.ts --analyze FILE.cpuprofile
 *
 * Runs `bun --cpu-prof src/index.ts serve` (the sources, not the binary, so frames keep their names and
 * files) on a freshly seeded data file, or on a throwaway PostgreSQL + Redis (`--backend postgres`, the
 * test suite's harness), drives the scenario with wrk, stops the
 * server with SIGTERM so the profile is written, and prints the hottest functions: self time by origin
 * (our code, Elysia, other packages, the runtime), then by function, then inclusive time of our code
 * and Elysia's.
 */
import { mkdtempSync, openSync, closeSync, readdirSync, readFileSync } from 'node:fs'
import os from 'node:os'
import { join, relative, resolve } from 'node:path'
import { parseArgs } from 'node:util'
import { runWrk, wrkAvailable } from './lib/load'
import { cleanEnv, installExitHandlers, runCleanups, stop, StreamTail, track } from './lib/procs'
import { banClient, randomTokenPrefix, SCENARIOS } from './lib/scenarios'
import { seed, seedPostgres } from './lib/seed'

const ROOT = resolve(import.meta.dir, '..', '..')
const LISTENING = /listening on http:\/\/[^\s:/]+:(\d+)/

interface CallFrame {
  functionName: string
  url: string
  lineNumber: number
  columnNumber: number
}
interface ProfileNode {
  id: number
  callFrame: CallFrame
  children?: number[]
}
interface CpuProfile {
  nodes: ProfileNode[]
  samples: number[]
  timeDeltas: number[]
  startTime: number
  endTime: number
}

export interface HotSpot {
  name: string
  where: string
  origin: string
  ms: number
  pct: number
}

export interface ProfileSummary {
  totalMs: number
  idleMs: number
  byOrigin: { origin: string; ms: number; pct: number }[]
  self: HotSpot[]
  inclusive: HotSpot[]
}

/**
 * Where a frame's code comes from. Frames without a file are the runtime's natives (line -1), its JS
 * builtins (line 0), or code generated at run time with `new Function` (line > 0): Elysia compiles its
 * request handlers that way (the `map` and `handle` frames), and TypeBox its validators.
 */
function originOf(frame: CallFrame): string {
  const { url, functionName, lineNumber } = frame
  if (!url) {
    if (functionName === '(idle)') return 'idle'
    if (functionName === '(garbage collector)') return 'gc'
    if (lineNumber > 0) return 'generated (Elysia handlers, validators)'
    if (lineNumber === 0) return 'runtime (js builtins)'
    return 'runtime (native)'
  }
  if (url.includes('/node_modules/')) {
    const match = /\/node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url)
    return match![1] === 'elysia' ? 'elysia' : `package ${match![1]}`
  }
  if (url.startsWith(ROOT) || url.startsWith(`file://${ROOT}`)) return url.includes('/src/') ? 'petstore' : 'petstore (other)'
  if (url.startsWith('bun:') || url.startsWith('node:') || url.startsWith('internal:')) return 'runtime (js builtins)'
  return `other ${url}`
}

function whereOf(frame: CallFrame): string {
  if (!frame.url) return frame.lineNumber > 0 ? `generated:${frame.lineNumber + 1}` : ''
  const path = frame.url.replace(/^file:\/\//, '')
  const shown = path.startsWith(ROOT) ? relative(ROOT, path) : path.replace(/^.*\/node_modules\//, '')
  return `${shown}:${frame.lineNumber + 1}`
}

export function analyze(profile: CpuProfile, top = 20): ProfileSummary {
  const byId = new Map<number, ProfileNode>()
  const parent = new Map<number, number>()
  for (const node of profile.nodes) {
    byId.set(node.id, node)
    for (const child of node.children ?? []) parent.set(child, node.id)
  }
  const keyOf = (frame: CallFrame) => `${frame.functionName || '(anonymous)'}\u0000${whereOf(frame)}`
  const self = new Map<string, { frame: CallFrame; ms: number }>()
  const inclusive = new Map<string, { frame: CallFrame; ms: number }>()
  const origins = new Map<string, number>()
  let totalMs = 0
  let idleMs = 0
  for (let i = 0; i < profile.samples.length; i++) {
    const ms = (profile.timeDeltas[i] ?? 0) / 1000
    const node = byId.get(profile.samples[i]!)
    if (!node) continue
    const origin = originOf(node.callFrame)
    if (origin === 'idle') {
      idleMs += ms
      continue
    }
    totalMs += ms
    origins.set(origin, (origins.get(origin) ?? 0) + ms)
    const key = keyOf(node.callFrame)
    const entry = self.get(key) ?? { frame: node.callFrame, ms: 0 }
    entry.ms += ms
    self.set(key, entry)
    const seen = new Set<string>()
    for (let id: number | undefined = node.id; id !== undefined; id = parent.get(id)) {
      const frame = byId.get(id)!.callFrame
      const k = keyOf(frame)
      if (seen.has(k)) continue
      seen.add(k)
      const incl = inclusive.get(k) ?? { frame, ms: 0 }
      incl.ms += ms
      inclusive.set(k, incl)
    }
  }
  const spot = ({ frame, ms }: { frame: CallFrame; ms: number }): HotSpot => ({
    name: frame.functionName || '(anonymous)',
    where: whereOf(frame),
    origin: originOf(frame),
    ms: Math.round(ms),
    pct: Math.round((ms / totalMs) * 1000) / 10,
  })
  return {
    totalMs: Math.round(totalMs),
    idleMs: Math.round(idleMs),
    byOrigin: [...origins]
      .sort((a, b) => b[1] - a[1])
      .map(([origin, ms]) => ({ origin, ms: Math.round(ms), pct: Math.round((ms / totalMs) * 1000) / 10 })),
    self: [...self.values()]
      .sort((a, b) => b.ms - a.ms)
      .slice(0, top)
      .map(spot),
    inclusive: [...inclusive.values()]
      .filter(({ frame }) => ['petstore', 'elysia', 'generated (Elysia handlers, validators)'].includes(originOf(frame)))
      .sort((a, b) => b.ms - a.ms)
      .slice(0, top)
      .map(spot),
  }
}

export function summaryMarkdown(summary: ProfileSummary): string {
  const rows = (spots: HotSpot[]) => spots.map((s) => `| ${s.pct} % | ${s.ms} | \`${s.name}\` | ${s.where} | ${s.origin} |`)
  return [
    `Busy ${summary.totalMs} ms sampled (idle ${summary.idleMs} ms).`,
    '',
    '| origin | self ms | % of busy |',
    '|---|--:|--:|',
    ...summary.byOrigin.map((o) => `| ${o.origin} | ${o.ms} | ${o.pct} % |`),
    '',
    'Self time:',
    '',
    '| % | ms | function | where | origin |',
    '|--:|--:|---|---|---|',
    ...rows(summary.self),
    '',
    'Inclusive time, our code and Elysia:',
    '',
    '| % | ms | function | where | origin |',
    '|--:|--:|---|---|---|',
    ...rows(summary.inclusive),
    '',
  ].join('\n')
}

async function profileScenario(values: Record<string, string | boolean | undefined>): Promise<void> {
  const scenario = SCENARIOS.find((s) => s.name === (values.scenario ?? 'list'))
  if (!scenario) throw new Error(`unknown scenario; known: ${SCENARIOS.map((s) => s.name).join(', ')}`)
  const durationS = Number(values.duration ?? 10)
  const connections = Number(values.connections ?? 64)
  const pets = Number(values.pets ?? 2_000)
  const interval = Number(values.interval ?? 250)
  // Absolute: the server starts in it, and is given paths inside it.
  const dir = resolve((values.dir as string | undefined) ?? mkdtempSync(join(os.tmpdir(), 'petstore-profile-')))
  const bun = process.execPath
  const entry = join(ROOT, 'src', 'index.ts')
  const backend = values.backend ?? 'sqlite'
  if (backend !== 'sqlite' && backend !== 'postgres') throw new Error('--backend must be sqlite or postgres')
  let storageArgs: string[]
  let key: string
  if (backend === 'postgres') {
    const { databaseUrl, redisUrl } = await startShared()
    console.error(`profile: seeding ${pets} pets into PostgreSQL; rate limits in Redis`)
    key = await seedPostgres([bun, entry], databaseUrl, pets)
    storageArgs = ['--database-url', databaseUrl, '--redis-url', redisUrl]
  } else {
    const dataFile = join(dir, 'petstore.db')
    console.error(`profile: seeding ${pets} pets in ${dir}`)
    key = seed([bun, entry], dataFile, pets)
    storageArgs = ['--data', dataFile]
  }

  const logFd = openSync(join(dir, 'access.log'), 'a')
  const args = [
    bun,
    '--cpu-prof',
    `--cpu-prof-dir=${dir}`,
    `--cpu-prof-interval=${interval}`,
    ...(values.md ? ['--cpu-prof-md'] : []),
    entry,
    'serve',
    '--host',
    '127.0.0.1',
    '--port',
    '0',
    ...storageArgs,
    '--trust-proxy',
    'loopback',
    '--console-address',
    'off',
  ]
  const server = track(Bun.spawn(args, { cwd: dir, env: cleanEnv(), stdin: 'ignore', stdout: logFd, stderr: 'pipe' }))
  const stderr = new StreamTail(server.stderr)
  const port = Number((await stderr.waitFor(LISTENING, 30_000, server.exited))[1])
  const origin = `http://127.0.0.1:${port}`
  if (scenario.banned) await banClient(origin)
  if (!wrkAvailable()) throw new Error('wrk is not installed (apt-get install -y wrk)')
  console.error(`profile: ${scenario.name} for ${durationS} s with wrk, ${connections} connections, server pid ${server.pid}`)
  const result = await runWrk({
    port,
    connections,
    threads: 1,
    durationS,
    spec: scenario.load({ key, pets, tokenPrefix: randomTokenPrefix() }),
    workDir: dir,
    offset: 0,
  })
  console.error(
    `profile: ${Math.round(result.rps).toLocaleString('en')} req/s under the profiler, p50 ${result.p50Ms.toFixed(2)} ms, p99 ${result.p99Ms.toFixed(2)} ms`,
  )
  await stop(server, 'SIGTERM', 20_000)
  closeSync(logFd)
  const file = readdirSync(dir).find((name) => name.endsWith('.cpuprofile'))
  if (!file) throw new Error(`no .cpuprofile was written in ${dir}:\n${stderr.text.slice(-2000)}`)
  console.error(`profile: ${join(dir, file)}`)
  const summary = analyze(JSON.parse(readFileSync(join(dir, file), 'utf8')) as CpuProfile, Number(values.top ?? 25))
  console.log(
    `## ${scenario.title} on ${backend === 'postgres' ? 'PostgreSQL + Redis' : 'the data file'} under load (${Math.round(result.rps).toLocaleString('en')} req/s with the profiler on)\n`,
  )
  console.log(summaryMarkdown(summary))
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    strict: true,
    options: {
      scenario: { type: 'string' },
      backend: { type: 'string' },
      duration: { type: 'string' },
      connections: { type: 'string' },
      pets: { type: 'string' },
      interval: { type: 'string' },
      dir: { type: 'string' },
      top: { type: 'string' },
      md: { type: 'boolean' },
      analyze: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  })
  if (values.help) {
    console.log(`Usage: bun test/bench/profile.ts [--scenario NAME] [--backend sqlite|postgres] [--duration S]
                                [--connections N] [--pets N] [--interval MICROSECONDS] [--dir DIR] [--top N] [--md]
       bun test/bench/profile.ts --analyze FILE.cpuprofile [--top N]

Scenarios: ${SCENARIOS.map((s) => s.name).join(', ')} (default list; 10 s, 64 connections, 250 µs sampling).
--backend postgres starts a throwaway PostgreSQL and Redis (Debian's postgresql and redis-server) for the run.`)
    return
  }
  if (values.analyze) {
    const summary = analyze(JSON.parse(readFileSync(values.analyze, 'utf8')) as CpuProfile, Number(values.top ?? 25))
    console.log(summaryMarkdown(summary))
    return
  }
  installExitHandlers()
  try {
    await profileScenario(values)
  } finally {
    runCleanups()
    await Promise.all(engineStops.splice(0).map((stopEngine) => stopEngine()))
  }
}

/** Stops of the PostgreSQL and Redis started for a run, awaited before the process ends. */
const engineStops: (() => Promise<void>)[] = []

/** A throwaway PostgreSQL and Redis, from the test suite's harness (as `bun run bench` starts them). */
async function startShared(): Promise<{ databaseUrl: string; redisUrl: string }> {
  const [{ startPostgres }, { startRedis }] = await Promise.all([import('../support/postgres'), import('../support/redis')])
  const [cluster, redis] = await Promise.all([startPostgres(), startRedis()])
  engineStops.push(
    () => cluster.destroy(),
    () => redis.destroy(),
  )
  return { databaseUrl: await cluster.createDatabase('profile'), redisUrl: redis.url }
}

if (import.meta.main) await main()
