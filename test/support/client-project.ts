/**
 * A client's own project, as a user of the API sets one up: a temp folder with the repository's
 * node_modules linked in (openapi-typescript, openapi-fetch and TypeScript; the closed network has no
 * npm), whose files tsc type-checks strictly.
 */
import { symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { tempDir } from './binary'

const ROOT = join(import.meta.dir, '..', '..')

export function clientProject(): string {
  const dir = tempDir()
  symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'))
  return dir
}

/** Writes the project's tsconfig.json for `files` and runs tsc on it: its exit code and all it printed. */
export function typeCheck(dir: string, files: string[]): { code: number; output: string } {
  const compilerOptions = {
    strict: true,
    noEmit: true,
    target: 'esnext',
    module: 'esnext',
    moduleResolution: 'bundler',
    types: ['bun'],
    skipLibCheck: true,
  }
  writeFileSync(join(dir, 'tsconfig.json'), JSON.stringify({ compilerOptions, files }))
  const result = Bun.spawnSync([join(ROOT, 'node_modules', '.bin', 'tsc'), '-p', 'tsconfig.json'], {
    cwd: dir,
    stdout: 'pipe',
    stderr: 'pipe',
  })
  return { code: result.exitCode ?? -1, output: result.stdout.toString() + result.stderr.toString() }
}
