/**
 * `serve --takeover` (embedded mode, Linux): a new server replaces the one on the same data file and port,
 * refusing no request; both listen with SO_REUSEPORT, and SIGUSR2 is the whole protocol. Every step is
 * here: takeOver is how the new one arrives (steps 1 and 2), onHandOverSignal what the old one does on
 * SIGUSR2 (handOver, steps 3 and 4), each serving on if the other dies first (servingAgain: how the old
 * one comes back once it has let go). The claim files are the SQLite engine's (storage/sqlite).
 * server.ts knows none of it. Steps in docs/upgrading.md.
 */
import type { PetstoreApp } from './app'
import { type Config, ConfigError, hostInUrl } from '../config'
import { StorageOpenError } from '../domain/repositories'
import { errorResponse, unavailable } from '../http/api-errors'
import { AFRESH, type Arrival, bindUnshared, CLOSE_CONNECTIONS_MS, leaveAgain, Server, type ServerOptions, STOP_SAVE_MS } from './server'
import { claimTakeover, dataFilePath, liveClaimant, takeoverProgress, takeoverTarget } from '../storage/sqlite'

/** How long a server that handed over waits for its successor to serve: its lock wait (about 17 s) and more. */
const SUCCESSOR_WAIT_MS = 30_000
/** How long serving again waits for a dead successor's lock to go (it goes as the kernel ends the process: milliseconds). */
const SERVE_AGAIN_LOCK_WAIT_MS = 2_000
/** How often it looks (a read of the claim and of /proc/PID/stat): while it waits, a death leaves the port unserved until then. */
const SUCCESSOR_POLL_MS = 5

/**
 * Steps 1 and 2, as the new server's Arrival; throws, with one line, while the old server is untouched.
 * With no server on the file it starts AFRESH, and says so: a unit that always says --takeover starts too.
 */
export function takeOver(config: Config, warn: (message: string) => void): Arrival {
  if (config.database)
    throw new ConfigError(
      '--takeover serves a data file; with PostgreSQL, run several instances behind a proxy and restart them one at a time (docs/upgrading.md)',
    )
  if (config.port === 0) throw new ConfigError('--takeover needs the port the running server listens on, not 0')
  const file = dataFilePath(config.dataFile)
  const refused = (reason: string) => new StorageOpenError(`cannot take over: ${reason}; the running server keeps serving`)
  const orRefused = <T>(step: () => T): T => {
    try {
      return step()
    } catch (error) {
      throw refused((error as Error).message)
    }
  }
  // From here until the claim goes this process has its turn among takers (a second one is refused).
  const address = `${hostInUrl(config.host)}:${config.port}`
  const target = orRefused(() => takeoverTarget(file))
  if (target === null) {
    // Said before starting, in one line: the start would fail on the port after saying it starts afresh.
    if (listensThere(config.host, config.port))
      throw refused(
        `no server holds ${file}, yet ${address} is in use: a server serving the file read-only holds nothing to hand over and must be stopped instead, as must another program`,
      )
    warn(`--takeover: no server holds ${file}, starting afresh`)
    return AFRESH
  }
  const { pid } = target
  let dropClaim: () => void
  try {
    // The lock names the process, not where it listens: a port nobody listens on would stop the running
    // server and leave its own port with nothing behind it.
    if (!listensThere(config.host, config.port))
      throw refused(
        `nothing listens on ${address}; give the --host and --port the running server (process ${pid}) listens on, or if it is still starting, try again once it serves`,
      )
    dropClaim = orRefused(() => claimTakeover(file, target))
  } catch (error) {
    target.turn.release()
    throw error
  }
  let holding: Holding
  try {
    holding = holdRequests(config)
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
    void holding.fail()
    throw refused(`cannot signal process ${pid}: ${(error as Error).message}`)
  }
  warn(`taking over ${file} from process ${pid}`)
  return {
    // The old server's longest stop: letting its connections go, its drain, its last save (the 5 s of
    // margin hold a data file's save waiting its 5 s for another process's write lock).
    lockWaitMs: CLOSE_CONNECTIONS_MS + config.shutdownGraceMs + STOP_SAVE_MS + 5_000,
    // The old server listens there: that was the check above.
    checkPort() {},
    // The old server is gone by now: serving without /metrics or the console beats not serving.
    without(listener, reason) {
      warn(`${reason}; serving without ${listener}`)
    },
    // Serving: the claim goes, which tells the old server that this one made it.
    ready(petstore) {
      holding.ready(petstore)
      dropClaim()
    },
    // The claim stays until this process is gone: the old server, if it let go, then sees a dead
    // claimant and serves again, where a claim dropped by a live process would read as "the new one serves".
    fail: () => holding.fail(),
  }
}

/**
 * How a server that handed over serves again once its successor died before serving: the port at once,
 * requests held until it serves (as a taker holds them), and the file it checked whole at its own start
 * and held since is not read whole again (its schema is: a successor that got as far as a newer schema
 * step is refused). See docs/upgrading.md.
 */
function servingAgain(previous: Server): (config: Config, warn: (message: string) => void) => Arrival {
  return (config, warn) => {
    const holding = holdRequests(config)
    // The successor may have taken the rate-limit state this server left, and died with it: this server,
    // which has answered nothing since, leaves the same state again from memory.
    leaveAgain(previous.backend, previous.petstore.limiter.handover(), warn)
    return {
      // A successor killed a moment ago may still hold the lock while the kernel ends it.
      lockWaitMs: SERVE_AGAIN_LOCK_WAIT_MS,
      checked: previous.backend.checked,
      checkPort() {},
      // Served a moment ago: serving without /metrics or the console beats not serving.
      without(listener, reason) {
        warn(`${reason}; serving without ${listener}`)
      },
      ready: (petstore) => holding.ready(petstore),
      fail: () => holding.fail(),
    }
  }
}

