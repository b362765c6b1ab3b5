/**
 * The suites of `bun run test` (after `bun run check`): every test file on SQLite + the in-process limiter,
 * then the API suites that start in-process apps (test/api, test/smoke.test.ts) again on every other
 * storage × limiter combination the command line accepts (test/support/app.ts: BACKENDS). One `bun test` ran them all one file after
 * another, about a quarter of an hour on two cores, most of it waiting on processes, sockets, PostgreSQL
 * and timers rather than computing; here they run as jobs of `bun test` processes, LANES at a time,
 * longest first, so the waits overlap.
 *
 * - The binary is built once, first (the preload of each job then finds it fresh and builds nothing), and
 *   a PostgreSQL cluster's files are made once, which each cluster the jobs start copies.
 * - A job is one file, or a few short files together, on one backend: each is a `bun test` process of its
 *   own, as the sequential run was one, with its own PostgreSQL and Redis where it needs them, and its
 *   own TMPDIR under this run's temp folder (removed at the end, clusters left running stopped first).
 * - Jobs are ordered by the durations in test/timings.json (a file it does not name counts as long, so
 *   it starts early); `--update-timings` (or PETSTORE_UPDATE_TIMINGS=1) writes this run's durations there.
 * - Each job's output is held and printed whole when it ends, under one line naming it, so jobs never
 *   interleave. At the end: the jobs that failed, the skipped tests, the run's time with the host's
 *   load average through it (median and most of the one-minute figure), and one closing line
 *   `N passed, N failed`. Any failure anywhere (a failed test, a job that crashed or printed no
 *   summary) makes the exit status 1.
 *
 * PETSTORE_TEST_LANES sets the lanes (default 3: two cores keep three `bun test` processes busy, as
 * they mostly wait; more makes the timing tests' deadlines tight); the files that wait most (WAITING)
 * run in one more lane of their own, which then takes the other jobs too; a file that asserts a deadline
 * never runs beside one of the heaviest (DEADLINES). `bun test/support/run-suites.ts
 * FILE…` runs only those files (each on SQLite + memory, and, if it is an API suite, on every backend).
 * Without PostgreSQL or Redis installed, the other combinations are skipped with one line saying so;
 * under CI (CI=true) that fails the run.
 */
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { loadavg, tmpdir, userInfo } from 'node:os'
import { join, relative, resolve } from 'node:path'
import { BACKENDS } from './app'
import { buildIfStale } from './build'
import { makeTemplate, postgresBinaries, TEMPLATE_VARIABLE } from './postgres'
import { redisBinary } from './redis'

const ROOT = join(import.meta.dir, '..', '..')
const TIMINGS = join(ROOT, 'test', 'timings.json')
/**
 * The suites every other backend runs again: the API suites that start in-process apps (startApp,
 * appsPerTest), the only thing PETSTORE_TEST_BACKEND changes. One that drives only the binary (whose
 * environment the tests clean of PETSTORE_* variables) and tools would run the very same again.
 */
const API_SUITES = (file: string) => file.startsWith('test/api/') || file === 'test/smoke.test.ts'
const startsApps = (file: string) => /\b(startApp|appsPerTest)\b/.test(readFileSync(join(ROOT, file), 'utf8'))
/** Files shorter than this (by test/timings.json) share a job, up to this much in all. */
const GROUP_MS = 20_000
/** What a file not in test/timings.json counts as: long, so that it starts early. */
const UNKNOWN_MS = 60_000
const LANES = Math.max(1, Number(process.env.PETSTORE_TEST_LANES ?? 3))
/**
 * Files that time process hand-overs to the millisecond (a takeover's waits, its 300 ms to serve again),
 * or send bursts of requests at once (128 of them) through instances to one Redis with its 100 ms
 * deadline: run last, with no other job beside them, as on a quiet machine; beside two busy jobs they
 * failed now and then on two cores (a 503 where Redis answered late is the documented answer, not the
 * one the test is about). Their other tests are in files of their own, which run in the lanes.
 */
