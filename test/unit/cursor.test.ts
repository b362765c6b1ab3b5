/**
 * The keyset cursor codec: opaque, round-trips, and refuses anything it did not issue.
 */
import { describe, expect, test } from 'bun:test'
import { CURSOR_MAX_LENGTH, CURSOR_MIN_LENGTH, CURSOR_PATTERN, decodeCursor, encodeCursor } from '../../src/modules/pets/cursor'

const b64 = (text: string) => Buffer.from(text, 'latin1').toString('base64url')

describe('cursor codec', () => {
  test('round-trips ids from 1 to 2^53 - 1', () => {
    for (const id of [1, 2, 35, 36, 1000, 123_456_789, 2 ** 31, 2 ** 32 + 1, Number.MAX_SAFE_INTEGER]) {
      const cursor = encodeCursor(id)
      expect(decodeCursor(cursor)).toBe(id)
    }
  })

  test('every cursor fits the pattern and lengths the OpenAPI document gives', () => {
    for (const id of [1, 2, 35, 36, 1295, 1296, 123_456_789, 2 ** 32 + 1, Number.MAX_SAFE_INTEGER]) {
      const cursor = encodeCursor(id)
      expect(cursor).toMatch(new RegExp(CURSOR_PATTERN))
      expect(cursor.length).toBeGreaterThanOrEqual(CURSOR_MIN_LENGTH)
      expect(cursor.length).toBeLessThanOrEqual(CURSOR_MAX_LENGTH)
    }
    expect([encodeCursor(1).length, encodeCursor(Number.MAX_SAFE_INTEGER).length]).toEqual([CURSOR_MIN_LENGTH, CURSOR_MAX_LENGTH])
  })

  test('is URL-safe and short', () => {
    const cursor = encodeCursor(Number.MAX_SAFE_INTEGER)
    expect(cursor).toMatch(/^[A-Za-z0-9_-]+$/)
    expect(cursor.length).toBeLessThanOrEqual(64)
  })

  test('different ids give different cursors', () => {
    expect(new Set([1, 2, 3, 36, 37].map(encodeCursor)).size).toBe(5)
  })

  test('refuses garbage', () => {
    for (const text of ['', 'x', 'garbage', '!!!!', 'a b', 'AAAA', '====', 'p1.5', 'a'.repeat(65), '\u00e9', '%2F']) {
      expect(decodeCursor(text)).toBeNull()
    }
  })

  test('refuses tampered cursors', () => {
    const cursor = encodeCursor(12345)
    expect(decodeCursor(`${cursor}A`)).toBeNull()
    expect(decodeCursor(cursor.slice(0, -1))).toBeNull()
    for (let i = 0; i < cursor.length; i++) {
      const changed = cursor.slice(0, i) + (cursor[i] === 'A' ? 'B' : 'A') + cursor.slice(i + 1)
      const decoded = decodeCursor(changed)
      // Either refused or decoding to a different, still canonical cursor; never to the same id silently.
      if (decoded !== null) expect(encodeCursor(decoded)).toBe(changed)
    }
  })

  test('refuses cursors of another version or with a malformed id', () => {
    for (const text of ['p2.5', 'p1.', 'p1.0', 'p1.05', 'p1.-5', 'p1.5.', 'p1.5 ', 'p1.A', 'p1.5\u0000', 'P1.5', 'x1.5']) {
      expect(decodeCursor(b64(text))).toBeNull()
    }
  })

  test('refuses ids that overflow 2^53 - 1', () => {
    const big = (2n ** 53n).toString(36)
    expect(decodeCursor(b64(`p1.${big}`))).toBeNull()
    expect(decodeCursor(b64(`p1.${'z'.repeat(30)}`))).toBeNull()
    expect(decodeCursor(b64(`p1.${(2n ** 63n - 1n).toString(36)}`))).toBeNull()
  })

  test('refuses non-canonical base64 of a valid cursor (padding, standard alphabet)', () => {
    const canonical = encodeCursor(99)
    const padded = Buffer.from(`p1.${(99).toString(36)}`).toString('base64')
    expect(padded).not.toBe(canonical)
    expect(decodeCursor(padded)).toBeNull()
  })
})
