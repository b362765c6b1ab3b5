/**
 * The `/metrics` answer: Prometheus text, behind a bearer token when the operator set one. The
 * metrics name key ids and traffic, so an operator either moves them to a listener of their own
 * (--metrics-address) or asks for a token (--metrics-token), and without either only this machine gets
 * them from the API's listener; the token is compared by its hash, so the
 * time a check takes says nothing about how much of a guess was right.
 */
import { timingSafeEqual } from 'node:crypto'
import { ApiError, errorResponse } from '../http/api-errors'
import { bearerToken } from '../http/bearer-token'
import { isLoopbackAddress } from '../http/client-address'

const TEXT = { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' }
const NEEDS_TOKEN = new ApiError(401, 'unauthorized', 'The metrics need a token: send Authorization: Bearer <token>.', {
  'www-authenticate': 'Bearer realm="petstore-metrics"',
})

const LOOPBACK_ONLY = new ApiError(
  403,
  'forbidden',
  '/metrics beside the API answers only clients on this machine; the operator opens it with --metrics-address or --metrics-token.',
)

const digest = (text: string) => new Bun.CryptoHasher('sha256').update(text).digest()

export function metricsEndpoint(render: () => string, token: string | null): (request: Request) => Response {
  const expected = token === null ? null : digest(token)
  return function answerMetrics(request) {
    if (expected) {
      const given = bearerToken(request.headers.get('authorization'))
      if (!given || !timingSafeEqual(digest(given), expected)) return errorResponse(NEEDS_TOKEN)
    }
    return new Response(render(), { headers: TEXT })
  }
}

/**
 * /metrics on the API's listener, which may be open to the network: without a token it answers only
 * clients on this machine (the client as the request context reads it, behind trusted proxies too).
 */
export function metricsBesideApi(answer: (request: Request) => Response, token: string | null) {
  return (request: Request, client: string): Response =>
    token !== null || isLoopbackAddress(client) ? answer(request) : errorResponse(LOOPBACK_ONLY)
}
