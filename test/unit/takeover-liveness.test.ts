/**
 * Whether the process that claims a data file for a takeover is alive (handover.ts), over real
 * processes: a zombie (dead, its parent not reaping it, as under a PID 1 that reaps late) is dead, so
 * a server that handed over to it serves again at once instead of waiting for the reap. The binary's
 * side is in test/process/takeover.test.ts.
 */
import { afterAll, expect, test } from 'bun:test'
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { liveClaimant, takeoverProgress } from '../../src/storage/sqlite/handover'
import { eventually, tempDir } from '../support/binary'

// A shell that starts a child, prints its pid and becomes `sleep`, which never reaps it: the child,
// killed once the shell is `sleep`, stays a zombie (killed before, the shell could reap it).
const parent = Bun.spawn(['sh', '-c', 'sleep 60 & echo $!; exec sleep 60'], { stdin: 'ignore', stdout: 'pipe', stderr: 'ignore' })
afterAll(() => parent.kill('SIGKILL'))

function read(path: string): string {
  try {
    return readFileSync(path, 'latin1')
  } catch {
    return ''
  }
}

function stateOf(pid: number): string {
  const stat = read(`/proc/${pid}/stat`)
  return stat.charAt(stat.lastIndexOf(')') + 2)
}

async function zombie(): Promise<number> {
  let text = ''
  const reader = parent.stdout.getReader()
  while (!text.includes('\n')) text += new TextDecoder().decode((await reader.read()).value)
  const pid = Number(text.trim())
  await eventually(() => read(`/proc/${parent.pid}/comm`) === 'sleep\n')
  process.kill(pid, 'SIGKILL')
  await eventually(() => stateOf(pid) === 'Z')
  return pid
}

test.skipIf(!existsSync('/proc/self/stat'))('a zombie claimant is gone, its claim removed; a live one is still taking over', async () => {
  const pid = await zombie()
  // What made the old server wait: kill(pid, 0) succeeds on a zombie.
  expect(process.kill(pid, 0)).toBe(true)
  const file = join(tempDir(), 'petstore.db')
  writeFileSync(`${file}.takeover`, String(pid))
  expect(liveClaimant(file)).toBeNull()
  expect(existsSync(`${file}.takeover`)).toBe(false)
  writeFileSync(`${file}.takeover`, String(pid))
  expect(takeoverProgress(file, pid)).toBe('gone')
  expect(existsSync(`${file}.takeover`)).toBe(false)

  writeFileSync(`${file}.takeover`, String(parent.pid))
  expect(liveClaimant(file)).toBe(parent.pid)
  expect(takeoverProgress(file, parent.pid)).toBe('starting')
  expect(existsSync(`${file}.takeover`)).toBe(true)
})
