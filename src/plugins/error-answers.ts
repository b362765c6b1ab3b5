/**
 * The one place errors become responses: ApiErrors keep their status and code, an unknown path outside
 * the API is a 404 (405 with Allow), storage or a shared rate limiter that does not answer a 503 saying
 * which, a damaged data file a 503 (noted once, so /readyz says so too), anything else a 500 whose
 * details go to the log only (unknown paths under the base get the API's fallback, behind the gate).
 * Errors skip the afterHandle hook, so their answers are recorded here.
 */
import { Elysia } from 'elysia'
import { StorageUnavailableError } from '../domain/repositories'
import { LimiterUnavailableError } from '../limiter/backend'
import {
  ApiError,
  badRequest,
  ClientClosedError,
  DATA_DAMAGED,
  internalError,
  LIMITER_DOWN,
  methodNotAllowed,
  notFound,
  storageUnavailable,
} from '../http/api-errors'
import { bodyUnread } from '../http/json-body'
import { answerWith, type RequestInfo } from './request-info'

export interface ErrorHandlerOptions {
  /** Methods served at this path, or null when no route has it. */
  allowedMethods: (path: string) => string[] | null
  onInternalError: (error: unknown, requestId: string | undefined) => void
  /** Notes a failure that says the stored data is damaged and answers true (storage's damagedCode); the answer is then 503. */
  damaged?: (error: unknown) => boolean
}

/** The answer for a path no route serves: 405 with Allow when other methods are served there, else 404. */
export function unrouted(allowedMethods: (path: string) => string[] | null, path: string): ApiError {
  const allow = allowedMethods(path)
  return allow ? methodNotAllowed(allow) : notFound(`No resource at ${path.slice(0, 200)}.`)
}

export function errorHandler(options: ErrorHandlerOptions) {
  return new Elysia({ name: 'errors' }).onError({ as: 'global' }, (ctx) => {
    const { code, error, set } = ctx
    const info = (ctx as { info?: RequestInfo }).info
    if (error instanceof ClientClosedError) {
      info?.done(ClientClosedError.STATUS, ctx.route)
      return new Response(null, { status: ClientClosedError.STATUS })
    }
    let answer: ApiError
    if (error instanceof ApiError) answer = error
    else if (code === 'NOT_FOUND') answer = unrouted(options.allowedMethods, info?.path ?? ctx.path)
    else if (code === 'PARSE') answer = badRequest('body: is not valid JSON')
    else if (error instanceof StorageUnavailableError) answer = storageUnavailable(error.down)
    else if (error instanceof LimiterUnavailableError) answer = LIMITER_DOWN
    else if (options.damaged?.(error)) answer = DATA_DAMAGED
    else {
      options.onInternalError(error, info?.requestId)
      answer = internalError()
    }
    info?.done(answer.status, ctx.route)
    const body = answerWith(set, info, answer)
    // The console keeps no request record: a refusal there closes a connection whose body is unread all the same.
    if (!info && bodyUnread(ctx.request)) set.headers.connection = 'close'
    return body
  })
}
