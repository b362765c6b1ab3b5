/**
 * What the server runs with, from one table (FLAGS): each row is a flag with its environment variable,
 * how its value is written, its help line, its parser with the range it takes, and its default. The
 * command line's parsing and usage (cmd/options.ts), ConfigInput and the resolved config all come from
 * the rows: a flag wins over its variable, which wins over the default, and an empty variable counts as
 * unset. Everything is checked here, once, so the rest of the code can trust it.
 */

import {
  ConfigError,
  type EnvName,
  type Environment,
  type FlagTable,
  type InputOf,
  integer,
  list,
  option,
  reader,
  toggle,
  variable,
} from './flags/table'
import { BAN_AFTER, BAN_SECONDS } from './domain/ban-rule'
import { HOST_NAME } from './http/allowed-hosts'
import { isLoopbackHost, TrustedProxies } from './http/client-address'

// The flags' own vocabulary, which every caller of the config speaks.
export { ConfigError, type EnvName } from './flags/table'

export const ENVIRONMENTS = {
  production: {
    port: 8080,
    consolePort: 8090,
    baseUrl: 'http://localhost:8080/v1',
    baseUrlVariable: 'PETSTORE_BASE_URL',
    dataFile: './data/petstore.db',
  },
  staging: {
    port: 8081,
    consolePort: 8091,
    baseUrl: 'http://localhost:8081/v1',
    baseUrlVariable: 'PETSTORE_STAGING_BASE_URL',
    dataFile: './data/petstore-staging.db',
  },
} as const

/** Where serve listens, and healthcheck asks, unless told otherwise: this machine only. */
export const DEFAULT_HOST = '127.0.0.1'

export interface Config {
  readonly env: EnvName
  readonly dataFile: string
  readonly host: string
  readonly port: number
  /**
   * Base URL of the served environment, no trailing slash; its path alone (`/v1`, relative links) when none
   * was given and the server listens beyond loopback, where `localhost` would mislead remote clients.
   */
  readonly baseUrl: string
  /** Path part of `baseUrl` where the API is mounted ('' when at the root). */
  readonly basePath: string
  /** True when no base URL was given on loopback: it then follows the port bound (`--port 0`: see withBoundPort). */
  readonly baseUrlFollowsPort: boolean
  /** Base URLs of both environments, for the OpenAPI document's `servers`; null: the other one is not listed. */
  readonly servers: Readonly<{ production: string | null; staging: string | null }>
  readonly corsOrigins: string[]
  /** Where /metrics is served instead of the API's listener; null to serve it beside the API. */
  readonly metricsAddress: { host: string; port: number } | null
  /** Where the operators' console listens; null when it is off. */
  readonly consoleAddress: { host: string; port: number } | null
  /** True when the console's address is the default: the server then starts without it when it is taken. */
  readonly consoleByDefault: boolean
  /** Host names the console answers to besides its own address (--console-host), for a proxy in front. */
  readonly consoleHosts: readonly string[]
  /** Bearer token /metrics asks for; null for none. */
  readonly metricsToken: string | null
  /** Proxies whose X-Forwarded-For names the client. */
  readonly trustProxy: TrustedProxies
  /** PostgreSQL instead of the data file, for several instances; null for the data file. */
  readonly database: DatabaseConfig | null
  /** Redis for the rate limiter, shared by every instance; null for the in-process limiter. */
  readonly redisUrl: string | null
  /** When Redis does not answer: refuse with 503 (closed) or limit per instance meanwhile (local). */
  readonly limiterFallback: 'closed' | 'local'
  readonly banAfter: number
  readonly banSeconds: number
  readonly accessLog: boolean
  /** Largest POST body accepted, in bytes. */
  readonly maxBodyBytes: number
  /** Most client addresses the limiter remembers at once. */
  readonly maxTrackedAddresses: number
  readonly shutdownGraceMs: number
  /** Days per-key usage is kept by the minute, and by the hour (docs/usage.md). */
  readonly usageRetention: UsageRetention
  /** Whether an authenticated request's `Prefer` may force an answer (plugins/scenarios.ts): staging's default. */
  readonly scenarios: boolean
}

export interface UsageRetention {
  minuteDays: number
  hourDays: number
}

export interface DatabaseConfig {
  url: string
  /** Connections per instance. */
  pool: number
}