const ALONE = new Set(['test/process/takeover.test.ts', 'test/scale/instances-bursts.test.ts'])
/**
 * Files that mostly wait (a browser's rendering over many page loads; a real Retry-After of 12 s, and
 * tsc): in a fresh-clone CI run (e138c67) the /docs browser test used 27 CPU-s in 123 s, docs/clients
 * 44 in 126 (26 in 82 alone since tsc runs once there). They run one after the other in a lane of their
 * own beside the LANES, so that their waits do not hold a lane jobs that compute could use; when they are
 * done, that lane takes the other jobs as the LANES do.
 */
const WAITING = new Set(['test/browser/docs.test.ts', 'test/docs/clients.test.ts'])
/**
 * Files that assert the product's deadlines under a load of their own ("within one second" of a change
 * committed by another process; a client waiting out each Retry-After to the second) and the files that
 * keep the most CPU busy (argon2id checks three at a time, Chromium, tsc, five cross-compiles and qemu):
 * a job of one never starts while a job of the other runs. In the four fresh-clone CI runs with the
 * WAITING lane beside three (ci-run…4: the browser and tsc beside the lanes), several instances took
 * 93–151 s instead of 50–64 in the three runs before it, every one of its tests two to three times as
 * long, and its "within one second" failed in all four (1,038–1,900 ms; 200,000 keys' "within a second"
 * once, 2.7 s): the poll four times a second and the request after it waited for the CPU. Those two
 * tests of several instances now run ALONE (instances-bursts.test.ts): with every core busy they missed
 * the second beside ordinary jobs too. The files here assert "within a second" of a key's or a limit's
 * change as well, or /healthz answered within a second while 20 MB bodies flood the console (console-edges:
 * 2 to 4 ms alone, 290 to 349 ms in three fresh-clone runs beside other files).
 */
const DEADLINES = new Set([
  'test/process/console-edges.test.ts',
  'test/process/many-keys.test.ts',
  'test/process/polite-clients.test.ts',
  'test/process/key-lifecycle.test.ts',
  'test/process/keys-live.test.ts',
  'test/process/console.test.ts',
  'test/process/test-data.test.ts',
])
const CPU_HEAVY = new Set([
  'test/process/console-sign-in.test.ts',
  'test/browser/console.test.ts',
  'test/release/release.test.ts',
  ...WAITING,
])

const args = process.argv.slice(2)
const updateTimings = args.includes('--update-timings') || process.env.PETSTORE_UPDATE_TIMINGS === '1'
const only = args.filter((arg) => !arg.startsWith('--'))

/** The files `bun test` finds: its own name patterns, outside node_modules and dot folders. */
function testFiles(): string[] {
  const glob = new Bun.Glob('**/*{.test,_test,.spec,_spec}.{ts,tsx,js,jsx,mts,cts,mjs,cjs}')
  return [...glob.scanSync({ cwd: ROOT })]
    .filter((file) => !file.split('/').some((part) => part === 'node_modules' || part.startsWith('.')))
    .sort()
}

const files = only.length > 0 ? only.map((file) => relative(ROOT, resolve(file))) : testFiles()
for (const file of files) if (!existsSync(join(ROOT, file))) throw new Error(`no test file ${file}`)

const missing = [postgresBinaries() ? null : 'postgresql', redisBinary() ? null : 'redis-server'].filter((name) => name !== null)
const notices: string[] = []
let backends: string[] = BACKENDS.filter((backend) => backend !== 'sqlite+memory')
if (missing.length > 0) {
  const line = `the API suites on PostgreSQL and Redis need ${missing.join(' and ')}: apt-get install -y ${missing.join(' ')}`
  if (process.env.CI === 'true') {
    console.error(`petstore tests: ${line}`)
    process.exit(1)
  }
  notices.push(`petstore tests: skipped ${line}`)
  backends = []
}

/** test/timings.json: milliseconds by `BACKEND FILE` (the backend left out for sqlite+memory). */
const timings: Record<string, number> = existsSync(TIMINGS) ? JSON.parse(readFileSync(TIMINGS, 'utf8')) : {}
const keyOf = (backend: string, file: string) => (backend === 'sqlite+memory' ? file : `${backend} ${file}`)
const expected = (backend: string, file: string) => timings[keyOf(backend, file)] ?? UNKNOWN_MS

