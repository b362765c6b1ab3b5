/**
 * A request that changes something with the session cookie must come from this console's own page: its
 * `Origin` is the scheme and host the browser used (a trusted proxy's, when one brought it), else 403.
 */
import { forbidden } from '../../../http/api-errors'
import type { ProxyReading } from './proxy'

export function originCheck({ viaProxy, forwarded, isHttps }: ProxyReading): (request: Request) => void {
  return (request) => {
    const host = (viaProxy(request) && forwarded(request, 'x-forwarded-host')) || request.headers.get('host')
    const expected = `${isHttps(request) ? 'https' : 'http'}://${host}`.toLowerCase()
    if (request.headers.get('origin')?.toLowerCase() !== expected)
      throw forbidden(
        `A request that changes something must come from this console's own page: Origin ${expected.slice(0, 300)} ` +
          '(a script uses a token instead: petstore operators token NAME).',
      )
  }
}