function parseEnvName(env: string, name: string): EnvName {
  if (env !== 'production' && env !== 'staging') throw new ConfigError(`${name} must be production or staging, not "${env}"`)
  return env
}

/** A parser for one of a few words. */
const oneOf =
  <W extends string>(...words: W[]) =>
  (text: string, name: string): W => {
    if (!words.includes(text as W)) throw new ConfigError(`${name} must be ${words.join(' or ')}, not "${text.slice(0, 40)}"`)
    return text as W
  }

function parseBaseUrl(flag: string, value: string): { baseUrl: string; basePath: string } {
  let url: URL
  try {
    url = new URL(value)
  } catch {
    throw new ConfigError(`${flag} must be an absolute http(s) URL, not "${value}"`)
  }
  if ((url.protocol !== 'http:' && url.protocol !== 'https:') || url.search || url.hash)
    throw new ConfigError(`${flag} must be an http(s) URL without query or fragment, not "${value}"`)
  const basePath = url.pathname.replace(/\/+$/, '')
  if (basePath === '') throw new ConfigError(`${flag} must have a path where the API lives, such as /v1, not "${value}"`)
  return { baseUrl: `${url.origin}${basePath}`, basePath }
}

function parseOrigin(value: string): string {
  if (value === '*') return value
  try {
    const url = new URL(value)
    const web = url.protocol === 'http:' || url.protocol === 'https:'
    if (web && url.origin === value.replace(/\/$/, '')) return url.origin
  } catch {}
  throw new ConfigError(`--cors-origin must be an origin like https://app.example.com or *, not "${value}"`)
}

