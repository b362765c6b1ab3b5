/**
 * The rate-limit policy: per subject (an API key or a client address) a minute bucket and a day bucket,
 * both of which must hold a token, and a ban for subjects that keep going after 429s. Where that state
 * lives is a backend's business (backend.ts); what a take means for the client (quota, window in force,
 * Retry-After) is decided here, once, so the in-process backend and the Redis backend answer alike.
 */
import { MemoryLimiterBackend } from './memory/backend'
import {
  type BanRule,
  type LimiterBackend,
  LimiterUnavailableError,
  type LimitShapes,
  type Inspected,
  shapesOf,
  type TakeResult,
} from './backend'
import { fullBucket, msUntilFull, msUntilToken, refill } from './token-bucket'
import { BAN_AFTER } from '../domain/ban-rule'
import type { Limits } from '../domain/plans'
import type { LimiterHandover, SavedBucket } from '../domain/repositories'

export interface LimiterOptions {
  banAfter: number
  banSeconds: number
  /** Most client addresses remembered at once by the in-process backend (and by the local fallback). */
  maxAddresses: number
  /**
   * The clock (Unix ms). Unset, each backend uses its own: Date.now in process, Redis's TIME in Redis, so
   * instances sharing Redis share one clock. Keys in Redis expire by Redis's clock whichever is used.
   */
  now?: () => number
  /** Where the state lives, made from the ban rule so it is stated once; defaults to this process. */
  backend?: (rule: BanRule) => LimiterBackend
  /**
   * What to do when the backend is unavailable: 'closed' (default) lets check reject with
   * LimiterUnavailableError; 'local' decides in this process's memory until the backend answers again.
   */
  fallback?: 'closed' | 'local'
  /**
   * Called with true when the backend stops answering, and with false when it answers again, whichever
   * the fallback: once each way, so an operator hears of an outage once.
   */
  onUnavailable?: (unavailable: boolean) => void
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

/** What the console shows of a subject, read without taking a token. */
export interface SubjectLook {
  /** Whole requests left in the day bucket now. */
  dayLeft: number
  /** When its ban ends (ms), or null when it is not banned. */
  bannedUntil: number | null
}

/** Most ban starts this process remembers for the console; the oldest are forgotten first. */
const MAX_BANS_KEPT = 10_000

export class RateLimiter {
  private readonly backend: LimiterBackend
  /** The backend when it is this process's memory: saved day buckets and address counts exist only there. */
  private readonly memory: MemoryLimiterBackend | null
  private readonly local: MemoryLimiterBackend | null
  private storeUnavailable = false
  /** Bans this process started, by subject, with when each ends: the console lists them. */
  private readonly bansStarted = new Map<string, number>()

  /**
   * `saved`: day buckets of keys from the data file; `handedOver`: what the server this one took over
   * from handed over (buckets, bans, rejections). Only the in-process backend keeps them.
   */
  constructor(
    private readonly options: LimiterOptions,
    saved: Map<string, SavedBucket> = new Map(),
    handedOver?: LimiterHandover,
  ) {
    if (options.banAfter < BAN_AFTER.min || options.banAfter > BAN_AFTER.max)
      throw new RangeError(`banAfter must be ${BAN_AFTER.min}..${BAN_AFTER.max}`)
    const rule: BanRule = { banAfter: options.banAfter, banSeconds: options.banSeconds }
    if (options.backend) {
      this.memory = null
      this.backend = options.backend(rule)
    } else {
      this.memory = new MemoryLimiterBackend(rule, { maxAddresses: options.maxAddresses, saved, handedOver })
      this.backend = this.memory
      // The console lists the bans handed over as it lists its own.
      const now = options.now?.() ?? Date.now()
      for (const subjects of [handedOver?.keys, handedOver?.addresses])
        for (const [subject, { bannedUntil }] of subjects ?? [])
          if (bannedUntil !== undefined && bannedUntil > now) this.noteBan(subject, bannedUntil, now)
    }
    this.local = options.fallback === 'local' ? new MemoryLimiterBackend(rule, { maxAddresses: options.maxAddresses }) : null
  }

  /** Whether decisions come from the local fallback because the backend is unavailable. */
  get degraded(): boolean {
    return this.storeUnavailable && this.local !== null
  }

  /** Addresses the in-process backend remembers; 0 with another backend, which bounds itself. */
  get trackedAddresses(): number {
    return this.memory?.trackedAddresses ?? 0
  }

