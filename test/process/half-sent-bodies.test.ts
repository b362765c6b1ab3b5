/**
 * POSTs whose body never finishes, over raw sockets against the compiled binary: a refused one (401,
 * 429, 503) is answered and its connection closed at once; an accepted one whose body stalls is cut
 * with 408 after the body deadline; the bytes held for bodies in flight are bounded, so RSS stays
 * bounded; and /healthz and keyed requests are answered throughout.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { readdirSync, readFileSync } from 'node:fs'
import { connect, type Socket } from 'node:net'
import { join } from 'node:path'
import { createKeyWithCli, type Server, startServer, tempDir } from '../support/binary'
import { auth, killSpawned, parseRawResponse } from './helpers'

afterAll(killSpawned)
setDefaultTimeout(60_000)

const SOCKETS = 2_000
const DECLARED = 60 * 1024
const SENT = 30 * 1024
/** BODY_DEADLINE_MS in src/http/json-body.ts, with room for a loaded host. */
const DEADLINE_MS = 5_000

let server: Server
let key: string
let logFile: string

beforeAll(async () => {
  const dir = tempDir()
  const dataFile = join(dir, 'petstore.db')
  logFile = join(dir, 'access.log')
  key = createKeyWithCli(dataFile, ['--plan', 'enterprise', '--rpm', '1000000', '--rpd', '1000000'])
  server = await startServer({ dataFile, stdoutFile: logFile })
})
afterAll(async () => {
  await server?.stop('SIGKILL')
})

interface HalfSent {
  status: number | undefined
  answeredAt: number | undefined
  closedAt: number | undefined
  startedAt: number
  socket: Socket
}

/** Sends the headers and the first SENT bytes of a DECLARED-byte body, then nothing more. */
function halfSentPost(withKey: string | undefined): Promise<HalfSent> {
  return new Promise((resolve) => {
    const socket = connect(server.port, '127.0.0.1')
    const state: HalfSent = { status: undefined, answeredAt: undefined, closedAt: undefined, startedAt: 0, socket }
    let text = ''
    socket.setNoDelay(true)
    socket.on('data', (chunk) => {
      text += chunk.toString('latin1')
      const response = state.status === undefined ? parseRawResponse(text) : null
      if (response) {
        state.status = response.status
        state.answeredAt = performance.now()
      }
    })
    socket.on('error', () => {})
    socket.on('close', () => (state.closedAt = performance.now()))
    socket.on('connect', () => {
      state.startedAt = performance.now()
      socket.write(
        `POST /v1/pets HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\n${withKey ? `Authorization: Bearer ${withKey}\r\n` : ''}` +
          `Content-Type: application/json\r\nContent-Length: ${DECLARED}\r\n\r\n{"name":"${'x'.repeat(SENT - 9)}`,
        () => resolve(state),
      )
    })
  })
}

async function openMany(withKey: string | undefined): Promise<HalfSent[]> {
  const all: HalfSent[] = []
  // In batches, so that connecting does not outrun the listen backlog on a loaded host.
  for (let i = 0; i < SOCKETS; i += 200)
    all.push(...(await Promise.all(Array.from({ length: Math.min(200, SOCKETS - i) }, () => halfSentPost(withKey)))))
  return all
}

async function until(check: () => boolean, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms
  while (!check()) {
    if (Date.now() > deadline) return false
    await Bun.sleep(50)
  }
  return true
}

function rssMiB(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith('VmRSS:'))!
  return Number(/(\d+)/.exec(line)![1]) / 1024
}

function openFds(pid: number): number {
  return readdirSync(`/proc/${pid}/fd`).length
}

/** Asks /healthz and a keyed GET every 200 ms while `during` runs; every answer's status and time. */
async function probeWhile<T>(during: Promise<T>): Promise<{ result: T; probes: { status: number; ms: number }[]; peakRss: number }> {
  const probes: { status: number; ms: number }[] = []
  let running = true
  let peakRss = rssMiB(server.proc.pid)
  const prober = (async () => {
    while (running) {
      for (const [url, headers] of [
        [`${server.origin}/healthz`, {}],
        [`${server.base}/pets?limit=1`, auth(key)],
      ] as const) {
        const started = performance.now()
        const status = await fetch(url, { headers, signal: AbortSignal.timeout(5_000) }).then(
          (r) => r.status,
          () => 0,
        )
        probes.push({ status, ms: performance.now() - started })
      }
      peakRss = Math.max(peakRss, rssMiB(server.proc.pid))
      await Bun.sleep(200)
    }
  })()
  const result = await during
  running = false
  await prober
  return { result, probes, peakRss }
}

