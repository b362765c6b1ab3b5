/**
 * The `/metrics` answer: Prometheus text, which names key ids and traffic, so it is served on a listener
 * of its own (--metrics-address), behind a token (--metrics-token), or else to this machine only. The
 * token is compared by its hash, so a check's time says nothing of how much of a guess was right.
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