  /**
   * Decides one request for a key subject (`key:ID`) or an address subject (`ip:ADDR`). Rejects with
   * LimiterUnavailableError when a shared backend cannot answer and the fallback is 'closed'. One async
   * form for both backends: awaiting the in-process answer costs about 0.1 µs a call, which no benchmark
   * of a request could tell apart.
   */
  async check(subjectId: string, limits: Limits, isKey: boolean): Promise<Decision> {
    const now = this.options.now?.()
    let taken: TakeResult
    try {
      // The in-process backend's answer is one object every take refills: it is decided on before any
      // other request's take can run (requests resumed together by one key look-up take in turn).
      const answer = this.backend.take(subjectId, limits, isKey, now)
      taken = answer instanceof Promise ? await answer : answer
    } catch (error) {
      return this.decideLocally(error, subjectId, limits, isKey, now)
    }
    if (this.storeUnavailable) this.noteUnavailable(false)
    return this.decide(taken, limits, subjectId)
  }

  /**
   * The subject's quota as it stands, nothing taken: what an answer that spends no token reports. Rejects
   * with LimiterUnavailableError when a shared backend does not answer, whichever the fallback.
   */
  async peek(subjectId: string, limits: Limits, isKey: boolean): Promise<Quota> {
    const state = await this.backend.peek(subjectId, limits, isKey, this.options.now?.())
    return quotaOf(state, shapesOf(limits), state.now)
  }

  /**
   * Whether the subject's next request would be refused (banned, or a bucket without a whole token), as
   * it stands; nothing taken or recorded. Rejects with LimiterUnavailableError like peek.
   */
  async refuses(subjectId: string, limits: Limits, isKey: boolean): Promise<boolean> {
    const state = await this.backend.peek(subjectId, limits, isKey, this.options.now?.())
    return state.bannedUntil > state.now || state.minute.tokens < 1 || state.day.tokens < 1
  }

  /**
   * Counts one more try (see LimiterBackend.countTry), in the backend's memory, or in this process's
   * while a shared backend does not answer and the fallback is local.
   */
  async countTry(group: string, id: string, keepMs: number): Promise<number> {
    const now = this.options.now?.()
    try {
      return await this.backend.countTry(group, id, keepMs, now)
    } catch (error) {
      if (!this.local || !(error instanceof LimiterUnavailableError)) throw error
      return this.local.countTry(group, id, keepMs, now)
    }
  }

  /**
   * The refusal a request would get with the minute bucket empty (and the day bucket full), worked out
   * as every refusal is; nothing is taken or recorded. For answers forced on request (plugins/scenarios.ts).
   */
  exhausted(limits: Limits): Extract<Decision, { allowed: false }> {
    const now = this.options.now?.() ?? Date.now()
    const shape = shapesOf(limits)
    const empty = { tokens: 0, updatedAt: now }
    const taken = { allowed: false, minute: empty, day: fullBucket(shape.day, now), bannedUntil: 0, bannedNow: false, now }
    // No subject: a forced refusal starts no ban, so there is none to note.
    return this.decide(taken, limits, '') as Extract<Decision, { allowed: false }>
  }

  /** Day buckets of keys changed since they were last saved, to be written to the data file. */
  unsavedDayBuckets(): Map<string, SavedBucket> {
    return this.memory?.unsavedDayBuckets() ?? new Map()
  }

  /** What a takeover hands to the next server (buckets, bans); nothing with a shared backend, which keeps it. */
  handover(): LimiterHandover {
    return this.memory?.handover(this.options.now?.()) ?? { keys: new Map(), addresses: new Map() }
  }

  /**
   * Called once `saved` (from unsavedDayBuckets) is written: those buckets count as saved unless they
   * changed meanwhile. A save that failed is never marked, so the next one writes them again.
   */
  markSaved(saved: Map<string, SavedBucket>): void {
    this.memory?.markSaved(saved)
  }

  /**
   * Forgets a key's state (buckets, rejections, ban), including a day bucket loaded at start; `seq`
   * numbers the reset, so a backend shared by instances applies it once (see LimiterBackend.forget).
   */
  forgetKey(subjectId: string, seq?: number): void | Promise<void> {
    this.bansStarted.delete(subjectId)
    this.local?.forget(subjectId)
    return this.backend.forget(subjectId, seq)
  }

