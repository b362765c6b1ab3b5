/**
 * Per-request bookkeeping, declared once (`requestInfo`): the request id, path and client address, and
 * per answer one access-log line, the metrics, the key's usage and the console's recent requests. One
 * `afterHandle` hook closes the record for every answer a route gives, the error handler for errors;
 * not `onAfterResponse`, which costs a scheduled task per request (a fifth of the throughput). A URL
 * the router cannot read (a `Host` that is not a host) is a 400 here, so the path logged is the one routed.
 */
import { Elysia } from 'elysia'
import type { Server } from 'bun'
import { isIPv6 } from 'node:net'
import { type ApiError, badRequest, JSON_TYPE } from '../http/api-errors'
import { MISSING_KEY } from '../http/bearer-token'
import { clientSubject, forwardedClient, normaliseAddress, type TrustedProxies } from '../http/client-address'
import type { ActiveKey } from '../domain/api-key'
import type { AddressSubject } from '../domain/subject'
import { bodyUnread } from '../http/json-body'
import { SANE_REQUEST_ID } from '../http/request-id'
import type { AccessLog } from '../observability/access-log'
import type { Metrics } from '../observability/metrics'
import type { UsageCounter } from '../observability/usage'
import { detached, type RecentRequests } from '../observability/recent-requests'

type Recorder = (info: RequestInfo, status: number, route: string | undefined) => void

export class RequestInfo {
  /** The authenticated key, once the gate has found one. */
  key: ActiveKey | undefined = undefined
  /** Set only by catch-all routes ('unmatched', 'preflight'); else the answer is recorded under its route's operationId. */
  operation: string | undefined = undefined
  private clientAddress: string | undefined
  private subject: AddressSubject | undefined
  private recorded = false

  constructor(
    readonly requestId: string,
    /** The path that was routed, undecoded, without the query. */
    readonly path: string,
    readonly startedAt: number,
    private readonly server: () => Server<unknown> | null | undefined,
    private readonly request: Request,
    private readonly proxies: Proxies,
    private readonly recorder: Recorder,
  ) {}

  /** Records the answer once, in the metrics, the usage and the access log, under the operation of the route matched. */
  done(status: number, route: string | undefined): void {
    if (this.recorded) return
    this.recorded = true
    this.recorder(this, status, route)
  }

  get method(): string {
    return this.request.method
  }

  /** The client's address, normalised (client-address.ts), looked up on first use: requests with a key never need it. */
  get address(): string {
    return (this.clientAddress ??= clientAddress(this.server(), this.request, this.proxies))
  }

  /** True when the request has a body nobody read (see json-body.ts): its connection must close. */
  get bodyUnread(): boolean {
    return bodyUnread(this.request)
  }

  /** The rate limiter's subject for a request without a valid key. */
  get addressSubject(): AddressSubject {
    return (this.subject ??= clientSubject(this.address))
  }
}

export interface RequestContextOptions {
  /** The listening server, for socket addresses; not read from the context, see below. */
  server: () => Server<unknown> | null | undefined
  metrics: Metrics
  accessLog: AccessLog | null
  /** Per-key usage; null when it is not kept (storage that cannot be written). */
  usage: UsageCounter | null
  /** The last answers, for the console. */
  recent: RecentRequests
  proxies: Proxies
  /** The operationId of a route, or 'unmatched'. */
  operationOf: (method: string, route: string) => string
  /** Whether a routed path is the API's (http/routes.ts apiPaths): only its answers are usage and recent requests. */
  isApi: (path: string) => boolean
  /**
   * Puts the rate-limit fields on a refusal given here, before routing: a promise of the refusal to give
   * instead, if any (the limiter's own), or undefined for a path outside the API.
   */
  rateLimitFields?: (
    request: Request,
    info: RequestInfo,
    set: { headers: Record<string, unknown> },
  ) => Promise<ApiError | undefined> | undefined
}

export interface Proxies {
  trusted: TrustedProxies
  /** Called when a trusted proxy sent no X-Forwarded-For: its clients then share its address. */
  onUnforwarded: (proxy: string, request: Request) => void
}

const idPrefix = crypto.randomUUID().slice(0, 8)
let idCounter = 0

function newRequestId(): string {
  return `${idPrefix}-${(++idCounter).toString(36)}`
}

