/**
 * The second half of `bun run test`: the API suites again, with every in-process app running as two
 * servers on PostgreSQL and Redis behind a front that alternates between them (test/support/app.ts).
 * Without PostgreSQL or Redis installed it says so in one line and skips; under CI (CI=true) it fails.
 */
import { postgresBinaries } from './postgres'
import { redisBinary } from './redis'

const SUITES = ['test/api', 'test/smoke.test.ts']
const missing = [postgresBinaries() ? null : 'postgresql', redisBinary() ? null : 'redis-server'].filter((name) => name !== null)
if (missing.length > 0) {
  const line = `the API suites on PostgreSQL + Redis need ${missing.join(' and ')}: apt-get install -y ${missing.join(' ')}`
  if (process.env.CI === 'true') {
    console.error(`petstore tests: ${line}`)
    process.exit(1)
  }
  console.error(`petstore tests: skipped ${line}`)
  process.exit(0)
}
console.error('petstore tests: the API suites again, each app as two instances on PostgreSQL + Redis')
const run = Bun.spawn(['bun', 'test', '--timeout', '60000', ...SUITES], {
  env: { ...process.env, PETSTORE_TEST_BACKEND: 'shared' },
  stdio: ['inherit', 'inherit', 'inherit'],
})
process.exit(await run.exited)
