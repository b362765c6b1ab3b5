/**
 * What a trusted proxy in front of the console says of a request: the scheme and host the browser used,
 * and the client behind it, believed only from a proxy named with --trust-proxy.
 */
import type { Server } from 'bun'
import { clientSubject, normaliseAddress, type TrustedProxies } from '../../../http/client-address'
import { clientAddress } from '../../../plugins/request-info'
import type { AddressSubject } from '../../../domain/subject'

export function proxyReading(trustProxy: TrustedProxies, server: () => Server<unknown> | null) {
  /** Whether the request came through a trusted proxy, which then says the scheme and host the browser used. */
  const viaProxy = (request: Request) => {
    const peer = server()?.requestIP(request)?.address
    const normal = peer && normaliseAddress(peer)
    return normal ? trustProxy.has(normal) : false
  }
  /** A forwarded header's first value, else null (believed only via a proxy). */
  const forwarded = (request: Request, name: string) => request.headers.get(name)?.split(',')[0]?.trim() || null
  /** The client's limiter subject, found as the API finds it (a proxy without X-Forwarded-For is the API's to warn of). */
  const proxies = { trusted: trustProxy, onUnforwarded() {}, onUnreadable() {} }
  const clientOf = (request: Request): AddressSubject => clientSubject(clientAddress(server(), request, proxies))
  const isHttps = (request: Request) => viaProxy(request) && forwarded(request, 'x-forwarded-proto') === 'https'
  return { viaProxy, forwarded, clientOf, isHttps }
}

export type ProxyReading = ReturnType<typeof proxyReading>
