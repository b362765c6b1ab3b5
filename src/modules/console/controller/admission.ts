/**
 * What every request to the console passes first, before routing and before any body is read: a `Host`
 * (or a trusted proxy's X-Forwarded-Host) that is one of the console's names, else 421 (DNS rebinding);
 * a declared body of at most MAX_BODY_BYTES, else 413.
 */
import type { Server } from 'bun'
import { misdirectedRequest, payloadTooLarge } from '../../../http/api-errors'
import { AllowedHosts } from '../../../http/allowed-hosts'
import { MAX_BODY_BYTES } from '../model'
import type { ProxyReading } from './proxy'

const MISDIRECTED = misdirectedRequest(
  'This console does not answer to that host name: use its own address, or a name given with --console-host.',
)
const TOO_LARGE = payloadTooLarge(MAX_BODY_BYTES, { connection: 'close' })

export function admission(
  options: { address: { host: string; port: number }; hosts: readonly string[] },
  server: () => Server<unknown> | null,
  { viaProxy, forwarded }: ProxyReading,
): (request: Request) => void {
  let hosts: AllowedHosts | undefined
  return (request) => {
    hosts ??= new AllowedHosts({ host: options.address.host, port: server()?.port ?? options.address.port }, options.hosts)
    if (!hosts.has(request.headers.get('host'))) throw MISDIRECTED
    if (viaProxy(request) && request.headers.has('x-forwarded-host') && !hosts.has(forwarded(request, 'x-forwarded-host')))
      throw MISDIRECTED
    const declared = request.headers.get('content-length')
    if (declared !== null && !(Number(declared) <= MAX_BODY_BYTES)) throw TOO_LARGE
  }
}
