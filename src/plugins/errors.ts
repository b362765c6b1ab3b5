/**
 * The one place errors become responses: typed ApiErrors keep their status and code, a path outside
 * the API that no route has is a 404 (or a 405 with Allow when the path exists for other methods), and
 * anything else is a 500 whose details go to the server's log, never to the client. Paths under the
 * base never get here unrouted: the API's own fallback route answers them, behind the gate.
 */
import { Elysia } from 'elysia'
import type { RequestInfo } from './request-context'
import { ApiError, badRequest, ClientClosedError, internalError, methodNotAllowed, notFound } from '../errors'

export interface ErrorHandlerOptions {
  /** Methods served at this path, or null when no route has it. */
  allowedMethods: (path: string) => string[] | null
  onInternalError: (error: unknown, requestId: string | undefined) => void
}

const JSON_TYPE = 'application/json'

export function errorResponse(error: ApiError): Response {
  return new Response(error.body, {
    status: error.status,
    headers: { 'content-type': JSON_TYPE, ...error.headers },
  })
}

/**
 * Puts an error's status, headers and body on the answer and records it; returns the body to send. A
 * refusal that left the request's body unread closes the connection once sent (Bun then closes it at
 * once): otherwise the connection stays held, with what arrived of the body, until the client stops.
 */
export function answerWith(
  set: { status?: number | string; headers: Record<string, unknown> },
  info: RequestInfo | undefined,
  error: ApiError,
): string {
  set.status = error.status
  info?.done(error.status, info.operation)
  set.headers['content-type'] = JSON_TYPE
  Object.assign(set.headers, error.headers)
  if (info?.bodyUnread) set.headers.connection = 'close'
  return error.body
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
      info?.done(ClientClosedError.STATUS, info.operation)
      return new Response(null, { status: ClientClosedError.STATUS })
    }
    let answer: ApiError
    if (error instanceof ApiError) answer = error
    else if (code === 'NOT_FOUND') answer = unrouted(options.allowedMethods, info?.path ?? ctx.path)
    else if (code === 'PARSE') answer = badRequest('body: is not valid JSON')
    else {
      options.onInternalError(error, info?.requestId)
      answer = internalError()
    }
    return answerWith(set, info, answer)
  })
}
