/**
 * CORS for browser clients, off unless --cors-origin is given. Preflights under the base are answered by
 * an API route the gate lets through (browsers send no credentials on them); responses expose the headers
 * scripts need and say `Vary: Origin`, so a shared cache never hands one origin's answer to another.
 */
import { Elysia } from 'elysia'
import { type RequestInfo, requestInfo } from './request-info'

const EXPOSED =
  'Link, Location, Retry-After, X-Request-Id, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset, RateLimit, ' +
  'RateLimit-Policy, Deprecation, Sunset, Idempotent-Replayed, Preference-Applied'
const ALLOWED_HEADERS = 'Authorization, Content-Type, Idempotency-Key, Prefer, X-Request-Id'

export function isPreflight(request: Request): boolean {
  return request.method === 'OPTIONS' && request.headers.has('access-control-request-method')
}

/** The response headers for allowed origins; on the whole app. */
export function cors(origins: string[]) {
  const plugin = new Elysia({ name: 'cors' })
  if (origins.length === 0) return plugin
  const anyOrigin = origins.includes('*')
  return plugin.onRequest(({ request, set }) => {
    set.headers.vary = 'Origin'
    const origin = request.headers.get('origin')
    if (!origin || !(anyOrigin || origins.includes(origin))) return
    set.headers['access-control-allow-origin'] = anyOrigin ? '*' : origin
    set.headers['access-control-expose-headers'] = EXPOSED
  })
}

/**
 * The preflight route, for the API instance. Any other OPTIONS request is handed to `otherwise` (the
 * API's answer for a method it does not serve).
 */
export function preflight(origins: string[], otherwise: (info: RequestInfo) => never) {
  const plugin = new Elysia({ name: 'preflight' }).use(requestInfo)
  if (origins.length === 0) return plugin
  return plugin.options(
    '/*',
    ({ request, set, info }) => {
      if (!isPreflight(request)) otherwise(info)
      info.operation = 'preflight'
      if (set.headers['access-control-allow-origin']) {
        set.headers['access-control-allow-methods'] = 'GET, POST, OPTIONS'
        set.headers['access-control-allow-headers'] = ALLOWED_HEADERS
        set.headers['access-control-max-age'] = '600'
      }
      return new Response(null, { status: 204 })
    },
    { parse: 'none', detail: { hide: true } },
  )
}
