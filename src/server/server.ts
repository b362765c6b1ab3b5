/**
 * One server's life, for `petstore serve` and the in-process test servers: open storage, build the app,
 * load its state, listen, start the jobs; stop in reverse, through the same teardown as a failed start.
 * How a start comes by the data file and the port (an Arrival) is given: AFRESH, or takeover.ts's.
 */
import { createApp, type AppDeps, type PetstoreApp } from './app'
import { VERSION } from './build-info'
import { limiterBackendFactory, type LimiterBackendFactory, openStorageBackend } from './backends'
import { type Config, ConfigError, hostInUrl, withBoundPort } from '../config'
import { redactedUrl } from '../domain/redacted-url'
import type { LimiterHandover, SavedBucket, Storage, StorageBackend } from '../domain/repositories'
import { keySubject } from '../domain/subject'
import { errorResponse, notFound } from '../http/api-errors'
import type { AnyElysia } from '../http/openapi'
import { Jobs, type JobOptions } from './jobs'
import { consoleModule, type KeylessLimits } from '../modules/console'
import { PLAN_LIMITS } from '../domain/plans'
import { withDeadline } from '../domain/time'
import { LimiterUnavailableError } from '../limiter/backend'
import type { RateLimiter } from '../limiter/limiter'
import { refusal } from '../plugins/gate'

export interface ServerOptions extends Partial<Pick<AppDeps, 'now' | 'logSink' | 'warn'>>, Pick<JobOptions, 'onDataFileChanged'> {
  /** The storage to serve from; by default opened from the config (backends.ts). Tests bring their own. */
  backend?: StorageBackend
  /** Where the limiter keeps its state; by default chosen from the config (Redis, or this process). */
  limiterBackend?: LimiterBackendFactory
  /** Runs once the port is ours, before the jobs (the bootstrap key is made here); a throw undoes the start. */
  onListening?: (server: Server) => Promise<void>
  /** How this start comes by the data file and the port: AFRESH unless given (takeover.ts takeOver). */
  arrive?: (config: Config, warn: (message: string) => void) => Arrival
}

/** How a start comes by the data file and the port: AFRESH, or by a takeover (takeover.ts). */
export interface Arrival {
  /** How long opening the data file waits for another server to release it, instead of refusing. */
  lockWaitMs?: number
  /** The data file as this process checked it and held it until a moment ago: not read whole again (serving again). */
  checked?: string
  /** Before the API listens with SO_REUSEPORT: afresh nothing may listen there (two data files would split traffic). */
  checkPort(host: string, port: number): void
  /** The API listens, but /metrics' or the console's `listener` cannot (`reason`): afresh the start fails. */
  without(listener: string, reason: string): void
  /** The app listens. */
  ready(petstore: PetstoreApp): void
  /** The start failed; then what it made is undone. */
  fail(): Promise<void>
}

/** A start on a port this process holds (`--port 0`): as afresh, but the port is known to be its own. */
const HELD = (arrival: Arrival): Arrival => ({ ...arrival, checkPort() {} })

export const AFRESH: Arrival = {
  checkPort: bindUnshared,
  without(_listener, reason) {
    throw new ConfigError(reason)
  },
  ready() {},
  async fail() {},
}

/**
 * Before its listener closes, a stopping server (a plain stop, or a hand-over) answers with `Connection:
 * close` until QUIET_MS pass without a request (at most CLOSE_CONNECTIONS_MS): a request sent on a
 * kept-alive connection as Bun closes it would be reset unanswered, where after `Connection: close` its
 * client sends it on a new connection, to this server while it listens, then to the server taking over,
 * or refused (never sent) once nothing listens. A new connection whose request Bun has not read yet as
 * the listener closes is still cut: Bun closes it as idle.
 */
const QUIET_MS = 50
export const CLOSE_CONNECTIONS_MS = 500
/** What stopping gives storage to take the last writes and the rate-limit state, even after a full drain. */
export const STOP_SAVE_MS = 1_000
/** How long a start waits for a shared limiter (Redis) before it says that it does not answer. */
const REDIS_WAIT_MS = 3_000

