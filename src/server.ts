/**
 * One server's life, written once and used by `petstore serve` (and so by the benchmark, which runs
 * it) and by the in-process test servers: open storage, build the app, load its state, listen, start
 * the background jobs; and stop in reverse. Every start that fails and every stop go through the same
 * teardown.
 *
 * A takeover (`serve --takeover`, embedded mode, Linux) replaces a running server with no refused
 * request. Both listen with SO_REUSEPORT, so the kernel spreads new connections over both sockets:
 *  1. the new server checks that it can serve the data file (readable, a schema it knows) and finds
 *     the old one's process id in the lock; any failure so far leaves the old one untouched;
 *  2. it listens beside the old one, holding the requests that reach it until it is ready;
 *  3. it sends SIGUSR2, a signal petstore has no other use for and that needs no socket or file
 *     protocol of its own: the old server answers every request from then on with
 *     `Connection: close` (see CLOSE_CONNECTIONS_MS), so kept-alive clients leave after their current
 *     answer, then stops as on SIGTERM (in-flight answers sent, day buckets saved), writes the rest of
 *     the rate-limit state (buckets, bans) beside the data file and releases the lock. It checks that
 *     the new server lives until its listener closes, and withdraws (keeps serving) if it died;
 *  4. the new server takes the lock (waiting for it, bounded), loads the state, listens with its app,
 *     lets the held requests through and drops its claim. The old one exits 0 once it sees the claim
 *     go, or opens the file and serves again if the new one died first. Connections the kernel had
 *     queued on the old socket when it closed move to the new one only with net.ipv4.tcp_migrate_req=1
 *     (docs/upgrading.md).
 */
import { createApp, type AppDeps, type PetstoreApp, VERSION } from './app'
import { claimDataFile, limiterBackendFactory, type LimiterBackendFactory, openStorageBackend, runningServerOf, type StorageBackend } from './backends'
import { type Config, ConfigError, hostInUrl, withBoundPort } from './config'
import { redactedUrl } from './domain/redacted-url'
import { errorResponse, notFound, unavailable } from './http/api-errors'
import type { AnyElysia } from './http/openapi'
import { Jobs, type JobOptions } from './jobs'
import { consoleModule } from './modules/console'
import { StorageOpenError, type SavedBucket } from './domain/repositories'

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
  /** Take over from the server running on the same data file and port (see the header). */
  takeover?: boolean
}

/** What stopping gives storage to take the last writes and the rate-limit state, even after a full drain. */
const STOP_SAVE_MS = 1_000
/** How long a start waits for a shared limiter (Redis) before it says that it does not answer. */
const REDIS_WAIT_MS = 3_000
/**
 * Before its listener closes, a server handing over answers with `Connection: close` until no request
 * has arrived for QUIET_MS (at once, when idle), or for at most CLOSE_CONNECTIONS_MS under load: Bun
 * closes idle kept-alive connections when the listener stops, and a request sent on one just then
 * would be lost, where after a `Connection: close` its client connects again, to the new server. (On
 * SIGTERM there is no new server to go to, so the stop does not wait for this.)
 */
const QUIET_MS = 50
const CLOSE_CONNECTIONS_MS = 500

