/**
 * The benchmark's result: one JSON document (so two runs can be compared) and the markdown tables made
 * from it. Goals are shown next to the figures; a missed goal is reported, never an error.
 */
import type { GoalKind } from './scenarios'

/** 2: the baseline builds its headers per request; server CPU per request; both storages in one run. */
export const RESULT_VERSION = 2

export interface RunFigures {
  requests: number
  rps: number
  p50Ms: number
  p99Ms: number
  maxMs: number
  socketErrors: number
  /** Responses with a status outside the scenario's expected ones, plus socket errors. */
  unexpected: number
  /** Exact statuses: from the server's access log for petstore, from autocannon when it is the tool. */
  statuses?: Record<string, number>
  /** CPU used by the target during the run, in % of one core. */
  targetCpuPct: number
  /** The target's CPU time (user + system, all its threads) divided by the requests answered, µs. */
  cpuUsPerRequest: number
  /** CPU used by the load generator during the run, in % of one core. */
  generatorCpuPct: number
  /** CPU used by everything else on the machine during the run (noise), in % of one core. */
  otherCpuPct: number
}

export interface TargetSummary {
  /** Medians over the runs. */
  rps: number
  p50Ms: number
  p99Ms: number
  targetCpuPct: number
  cpuUsPerRequest: number
  generatorCpuPct: number
  otherCpuPct: number
  /** Sums over the runs. */
  requests: number
  unexpected: number
  runs: RunFigures[]
}

export interface ScenarioResult {
  name: string
  title: string
  describe: string
  expected: number[]
  /** The server's answer captured for the baseline: status and Error code if any. */
  captured: { method: string; path: string; status: number; code?: string; bytes: number }[]
  baseline: TargetSummary
  petstore: TargetSummary
  /** petstore requests/s ÷ baseline requests/s (medians); the baseline builds its headers per request. */
  ratio: number
  /** With --strict: the baseline replaying prebuilt Headers, and petstore's ratio to it. */
  prebuiltBaseline?: TargetSummary
  prebuiltRatio?: number
  /** With both storages: petstore on PostgreSQL + Redis (`petstore` is then the embedded one). */
  shared?: TargetSummary
  /** Its requests/s ÷ the baseline's. */
  sharedRatio?: number
  /** Its server CPU per request ÷ the embedded one's: the median over the interleaved pairs of runs. */
  cpuRatio?: number
  goal: { kind: GoalKind; ratio: number; met: boolean; p99Ms?: number; p99Met?: boolean }
  loadAvg1m: number
  /** The server's peak RSS (VmHWM) once this scenario was done, MiB. */
  peakRssMbAfter: number | null
}

export interface BenchResult {
  version: number
  startedAt: string
  finishedAt: string
  quick: boolean
  machine: { cpus: number; cpuModel: string; memoryMb: number; kernel: string; bun: string; loadAvgStart: number[]; loadAvgEnd: number[] }
  config: {
    tool: string
    toolVersion: string
    connections: number
    threads: number
    durationS: number
    runs: number
    warmupS: number
    pets: number
    startSamples: number
    serverArgs: string[]
    /** The storage measured: the data file, or PostgreSQL + Redis with this many instances. */
    backend?: 'sqlite' | 'postgres' | 'both'
    instances?: number
    baseline?: string
    accessLog: string
  }
  binary: {
    path: string
    sizeBytes: number
    sizeMb: number
    built: boolean
    staleVsSources: boolean
    commit: string
    dirtySources: boolean
  }
  startup: { samplesMs: number[]; medianMs: number; goalMs: number; met: boolean }
  memory: {
    idleRssMb: number | null
    peakRssMbAfterScenarios: number | null
    peakRssMbAfterSpray: number | null
    rssMbEnd: number | null
    goalMb: number
    goalAfterSprayMb: number
    metAfterScenarios: boolean | null
    metAfterSpray: boolean | null
    trackedAddressesAfterSpray: number | null
    baselinePeakRssMb: number | null
  }
  durability: { created201: number; rowsAdded: number; ok: boolean; checkedAfter: string }
  /** With both storages: the PostgreSQL + Redis side's starts and durability (the rest is the embedded side's). */
  shared?: {
    instances: number
    startup: BenchResult['startup']
    durability: BenchResult['durability']
  }
  scenarios: ScenarioResult[]
  notes: string[]
}

