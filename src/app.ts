/**
 * The app factory. Building an app opens nothing and listens on nothing: the caller hands in storage
 * and a clock, and decides when to listen and when to start the background work.
 */
import { Elysia } from 'elysia'
import pkg from '../package.json'
import type { ApiError } from './errors'
import type { Config } from './config'
import { RateLimiter } from './limiter/limiter'
import type { BanRule, LimiterStore } from './limiter/store'
import { KeyRegistry } from './modules/keys/service'
import { opsModule } from './modules/ops'
import { petsModule } from './modules/pets'
import { IDEMPOTENCY_TTL_MS, InThreadPetWriter } from './modules/pets/batch'
import { MAX_PAGE_UNITS, MAX_PET_UNITS, PetService } from './modules/pets/service'
import { storeModule } from './modules/store'
import { AccessLog, type LogSink } from './observability/access-log'
import { Metrics } from './observability/metrics'
import { metricsEndpoint } from './observability/metrics-endpoint'
import { cors, preflight } from './plugins/cors'
import { errorHandler, unrouted } from './plugins/errors'
import { gate } from './plugins/gate'
import { type RequestInfo, requestContext, routedPath } from './plugins/request-context'
import type { MaybePromise, PetWriter, Storage } from './storage/types'

/** The server's version: package.json's, so a release's files say the version they are. */
export const VERSION: string = pkg.version

// Elysia's generic parameters carry nothing useful across this boundary.
export type AnyElysia = Elysia<any, any, any, any, any, any, any>

export interface AppDeps {
  storage: Storage
  now?: () => number
  /** Where access-log lines go; null turns the log off. Defaults to stdout. */
  logSink?: LogSink | null
  /** Operator messages (bans, failures); never request data or secrets. */
  warn?: (message: string) => void
  /** Commits new pets; defaults to committing on this thread through storage.pets. */
  petWriter?: PetWriter
  /** Where the limiter keeps its state when shared by instances (Redis); defaults to this process. */
  limiterStore?: (rule: BanRule) => LimiterStore
  /** The embedded data file, watched for being replaced and (when read-only) changed under the server. */
  dataFile?: DataFileWatch
  /** Called once when a read-only data file changes under the server (see SqliteStorage.changedOnDisk). */
  onDataFileChanged?: () => void
}

export interface DataFileWatch {
  replaced(): boolean
  changedOnDisk(): boolean
}

export interface PetstoreApp {
  app: AnyElysia
  keys: KeyRegistry
  limiter: RateLimiter
  metrics: Metrics
  /** The /metrics answer, for a listener of its own (--metrics-address). */
  answerMetrics: (request: Request) => Response
  /** Settles once keys and saved limits are loaded from storage: listen only after it. */
  loaded: Promise<void>
  /** Starts the timers: key reloads, limiter-state saves, idempotency purges. */
  startBackground(): void
  /** Stops the timers and writes what is still only in memory. */
  stopBackground(): Promise<void>
  /** Waits for the creates being committed, then closes the pet writer. */
  finishWrites(): Promise<void>
}

const KEY_POLL_MS = 250
const STATE_SAVE_MS = 5_000
const PURGE_MS = 60 * 60 * 1000
/** How long /readyz waits for storage to answer. */
const READY_TIMEOUT_MS = 1_000

