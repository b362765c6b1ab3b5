/**
 * Resolves what the server runs with: a flag wins over its environment variable, which wins over the
 * environment's default. Everything is checked here, once, so the rest of the code can trust it. Every
 * variable is read through `variable`: an empty one counts as unset.
 */

import { BAN_AFTER, BAN_SECONDS } from './domain/ban-rule'
import { HOST_NAME } from './http/allowed-hosts'
import { isLoopbackHost, TrustedProxies } from './http/client-address'

export type EnvName = 'production' | 'staging'

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
   * Base URL of the served environment, no trailing slash: absolute, or its path alone (`/v1`: links are
   * then relative references, RFC 3986 §4.2) when none was given and the server listens beyond loopback,
   * where `localhost` would send remote clients to their own machine.
   */
  readonly baseUrl: string
  /** Path part of `baseUrl` where the API is mounted ('' when at the root). */
  readonly basePath: string
  /** True when no base URL was given on loopback: it then follows the port bound (`--port 0`: see withBoundPort). */
  readonly baseUrlFollowsPort: boolean
  /** Base URLs of both environments, for the OpenAPI document's `servers`. */
  readonly servers: Readonly<{ production: string; staging: string }>
  readonly corsOrigins: string[]
  /** Where /metrics is served instead of the API's listener; null to serve it beside the API. */
  readonly metricsAddress: { host: string; port: number } | null
  /**
   * Where the operators' console listens (127.0.0.1 on the environment's console port by default, a free
   * port when the API's is chosen freely); null when it is off.
   */
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

export class ConfigError extends Error {}

export interface ConfigInput {
  env?: string
  data?: string
  host?: string
  port?: string
  baseUrl?: string
  corsOrigin?: string[]
  trustProxy?: string[]
  metricsAddress?: string
  metricsToken?: string
  consoleAddress?: string
  consoleHost?: string[]
  banAfter?: string
  banSeconds?: string
  accessLog?: boolean
  databaseUrl?: string
  databasePool?: string
  redisUrl?: string
  limiterFallback?: string
  usageMinutesDays?: string
  usageHoursDays?: string
  scenarios?: string
}

type Environment = Record<string, string | undefined>

/**
 * An environment variable's value, or undefined when it is unset or empty: `PETSTORE_PORT=` in a unit
 * file or a compose file means "no value", as it does for most tools, never an empty value.
 */
export function variable(environment: Environment, name: string): string | undefined {
  const value = environment[name]
  return value === '' ? undefined : value
}

/**
 * A flag's value, else its environment variable's, with the name a complaint about it must use: a bad
 * value that came from the environment is reported under the variable, where the user can find it.
 */
export function fromFlagOrVariable(
  flag: string,
  flagValue: string | undefined,
  name: string,
  environment: Environment,
): { name: string; value: string | undefined } {
  return flagValue !== undefined ? { name: flag, value: flagValue } : { name, value: variable(environment, name) }
}

export function parseEnvName(value: string | undefined, name = '--env'): EnvName {
  const env = value ?? 'production'
  if (env !== 'production' && env !== 'staging') throw new ConfigError(`${name} must be production or staging, not "${env}"`)
  return env
}

/** The environment named by --env, else PETSTORE_ENV, else production. */
export function envOf(input: { env?: string }, environment: Environment): EnvName {
  const { name, value } = fromFlagOrVariable('--env', input.env, 'PETSTORE_ENV', environment)
  return parseEnvName(value, name)
}

export function parseInteger(flag: string, value: string, min: number, max: number): number {
  if (!/^\d+$/.test(value) || Number(value) < min || Number(value) > max)
    throw new ConfigError(`${flag} must be an integer from ${min} to ${max}, not "${value}"`)
  return Number(value)
}