interface Job {
  backend: string
  files: string[]
  ms: number
}

/**
 * One backend's files as jobs: a long file alone, short ones packed together (first fit, longest first).
 * An ALONE file is a job of its own: what shared its job ran alone as well, at the end, for nothing.
 */
function jobsOf(backend: string, of: string[]): Job[] {
  const jobs: Job[] = []
  const packable = (file: string) => !ALONE.has(file) && expected(backend, file) < GROUP_MS
  for (const file of of.toSorted((a, b) => expected(backend, b) - expected(backend, a))) {
    const ms = expected(backend, file)
    const bin = packable(file) ? jobs.find((job) => job.files.every(packable) && job.ms + ms <= GROUP_MS) : undefined
    if (bin) {
      bin.files.push(file)
      bin.ms += ms
    } else jobs.push({ backend, files: [file], ms })
  }
  return jobs
}

const jobs = [
  ...jobsOf('sqlite+memory', files),
  ...backends.flatMap((backend) => jobsOf(backend, files.filter(API_SUITES).filter(startsApps))),
].sort((a, b) => b.ms - a.ms)

// Each job's temp files (its servers' data, PostgreSQL clusters, Redis, browsers) go under a folder of
// its own in this one (TMPDIR), so jobs never share a temp path and an interrupted run leaves nothing.
// Readable by others: PostgreSQL runs as its own user inside.
const root = mkdtempSync(join(tmpdir(), 'petstore-run-'))
chmodSync(root, 0o755)
const running = new Set<Bun.Subprocess>()

/** Stops the PostgreSQL clusters left under `root` (a job killed before its cleanup), then removes it. */
function removeRoot(): string[] {
  const left: string[] = []
  const bin = postgresBinaries()
  for (const pid of new Bun.Glob('*/petstore-pg-*/data/postmaster.pid').scanSync({ cwd: root, dot: true })) {
    const data = join(root, pid, '..')
    left.push(data)
    if (bin)
      Bun.spawnSync(
        [
          ...(userInfo().uid === 0 ? ['runuser', '-u', 'postgres', '--'] : []),
          join(bin, 'pg_ctl'),
          '-D',
          data,
          '-m',
          'immediate',
          '-w',
          'stop',
        ],
        { stdout: 'ignore', stderr: 'ignore' },
      )
  }
  // A process of a killed job (an initdb) may still be writing there for a moment.
  for (const until = Date.now() + 5_000; existsSync(root) && Date.now() < until; Bun.sleepSync(100)) {
    try {
      rmSync(root, { recursive: true, force: true })
    } catch {}
  }
  return left
}

for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const)
  process.on(signal, async () => {
    // Each job runs with --no-orphans: killing it kills its servers, Redis and browsers too.
    for (const proc of running) proc.kill('SIGTERM')
    await Promise.all([...running].map((proc) => proc.exited))
    removeRoot()
    process.exit(130)
  })

interface Outcome {
  pass: number
  fail: number
  skip: number
  ok: boolean
}

const count = (text: string, word: string) =>
  [...text.matchAll(new RegExp(`^ *(\\d+) ${word}$`, 'gm'))].reduce((sum, [, n]) => sum + Number(n), 0)
/** At most this many lines of what bun printed for a failed test (its error, above its `(fail)` line). */
const FAILURE_LINES = 30
/**
 * Each failed test's line with the error bun printed above it, repeated at the end of the run: a CI log
 * cut to its tail still says which test failed and why, not only which job.
 */
const failures: string[] = []
function failuresOf(text: string, on: string): string[] {
  const lines = text.split('\n')
  const found: string[] = []
  let from = 0
  for (const [i, line] of lines.entries()) {
    if (line.startsWith('(fail) ')) found.push([`${line}${on}`, ...lines.slice(Math.max(from, i - FAILURE_LINES), i)].join('\n'))
    // What comes after a test's own line belongs to the next test.
    if (/^\((pass|fail|skip|todo)\) /.test(line)) from = i + 1
  }
  return found
}
const measured: Record<string, number> = {}
let done = 0

