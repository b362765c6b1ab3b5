/**
 * Builds dist/petstore before the suite when it is missing or older than the sources, so `bun test`
 * on a fresh clone tests the binary that `bun run build` makes.
 */
import { afterAll, setDefaultTimeout } from 'bun:test'
import { existsSync, readdirSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { cleanupApps } from './app'
import { cleanupBinaries } from './binary'

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

const sources = Math.max(newestSource(join(root, 'src')), statSync(join(root, 'package.json')).mtimeMs)
if (!existsSync(binary) || statSync(binary).mtimeMs < sources) {
  const build = Bun.spawnSync(['bun', 'run', 'build'], { cwd: root, stdout: 'inherit', stderr: 'inherit' })
  if (build.exitCode !== 0) throw new Error('bun run build failed; the binary tests cannot run')
}

// Binary tests start real processes; the default 5 s is too tight on a loaded 2-core machine.
setDefaultTimeout(60_000)

// One global hook: servers and temp dirs of every test file are gone when the suite ends.
afterAll(() => {
  cleanupApps()
  cleanupBinaries()
})
