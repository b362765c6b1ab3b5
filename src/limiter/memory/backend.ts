/**
 * The limiter's state in this process: per subject a minute and a day bucket, its recent rejections and
 * its ban. The number of remembered addresses is capped, so memory stays bounded under a spray, and the
 * day buckets of keys can be saved to the data file and loaded back, so a restart does not refill them.
 * It answers at once and allocates nothing per request for a subject it already knows.
 */
import type { HandedSubject, LimiterHandover, SavedBucket } from '../../domain/repositories'
import { type Limits, sameLimits } from '../../domain/plans'
import type { Subject } from '../../domain/subject'
import {
  type BanRule,
  type Inspected,
  type LimiterBackend,
  type PeekResult,
  shapesOf,
  type SubjectReader,
  type TakeResult,
} from '../backend'
import { DAY_MS, MINUTE_MS } from '../../domain/time'
import { banEnd } from '../../domain/ban-rule'
import { type Bucket, fullBucket, refill } from '../token-bucket'
import { arrive, counts, nameTurn, noTurns, onBan, settle, tokenFor, type Turns } from '../turns'

export interface MemoryBackendOptions {
  /** Most client addresses remembered at once. */
  maxAddresses: number
  /** Day buckets of keys saved by an earlier run; each is used once, when its key is first seen. */
  saved?: Map<string, SavedBucket>
  /** What the server this one took over from handed over; each subject's is used once, like `saved`. */
  handedOver?: LimiterHandover
}

interface State {
  limits: Limits
  minute: Bucket
  day: Bucket
  /** Times of the most recent early refusals (turns.ts), as a ring; allocated on the first. */
  rejections: Float64Array | null
  nextRejection: number
  bannedUntil: number
  /** The times refusals named, claimed in turn by clients coming back (see turns.ts). */
  turns: Turns
  dayDirty: boolean
}

export class MemoryLimiterBackend implements LimiterBackend, SubjectReader {
  private readonly keys = new Map<string, State>()
  /**
   * Addresses in two generations: one seen again moves to the current, and when the current holds half the
   * cap the previous is dropped whole, forgetting the least recently seen at constant cost per request.
   */
  private currentAddresses = new Map<string, State>()
  private previousAddresses = new Map<string, State>()
  private readonly saved: Map<string, SavedBucket>
  private readonly handedOver: LimiterHandover
  // One result, refilled by every take: the policy reads it before the next take.
  private readonly result: TakeResult = {
    allowed: false,
    minute: { tokens: 0, updatedAt: 0 },
    day: { tokens: 0, updatedAt: 0 },
    bannedUntil: 0,
    bannedNow: false,
    now: 0,
    retryAt: 0,
  }

  constructor(
    private readonly rule: BanRule,
    private readonly options: MemoryBackendOptions,
  ) {
    if (options.maxAddresses < 1) throw new RangeError('maxAddresses must be positive')
    this.saved = options.saved ?? new Map()
    const handedOver = options.handedOver ?? { keys: new Map(), addresses: new Map() }
    this.handedOver = { keys: handedOver.keys, addresses: newest(handedOver.addresses, options.maxAddresses) }
  }

  /** What was handed to this backend and is not used yet, within its cap: the console lists its bans. */
  get unusedHandover(): LimiterHandover {
    return this.handedOver
  }

  get trackedAddresses(): number {
    return this.currentAddresses.size + this.previousAddresses.size
  }