export class Server {
  private metricsListener: ReturnType<typeof Bun.serve> | undefined
  /** The operators' console, on its own listener (--console-address). */
  private console: AnyElysia | undefined
  private stopped: Promise<boolean> | undefined
  private handingOver = false
  /** The process this server is handing over to. */
  private successor: number | null = null

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
    const takeover = options.takeover ? prepareTakeover(config, warn) : undefined
    let backend: StorageBackend
    try {
      backend = options.backend ?? (await openStorageBackend(config, { lockWaitMs: takeover?.lockWaitMs }))
    } catch (error) {
      await takeover?.fail()
      throw error
    }
    if (config.database && !config.redisUrl)
      warn('rate limits are per instance: with several instances, give them --redis-url to share them')
    let bound: Config
    let savedLimits: Map<string, SavedBucket>
    try {
      bound = config.port === 0 ? withBoundPort(config, freePort(config.host)) : config
      savedLimits = await backend.storage.limiterState.load()
    } catch (error) {
      await takeover?.fail()
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
      handedOver: backend.handedOver,
      petWriter: backend.petWriter,
      dataFile: backend.dataFile,
    })
    const jobs = new Jobs(petstore, backend.storage, {
      now: options.now ?? Date.now,
      warn,
      dataFile: backend.dataFile,
      usageRetention: bound.usageRetention,
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
      server.listen(takeover !== undefined, warn)
      takeover?.ready(petstore)
      await options.onListening?.(server)
    } catch (error) {
      // Nothing is served half started: the listeners go, and the start fails with one line.
      await takeover?.fail()
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

  /** Whether a live server claims this one's data file to take over: SIGUSR2 is acted on only then. */
  get takeoverAsked(): boolean {
    return (this.backend.claimant?.() ?? null) !== null
  }

  /**
   * Stops for a server that takes over (see the header): as stop, and the rate-limit state is handed
   * over before the lock is released. Only while the claimant lives: it is checked until the listener
   * closes, and if it died meanwhile (`kill -9`) this server withdraws, removes its claim and keeps
   * serving ('withdrawn'). After that, awaitSuccessor tells whether it made it.
   */
  async handOver(graceMs: number): Promise<boolean | 'withdrawn'> {
    if (this.stopped) return this.stopped
    const claimant = this.backend.claimant?.() ?? null
    if (claimant === null) return 'withdrawn'
    this.handingOver = true
    this.successor = claimant
    if (this.petstore.app.server && !(await this.letConnectionsGo(claimant))) {
      this.handingOver = false
      this.successor = null
      this.petstore.keepConnections()
      this.backend.dropDeadClaim?.()
      return 'withdrawn'
    }
    return this.stop(graceMs)
  }

  /**
   * Once handed over (the lock released), waits until the successor serves, or dies before it does:
   * then 'gone', and the caller starts serving again. 'late' when it has neither served nor died
   * within `ms` (a successor older than this check never says that it serves), or once `given up`.
   */
  async awaitSuccessor(ms: number, givenUp: () => boolean): Promise<'serving' | 'gone' | 'late'> {
    const pid = this.successor
    if (pid === null || !this.backend.takeoverProgress) return 'serving'
    const deadline = Date.now() + ms
    for (;;) {
      const progress = this.backend.takeoverProgress(pid)
      if (progress !== 'starting') return progress
      if (Date.now() > deadline || givenUp()) return 'late'
      await Bun.sleep(20)
    }
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
      if (this.handingOver) this.backend.handOver?.(this.petstore.limiter.handover())
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
   * Kept-alive clients are asked to leave, until they have gone quiet (see QUIET_MS); false as soon as
   * the claimant is no longer alive, the last check right before the listener would close.
   */
  private async letConnectionsGo(claimant: number): Promise<boolean> {
    const idleMs = this.petstore.closeConnections()
    const deadline = Date.now() + CLOSE_CONNECTIONS_MS
    for (;;) {
      if (this.backend.claimant?.() !== claimant) return false
      if (idleMs() >= QUIET_MS || Date.now() >= deadline) return true
      await Bun.sleep(10)
    }
  }

  /**
   * The API's listener, /metrics' own when it has an address, and the console's. The API's asks for
   * SO_REUSEPORT, so that a later server can take over beside it; a second server must not start on a
   * port in use and split the traffic between two data files, so unless this start is a takeover the
   * port is first checked with a socket that does not share it. Development mode would show Bun's
   * error pages.
   */
  private listen(beside: boolean, warn: (message: string) => void): void {
    const { config, petstore } = this
    let binding = `${hostInUrl(config.host)}:${config.port}`
    let listener = 'the API'
    let flag = ''
    try {
      // A listener that does not share the port binds only while nothing else listens there.
      if (!beside) bindUnshared(config.host, config.port)
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
        flag = "; it is the console's address (--console-address)"
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
      const reason = `cannot listen on ${binding}: ${(error as Error).message}${flag}`
      // Taking over, the server handing over is gone by now: serving without /metrics or the console
      // beats not serving.
      if (beside && petstore.app.server) return warn(`${reason}; serving without ${listener}`)
      throw new ConfigError(reason)
    }
  }

  private buildConsole(): AnyElysia {
    const { config, petstore, backend } = this
    return consoleModule({
      storage: backend.storage,
      keys: petstore.keys,
      limiter: petstore.limiter.admin,
      recent: petstore.recent,
      now: Date.now,
      trustProxy: config.trustProxy,
      address: config.consoleAddress!,
      hosts: config.consoleHosts,
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

/** Binds the address without sharing it, and lets it go: throws while anything listens there. */
function bindUnshared(host: string, port: number): void {
  void Bun.serve({ hostname: host, port, reusePort: false, fetch: () => new Response() }).stop(true)
}

/** A takeover under way, from the new server's side (see the header). */
interface Takeover {
  /** How long to wait for the old server to release the data file. */
  lockWaitMs: number
  /** The app listens: the held requests go to it, and the holding listener closes. */
  ready(petstore: PetstoreApp): void
  /** The start failed after the old server was asked to stop: held requests get 503. */
  fail(): Promise<void>
}

/**
 * Steps 1 to 3 of a takeover: checks, listening beside the old server, SIGUSR2. Throws, with one line,
 * while the old server is still untouched; returns undefined when no server holds the file, which is
 * then simply started (so a unit that always says --takeover also starts from nothing).
 */
function prepareTakeover(config: Config, warn: (message: string) => void): Takeover | undefined {
  if (config.database)
    throw new ConfigError(
      '--takeover serves a data file; with PostgreSQL, run several instances behind a proxy and restart them one at a time (docs/upgrading.md)',
    )
  if (config.port === 0) throw new ConfigError('--takeover needs the port the running server listens on, not 0')
  const refused = (reason: string) => new StorageOpenError(`cannot take over: ${reason}; the running server keeps serving`)
  const pid = runningServerOf(config, refused)
  if (pid === null) {
    warn(`--takeover: no server holds ${config.dataFile}, starting afresh`)
    return undefined
  }
  // The lock names the process, not where it listens: a port nobody listens on would stop the running
  // server and leave its own port with nothing behind it. Only a listener there makes this bind fail.
  let nobodyListens = false
  try {
    bindUnshared(config.host, config.port)
    nobodyListens = true
  } catch {}
  if (nobodyListens)
    throw refused(
      `nothing listens on ${hostInUrl(config.host)}:${config.port}; give the --host and --port the running server (process ${pid}) listens on`,
    )
  const dropClaim = claimDataFile(config, pid, refused)
  let letThrough: (petstore: PetstoreApp | null) => void = () => {}
  const ready = new Promise<PetstoreApp | null>((resolve) => (letThrough = resolve))
  let holding: ReturnType<typeof Bun.serve>
  try {
    holding = Bun.serve({
      hostname: config.host,
      port: config.port,
      reusePort: true,
      development: false,
      // They may wait longer than Bun's default of 10 s, which would reset them (the old server answers
      // its in-flight requests for up to its grace period first); the wait is bounded by lockWaitMs.
      idleTimeout: 0,
      // Requests that reach this server before it can serve wait for it; each answer then closes its
      // connection, so the client's next request goes to the app's own listener.
      async fetch(request) {
        const petstore = await ready
        if (!petstore) return errorResponse(unavailable('The server is restarting; try again.'))
        const response: Response = await petstore.app.fetch(request)
        response.headers.set('connection', 'close')
        return response
      },
    })
  } catch (error) {
    dropClaim()
    throw refused(
      `cannot listen beside it on ${hostInUrl(config.host)}:${config.port} (${(error as Error).message}); ` +
        'a server that does not share its port (a petstore older than --takeover, or another program) must be stopped instead',
    )
  }
  try {
    process.kill(pid, 'SIGUSR2')
  } catch (error) {
    dropClaim()
    holding.stop(true)
    throw refused(`cannot signal process ${pid}: ${(error as Error).message}`)
  }
  warn(`taking over ${config.dataFile} from process ${pid}`)
  return {
    lockWaitMs: CLOSE_CONNECTIONS_MS + config.shutdownGraceMs + STOP_SAVE_MS + 5_000,
    // Serving: the claim goes, which tells the old server that this one made it.
    ready(petstore) {
      letThrough(petstore)
      void holding.stop(false)
      dropClaim()
    },
    // The held requests' 503s are sent before the process ends, rather than reset with it. The claim
    // stays until this process is gone: the old server, if it let go, then sees a dead claimant and
    // serves again, where a claim dropped by a live process would read as "the new one serves".
    async fail() {
      letThrough(null)
      await Promise.race([holding.stop(false), Bun.sleep(CLOSE_CONNECTIONS_MS)])
      await holding.stop(true)
    },
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
