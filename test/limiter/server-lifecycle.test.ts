/**
 * The server lifecycle (src/server/server.ts) with the limiter in Redis, in process: every way out of a start,
 * failed or stopped, goes through one teardown, which closes the limiter's Redis connection.
 */
import { expect, test } from 'bun:test'
import type { StorageBackend } from '../../src/domain/repositories'
import { resolveConfig } from '../../src/config'
import { Server } from '../../src/server/server'
import { openSqliteStorage } from '../../src/storage/sqlite'
import { describeWithEngines } from '../support/engines'
import { redisForSuite } from '../support/redis'

describeWithEngines(['redis-server'], 'the server lifecycle with Redis', () => {
  const redis = redisForSuite()

  /** Connections Redis has open, but for the admin's own. */
  const connections = async () => `${await redis.admin.send('CLIENT', ['LIST'])}`.trim().split('\n').length - 1
  /** Redis sees a closed connection a moment after the close: waited for, up to two seconds. */
  const allClosed = async () => {
    for (const deadline = Date.now() + 2_000; (await connections()) > 0 && Date.now() < deadline; ) await Bun.sleep(10)
    return connections()
  }
  const memoryBackend = (): StorageBackend => {
    const storage = openSqliteStorage(':memory:')
    return { storage, close: async () => storage.close(), undo() {} }
  }
  const quiet = { warn: () => {}, logSink: null }

  test('a start that cannot listen closes its Redis connection', async () => {
    const taken = Bun.listen({ hostname: '127.0.0.1', port: 0, socket: { data() {} } })
    try {
      const config = resolveConfig({ host: '127.0.0.1', port: String(taken.port), redisUrl: redis.url }, {})
      expect(await connections()).toBe(0)
      const start = Server.start(config, { ...quiet, backend: memoryBackend() })
      await expect(start).rejects.toThrow(`cannot listen on 127.0.0.1:${taken.port}`)
      expect(await allClosed()).toBe(0)
    } finally {
      taken.stop(true)
    }
  })

  test('a server that stops closes its Redis connection', async () => {
    const config = resolveConfig({ host: '127.0.0.1', port: '0', redisUrl: redis.url }, {})
    const server = await Server.start(config, { ...quiet, backend: memoryBackend() })
    expect(await connections()).toBeGreaterThan(0)
    expect(await server.stop()).toBe(true)
    expect(await allClosed()).toBe(0)
  })
})
