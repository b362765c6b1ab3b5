/**
 * The app factory: wires one server's parts (keys, limiter, pets, metrics, the Elysia instances) from a
 * config and its storage. It opens, reads and listens on nothing: server.ts and jobs.ts do that.
 */
import { Elysia } from 'elysia'
import { VERSION } from './build-info'
import type { AnyElysia } from '../http/openapi'
import type { Config } from '../config'
import { apiPaths, RouteTable } from '../http/routes'
import { UNKNOWN_CLIENT } from '../domain/subject'
import { RateLimiter } from '../limiter/limiter'
import type { BanRule, SharedBackend } from '../limiter/backend'
import { KeyRegistry } from '../modules/keys/service'
import { opsModule } from '../modules/ops'
import { petsModule } from '../modules/pets'
import { InThreadPetWriter } from '../modules/pets/batch'
import { PetService } from '../modules/pets/service'
import { ordersModule } from '../modules/orders'
import { AccessLog, type LogSink } from '../observability/access-log'
import { gauges } from './gauges'
import { Metrics } from '../observability/metrics'
import { metricsBesideApi, metricsEndpoint } from '../observability/metrics-endpoint'
import { UsageCounter } from '../observability/usage'
import { RecentRequests } from '../observability/recent-requests'
import { cors, preflight } from '../plugins/cors'
import { errorHandler, unrouted } from '../plugins/error-answers'
import { gate, standingFields } from '../plugins/gate'
import { scenarios } from '../plugins/scenarios'
import { requestContext } from '../plugins/request-context'
import { type RequestInfo, requestInfo } from '../plugins/request-info'
import { routedPath } from '../plugins/routed-path'
import { readinessCheck, StorageFault } from './readiness'
import type { DataFileWatch, LimiterHandover, PetWriter, SavedBucket, Storage } from '../domain/repositories'

export interface AppDeps {
  storage: Storage
  now?: () => number
  /** Where access-log lines go; null turns the log off. Defaults to stdout. */
  logSink?: LogSink | null
  /** Operator messages (bans, failures); never request data or secrets. */
  warn: (message: string) => void
  /** Commits new pets; defaults to committing on this thread through storage.pets. */
  petWriter?: PetWriter
  /** Where the limiter keeps its state when shared by instances (Redis); defaults to this process. */
  limiterBackend?: (rule: BanRule) => SharedBackend
  /** Day buckets saved by the last run (storage.limiterState), for the in-process limiter. */
  savedLimits?: Map<string, SavedBucket>
  /** Rate-limit state handed over by the server this one took over from (serve --takeover). */
  handedOver?: LimiterHandover
  /** The embedded data file, watched for being replaced. */
  dataFile?: DataFileWatch
}

export interface PetstoreApp {
  app: AnyElysia
  keys: KeyRegistry
  limiter: RateLimiter
  pets: PetService
  /** Per-key usage counted since the last write to storage; null when storage cannot be written. */
  usage: UsageCounter | null
  /** The API's last answers, for the console. */
  recent: RecentRequests
  /** The storage fault that holds until a restart (readiness.ts). */
  fault: StorageFault
  /** Notes a failure that says the data file is damaged, and answers true: for the console's error handler. */
  damaged: (error: unknown) => boolean
  /** The /metrics answer, for a listener of its own (--metrics-address). */
  answerMetrics: (request: Request) => Response
  /**
   * From now on every answer carries `Connection: close`, so that a stopping server lets kept-alive
   * clients go (server.ts letConnectionsGo). `quietMs`: since a request last arrived; `keep` undoes it.
   */
  closeConnections(): { quietMs(): number; keep(): void }
  /** A stop begins: delayed answers (Prefer: delay), waiting or asked from now on, end at once with a 503 (scenarios.ts). */
  stopBegins(): void
  /** Waits for the creates being committed, then closes the pet writer. */
  finishWrites(): Promise<void>
  /** Closes the limiter (a shared one's connection) and the access log; after the last request. */
  close(): Promise<void>
}

