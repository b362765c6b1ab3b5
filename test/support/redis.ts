/**
 * A throwaway Redis for tests: `redis-server` from Debian's package on a free loopback port, with no
 * persistence unless asked, stopped after the suite. It can be stopped and started again on the same
 * port, to test what the server does while Redis is away. Its `admin` client is the test's own, to read
 * and change what Redis holds, so no test opens and closes one by hand.
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { freePort } from './ports'
import { forSuite } from './suite'

export interface RedisServer {
  url: string
  port: number
  /** The test's own client: opened on first use, connected again by start(), closed by destroy(). */
  readonly admin: Bun.RedisClient
  /** Whether redis-server runs (between start() and stop()): known without asking it, as a client's
   * command to a stopped Redis waits out Bun's retries, about 32 s. */
  readonly running: boolean
  stop(): Promise<void>
  start(): Promise<void>
  destroy(): Promise<void>
}

export interface RedisOptions {
  appendOnly?: boolean
  /** More of redis-server's options, e.g. ['--maxmemory', '4mb']. */
  args?: string[]
}

const running = new Set<RedisServer>()

export function redisBinary(): string | null {
  return Bun.which('redis-server', { PATH: `/usr/bin:/usr/sbin:/usr/local/bin:${process.env.PATH ?? ''}` })
}

export async function startRedis(options: RedisOptions = {}): Promise<RedisServer> {
  const binary = redisBinary()
  if (!binary) throw new Error('Redis is not installed (apt-get install -y redis-server)')
  const dir = mkdtempSync(join(tmpdir(), 'petstore-redis-'))
  const port = await freePort()
  let proc: ReturnType<typeof Bun.spawn> | null = null
  const start = async () => {
    proc = Bun.spawn(
      [
        binary,
        '--port',
        String(port),
        '--bind',
        '127.0.0.1',
        '--dir',
        dir,
        '--save',
        '',
        '--appendonly',
        options.appendOnly ? 'yes' : 'no',
        '--loglevel',
        'warning',
        ...(options.args ?? []),
      ],
      { stdout: 'ignore', stderr: 'pipe', stdin: 'ignore' },
    )
    // Ready once it answers PING.
    for (const deadline = Date.now() + 10_000; ; ) {
      const client = new Bun.RedisClient(`redis://127.0.0.1:${port}`, { autoReconnect: false, connectionTimeout: 500 })
      try {
        await client.connect()
        await client.send('PING', [])
        client.close()
        return
      } catch {
        client.close()
        if (proc.exitCode !== null || Date.now() > deadline) throw new Error(`redis-server did not start on port ${port}`)
        await Bun.sleep(20)
      }
    }
  }
  const stop = async () => {
    if (!proc) return
    const stopping = proc
    proc = null
    stopping.kill('SIGTERM')
    await stopping.exited
  }
  await start()
  const url = `redis://127.0.0.1:${port}`
  let admin: Bun.RedisClient | null = null
  const server: RedisServer = {
    url,
    port,
    get admin() {
      admin ??= new Bun.RedisClient(url)
      return admin
    },
    get running() {
      return proc !== null
    },
    stop,
    async start() {
      await start()
      await admin?.connect()
    },
    async destroy() {
      running.delete(server)
      admin?.close()
      await stop()
      rmSync(dir, { recursive: true, force: true })
    },
  }
  running.add(server)
  return server
}

/** The Redis of the suite (describe) it is called in (suite.ts). */
export function redisForSuite(options: RedisOptions = {}): RedisServer {
  return forSuite('Redis', () => startRedis(options))
}

/** Stops every Redis a test left running; the preload runs it after the suite. */
export async function cleanupRedis(): Promise<void> {
  await Promise.all([...running].map((server) => server.destroy()))
}
