/**
 * The second half of `bun run test`: the API suites again on every other storage × limiter combination
 * the command line accepts (test/support/app.ts: BACKENDS), the first half having run them on
 * SQLite + the in-process limiter. Each combination is its own `bun test` process, two at a time, as
 * most of their time is spent waiting on PostgreSQL, Redis and the network, not on the CPU.
 * Without PostgreSQL or Redis installed it says so in one line and skips; under CI (CI=true) it fails.
 */
import { BACKENDS } from './app'
import { postgresBinaries } from './postgres'
import { redisBinary } from './redis'

const SUITES = ['test/api', 'test/smoke.test.ts']
const PARALLEL = 2
const missing = [postgresBinaries() ? null : 'postgresql', redisBinary() ? null : 'redis-server'].filter((name) => name !== null)
if (missing.length > 0) {
  const line = `the API suites on PostgreSQL and Redis need ${missing.join(' and ')}: apt-get install -y ${missing.join(' ')}`
  if (process.env.CI === 'true') {
    console.error(`petstore tests: ${line}`)
    process.exit(1)
  }
  console.error(`petstore tests: skipped ${line}`)
  process.exit(0)
}

/** Runs the suites on one combination; its output is held and printed whole, so runs do not interleave. */
async function runOn(backend: string): Promise<boolean> {
  const run = Bun.spawn(['bun', 'test', '--timeout', '60000', ...SUITES], {
    env: { ...process.env, PETSTORE_TEST_BACKEND: backend },
    stdout: 'pipe',
    stderr: 'pipe',
  })
  const [out, err, code] = await Promise.all([new Response(run.stdout).text(), new Response(run.stderr).text(), run.exited])
  console.error(`\npetstore tests: the API suites on ${backend}${backend === 'postgres+redis' ? ', each app as two instances' : ''}`)
  process.stdout.write(out)
  process.stderr.write(err)
  return code === 0
}

const pending = BACKENDS.filter((backend) => backend !== 'sqlite+memory')
const failed: string[] = []
await Promise.all(
  Array.from({ length: PARALLEL }, async () => {
    for (let backend = pending.shift(); backend; backend = pending.shift()) if (!(await runOn(backend))) failed.push(backend)
  }),
)
if (failed.length > 0) console.error(`petstore tests: the API suites failed on ${failed.join(', ')}`)
process.exit(failed.length > 0 ? 1 : 0)