/** The environment of a job: sqlite+memory is the default, named by no variable, as `bun test` alone runs. */
function envFor(backend: string): Record<string, string | undefined> {
  const { PETSTORE_TEST_BACKEND: _, ...env } = process.env
  return backend === 'sqlite+memory' ? env : { ...env, PETSTORE_TEST_BACKEND: backend }
}

async function run(job: Job, index: number): Promise<Outcome> {
  const timingsFile = join(root, `${index}.json`)
  writeFileSync(timingsFile, JSON.stringify({ version: 1, files: {} }))
  const temp = join(root, String(index))
  mkdirSync(temp)
  chmodSync(temp, 0o755)
  const started = performance.now()
  const proc = Bun.spawn(
    [
      'bun',
      'test',
      '--no-orphans',
      '--timeout',
      '60000',
      `--timings=${timingsFile}`,
      '--update-timings',
      ...job.files.map((file) => `./${file}`),
    ],
    {
      cwd: ROOT,
      env: { ...envFor(job.backend), TMPDIR: temp },
      stdin: 'ignore',
      stdout: 'pipe',
      stderr: 'pipe',
    },
  )
  running.add(proc)
  const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited])
  running.delete(proc)
  const seconds = (performance.now() - started) / 1000
  // The CPU the job used, with the processes it waited for (servers, CLIs): what lanes can share.
  const cpu = proc.resourceUsage()?.cpuTime
  const cpuSeconds = cpu ? Number(cpu.total) / 1e6 : Number.NaN
  try {
    const written = JSON.parse(readFileSync(timingsFile, 'utf8')) as { files: Record<string, number> }
    for (const [file, ms] of Object.entries(written.files)) measured[keyOf(job.backend, relative(ROOT, join(ROOT, file)))] = Math.round(ms)
  } catch {
    // No durations from a job that crashed; its failure is reported below.
  }
  const text = `${out}\n${err}`
  const outcome = { pass: count(text, 'pass'), fail: count(text, 'fail'), skip: count(text, 'skip'), ok: code === 0 }
  failures.push(...failuresOf(err, ` (in ${job.files.join(' ')}${job.backend === 'sqlite+memory' ? '' : ` on ${job.backend}`})`))
  // A job that exits 0 without a summary line ran nothing it was given: that is a failure too.
  if (outcome.pass + outcome.fail + outcome.skip === 0) outcome.ok = false
  done++
  const on =
    job.backend === 'sqlite+memory' ? '' : ` on ${job.backend}${job.backend === 'postgres+redis' ? ', each app as two instances' : ''}`
  console.error(
    `\npetstore tests: [${done}/${jobs.length}] ${job.files.join(' ')}${on}: ${outcome.pass} pass, ${outcome.fail} fail` +
      `${outcome.skip ? `, ${outcome.skip} skip` : ''}, exit ${code}, ${seconds.toFixed(0)} s (CPU ${cpuSeconds.toFixed(0)} s)`,
  )
  process.stdout.write(out)
  process.stderr.write(err)
  return outcome
}

const started = performance.now()
// The host's load average through the run, said with its time: a run beside other work (other suites,
// benchmarks) takes longer and meets its deadlines later, which the time alone does not tell.
const loads = [loadavg()[0]!]
const sampling = setInterval(() => loads.push(loadavg()[0]!), 15_000)
const buildError = buildIfStale()
if (buildError) {
  console.error(`petstore tests: ${buildError}`)
  process.exit(1)
}
// The clusters the jobs start are copies of one initdb's (support/postgres.ts).
if (postgresBinaries()) process.env[TEMPLATE_VARIABLE] = await makeTemplate(root)
console.error(
  `petstore tests: ${files.length} files in ${jobs.length} jobs (${backends.length} other backends), ${LANES} at a time, and ${WAITING.size} that mostly wait in a lane of their own`,
)
const sameOnEvery = files.filter(API_SUITES).filter((file) => !startsApps(file))
if (backends.length > 0 && sameOnEvery.length > 0)
  console.error(`petstore tests: run once, as they start no in-process app (the same on every backend): ${sameOnEvery.join(' ')}`)
