/**
 * CORS for browser clients, off unless --cors-origin is given. Preflights for an allowed origin are
 * answered before authentication (browsers never send credentials on them); actual responses expose
 * the headers scripts need: pagination, Location, rate limits and the request id.
 */
import { Elysia } from 'elysia'
import type { RequestInfo } from './request-context'

const EXPOSED = [
  'Link',
  'Location',
  'Retry-After',
  'X-Request-Id',
  'X-RateLimit-Limit',
  'X-RateLimit-Remaining',
  'X-RateLimit-Reset',
  'RateLimit',
  'RateLimit-Policy',
  'Deprecation',
  'Sunset',
  'Idempotent-Replayed',
].join(', ')
const ALLOWED_HEADERS = 'Authorization, Content-Type, Idempotency-Key, X-Request-Id'

export function isPreflight(request: Request): boolean {
  return request.method === 'OPTIONS' && request.headers.has('access-control-request-method')
}

export function cors(origins: string[]) {
  const plugin = new Elysia({ name: 'cors' })
  if (origins.length === 0) return plugin
  const anyOrigin = origins.includes('*')
  return plugin
    .onRequest(({ request, set }) => {
      const origin = request.headers.get('origin')
      if (!origin || !(anyOrigin || origins.includes(origin))) return
      set.headers['access-control-allow-origin'] = anyOrigin ? '*' : origin
      if (!anyOrigin) set.headers.vary = 'Origin'
      set.headers['access-control-expose-headers'] = EXPOSED
    })
    .decorate('info', undefined as unknown as RequestInfo)
    .options(
      '/*',
      ({ request, set, info }) => {
        info.done(204, 'preflight')
        if (!isPreflight(request) || !set.headers['access-control-allow-origin'])
          return new Response(null, { status: 204 })
        set.headers['access-control-allow-methods'] = 'GET, POST, OPTIONS'
        set.headers['access-control-allow-headers'] = ALLOWED_HEADERS
        set.headers['access-control-max-age'] = '600'
        return new Response(null, { status: 204 })
      },
      { detail: { hide: true } },
    )
}
