/**
 * One server's life, written once and used by `petstore serve` (and so by the benchmark, which runs
 * it) and by the in-process test servers: open storage, build the app, load its state, listen, start
 * the background jobs; and stop in reverse. Every start that fails and every stop go through the same
 * teardown.
 */
import { createApp, type AppDeps, type PetstoreApp, VERSION } from './app'
import { limiterBackendFactory, type LimiterBackendFactory, openStorageBackend, type StorageBackend } from './backends'
import { type Config, ConfigError, hostInUrl, withBoundPort } from './config'
import { redactedUrl } from './domain/redacted-url'
import { errorResponse, notFound } from './http/api-errors'
import type { AnyElysia } from './http/openapi'
import { Jobs, type JobOptions } from './jobs'
import { consoleModule } from './modules/console'
import type { SavedBucket } from './domain/repositories'

export interface ServerOptions extends Pick<AppDeps, 'now' | 'logSink' | 'warn'>, Pick<JobOptions, 'onDataFileChanged'> {
  /** The storage to serve from; by default opened from the config (backends.ts). Tests bring their own. */
  backend?: StorageBackend
  /** Where the limiter keeps its state; by default chosen from the config (Redis, or this process). */
  limiterBackend?: LimiterBackendFactory
  /**
   * Runs once the port is ours and before the jobs start (serve makes the bootstrap key here, so a
   * start that fails never leaves a secret nobody can use). When it throws, the start is undone.
   */
  onListening?: (server: Server) => Promise<void>
}

/** What stopping gives storage to take the last writes and the rate-limit state, even after a full drain. */
const STOP_SAVE_MS = 1_000
/** How long a start waits for a shared limiter (Redis) before it says that it does not answer. */
const REDIS_WAIT_MS = 3_000

export class Server {
  private metricsListener: ReturnType<typeof Bun.serve> | undefined
  /** The operators' console, on its own listener (--console-address). */
  private console: AnyElysia | undefined
  private stopped: Promise<boolean> | undefined

  private constructor(
    /** The config the app was built from: with `--port 0`, the port bound. */
    readonly config: Config,
    readonly petstore: PetstoreApp,
    readonly backend: StorageBackend,
    private readonly jobs: Jobs,
    private readonly warn: (message: string) => void,
  ) {}

  /** Opens storage, builds the app, loads its state, listens and starts the jobs; or undoes it all. */
  static async start(config: Config, options: ServerOptions = {}): Promise<Server> {
    const warn = options.warn ?? ((message: string) => console.error(`petstore: ${message}`))
    const backend = options.backend ?? (await openStorageBackend(config))
    if (config.database && !config.redisUrl)
      warn('rate limits are per instance: with several instances, give them --redis-url to share them')
    let bound: Config
    let savedLimits: Map<string, SavedBucket>
    try {
      bound = config.port === 0 ? withBoundPort(config, freePort(config.host)) : config
      savedLimits = await backend.storage.limiterState.load()
    } catch (error) {
      await backend.close()
      backend.undo()
      throw error
    }
    const petstore = createApp(bound, {
      storage: backend.storage,
      now: options.now,
      logSink: options.logSink,
      warn,
      limiterBackend: options.limiterBackend ?? limiterBackendFactory(bound),
      savedLimits,
      petWriter: backend.petWriter,
      dataFile: backend.dataFile,
    })
    const jobs = new Jobs(petstore, backend.storage, {
      now: options.now ?? Date.now,
      warn,
      dataFile: backend.dataFile,
      onDataFileChanged: options.onDataFileChanged,
    })
    const server = new Server(bound, petstore, backend, jobs, warn)
    try {
      await jobs.load()
      if (bound.redisUrl && !(await waitFor(() => petstore.limiter.ping(), REDIS_WAIT_MS)))
        warn(
          `Redis at ${redactedUrl(bound.redisUrl)} does not answer yet; ` +
            (bound.limiterFallback === 'local' ? 'limiting in this process until it does' : 'API requests answer 503 until it does'),
        )
      server.listen()
      await options.onListening?.(server)
    } catch (error) {
      // Nothing is served half started: the listeners go, and the start fails with one line.
      await server.stop()
      backend.undo()
      throw error
    }
    jobs.start()
    return server
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
   * Stops in reverse order of the start, but for one swap: the listener drains first (up to `graceMs`
   * for the requests in flight), then the writes those requests started finish, and only then the jobs
   * stop, so that their last save of the rate-limit state comes after the last request; storage closes
   * last. Storage that does not answer (a frozen database) must not keep the process past its drain:
   * false when the teardown did not finish by then (at least STOP_SAVE_MS after the drain).
   */
  stop(graceMs = 0): Promise<boolean> {
    this.stopped ??= this.teardown(graceMs)
    return this.stopped
  }

  private async teardown(graceMs: number): Promise<boolean> {
    const drainEnds = Date.now() + graceMs
    const listener = this.petstore.app.server
    if (listener) {
      await Promise.race([listener.stop(false), Bun.sleep(graceMs)])
      await listener.stop(true)
    }
    await this.metricsListener?.stop(true)
    await this.console?.server?.stop(true)
    const finished = async () => {
      await this.petstore.finishWrites()
      await this.jobs.stop()
      await this.petstore.close()
      await this.backend.close()
      return true
    }
    // A timer of its own, cleared once settled: a start that failed ends the process by returning.
    let timer: ReturnType<typeof setTimeout> | undefined
    const late = new Promise<false>((resolve) => {
      timer = setTimeout(() => resolve(false), Math.max(drainEnds - Date.now(), STOP_SAVE_MS))
    })
    return Promise.race([finished(), late]).finally(() => clearTimeout(timer))
  }

  /**
   * The API's listener, /metrics' own when it has an address, and the console's. Elysia asks for SO_REUSEPORT by
   * default, which would let a second server start on a port in use and split the traffic between two
   * data files; development mode would show Bun's error pages.
   */
  private listen(): void {
    const { config, petstore } = this
    let binding = `${hostInUrl(config.host)}:${config.port}`
    try {
      petstore.app.listen({ hostname: config.host, port: config.port, reusePort: false, development: false })
      if (config.metricsAddress) {
        binding = `${hostInUrl(config.metricsAddress.host)}:${config.metricsAddress.port}`
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
        binding = `${hostInUrl(config.consoleAddress.host)}:${config.consoleAddress.port}`
        this.console = this.buildConsole().listen({
          hostname: config.consoleAddress.host,
          port: config.consoleAddress.port,
          reusePort: false,
          development: false,
        })
      }
    } catch (error) {
      throw new ConfigError(`cannot listen on ${binding}: ${(error as Error).message}`)
    }
  }

  private buildConsole(): AnyElysia {
    const { config, petstore, backend } = this
    return consoleModule({
      storage: backend.storage,
      keys: petstore.keys,
      limiter: petstore.limiter,
      recent: petstore.recent,
      now: Date.now,
      trustProxy: config.trustProxy,
      version: VERSION,
      onInternalError: (error) => this.warn(`internal error in the console: ${(error as Error)?.stack ?? error}`),
    })
  }
}

/**
 * A port that is free now, for `--port 0`: the app is built from a complete, read-only config, and its
 * links name the port it serves on, so the port is chosen before the app is built rather than read
 * back after listening. The system picks it, as it would for the listener itself.
 */
function freePort(host: string): number {
  try {
    const probe = Bun.listen({ hostname: host, port: 0, socket: { data() {} } })
    const { port } = probe
    probe.stop(true)
    return port
  } catch (error) {
    throw new ConfigError(`cannot listen on ${hostInUrl(host)}:0: ${(error as Error).message}`)
  }
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