const numbered = jobs.map((job, index) => ({ job, index }))
const alone = (job: Job) => job.files.some((file) => ALONE.has(file))
const waiting = (job: Job) => job.backend === 'sqlite+memory' && job.files.every((file) => WAITING.has(file))
const failed: string[] = []
const totals = { pass: 0, fail: 0, skip: 0 }
const deadlines = (job: Job) => job.files.some((file) => DEADLINES.has(file))
const cpuHeavy = (job: Job) => job.files.some((file) => CPU_HEAVY.has(file))
const active = new Set<Job>()
/** Whether `job` may start beside the jobs running now (see DEADLINES). */
const fits = (job: Job) => ![...active].some((other) => (deadlines(job) && cpuHeavy(other)) || (cpuHeavy(job) && deadlines(other)))
/** Settled when a job ends: a lane that found nothing that fits looks again then. */
let jobEnded = Promise.withResolvers<void>()
/**
 * Runs the queues' jobs, `lanes` at a time: each lane takes the first job that fits beside the running
 * ones from the first queue that has one (the queues are longest first), or waits for a job to end.
 */
const drain = (queues: (typeof numbered)[], lanes: number) => {
  /** Takes the first job that fits from the first queue that has one. */
  const take = () => {
    for (const queue of queues) {
      const at = queue.findIndex(({ job }) => fits(job))
      if (at >= 0) return queue.splice(at, 1)[0]
    }
  }
  return Promise.all(
    Array.from({ length: lanes }, async () => {
      while (queues.some((queue) => queue.length > 0)) {
        const next = take()
        if (!next) {
          await jobEnded.promise
          continue
        }
        active.add(next.job)
        const outcome = await run(next.job, next.index)
        active.delete(next.job)
        jobEnded.resolve()
        jobEnded = Promise.withResolvers<void>()
        totals.pass += outcome.pass
        // A job that failed without a failed test (it crashed, or ran nothing) counts as one failure.
        totals.fail += outcome.fail || (outcome.ok ? 0 : 1)
        totals.skip += outcome.skip
        if (!outcome.ok) failed.push(`${next.job.files.join(' ')} (${next.job.backend})`)
      }
    }),
  )
}
const lanesQueue = numbered.filter(({ job }) => !alone(job) && !waiting(job))
await Promise.all([drain([lanesQueue], LANES), drain([numbered.filter(({ job }) => waiting(job)), lanesQueue], 1)])
await drain([numbered.filter(({ job }) => alone(job))], 1)
const leftRunning = removeRoot()

if (updateTimings) {
  const merged = Object.fromEntries(Object.entries({ ...timings, ...measured }).sort(([a], [b]) => a.localeCompare(b)))
  writeFileSync(TIMINGS, `${JSON.stringify(merged, null, 2)}\n`)
}
console.error('')
for (const notice of notices) console.error(notice)
if (leftRunning.length > 0)
  console.error(`petstore tests: stopped ${leftRunning.length} PostgreSQL clusters that jobs left running: ${leftRunning.join(', ')}`)
if (totals.skip > 0) console.error(`petstore tests: ${totals.skip} tests skipped (each job's output above says which and why)`)
for (const failure of failures) console.error(`petstore tests: ${failure}\n`)
if (failed.length > 0) console.error(`petstore tests: failed in ${failed.length} jobs: ${failed.join('; ')}`)
clearInterval(sampling)
loads.push(loadavg()[0]!)
const sorted = loads.toSorted((a, b) => a - b)
const load = `, load average ${sorted[sorted.length >> 1]!.toFixed(1)} (median of the minute's, ${sorted.at(-1)!.toFixed(1)} at most)`
console.error(`petstore tests: ${jobs.length} jobs in ${((performance.now() - started) / 1000).toFixed(0)} s${load}`)
console.log(`${totals.pass} passed, ${totals.fail} failed`)
process.exit(failed.length > 0 || totals.fail > 0 ? 1 : 0)
