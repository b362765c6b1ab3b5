/**
 * The seams between the limiter and where its state lives, in this process (memory/) or in Redis (redis/),
 * each with a conformance suite in test/limiter/: the policy's (LimiterBackend: buckets, rejections and
 * bans, taken atomically), the console's reads (SubjectReader), and the scenarios' tries (TryStore).
 */
import type { Limits } from '../domain/plans'
import type { Subject } from '../domain/subject'
import { DAY_MS, MINUTE_MS } from '../domain/time'
import type { Bucket, BucketShape } from './token-bucket'

/** When a subject that keeps going after 429s is banned, and for how long. */
export interface BanRule {
  /** A ban starts at the early refusal (limiter/turns.ts) that makes more than banAfter within one minute. */
  banAfter: number
  banSeconds: number
}

/** A subject's state just after one request was decided. */
export interface TakeResult {
  /** Whether one token was taken from both buckets; a take never takes from one only. */
  allowed: boolean
  minute: Bucket
  day: Bucket
  /** Time (ms) at which the subject's ban ends; not after `now` when it is not banned. */
  bannedUntil: number
  /** Whether this request's refusal started the ban. */
  bannedNow: boolean
  /** For a refusal, the time (ms) it tells the client to come back at (see turns.ts). */
  retryAt: number
  /** The time (ms) the backend decided at: the caller's when it passed one, else the backend's clock. */
  now: number
}

/** A subject's buckets brought up to `now`, as a take would find them; nothing taken or recorded. */
export type PeekResult = Pick<TakeResult, 'minute' | 'day' | 'bannedUntil' | 'now'>

/** Where subjects' state lives; like express-rate-limit's Store, it answers at once or with a promise. */
export interface LimiterBackend {
  /**
   * Refills the subject's buckets to `now`, takes a token from both or neither, gives a refusal its turn,
   * and records an early refusal and any ban due. Other limits than last time start afresh. An answer given at once may
   * be the same object every time: it is read before the next take.
   */
  take(subject: Subject, limits: Limits, now?: number): TakeResult | Promise<TakeResult>
  /** The subject's buckets as the next take would find them, changing nothing a take would decide by. */
  peek(subject: Subject, limits: Limits, now?: number): PeekResult | Promise<PeekResult>
  /**
   * Drops a subject's buckets, rejections and ban. `seq` numbers a key's reset: a shared backend applies
   * each once, however many instances ask, and never one older than the last it applied. `patience`:
   * how long a shared backend may take (see Patience).
   */
  forget(subject: Subject, seq?: number, patience?: Patience): void | Promise<void>
  /** Whether the backend answers now, within `patienceMs` (default: a request's own bound). */
  ping(patienceMs?: number): Promise<boolean>
  /** Why the last attempt to reach a shared backend failed, in words for an operator; null when it did not. */
  readonly failure?: string | null
  /**
   * A shared backend's count of subjects forgotten (bans lifted, limits reset) by any instance, as last
   * read: a change tells this process that a ban it holds in memory may be over.
   */
  readonly lifts?: string

  close(): void | Promise<void>
}

/**
 * How long a shared backend may take to answer: a request's bound (the default), or a person's (the
 * console), who can wait longer than a request under load. A background job waits as a request does: it
 * tries again at its next turn, and must not hold the turn up (the change poll brings revocations).
 */
export type Patience = 'request' | 'person'

/** The console's seam: a subject's state as the backend holds it, taking nothing and changing nothing. */
export interface SubjectReader {
  /** Null when it holds none. `limits` is null for a day bucket saved by an earlier run. */
  inspect(subject: Subject): Inspected | null | Promise<Inspected | null>
}

/** Try ids one group (API key) may hold: a client making up Idempotency-Keys forgets its own oldest, never others'. */
export const TRIES_PER_KEY = 1_000

/** The scenarios' seam: tries counted for answers forced on request (Prefer: fail=N). */
export interface TryStore {
  /**
   * Counts one more try under `id` (an Idempotency-Key) within `group` (its key's id) and returns its number,
   * 1 for the first; a count lives at least `keepMs`. A store bounded over all groups refuses a new id past
   * the bound with TriesFullError, rather than forget another group's.
   */
  countTry(group: string, id: string, keepMs: number, now?: number): number | Promise<number>
}

/** A backend shared by instances (Redis) serves the three seams over one connection. */
export type SharedBackend = LimiterBackend & SubjectReader & TryStore

/** `now` is the backend's clock when it answered. */
export type Inspected = Pick<TakeResult, 'day' | 'bannedUntil' | 'now'> & { limits: Limits | null }

/** A TryStore held as many counts as it may, all groups together: this new id was not counted. */
export class TriesFullError extends Error {
  override name = 'TriesFullError'
  constructor(
    /** Seconds until the oldest count held is forgotten, making room. */
    readonly retryAfter: number,
  ) {
    super('too many tries counted at once')
  }
}

/** The backend could not answer in time (down, unreachable or too slow); nothing was taken late. */
export class LimiterUnavailableError extends Error {
  override name = 'LimiterUnavailableError'
}

export interface LimitShapes {
  minute: BucketShape
  day: BucketShape
}

// By the limits object itself (keys and plans keep theirs), so the hot path makes no shapes per request.
const shapes = new WeakMap<Limits, LimitShapes>()

export function shapesOf(limits: Limits): LimitShapes {
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
