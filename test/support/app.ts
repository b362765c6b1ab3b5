/**
 * An in-process server for behaviour tests that need a fake clock or many fresh stores, spoken to over
 * real HTTP, on the backends PETSTORE_TEST_BACKEND names: STORAGE+LIMITER, any combination the command
 * line accepts (BACKENDS). By default (sqlite+memory) each app is one server on a new `:memory:`
 * database. With postgres, each app has a new PostgreSQL database; with redis, rate limits live in
 * Redis under a prefix of the app's own. postgres+redis runs each app as two
 * servers behind a front that sends each request to the other server in turn, so the same suites run
 * against several instances; the other combinations are one server each (with the in-process limiter
 * several instances would each keep their own limits, and a data file has one server). PostgreSQL and
 * Redis are started once per run, when a combination needs them.
 */
import { afterEach } from 'bun:test'
import type { PetstoreApp } from '../../src/server/app'
import type { LimiterBackendFactory } from '../../src/server/backends'
import { type ConfigInput, resolveConfig } from '../../src/config'
import { RedisLimiterBackend } from '../../src/limiter/redis/backend'
import { makeKey } from '../../src/domain/api-key'
import { Server } from '../../src/server/server'
import { openPostgresStorage } from '../../src/storage/postgres'
import { openSqliteStorage } from '../../src/storage/sqlite'
import type { Storage } from '../../src/domain/repositories'
import { PATIENT, type PostgresCluster, startPostgres } from './postgres'
import { type RedisServer, startRedis } from './redis'

/** Every storage × limiter combination the command line accepts (--database-url, --redis-url). */
export const BACKENDS = ['sqlite+memory', 'sqlite+redis', 'postgres+memory', 'postgres+redis'] as const
export type TestBackend = (typeof BACKENDS)[number]

/** Which backends the in-process apps run on in this run of the suite. */
export const TEST_BACKEND: TestBackend = testBackendOf(process.env.PETSTORE_TEST_BACKEND)

function testBackendOf(name: string | undefined): TestBackend {
  if (name === undefined || name === '') return 'sqlite+memory'
  if ((BACKENDS as readonly string[]).includes(name)) return name as TestBackend
  throw new Error(`PETSTORE_TEST_BACKEND=${name} is not one of ${BACKENDS.join(', ')}`)
}
const [STORAGE, LIMITER] = TEST_BACKEND.split('+') as ['sqlite' | 'postgres', 'memory' | 'redis']

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

/**
 * For suites whose tests each want a fresh app: `fresh(input)` starts one, stopped after the test that
 * started it (call this in the suite's body, where it registers the afterEach).
 */
export function appsPerTest(): (input?: ConfigInput) => Promise<TestApp> {
  const started: TestApp[] = []
  afterEach(async () => {
    await Promise.all(started.splice(0).map((app) => app.stop()))
  })
  return async (input = {}) => {
    const app = await startApp(input)
    started.push(app)
    return app
  }
}

/** A Redis call's deadline in these suites, patient for the reason PATIENT is (support/postgres.ts). */
const PATIENT_REDIS_MS = 5_000

let cluster: Promise<PostgresCluster> | undefined
let redis: Promise<RedisServer> | undefined
let apps = 0

export async function startApp(input: ConfigInput = {}, options: { realClock?: boolean } = {}): Promise<TestApp> {
  const clock = {
    // A shared limiter's keys expire by Redis's clock, so its fake clock must not be in the past.
    now: LIMITER === 'redis' ? Date.UTC(new Date().getUTCFullYear() + 1, 0, 1) : Date.UTC(2026, 0, 1),
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

  const app = ++apps
  let storages: Storage[]
  if (STORAGE === 'postgres') {
    const url = await (await (cluster ??= startPostgres())).createDatabase(`app_${process.pid}_${app}`)
    const instances = LIMITER === 'redis' ? 2 : 1
    storages = await Promise.all(Array.from({ length: instances }, () => openPostgresStorage(url, { pool: 2, deadlines: PATIENT })))
  } else storages = [openSqliteStorage(':memory:')]
  let limiterBackend: LimiterBackendFactory | undefined
  if (LIMITER === 'redis') {
    const shared = { url: (await (redis ??= startRedis())).url, prefix: `petstore-test-${process.pid}-${app}:` }
    limiterBackend = (rule) => new RedisLimiterBackend(rule, { ...shared, timeoutMs: PATIENT_REDIS_MS })
  }

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
            // Sliced, not parsed: a Host no URL can hold (a port above 65535) must reach the server as sent.
            const { url } = request
            const target = `http://127.0.0.1:${ports[turn++ % ports.length]}${url.startsWith('/') ? url : url.slice(url.indexOf('/', url.indexOf('//') + 2))}`
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
      const texts = await Promise.all(petstores.map((petstore) => petstore.answerMetrics(new Request(`${origin}/metrics`)).text()))
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
  return `${[...lines].map(([line, value]) => (value === null ? line : `${line} ${value}`)).join('\n')}\n`
}

export const auth = (key: string, extra: Record<string, string> = {}) => ({ authorization: `Bearer ${key}`, ...extra })

export async function postPet(base: string, key: string, body: unknown, headers: Record<string, string> = {}) {
  return fetch(`${base}/pets`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...auth(key), ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  })
}
