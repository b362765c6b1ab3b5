/**
 * The in-process rate limiter: per subject (an API key or a client address) a minute bucket and a day
 * bucket, both of which must hold a token; a ban for subjects that keep going after 429s. The clock is
 * injected and the number of remembered addresses is capped, so memory stays bounded under a spray.
 */
import { type Bucket, type BucketShape, fullBucket, msUntilFull, msUntilToken, refill } from './token-bucket'
import type { SavedBucket } from '../storage/types'

export interface Limits {
  rpm: number
  rpd: number
}

export interface LimiterOptions {
  banAfter: number
  banSeconds: number
  maxAddresses: number
  now: () => number
}

/** What the response headers report: the bucket in force after this request. */
export interface Quota {
  window: 'minute' | 'day'
  limit: number
  remaining: number
  /** Unix time (s) at which the bucket in force is full again. */
  resetAt: number
  /** Seconds until the bucket in force is full again. */
  resetIn: number
}

export type Decision =
  | { allowed: true; quota: Quota }
  | { allowed: false; reason: 'rate_limited' | 'key_banned'; retryAfter: number; quota: Quota; bannedNow: boolean }

interface Subject {
  limits: Limits
  minute: Bucket
  day: Bucket
  /** Times of the most recent rejections, as a ring; allocated on the first rejection. */
  rejections: Float64Array | null
  nextRejection: number
  bannedUntil: number
  dayDirty: boolean
}

const MINUTE_MS = 60_000
const DAY_MS = 86_400_000
const shapes = new WeakMap<Limits, { minute: BucketShape; day: BucketShape }>()

function shapesOf(limits: Limits) {
  let shape = shapes.get(limits)
  if (!shape) {
    shape = {
      minute: { capacity: limits.rpm, windowMs: MINUTE_MS },
      day: { capacity: limits.rpd, windowMs: DAY_MS },
    }
    shapes.set(limits, shape)
  }
  return shape
}

export class RateLimiter {
  private readonly keys = new Map<string, Subject>()
  /**
   * Addresses in two generations: an address seen again moves to the current one, and when the current
   * one holds half the cap the previous one is dropped whole. That forgets the least recently seen at
   * constant cost per request (deleting one by one from a Map's front slows down as deletions pile up).
   */
  private currentAddresses = new Map<string, Subject>()
  private previousAddresses = new Map<string, Subject>()
  private readonly saved: Map<string, SavedBucket>

  constructor(
    private readonly options: LimiterOptions,
    saved: Map<string, SavedBucket> = new Map(),
  ) {
    if (options.banAfter < 1 || options.banAfter > 100_000) throw new RangeError('banAfter must be 1..100000')
    if (options.maxAddresses < 1) throw new RangeError('maxAddresses must be positive')
    this.saved = saved
  }

  get trackedAddresses(): number {
    return this.currentAddresses.size + this.previousAddresses.size
  }

  /** Decides one request for a key subject (`key:ID`) or an address subject (`ip:ADDR`). */
  check(subjectId: string, limits: Limits, isKey: boolean): Decision {
    const now = this.options.now()
    const subject = this.subject(subjectId, limits, isKey, now)
    const shape = shapesOf(subject.limits)
    refill(subject.minute, shape.minute, now)
    refill(subject.day, shape.day, now)

    // Retry-After covers both the ban and the buckets, so a retry at that time is never refused.
    if (subject.bannedUntil > now) {
      return {
        allowed: false,
        reason: 'key_banned',
        retryAfter: Math.max(1, Math.ceil(Math.max(subject.bannedUntil - now, msUntilTokens(subject, shape)) / 1000)),
        quota: quotaOf(subject, shape, now),
        bannedNow: false,
      }
    }
    if (subject.minute.tokens >= 1 && subject.day.tokens >= 1) {
      subject.minute.tokens -= 1
      subject.day.tokens -= 1
      subject.dayDirty = isKey
      return { allowed: true, quota: quotaOf(subject, shape, now) }
    }
    const wait = msUntilTokens(subject, shape)
    const bannedNow = this.recordRejection(subject, now)
    return {
      allowed: false,
      // The rejection that starts a ban is still a plain 429; its Retry-After already covers the ban.
      reason: 'rate_limited',
      retryAfter: Math.max(1, Math.ceil(Math.max(bannedNow ? this.options.banSeconds * 1000 : 0, wait) / 1000)),
      quota: quotaOf(subject, shape, now),
      bannedNow,
    }
  }

