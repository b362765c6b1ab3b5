/**
 * Per-request bookkeeping: the request id (a sane incoming X-Request-Id is echoed, otherwise one is
 * made), the client address, and after the response one access-log line and the metrics.
 */
import { Elysia } from 'elysia'
import { isIP } from 'node:net'
import type { Server } from 'bun'
import type { ActiveKey } from '../modules/keys/service'
import type { AccessLog } from '../observability/access-log'
import type { Metrics } from '../observability/metrics'

export interface RequestInfo {
  requestId: string
  /** The URL's path, undecoded, without the query. */
  path: string
  startedAt: number
  address: string
  /** The authenticated key, once the gate has found one. */
  key: ActiveKey | undefined
}

export interface RequestContextOptions {
  metrics: Metrics
  accessLog: AccessLog | null
  trustProxy: boolean
  /** Operation name for metrics: by the matched route, or by the path when refused before routing. */
  operationOf: (method: string, route: string | undefined, path: string) => string
}

const SANE_REQUEST_ID = /^[A-Za-z0-9._:@+=-]{1,128}$/
const idPrefix = crypto.randomUUID().slice(0, 8)
let idCounter = 0

function newRequestId(): string {
  return `${idPrefix}-${(++idCounter).toString(36)}`
}

export function pathOf(url: string): string {
  const start = url.indexOf('/', url.indexOf('//') + 2)
  if (start < 0) return '/'
  const query = url.indexOf('?', start)
  return query < 0 ? url.slice(start) : url.slice(start, query)
}

export function clientAddress(server: Server<unknown> | null, request: Request, trustProxy: boolean): string {
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
  const { metrics, accessLog, trustProxy, operationOf } = options
  return new Elysia({ name: 'request-context' })
    .decorate('info', undefined as unknown as RequestInfo)
    .onRequest((ctx) => {
      const incoming = ctx.request.headers.get('x-request-id')
      const requestId = incoming && SANE_REQUEST_ID.test(incoming) ? incoming : newRequestId()
      ctx.set.headers['x-request-id'] = requestId
      ctx.info = {
        requestId,
        path: pathOf(ctx.request.url),
        startedAt: performance.now(),
        address: clientAddress(ctx.server, ctx.request, trustProxy),
        key: undefined,
      }
    })
    .onAfterResponse({ as: 'global' }, (ctx) => {
      const info = ctx.info
      if (!info) return
      const seconds = (performance.now() - info.startedAt) / 1000
      const response = (ctx as { responseValue?: unknown }).responseValue
      const status = response instanceof Response ? response.status : Number(ctx.set.status) || 200
      const operation = operationOf(ctx.request.method, (ctx as { route?: string }).route, info.path)
      metrics.observe(operation, status, seconds)
      accessLog?.write({
        time: new Date().toISOString(),
        requestId: info.requestId,
        method: ctx.request.method,
        path: info.path,
        status,
        durationMs: Math.round(seconds * 100_000) / 100,
        ...(info.key ? { keyId: info.key.id } : { client: info.address }),
      })
    })
}
