/**
 * The rate-limit policy: per subject (a key or a client address) a minute and a day bucket, both of which
 * must hold a token, and a ban for subjects that keep going after 429s. The state lives in a backend
 * (backend.ts); what a take means for the client (quota, Retry-After) is decided here, once, for both.
 * The console's reads (`admin`) and the scenarios' try counts (`tries`) share the backend, not the policy.
 */
import { MemoryLimiterBackend } from './memory/backend'
import { MemoryTryStore } from './memory/tries'
import { BanLog, LimiterAdmin } from './admin'
import {
  type BanRule,
  type LimiterBackend,
  LimiterUnavailableError,
  type LimitShapes,
  type Patience,
  type SharedBackend,
  shapesOf,
  type TakeResult,
} from './backend'
import { TryCounter } from './tries'
import { fullBucket, msUntilFull, msUntilTokens, refill } from './token-bucket'
import { BAN_AFTER } from '../domain/ban-rule'
import { type Limits, sameLimits } from '../domain/plans'
import type { LimiterHandover, SavedBucket } from '../domain/repositories'
import { type Subject, subjectNamed } from '../domain/subject'

/** How long the watch (RateLimiter.watch) waits for the backend before it counts as not answering. */
const WATCH_PATIENCE_MS = 1_000

/** Most bans of a shared backend answered from this process's memory at once; the oldest are let go first. */
const MAX_HELD_BANS = 10_000

/** A ban a shared backend answered, held here until it ends: its buckets as they were, on the backend's clock. */
interface HeldBan {
  rpm: number
  rpd: number
  taken: TakeResult
  /** performance.now() when the answer came, to move the backend's clock on without asking it. */
  at: number
  /** The backend's count of lifts then: any lift since, on any instance, lets every held ban go. */
  lifts: string | undefined
}

export interface LimiterOptions extends BanRule {
  /** Most client addresses remembered at once by the in-process backend (and by the local fallback). */
  maxAddresses: number
  /** The clock (Unix ms). Unset, each backend uses its own: Redis's TIME, so instances sharing it share one clock. */
  now?: () => number
  /** Where the state lives, made from the ban rule so it is stated once; defaults to this process. */
  backend?: (rule: BanRule) => SharedBackend
  /** When the backend does not answer: reject with LimiterUnavailableError ('closed') or decide in memory ('local'). */
  fallback?: 'closed' | 'local'
  /** Called once with true when the backend stops answering, once with false when it answers again. */
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
  | {
      allowed: false
      reason: 'rate_limited' | 'key_banned'
      retryAfter: number
      quota: Quota
      bannedNow: boolean
      /** The rule's banAfter, which a refusal's message states. */
      banAfter: number
    }

export class RateLimiter {
  private readonly backend: LimiterBackend
  /** The backend when it is this process's memory: saved day buckets and address counts exist only there. */
  private readonly memory: MemoryLimiterBackend | null
  private readonly local: MemoryLimiterBackend | null
  private storeUnavailable = false
  private readonly banLog = new BanLog()
  /**
   * With a shared backend, the bans it answered, by subject: refused from memory until they end, so a
   * banned flood costs no Redis call (rate-limiter-flexible's inMemoryBlockOnConsumed). A lift on any
   * instance changes the backend's count of lifts, which it reads twice a second, and lets them all go.
   */
  private readonly heldBans: Map<string, HeldBan> | null
  readonly admin: LimiterAdmin
  readonly tries: TryCounter