  take(who: Subject, limits: Limits, now: number = Date.now()): TakeResult {
    const subject = this.state(who, limits, now)
    const shape = shapesOf(subject.limits)
    refill(subject.minute, shape.minute, now)
    refill(subject.day, shape.day, now)

    const result = this.result
    result.minute = subject.minute
    result.day = subject.day
    result.now = now
    result.bannedNow = false
    result.allowed = false
    // While banned nothing is taken and nothing counts, so a ban is never extended.
    if (subject.bannedUntil <= now) {
      const { turns } = subject
      const arrival = arrive(turns, now)
      const hasToken = tokenFor(turns, arrival, subject.minute, subject.day, shape, now)
      if (counts(turns, arrival, hasToken) && this.recordRejection(subject, now)) {
        // The refusal that starts a ban says so.
        result.bannedNow = true
        onBan(turns, subject.minute, subject.day, shape, now)
      } else if (hasToken) {
        subject.minute.tokens -= 1
        subject.day.tokens -= 1
        subject.dayDirty = who.kind === 'key'
        result.allowed = true
      } else nameTurn(turns, subject.minute, subject.day, shape, now)
    }
    settle(subject.turns, subject.bannedUntil > now)
    result.retryAt = subject.turns.told
    result.bannedUntil = subject.bannedUntil
    return result
  }

  /** Refilling is what any take would do first; a subject seen for the first time starts as a take would start it. */
  peek(who: Subject, limits: Limits, now: number = Date.now()): PeekResult {
    const subject = this.state(who, limits, now)
    const shape = shapesOf(subject.limits)
    refill(subject.minute, shape.minute, now)
    refill(subject.day, shape.day, now)
    return { minute: { ...subject.minute }, day: { ...subject.day }, bannedUntil: subject.bannedUntil, now }
  }

  /** Forgets a subject's state (buckets, rejections, ban), including a key's day bucket loaded at start. */
  forget({ name: id }: Subject): void {
    this.keys.delete(id)
    this.saved.delete(id)
    this.handedOver.keys.delete(id)
    this.handedOver.addresses.delete(id)
    this.currentAddresses.delete(id)
    this.previousAddresses.delete(id)
  }

  /** Reads without moving an address to the current generation: being inspected is not a visit. */
  inspect({ kind, name: id }: Subject, now: number = Date.now()): Inspected | null {
    const isKey = kind === 'key'
    const subject = isKey ? this.keys.get(id) : (this.currentAddresses.get(id) ?? this.previousAddresses.get(id))
    if (subject) return { limits: subject.limits, day: { ...subject.day }, bannedUntil: subject.bannedUntil, now }
    const saved = isKey ? this.saved.get(id) : undefined
    const handed = (isKey ? this.handedOver.keys : this.handedOver.addresses).get(id)
    if (!saved && !handed) return null
    // The day the first take would start with, and its limits (other limits than the key's show a full
    // day, as the take starts one); without limits the day is capped by the subject's when inspected.
    const held = heldDay(handed, saved)
    const day = held.day ?? { tokens: Infinity, updatedAt: now }
    return { limits: held.limits, day: { ...day }, bannedUntil: handed?.bannedUntil ?? 0, now }
  }

  async ping(): Promise<boolean> {
    return true
  }

  close(): void {}

  /** See RateLimiter.unsavedDayBuckets. */
  unsavedDayBuckets(): Map<string, SavedBucket> {
    const dirty = new Map<string, SavedBucket>()
    for (const [id, subject] of this.keys)
      if (subject.dayDirty) dirty.set(id, { tokens: subject.day.tokens, updatedAt: subject.day.updatedAt, limits: subject.limits })
    return dirty
  }

  /**
   * For the next server on the data file: keys' minute buckets, bans and rejections, and their day
   * buckets not yet saved in storage (the stop saves them after, unless storage refuses); addresses'
   * state; and what was handed to this one and not used yet; each unless it is as a new subject's by
   * now, so subjects never seen again are not carried from stop to stop.
   */
  handover(now: number = Date.now()): LimiterHandover {
    const keys = new Map<string, HandedSubject>()
    const addresses = new Map<string, HandedSubject>()
    const keep = (into: Map<string, HandedSubject>, id: string, subject: State, withDay: boolean) => {
      const handed = this.handed(subject, withDay, now)
      // A key's plan may change before the next start: its buckets say what limits they were counted under
      // (an address is always limited as Free).
      if (into === keys) handed.limits = subject.limits
      const fresh =
        handed.minute.tokens >= subject.limits.rpm &&
        (handed.day?.tokens ?? Infinity) >= subject.limits.rpd &&
        !handed.bannedUntil &&
        !handed.rejections
      if (!fresh) into.set(id, handed)
    }
    for (const [id, handed] of this.handedOver.keys) if (!lapsed(handed, now)) keys.set(id, handed)
    for (const [id, subject] of this.keys) keep(keys, id, subject, subject.dayDirty)
    // As many addresses as this server may track, the ones it saw last first: restarts must not add up
    // what one server would have forgotten (its cap, maxAddresses).
    for (const generation of [this.currentAddresses, this.previousAddresses])
      for (const [id, subject] of generation) if (addresses.size < this.options.maxAddresses) keep(addresses, id, subject, true)
    for (const [id, handed] of newest(this.handedOver.addresses, this.options.maxAddresses - addresses.size))
      if (!lapsed(handed, now) && !addresses.has(id)) addresses.set(id, handed)
    return { keys, addresses }
  }

