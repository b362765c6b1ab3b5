/**
 * Builds dist/petstore when it is missing or older than the sources, so the tests run the binary that
 * `bun run build` makes from these sources. The preload calls it in every `bun test` process, and
 * run-suites.ts once before it starts its jobs, so that jobs starting together never build at once.
 */
import { existsSync, readdirSync, statSync } from 'node:fs'
import { join } from 'node:path'

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

/**
 * Whether dist/petstore is missing or older than what `bun run build` makes it from: the one answer for
 * the tests (which rebuild) and the benchmark (which warns, measuring what is there).
 */
export function binaryStale(): boolean {
  const sources = Math.max(
    newestSource(join(root, 'src')),
    newestSource(join(root, 'scripts')),
    statSync(join(root, 'package.json')).mtimeMs,
  )
  return !existsSync(binary) || statSync(binary).mtimeMs < sources
}

/** Builds if needed; null when the binary is fresh, else why it could not be built. */
export function buildIfStale(): string | null {
  if (!binaryStale()) return null
  const build = Bun.spawnSync(['bun', 'run', 'build'], { cwd: root, stdout: 'inherit', stderr: 'inherit' })
  return build.exitCode === 0 ? null : 'bun run build failed; the binary tests cannot run'
}
