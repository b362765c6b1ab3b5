/**
 * Builds dist/petstore before the suite when it is missing or older than the sources, so `bun test`
 * on a fresh clone tests the binary that `bun run build` makes.
 */
import { afterAll, setDefaultTimeout } from 'bun:test'
import { cleanupApps } from './app'
import { cleanupBinaries } from './binary'
import { buildIfStale } from './build'
import { checkEveryAnswer } from './contract'
import { cleanupPostgres } from './postgres'
import { cleanupRedis } from './redis'

const buildError = buildIfStale()
if (buildError) throw new Error(buildError)

// Binary tests start real processes; the default 5 s is too tight on a loaded 2-core machine.
setDefaultTimeout(60_000)

// Every answer of a documented operation, in every test file, is checked against /openapi.json.
checkEveryAnswer.install()

// One global hook: servers and temp dirs of every test file are gone when the suite ends.
afterAll(async () => {
  if (process.env.PETSTORE_CONTRACT_REPORT) console.log(`contract: ${checkEveryAnswer.checked} answers checked by the global hook`)
  await cleanupApps()
  cleanupBinaries()
  await Promise.all([cleanupPostgres(), cleanupRedis()])
})
