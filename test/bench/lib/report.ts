/**
 * The benchmark's result: one JSON document (so two runs can be compared) and the markdown tables made
 * from it. Goals are shown next to the figures; a missed goal is reported, never an error.
 */

/** 3: the yardstick's five scenarios, adjacent pairs (petstore, then the bare server), both modes. */
export const RESULT_VERSION = 3

export type Mode = 'embedded' | 'shared'
export const MODE_TITLE: Record<Mode, string> = { embedded: 'data file', shared: 'PostgreSQL + Redis' }

/** The goals of the issue beside the scenarios' own (scenarios.ts). */
export const GOALS = { sharedOverEmbedded: 1.3, idleRssMb: 64 }

export interface RunFigures {
  requests: number
  rps: number
  p99Ms: number
  socketErrors: number
  /** Answers outside the scenario's expected statuses, plus socket errors. */
  unexpected: number
  /** Exact statuses, from the server's access log (petstore only). */
  statuses?: Record<string, number>
  /** The target's CPU time (user + system, all its threads, /proc/PID/stat) over the requests answered, µs. */
  cpuUsPerRequest: number
  /** CPU used by everything but the target and wrk during the run (noise), in % of one core. */
  otherCpuPct: number
}

/** Petstore, then the bare server at once. */
export interface Pair {
  round: number
  petstore: RunFigures
  bare: RunFigures
  /** Petstore's requests/s ÷ the bare server's. */
  ratio: number
  /** The bare server's CPU per request ÷ petstore's. */
  cpuRatio: number
}

export interface ModeFigures {
  pairs: Pair[]
  /** Medians over the pairs. */
  ratio: number
  cpuRatio: number
  rps: number
  bareRps: number
  cpuUsPerRequest: number
  bareCpuUsPerRequest: number
  p99Ms: number
  /** Sums over the pairs: petstore's, the bare server's. */
  unexpected: number
  bareUnexpected: number
  met: boolean
  /** The answer the bare server replayed. */
  captured: { status: number; code?: string; bytes: number }
  /** With a flood: the server's RSS right after the scenario, one per round, MiB. */
  rssMbAfter?: number[]
}

export interface ScenarioResult {
  name: string
  title: string
  describe: string
  goal: number
  modes: Partial<Record<Mode, ModeFigures>>
  /** PostgreSQL + Redis CPU per request ÷ the data file's, median over adjacent pairs; when compared. */
  sharedOverEmbedded?: number
}

export interface ModeSummary {
  /** RSS once started and seeded, before any load, MiB. */
  idleRssMb: number | null
  /** Peak RSS (VmHWM) at the end, MiB. */
  peakRssMb: number | null
  durability: { created201: number; rowsAdded: number; ok: boolean }
}

export interface BenchResult {
  version: number
  startedAt: string
  finishedAt: string
  machine: { cpus: number; cpuModel: string; kernel: string; bun: string; loadAvgStart: number[]; loadAvgEnd: number[] }
  config: {
    wrk: string
    connections: number
    threads: number
    durationS: number
    warmupS: number
    pairs: number
    rounds: number
    pets: number
    modes: Mode[]
    serverArgs: string[]
  }
  binary: { path: string; sizeMb: number; built: boolean; staleVsSources: boolean; commit: string; dirtySources: boolean }
  modes: Partial<Record<Mode, ModeSummary>>
  scenarios: ScenarioResult[]
  notes: string[]
}

const f = (value: number | null | undefined, digits = 2) =>
  value === null || value === undefined || !Number.isFinite(value) ? 'n/a' : value.toFixed(digits)
const thousands = (value: number) => (Number.isFinite(value) ? Math.round(value).toLocaleString('en') : 'n/a')
const mark = (met: boolean | null | undefined) => (met === null || met === undefined ? '' : met ? ' ✅' : ' ❌')
const loads = (avg: number[]) => avg.map((v) => v.toFixed(2)).join(' ')

