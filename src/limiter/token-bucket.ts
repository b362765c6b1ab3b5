/**
 * A token bucket as plain data and pure functions: capacity tokens, refilled continuously over one
 * window. Time is passed in, so tests drive it with a fake clock and nothing here reads the wall clock.
 */

export interface Bucket {
  tokens: number
  /** Time (ms) at which `tokens` was last brought up to date. */
  updatedAt: number
}

export interface BucketShape {
  capacity: number
  windowMs: number
}

export function fullBucket(shape: BucketShape, now: number): Bucket {
  return { tokens: shape.capacity, updatedAt: now }
}

/**
 * Tokens within a billionth of a whole number are that number: refills add fractions floating point
 * cannot hold exactly (1,601 ms at 60 a minute), and a client back at the time it was told must find
 * the whole token it was told of, not 0.99999999999992 of it.
 */
export const SNAP = 1e-9

export function refill(bucket: Bucket, shape: BucketShape, now: number): void {
  if (now <= bucket.updatedAt) return
  const gained = ((now - bucket.updatedAt) * shape.capacity) / shape.windowMs
  const tokens = Math.min(shape.capacity, bucket.tokens + gained)
  const whole = Math.round(tokens)
  bucket.tokens = Math.abs(tokens - whole) < SNAP ? whole : tokens
  bucket.updatedAt = now
}

/** Milliseconds until the bucket holds at least `count` whole tokens (0 when it already does). */
export function msUntilToken(bucket: Bucket, shape: BucketShape, count = 1): number {
  if (bucket.tokens >= count) return 0
  return ((count - bucket.tokens) * shape.windowMs) / shape.capacity
}

/** Milliseconds until both a minute and a day bucket hold a whole token: the honest wait after a refusal. */
export function msUntilTokens(minute: Bucket, day: Bucket, shape: { minute: BucketShape; day: BucketShape }): number {
  return Math.max(msUntilToken(minute, shape.minute), msUntilToken(day, shape.day))
}

export function msUntilFull(bucket: Bucket, shape: BucketShape): number {
  return ((shape.capacity - bucket.tokens) * shape.windowMs) / shape.capacity
}
