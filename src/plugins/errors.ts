/**
 * The one place errors become responses: typed ApiErrors keep their status and code, an unmatched
 * path is a 404 (or a 405 with Allow when the path exists for other methods), and anything else is a
 * 500 whose details go to the server's log, never to the client.
 */
import { Elysia } from 'elysia'
import type { RequestInfo } from './request-context'
import { ApiError, badRequest, internalError, methodNotAllowed, notFound } from '../errors'

export interface ErrorHandlerOptions {
  /** Methods served at this path, or null when no route has it. */
  allowedMethods: (path: string) => string[] | null
  /** Operation name for metrics, from the path: errors may come before routing. */
  operationOf: (method: string, path: string) => string
  onInternalError: (error: unknown, requestId: string | undefined) => void
}

const JSON_TYPE = 'application/json'

export function errorResponse(error: ApiError): Response {
  return new Response(error.body, {
    status: error.status,
    headers: { 'content-type': JSON_TYPE, ...error.headers },
  })
}

/** Puts an error's status, headers and body on the answer and records it; returns the body to send. */
export function answerWith(
  set: { status?: number | string; headers: Record<string, unknown> },
  info: RequestInfo | undefined,
  error: ApiError,
  operation: string,
): string {
  set.status = error.status
  info?.done(error.status, operation)
  set.headers['content-type'] = JSON_TYPE
  Object.assign(set.headers, error.headers)
  return error.body
}

export function errorHandler(options: ErrorHandlerOptions) {
  return new Elysia({ name: 'errors' }).onError({ as: 'global' }, (ctx) => {
    const { code, error, set } = ctx
    const info = (ctx as { info?: RequestInfo }).info
    let answer: ApiError
    if (error instanceof ApiError) answer = error
    else if (code === 'NOT_FOUND') {
      const allow = options.allowedMethods(ctx.path)
      answer = allow ? methodNotAllowed(allow) : notFound(`No resource at ${ctx.path.slice(0, 200)}.`)
    } else if (code === 'PARSE') answer = badRequest('body: is not valid JSON')
    else {
      options.onInternalError(error, info?.requestId)
      answer = internalError()
    }
    return answerWith(set, info, answer, info ? options.operationOf(ctx.request.method, info.path) : 'unmatched')
  })
}