let isoMs = 0
let isoText = ''
function isoNow(): string {
  const now = Date.now()
  if (now !== isoMs) {
    isoMs = now
    isoText = new Date(now).toISOString()
  }
  return isoText
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what must be escaped
const NEEDS_ESCAPING = /["\\\u0000-\u001f\u007f-\uffff]/

/** A JSON string literal; JSON.stringify only for text that needs escaping (rare, and costly per request). */
export function jsonString(text: string): string {
  return NEEDS_ESCAPING.test(text) ? JSON.stringify(text) : `"${text}"`
}

/**
 * Scheme and authority as RFC 3986 allows them in an http(s) URL (reg-name, IPv4 or [IPv6], optional
 * port). Bun builds `request.url` from `Host`, and leaves it a bare path when it cannot.
 */
const ROUTABLE_URL = /^https?:\/\/(?:(?:[A-Za-z0-9\-._~!$&'()*+,;=]|%[0-9A-Fa-f]{2})+|\[[0-9A-Fa-f:.]+\])(?::(\d{1,5}))?\//
/** Elysia's router skips the URL's first eleven characters unread: a shorter `http://` + host would route wrong. */
const ROUTER_PATH_SEARCH_FROM = 11
const BAD_HOST = badRequest('Host: is not a host name, IP address or [IPv6] literal with an optional port (1 to 65535)')
// Bun drops a default port from the URL it builds (x:80 becomes http://x/), so what counts is what is left.
const SHORT_HOST = badRequest(
  'Host: a host of fewer than four characters, its port included, cannot be routed (x:80 counts as x); use a longer name or another port, such as x:8080',
)

/**
 * The access log keeps this much of a path, then `…`: any client, even a banned one, can send a path of
 * 16 KiB (9 characters a byte once escaped), and the log must not grow, or drop others' lines, at that rate.
 */
const LOGGED_PATH_CHARS = 2048

/** A query longer than this is not kept alive by the path sliced from its URL. */
const LONG_QUERY = 256

/** Scheme and authority of the last URL found routable, with the slash after them: clients repeat them. */
let routableOrigin = '\u0000'

/** The path of the URL as the router reads it, or the reason it cannot be read that way. */
export function routedPath(url: string): string | ApiError {
  let start = routableOrigin.length - 1
  if (!url.startsWith(routableOrigin)) {
    const routable = ROUTABLE_URL.exec(url)
    if (routable === null || (routable[1] !== undefined && !(Number(routable[1]) >= 1 && Number(routable[1]) <= 65535))) return BAD_HOST
    start = url.indexOf('/', url.charCodeAt(4) === 0x73 /* s */ ? 8 : 7)
    if (start < ROUTER_PATH_SEARCH_FROM) return SHORT_HOST
    if (url.charCodeAt(url.indexOf('//') + 2) === 0x5b /* [ */ && !isIPv6(url.slice(url.indexOf('[') + 1, url.indexOf(']'))))
      return BAD_HOST
    routableOrigin = detached(url.slice(0, start + 1))
  }
  const query = url.indexOf('?', start)
  if (query < 0) return url.slice(start)
  // The path outlives the request in the records of answers: sliced, it would hold a long query with it.
  return url.length - query > LONG_QUERY ? detached(url.slice(start, query)) : url.slice(start, query)
}

/** The path of a target that could not be routed, for the log only. */
function unroutedPath(url: string): string {
  const start = url.startsWith('/') ? 0 : url.indexOf('/', url.indexOf('//') + 2)
  if (start < 0) return '/'
  const query = url.indexOf('?', start)
  return detached((query < 0 ? url.slice(start) : url.slice(start, query)).slice(0, 1024))
}

export function clientAddress(server: Server<unknown> | null | undefined, request: Request, proxies: Proxies): string {
  const socket = server?.requestIP(request)?.address
  const peer = socket && normaliseAddress(socket)
  if (!peer) return 'unknown'
  if (!proxies.trusted.has(peer)) return peer
  const forwarded = request.headers.get('x-forwarded-for')
  if (forwarded) return forwardedClient(peer, forwarded, proxies.trusted)
  proxies.onUnforwarded(peer, request)
  return peer
}

export function requestContext(options: RequestContextOptions) {
  const { server, metrics, accessLog, usage, recent, proxies, operationOf, isApi, rateLimitFields } = options
  const record: Recorder = (info, status, route) => {
    const seconds = (performance.now() - info.startedAt) / 1000
    // Read once: each read of request.method makes a string.
    const method = info.method
    const operation = info.operation ?? (route === undefined ? 'unmatched' : operationOf(method, route))
    metrics.observe(operation, status, seconds)
    const durationMs = Math.round(seconds * 100_000) / 100
    const key = info.key
    if (isApi(info.path)) {
      usage?.count(key?.id, status, seconds)
      recent.add({
        time: Date.now(),
        method,
        path: info.path,
        status,
        keyId: key ? key.id : null,
        client: key ? null : info.address,
        durationMs,
        requestId: info.requestId,
      })
    }
    if (!accessLog) return
    // Built by hand, as this runs per request: ids, status and time are from known-safe alphabets, and
    // method, path and client are escaped only when they hold a character JSON would escape.
    const who = info.key ? `"keyId":"${info.key.id}"` : `"client":${jsonString(info.address)}`
    accessLog.write(
      `{"time":"${isoNow()}","requestId":"${info.requestId}","method":${jsonString(method)},` +
        `"path":${jsonString(info.path.length > LOGGED_PATH_CHARS ? `${info.path.slice(0, LOGGED_PATH_CHARS)}…` : info.path)},"status":${status},"durationMs":${durationMs},${who}}`,
    )
  }
  return (
    new Elysia({ name: 'request-context' })
      .use(requestInfo)
      // Elysia decides from a hook's source text which context to build and whether to await it: this
      // hook reads only request and set, and returns from a variable, so it runs synchronously; only a
      // refusal whose rate-limit fields are still being read is a promise.
      .onRequest((context) => {
        const { request, set } = context
        const incoming = request.headers.get('x-request-id')
        const requestId = incoming && SANE_REQUEST_ID.test(incoming) ? incoming : newRequestId()
        // A plain object: Bun turns it into response headers faster than Elysia's prototype-less one, and
        // only fixed header names are ever set on it.
        set.headers = { 'x-request-id': requestId }
        const url = request.url
        const path = routedPath(url)
        const routable = typeof path === 'string'
        const info = new RequestInfo(requestId, routable ? path : unroutedPath(url), performance.now(), server, request, proxies, record)
        context.info = info
        if (routable) return undefined
        const fields = rateLimitFields?.(request, info, set)
        const answer = fields === undefined ? refuseUnrouted(set, info, path) : fields.then(refusalInstead(set, info, path))
        return answer
      })
      .onAfterHandle({ as: 'global' }, recordAnswer)
  )
}

type AnswerSet = { status?: number | string; headers: Record<string, unknown> }

/** Answers and records a request refused before routing. */
function refuseUnrouted(set: AnswerSet, info: RequestInfo, error: ApiError): string {
  info.done(error.status, undefined)
  return answerWith(set, info, error)
}

/** Refuses with `error`, or with the refusal that came instead of its rate-limit fields. */
function refusalInstead(set: AnswerSet, info: RequestInfo, error: ApiError) {
  return (instead: ApiError | undefined) => refuseUnrouted(set, info, instead ?? error)
}

/** The key the gate verified; a handler reached without one (a bug) answers as a missing key, never a 500. */
export function verifiedKey(info: RequestInfo): ActiveKey {
  if (!info.key) throw MISSING_KEY
  return info.key
}

/** The per-request record in the context, for every instance that reads `info`; requestContext fills it. */
export const requestInfo = new Elysia({ name: 'request-info' }).decorate('info', undefined as unknown as RequestInfo)

/** Records every answer a route gives, the gate's refusals included; destructured, as Elysia reads its source. */
function recordAnswer({
  set,
  info,
  route,
  responseValue,
}: {
  set: { status?: number | string }
  info: RequestInfo
  route: string
  responseValue: unknown
}) {
  info.done(responseValue instanceof Response ? responseValue.status : (set.status as number), route)
}

/**
 * Puts an error's status, headers and body on the answer; returns the body to send. A refusal that left
 * the body unread closes the connection, else it stays held, with what arrived, until the client stops.
 */
export function answerWith(
  set: { status?: number | string; headers: Record<string, unknown> },
  info: RequestInfo | undefined,
  error: ApiError,
): string {
  set.status = error.status
  set.headers['content-type'] = JSON_TYPE
  Object.assign(set.headers, error.headers)
  if (info?.bodyUnread) set.headers.connection = 'close'
  return error.body
}
