/**
 * The console's recent requests over the compiled binary (issue 21, item 5): the ring keeps a bounded
 * prefix of each path, and neither a long path nor a long query string is held alive by what it keeps
 * (a string sliced from the URL holds the whole URL in JSC). Two floods of 5,000 GETs with 16 KB paths,
 * then two of 5,000 with 8 KB query strings: the server's RSS ends under 48 MB above where each started
 * (measured: 11 to 34 on a busy host, the heap and allocator growing once; a bare Bun.serve grows 12
 * under the first; before the fix, 80 a flood and climbing), and the console's list of the last 5,000 answers stays under 5 MB (82 MB before).
 */
import { afterAll, expect, setDefaultTimeout, test } from 'bun:test'
import { readFileSync } from 'node:fs'
import { startServer } from '../support/binary'
import { killSpawned } from '../process/helpers'

setDefaultTimeout(120_000)
afterAll(killSpawned)

const PATH_KEPT = 512

function rssMB(pid: number): number {
  const kib = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]!
  return Number(kib) / 1024
}

/** Sends every URL, 16 at a time, and answers the statuses counted. */
async function flood(urls: string[]): Promise<Map<number, number>> {
  const statuses = new Map<number, number>()
  let next = 0
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      while (next < urls.length) {
        const response = await fetch(urls[next++]!)
        await response.arrayBuffer()
        statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1)
      }
    }),
  )
  return statuses
}

test('10,000 GETs with 16 KB paths, then 10,000 with 8 KB queries: RSS grows by under 48 MB each, the list stays under 5 MB', async () => {
  // The access log goes to /dev/null: it writes each whole path, which this test need not keep.
  const server = await startServer({ console: true, stdoutFile: '/dev/null' })
  const consolePort = /, console at http:\/\/127\.0\.0\.1:(\d+)\//.exec(server.stderr())![1]
  const consoleOrigin = `http://127.0.0.1:${consolePort}`
  const password = readFileSync(/its password is in (\S+) \(readable by this user only\)/.exec(server.stderr())![1]!, 'utf8').trim()
  const session = await fetch(`${consoleOrigin}/api/session`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', origin: consoleOrigin },
    body: JSON.stringify({ name: 'admin', password }),
  })
  expect(session.status).toBe(200)
  const cookie = session.headers.get('set-cookie')!.split(';')[0]!

  // Warm: the ring filled with short paths, so what follows only replaces entries.
  await flood(Array.from({ length: 5_000 }, (_, i) => `${server.base}/pets/${i}`))
  const pid = server.proc.pid
  Bun.gc(true)
  const before = rssMB(pid)

  const longPaths = await flood(Array.from({ length: 10_000 }, (_, i) => `${server.base}/${i % 5_000}-${'p'.repeat(16_000)}`))
  const afterPaths = rssMB(pid)
  const listed = await fetch(`${consoleOrigin}/api/requests?limit=5000`, { headers: { cookie } })
  expect(listed.status).toBe(200)
  const text = await listed.text()
  const { requests } = JSON.parse(text) as { requests: { path: string }[] }
  console.error(
    `recent requests: 10,000 GETs with 16 KB paths ${JSON.stringify([...longPaths])}, RSS ${before.toFixed(1)} → ${afterPaths.toFixed(1)} MB; ` +
      `/api/requests?limit=5000 is ${(text.length / 1e6).toFixed(2)} MB`,
  )
  expect(requests.length).toBe(5_000)
  expect(new Set(requests.map((request) => request.path.length))).toEqual(new Set([PATH_KEPT]))
  expect(requests[0]!.path).toMatch(/^\/v1\/\d+-p+$/)
  expect(text.length).toBeLessThan(5_000_000)
  expect(afterPaths - before).toBeLessThan(48)

  const longQueries = await flood(Array.from({ length: 10_000 }, (_, i) => `${server.base}/pets?q${i}=${'q'.repeat(8_000)}`))
  const afterQueries = rssMB(pid)
  console.error(
    `recent requests: 10,000 GETs with 8 KB queries ${JSON.stringify([...longQueries])}, RSS ${afterPaths.toFixed(1)} → ${afterQueries.toFixed(1)} MB`,
  )
  expect(afterQueries - afterPaths).toBeLessThan(48)
  expect(await server.stop()).toBe(0)
})