/** HOST:PORT, with an IPv6 host in brackets. */
function parseListenAddress(value: string, name: string): { host: string; port: number } {
  const match = /^(?:\[([0-9A-Fa-f:.]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(value)
  if (!match || Number(match[3]) > 65535)
    throw new ConfigError(`${name} must be HOST:PORT, such as 127.0.0.1:9464 or [::1]:9464, not "${value}"`)
  return { host: match[1] ?? match[2]!, port: Number(match[3]) }
}

/** Host names, lower-cased, each optionally with :PORT. */
function parseConsoleHosts(names: string[], name: string): string[] {
  for (const value of names) {
    // Compared as text with the Host a client sends: a port as clients write it, 1 to 65535 without a leading zero.
    const port = /:(\d+)$/.exec(value)?.[1]
    if (value.length > 260 || !HOST_NAME.test(value) || (port !== undefined && !(/^[1-9]\d*$/.test(port) && Number(port) <= 65535)))
      throw new ConfigError(
        `${name} must be a host name, optionally with :PORT from 1 to 65535 (such as console.example.com or console.example.com:8443), not "${value.slice(0, 80)}"`,
      )
  }
  return names.map((value) => value.toLowerCase())
}

/** A token a client can send in a bearer header (RFC 6750's token68 characters), long enough to guess at no speed. */
function parseToken(value: string, name: string): string {
  if (!/^[A-Za-z0-9._~+/=-]{16,256}$/.test(value))
    throw new ConfigError(`${name} must be 16 to 256 characters of A-Z a-z 0-9 . _ ~ + / = - (the value is not shown)`)
  return value
}

function parseProxies(entries: string[], name: string): TrustedProxies {
  try {
    return new TrustedProxies(entries)
  } catch (error) {
    throw new ConfigError(`${name}: ${(error as Error).message}`)
  }
}

/**
 * The URL's scheme is checked and the value never repeated: a database or Redis URL may carry a
 * password, and a complaint ends up in logs. An empty flag means none.
 */
const secretUrl =
  (...schemes: string[]) =>
  (value: string, name: string): string | null => {
    if (value === '') return null
    let url: URL | undefined
    try {
      url = new URL(value)
    } catch {}
    if (!url || !schemes.includes(url.protocol))
      throw new ConfigError(`${name} must be a ${schemes.map((scheme) => `${scheme}//`).join(' or ')} URL (the value is not shown)`)
    // The clients decode the user name, password and database themselves, and a bad escape there (not
    // two hex digits, or bytes that are not UTF-8) is an uncaught URIError.
    try {
      for (const part of [url.username, url.password, url.pathname]) decodeURIComponent(part)
    } catch {
      throw new ConfigError(
        `${name} has a % escape that is not valid: write a % in a password as %25, and other characters as their UTF-8 bytes (the value is not shown)`,
      )
    }
    return value
  }

/** Where a command's data is: every command takes these. */
export const COMMON_FLAGS = {
  env: option<EnvName>({
    flag: 'env',
    value: 'production|staging',
    variable: 'PETSTORE_ENV',
    help: 'environment',
    parse: parseEnvName,
    default: () => 'production',
  }),
  data: option<string>({
    flag: 'data',
    value: 'FILE',
    variable: 'PETSTORE_DATA',
    help: 'data file',
    default: (env) => ENVIRONMENTS[env].dataFile,
  }),
  databaseUrl: option({
    flag: 'database-url',
    value: 'URL',
    variable: 'PETSTORE_DATABASE_URL',
    help: 'PostgreSQL instead of the data file, for several instances: postgres://USER:PASSWORD@HOST/DB',
    notes: 'which keeps the password out of the process list',
    parse: secretUrl('postgres:', 'postgresql:'),
  }),
  redisUrl: option({
    flag: 'redis-url',
    value: 'URL',
    variable: 'PETSTORE_REDIS_URL',
    help: 'Redis for rate limits shared by every instance: redis://HOST:6379',
    parse: secretUrl('redis:', 'rediss:', 'redis+unix:'),
  }),
} as const satisfies FlagTable

/** What the server runs with, in the order `serve --help` lists it. */
export const CONFIG_FLAGS = {
  ...COMMON_FLAGS,
  host: option<string>({
    flag: 'host',
    value: 'HOST',
    variable: 'PETSTORE_HOST',
    help: 'address to bind: 0.0.0.0 for every IPv4 address, :: for every address',
    notes: 'this machine only',
    // This machine only until told otherwise: a first run puts nothing on the network.
    default: () => DEFAULT_HOST,
  }),
  port: option({
    flag: 'port',
    value: 'N',
    variable: 'PETSTORE_PORT',
    help: 'port, 0 picks a free one',
    parse: integer({ min: 0, max: 65_535 }),
    default: (env) => ENVIRONMENTS[env].port,
  }),
  // Its variable is the environment's own (ENVIRONMENTS), read with the other base URL in resolveConfig.
  baseUrl: option<string>({
    flag: 'base-url',
    value: 'URL',
    help: `public base URL with the API path, e.g. https://pets.example.com/v1
(PETSTORE_BASE_URL, staging PETSTORE_STAGING_BASE_URL; default http://localhost:PORT/v1)`,
  }),
  corsOrigin: list({
    flag: 'cors-origin',
    value: 'ORIGIN',
    help: 'allow browser calls from ORIGIN (repeatable; * for any)',
    parse: (origins) => origins.map(parseOrigin),
  }),
  trustProxy: list({
    flag: 'trust-proxy',
    value: 'ADDR|CIDR',
    variable: 'PETSTORE_TRUST_PROXY',
    help: 'a proxy whose X-Forwarded-For names the client (repeatable; loopback for 127.0.0.0/8 and ::1)',
    notes: 'comma-separated',
    parse: parseProxies,
  }),
  metricsAddress: option({
    flag: 'metrics-address',
    value: 'HOST:PORT',
    variable: 'PETSTORE_METRICS_ADDRESS',
    help: 'serve /metrics there instead of beside the API',
    parse: parseListenAddress,
  }),
  // Its default, the environment's console port (a free one with --port 0), is worked out in resolveConfig.
  consoleAddress: option({
    flag: 'console-address',
    value: 'HOST:PORT|off',
    variable: 'PETSTORE_CONSOLE_ADDRESS',
    help: "the operators' console; off for none",
    shownDefault: (env) => `${DEFAULT_HOST}:${ENVIRONMENTS[env].consolePort}`,
    notes: 'a free port with --port 0',
    parse: (text, name) => (text === 'off' ? null : parseListenAddress(text, name)),
  }),
  consoleHost: list({
    flag: 'console-host',
    value: 'NAME',
    variable: 'PETSTORE_CONSOLE_HOST',
    help: 'a host name the console also answers to, for a proxy in front (repeatable); other names get 421',
    notes: 'comma-separated',
    parse: parseConsoleHosts,
  }),
  metricsToken: option({
    flag: 'metrics-token',
    value: 'TOKEN',
    variable: 'PETSTORE_METRICS_TOKEN',
    help: 'require Authorization: Bearer TOKEN for /metrics',
    notes: 'which keeps it out of the process list',
    parse: parseToken,
  }),
  databasePool: option({
    flag: 'database-pool',
    value: 'N',
    variable: 'PETSTORE_DATABASE_POOL',
    help: 'connections to PostgreSQL per instance',
    parse: integer({ min: 1, max: 100 }),
    default: () => 4,
  }),
  limiterFallback: option<'closed' | 'local'>({
    flag: 'limiter-fallback',
    value: 'closed|local',
    variable: 'PETSTORE_LIMITER_FALLBACK',
    help: 'when Redis does not answer: 503 (closed) or limits per instance until it answers again (local)',
    parse: oneOf('closed', 'local'),
    default: () => 'closed',
  }),
  banAfter: option({
    flag: 'ban-after',
    value: 'N',
    help: `how many 429s a key (or address) may get within a minute for requests sent before their Retry-After was over; the next such request starts a ban (${BAN_AFTER.min} to ${BAN_AFTER.max})`,
    parse: integer(BAN_AFTER),
    default: () => 50,
  }),
  banSeconds: option({
    flag: 'ban-seconds',
    value: 'N',
    help: 'length of a ban in seconds',
    parse: integer(BAN_SECONDS),
    default: () => 600,
  }),
  noAccessLog: toggle({ flag: 'no-access-log', help: 'do not write the per-request JSON lines to stdout' }),
  usageMinutesDays: option({
    flag: 'usage-minutes-days',
    value: 'N',
    variable: 'PETSTORE_USAGE_MINUTES_DAYS',
    help: 'days per-key usage is kept by the minute',
    // At least a day: the figures of the last 24 hours are read by the minute.
    parse: integer({ min: 1, max: 365 }),
    default: () => 7,
  }),
  usageHoursDays: option({
    flag: 'usage-hours-days',
    value: 'N',
    variable: 'PETSTORE_USAGE_HOURS_DAYS',
    help: "days it is kept by the hour, at least the minutes'",
    parse: integer({ min: 1, max: 3650 }),
    default: () => 90,
  }),
  scenarios: option({
    flag: 'scenarios',
    value: 'on|off',
    variable: 'PETSTORE_SCENARIOS',
    help: 'let authenticated requests force answers with Prefer: code=429, delay=MS, fail=N',
    shownDefault: (env) => (env === 'staging' ? 'on' : 'off'),
    parse: (text, name) => oneOf('on', 'off')(text, name) === 'on',
    default: (env) => env === 'staging',
  }),
} as const satisfies FlagTable

/** The flags and their texts, as `serve` parses them; the in-process test servers give them too. */
export type ConfigInput = InputOf<typeof CONFIG_FLAGS>

/** The environment named by --env, else PETSTORE_ENV, else production. */
export function envOf(input: ConfigInput, environment: Environment): EnvName {
  return reader(CONFIG_FLAGS, input, environment).value('env')!
}

/** The PostgreSQL database named, or null for the data file; naming both is refused, as only one would be used. */
export function resolveDatabase(input: ConfigInput, environment: Environment): DatabaseConfig | null {
  const read = reader(CONFIG_FLAGS, input, environment)
  const url = read.value('databaseUrl') ?? null
  const pool = read.given('databasePool')
  if (url === null) {
    if (pool.given) throw new ConfigError(`${pool.name} applies only with --database-url`)
    return null
  }
  if (dataFileNamed(input, environment))
    throw new ConfigError('give either a data file (--data, PETSTORE_DATA) or a database URL, not both')
  return { url, pool: read.value('databasePool')! }
}

/** The Redis named by --redis-url or PETSTORE_REDIS_URL, or null for the in-process limiter. */
export function resolveRedisUrl(input: ConfigInput, environment: Environment): string | null {
  return reader(CONFIG_FLAGS, input, environment).value('redisUrl') ?? null
}

export function resolveDataFile(input: ConfigInput, environment: Environment): string {
  return reader(CONFIG_FLAGS, input, environment).value('data', envOf(input, environment))!
}

/** True when the data file was named (--data or PETSTORE_DATA) rather than taken from the default. */
export function dataFileNamed(input: ConfigInput, environment: Environment): boolean {
  return reader(CONFIG_FLAGS, input, environment).given('data').given
}

export function resolveConfig(input: ConfigInput, environment: Environment = process.env): Config {
  const read = reader(CONFIG_FLAGS, input, environment)
  const env = envOf(input, environment)
  const defaults = ENVIRONMENTS[env]
  const port = read.value('port', env)!

  const redisUrl = resolveRedisUrl(input, environment)
  const database = resolveDatabase(input, environment)
  const host = read.value('host')!
  const explicitBase = input.baseUrl ?? variable(environment, defaults.baseUrlVariable)
  const linksFollowPort = !explicitBase && isLoopbackHost(host)
  const parsed = explicitBase
    ? parseBaseUrl(input.baseUrl ? '--base-url' : defaults.baseUrlVariable, explicitBase)
    : parseBaseUrl('base URL', `http://localhost:${port}${new URL(defaults.baseUrl).pathname}`)
  const { basePath } = parsed
  const baseUrl = explicitBase || linksFollowPort ? parsed.baseUrl : basePath
  const servers: Record<EnvName, string | null> = { production: null, staging: null, [env]: baseUrl }
  // The other environment: its variable's URL, or its default on this machine. A server reached from
  // other machines with relative links (no base URL) leaves that default out: localhost there is the
  // reader's own machine.
  const other = env === 'production' ? 'staging' : 'production'
  const { baseUrlVariable, baseUrl: otherDefault } = ENVIRONMENTS[other]
  const otherUrl = variable(environment, baseUrlVariable)
  if (otherUrl !== undefined) servers[other] = parseBaseUrl(baseUrlVariable, otherUrl).baseUrl
  else if (!baseUrl.startsWith('/')) servers[other] = parseBaseUrl('base URL', otherDefault).baseUrl

  const fallback = read.given('limiterFallback')
  if (fallback.given && redisUrl === null) throw new ConfigError(`${fallback.name} applies only with --redis-url`)
  const consoleGiven = read.given('consoleAddress').given
  const minuteDays = read.value('usageMinutesDays')!
  const hourDays = read.value('usageHoursDays')!
  // Hours are kept as long as minutes, so that a series never runs out of rows where minutes end.
  if (hourDays < minuteDays) {
    const [hours, minutes] = [read.given('usageHoursDays').name, read.given('usageMinutesDays').name]
    throw new ConfigError(`${hours} (${hourDays}) must be at least ${minutes} (${minuteDays}): hours are kept as long as minutes`)
  }

  return freeze({
    env,
    dataFile: resolveDataFile(input, environment),
    host,
    port,
    baseUrl,
    basePath,
    baseUrlFollowsPort: linksFollowPort,
    servers,
    corsOrigins: read.value('corsOrigin')!,
    trustProxy: read.value('trustProxy')!,
    database,
    redisUrl,
    limiterFallback: read.value('limiterFallback')!,
    metricsAddress: read.value('metricsAddress') ?? null,
    // The environment's console port on this machine by default; a free one with `--port 0`, so that
    // servers started that way never contend for it.
    consoleAddress: consoleGiven
      ? (read.value('consoleAddress') ?? null)
      : { host: '127.0.0.1', port: port === 0 ? 0 : defaults.consolePort },
    consoleByDefault: !consoleGiven,
    consoleHosts: read.value('consoleHost')!,
    metricsToken: read.value('metricsToken') ?? null,
    banAfter: read.value('banAfter')!,
    banSeconds: read.value('banSeconds')!,
    accessLog: !read.value('noAccessLog'),
    maxBodyBytes: 64 * 1024,
    maxTrackedAddresses: 100_000,
    shutdownGraceMs: 10_000,
    usageRetention: { minuteDays, hourDays },
    scenarios: read.value('scenarios', env)!,
  })
}

/** A copy of the config for a server bound to `port` (server.ts picks one for `--port 0` before building the app). */
export function withBoundPort(config: Config, port: number): Config {
  if (!config.baseUrlFollowsPort) return freeze({ ...config, port })
  const baseUrl = `http://localhost:${port}${config.basePath}`
  return freeze({ ...config, port, baseUrl, servers: { ...config.servers, [config.env]: baseUrl } })
}

/** Read-only from here on: nothing changes a config once it is checked. */
function freeze(config: Config): Config {
  for (const part of [config.servers, config.corsOrigins, config.consoleHosts, config.usageRetention]) Object.freeze(part)
  return Object.freeze(config)
}

/** A host as it is written in a URL: an IPv6 address in brackets (RFC 3986). */
export function hostInUrl(host: string): string {
  return host.includes(':') ? `[${host}]` : host
}
