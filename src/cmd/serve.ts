/**
 * `petstore serve`: one server (server.ts) from the flags and variables, its startup line, and what each
 * signal does: every signal commonly sent is handled, so none ends the process without its drain and
 * last save. See docs/operations.md#signals.
 */
import { networkInterfaces } from 'node:os'
import { type Config, CONFIG_FLAGS, hostInUrl, resolveConfig } from '../config'
import { toggle, flagLines } from '../flags/table'
import { redactedUrl } from '../domain/redacted-url'
import { isLoopbackHost, normaliseAddress } from '../http/client-address'
import { Server, type ServerOptions } from '../server/server'
import { onHandOverSignal, takeOver } from '../server/takeover'
import { bootstrapKey } from './bootstrap-key'
import { bootstrapOperator } from './bootstrap-operator'
import { serveSignals, stopBeforeStart } from './serve-signals'
import { asUsageError, help, parse, UsageError } from './options'

/** The server's flags (config.ts), and what this command alone does with them. */
const FLAGS = {
  ...CONFIG_FLAGS,
  takeover: toggle({
    flag: 'takeover',
    help: `take over from the server running on the same data file and port,
refusing no request (Linux; see docs/upgrading.md)`,
  }),
}

export const USAGE = `Usage: petstore serve [options]

${flagLines(FLAGS)}`

export async function serve(args: string[]): Promise<number> {
  const { values, positionals } = parse(args, FLAGS, USAGE)
  if (values.help) return help(USAGE)
  if (positionals.length) throw new UsageError(`unexpected argument "${positionals[0]}"`, USAGE)
  const config = asUsageError(() => resolveConfig(values), USAGE)
  // Installed by the entry already: until the server runs, a stop signal ends the process at once.
  const signals = serveSignals()
  // Replaced once the server runs; a stop asked during the start (the data file changed) ends it as a signal would.
  let stop: (reason: string, code?: number) => unknown = stopBeforeStart
  const options: ServerOptions = {
    // Exit non-zero so a supervisor restarts the server, and the restart opens the file afresh.
    onDataFileChanged: () => stop('the read-only data file changed on disk; stopping so that a restart reads it afresh', 1),
    // Only when there is no key at all, so instances that start together on one database make one.
    onListening: async (started) => {
      const { storage } = started.backend
      const { keys } = started.petstore
      if (storage.writable && keys.size === 0) await bootstrapKey(config, storage, () => keys.reload())
      if (storage.writable && started.consolePort !== undefined) await bootstrapOperator(config, storage, consoleUrl(started)!)
    },
  }
  let server = await Server.start(config, { ...options, arrive: values.takeover === true ? takeOver : undefined })
  signals.onStop((reason) => stop(reason))
  console.error(startupLine(server))

  let stopping = false
  /** A stop asked during a hand-over that then did not happen; acted on once this process serves again. */
  let stopAsked: string | undefined
  const exit = (saved: boolean, code: number, handedOver = false) => {
    if (!saved) console.error('petstore: storage did not take the last writes: stopped without them')
    // A server that handed over exits 0 all the same: its successor serves, with the rate-limit state,
    // and an exit 1 would have a service manager start this one again (Restart=on-failure) to take back.
    if (!saved && !handedOver) process.exit(1)
    console.error('petstore: stopped')
    process.exit(code)
  }
  stop = async (reason: string, code = 0) => {
    if (stopping) return (stopAsked ??= reason)
    stopping = true
    console.error(`petstore: ${reason}, finishing in-flight requests`)
    exit(await server.stop(server.config.shutdownGraceMs), code)
  }
  // The takeover's steps are takeover.ts's; here only what the process does after them.
  signals.onHandOver(async () => {
    if (stopping) return
    stopping = true
    const after = await onHandOverSignal(server, options, () => stopAsked !== undefined)
    if ('cannotServeAgain' in after) {
      console.error(`petstore: cannot serve again: ${after.cannotServeAgain}`)
      process.exit(1)
    }
    if ('stopped' in after) return exit(after.stopped.saved, 0, after.stopped.handedOver)
    if (after.serving !== server) {
      server = after.serving
      console.error(startupLine(server))
    }
    stopping = false
    if (stopAsked !== undefined) void stop(stopAsked)
  })
  return new Promise<number>(() => {})
}

function startupLine(server: Server): string {
  const config: Config = server.config
  return (
    `petstore: ${config.env} listening on http://${hostInUrl(config.host)}:${config.port}, API at ${config.baseUrl}, data ${server.backend.storage.location}` +
    (config.redisUrl ? `, rate limits in Redis at ${redactedUrl(config.redisUrl)}` : '') +
    (server.metricsPort !== undefined
      ? `, metrics at http://${hostInUrl(config.metricsAddress!.host)}:${server.metricsPort}/metrics`
      : '') +
    `, scenarios ${config.scenarios ? 'on (Prefer: code, delay, fail)' : 'off'}` +
    (server.consolePort !== undefined ? `, console at ${consoleUrl(server)}` : '') +
    hints(config)
      .map((hint) => `\npetstore: ${hint}`)
      .join('')
  )
}

/** What a listener reaches and what its links and /metrics give, said where the operator starts it. */
function hints(config: Config): string[] {
  if (isLoopbackHost(config.host))
    return [
      'only this machine can connect; --host 0.0.0.0 (or PETSTORE_HOST) opens it to the network, best behind a TLS proxy (deploy/), ' +
        'with --base-url for absolute links, and --metrics-address or --metrics-token for /metrics (beside the API it answers only this machine)',
    ]
  const lines: string[] = []
  const addresses = machineAddresses(config.host)
  if (addresses)
    lines.push(
      `${hostInUrl(config.host)} stands for every ${normaliseAddress(config.host) === '0.0.0.0' ? 'IPv4 ' : ''}address of this machine: ` +
        (addresses.length > 0
          ? `clients elsewhere reach it at ${addresses.map((address) => `http://${hostInUrl(address)}:${config.port}`).join(', ')}`
          : 'it has none but loopback now') +
        ', or at the host name of --base-url',
    )
  if (config.baseUrl.startsWith('/'))
    lines.push(
      `no --base-url: links are relative (${config.baseUrl}/pets/42); --base-url https://pets.example.com${config.basePath} makes them absolute`,
    )
  if (!config.metricsAddress && !config.metricsToken)
    lines.push('/metrics beside the API answers clients on this machine alone; --metrics-address or --metrics-token opens it')
  return lines
}

/**
 * For a wildcard bind (0.0.0.0: every IPv4 address, ::: every address), the machine's own addresses a
 * client elsewhere can use (not loopback, not link-local), at most eight; undefined for any other bind.
 */
function machineAddresses(host: string): string[] | undefined {
  const bound = normaliseAddress(host)
  if (bound !== '0.0.0.0' && bound !== '::') return undefined
  return Object.values(networkInterfaces())
    .flatMap((entries) => entries ?? [])
    .filter((entry) => !entry.internal)
    .filter((entry) => (entry.family === 'IPv4' ? true : bound === '::' && !/^fe[89ab]/i.test(entry.address)))
    .sort((a, b) => (a.family === b.family ? 0 : a.family === 'IPv4' ? -1 : 1))
    .map((entry) => entry.address)
    .filter((address, index, all) => all.indexOf(address) === index)
    .slice(0, 8)
}

function consoleUrl(server: Server): string | undefined {
  const address = server.config.consoleAddress
  return address && server.consolePort !== undefined ? `http://${hostInUrl(address.host)}:${server.consolePort}/` : undefined
}
