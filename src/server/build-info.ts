/**
 * Which build this is, for `petstore --version`: the package version, and the commit and build time
 * that scripts/build.ts bakes into the binary with `--define`. Run from a checkout (`bun src/index.ts`)
 * there is no build: the line says so, with the commit git reports, so a bug report still names one.
 */
import pkg from '../../package.json'

/** The server's version: package.json's, so a release's files say the version they are. */
export const VERSION: string = pkg.version

// Replaced by string literals in a build (scripts/build.ts); never defined when run from the sources.
declare const PETSTORE_BUILD_COMMIT: string
declare const PETSTORE_BUILD_DATE: string

export function versionLine(): string {
  if (typeof PETSTORE_BUILD_COMMIT === 'string' && typeof PETSTORE_BUILD_DATE === 'string')
    return `petstore ${VERSION} (commit ${PETSTORE_BUILD_COMMIT}, built ${PETSTORE_BUILD_DATE})`
  const commit = gitCommit(import.meta.dir)
  return `petstore ${VERSION} (not a release build${commit ? `: run from the sources at commit ${commit}` : ''})`
}

/** The checkout's commit, `-dirty` when it has changes; null without git or outside a checkout. */
export function gitCommit(cwd: string): string | null {
  const git = (...args: string[]) => {
    try {
      const result = Bun.spawnSync(['git', ...args], { cwd, stdout: 'pipe', stderr: 'ignore' })
      return result.exitCode === 0 ? result.stdout.toString().trim() : null
    } catch {
      return null
    }
  }
  const commit = git('rev-parse', '--short=12', 'HEAD')
  if (!commit) return null
  return git('status', '--porcelain', '--untracked-files=no') ? `${commit}-dirty` : commit
}