  /** The subject's state brought up to `now` (copies: handing over changes nothing here). */
  private handed(subject: State, withDay: boolean, now: number): HandedSubject {
    const shape = shapesOf(subject.limits)
    const handed: HandedSubject = { minute: { ...subject.minute } }
    refill(handed.minute, shape.minute, now)
    if (withDay) {
      handed.day = { ...subject.day }
      refill(handed.day, shape.day, now)
    }
    if (subject.bannedUntil > now) handed.bannedUntil = subject.bannedUntil
    const { turns } = subject
    if (turns.told > now) handed.retryAt = turns.told
    if (turns.waiting.length > 0) handed.turns = [...turns.waiting]
    const recent = subject.rejections ? [...subject.rejections].filter((at) => now - at < MINUTE_MS).sort((a, b) => a - b) : []
    if (recent.length) handed.rejections = recent
    return handed
  }

  /** See RateLimiter.markSaved: the buckets count as saved unless they changed meanwhile. */
  markSaved(saved: Map<string, SavedBucket>): void {
    for (const [id, bucket] of saved) {
      const subject = this.keys.get(id)
      if (subject && subject.day.updatedAt === bucket.updatedAt && subject.day.tokens === bucket.tokens) subject.dayDirty = false
    }
  }

  private state({ kind, name: id }: Subject, limits: Limits, now: number): State {
    const isKey = kind === 'key'
    const known = isKey ? this.keys.get(id) : this.address(id)
    if (known && sameLimits(known.limits, limits)) return known
    const shape = shapesOf(limits)
    const saved = isKey ? this.saved.get(id) : undefined
    const handedOver = isKey ? this.handedOver.keys : this.handedOver.addresses
    const handedAny = handedOver.get(id)
    // Handed over under other limits (a plan changed since): its ban only, as below.
    const handed = handedAny?.limits && !sameLimits(handedAny.limits, limits) ? undefined : handedAny
    const held = heldDay(handedAny, saved)
    const day = held.limits && !sameLimits(held.limits, limits) ? undefined : held.day
    // Other limits start the buckets afresh; a ban stays until it ends or is lifted (forget).
    const subject: State = {
      limits,
      minute: handed ? restored(handed.minute, limits.rpm, now) : fullBucket(shape.minute, now),
      day: day ? restored(day, limits.rpd, now) : fullBucket(shape.day, now),
      rejections: null,
      nextRejection: 0,
      bannedUntil: known?.bannedUntil ?? handedAny?.bannedUntil ?? 0,
      turns: handed ? handedTurns(handed, now) : noTurns(),
      // Saved by this server, as the last one could not.
      dayDirty: isKey && handed?.day !== undefined,
    }
    if (handed?.rejections?.length) {
      // As the ring would hold them had they happened here: the newest banAfter + 1, oldest first.
      const size = this.rule.banAfter + 1
      const times = handed.rejections.slice(-size)
      subject.rejections = new Float64Array(size).fill(-Infinity)
      subject.rejections.set(times)
      subject.nextRejection = times.length % size
    }
    if (saved) this.saved.delete(id)
    if (handedAny) handedOver.delete(id)
    if (isKey) this.keys.set(id, subject)
    else this.rememberAddress(id, subject)
    return subject
  }

