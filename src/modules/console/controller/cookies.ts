/** The session cookie: read from a Cookie header (several of its name may arrive), and set. */
import { SESSION_COOKIE } from '../model'

/** Session cookies tried per request, when several of that name arrive (another path's or site's beside ours). */
const SESSION_COOKIES_TRIED = 4

/** The session cookie's values in a Cookie header, in the order sent (Bun.CookieMap keeps repeated names). */
export function sessionCookies(header: string | null): string[] {
  if (!header) return []
  const values: string[] = []
  for (const [name, value] of new Bun.CookieMap(header).entries())
    if (name === SESSION_COOKIE && value && values.push(value) === SESSION_COOKIES_TRIED) break
  return values
}

/** The Set-Cookie of a session (or, with maxAge 0, of its end): HttpOnly, SameSite=Strict, for the whole console. */
export function sessionCookie(secret: string, options: { secure?: boolean; maxAge?: number }): string {
  return new Bun.Cookie(SESSION_COOKIE, secret, { path: '/', httpOnly: true, sameSite: 'strict', ...options }).serialize()
}