export class Server {
  private metricsListener: ReturnType<typeof Bun.serve> | undefined
  /** The operators' console, on its own listener (--console-address). */
  private console: AnyElysia | undefined
  private stopped: Promise<boolean> | undefined
  /** Kept-alive clients were let go (letConnectionsGo): the stop after a hand-over does not ask them again. */
  private connectionsLet = false

  private constructor(
    /** The config the app was built from: with `--port 0`, the port bound. */
    readonly config: Config,
    readonly petstore: PetstoreApp,
    readonly backend: StorageBackend,
    private readonly jobs: Jobs,
    readonly warn: (message: string) => void,
  ) {}

  /** Opens storage, builds the app, loads its state, listens and starts the jobs; or undoes it all. */
  static async start(config: Config, options: ServerOptions = {}): Promise<Server> {
    const warn = options.warn ?? ((message: string) => console.error(`petstore: ${message}`))
    const arrival = options.arrive?.(config, warn) ?? AFRESH
    let backend: StorageBackend | undefined
    let server: Server | undefined
    // `--port 0`: the port the kernel gives is held until the API listens beside it, so nothing else takes
    // it in between (released and bound again later, another program's socket took it now and then).
    let held: Bun.Server<undefined> | null = null
    try {
      if (config.port === 0) held = holdFreePort(config.host)
      backend = options.backend ?? (await openStorageBackend(config, { lockWaitMs: arrival.lockWaitMs, checked: arrival.checked }))
      if (config.database && !config.redisUrl)
        warn('rate limits are per instance: with several instances, give them --redis-url to share them')
      const bound = held ? withBoundPort(config, held.port!) : config
      // Building the app is part of the start that is undone: it may refuse the config (the limiter's rule).
      const petstore = createApp(bound, {
        storage: backend.storage,
        now: options.now,
        logSink: options.logSink,
        warn,
        limiterBackend: options.limiterBackend ?? limiterBackendFactory(bound),
        savedLimits: await withLimitsNow(backend.storage),
        handedOver: backend.handedOver,
        petWriter: backend.petWriter,
        dataFile: backend.dataFile,
      })
      const jobs = new Jobs(petstore, backend.storage, {
        now: options.now ?? Date.now,
        warn,
        dataFile: backend.dataFile,
        keepLock: backend.keepLock,
        usageRetention: bound.usageRetention,
        onDataFileChanged: options.onDataFileChanged,
      })
      server = new Server(bound, petstore, backend, jobs, warn)
      await jobs.load()
      if (bound.redisUrl && !(await waitFor(() => petstore.limiter.ping(), REDIS_WAIT_MS)))
        warn(
          `Redis at ${redactedUrl(bound.redisUrl)} does not answer yet${petstore.limiter.failure ? ` (${petstore.limiter.failure})` : ''}; ` +
            (bound.limiterFallback === 'local' ? 'limiting in this process until it does' : 'API requests answer 503 until it does'),
        )
      server.listen(held ? HELD(arrival) : arrival, warn)
      held?.stop(true)
      arrival.ready(petstore)
      await options.onListening?.(server)
      jobs.start()
      return server
    } catch (error) {
      held?.stop(true)
      // Nothing is served half started: what the start made goes (the listeners too), and it fails with one line.
      await arrival.fail()
      // A server leaves the rate-limit state at its stop; before there is one, what was read goes back as it was.
      if (!server && backend?.handedOver) leaveAgain(backend, backend.handedOver, warn)
      await (server ? server.stop() : backend?.close())
      backend?.undo()
      throw error
    }
  }

  get port(): number {
    return this.petstore.app.server!.port!
  }

  get metricsPort(): number | undefined {
    return this.metricsListener?.port
  }

  get consolePort(): number | undefined {
    return this.console?.server?.port
  }