const f = (value: number | null | undefined, digits = 2) =>
  value === null || value === undefined || !Number.isFinite(value) ? 'n/a' : value.toFixed(digits)
const thousands = (value: number) => (Number.isFinite(value) ? Math.round(value).toLocaleString('en') : 'n/a')
const mark = (met: boolean | null | undefined) => (met === null || met === undefined ? '' : met ? ' ✅' : ' ❌')

function storageOf(c: BenchResult['config']): string {
  if (c.backend === 'postgres') return `PostgreSQL + Redis, ${c.instances} instance(s)`
  if (c.backend === 'both') return `the SQLite data file and PostgreSQL + Redis (${c.instances} instance(s)), interleaved run for run`
  return 'the SQLite data file'
}

export function markdown(result: BenchResult): string {
  const c = result.config
  const lines: string[] = []
  lines.push(
    `Storage: ${storageOf(c)}. ` +
      `Load: ${c.toolVersion}, ${c.connections} connections, ${c.threads} thread(s), ${c.runs} run(s) × ${c.durationS} s per target, ` +
      `baseline and petstore interleaved, medians shown; ${c.pets.toLocaleString('en')} pets; access log on (${c.accessLog}). ` +
      `The baseline builds its header fields per request${result.scenarios.some((s) => s.prebuiltBaseline) ? '; "ratio, prebuilt" is against one replaying Headers built once' : ''}. ` +
      `Machine: ${result.machine.cpus} × ${result.machine.cpuModel}, load average ${result.machine.loadAvgStart.map((v) => v.toFixed(2)).join(' ')} at start, ` +
      `${result.machine.loadAvgEnd.map((v) => v.toFixed(2)).join(' ')} at end. Source tree at ${result.binary.commit}${result.binary.dirtySources ? ' (+ uncommitted src changes)' : ''}.`,
    '',
    `p50/p99 are petstore's${c.backend === 'both' ? ' on the data file' : ''}; "unexpected" counts answers outside the expected statuses plus socket errors; ` +
      '"CPU µs/req" is the server\'s CPU time per answered request (all its threads); ' +
      '"other CPU" is what the rest of the machine used during the runs (noise), in % of one core.',
    '',
  )
  const strict = result.scenarios.some((s) => s.prebuiltBaseline)
  lines.push(
    `| scenario | baseline req/s | petstore req/s | ratio | goal |${strict ? ' ratio, prebuilt |' : ''} p50 ms | p99 ms | CPU µs/req | unexpected | other CPU % |`,
    `|---|--:|--:|--:|---|${strict ? '--:|' : ''}--:|--:|--:|--:|--:|`,
  )
  for (const s of result.scenarios) {
    const p99 = `${f(s.petstore.p99Ms)}${s.goal.p99Ms === undefined ? '' : mark(s.goal.p99Met)}`
    lines.push(
      `| ${s.title} | ${thousands(s.baseline.rps)} | ${thousands(s.petstore.rps)} | ${f(s.ratio)} | ≥ ${s.goal.ratio}${mark(s.goal.met)} | ` +
        `${strict ? `${f(s.prebuiltRatio)} | ` : ''}${f(s.petstore.p50Ms)} | ${p99} | ${f(s.petstore.cpuUsPerRequest, 1)} | ` +
        `${s.petstore.unexpected}${s.baseline.unexpected ? ` (baseline ${s.baseline.unexpected})` : ''} | ` +
        `${Math.max(s.baseline.otherCpuPct, s.petstore.otherCpuPct)} |`,
    )
  }
  if (result.scenarios.some((s) => s.shared)) {
    lines.push(
      '',
      `The data file against PostgreSQL + Redis (${c.instances} instance(s)), run for run, interleaved: server CPU per request ` +
        "(the instances' own; PostgreSQL's and Redis's is in \"other CPU %\", with whatever else the machine ran), " +
        'and the ratio shared ÷ embedded, the median over the pairs of runs (goal ≤ 1.5).',
      '',
      '| scenario | embedded µs/req | shared µs/req | shared ÷ embedded | embedded req/s | shared req/s | ratio, embedded | ratio, shared | shared p99 ms | other CPU % | unexpected |',
      '|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|',
    )
    for (const s of result.scenarios) {
      if (!s.shared) continue
      lines.push(
        `| ${s.title} | ${f(s.petstore.cpuUsPerRequest, 1)} | ${f(s.shared.cpuUsPerRequest, 1)} | ${f(s.cpuRatio)}${mark(s.cpuRatio === undefined ? null : s.cpuRatio <= 1.5)} | ` +
          `${thousands(s.petstore.rps)} | ${thousands(s.shared.rps)} | ${f(s.ratio)} | ${f(s.sharedRatio)} | ${f(s.shared.p99Ms)} | ${s.shared.otherCpuPct} | ${s.shared.unexpected} |`,
      )
    }
  }
  const m = result.memory
  lines.push(
    '',
    '| measure | value | goal |',
    '|---|--:|---|',
    `| peak RSS after all scenarios (before the spray) | ${f(m.peakRssMbAfterScenarios, 1)} MB | ≤ ${m.goalMb} MB${mark(m.metAfterScenarios)} |`,
    `| peak RSS after the spray | ${m.peakRssMbAfterSpray === null ? 'not run' : `${f(m.peakRssMbAfterSpray, 1)} MB`}${m.trackedAddressesAfterSpray === null ? '' : ` (${m.trackedAddressesAfterSpray.toLocaleString('en')} addresses tracked)`} | ≤ ${m.goalAfterSprayMb} MB${mark(m.metAfterSpray)} |`,
    `| exec → first \`/healthz\` 200 (median of ${result.startup.samplesMs.length}) | ${f(result.startup.medianMs, 1)} ms | ≤ ${result.startup.goalMs} ms${mark(result.startup.met)} |`,
    `| binary size | ${f(result.binary.sizeMb, 1)} MB | — |`,
    `| \`POST\` durability (rows after SIGKILL vs 201s sent) | ${result.durability.rowsAdded.toLocaleString('en')} rows / ${result.durability.created201.toLocaleString('en')} × 201 | every 201 a row${mark(result.durability.ok)} |`,
  )
  const shared = result.shared
  if (shared)
    lines.push(
      `| PostgreSQL + Redis: exec → first \`/healthz\` 200 (median of ${shared.startup.samplesMs.length}) | ${f(shared.startup.medianMs, 1)} ms | ≤ ${shared.startup.goalMs} ms${mark(shared.startup.met)} |`,
      `| PostgreSQL + Redis: \`POST\` durability | ${shared.durability.rowsAdded.toLocaleString('en')} rows / ${shared.durability.created201.toLocaleString('en')} × 201 | every 201 a row${mark(shared.durability.ok)} |`,
    )
  if (result.notes.length) lines.push('', ...result.notes.map((note) => `- ${note}`))
  return `${lines.join('\n')}\n`
}

