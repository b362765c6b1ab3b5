/**
 * The token bucket as pure functions with explicit times.
 */
import { describe, expect, test } from 'bun:test'
import { type BucketShape, fullBucket, msUntilFull, msUntilToken, refill } from '../../src/limiter/token-bucket'

const MINUTE: BucketShape = { capacity: 60, windowMs: 60_000 }
const DAY: BucketShape = { capacity: 1000, windowMs: 86_400_000 }
const T0 = 1_000_000

describe('token bucket', () => {
  test('starts full at the given time', () => {
    expect(fullBucket(MINUTE, T0)).toEqual({ tokens: 60, updatedAt: T0 })
  })

  test('refills at capacity per window, continuously', () => {
    const bucket = { tokens: 0, updatedAt: T0 }
    refill(bucket, MINUTE, T0 + 1_000)
    expect(bucket.tokens).toBeCloseTo(1, 10)
    expect(bucket.updatedAt).toBe(T0 + 1_000)
    refill(bucket, MINUTE, T0 + 1_500)
    expect(bucket.tokens).toBeCloseTo(1.5, 10)
    refill(bucket, MINUTE, T0 + 31_000)
    expect(bucket.tokens).toBeCloseTo(31, 10)
  })

  test('the day shape refills one token per 86.4 s at 1000 per day', () => {
    const bucket = { tokens: 0, updatedAt: T0 }
    refill(bucket, DAY, T0 + 86_400)
    expect(bucket.tokens).toBeCloseTo(1, 10)
  })

  test('never holds more than its capacity', () => {
    const bucket = { tokens: 59.5, updatedAt: T0 }
    refill(bucket, MINUTE, T0 + 10 * 60_000)
    expect(bucket.tokens).toBe(60)
    const empty = { tokens: 0, updatedAt: T0 }
    refill(empty, MINUTE, T0 + 60_000)
    expect(empty.tokens).toBe(60)
  })

  test('a clock that goes backwards or stands still changes nothing', () => {
    const bucket = { tokens: 10, updatedAt: T0 }
    refill(bucket, MINUTE, T0 - 5_000)
    expect(bucket).toEqual({ tokens: 10, updatedAt: T0 })
    refill(bucket, MINUTE, T0)
    expect(bucket).toEqual({ tokens: 10, updatedAt: T0 })
  })

  test('refilling in many small steps equals one big step', () => {
    const a = { tokens: 0, updatedAt: T0 }
    const b = { tokens: 0, updatedAt: T0 }
    for (let t = 1; t <= 30; t++) refill(a, MINUTE, T0 + t * 100)
    refill(b, MINUTE, T0 + 3_000)
    expect(a.tokens).toBeCloseTo(b.tokens, 9)
  })

  test('msUntilToken is 0 with a whole token, else the time to reach one', () => {
    expect(msUntilToken({ tokens: 1, updatedAt: T0 }, MINUTE)).toBe(0)
    expect(msUntilToken({ tokens: 5.5, updatedAt: T0 }, MINUTE)).toBe(0)
    expect(msUntilToken({ tokens: 0, updatedAt: T0 }, MINUTE)).toBeCloseTo(1_000, 6)
    expect(msUntilToken({ tokens: 0.25, updatedAt: T0 }, MINUTE)).toBeCloseTo(750, 6)
    expect(msUntilToken({ tokens: 0, updatedAt: T0 }, DAY)).toBeCloseTo(86_400, 6)
    expect(msUntilToken({ tokens: 0, updatedAt: T0 }, { capacity: 5, windowMs: 86_400_000 })).toBeCloseTo(17_280_000, 3)
  })

  test('after waiting msUntilToken the bucket has exactly one token', () => {
    const bucket = { tokens: 0.3, updatedAt: T0 }
    const wait = msUntilToken(bucket, MINUTE)
    refill(bucket, MINUTE, T0 + wait)
    expect(bucket.tokens).toBeCloseTo(1, 9)
  })

  test('msUntilFull is the time to reach capacity, 0 when full', () => {
    expect(msUntilFull({ tokens: 60, updatedAt: T0 }, MINUTE)).toBe(0)
    expect(msUntilFull({ tokens: 0, updatedAt: T0 }, MINUTE)).toBeCloseTo(60_000, 6)
    expect(msUntilFull({ tokens: 59, updatedAt: T0 }, MINUTE)).toBeCloseTo(1_000, 6)
    expect(msUntilFull({ tokens: 999, updatedAt: T0 }, DAY)).toBeCloseTo(86_400, 6)
  })
})