  /**
   * A subject's day quota left and ban, as the backend holds them now, without taking a token. A subject
   * the backend holds nothing of (or holds under other limits, which a take would start afresh) has a
   * full day. Rejects with LimiterUnavailableError when a shared backend does not answer.
   */
  async look(subjectId: string, limits: Limits, isKey: boolean): Promise<SubjectLook> {
    const peeked: Inspected | null = await this.backend.inspect(subjectId, isKey)
    if (!peeked || (peeked.limits && (peeked.limits.rpm !== limits.rpm || peeked.limits.rpd !== limits.rpd)))
      return { dayLeft: limits.rpd, bannedUntil: null }
    const now = this.options.now?.() ?? peeked.now
    const day = { ...peeked.day, tokens: Math.min(peeked.day.tokens, limits.rpd) }
    refill(day, shapesOf(limits).day, now)
    return { dayLeft: Math.floor(day.tokens), bannedUntil: peeked.bannedUntil > now ? peeked.bannedUntil : null }
  }

  /** The subjects whose bans this process started and that have not ended by `now`, with their ends. */
  bans(now: number): Map<string, number> {
    for (const [subject, until] of this.bansStarted) if (until <= now) this.bansStarted.delete(subject)
    return new Map(this.bansStarted)
  }

  /** Lifts an address's ban (and its buckets) in the backend; a key's goes through storage's limit reset. */
  async liftAddress(subjectId: string): Promise<void> {
    this.bansStarted.delete(subjectId)
    this.local?.forget(subjectId)
    await this.backend.forget(subjectId)
  }

  private noteBan(subjectId: string, until: number, now: number): void {
    if (this.bansStarted.size >= MAX_BANS_KEPT) {
      for (const [subject, end] of this.bansStarted) if (end <= now) this.bansStarted.delete(subject)
      if (this.bansStarted.size >= MAX_BANS_KEPT) this.bansStarted.delete(this.bansStarted.keys().next().value!)
    }
    this.bansStarted.set(subjectId, until)
  }

  /** Whether the backend answers (readiness); always true in process. */
  ping(): Promise<boolean> {
    return this.backend.ping()
  }

  close(): void | Promise<void> {
    return this.backend.close()
  }

  private decideLocally(error: unknown, subjectId: string, limits: Limits, isKey: boolean, now: number | undefined): Decision {
    if (!(error instanceof LimiterUnavailableError)) throw error
    if (!this.storeUnavailable) this.noteUnavailable(true)
    if (!this.local) throw error
    return this.decide(this.local.take(subjectId, limits, isKey, now), limits, subjectId)
  }

  private noteUnavailable(unavailable: boolean): void {
    this.storeUnavailable = unavailable
    this.options.onUnavailable?.(unavailable)
  }

  private decide(taken: TakeResult, limits: Limits, subjectId: string): Decision {
    const shape = shapesOf(limits)
    const now = taken.now
    if (taken.bannedNow) this.noteBan(subjectId, taken.bannedUntil, now)
    if (taken.allowed) return { allowed: true, quota: quotaOf(taken, shape, now) }
    // Retry-After covers both the ban and the buckets, so a retry at that time is never refused.
    const wait = msUntilTokens(taken, shape)
    if (!taken.bannedNow && taken.bannedUntil > now) {
      const retryAfter = Math.max(1, Math.ceil(Math.max(taken.bannedUntil - now, wait) / 1000))
      return { allowed: false, reason: 'key_banned', retryAfter, quota: bannedQuota(taken, shape, now, retryAfter), bannedNow: false }
    }
    // The rejection that starts a ban is still a plain 429; its Retry-After already covers the ban.
    const retryAfter = Math.max(1, Math.ceil(Math.max(taken.bannedNow ? this.options.banSeconds * 1000 : 0, wait) / 1000))
    return {
      allowed: false,
      reason: 'rate_limited',
      retryAfter,
      quota: taken.bannedNow ? bannedQuota(taken, shape, now, retryAfter) : quotaOf(taken, shape, now),
      bannedNow: taken.bannedNow,
    }
  }
}

/**
 * While banned, nothing is left whatever the buckets hold, until the ban ends: Remaining is 0 and
 * Reset says the same time as Retry-After.
 */
function bannedQuota(taken: TakeResult, shape: LimitShapes, now: number, retryAfter: number): Quota {
  return { ...quotaOf(taken, shape, now), remaining: 0, resetAt: Math.ceil(now / 1000) + retryAfter, resetIn: retryAfter }
}

/** Milliseconds until both buckets hold a whole token. */
function msUntilTokens(taken: TakeResult, shape: LimitShapes): number {
  return Math.max(msUntilToken(taken.minute, shape.minute), msUntilToken(taken.day, shape.day))
}

function quotaOf(taken: Pick<TakeResult, 'minute' | 'day'>, shape: LimitShapes, now: number): Quota {
  const useMinute = Math.floor(taken.minute.tokens) <= Math.floor(taken.day.tokens)
  const bucket = useMinute ? taken.minute : taken.day
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
