/**
 * An in-process server for behaviour tests that need a fake clock or many fresh stores, spoken to over
 * real HTTP. By default (and with PETSTORE_TEST_BACKEND=sqlite) each app is one server on a new
 * `:memory:` database. With PETSTORE_TEST_BACKEND=shared, each app is two servers on a new PostgreSQL
 * database and one Redis, behind a front that sends each request to the other server in turn: the
 * same suites then run against several instances. PostgreSQL and Redis are started once per run.
 */
import type { PetstoreApp } from '../../src/app'
import type { LimiterBackendFactory } from '../../src/backends'
import { type ConfigInput, resolveConfig } from '../../src/config'
import { RedisLimiterBackend } from '../../src/limiter/redis/backend'
import { makeKey } from '../../src/domain/api-key'
import { Server } from '../../src/server'
import { openPostgresStorage } from '../../src/storage/postgres'
import { openSqliteStorage } from '../../src/storage/sqlite'
import type { Storage } from '../../src/domain/repositories'
import { type PostgresCluster, startPostgres } from './postgres'
import { type RedisServer, startRedis } from './redis'

export type TestBackend = 'sqlite' | 'shared'

/** Which backend the in-process apps run on in this run of the suite. */
export const TEST_BACKEND: TestBackend = process.env.PETSTORE_TEST_BACKEND === 'shared' ? 'shared' : 'sqlite'

export interface TestApp {
  /** The (first) server's app: its key registry, limiter, metrics. */
  petstore: PetstoreApp
  /** Every server's app (two with the shared backend). */
  petstores: PetstoreApp[]
  storage: Storage
  base: string
  origin: string
  clock: { now: number; advance(ms: number): void }
  /** Creates a key directly in storage, makes every server know it, and returns its secret. */
  key(plan?: string, limits?: { rpm: number; rpd: number }): Promise<string>
  /** Makes every server read the keys again (after a change made straight in storage). */
  reloadKeys(): Promise<void>
  logLines: string[]
  /**
   * The servers' /metrics added up, sample by sample: metrics are per instance, so with several
   * servers the counters a test expects are the sums.
   */
  metrics(): Promise<string>
  /** Closes the storage under the servers, which keep running (readiness tests). */
  closeStorage(): Promise<void>
  stop(): Promise<void>
}

const open = new Set<TestApp>()
/** Stops every in-process app a test left running; the preload runs it after the suite. */
export async function cleanupApps(): Promise<void> {
  await Promise.all([...open].map((app) => app.stop()))
}

let engines: Promise<{ cluster: PostgresCluster; redis: RedisServer }> | undefined
let databases = 0

export async function startApp(input: ConfigInput = {}, options: { realClock?: boolean } = {}): Promise<TestApp> {
  const clock = {
    // A shared limiter's keys expire by Redis's clock, so its fake clock must not be in the past.
    now: TEST_BACKEND === 'shared' ? Date.UTC(new Date().getUTCFullYear() + 1, 0, 1) : Date.UTC(2026, 0, 1),
    advance(ms: number) {
      clock.now += ms
    },
  }
  const logLines: string[] = []
  const deps = {
    now: options.realClock ? Date.now : () => clock.now,
    logSink: { write: (text: string) => logLines.push(...text.trimEnd().split('\n')), flush: () => 0 },
    warn: () => {},
  }

  let storages: Storage[]
  let limiterBackend: LimiterBackendFactory | undefined
  if (TEST_BACKEND === 'shared') {
    engines ??= Promise.all([startPostgres(), startRedis()]).then(([cluster, redis]) => ({ cluster, redis }))
    const { cluster, redis } = await engines
    const url = await cluster.createDatabase(`app_${process.pid}_${++databases}`)
    storages = await Promise.all([openPostgresStorage(url, { pool: 2 }), openPostgresStorage(url, { pool: 2 })])
    const shared = { url: redis.url, prefix: `petstore-test-${process.pid}-${databases}:` }
    limiterBackend = (rule) => new RedisLimiterBackend(rule, shared)
  } else storages = [openSqliteStorage(':memory:')]

  const ports: number[] = []
  let turn = 0
  // The front: each request goes to the other server; the Host and every header pass unchanged. It
  // listens first, so the servers are built from a config whose links already name it.
  const front =
    storages.length > 1
      ? Bun.serve({
          hostname: '127.0.0.1',
          port: 0,
          fetch: async (request) => {
            const url = new URL(request.url)
            const target = `http://127.0.0.1:${ports[turn++ % ports.length]}${url.pathname}${url.search}`
            const body = request.method === 'GET' || request.method === 'HEAD' ? undefined : await request.arrayBuffer()
            return fetch(target, { method: request.method, headers: request.headers, body, redirect: 'manual', decompress: false })
          },
        })
      : null
  const frontBase = front ? { baseUrl: `http://localhost:${front.port}/v1` } : {}
  const config = resolveConfig({ port: '0', host: '127.0.0.1', ...frontBase, ...input }, {})
  const servers = await Promise.all(
    storages.map((storage) =>
      Server.start(config, { ...deps, limiterBackend, backend: { storage, close: async () => storage.close(), undo() {} } }),
    ),
  )
  ports.push(...servers.map((server) => server.port))
  const petstores = servers.map((server) => server.petstore)
  const port = front ? front.port! : ports[0]!
  const origin = `http://127.0.0.1:${port}`
  const reloadKeys = async () => {
    await Promise.all(petstores.map((petstore) => petstore.keys.reload()))
  }
  let stopped = false
  const testApp: TestApp = {
    petstore: petstores[0]!,
    petstores,
    storage: storages[0]!,
    origin,
    base: `${origin}${config.basePath}`,
    clock,
    logLines,
    async key(plan = 'free', limits) {
      const { secret, record } = makeKey({ plan, rpm: limits?.rpm, rpd: limits?.rpd }, clock.now)
      await storages[0]!.keys.insert(record)
      await reloadKeys()
      return secret
    },
    reloadKeys,
    async metrics() {
      const texts = await Promise.all(
        petstores.map((petstore) => petstore.answerMetrics(new Request(`${origin}/metrics`)).text()),
      )
      return sumMetrics(texts)
    },
    async closeStorage() {
      await Promise.all(storages.map((storage) => storage.close()))
    },
    async stop() {
      if (stopped) return
      stopped = true
      open.delete(testApp)
      front?.stop(true)
      await Promise.all(servers.map((server) => server.stop()))
    },
  }
  open.add(testApp)
  return testApp
}

/** Prometheus texts merged: comment lines once, each sample's values added up, in first-seen order. */
function sumMetrics(texts: string[]): string {
  const lines = new Map<string, number | null>()
  for (const text of texts)
    for (const line of text.split('\n')) {
      if (line === '') continue
      if (line.startsWith('#')) {
        lines.set(line, null)
        continue
      }
      const at = line.lastIndexOf(' ')
      const sample = line.slice(0, at)
      lines.set(sample, (lines.get(sample) ?? 0) + Number(line.slice(at + 1)))
    }
  return [...lines].map(([line, value]) => (value === null ? line : `${line} ${value}`)).join('\n') + '\n'
}

export const auth = (key: string, extra: Record<string, string> = {}) => ({ authorization: `Bearer ${key}`, ...extra })

export async function postPet(base: string, key: string, body: unknown, headers: Record<string, string> = {}) {
  return fetch(`${base}/pets`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...auth(key), ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  })
}
