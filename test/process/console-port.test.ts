/**
 * The console's fixed default port (127.0.0.1:8090) held by another program or a second petstore: the
 * API still starts, without the console, and says so in one line naming --console-address; an address
 * given with --console-address that cannot be bound still stops the start, naming the flag. The test
 * holds the real default port for a moment, and says loudly that it skipped when something else holds it.
 */
import { afterAll, expect, setDefaultTimeout, test } from 'bun:test'
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { ENVIRONMENTS } from '../../src/config'
import { BINARY, tempDir } from '../support/binary'
import { killSpawned, reasonLine, serveExpectingFailure, spawnServe, unusedPort } from './helpers'

afterAll(killSpawned)
setDefaultTimeout(30_000)

const CONSOLE_PORT = ENVIRONMENTS.production.consolePort

function hold(port: number): { stop(closeActiveConnections?: boolean): void } | null {
  try {
    return Bun.listen({ hostname: '127.0.0.1', port, socket: { data() {} } })
  } catch {
    return null
  }
}

test("the console's default address taken: the API serves without it, and one line names --console-address", async () => {
  const held = hold(CONSOLE_PORT)
  if (!held) {
    console.error(
      `SKIPPED: console-port test: 127.0.0.1:${CONSOLE_PORT} is held by something else on this machine, so the default cannot be tested`,
    )
    return
  }
  try {
    const dir = tempDir()
    const server = await spawnServe(['--port', String(await unusedPort()), '--data', join(dir, 'petstore.db')])
    const said = server
      .stderr()
      .split('\n')
      // The binary's own path (in "make more with: …") may hold the word wherever the checkout is.
      .filter((line) => line.replaceAll(BINARY, 'petstore').includes('console'))
    expect(said).toEqual([
      expect.stringMatching(
        new RegExp(
          `^petstore: the console's default address 127\\.0\\.0\\.1:${CONSOLE_PORT} is taken \\(.+\\); serving the API without the console: --console-address HOST:PORT puts it elsewhere$`,
        ),
      ),
    ])
    expect((await fetch(`${server.origin}/healthz`)).status).toBe(200)
    // No operator is made for a console that is not there.
    expect(existsSync(join(dir, 'petstore-console-password.txt'))).toBe(false)
    expect(await server.stop()).toBe(0)

    const explicit = await serveExpectingFailure([
      '--port',
      String(await unusedPort()),
      '--data',
      join(tempDir(), 'petstore.db'),
      '--console-address',
      `127.0.0.1:${CONSOLE_PORT}`,
    ])
    expect(explicit.listened).toBe(false)
    expect(explicit.code).toBe(1)
    expect(reasonLine(explicit.stderr)).toMatch(
      new RegExp(
        `^petstore: cannot listen on 127\\.0\\.0\\.1:${CONSOLE_PORT}, the console's address \\(--console-address\\): .+ in use\\?$`,
      ),
    )
  } finally {
    held.stop(true)
  }
})
