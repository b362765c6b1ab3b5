/**
 * The path of a request's URL as Elysia's router reads it, or why it cannot be read: a URL the router
 * cannot read (a `Host` that is not a host) is a 400 before routing, so the path logged is the one routed.
 */
import { isIPv6 } from 'node:net'
import { type ApiError, badRequest } from '../http/api-errors'
import { detached } from '../observability/recent-requests'

/**
 * Scheme and authority as RFC 3986 allows them in an http(s) URL (reg-name, IPv4 or [IPv6], optional
 * port). Bun builds `request.url` from `Host`, and leaves it a bare path when it cannot.
 */
const ROUTABLE_URL = /^https?:\/\/(?:(?:[A-Za-z0-9\-._~!$&'()*+,;=]|%[0-9A-Fa-f]{2})+|\[[0-9A-Fa-f:.]+\])(?::(\d{1,5}))?\//
/** Elysia's router skips the URL's first eleven characters unread: a shorter `http://` + host would route wrong. */
const ROUTER_PATH_SEARCH_FROM = 11
const BAD_HOST = badRequest('Host: is not a host name, IP address or [IPv6] literal with an optional port (1 to 65535)')
// Bun drops a default port from the URL it builds (x:80 becomes http://x/), so what counts is what is left.
const SHORT_HOST = badRequest(
  'Host: a host of fewer than four characters, its port included, cannot be routed (x:80 counts as x); use a longer name or another port, such as x:8080',
)

/** A query longer than this is not kept alive by the path sliced from its URL. */
const LONG_QUERY = 256

/** Scheme and authority of the last URL found routable, with the slash after them: clients repeat them. */
let routableOrigin = '\u0000'

/** The path of the URL as the router reads it, or the reason it cannot be read that way. */
export function routedPath(url: string): string | ApiError {
  let start = routableOrigin.length - 1
  if (!url.startsWith(routableOrigin)) {
    const routable = ROUTABLE_URL.exec(url)
    if (routable === null || (routable[1] !== undefined && !(Number(routable[1]) >= 1 && Number(routable[1]) <= 65535))) return BAD_HOST
    start = url.indexOf('/', url.charCodeAt(4) === 0x73 /* s */ ? 8 : 7)
    if (start < ROUTER_PATH_SEARCH_FROM) return SHORT_HOST
    if (url.charCodeAt(url.indexOf('//') + 2) === 0x5b /* [ */ && !isIPv6(url.slice(url.indexOf('[') + 1, url.indexOf(']'))))
      return BAD_HOST
    routableOrigin = detached(url.slice(0, start + 1))
  }
  const query = url.indexOf('?', start)
  if (query < 0) return url.slice(start)
  // The path outlives the request in the records of answers: sliced, it would hold a long query with it.
  return url.length - query > LONG_QUERY ? detached(url.slice(start, query)) : url.slice(start, query)
}

/** The path of a target that could not be routed, for the log only. */
export function unroutedPath(url: string): string {
  const start = url.startsWith('/') ? 0 : url.indexOf('/', url.indexOf('//') + 2)
  if (start < 0) return '/'
  const query = url.indexOf('?', start)
  return detached((query < 0 ? url.slice(start) : url.slice(start, query)).slice(0, 1024))
}