describe('half-sent bodies', () => {
  test(`${SOCKETS} without a key: each is answered and its connection closed at once; others are served throughout`, async () => {
    const fdsBefore = openFds(server.proc.pid)
    const { result: sockets, probes } = await probeWhile(
      (async () => {
        const sockets = await openMany(undefined)
        await until(() => sockets.every((s) => s.closedAt !== undefined), 10_000)
        return sockets
      })(),
    )
    for (const s of sockets) s.socket.destroy()
    const unanswered = sockets.filter((s) => s.status === undefined).length
    const statuses = new Set(sockets.map((s) => s.status))
    // Closed by the server right after its answer, not when the client gives up.
    const lingering = sockets.filter((s) => s.closedAt === undefined || s.closedAt - s.answeredAt! > 2_000).length
    console.log(
      `no key: statuses ${[...statuses].join(',')}, ${lingering} lingered, probes max ${Math.round(Math.max(...probes.map((p) => p.ms)))} ms`,
    )
    expect({ unanswered, lingering }).toEqual({ unanswered: 0, lingering: 0 })
    expect([...statuses].every((status) => status === 401 || status === 429)).toBe(true)
    expect(probes.length).toBeGreaterThan(0)
    expect(probes.filter((p) => p.status !== 200)).toEqual([])
    expect(await until(() => openFds(server.proc.pid) <= fdsBefore + 20, 5_000)).toBe(true)
  })

  test(`${SOCKETS} with a valid key: beyond the in-flight budget refused at once with 503, the rest cut with 408 after the deadline; RSS bounded`, async () => {
    const rssBefore = rssMiB(server.proc.pid)
    const logBefore = readFileSync(logFile, 'utf8').split('\n').length
    const {
      result: sockets,
      probes,
      peakRss,
    } = await probeWhile(
      (async () => {
        const sockets = await openMany(key)
        await until(() => sockets.every((s) => s.closedAt !== undefined), DEADLINE_MS + 15_000)
        return sockets
      })(),
    )
    for (const s of sockets) s.socket.destroy()
    const count = (status: number) => sockets.filter((s) => s.status === status).length
    const lingering = sockets.filter(
      (s) => s.closedAt === undefined || s.answeredAt === undefined || s.closedAt - s.answeredAt > 2_000,
    ).length
    const cut = sockets.filter((s) => s.status === 408).map((s) => s.answeredAt! - s.startedAt)
    console.log(
      `valid key: ${count(503)} × 503, ${count(408)} × 408 after ${Math.round(Math.min(...cut))}–${Math.round(Math.max(...cut))} ms, ` +
        `${lingering} lingered; RSS ${Math.round(rssBefore)} → peak ${Math.round(peakRss)} MiB; probes max ${Math.round(Math.max(...probes.map((p) => p.ms)))} ms`,
    )
    expect(lingering).toBe(0)
    expect(count(503) + count(408)).toBe(SOCKETS)
    expect(count(503)).toBeGreaterThan(0)
    expect(count(408)).toBeGreaterThan(0)
    // Cut after the deadline, not long after it.
    expect(Math.min(...cut)).toBeGreaterThanOrEqual(DEADLINE_MS - 100)
    expect(Math.max(...cut)).toBeLessThan(DEADLINE_MS + 5_000)
    expect(peakRss - rssBefore).toBeLessThan(40)
    expect(probes.filter((p) => p.status !== 200)).toEqual([])
    // Each cut body is logged as a 408, under the key.
    // The log hands its lines over every 50 ms.
    const logged408 = () =>
      readFileSync(logFile, 'utf8')
        .split('\n')
        .slice(logBefore - 1)
        .filter((line) => line.includes('"status":408') && line.includes('"keyId"')).length
    await until(() => logged408() >= count(408), 5_000)
    expect(logged408()).toBe(count(408))
  })
})
