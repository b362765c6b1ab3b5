/**
 * The README's command blocks that run in sequence, pasted into a script as written: the staging block
 * starts a server in the background and at once resets and seeds its store, so it must wait for the
 * server itself. It runs here with bash -e against the compiled binary as `petstore` on PATH, in a
 * fresh folder, on free ports given by the environment variables the README documents.
 */
import { afterAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { mkdirSync, readdirSync, readFileSync, symlinkSync } from 'node:fs'
import { join } from 'node:path'
import { BINARY, cleanEnv, tempDir } from '../support/binary'
import { freePort } from '../support/ports'

setDefaultTimeout(60_000)
const ROOT = join(import.meta.dir, '..', '..')
const started: number[] = []
afterAll(() => {
  for (const pid of started) {
    try {
      process.kill(pid, 'SIGKILL')
    } catch {}
  }
})

/** The README's `sh` block that follows this heading. */
function blockAfter(heading: string): string {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8')
  const section = readme.slice(readme.indexOf(`## ${heading}`))
  return /^```sh\n([\s\S]*?)^```$/m.exec(section)![1]!
}

describe('README', () => {
  test('"Testing your client against petstore": the staging block runs as a script, as written', async () => {
    const block = blockAfter('Testing your client against petstore')
    expect(block).toContain('petstore serve --env staging &')
    const dir = tempDir()
    const bin = join(dir, 'bin')
    mkdirSync(bin)
    symlinkSync(BINARY, join(bin, 'petstore'))
    const [port, consolePort] = [await freePort(), await freePort()]
    // Around the block: the server it starts in the background is stopped however the block ends.
    const script = `trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n${block}\necho "KEY=$KEY"\n`
    const proc = Bun.spawn(['bash', '-e', '-c', script], {
      cwd: dir,
      env: cleanEnv({
        PATH: `${bin}:${process.env.PATH}`,
        PETSTORE_PORT: String(port),
        PETSTORE_CONSOLE_ADDRESS: `127.0.0.1:${consolePort}`,
      }),
      stdin: 'ignore',
      stdout: 'pipe',
      stderr: 'pipe',
    })
    started.push(proc.pid)
    const [code, out, err] = await Promise.all([proc.exited, new Response(proc.stdout).text(), new Response(proc.stderr).text()])
    expect({ code, err: code === 0 ? '' : err }).toEqual({ code: 0, err: '' })
    expect(err).toContain('added 250 sample pets')
    const key = /^KEY=(psk_\S+)$/m.exec(out)?.[1]
    expect(key).toBeDefined()
  })

  test('every npx line in the guide says --yes: without it npx asks before installing, and a script or CI stops there', () => {
    const pages = [
      'README.md',
      ...readdirSync(join(ROOT, 'docs'))
        .filter((name) => name.endsWith('.md'))
        .map((name) => `docs/${name}`),
    ]
    const asking = pages.flatMap((page) =>
      readFileSync(join(ROOT, page), 'utf8')
        .split('\n')
        .filter((line) => /^\s*npx\s/.test(line) && !/^\s*npx --yes\s/.test(line))
        .map((line) => `${page}: ${line}`),
    )
    expect(asking).toEqual([])
  })
})
