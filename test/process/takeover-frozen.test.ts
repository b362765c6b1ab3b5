/**
 * `petstore serve --takeover` from a frozen server (SIGSTOP): the new one gives up after its 17 s, the
 * requests it held get 503, and the old one, resumed, keeps serving. Apart from takeover.test.ts, whose
 * tests time hand-overs to the millisecond and run last and alone (test/support/run-suites.ts): this one
 * waits out the 17 s and checks answers, not times, so it runs beside other jobs.
 */
import { afterAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { connect } from 'node:net'
import { killSpawned, parseRawResponse } from './helpers'
import { expectStillServing, oldServer, serveArgs, spawnTaker, UNLIMITED, until } from './takeover-helpers'

afterAll(killSpawned)
setDefaultTimeout(60_000)

/** A GET on a connection of its own: the status, or 'reset' when the connection ends without an answer. */
function rawGet(port: number, path: string, key: string): Promise<number | string> {
  return new Promise((resolve) => {
    let text = ''
    const socket = connect(port, '127.0.0.1', () =>
      socket.write(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nAuthorization: Bearer ${key}\r\nConnection: close\r\n\r\n`),
    )
    socket.on('data', (chunk) => (text += chunk.toString()))
    socket.on('error', () => {})
    socket.on('close', () => resolve(parseRawResponse(text)?.status ?? 'reset'))
  })
}

describe('serve --takeover', () => {
  test('from a frozen server, it gives up; the requests it held get 503, not a reset; the old one, resumed, keeps serving', async () => {
    const { dataFile, key, port, old } = await oldServer(UNLIMITED)
    old.proc.kill('SIGSTOP')
    const next = spawnTaker(serveArgs(port, dataFile))
    await until(() => next.stderr().includes('taking over'))
    // New connections: the kernel gives some to the frozen server, which answers none yet, and some
    // to the new one, which holds them until it gives up (longer than Bun's default idle timeout).
    const answers = Array.from({ length: 12 }, () => rawGet(port, '/v1/pets', key))
    expect(await next.proc.exited).toBe(1)
    await next.read
    expect(next.stderr()).toMatch(
      /^petstore: cannot take over: .* was not let go within 17 s .*; the takeover is withdrawn, so it keeps serving once it runs$/m,
    )
    const settled = await Promise.all(answers.map((answer) => Promise.race([answer, Bun.sleep(2_000).then(() => 'pending')])))
    old.proc.kill('SIGCONT')
    // Those the new server held are 503s; the frozen server's are answered once it runs again.
    expect(settled.filter((status) => status !== 'pending').length).toBeGreaterThan(0)
    expect(settled.filter((status) => status !== 'pending' && status !== 503)).toEqual([])
    expect((await Promise.all(answers)).filter((status) => status !== 503 && status !== 200)).toEqual([])
    await until(() => old.stderr().includes('no server is taking over'))
    await expectStillServing(old, key)
  })
})