  /** Day buckets of keys changed since they were last saved, to be written to the data file. */
  unsavedDayBuckets(): Map<string, SavedBucket> {
    const dirty = new Map<string, SavedBucket>()
    for (const [id, subject] of this.keys)
      if (subject.dayDirty) dirty.set(id, { tokens: subject.day.tokens, updatedAt: subject.day.updatedAt })
    return dirty
  }

  /**
   * Called once `saved` (from unsavedDayBuckets) is written: those buckets count as saved unless they
   * changed meanwhile. A save that failed is never marked, so the next one writes them again.
   */
  markSaved(saved: Map<string, SavedBucket>): void {
    for (const [id, bucket] of saved) {
      const subject = this.keys.get(id)
      if (subject && subject.day.updatedAt === bucket.updatedAt && subject.day.tokens === bucket.tokens) subject.dayDirty = false
    }
  }

  /** Forgets a key's state (buckets, rejections, ban), including a day bucket loaded at start. */
  forgetKey(subjectId: string): void {
    this.keys.delete(subjectId)
    this.saved.delete(subjectId)
  }

  private subject(id: string, limits: Limits, isKey: boolean, now: number): Subject {
    let subject = isKey ? this.keys.get(id) : this.address(id)
    if (subject && subject.limits.rpm === limits.rpm && subject.limits.rpd === limits.rpd) return subject
    const shape = shapesOf(limits)
    const saved = isKey ? this.saved.get(id) : undefined
    subject = {
      limits,
      minute: fullBucket(shape.minute, now),
      day: saved ? { tokens: Math.min(saved.tokens, limits.rpd), updatedAt: Math.min(saved.updatedAt, now) } : fullBucket(shape.day, now),
      rejections: null,
      nextRejection: 0,
      bannedUntil: 0,
      dayDirty: false,
    }
    if (saved) this.saved.delete(id)
    if (isKey) this.keys.set(id, subject)
    else this.rememberAddress(id, subject)
    return subject
  }

  private address(id: string): Subject | undefined {
    const current = this.currentAddresses.get(id)
    if (current) return current
    const previous = this.previousAddresses.get(id)
    if (previous) {
      this.previousAddresses.delete(id)
      this.rememberAddress(id, previous)
    }
    return previous
  }

  private rememberAddress(id: string, subject: Subject): void {
    if (this.currentAddresses.size >= Math.max(1, Math.floor(this.options.maxAddresses / 2))) {
      this.previousAddresses = this.currentAddresses
      this.currentAddresses = new Map()
    }
    this.currentAddresses.set(id, subject)
  }

  /** True when this rejection starts a ban: more than banAfter rejections within one minute. */
  private recordRejection(subject: Subject, now: number): boolean {
    const size = this.options.banAfter + 1
    subject.rejections ??= new Float64Array(size).fill(-Infinity)
    subject.rejections[subject.nextRejection] = now
    subject.nextRejection = (subject.nextRejection + 1) % size
    // After the write, the next slot holds the oldest of the last banAfter+1 rejections.
    const oldest = subject.rejections[subject.nextRejection]!
    if (now - oldest >= MINUTE_MS) return false
    subject.bannedUntil = now + this.options.banSeconds * 1000
    subject.rejections.fill(-Infinity)
    return true
  }
}

/** Milliseconds until both buckets hold a whole token. */
function msUntilTokens(subject: Subject, shape: { minute: BucketShape; day: BucketShape }): number {
  return Math.max(msUntilToken(subject.minute, shape.minute), msUntilToken(subject.day, shape.day))
}

function quotaOf(subject: Subject, shape: { minute: BucketShape; day: BucketShape }, now: number): Quota {
  const useMinute = Math.floor(subject.minute.tokens) <= Math.floor(subject.day.tokens)
  const bucket = useMinute ? subject.minute : subject.day
  const bucketShape = useMinute ? shape.minute : shape.day
  const resetIn = Math.ceil(msUntilFull(bucket, bucketShape) / 1000)
  return {
    window: useMinute ? 'minute' : 'day',
    limit: bucketShape.capacity,
    remaining: Math.max(0, Math.floor(bucket.tokens)),
    resetAt: Math.ceil(now / 1000) + resetIn,
    resetIn,
  }
}