  /** `saved` (keys' day buckets from the data file) and `handedOver` (a takeover's state) serve the in-process backend only. */
  constructor(
    private readonly options: LimiterOptions,
    saved: Map<string, SavedBucket> = new Map(),
    handedOver?: LimiterHandover,
  ) {
    if (options.banAfter < BAN_AFTER.min || options.banAfter > BAN_AFTER.max)
      throw new RangeError(`banAfter must be ${BAN_AFTER.min}..${BAN_AFTER.max}`)
    // The backends are given the ban rule alone, not the limiter's other options.
    const rule: BanRule = { banAfter: options.banAfter, banSeconds: options.banSeconds }
    const local = options.fallback === 'local'
    const shared = options.backend?.(rule)
    this.memory = shared ? null : new MemoryLimiterBackend(rule, { maxAddresses: options.maxAddresses, saved, handedOver })
    this.backend = shared ?? this.memory!
    this.admin = new LimiterAdmin(shared ?? this.memory!, this.banLog, (subject) => this.forget(subject, undefined, 'person'), options.now)
    this.tries = new TryCounter(shared ?? new MemoryTryStore(), shared && local ? new MemoryTryStore() : null, options.now)
    // The console lists the bans handed over (to the in-process backend) as it lists its own.
    const now = options.now?.() ?? Date.now()
    for (const subjects of this.memory ? [this.memory.unusedHandover.keys, this.memory.unusedHandover.addresses] : [])
      for (const [name, { bannedUntil }] of subjects) {
        const subject = subjectNamed(name)
        if (subject && bannedUntil !== undefined && bannedUntil > now) this.banLog.note(subject, bannedUntil, now)
      }
    this.local = local ? new MemoryLimiterBackend(rule, { maxAddresses: options.maxAddresses }) : null
    this.heldBans = shared ? new Map() : null
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
   * Decides one request: at once when the backend answers at once (this process's memory), else a promise
   * (Redis), which rejects with LimiterUnavailableError when it does not answer and the fallback is
   * 'closed' (given at once, it throws). A decision at hand is not made a promise: awaiting one costs the
   * request a turn of the event loop, and a gate that can answer at once is declared so (plugins/gate.ts).
   */
  check(subject: Subject, limits: Limits): Decision | Promise<Decision> {
    const held = this.heldBans && this.heldBan(subject, limits)
    if (held) return this.decide(held, limits, subject)
    const now = this.options.now?.()
    let answer: TakeResult | Promise<TakeResult>
    try {
      answer = this.backend.take(subject, limits, now)
    } catch (error) {
      return this.decideLocally(error, subject, limits, now)
    }
    // The in-process backend's answer is one object every take refills: it is decided on before any
    // other request's take can run.
    if (!(answer instanceof Promise)) return this.taken(answer, subject, limits)
    return answer.then(
      (taken) => this.taken(taken, subject, limits),
      (error: unknown) => this.decideLocally(error, subject, limits, now),
    )
  }

  private taken(taken: TakeResult, subject: Subject, limits: Limits): Decision {
    if (this.storeUnavailable) this.noteUnavailable(false)
    if (this.heldBans && taken.bannedUntil > taken.now) this.holdBan(subject, limits, taken)
    return this.decide(taken, limits, subject)
  }

  /**
   * The held ban of a subject as a take would find it now, or null when none holds (ended, lifted, other
   * limits). Its buckets are refilled in place (refilling is idempotent over time), and the result is the
   * held one, decided on before any other request can change it.
   */
  private heldBan(subject: Subject, limits: Limits): TakeResult | null {
    const held = this.heldBans!.get(subject.name)
    if (!held) return null
    const taken = held.taken
    const now = this.options.now?.() ?? taken.now + (performance.now() - held.at)
    if (held.lifts !== this.backend.lifts) this.heldBans!.clear()
    else if (taken.bannedUntil > now && sameLimits(held, limits)) {
      const shape = shapesOf(limits)
      refill(taken.minute, shape.minute, now)
      refill(taken.day, shape.day, now)
      held.at += now - taken.now
      taken.now = now
      taken.retryAt = now + msUntilTokens(taken.minute, taken.day, shape)
      return taken
    } else this.heldBans!.delete(subject.name)
    return null
  }

  private holdBan(subject: Subject, limits: Limits, taken: TakeResult): void {
    const bans = this.heldBans!
    if (bans.size >= MAX_HELD_BANS && !bans.has(subject.name)) bans.delete(bans.keys().next().value!)
    const copy = { ...taken, minute: { ...taken.minute }, day: { ...taken.day }, allowed: false, bannedNow: false }
    bans.set(subject.name, { rpm: limits.rpm, rpd: limits.rpd, taken: copy, at: performance.now(), lifts: this.backend.lifts })
  }

  /** The subject's quota, nothing taken; rejects with LimiterUnavailableError when a shared backend does not answer. */
  async peek(subject: Subject, limits: Limits): Promise<Quota> {
    const state = await this.backend.peek(subject, limits, this.options.now?.())
    return quotaOf(state, shapesOf(limits), state.now)
  }

  /** Whether the subject's next request would be refused, nothing taken; rejects like peek (not while a ban is held). */
  async refuses(subject: Subject, limits: Limits): Promise<boolean> {
    // A ban held in memory answers without a call to the backend, as the take that follows does.
    if (this.heldBans && this.heldBan(subject, limits)) return true
    const state = await this.backend.peek(subject, limits, this.options.now?.())
    return state.bannedUntil > state.now || state.minute.tokens < 1 || state.day.tokens < 1
  }

  /** The refusal a request would get with the minute bucket empty, nothing taken: for plugins/scenarios.ts. */
  exhausted(limits: Limits): Extract<Decision, { allowed: false }> {
    const now = this.options.now?.() ?? Date.now()
    const shape = shapesOf(limits)
    const empty = { tokens: 0, updatedAt: now }
    const day = fullBucket(shape.day, now)
    const retryAt = now + msUntilTokens(empty, day, shape)
    const taken = { allowed: false, minute: empty, day, bannedUntil: 0, bannedNow: false, now, retryAt }
    // No subject: a forced refusal starts no ban, so there is none to note.
    return this.decide(taken, limits, null) as Extract<Decision, { allowed: false }>
  }

  /** Day buckets of keys changed since they were last saved, to be written to the data file. */
  unsavedDayBuckets(): Map<string, SavedBucket> {
    return this.memory?.unsavedDayBuckets() ?? new Map()
  }

  /** What a takeover hands to the next server (buckets, bans); nothing with a shared backend, which keeps it. */
  handover(): LimiterHandover {
    return this.memory?.handover(this.options.now?.()) ?? { keys: new Map(), addresses: new Map() }
  }

  /** Called once `saved` (from unsavedDayBuckets) is written: a failed save is not marked, so it is written again. */
  markSaved(saved: Map<string, SavedBucket>): void {
    this.memory?.markSaved(saved)
  }

  /** Forgets a subject's buckets, rejections and ban; `seq` numbers a key's reset (see LimiterBackend.forget). */
  forget(subject: Subject, seq?: number, patience?: Patience): void | Promise<void> {
    this.banLog.drop(subject)
    this.heldBans?.delete(subject.name)
    this.local?.forget(subject)
    return this.backend.forget(subject, seq, patience)
  }

  /** Whether the state lives outside this process (Redis), where it can stop answering. */
  get shared(): boolean {
    return this.memory === null
  }

  /** Whether the backend answers (readiness); always true in process. */
  ping(): Promise<boolean> {
    return this.backend.ping()
  }

  /** Why a shared backend could not be reached last, when it could not; see LimiterBackend.failure. */
  get failure(): string | null {
    return this.backend.failure ?? null
  }

  /**
   * Asks the backend whether it answers within a second and notes a change as a request would: called
   * twice a second by the jobs, so an idle instance reports an outage as a busy one does.
   */
  async watch(): Promise<void> {
    const answers = await this.backend.ping(WATCH_PATIENCE_MS)
    if (answers === this.storeUnavailable) this.noteUnavailable(!answers)
  }

  close(): void | Promise<void> {
    return this.backend.close()
  }

  private decideLocally(error: unknown, subject: Subject, limits: Limits, now: number | undefined): Decision {
    if (!(error instanceof LimiterUnavailableError)) throw error
    if (!this.storeUnavailable) this.noteUnavailable(true)
    if (!this.local) throw error
    return this.decide(this.local.take(subject, limits, now), limits, subject)
  }

  private noteUnavailable(unavailable: boolean): void {
    this.storeUnavailable = unavailable
    this.options.onUnavailable?.(unavailable)
  }

  private decide(taken: TakeResult, limits: Limits, subject: Subject | null): Decision {
    const shape = shapesOf(limits)
    const now = taken.now
    if (taken.bannedNow && subject) this.banLog.note(subject, taken.bannedUntil, now)
    if (taken.allowed) return { allowed: true, quota: quotaOf(taken, shape, now) }
    // Retry-After covers both the ban and the time the refusal named, so a retry at that time is not refused
    // (unless another client sharing the subject goes first).
    if (taken.bannedUntil > now) {
      // The refusal that starts a ban says so, as every later one does. X-RateLimit-Reset is the later of
      // the ban's end and the time named, rounded up to a whole Unix second (never early); Retry-After
      // counts the seconds to it from the whole second this answer is made in (by this clock: Bun's Date
      // header may lag it), so the two name one moment. A ban ends on a whole second (banEnd): at its
      // start, Retry-After is --ban-seconds exactly.
      const resetAt = Math.ceil(Math.max(taken.bannedUntil, taken.retryAt) / 1000)
      const retryAfter = resetAt - Math.floor(now / 1000)
      return {
        allowed: false,
        reason: 'key_banned',
        retryAfter,
        quota: { ...quotaOf(taken, shape, now), remaining: 0, resetAt, resetIn: retryAfter },
        bannedNow: taken.bannedNow,
        banAfter: this.options.banAfter,
      }
    }
    const retryAfter = Math.max(1, Math.ceil((taken.retryAt - now) / 1000))
    const { banAfter } = this.options
    return { allowed: false, reason: 'rate_limited', retryAfter, quota: quotaOf(taken, shape, now), bannedNow: false, banAfter }
  }
}

function quotaOf(taken: Pick<TakeResult, 'minute' | 'day'>, shape: LimitShapes, now: number): Quota {
  const useMinute = Math.floor(taken.minute.tokens) <= Math.floor(taken.day.tokens)
  const bucket = useMinute ? taken.minute : taken.day
  const bucketShape = useMinute ? shape.minute : shape.day
  // Each rounded up once, from the moment itself: the Unix second the bucket is full (never early), and the
  // seconds until then (at most the window). Rounding the now and the wait apart and adding them put
  // X-RateLimit-Reset a second late in some answers.
  const untilFull = msUntilFull(bucket, bucketShape)
  return {
    window: useMinute ? 'minute' : 'day',
    limit: bucketShape.capacity,
    remaining: Math.max(0, Math.floor(bucket.tokens)),
    resetAt: Math.ceil((now + untilFull) / 1000),
    resetIn: Math.ceil(untilFull / 1000),
  }
}
