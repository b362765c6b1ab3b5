/**
 * Per-request bookkeeping: the request id (a sane incoming X-Request-Id is echoed, otherwise one is
 * made), the client address, and one access-log line and the metrics per answer. Whoever produces the
 * answer (a handler, or the error handler) calls `info.done`: an Elysia `onAfterResponse` hook would
 * cost a scheduled task per request, about a fifth of the server's throughput.
 */
import { Elysia } from 'elysia'
import { isIP } from 'node:net'
import type { Server } from 'bun'
import type { ActiveKey } from '../modules/keys/service'
import type { AccessLog } from '../observability/access-log'
import type { Metrics } from '../observability/metrics'

type Recorder = (info: RequestInfo, status: number, operation: string) => void

export class RequestInfo {
  /** The authenticated key, once the gate has found one. */
  key: ActiveKey | undefined = undefined
  private clientAddress: string | undefined
  private recorded = false

  constructor(
    readonly requestId: string,
    /** The URL's path, undecoded, without the query. */
    readonly path: string,
    readonly startedAt: number,
    private readonly server: () => Server<unknown> | null | undefined,
    private readonly request: Request,
    private readonly trustProxy: boolean,
    private readonly recorder: Recorder,
  ) {}

  /** Records the answer once, in the metrics and the access log. */
  done(status: number, operation: string): void {
    if (this.recorded) return
    this.recorded = true
    this.recorder(this, status, operation)
  }

  /** Looked up on first use: requests with a valid key never need it. */
  get method(): string {
    return this.request.method
  }

  get address(): string {
    return (this.clientAddress ??= clientAddress(this.server(), this.request, this.trustProxy))
  }
}

export interface RequestContextOptions {
  /** The listening server, for socket addresses; not read from the context, see below. */
  server: () => Server<unknown> | null | undefined
  metrics: Metrics
  accessLog: AccessLog | null
  trustProxy: boolean
}

const SANE_REQUEST_ID = /^[A-Za-z0-9._:@+=-]{1,128}$/
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

const NEEDS_ESCAPING = /["\\\u0000-\u001f\u007f-\uffff]/

/** A JSON string literal; JSON.stringify only for text that needs escaping (rare, and costly per request). */
export function jsonString(text: string): string {
  return NEEDS_ESCAPING.test(text) ? JSON.stringify(text) : `"${text}"`
}

export function pathOf(url: string): string {
  const start = url.indexOf('/', url.indexOf('//') + 2)
  if (start < 0) return '/'
  const query = url.indexOf('?', start)
  return query < 0 ? url.slice(start) : url.slice(start, query)
}

export function clientAddress(server: Server<unknown> | null | undefined, request: Request, trustProxy: boolean): string {
  if (trustProxy) {
    const forwarded = request.headers.get('x-forwarded-for')
    if (forwarded) {
      const rightmost = forwarded.slice(forwarded.lastIndexOf(',') + 1).trim()
      if (isIP(rightmost)) return rightmost
    }
  }
  return server?.requestIP(request)?.address ?? 'unknown'
}

export function requestContext(options: RequestContextOptions) {
  const { server, metrics, accessLog, trustProxy } = options
  const record: Recorder = (info, status, operation) => {
    const seconds = (performance.now() - info.startedAt) / 1000
    metrics.observe(operation, status, seconds)
    if (!accessLog) return
    // Built by hand, as this runs per request: ids, status and time are from known-safe alphabets, and
    // method, path and client are escaped only when they hold a character JSON would escape.
    const who = info.key ? `"keyId":"${info.key.id}"` : `"client":${jsonString(info.address)}`
    accessLog.write(
      `{"time":"${isoNow()}","requestId":"${info.requestId}","method":${jsonString(info.method)},` +
        `"path":${jsonString(info.path)},"status":${status},"durationMs":${Math.round(seconds * 100_000) / 100},${who}}`,
    )
  }
  return new Elysia({ name: 'request-context' })
    .decorate('info', undefined as unknown as RequestInfo)
    // Elysia decides from a hook's source text which context fields to build and whether to await it:
    // this hook reads only request and set (the server comes from the option, which spares a
    // per-request property definition) and returns nothing, so it runs synchronously.
    .onRequest((context) => {
      const { request, set } = context
      const incoming = request.headers.get('x-request-id')
      const requestId = incoming && SANE_REQUEST_ID.test(incoming) ? incoming : newRequestId()
      // A plain object: Bun turns it into response headers faster than Elysia's prototype-less one, and
      // only fixed header names are ever set on it.
      set.headers = { 'x-request-id': requestId }
      context.info = new RequestInfo(requestId, pathOf(request.url), performance.now(), server, request, trustProxy, record)
    })
}
