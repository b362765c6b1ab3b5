/**
 * Per-request bookkeeping, declared once: the request id and the record (request-info.ts) made for each
 * request, refused here when its URL cannot be routed (routed-path.ts), and per answer what it leaves
 * (answer-records.ts). One `afterHandle` hook closes the record for every answer a route gives, the
 * error handler for errors; not `onAfterResponse`, which costs a scheduled task per request (a fifth of
 * the throughput).
 */
import { Elysia } from 'elysia'
import type { Server } from 'bun'
import type { ApiError } from '../http/api-errors'
import { SANE_REQUEST_ID } from '../http/request-id'
import { type AnswerRecords, answerRecorder } from './answer-records'
import { type AnswerSet, answerWith, type Proxies, RequestInfo, requestInfo } from './request-info'
import { routedPath, unroutedPath } from './routed-path'

export interface RequestContextOptions extends AnswerRecords {
  /** The listening server, for socket addresses; not read from the context, see below. */
  server: () => Server<unknown> | null | undefined
  proxies: Proxies
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

const idPrefix = crypto.randomUUID().slice(0, 8)
let idCounter = 0

function newRequestId(): string {
  return `${idPrefix}-${(++idCounter).toString(36)}`
}

export function requestContext(options: RequestContextOptions) {
  const { server, proxies, rateLimitFields } = options
  const record = answerRecorder(options)
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

/** Answers and records a request refused before routing. */
function refuseUnrouted(set: AnswerSet, info: RequestInfo, error: ApiError): string {
  info.done(error.status, undefined)
  return answerWith(set, info, error)
}

/** Refuses with `error`, or with the refusal that came instead of its rate-limit fields. */
function refusalInstead(set: AnswerSet, info: RequestInfo, error: ApiError) {
  return (instead: ApiError | undefined) => refuseUnrouted(set, info, instead ?? error)
}

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
