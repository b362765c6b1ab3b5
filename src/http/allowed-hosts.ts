/**
 * The host names a listener answers to, against DNS rebinding: a page on another site whose name is
 * made to resolve to this machine reaches the listener with that name in `Host` (and the browser takes
 * it for the page's own origin). Only names an operator reaches it by are answered: its address, the
 * loopback names when bound to loopback, any IP literal on its port when bound to every address (an
 * address cannot be rebound), and the names given for a proxy in front.
 */
import { isIPv4, isIPv6 } from 'node:net'
import { isLoopbackHost } from './client-address'

/** A name as `--console-host` takes it: a DNS name or IP literal, with an optional port. */
export const HOST_NAME =
  /^(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*|\[[0-9a-f:.]+\])(?::\d{1,5})?$/i

export class AllowedHosts {
  private readonly exact = new Set<string>()
  /** Names given without a port: answered on any port (the proxy's). */
  private readonly anyPort = new Set<string>()
  private readonly wildcard: boolean
  private readonly port: string

  /** `bound` is the listener's address and real port; `names` those given for a proxy. */
  constructor(bound: { host: string; port: number }, names: readonly string[]) {
    const host = bound.host.toLowerCase()
    const port = `:${bound.port}`
    this.wildcard = host === '0.0.0.0' || host === '::'
    this.exact.add((host.includes(':') ? `[${host}]` : host) + port)
    if (this.wildcard || isLoopbackHost(host)) for (const name of ['localhost', '127.0.0.1', '[::1]']) this.exact.add(name + port)
    this.port = port
    for (const name of names) (/:\d+$/.test(name) ? this.exact : this.anyPort).add(name.toLowerCase())
  }

  /** Whether a `Host` (or X-Forwarded-Host) value names this listener. */
  has(value: string | null): boolean {
    if (!value) return false
    const host = value.toLowerCase()
    if (this.exact.has(host)) return true
    const colon = host.lastIndexOf(':')
    const name = colon > host.lastIndexOf(']') ? host.slice(0, colon) : host
    if (this.anyPort.has(name)) return true
    if (!this.wildcard || host.slice(name.length) !== this.port) return false
    return isIPv4(name) || (name.startsWith('[') && name.endsWith(']') && isIPv6(name.slice(1, -1)))
  }
}
