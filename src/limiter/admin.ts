/**
 * What the console reads and does with the limiter, apart from the policy: a subject's day left and ban
 * (read through the backend's SubjectReader, taking nothing), the bans this process started, and lifting
 * an address's ban. A key's ban is lifted through storage's limit reset, which every instance applies.
 */
import { type Limits, sameLimits } from '../domain/plans'
import type { AddressSubject, Subject } from '../domain/subject'
import { shapesOf, type SubjectReader } from './backend'
import { refill } from './token-bucket'

/** What the console shows of a subject, read without taking a token. */
export interface InspectedSubject {
  /** Whole requests left in the day bucket now. */
  dayLeft: number
  /** When its ban ends (ms), or null when it is not banned. */
  bannedUntil: number | null
}

export interface Ban {
  subject: Subject
  /** When it ends (ms). */
  until: number
}

/** Most ban starts this process remembers for the console; the oldest are forgotten first. */
const MAX_BANS_KEPT = 10_000

/** The bans this process started (or was handed over), by subject name: the policy notes, the console lists. */
export class BanLog {
  private readonly bans = new Map<string, Ban>()

  note(subject: Subject, until: number, now: number): void {
    if (this.bans.size >= MAX_BANS_KEPT) {
      this.current(now)
      if (this.bans.size >= MAX_BANS_KEPT) this.bans.delete(this.bans.keys().next().value!)
    }
    this.bans.set(subject.name, { subject, until })
  }

  drop(subject: Subject): void {
    this.bans.delete(subject.name)
  }

  /** The bans that have not ended by `now`, oldest first. */
  current(now: number): Ban[] {
    for (const [name, { until }] of this.bans) if (until <= now) this.bans.delete(name)
    return [...this.bans.values()]
  }
}

export class LimiterAdmin {
  constructor(
    private readonly reader: SubjectReader,
    private readonly banLog: BanLog,
    /** Forgets a subject in the policy's backends (and the ban log). */
    private readonly forget: (subject: Subject) => void | Promise<void>,
    private readonly now?: () => number,
  ) {}

  /**
   * A subject's day quota left and ban, nothing taken: a full day when the backend holds nothing of it (or
   * holds it under other limits, whose ban still stands). Rejects with LimiterUnavailableError when a shared backend does not answer.
   */
  async inspect(subject: Subject, limits: Limits): Promise<InspectedSubject> {
    const held = await this.reader.inspect(subject)
    if (!held) return { dayLeft: limits.rpd, bannedUntil: null }
    const now = this.now?.() ?? held.now
    const bannedUntil = held.bannedUntil > now ? held.bannedUntil : null
    // Other limits start the buckets afresh, and keep a ban until it ends (as the next take will).
    if (held.limits && !sameLimits(held.limits, limits)) return { dayLeft: limits.rpd, bannedUntil }
    const day = { ...held.day, tokens: Math.min(held.day.tokens, limits.rpd) }
    refill(day, shapesOf(limits).day, now)
    return { dayLeft: Math.floor(day.tokens), bannedUntil }
  }

  /** The bans this process started and that have not ended by `now`. */
  bans(now: number): Ban[] {
    return this.banLog.current(now)
  }

  /** Lifts an address's ban (and its buckets) in the backend. */
  async liftAddress(subject: AddressSubject): Promise<void> {
    await this.forget(subject)
  }
}