export function markdown(result: BenchResult): string {
  const c = result.config
  const lines: string[] = [
    `Load average ${loads(result.machine.loadAvgStart)} at start, ${loads(result.machine.loadAvgEnd)} at end ` +
      `(${result.machine.cpus} × ${result.machine.cpuModel}). ${c.wrk}, ${c.connections} connections, ${c.threads} thread(s); ` +
      `${c.rounds} round(s) × ${c.pairs} pairs × ${c.durationS} s per scenario and mode (petstore, then the bare \`Bun.serve\` at once), ` +
      `modes taking turns; ${c.pets.toLocaleString('en')} pets. Binary from ${result.binary.commit}${result.binary.dirtySources ? ' (+ uncommitted src changes)' : ''}.`,
    '',
    "ratio: petstore req/s ÷ the bare server's, the median of the pair ratios; CPU: the server's µs per request " +
      '(/proc/PID/stat, all threads), medians; CPU ratio: bare ÷ petstore, median of the pairs.',
    '',
    '| scenario | mode | pair ratios | ratio | goal | req/s | bare req/s | CPU µs/req | bare µs/req | CPU ratio | unexpected |',
    '|---|---|---|--:|---|--:|--:|--:|--:|--:|--:|',
  ]
  for (const s of result.scenarios)
    for (const mode of c.modes) {
      const m = s.modes[mode]
      if (!m) continue
      lines.push(
        `| ${s.title} | ${MODE_TITLE[mode]} | ${m.pairs.map((p) => f(p.ratio)).join(' ')} | ${f(m.ratio)} | ≥ ${s.goal}${mark(m.met)} | ` +
          `${thousands(m.rps)} | ${thousands(m.bareRps)} | ${f(m.cpuUsPerRequest, 1)} | ${f(m.bareCpuUsPerRequest, 1)} | ${f(m.cpuRatio)} | ` +
          `${m.unexpected}${m.bareUnexpected ? ` (bare ${m.bareUnexpected})` : ''} |`,
      )
    }
  const compared = result.scenarios.filter((s) => s.sharedOverEmbedded !== undefined)
  if (compared.length) {
    lines.push(
      '',
      `PostgreSQL + Redis against the data file: the instance's CPU per request (not PostgreSQL's or Redis's), ` +
        `median over the adjacent pairs of the two modes (goal ≤ ${GOALS.sharedOverEmbedded}).`,
      '',
      '| scenario | data file µs/req | PostgreSQL + Redis µs/req | PG+Redis ÷ data file |',
      '|---|--:|--:|--:|',
    )
    for (const s of compared)
      lines.push(
        `| ${s.title} | ${f(s.modes.embedded?.cpuUsPerRequest, 1)} | ${f(s.modes.shared?.cpuUsPerRequest, 1)} | ` +
          `${f(s.sharedOverEmbedded)}${mark(s.sharedOverEmbedded! <= GOALS.sharedOverEmbedded)} |`,
      )
  }
  const floods = result.scenarios.filter((s) => Object.values(s.modes).some((m) => m?.rssMbAfter))
  lines.push(
    '',
    `| mode | RSS at idle (goal ≤ ${GOALS.idleRssMb} MB) |${floods.map((s) => ` RSS after ${s.name} |`).join('')} peak RSS | every 201 a row after SIGKILL |`,
    `|---|--:|${floods.map(() => '--:|').join('')}--:|---|`,
  )
  for (const mode of c.modes) {
    const m = result.modes[mode]
    if (!m) continue
    const after = floods.map((s) => {
      const rss = s.modes[mode]?.rssMbAfter
      return rss?.length ? ` ${rss.map((v) => f(v, 0)).join(' / ')} MB |` : ' n/a |'
    })
    const d = m.durability
    lines.push(
      `| ${MODE_TITLE[mode]} | ${f(m.idleRssMb, 1)} MB${mark(m.idleRssMb === null ? null : m.idleRssMb <= GOALS.idleRssMb)} |${after.join('')} ` +
        `${f(m.peakRssMb, 0)} MB | ${d.rowsAdded.toLocaleString('en')} rows / ${d.created201.toLocaleString('en')} × 201${mark(d.ok)} |`,
    )
  }
  if (result.notes.length) lines.push('', ...result.notes.map((note) => `- ${note}`))
  return `${lines.join('\n')}\n`
}

/** Two results side by side: ratio and CPU per request, scenario by scenario and mode by mode. */
export function comparison(before: BenchResult, after: BenchResult): string {
  const lines = [
    `Before: ${before.startedAt} (${before.binary.commit}); after: ${after.startedAt} (${after.binary.commit}).`,
    '',
    '| scenario | mode | ratio before | ratio after | CPU µs/req before | CPU µs/req after | change |',
    '|---|---|--:|--:|--:|--:|--:|',
  ]
  for (const s of after.scenarios)
    for (const mode of after.config.modes) {
      const a = s.modes[mode]
      const b = before.scenarios.find((x) => x.name === s.name)?.modes[mode]
      if (!a) continue
      const change = b ? `${((a.cpuUsPerRequest / b.cpuUsPerRequest - 1) * 100).toFixed(1)} %` : 'n/a'
      lines.push(
        `| ${s.title} | ${MODE_TITLE[mode]} | ${f(b?.ratio)} | ${f(a.ratio)} | ${f(b?.cpuUsPerRequest, 1)} | ${f(a.cpuUsPerRequest, 1)} | ${change} |`,
      )
    }
  return `${lines.join('\n')}\n`
}
