/**
 * The one definition of how petstore is built, for `bun run build` (this machine's binary in
 * dist/petstore) and `bun run release` (every platform's in dist/release, with SHA256SUMS).
 *
 * Two entry points: the server, and the commit worker it starts as a thread. The binary must not read
 * `.env` or `bunfig.toml` from wherever it is started, and is not minified: Elysia reads hooks' source
 * text to decide which context fields to build (see test/api/binary.test.ts, which reads its log line).
 * `--version` names the commit and the build time, given here with `--define` (src/server/build-info.ts).
 */
import { createHash } from 'node:crypto'
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { gitCommit } from '../src/server/build-info'

const ROOT = join(import.meta.dir, '..')
const ENTRIES = ['src/index.ts', 'src/storage/sqlite/commit-worker.ts']

/** Release targets: the file's suffix, and Bun's name for the platform. */
export const TARGETS = [
  ['linux-x64', 'bun-linux-x64'],
  ['linux-arm64', 'bun-linux-arm64'],
  ['darwin-x64', 'bun-darwin-x64'],
  ['darwin-arm64', 'bun-darwin-arm64'],
  ['windows-x64', 'bun-windows-x64'],
] as const

/** What `--version` says besides the version; one build time for every binary of a release. */
const BUILD = {
  // Outside a git checkout (a source tarball) the commit is not known, and the binary says so.
  commit: gitCommit(ROOT) ?? 'unknown',
  date: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
}

function compile(outfile: string, target?: string): void {
  const args = [
    'bun',
    'build',
    ...ENTRIES,
    '--compile',
    '--format=esm',
    '--bytecode',
    '--no-compile-autoload-dotenv',
    '--no-compile-autoload-bunfig',
    '--outfile',
    outfile,
    `--define=PETSTORE_BUILD_COMMIT=${JSON.stringify(BUILD.commit)}`,
    `--define=PETSTORE_BUILD_DATE=${JSON.stringify(BUILD.date)}`,
    ...(target ? [`--target=${target}`] : []),
  ]
  const result = Bun.spawnSync(args, { cwd: ROOT, stdout: 'inherit', stderr: 'inherit' })
  if (result.exitCode !== 0) throw new Error(`bun build failed for ${target ?? 'this machine'}`)
}

function release(dir: string): void {
  rmSync(dir, { recursive: true, force: true })
  mkdirSync(dir, { recursive: true })
  const sums: string[] = []
  for (const [name, target] of TARGETS) {
    const file = `petstore-${name}${name.startsWith('windows') ? '.exe' : ''}`
    compile(join(dir, file), target)
    sums.push(
      `${createHash('sha256')
        .update(readFileSync(join(dir, file)))
        .digest('hex')}  ${file}`,
    )
  }
  writeFileSync(join(dir, 'SHA256SUMS'), `${sums.join('\n')}\n`)
  console.log(`release: ${TARGETS.length} binaries and SHA256SUMS in ${dir}`)
}

if (import.meta.main) {
  const [mode, out] = process.argv.slice(2)
  if (mode === '--release') release(out ?? join(ROOT, 'dist', 'release'))
  else compile(join(ROOT, 'dist', 'petstore'))
}
