/**
 * What the console reads of a request before anything else: whether a trusted proxy brought it (and so
 * which scheme, host and client it names), whether it is for one of the console's host names with a body
 * it may send (421, 413), and whether a change comes from the console's own page (Origin, 403).
 */
import type { Server } from 'bun'
import { forbidden, misdirectedRequest, payloadTooLarge } from '../../../http/api-errors'
import { AllowedHosts } from '../../../http/allowed-hosts'
import { clientSubject, normaliseAddress, type TrustedProxies } from '../../../http/client-address'
import { clientAddress } from '../../../plugins/request-info'
import type { AddressSubject } from '../../../domain/subject'
import { MAX_BODY_BYTES } from '../model'

const MISDIRECTED = misdirectedRequest(
  'This console does not answer to that host name: use its own address, or a name given with --console-host.',
)
const TOO_LARGE = payloadTooLarge(MAX_BODY_BYTES, { connection: 'close' })

export function requestReading(
  options: { trustProxy: TrustedProxies; address: { host: string; port: number }; hosts: readonly string[] },
  server: () => Server<unknown> | null,
) {
  let hosts: AllowedHosts | undefined
  /** Whether the request came through a trusted proxy, which then says the scheme and host the browser used. */
  const viaProxy = (request: Request) => {
    const peer = server()?.requestIP(request)?.address
    const normal = peer && normaliseAddress(peer)
    return normal ? options.trustProxy.has(normal) : false
  }
  const forwarded = (request: Request, name: string) => request.headers.get(name)?.split(',')[0]?.trim() || null
  /** The client's limiter subject, found as the API finds it (a proxy without X-Forwarded-For is the API's to warn of). */
  const proxies = { trusted: options.trustProxy, onUnforwarded() {} }
  const clientOf = (request: Request): AddressSubject => clientSubject(clientAddress(server(), request, proxies))
  const isHttps = (request: Request) => viaProxy(request) && forwarded(request, 'x-forwarded-proto') === 'https'

  /** A request that changes something with the session cookie must come from this console's page. */
  const checkOrigin = (request: Request) => {
    const host = (viaProxy(request) && forwarded(request, 'x-forwarded-host')) || request.headers.get('host')
    const expected = `${isHttps(request) ? 'https' : 'http'}://${host}`.toLowerCase()
    if (request.headers.get('origin')?.toLowerCase() !== expected)
      throw forbidden(
        `A request that changes something must come from this console's own page: Origin ${expected.slice(0, 300)} ` +
          '(a script uses a token instead: petstore operators token NAME).',
      )
  }

  /** What every request passes first (see the header): the host name, then the declared body's size. */
  const admit = (request: Request): void => {
    hosts ??= new AllowedHosts({ host: options.address.host, port: server()?.port ?? options.address.port }, options.hosts)
    if (!hosts.has(request.headers.get('host'))) throw MISDIRECTED
    if (viaProxy(request) && request.headers.has('x-forwarded-host') && !hosts.has(forwarded(request, 'x-forwarded-host')))
      throw MISDIRECTED
    const declared = request.headers.get('content-length')
    if (declared !== null && !(Number(declared) <= MAX_BODY_BYTES)) throw TOO_LARGE
  }

  return { clientOf, isHttps, checkOrigin, admit }
}