interface Holding {
  /** The app serves: the held requests go to it, and the holding listener closes. */
  ready(petstore: PetstoreApp): void
  /** The start failed: the held requests get 503s, sent before the process ends rather than reset with it. */
  fail(): Promise<void>
}

/** A listener beside (SO_REUSEPORT) whatever serves the port, whose requests wait until the app serves. */
function holdRequests(config: Config): Holding {
  let letThrough: (petstore: PetstoreApp | null) => void = () => {}
  const ready = new Promise<PetstoreApp | null>((settle) => (letThrough = settle))
  const holding = Bun.serve({
    hostname: config.host,
    port: config.port,
    reusePort: true,
    development: false,
    // They may wait longer than Bun's default of 10 s, which would reset them (an old server answers
    // its in-flight requests for up to its grace period first); the wait is bounded by the start's.
    idleTimeout: 0,
    // Each answer closes its connection, so the client's next request goes to the app's own listener.
    async fetch(request) {
      const petstore = await ready
      if (!petstore) return errorResponse(unavailable('The server is restarting; try again.'))
      const response: Response = await petstore.app.fetch(request)
      response.headers.set('connection', 'close')
      return response
    },
  })
  return {
    ready(petstore) {
      letThrough(petstore)
      void holding.stop(false)
    },
    async fail() {
      letThrough(null)
      await Promise.race([holding.stop(false), Bun.sleep(CLOSE_CONNECTIONS_MS)])
      await holding.stop(true)
    },
  }
}

/**
 * What SIGUSR2 left: this server or one started again still serving, this one stopped (`saved`: in
 * time), or neither, as serving again failed (why).
 */
export type AfterHandOver = { serving: Server } | { stopped: { saved: boolean; handedOver: boolean } } | { cannotServeAgain: string }

/**
 * The running server's answer to SIGUSR2: it hands over (handOver); when the successor died before it
 * served, it serves again from `options`. `givenUp`: a stop was asked meanwhile,
 * which ends the wait for the successor (everything is saved and handed over already).
 */
export async function onHandOverSignal(server: Server, options: ServerOptions, givenUp: () => boolean): Promise<AfterHandOver> {
  const outcome = await handOver(server, givenUp)
  if (outcome === 'unclaimed' || outcome === 'withdrawn') return { serving: server }
  if (outcome !== 'successor died') return { stopped: { saved: outcome === 'handed over', handedOver: outcome !== 'storage late' } }
  try {
    return { serving: await Server.start(server.config, { ...options, arrive: servingAgain(server) }) }
  } catch (error) {
    return { cannotServeAgain: (error as Error).message }
  }
}

/** How a hand-over ended: see handOver. */
type HandOver = 'unclaimed' | 'withdrawn' | 'storage late' | 'handed over' | 'handed over, last writes lost' | 'successor died'

/**
 * Steps 3 and 4 on the running server, on SIGUSR2, only while a live process claims the data file (a
 * stray or late signal: 'unclaimed'). 'withdrawn': the claimant died before the listener closed. Else it
 * stops as on SIGTERM, leaves the rate-limit state, and waits until the claimant serves ('handed over';
 * also after SUCCESSOR_WAIT_MS or once `givenUp`; 'last writes lost' when storage did not take the
 * stop's last writes, which the successor does without: the rate-limit state was left before them) or
 * dies first ('successor died': serve again; 'storage late' when the stop did not end in time).
 */
async function handOver(server: Server, givenUp: () => boolean): Promise<HandOver> {
  const { config, warn } = server
  // Where the start found the file: a link re-pointed since does not move its claim.
  const file = server.backend.file ?? config.dataFile
  // A taker killed before this signal was handled left its claim: reading it removes it, not the next start.
  const claimant = config.database ? null : liveClaimant(file)
  if (claimant === null) {
    warn(`SIGUSR2 received, but no server is taking over ${file}: still serving`)
    return 'unclaimed'
  }
  warn('SIGUSR2 received: handing over to the server taking over, finishing in-flight requests')
  if (!(await server.letConnectionsGo(() => liveClaimant(file) === claimant))) {
    warn('the server taking over is gone (killed?) before this one let go: the takeover is withdrawn, still serving')
    return 'withdrawn'
  }
  const saved = await server.stop(config.shutdownGraceMs)
  if (await successorLives(file, claimant, givenUp)) return saved ? 'handed over' : 'handed over, last writes lost'
  if (!saved) return 'storage late'
  warn('the server taking over died before it served: serving again')
  return 'successor died'
}

/**
 * False when the successor died before it served; true once it serves, or when the wait ends. Nothing
 * listens on the port from the successor's death until this notices it: hence the short step.
 */
async function successorLives(file: string, pid: number, givenUp: () => boolean): Promise<boolean> {
  const deadline = Date.now() + SUCCESSOR_WAIT_MS
  for (;;) {
    const progress = takeoverProgress(file, pid)
    if (progress !== 'starting') return progress === 'serving'
    if (Date.now() > deadline || givenUp()) return true
    await Bun.sleep(SUCCESSOR_POLL_MS)
  }
}

/** Whether anything listens at the address: only a listener there makes an unshared bind fail. */
function listensThere(host: string, port: number): boolean {
  try {
    bindUnshared(host, port)
    return false
  } catch {
    return true
  }
}
