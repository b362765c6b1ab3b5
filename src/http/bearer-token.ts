/**
 * The bearer credential of an Authorization header (RFC 6750), read without making strings on the usual
 * path, and the 401s that challenge for it (the two common ones made once: refusals are the cheap path
 * under abuse).
 */
import { type ActiveKey, expiryMessage } from '../domain/api-key'
import { ApiError } from './api-errors'

const MAX_TOKEN_LENGTH = 256
const REALM = 'Bearer realm="petstore"'

export const MISSING_KEY = new ApiError(401, 'unauthorized', 'An API key is required: send Authorization: Bearer <key>.', {
  'www-authenticate': REALM,
})
export const INVALID_KEY = new ApiError(401, 'unauthorized', 'The API key is invalid or has been revoked.', {
  'www-authenticate': `${REALM}, error="invalid_token"`,
})

/**
 * A secret past its end (the key's expiry, or a rolled secret's overlap): the message says when, in the
 * challenge's error_description too (RFC 6750 §3: printable ASCII without quote or backslash, as it is).
 */
export function keyExpired(key: Pick<ActiveKey, 'endsAt' | 'replacedAt'>): ApiError {
  const message = expiryMessage(key)
  return new ApiError(401, 'key_expired', message, {
    'www-authenticate': `${REALM}, error="invalid_token", error_description="${message}"`,
  })
}

/** The bearer token, '' for a malformed or empty one, undefined when no bearer credential was sent. */
export function bearerToken(header: string | null): string | undefined {
  if (header === null || header.length < 7) return undefined
  // The scheme is case-insensitive (RFC 7235); the usual spelling is checked without making strings.
  if (!header.startsWith('Bearer ') && header.slice(0, 7).toLowerCase() !== 'bearer ') return undefined
  const token = header.slice(7).trim()
  return token.length > 0 && token.length <= MAX_TOKEN_LENGTH && /^[A-Za-z0-9._~+/=-]+$/.test(token) ? token : ''
}