  /**
   * Asks kept-alive clients to leave (see QUIET_MS) until they are quiet. False, connections kept, as soon
   * as `wanted` says the stop is off (a hand-over whose successor died first).
   */
  async letConnectionsGo(wanted: () => boolean = () => true): Promise<boolean> {
    if (this.connectionsLet || !this.petstore.app.server) return true
    const closing = this.petstore.closeConnections()
    const deadline = Date.now() + CLOSE_CONNECTIONS_MS
    for (;;) {
      if (!wanted()) {
        closing.keep()
        return false
      }
      if (closing.quietMs() >= QUIET_MS || Date.now() >= deadline) break
      await Bun.sleep(10)
    }
    this.connectionsLet = true
    return true
  }

  /**
   * Stops in reverse: delayed answers end (503), kept-alive clients are let go (with a grace), the
   * listener drains (up to `graceMs`), the limiter's state is left for the next server on the data file
   * (a takeover's or a plain restart's: a file beside it, so storage that does not take writes cannot
   * keep it from being left), the writes the requests started finish, then the jobs stop (their last
   * save after the last request), storage closes. False when storage did not take the last writes, or
   * did not finish by the drain's end (at least STOP_SAVE_MS after it, or the backend's write patience
   * when longer).
   */
  stop(graceMs = 0): Promise<boolean> {
    this.stopped ??= this.teardown(graceMs)
    return this.stopped
  }

  private async teardown(graceMs: number): Promise<boolean> {
    this.petstore.stopBegins()
    // Without a grace (a start that failed, a test's server) what is in flight is cut anyway.
    if (graceMs > 0) await this.letConnectionsGo()
    const drainEnds = Date.now() + graceMs
    const listener = this.petstore.app.server
    if (listener) {
      await Promise.race([listener.stop(false), Bun.sleep(graceMs)])
      await listener.stop(true)
    }
    await this.metricsListener?.stop(true)
    await this.console?.server?.stop(true)
    const finished = async () => {
      // No request is decided after the listeners stop. Before the lock goes: the next start reads it.
      leaveAgain(this.backend, this.petstore.limiter.handover(), this.warn)
      await this.petstore.finishWrites()
      const saved = await this.jobs.stop()
      await this.petstore.close()
      await this.backend.close()
      return saved
    }
    // A start that failed ends the process by returning: the deadline's timer goes once settled (withDeadline).
    const saveMs = Math.max(STOP_SAVE_MS, this.backend.writePatienceMs ?? 0)
    return withDeadline(finished(), Math.max(drainEnds - Date.now(), saveMs), () => false)
  }

  /** The API's listener, /metrics' own, and the console's. Development mode would show Bun's error pages. */
  private listen(arrival: Arrival, warn: (message: string) => void): void {
    const { config, petstore } = this
    let binding = `${hostInUrl(config.host)}:${config.port}`
    let listener = 'the API'
    let flag = ''
    try {
      arrival.checkPort(config.host, config.port)
      petstore.app.listen({ hostname: config.host, port: config.port, reusePort: true, development: false })
      if (config.metricsAddress) {
        binding = `${hostInUrl(config.metricsAddress.host)}:${config.metricsAddress.port}`
        listener = '/metrics'
        this.metricsListener = Bun.serve({
          hostname: config.metricsAddress.host,
          port: config.metricsAddress.port,
          reusePort: false,
          development: false,
          routes: { '/metrics': petstore.answerMetrics },
          fetch: () => errorResponse(notFound('This listener serves /metrics only.')),
        })
      }
      if (config.consoleAddress) {
        const { host, port } = config.consoleAddress
        binding = `${hostInUrl(host)}:${port}`
        listener = 'the console'
        flag = ", the console's address (--console-address)"
        try {
          this.console = this.buildConsole().listen({ hostname: host, port, reusePort: false, development: false })
        } catch (error) {
          // The default is a fixed port another program (or a second petstore) may hold: that must not
          // keep the API from serving. An address the operator gave still stops the start.
          if (!config.consoleByDefault) throw error
          warn(
            `the console's default address ${hostInUrl(host)}:${port} is taken (${(error as Error).message}); ` +
              'serving the API without the console: --console-address HOST:PORT puts it elsewhere',
          )
        }
      }
    } catch (error) {
      const reason = `cannot listen on ${binding}${flag}: ${(error as Error).message}`
      if (!petstore.app.server) throw new ConfigError(reason)
      arrival.without(listener, reason)
    }
  }

