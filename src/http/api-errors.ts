/**
 * Typed errors for everything the API can refuse. Services throw these; one `onError` in the app turns
 * them into the Error body `{code, message, status}` so no handler formats an error by hand.
 */

export type ErrorCode =
  | 'invalid_request'
  | 'unauthorized'
  | 'key_expired'
  | 'forbidden'
  | 'not_found'
  | 'method_not_allowed'
  | 'idempotency_conflict'
  | 'request_timeout'
  | 'payload_too_large'
  | 'unsupported_media_type'
  | 'misdirected_request'
  | 'rate_limited'
  | 'key_banned'
  | 'address_banned'
  | 'internal_error'
  | 'not_implemented'
  | 'unavailable'

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: ErrorCode,
    message: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(message)
  }

  private serialized: string | undefined

  /** The Error body, serialised once: refusals on the hot path reuse their error objects. */
  get body(): string {
    return (this.serialized ??= JSON.stringify({ code: this.code, message: this.message, status: this.status }))
  }
}

export const badRequest = (message: string) => new ApiError(400, 'invalid_request', message)
export const forbidden = (message: string) => new ApiError(403, 'forbidden', message)
export const notFound = (message = 'The requested resource could not be found.') => new ApiError(404, 'not_found', message)
export const petNotFound = (petId: string) => notFound(`No pet with id ${petId}.`)
export const methodNotAllowed = (allow: string[]) =>
  new ApiError(405, 'method_not_allowed', `Method not allowed here; use ${allow.join(', ')}.`, {
    allow: allow.join(', '),
  })
export const idempotencyConflict = () =>
  new ApiError(409, 'idempotency_conflict', 'Idempotency-Key was already used with a different request body.')
export const payloadTooLarge = (limit: number, headers: Record<string, string> = {}) =>
  new ApiError(413, 'payload_too_large', `Request body is larger than ${limit} bytes.`, headers)
/** RFC 9110 §15.5.9: the body did not arrive in time; the connection closes with the answer. */
export const requestTimeout = (seconds: number) =>
  new ApiError(408, 'request_timeout', `The request body did not arrive within ${seconds} s.`, { connection: 'close' })
export const unsupportedMediaType = () => new ApiError(415, 'unsupported_media_type', 'Content-Type must be application/json.')
/** RFC 9110 §15.5.16: a body in a content coding the server does not decode; Accept-Encoding says which it takes. */
export const unsupportedContentCoding = () =>
  new ApiError(415, 'unsupported_media_type', 'Content-Encoding: the body must be sent uncompressed (identity).', {
    'accept-encoding': 'identity',
  })
/** RFC 9110 §15.5.20: the request names a host this listener does not answer to. */
export const misdirectedRequest = (message: string) => new ApiError(421, 'misdirected_request', message)
export const notImplemented = (what: string) => new ApiError(501, 'not_implemented', `${what} is not implemented by this server.`)
export const unavailable = (message: string) => new ApiError(503, 'unavailable', message)
/**
 * Storage that does not answer at all (`down`: a database away, so reads fail too and no answer may say
 * they work), or answers but takes no writes (disk full, a read-only file or database).
 */
export const storageUnavailable = (down: boolean) =>
  unavailable(down ? 'Storage does not answer now; try again shortly.' : 'Storage cannot accept writes right now; reads still work.')
/**
 * The shared limiter (Redis) does not answer: plans are entitlements and the address bucket is what
 * stops key guessing, so the request is refused rather than let through unlimited.
 */
export const LIMITER_DOWN = new ApiError(503, 'unavailable', 'Rate limits cannot be checked right now; retry in a second.', {
  'retry-after': '1',
})
/** A read or write met a damaged page of the data file: nothing is answered from it until a restart on a good copy. */
export const DATA_DAMAGED = unavailable('The data file is damaged; the server needs a restart on a good copy.')
/**
 * RFC 6585 §4 refusals, each with Retry-After: the bucket in force is empty, or the key or address is
 * banned. `banAfter` is --ban-after: after that many requests within a minute sent before their wait was
 * over, the next such request starts a ban (docs/api.md); each message says it the same way.
 */
export const rateLimited = (retryAfter: number, banAfter: number) =>
  new ApiError(
    429,
    'rate_limited',
    `Rate limit exceeded; retry after ${retryAfter} s. Requests sent before then count toward a ban: after ${banAfter} of them within a minute, the next one starts it.`,
    { 'retry-after': String(retryAfter) },
  )
export const keyBanned = (retryAfter: number, banAfter: number) =>
  new ApiError(
    429,
    'key_banned',
    `Banned for ${retryAfter} s: more than ${banAfter} requests within a minute were sent before the time a 429 told them to wait for.`,
    { 'retry-after': String(retryAfter) },
  )
export const addressBanned = (retryAfter: number, banAfter: number) =>
  new ApiError(
    429,
    'address_banned',
    `Your address is banned for ${retryAfter} s: more than ${banAfter} requests without a valid key within a minute were sent before the time a 429 told them to wait for.`,
    { 'retry-after': String(retryAfter) },
  )
export const internalError = () => new ApiError(500, 'internal_error', 'The server failed to handle this request.')

export const JSON_TYPE = 'application/json'

/** An error as a whole response, for answers given outside Elysia's hooks. */
export function errorResponse(error: ApiError): Response {
  return new Response(error.body, {
    status: error.status,
    headers: { 'content-type': JSON_TYPE, ...error.headers },
  })
}

/**
 * The client closed the connection before the request was complete. Nobody is left to answer; the log
 * and metrics record it as 499 ("client closed request", as nginx does), not as a server error.
 */
export class ClientClosedError extends Error {
  static readonly STATUS = 499
  constructor() {
    super('the client closed the connection before its request was complete')
  }
}
