/** The bearer credential of an Authorization header (RFC 6750), read without making strings on the usual path. */

const MAX_TOKEN_LENGTH = 256

/** The bearer token, '' for a malformed or empty one, undefined when no bearer credential was sent. */
export function bearerToken(header: string | null): string | undefined {
  if (header === null || header.length < 7) return undefined
  // The scheme is case-insensitive (RFC 7235); the usual spelling is checked without making strings.
  if (!header.startsWith('Bearer ') && header.slice(0, 7).toLowerCase() !== 'bearer ') return undefined
  const token = header.slice(7).trim()
  return token.length > 0 && token.length <= MAX_TOKEN_LENGTH && /^[A-Za-z0-9._~+/=-]+$/.test(token) ? token : ''
}
