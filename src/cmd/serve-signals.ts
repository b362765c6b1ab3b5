/**
 * What each signal does to `petstore serve`, from the entry's first line: loading the server's code takes
 * tens of milliseconds, and a signal's default action during them would end the process (a logrotate
 * SIGHUP then stops a server that was starting). So the entry installs these before loading anything
 * else, and serve.ts says, once the server runs, what a stop and a hand-over do. This file imports nothing
 * of petstore's, so that it is loaded at once. See docs/operations.md#signals.
 */

/**
 * Signals that stop the server as SIGTERM does: drain, save, exit 0 (1 when storage was late). SIGQUIT is
 * Ctrl-\, SIGXCPU the warning before a CPU limit's SIGKILL. Not SIGHUP (below).
 */
const STOP_SIGNALS = ['SIGTERM', 'SIGINT', 'SIGQUIT', 'SIGXCPU'] as const

/**
 * SIGHUP is what logrotate's `postrotate kill -HUP` and a reload send, and a stop on it exits 0, which
 * `Restart=on-failure` leaves down: so it never stops the server. There is nothing to reopen (petstore
 * writes no log file of its own: the access log is stdout, messages stderr), so it is only said, each
 * time, as the operator who sent it expects something.
 */
const SIGHUP_NOTICE = 'SIGHUP received: still serving (petstore reopens nothing: its logs are stdout and stderr; SIGTERM stops it)'

/**
 * Signals petstore has no use for, whose default would end the process at once: the server keeps
 * serving and says so once per signal. (SIGPIPE, a reader gone, Bun already ignores: each write
 * reports its own failure. SIGUSR2 is the takeover's.)
 */
const IGNORED_SIGNALS = ['SIGUSR1', 'SIGALRM', 'SIGVTALRM', 'SIGPROF', 'SIGIO'] as const

export interface ServeSignals {
  /** What a stop signal does (its reason, e.g. "SIGTERM received"); until set, the process exits 0 at once. */
  onStop(handler: (reason: string) => unknown): void
  /**
   * What SIGUSR2 does. One that comes before is answered when this is set, once the server runs: a server
   * taking over signals only one that listens, so one still starting was sent it by mistake, and its
   * handler then says so and serves on (ending the start would leave a service down, as SIGHUP would).
   */
  onHandOver(handler: () => unknown): void
}

let installed: ServeSignals | undefined

/** A stop asked before the server runs: nothing was served, so nothing is left to save. */
export function stopBeforeStart(reason: string): never {
  console.error(`petstore: ${reason} before the server started`)
  process.exit(0)
}

/** Installs the handlers once (the entry, then serve.ts, call it) and answers the one set of them. */
export function serveSignals(): ServeSignals {
  if (installed) return installed
  let stop: (reason: string) => unknown = stopBeforeStart
  let handOverAsked = false
  let handOver: () => unknown = () => {
    handOverAsked = true
  }
  for (const signal of STOP_SIGNALS) process.on(signal, () => stop(`${signal} received`))
  process.on('SIGUSR2', () => handOver())
  process.on('SIGHUP', () => console.error(`petstore: ${SIGHUP_NOTICE}`))
  const heard = new Set<string>()
  for (const signal of IGNORED_SIGNALS)
    process.on(signal, () => {
      if (heard.has(signal)) return
      heard.add(signal)
      console.error(`petstore: ${signal} received: petstore has no use for it, still serving (later ones are ignored without a word)`)
    })
  installed = {
    onStop: (handler) => {
      stop = handler
    },
    onHandOver: (handler) => {
      handOver = handler
      if (handOverAsked) handler()
    },
  }
  return installed
}
