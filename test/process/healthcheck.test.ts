/**
 * `petstore healthcheck`, the container health probe: 0 when the local server answers /healthz, 1 when
 * nothing listens, nothing healthy answers, or the answer does not come in time.
 */
import { afterAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { createServer } from 'node:net'
import { startServer } from '../support/binary'
import { cliAsync, killSpawned, reasonLine, unusedPort } from './helpers'

afterAll(killSpawned)
// Process tests wait on real processes; bunfig's [test] timeout is not applied by bun test 1.4.
setDefaultTimeout(20_000)

describe('healthcheck', () => {
  test('exits 0 against a running server (--port and PETSTORE_PORT), 1 once it has stopped', async () => {
    const server = await startServer()
    const viaFlag = await cliAsync(['healthcheck', '--port', String(server.port)])
    expect(viaFlag.code).toBe(0)
    expect(viaFlag.stdout).toBe(`petstore: healthy (http://127.0.0.1:${server.port}/healthz answered 200)\n`)
    expect((await cliAsync(['healthcheck'], { env: { PETSTORE_PORT: String(server.port) } })).code).toBe(0)
    expect(await server.stop()).toBe(0)
    expect((await cliAsync(['healthcheck', '--port', String(server.port)])).code).toBe(1)
  })

  test('exits 1 when nothing listens on the port', async () => {
    const port = await unusedPort()
    const result = await cliAsync(['healthcheck', '--port', String(port)])
    expect(result.code).toBe(1)
  })

  test('exits 1 when something else answers /healthz with an error', async () => {
    const impostor = Bun.serve({ port: 0, hostname: '127.0.0.1', fetch: () => new Response('no', { status: 503 }) })
    try {
      expect((await cliAsync(['healthcheck', '--port', String(impostor.port)])).code).toBe(1)
    } finally {
      await impostor.stop(true)
    }
  })

  test('exits 1, within its 2 s limit, when the port accepts but never answers', async () => {
    const silent = createServer(() => {})
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve))
    const port = (silent.address() as { port: number }).port
    try {
      const started = Date.now()
      const result = await cliAsync(['healthcheck', '--port', String(port)])
      expect(result.code).toBe(1)
      expect(Date.now() - started).toBeLessThan(5_000)
    } finally {
      silent.close()
    }
  }, 15_000)

  test('a bad --port is a usage mistake, not a failed check', async () => {
    const result = await cliAsync(['healthcheck', '--port', 'nope'])
    expect(result.code).not.toBe(0)
    expect(reasonLine(result.stderr)).toMatch(/^petstore: .*--port/)
  })
})

describe('healthcheck --host', () => {
  test('asks the address given (IPv6 in brackets), and a wildcard bind on loopback', async () => {
    // The port is held on 127.0.0.1 by a listener that closes every connection, so the IPv4 check below
    // fails for certain: a port the system hands out free on ::1 may be another server's on 127.0.0.1.
    const v4Holder = Bun.listen({ hostname: '127.0.0.1', port: 0, socket: { open: (socket) => void socket.end(), data() {} } })
    const server = await startServer({ args: ['--host', '::1', '--port', String(v4Holder.port)] })
    const v6 = await cliAsync(['healthcheck', '--host', '::1', '--port', String(server.port)])
    expect([v6.code, v6.stdout]).toEqual([0, `petstore: healthy (http://[::1]:${server.port}/healthz answered 200)\n`])
    const wildcard = await cliAsync(['healthcheck', '--port', String(server.port)], { env: { PETSTORE_HOST: '::' } })
    expect(wildcard.code).toBe(0)
    const v4 = await cliAsync(['healthcheck', '--port', String(server.port)])
    expect(v4.code).toBe(1)
    expect(v4.stdout).toStartWith(`petstore: unhealthy (http://127.0.0.1:${server.port}/healthz: `)
    expect(await server.stop()).toBe(0)
    v4Holder.stop(true)
  })
})
