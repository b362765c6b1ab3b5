/**
 * What the console's passwords cost the server in memory: the first start hashes the first operator's
 * password, and every sign-in checks one, a stranger's with an unknown name included. Read from the
 * kernel (/proc/PID/status, VmHWM: the most the process was ever resident), on the binary.
 */
import { afterAll, expect, setDefaultTimeout, test } from 'bun:test'
import { readFileSync } from 'node:fs'
import { killSpawned, startWithConsole } from './helpers'

afterAll(killSpawned)
setDefaultTimeout(60_000)

/** The most the process was ever resident, in MiB. */
function peakMiB(pid: number): number {
  return Number(/^VmHWM:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024
}

test('a first start, which makes the first operator, and 50 sign-ins at once with unknown names stay under 110 and 160 MiB resident', async () => {
  const server = await startWithConsole()
  expect(server.password).not.toBe('')
  // With Bun's default argon2id (64 MiB a hash) the first start alone peaked at 126-128 MiB.
  expect(peakMiB(server.proc.pid)).toBeLessThan(110)

  const origin = server.console
  const answers = await Promise.all(
    Array.from({ length: 50 }, (_, i) =>
      fetch(`${origin}/api/session`, {
        method: 'POST',
        headers: { origin, 'content-type': 'application/json' },
        body: JSON.stringify({ name: `stranger-${i}`, password: 'not-a-password-of-anyone' }),
      }).then((response) => response.status),
    ),
  )
  expect(answers).toEqual(Array(50).fill(401))
  // Each check holds its hash's memory while it runs: 193 MiB with 64 MiB hashes.
  expect(peakMiB(server.proc.pid)).toBeLessThan(160)
  expect(await server.stop()).toBe(0)
})