/** Side by side: requests/s and ratio of two results, scenario by scenario. */
export function comparison(before: BenchResult, after: BenchResult): string {
  const lines = [
    `Before: ${before.startedAt} (${before.binary.commit}); after: ${after.startedAt} (${after.binary.commit}).`,
    '',
    '| scenario | req/s before | req/s after | change | ratio before | ratio after | p99 before | p99 after |',
    '|---|--:|--:|--:|--:|--:|--:|--:|',
  ]
  for (const s of after.scenarios) {
    const b = before.scenarios.find((x) => x.name === s.name)
    const change = b ? `${((s.petstore.rps / b.petstore.rps - 1) * 100).toFixed(1)} %` : 'n/a'
    lines.push(
      `| ${s.title} | ${b ? thousands(b.petstore.rps) : 'n/a'} | ${thousands(s.petstore.rps)} | ${change} | ${f(b?.ratio)} | ${f(s.ratio)} | ${f(b?.petstore.p99Ms)} | ${f(s.petstore.p99Ms)} |`,
    )
  }
  const mb = (r: BenchResult) => `${f(r.memory.peakRssMbAfterScenarios, 1)} / ${f(r.memory.peakRssMbAfterSpray, 1)} MB`
  lines.push(
    '',
    `Peak RSS (after scenarios / after spray): ${mb(before)} → ${mb(after)}. ` +
      `Startup: ${f(before.startup.medianMs, 1)} → ${f(after.startup.medianMs, 1)} ms. ` +
      `Binary: ${f(before.binary.sizeMb, 1)} → ${f(after.binary.sizeMb, 1)} MB.`,
  )
  return `${lines.join('\n')}\n`
}