  private buildConsole(): AnyElysia {
    const { config, petstore, backend } = this
    return consoleModule({
      storage: backend.storage,
      keys: petstore.keys,
      limiter: petstore.limiter.admin,
      keyless: keylessLimits(petstore.limiter),
      recent: petstore.recent,
      now: Date.now,
      trustProxy: config.trustProxy,
      address: config.consoleAddress!,
      hosts: config.consoleHosts,
      version: VERSION,
      environment: config.env,
      onInternalError: (error) => this.warn(`internal error in the console: ${(error as Error)?.stack ?? error}`),
      damaged: petstore.damaged,
      storageFault: () => petstore.fault.current(),
    })
  }
}

/**
 * A free port for `--port 0`, taken before the app is built so that its config and links name it, and
 * held (shared with SO_REUSEPORT, as the API's listener binds) until the API listens there too. Its
 * port is announced only after, so no client reaches the holder.
 */
function holdFreePort(host: string): Bun.Server<undefined> {
  try {
    return Bun.serve({ hostname: host, port: 0, reusePort: true, development: false, fetch: () => new Response(null, { status: 503 }) })
  } catch (error) {
    throw new ConfigError(`cannot listen on ${hostInUrl(host)}:0: ${(error as Error).message}`)
  }
}

/** Binds the address without sharing it, and lets it go: throws while anything listens there. */
export function bindUnshared(host: string, port: number): void {
  void Bun.serve({ hostname: host, port, reusePort: false, fetch: () => new Response() }).stop(true)
}

/** Asks `check` until it says yes or `ms` have passed; the answer at the end. */
async function waitFor(check: () => Promise<boolean>, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms
  while (!(await check())) {
    if (Date.now() > deadline) return false
    await Bun.sleep(50)
  }
  return true
}

/**
 * The saved day buckets; those from before their limits were kept take their keys' limits now (a plan
 * changed while no server ran deleted such a bucket), so a change while this server runs still starts
 * afresh. The keys are read only for them.
 */
async function withLimitsNow(storage: Storage): Promise<Map<string, SavedBucket>> {
  const saved = await storage.limiterState.load()
  if ([...saved.values()].every((bucket) => bucket.limits)) return saved
  const limits = new Map((await storage.keys.list()).map((key) => [keySubject(key.id).name, { rpm: key.rpm, rpd: key.rpd }]))
  for (const [name, bucket] of saved) bucket.limits ??= limits.get(name)
  return saved
}

/** Leaves the rate-limit state for the next start on the data file; one that cannot be written costs a warning, not the stop. */
export function leaveAgain(backend: StorageBackend, state: LimiterHandover, warn: (message: string) => void): void {
  try {
    backend.leave?.(state)
  } catch (error) {
    warn(`could not leave the rate-limit state for the next start: ${(error as Error).message}`)
  }
}

/** The API's limits for requests without a valid key, for the console (see KeylessLimits). */
function keylessLimits(limiter: RateLimiter): KeylessLimits {
  const answering = async <T>(ask: () => Promise<T>, otherwise: T): Promise<T> => {
    try {
      return await ask()
    } catch (error) {
      if (error instanceof LimiterUnavailableError) return otherwise
      throw error
    }
  }
  return {
    refuses: (subject) => answering(() => limiter.refuses(subject, PLAN_LIMITS.free), false),
    take: (subject) =>
      answering(async () => {
        const decision = await limiter.check(subject, PLAN_LIMITS.free)
        return decision.allowed ? undefined : refusal(decision, true)
      }, undefined),
  }
}