export function parseBaseUrl(flag: string, value: string): { baseUrl: string; basePath: string } {
  let url: URL
  try {
    url = new URL(value)
  } catch {
    throw new ConfigError(`${flag} must be an absolute http(s) URL, not "${value}"`)
  }
  if ((url.protocol !== 'http:' && url.protocol !== 'https:') || url.search || url.hash)
    throw new ConfigError(`${flag} must be an http(s) URL without query or fragment, not "${value}"`)
  const basePath = url.pathname.replace(/\/+$/, '')
  if (basePath === '')
    throw new ConfigError(`${flag} must have a path where the API lives, such as /v1, not "${value}"`)
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
function parseListenAddress({ name, value }: { name: string; value: string | undefined }): Config['metricsAddress'] {
  if (value === undefined) return null
  const match = /^(?:\[([0-9A-Fa-f:.]+)\]|([^:\[\]]+)):(\d{1,5})$/.exec(value)
  if (!match || Number(match[3]) > 65535)
    throw new ConfigError(`${name} must be HOST:PORT, such as 127.0.0.1:9464 or [::1]:9464, not "${value}"`)
  return { host: match[1] ?? match[2]!, port: Number(match[3]) }
}

/**
 * The console's address: `off`, HOST:PORT, or by default the environment's console port on 127.0.0.1
 * (a free one with `--port 0`, so that servers started that way never contend for it).
 */
function parseConsoleAddress(input: ConfigInput, environment: Environment, env: EnvName, port: number): Config['consoleAddress'] {
  const given = fromFlagOrVariable('--console-address', input.consoleAddress, 'PETSTORE_CONSOLE_ADDRESS', environment)
  if (given.value === 'off') return null
  if (given.value === undefined) return { host: '127.0.0.1', port: port === 0 ? 0 : ENVIRONMENTS[env].consolePort }
  return parseListenAddress(given)
}

/** The names of --console-host (repeatable) or PETSTORE_CONSOLE_HOST (comma-separated). */
function parseConsoleHosts(input: ConfigInput, environment: Environment): string[] {
  const name = input.consoleHost === undefined ? 'PETSTORE_CONSOLE_HOST' : '--console-host'
  const names = input.consoleHost ?? splitList(variable(environment, 'PETSTORE_CONSOLE_HOST'))
  for (const value of names)
    if (value.length > 260 || !HOST_NAME.test(value) || Number(/:(\d+)$/.exec(value)?.[1] ?? 0) > 65535)
      throw new ConfigError(`${name} must be a host name, optionally with :PORT (such as console.example.com), not "${value.slice(0, 80)}"`)
  return names.map((value) => value.toLowerCase())
}

/** A token a client can send in a bearer header (RFC 6750's token68 characters), long enough to guess at no speed. */
function parseToken({ name, value }: { name: string; value: string | undefined }): string | null {
  if (value === undefined) return null
  if (!/^[A-Za-z0-9._~+/=-]{16,256}$/.test(value))
    throw new ConfigError(`${name} must be 16 to 256 characters of A-Z a-z 0-9 . _ ~ + / = - (the value is not shown)`)
  return value
}

function parseFallback(input: ConfigInput, environment: Environment, withRedis: boolean): Config['limiterFallback'] {
  const { name, value } = fromFlagOrVariable('--limiter-fallback', input.limiterFallback, 'PETSTORE_LIMITER_FALLBACK', environment)
  if (value === undefined) return 'closed'
  if (!withRedis) throw new ConfigError(`${name} applies only with --redis-url`)
  if (value !== 'closed' && value !== 'local') throw new ConfigError(`${name} must be closed or local, not "${value.slice(0, 40)}"`)
  return value
}

/** on or off, from --scenarios or PETSTORE_SCENARIOS; on in staging and off in production by default. */
function parseScenarios(input: ConfigInput, environment: Environment, env: EnvName): boolean {
  const { name, value } = fromFlagOrVariable('--scenarios', input.scenarios, 'PETSTORE_SCENARIOS', environment)
  if (value === undefined) return env === 'staging'
  if (value !== 'on' && value !== 'off') throw new ConfigError(`${name} must be on or off, not "${value.slice(0, 40)}"`)
  return value === 'on'
}

function splitList(value: string | undefined): string[] {
  return value ? value.split(/[\s,]+/).filter(Boolean) : []
}

function parseProxies(input: ConfigInput, environment: Environment): TrustedProxies {
  try {
    return new TrustedProxies(input.trustProxy ?? splitList(variable(environment, 'PETSTORE_TRUST_PROXY')))
  } catch (error) {
    throw new ConfigError(`${input.trustProxy === undefined ? 'PETSTORE_TRUST_PROXY' : '--trust-proxy'}: ${(error as Error).message}`)
  }
}

/**
 * How long usage is kept: by the minute at least a day (the figures of the last 24 hours are read by
 * the minute), and by the hour at least as long as by the minute.
 */
function parseUsageRetention(input: ConfigInput, environment: Environment): UsageRetention {
  const minutes = fromFlagOrVariable('--usage-minutes-days', input.usageMinutesDays, 'PETSTORE_USAGE_MINUTES_DAYS', environment)
  const hours = fromFlagOrVariable('--usage-hours-days', input.usageHoursDays, 'PETSTORE_USAGE_HOURS_DAYS', environment)
  const minuteDays = minutes.value === undefined ? 7 : parseInteger(minutes.name, minutes.value, 1, 365)
  const hourDays = hours.value === undefined ? 90 : parseInteger(hours.name, hours.value, 1, 3650)
  if (hourDays < minuteDays)
    throw new ConfigError(`${hours.name} (${hourDays}) must be at least ${minutes.name} (${minuteDays}): hours are kept as long as minutes`)
  return { minuteDays, hourDays }
}

/**
 * The URL's scheme is checked and the value never repeated: a database or Redis URL may carry a
 * password, and a complaint ends up in logs.
 */
function parseSecretUrl({ name, value }: { name: string; value: string | undefined }, schemes: string[]): string | null {
  if (value === undefined || value === '') return null
  let protocol = ''
  try {
    protocol = new URL(value).protocol
  } catch {}
  if (!schemes.includes(protocol))
    throw new ConfigError(`${name} must be a ${schemes.map((scheme) => `${scheme}//`).join(' or ')} URL (the value is not shown)`)
  return value
}

/**
 * The PostgreSQL database named by --database-url or PETSTORE_DATABASE_URL, or null for the data file;
 * naming a data file as well is refused, as only one of them would be used.
 */
export function resolveDatabase(input: ConfigInput, environment: Environment): DatabaseConfig | null {
  const url = parseSecretUrl(fromFlagOrVariable('--database-url', input.databaseUrl, 'PETSTORE_DATABASE_URL', environment), [
    'postgres:',
    'postgresql:',
  ])
  const pool = fromFlagOrVariable('--database-pool', input.databasePool, 'PETSTORE_DATABASE_POOL', environment)
  if (url === null) {
    if (pool.value !== undefined) throw new ConfigError(`${pool.name} applies only with --database-url`)
    return null
  }
  if (dataFileNamed(input, environment))
    throw new ConfigError('give either a data file (--data, PETSTORE_DATA) or a database URL, not both')
  return { url, pool: pool.value === undefined ? 4 : parseInteger(pool.name, pool.value, 1, 100) }
}

/** The Redis named by --redis-url or PETSTORE_REDIS_URL, or null for the in-process limiter. */
export function resolveRedisUrl(input: ConfigInput, environment: Environment): string | null {
  return parseSecretUrl(fromFlagOrVariable('--redis-url', input.redisUrl, 'PETSTORE_REDIS_URL', environment), [
    'redis:',
    'rediss:',
    'redis+unix:',
  ])
}

export function resolveDataFile(input: ConfigInput, environment: Environment): string {
  return fromFlagOrVariable('--data', input.data, 'PETSTORE_DATA', environment).value ?? ENVIRONMENTS[envOf(input, environment)].dataFile
}

/** True when the data file was named (--data or PETSTORE_DATA) rather than taken from the default. */
export function dataFileNamed(input: ConfigInput, environment: Environment): boolean {
  return fromFlagOrVariable('--data', input.data, 'PETSTORE_DATA', environment).value !== undefined
}

export function resolveConfig(input: ConfigInput, environment: Environment = process.env): Config {
  const env = envOf(input, environment)
  const defaults = ENVIRONMENTS[env]
  const portText = fromFlagOrVariable('--port', input.port, 'PETSTORE_PORT', environment)
  const port = portText.value === undefined ? defaults.port : parseInteger(portText.name, portText.value, 0, 65535)

  const redisUrl = resolveRedisUrl(input, environment)
  const database = resolveDatabase(input, environment)
  const servers = {
    production: variable(environment, 'PETSTORE_BASE_URL') ?? ENVIRONMENTS.production.baseUrl,
    staging: variable(environment, 'PETSTORE_STAGING_BASE_URL') ?? ENVIRONMENTS.staging.baseUrl,
  }
  // This machine only until told otherwise: a first run puts nothing on the network.
  const host = fromFlagOrVariable('--host', input.host, 'PETSTORE_HOST', environment).value ?? DEFAULT_HOST
  const explicitBase = input.baseUrl ?? variable(environment, defaults.baseUrlVariable)
  const linksFollowPort = !explicitBase && isLoopbackHost(host)
  const parsed = explicitBase
    ? parseBaseUrl(input.baseUrl ? '--base-url' : defaults.baseUrlVariable, explicitBase)
    : parseBaseUrl('base URL', `http://localhost:${port}${new URL(defaults.baseUrl).pathname}`)
  const { basePath } = parsed
  const baseUrl = explicitBase || linksFollowPort ? parsed.baseUrl : basePath
  servers[env] = baseUrl
  for (const name of ['production', 'staging'] as const)
    if (name !== env) servers[name] = parseBaseUrl(ENVIRONMENTS[name].baseUrlVariable, servers[name]).baseUrl

  return freeze({
    env,
    dataFile: resolveDataFile(input, environment),
    host,
    port,
    baseUrl,
    basePath,
    baseUrlFollowsPort: linksFollowPort,
    servers,
    corsOrigins: (input.corsOrigin ?? []).map(parseOrigin),
    trustProxy: parseProxies(input, environment),
    database,
    redisUrl,
    limiterFallback: parseFallback(input, environment, redisUrl !== null),
    metricsAddress: parseListenAddress(fromFlagOrVariable('--metrics-address', input.metricsAddress, 'PETSTORE_METRICS_ADDRESS', environment)),
    consoleAddress: parseConsoleAddress(input, environment, env, port),
    consoleByDefault: fromFlagOrVariable('--console-address', input.consoleAddress, 'PETSTORE_CONSOLE_ADDRESS', environment).value === undefined,
    consoleHosts: parseConsoleHosts(input, environment),
    metricsToken: parseToken(fromFlagOrVariable('--metrics-token', input.metricsToken, 'PETSTORE_METRICS_TOKEN', environment)),
    banAfter: input.banAfter === undefined ? 50 : parseInteger('--ban-after', input.banAfter, BAN_AFTER.min, BAN_AFTER.max),
    banSeconds: input.banSeconds === undefined ? 600 : parseInteger('--ban-seconds', input.banSeconds, BAN_SECONDS.min, BAN_SECONDS.max),
    accessLog: input.accessLog ?? true,
    maxBodyBytes: 64 * 1024,
    maxTrackedAddresses: 100_000,
    shutdownGraceMs: 10_000,
    usageRetention: parseUsageRetention(input, environment),
    scenarios: parseScenarios(input, environment, env),
  })
}

/**
 * The config of a server bound to `port`: a new config, the given one is not changed. With `--port 0`
 * the server asks for a free port before it builds the app (server.ts), so that the app is built from
 * a complete config and its links name the port really in use.
 */
export function withBoundPort(config: Config, port: number): Config {
  if (!config.baseUrlFollowsPort) return freeze({ ...config, port })
  const baseUrl = `http://localhost:${port}${config.basePath}`
  return freeze({ ...config, port, baseUrl, servers: { ...config.servers, [config.env]: baseUrl } })
}

/** Read-only from here on: nothing changes a config once it is checked. */
function freeze(config: Config): Config {
  Object.freeze(config.servers)
  Object.freeze(config.corsOrigins)
  Object.freeze(config.consoleHosts)
  Object.freeze(config.usageRetention)
  return Object.freeze(config)
}

/** A host as it is written in a URL: an IPv6 address in brackets (RFC 3986). */
export function hostInUrl(host: string): string {
  return host.includes(':') ? `[${host}]` : host
}
