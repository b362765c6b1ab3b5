/**
 * The access log when stdout is not read, or is closed: the binary keeps serving, holds a bounded
 * amount of log in memory (dropping and counting lines past it), and says once, in one line, that
 * stdout went away.
 */
import { describe, expect, test } from 'bun:test'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { BINARY, cleanEnv, eventually, tempDir } from '../support/binary'

const LISTENING = /listening on http:\/\/127\.0\.0\.1:(\d+)/

function rssMiB(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8')
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) / 1024
}

function readIfThere(file: string): string {
  try {
    return readFileSync(file, 'utf8')
  } catch {
    return ''
  }
}

/** The processes `sh -c 'A | B'` started: its children (read from /proc, no procps needed; never another test's). */
function childrenOf(shell: number): number[] {
  const pids: number[] = []
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    const stat = readIfThere(`/proc/${entry}/stat`)
    // The parent's pid is the second field after the command's name, which may hold spaces: read after its ')'.
    if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === shell) pids.push(Number(entry))
  }
  return pids
}

/** The pid of the binary the pipeline runs (not the shell around it, nor the reader). */
function serverPid(shell: number): number {
  const [pid] = childrenOf(shell).filter((p) => readIfThere(`/proc/${p}/cmdline`).startsWith(`${BINARY}\0serve`))
  return pid!
}

/** Kills the pipeline a test started: the server and the reader behind it, then the shell. */
async function killPipeline(shell: Bun.Subprocess): Promise<void> {
  for (const pid of childrenOf(shell.pid)) {
    try {
      process.kill(pid, 'SIGKILL')
    } catch {}
  }
  shell.kill('SIGKILL')
  await shell.exited
}

/**
 * Sends `count` keyless requests with a long path (so each log line is long), `concurrency` at a time; a
 * request that gets no answer fails with the server's stderr so far (`said`), to tell a stop from a refusal.
 */
async function flood(origin: string, said: () => string, count: number, concurrency = 32): Promise<Map<number, number>> {
  const statuses = new Map<number, number>()
  let next = 0
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < count) {
        next++
        const response = await fetch(`${origin}/${'p'.repeat(900)}`).catch((error: Error) => {
          throw new Error(`request ${next} of ${count} got no answer (${error.message}); the server's stderr:\n${said()}`)
        })
        await response.arrayBuffer()
        statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1)
      }
    }),
  )
  return statuses
}

describe('stdout that is not read or is closed', () => {
  test('nobody reads stdout: lines past the cap are dropped and counted, memory stays bounded, serving goes on', async () => {
    const dir = tempDir()
    const errFile = join(dir, 'stderr')
    // `sleep` never reads its input: the pipe fills and stays full.
    const proc = Bun.spawn(
      ['sh', '-c', `"$0" serve --port 0 --host 127.0.0.1 --data "$1" 2>"$2" | sleep 600`, BINARY, join(dir, 'p.db'), errFile],
      { env: cleanEnv(), stdin: 'ignore', stdout: 'ignore', stderr: 'ignore' },
    )
    const stderr = () => readIfThere(errFile)
    try {
      await eventually(() => LISTENING.test(stderr()), 15_000)
      const origin = `http://127.0.0.1:${LISTENING.exec(stderr())![1]}`
      const server = serverPid(proc.pid)
      const before = rssMiB(server)
      // About 1,000 bytes of log a request: 20,000 requests are 20 MB of log against a 4 MiB cap.
      const statuses = await flood(origin, stderr, 20_000)
      expect([...statuses.keys()]).toEqual([404])
      const metrics = await (await fetch(`${origin}/metrics`)).text()
      const dropped = Number(/^petstore_log_lines_dropped_total (\d+)$/m.exec(metrics)![1])
      expect(dropped).toBeGreaterThan(10_000)
      expect(rssMiB(server) - before).toBeLessThan(64)
      expect((await fetch(`${origin}/healthz`)).status).toBe(200)
    } finally {
      await killPipeline(proc)
    }
  })

  test('stdout closed by its reader: one line on stderr, no stack, and the server goes on', async () => {
    const dir = tempDir()
    const errFile = join(dir, 'stderr')
    // `head -c 1` reads one byte of the log and exits, closing the pipe.
    const proc = Bun.spawn(
      [
        'sh',
        '-c',
        `exec "$0" serve --port 0 --host 127.0.0.1 --data "$1" 2>"$2" | head -c 1 >/dev/null`,
        BINARY,
        join(dir, 'p.db'),
        errFile,
      ],
      { env: cleanEnv(), stdin: 'ignore', stdout: 'ignore', stderr: 'ignore' },
    )
    const stderr = () => readIfThere(errFile)
    try {
      await eventually(() => LISTENING.test(stderr()), 15_000)
      const origin = `http://127.0.0.1:${LISTENING.exec(stderr())![1]}`
      await flood(origin, stderr, 2_000, 8)
      await eventually(() => /stdout was closed/.test(stderr()), 5_000)
      expect((await fetch(`${origin}/healthz`)).status).toBe(200)
      await flood(origin, stderr, 500, 8)
      const lines = stderr()
        .split('\n')
        .filter((line) => /stdout/.test(line))
      expect(lines).toEqual(['petstore: stdout was closed by its reader; the access log is off from now on'])
      expect(stderr()).not.toMatch(/\n\s+at /)
    } finally {
      await killPipeline(proc)
    }
  })
})