export function createApp(config: Config, deps: AppDeps): PetstoreApp {
  const { storage, warn } = deps
  const now = deps.now ?? Date.now
  const isApi = apiPaths(config.basePath)
  const sink = deps.logSink === undefined ? Bun.stdout.writer() : deps.logSink
  const accessLog =
    sink && config.accessLog ? new AccessLog(sink, { onClosed: (reason) => warn(`${reason}; the access log is off from now on`) }) : null
  const onInternalError = (error: unknown, requestId?: string) =>
    warn(`internal error${requestId ? ` in request ${requestId}` : ''}: ${(error as Error)?.stack ?? error}`)

  /**
   * A trusted proxy's fault, said once. Only the API is limited by address: a local probe of /metrics or
   * /healthz is not warned of. Asked per request: once it has warned, it reads nothing more.
   */
  const proxyFault = (message: (proxy: string) => string) => {
    let warned = false
    return (proxy: string, request: Request) => {
      if (warned) return
      const path = routedPath(request.url)
      if (typeof path !== 'string' || !isApi(path)) return
      warned = true
      warn(message(proxy))
    }
  }
  const onUnforwarded = proxyFault(
    (proxy) =>
      `a request from ${proxy}, a trusted proxy (--trust-proxy), carried no X-Forwarded-For: it may be a client on that ` +
      'machine reaching the server directly (a local curl), limited as that address, which is fine; if it came through ' +
      'the proxy, every client of the proxy shares one address bucket and ban: have the proxy set it ' +
      '(nginx: proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for)',
  )
  const onUnreadable = proxyFault(
    (proxy) =>
      `a request from ${proxy}, a trusted proxy (--trust-proxy), carried an X-Forwarded-For entry that is no address ` +
      `(such as "unknown", or an empty one), appended by a trusted hop: its client is limited as "${UNKNOWN_CLIENT}", which every such ` +
      'client shares; have the proxy send client addresses (nginx: proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for)',
  )
  const stopping = new AbortController()
  let closingConnections = false
  let lastRequestAt = 0
  const metrics = new Metrics()
  const usage = storage.writable
    ? new UsageCounter({
        now,
        onDropped: (rows) => warn(`storage has not taken the usage counts for a while: dropped the ${rows} oldest minute rows`),
      })
    : null
  const recent = new RecentRequests()
  const keys = new KeyRegistry(storage)
  const limiter = new RateLimiter(
    {
      banAfter: config.banAfter,
      banSeconds: config.banSeconds,
      maxAddresses: config.maxTrackedAddresses,
      // A shared limiter backend keeps its own clock (Redis's), so instances' clocks do not matter; a clock
      // injected into the app (tests) is used by the limiter too.
      now: deps.limiterBackend && !deps.now ? undefined : now,
      backend: deps.limiterBackend,
      fallback: config.limiterFallback,
      onUnavailable: (unavailable) =>
        warn(
          !unavailable
            ? 'the shared rate limiter (Redis) answers again'
            : config.limiterFallback === 'local'
              ? 'the shared rate limiter (Redis) does not answer: limiting in this process until it does (--limiter-fallback local)'
              : 'the shared rate limiter (Redis) does not answer: API requests get 503 until it does',
        ),
    },
    deps.savedLimits,
    deps.handedOver,
  )
  const fault = new StorageFault(deps.dataFile, warn)
  const noteDamaged = (code: string) => fault.note(`the data file is damaged (${code})`)
  /** A failure that says the data file is damaged, wherever it was met: noted, and answered 503. */
  const damaged = (error: unknown): boolean => {
    const code = storage.damagedCode?.(error)
    if (code !== undefined) noteDamaged(code)
    return code !== undefined
  }
  const pets = new PetService(storage.pets, deps.petWriter ?? new InThreadPetWriter(storage.pets), {
    storageFault: () => fault.current(),
    onDamaged: noteDamaged,
    now,
    locationPrefix: `${config.baseUrl}/pets/`,
    onInternalError,
    onWritesRefused: (refusal) =>
      warn(
        refusal === null
          ? 'storage accepts writes again'
          : refusal.down
            ? `storage does not answer (${refusal.code}); requests that need it answer 503 until it does`
            : `storage refuses writes (${refusal.code}); creates answer 503 until it accepts them`,
      ),
    soleWriter: storage.soleWriter,
  })
  const notReady = readinessCheck({
    fault,
    storage,
    limiter,
    sharedLimiterRequired: deps.limiterBackend !== undefined && config.limiterFallback === 'closed',
  })
  const answerMetrics = metricsEndpoint(() => metrics.render(gauges({ limiter, keys, pets, accessLog })), config.metricsToken)

  // Read once every route exists (below); asked per request by the gate and the fallback.
  const routes = new RouteTable()
  const allowed = (path: string) => routes.allowed(path)
  const notServed = (info: RequestInfo): never => {
    info.operation = 'unmatched'
    throw unrouted(allowed, info.path)
  }

  // Everything under the base path routes into this instance, unknown paths to its fallback, and the
  // gate is a hook of this instance: no router can reach an API handler around it.
  const api = new Elysia({ prefix: config.basePath })
    .use(requestInfo)
    .use(
      gate({
        keys,
        limiter,
        metrics,
        corsEnabled: config.corsOrigins.length > 0,
        now,
        onBan: (subject, seconds) => warn(`banned ${subject} for ${seconds} s after repeated 429s`),
        scenario: config.scenarios ? scenarios({ limiter, tries: limiter.tries, routes, stopping: stopping.signal }) : undefined,
      }),
    )
    .use(
      petsModule({
        service: pets,
        baseUrl: config.baseUrl,
        maxBodyBytes: config.maxBodyBytes,
        answersAtOnce: storage.answersAtOnce,
        // One fact, two records: /metrics' counter and the key's usage.
        onDeprecatedCall: (keyId) => {
          metrics.deprecatedCall(keyId)
          usage?.deprecatedCall(keyId)
        },
      }),
    )
    .use(ordersModule())
    .use(preflight(config.corsOrigins, notServed))
    .all('', ({ info }) => notServed(info), { parse: 'none', detail: { hide: true } })
    .all('/*', ({ info }) => notServed(info), { parse: 'none', detail: { hide: true } })

  const app: AnyElysia = new Elysia({ name: 'petstore' })
    .use(errorHandler({ allowedMethods: allowed, onInternalError, damaged }))
    .use(
      requestContext({
        server: () => app.server,
        metrics,
        accessLog,
        usage,
        recent,
        proxies: { trusted: config.trustProxy, onUnforwarded, onUnreadable },
        operationOf: (method, route) => routes.operationOf(method, route),
        isApi,
        rateLimitFields: (request, info, set) => (isApi(info.path) ? standingFields(keys, limiter, request, info, set) : undefined),
      }),
    )
    .use(cors(config.corsOrigins))
    .onRequest(({ set }) => {
      if (!closingConnections) return
      set.headers.connection = 'close'
      lastRequestAt = performance.now()
    })
    .use(
      opsModule({
        api: () => app,
        basePath: config.basePath,
        servers: config.servers,
        version: VERSION,
        notReady,
        metrics: config.metricsAddress ? null : metricsBesideApi(answerMetrics, config.metricsToken),
        scenarios: config.scenarios,
        examples: { banAfter: config.banAfter, banSeconds: config.banSeconds, maxBodyBytes: config.maxBodyBytes },
      }),
    )
    .use(api)
  routes.read(app.routes)

  return {
    app,
    keys,
    limiter,
    pets,
    usage,
    recent,
    fault,
    damaged,
    answerMetrics,
    closeConnections: () => {
      closingConnections = true
      lastRequestAt = performance.now()
      return {
        quietMs: () => performance.now() - lastRequestAt,
        keep: () => {
          closingConnections = false
        },
      }
    },
    stopBegins: () => stopping.abort(),
    finishWrites: () => pets.close(),
    async close() {
      await limiter.close()
      accessLog?.close()
    },
  }
}