export function createApp(config: Config, deps: AppDeps): PetstoreApp {
  const { storage } = deps
  const now = deps.now ?? Date.now
  const warn = deps.warn ?? ((message: string) => console.error(`petstore: ${message}`))
  const sink = deps.logSink === undefined ? Bun.stdout.writer() : deps.logSink
  const accessLog =
    sink && config.accessLog
      ? new AccessLog(sink, { onClosed: (reason) => warn(`${reason}; the access log is off from now on`) })
      : null
  const onInternalError = (error: unknown, requestId?: string) =>
    warn(`internal error${requestId ? ` in request ${requestId}` : ''}: ${(error as Error)?.stack ?? error}`)

  let warnedUnforwarded = false
  const onUnforwarded = (proxy: string, request: Request) => {
    // Only the API is limited by address: a local probe of /metrics or /healthz through no proxy is fine.
    if (warnedUnforwarded || !isApiPath(routedPath(request.url), config.basePath)) return
    warnedUnforwarded = true
    warn(
      `a request from the trusted proxy ${proxy} carried no X-Forwarded-For, so its clients share one address ` +
        'bucket and ban; have the proxy set it (nginx: proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for)',
    )
  }
  const metrics = new Metrics()
  const keys = new KeyRegistry(storage)
  const savedBuckets = storage.limiterState.load()
  // Filled below once loaded, before the server listens (storage that answers at once: right now).
  const saved = savedBuckets instanceof Promise ? new Map() : savedBuckets
  const limiter = new RateLimiter(
    {
      banAfter: config.banAfter,
      banSeconds: config.banSeconds,
      maxAddresses: config.maxTrackedAddresses,
      // A shared store keeps its own clock (Redis's), so instances' clocks do not matter; a clock
      // injected into the app (tests) is used by the limiter too.
      now: deps.limiterStore && !deps.now ? undefined : now,
      store: deps.limiterStore,
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
    saved,
  )
  let petsGeneration = 0
  const loaded = Promise.all([
    keys.reload(),
    Promise.resolve(storage.pets.generation()).then((generation) => {
      petsGeneration = generation
    }),
    savedBuckets instanceof Promise && savedBuckets.then((buckets) => buckets.forEach((bucket, subject) => saved.set(subject, bucket))),
  ]).then(() => {})
  // Once the data file is gone from under the server or found damaged, nothing it serves or takes can
  // be trusted until a restart: readiness and creates say so, and the log says it once.
  let fault: string | null = null
  const noteFault = (reason: string) => {
    if (fault) return
    fault = reason
    warn(`${reason}; /readyz and creates answer 503 until the server is restarted on a good data file`)
  }
  const storageFault = () => {
    if (!fault && deps.dataFile?.replaced()) noteFault('the data file was deleted or replaced under the server')
    return fault
  }
  const pets = new PetService(storage.pets, deps.petWriter ?? new InThreadPetWriter(storage.pets), {
    storageFault,
    onDamaged: (code) => noteFault(`the data file is damaged (${code})`),
    now,
    locationPrefix: () => `${config.baseUrl}/pets/`,
    onInternalError,
    onWritesRefused: (reason) =>
      warn(reason ? `storage refuses writes (${reason}); creates answer 503 until it accepts them` : 'storage accepts writes again'),
    soleWriter: storage.soleWriter,
  })
  const notReady = async (): Promise<string | null> => {
    const fault = storageFault()
    if (fault) return `Not ready: ${fault}.`
    try {
      await withTimeout(storage.ping(), READY_TIMEOUT_MS)
    } catch {
      return `Storage (${storage.location}) does not answer.`
    }
    // With the local fallback the server serves while Redis is away; without it, it cannot.
    if (deps.limiterStore && config.limiterFallback === 'closed' && !(await limiter.ping()))
      return 'The shared rate limiter (Redis) does not answer.'
    return null
  }

  const answerMetrics = metricsEndpoint(
    () =>
      metrics.render({
        petstore_rate_limiter_tracked_addresses: {
          help: 'Client addresses the rate limiter remembers.',
          value: limiter.trackedAddresses,
        },
        petstore_api_keys_active: { help: 'API keys that are not revoked.', value: keys.size },
        petstore_rate_limiter_degraded: {
          help: 'Whether limits are decided in this process because the shared limiter (Redis) does not answer.',
          value: limiter.degraded ? 1 : 0,
        },
        petstore_page_cache_chars: {
          help: `Characters of JSON held by the list-page cache (at most ${MAX_PAGE_UNITS}).`,
          value: pets.cacheSizes.pages,
        },
        petstore_pet_cache_chars: {
          help: `Characters of JSON held by the single-pet cache (at most ${MAX_PET_UNITS}).`,
          value: pets.cacheSizes.pets,
        },
        petstore_log_lines_dropped_total: {
          help: 'Access-log lines dropped because stdout was not read fast enough, or was closed.',
          value: accessLog?.dropped ?? 0,
          type: 'counter',
        },
      }),
    config.metricsToken,
  )

  // Filled once every route exists (below); read per request by the gate and the fallback.
  const operations = new Map<string, Map<string, string>>()
  const routeTable: RouteEntry[] = []
  const allowed = (path: string) => allowedMethods(routeTable, path)
  const notServed = (info: RequestInfo): never => {
    throw unrouted(allowed, info.path)
  }

  // Everything under the base path routes into this instance, unknown paths to its fallback, and the
  // gate is a hook of this instance: no router can reach an API handler around it.
  const api = new Elysia({ prefix: config.basePath })
    .decorate('info', undefined as unknown as RequestInfo)
    .use(
      gate({
        keys,
        limiter,
        metrics,
        corsEnabled: config.corsOrigins.length > 0,
        now,
        onBan: (subject, seconds) => warn(`banned ${subject} for ${seconds} s after repeated 429s`),
        operationOf: (method, route) => operations.get(route)?.get(method) ?? 'unmatched',
      }),
    )
    .use(
      petsModule({
        service: pets,
        baseUrl: () => config.baseUrl,
        maxBodyBytes: config.maxBodyBytes,
        onDeprecatedCall: (keyId) => metrics.deprecatedCall(keyId),
      }),
    )
    .use(storeModule())
    .use(preflight(config.corsOrigins, notServed))
    .all('', ({ info }) => notServed(info), { parse: 'none', detail: { hide: true } })
    .all('/*', ({ info }) => notServed(info), { parse: 'none', detail: { hide: true } })

  const app: AnyElysia = new Elysia({ name: 'petstore' })
    .use(errorHandler({ allowedMethods: allowed, onInternalError }))
    .use(requestContext({ server: () => app.server, metrics, accessLog, proxies: { trusted: config.trustProxy, onUnforwarded } }))
    .use(cors(config.corsOrigins))
    .use(
      opsModule({
        api: () => app,
        basePath: config.basePath,
        servers: () => config.servers,
        version: VERSION,
        notReady,
        metrics: config.metricsAddress ? null : answerMetrics,
      }),
    )
    .use(api)

  for (const route of app.routes) {
    const operationId = (route.hooks as { detail?: { operationId?: string } } | undefined)?.detail?.operationId
    if (!operationId) continue
    if (!operations.has(route.path)) operations.set(route.path, new Map())
    operations.get(route.path)!.set(route.method, operationId)
  }
  routeTable.push(...buildRouteTable(app.routes))

  const onDataFileChanged =
    deps.onDataFileChanged ?? (() => warn('the read-only data file changed on disk; restart to read it again'))
  const timers: ReturnType<typeof setInterval>[] = []
  const saveState = async () => {
    if (!storage.writable) return
    // Two saves, each reported as itself: one failing does not keep the other from being tried.
    try {
      const buckets = limiter.unsavedDayBuckets()
      await storage.limiterState.save(buckets)
      limiter.markSaved(buckets)
    } catch (error) {
      warn(`could not save rate-limit state: ${(error as Error).message}`)
    }
    try {
      await keys.flushLastUsed()
    } catch (error) {
      warn(`could not save the keys' last-used times: ${(error as Error).message}`)
    }
  }
  /** Runs a task every `ms`; a task still running when the next turn comes is not started twice. */
  const every = (ms: number, task: () => MaybePromise<void>) => {
    let running = false
    const timer = setInterval(async () => {
      if (running) return
      running = true
      try {
        await task()
      } finally {
        running = false
      }
    }, ms)
    timer.unref()
    timers.push(timer)
  }

  let pollFailing = false
  const unappliedResets = new Map<string, number | null>()
  /** Changes other processes made: keys created or revoked, pets seeded or reset, limits reset. */
  const pollChanges = async () => {
    storageFault()
    try {
      await keys.reload()
      const generation = await storage.pets.generation()
      if (generation !== petsGeneration) pets.dropCaches()
      petsGeneration = generation
      if (storage.writable) for (const { keyId, seq } of await storage.keys.takeLimitResets()) unappliedResets.set(keyId, seq)
      // A reset is kept until the limiter has applied it (Redis may be away right now).
      for (const [id, seq] of unappliedResets) {
        await limiter.forgetKey(`key:${id}`, seq ?? undefined)
        unappliedResets.delete(id)
      }
      if (pollFailing) warn('storage answers the change poll again')
      pollFailing = false
    } catch (error) {
      // Tried again at the next poll; said once, not four times a second.
      if (!pollFailing) warn(`could not check storage for changes made by other processes: ${(error as Error).message}`)
      pollFailing = true
    }
  }

  return {
    app,
    keys,
    limiter,
    metrics,
    answerMetrics,
    loaded,
    startBackground() {
      let watchingFile = deps.dataFile !== undefined
      every(KEY_POLL_MS, async () => {
        if (watchingFile && deps.dataFile!.changedOnDisk()) {
          watchingFile = false
          onDataFileChanged()
        }
        await pollChanges()
      })
      every(STATE_SAVE_MS, saveState)
      every(PURGE_MS, async () => {
        if (!storage.writable) return
        try {
          await storage.purgeIdempotency(now() - IDEMPOTENCY_TTL_MS)
        } catch (error) {
          warn(`could not purge idempotency records: ${(error as Error).message}`)
        }
      })
    },
    async stopBackground() {
      for (const timer of timers.splice(0)) clearInterval(timer)
      await saveState()
      await limiter.close()
      accessLog?.close()
    },
    finishWrites: () => pets.close(),
  }
}

function isApiPath(path: string | ApiError, basePath: string): boolean {
  return typeof path === 'string' && (path === basePath || path.startsWith(`${basePath}/`))
}

/** Rejects when `value` has not settled within `ms`. */
function withTimeout<T>(value: MaybePromise<T>, ms: number): Promise<T> {
  if (!(value instanceof Promise)) return Promise.resolve(value)
  let timer: ReturnType<typeof setTimeout> | undefined
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms)
  })
  return Promise.race([value, timeout]).finally(() => clearTimeout(timer))
}

interface RouteEntry {
  path: string
  pattern: RegExp
  methods: string[]
}

function buildRouteTable(routes: { method: string; path: string }[]): RouteEntry[] {
  const byPath = new Map<string, Set<string>>()
  for (const { method, path } of routes) {
    if (method === 'OPTIONS' || method === 'ALL' || path.includes('*')) continue
    if (!byPath.has(path)) byPath.set(path, new Set())
    byPath.get(path)!.add(method)
  }
  return [...byPath].map(([path, methods]) => ({
    path,
    pattern: new RegExp(`^${path.replace(/[.+?^${}()|[\]\\]/g, '\\$&').replace(/:[^/]+/g, '[^/]+')}/?$`),
    methods: [...methods].sort(),
  }))
}

function allowedMethods(table: RouteEntry[], path: string): string[] | null {
  return table.find((entry) => entry.pattern.test(path))?.methods ?? null
}
