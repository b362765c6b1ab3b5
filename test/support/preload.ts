/**
 * Builds dist/petstore before the suite when it is missing or older than the sources, so `bun test`
 * on a fresh clone tests the binary that `bun run build` makes.
 */
import { afterAll, setDefaultTimeout } from 'bun:test'
import { existsSync, readdirSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { cleanupApps } from './app'
import { cleanupBinaries } from './binary'
import { checkEveryAnswer } from './contract'
import { cleanupPostgres } from './postgres'
import { cleanupRedis } from './redis'

const root = join(import.meta.dir, '..', '..')
const binary = join(root, 'dist', 'petstore')

function newestSource(dir: string): number {
  let newest = 0
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name)
    newest = Math.max(newest, entry.isDirectory() ? newestSource(path) : statSync(path).mtimeMs)
  }
  return newest
}

const sources = Math.max(newestSource(join(root, 'src')), newestSource(join(root, 'scripts')), statSync(join(root, 'package.json')).mtimeMs)
if (!existsSync(binary) || statSync(binary).mtimeMs < sources) {
  const build = Bun.spawnSync(['bun', 'run', 'build'], { cwd: root, stdout: 'inherit', stderr: 'inherit' })
  if (build.exitCode !== 0) throw new Error('bun run build failed; the binary tests cannot run')
}

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
