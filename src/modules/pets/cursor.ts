/**
 * The keyset cursor: an opaque token for "after pet id N". Clients only copy it from the Link header;
 * the version prefix lets the format change later without old cursors being misread.
 */

const PREFIX = 'p1.'

/**
 * What every cursor this server issues looks like, for the OpenAPI document: `p1.` is `cDEu` in
 * base64url, then an id of 1 to 11 base-36 digits (up to 2^53 − 1) is 2 to 15 characters more.
 */
export const CURSOR_PATTERN = '^cDEu[A-Za-z0-9_-]{2,15}$'
export const CURSOR_MIN_LENGTH = 6
export const CURSOR_MAX_LENGTH = 19

export function encodeCursor(afterId: number): string {
  return Buffer.from(PREFIX + afterId.toString(36)).toString('base64url')
}

/** The id the cursor points after, or null when the text is not a cursor this server issued. */
export function decodeCursor(cursor: string): number | null {
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(cursor)) return null
  const text = Buffer.from(cursor, 'base64url').toString('latin1')
  if (!text.startsWith(PREFIX)) return null
  const digits = text.slice(PREFIX.length)
  if (!/^[1-9a-z][0-9a-z]*$/.test(digits)) return null
  const id = parseInt(digits, 36)
  if (!Number.isSafeInteger(id) || encodeCursor(id) !== cursor) return null
  return id
}