  private address(id: string): State | undefined {
    const current = this.currentAddresses.get(id)
    if (current) return current
    const previous = this.previousAddresses.get(id)
    if (previous) {
      this.previousAddresses.delete(id)
      this.rememberAddress(id, previous)
    }
    return previous
  }

  private rememberAddress(id: string, subject: State): void {
    if (this.currentAddresses.size >= Math.max(1, Math.floor(this.options.maxAddresses / 2))) {
      this.previousAddresses = this.currentAddresses
      this.currentAddresses = new Map()
    }
    this.currentAddresses.set(id, subject)
  }

  /** True when this early refusal starts a ban: more than banAfter within one minute. */
  private recordRejection(subject: State, now: number): boolean {
    const size = this.rule.banAfter + 1
    subject.rejections ??= new Float64Array(size).fill(-Infinity)
    subject.rejections[subject.nextRejection] = now
    subject.nextRejection = (subject.nextRejection + 1) % size
    // After the write, the next slot holds the oldest of the last banAfter+1 rejections.
    const oldest = subject.rejections[subject.nextRejection]!
    if (now - oldest >= MINUTE_MS) return false
    subject.bannedUntil = banEnd(now, this.rule.banSeconds)
    subject.rejections.fill(-Infinity)
    return true
  }
}

/**
 * The day bucket a key not seen yet starts with, and the limits it was counted under (null: not known,
 * taken as the key's): the one handed over, as new as the one saved or newer (it is handed over when not
 * yet saved as the last server stopped); else the one saved, unless the handover, newer, says other
 * limits than it was counted under. One rule for the take (state) and the console (inspect).
 */
function heldDay(
  handed: HandedSubject | undefined,
  saved: SavedBucket | undefined,
): { day: SavedBucket | undefined; limits: Limits | null } {
  if (handed?.day) return { day: handed.day, limits: handed.limits ?? null }
  const stale = saved?.limits && handed?.limits && !sameLimits(saved.limits, handed.limits)
  if (saved && !stale) return { day: saved, limits: saved.limits ?? handed?.limits ?? null }
  return handed?.limits ? { day: undefined, limits: handed.limits } : NOTHING_HELD
}

/** Most new subjects (every new address) hold nothing: one answer for them all. */
const NOTHING_HELD = Object.freeze({ day: undefined, limits: null })

/** The `count` subjects whose minute bucket changed last. */
function newest(subjects: Map<string, HandedSubject>, count: number): Map<string, HandedSubject> {
  if (subjects.size <= count) return subjects
  return new Map([...subjects].sort(([, a], [, b]) => b.minute.updatedAt - a.minute.updatedAt).slice(0, Math.max(0, count)))
}

/** Handed over and never used since: its ban over, its buckets full again whatever its limits, its rejections out of the minute. */
function lapsed(handed: HandedSubject, now: number): boolean {
  return (
    !((handed.bannedUntil ?? 0) > now) &&
    !((handed.retryAt ?? 0) > now) &&
    now - handed.minute.updatedAt >= MINUTE_MS &&
    (handed.day === undefined || now - handed.day.updatedAt >= DAY_MS) &&
    !handed.rejections?.some((at) => now - at < MINUTE_MS)
  )
}

/**
 * The turns handed over (the time last named is taken as the time told, at most a second after it); from
 * an older server, which kept only the last time named, one turn waits until it.
 */
function handedTurns(handed: HandedSubject, now: number): Turns {
  const told = handed.retryAt ?? 0
  const waiting = handed.turns ?? (told > now ? [told] : [])
  return { last: told, told, waiting, credit: 0 }
}

/** A bucket saved by an earlier run: never above the key's current limit, never dated in the future. */
function restored(saved: SavedBucket, capacity: number, now: number): Bucket {
  return { tokens: Math.min(saved.tokens, capacity), updatedAt: Math.min(saved.updatedAt, now) }
}
