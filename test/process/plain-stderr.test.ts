/**
 * What the server and the CLI write to stderr is plain text on a terminal too: Bun paints
 * console.error red on a TTY, which made "listening on…" and "backup written…" look like errors. The
 * binary runs under a pseudo-terminal from util-linux's `script`, and its lines carry no ANSI escape.
 */
import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { BINARY, cleanEnv, collect, eventually, tempDir } from '../support/binary'
import { killedAtEnd } from './helpers'

setDefaultTimeout(60_000)
const SCRIPT = '/usr/bin/script'
const ESCAPE = '\u001b'

/** Runs the binary with these arguments on a pseudo-terminal; the output is what the terminal shows. */
function onTerminal(args: string[]) {
  const command = ['exec', BINARY, ...args].map((part) => `'${part}'`).join(' ')
  const proc = killedAtEnd(
    Bun.spawn([SCRIPT, '-qfec', command, '/dev/null'], { env: cleanEnv(), stdin: 'ignore', stdout: 'pipe', stderr: 'pipe' }),
  )
  const out = { text: '' }
  const read = collect(proc.stdout, out)
  /** Resolves with the exit code once the terminal's output is read to its end. */
  const finished = async () => {
    const code = await proc.exited
    await read
    return code
  }
  return { proc, finished, output: () => out.text }
}

describe('stderr on a terminal', () => {
  test('the CLI and the server write their lines without colour', async () => {
    // Not skipped when missing: Debian's util-linux provides script.
    expect(existsSync(SCRIPT)).toBe(true)
    const dir = tempDir()
    const data = join(dir, 'petstore.db')

    const created = onTerminal(['keys', 'create', '--plan', 'pro', '--name', 'tty', '--data', data])
    expect(await created.finished()).toBe(0)
    expect(created.output()).toContain('petstore: created pro key')

    const backup = onTerminal(['backup', '--data', data, join(dir, 'b.db')])
    expect(await backup.finished()).toBe(0)
    expect(backup.output()).toContain('petstore: backup written to')

    const serve = onTerminal(['serve', '--port', '0', '--host', '127.0.0.1', '--data', data])
    await eventually(() => /listening on http/.test(serve.output()), 15_000)
    // script's child is the server itself (exec): stop it as an operator would, and see its last lines.
    const [child] = readFileSync(`/proc/${serve.proc.pid}/task/${serve.proc.pid}/children`, 'utf8').trim().split(' ').map(Number)
    process.kill(child!, 'SIGTERM')
    await serve.finished()
    expect(serve.output()).toContain('petstore: stopped')

    for (const output of [created.output(), backup.output(), serve.output()])
      expect(output.includes(ESCAPE) ? output : 'no escape').toBe('no escape')
  })
})
