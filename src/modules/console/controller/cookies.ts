/** The session cookie: its name, read from a Cookie header (several of its name may arrive), and set. */
import { SESSION_COOKIE } from '../model'

/** Session cookies tried per request, when several of that name arrive (another path's or site's beside ours). */
const SESSION_COOKIES_TRIED = 4

/**
 * The session cookie's name for a server of `environment` (--env): cookies are not kept apart by port,
 * so with one name a production and a staging console on one host (8090, 8091) would each replace the
 * other's cookie, signing its operator out, and be sent the other's session. Instances of one fleet
 * share theirs, as they share sessions.
 */
export function sessionCookieName(environment: string): string {
  return environment === 'production' ? SESSION_COOKIE : `${SESSION_COOKIE}_${environment}`
}

/** The values of the session cookie `name` in a Cookie header, in the order sent (Bun.CookieMap keeps repeated names). */
export function sessionCookies(header: string | null, name: string): string[] {
  if (!header) return []
  const values: string[] = []
  for (const [sent, value] of new Bun.CookieMap(header).entries())
    if (sent === name && value && values.push(value) === SESSION_COOKIES_TRIED) break
  return values
}

/** The Set-Cookie of a session (or, with maxAge 0, of its end): HttpOnly, SameSite=Strict, for the whole console. */
export function sessionCookie(name: string, secret: string, options: { secure?: boolean; maxAge?: number }): string {
  return new Bun.Cookie(name, secret, { path: '/', httpOnly: true, sameSite: 'strict', ...options }).serialize()
}
