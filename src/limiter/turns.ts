/**
 * The times refusals tell, kept as turns in a queue: each refusal names the next free time and adds a
 * turn; a request at or after the earliest turn is a client back when told, which claims that turn and
 * never counts toward a ban. A turn is a promise: the token it was told of is kept for it, and a request
 * before it may take only a token the turns leave spare. A request before it while turns wait is early:
 * refused, it counts, unless a request let through at its turn came before it (a fleet's worker let
 * through asks again, at once or after some work, before others' turns: one such refusal is forgiven for
 * each). A request let through never counts: a worker of a fleet cannot know of the others' 429s. So
 * clients sharing a subject that each wait out their own Retry-After, however late they come back within
 * a minute, are never banned and mostly find their token, and one that does not wait, refused again and
 * again before its turn, is. Plain data and pure functions, repeated by redis/script.ts with the same
 * operations in the same order.
 */
import { MAX_TURNS } from '../domain/ban-rule'
import { MINUTE_MS } from '../domain/time'
import type { LimitShapes } from './backend'
import { type Bucket, msUntilToken, msUntilTokens } from './token-bucket'

export interface Turns {
  /** The time the last refusal named (ms): when its token comes; the next is named a step after it. */
  last: number
  /** The time the last refusal told (ms): `last` in Retry-After's whole seconds. */
  told: number
  /** The times told and not yet claimed (ms), earliest first; at most MAX_TURNS. */
  waiting: number[]
  /** Requests let through at their turn, each of which forgives one early refusal; at most MAX_CREDIT. */
  credit: number
}

export const MAX_CREDIT = 6
/** How long past its time a turn waits for its client: as long as the ban counts early refusals. */
export const LATE_MS = MINUTE_MS

/** How a request stands to the turns: one waited before it, it claims one, or none waits. */
export const EARLY = -1
export const NONE_WAITING = 0
export const ON_TIME = 1

export function noTurns(): Turns {
  return { last: 0, told: 0, waiting: [], credit: 0 }
}

/**
 * Times named are at least one minute token apart, and a second: Retry-After is in whole seconds, so
 * closer times would send clients back together. Only the minute paces them: a client asking again while
 * it waits for a day token hours away is told about the same time, not a day more.
 */
function stepOf(shape: LimitShapes): number {
  return Math.max(shape.minute.windowMs / shape.minute.capacity, 1000)
}

/**
 * The time a client told to wait for `at` comes back at the earliest: Retry-After's whole seconds later,
 * to the millisecond below, so the Retry-After said of it is those seconds exactly.
 */
function toldOf(at: number, now: number): number {
  // At least a second, as Retry-After is: a bucket a rounding hair below a token names `now` itself.
  return Math.floor(now + Math.max(1, Math.ceil((at - now) / 1000)) * 1000)
}

/**
 * Brings the turns to `now` and says how a request at `now` stands: EARLY, NONE_WAITING, or ON_TIME (it
 * has claimed the earliest turn). A turn a minute past its time with no claim is dropped: its client
 * gave up. Until then it waits for a client back late (a backoff of its own on top of Retry-After), and
 * any request may claim it, as it is no longer ahead of anyone.
 */
export function arrive(turns: Turns, now: number): number {
  const { waiting } = turns
  let passed = 0
  while (passed < waiting.length && now - waiting[passed]! >= LATE_MS) passed++
  if (passed > 0) waiting.splice(0, passed)
  if (waiting.length === 0) return NONE_WAITING
  if (now < waiting[0]!) return EARLY
  waiting.shift()
  return ON_TIME
}

/** Whether a request counts toward a ban: refused early, with no request let through at its turn to forgive it. */
export function counts(turns: Turns, arrival: number, hasToken: boolean): boolean {
  if (arrival === ON_TIME) {
    if (hasToken) turns.credit = Math.min(turns.credit + 1, MAX_CREDIT)
    return false
  }
  if (arrival !== EARLY || hasToken) return false
  if (turns.credit === 0) return true
  turns.credit -= 1
  return false
}

/**
 * Whether a request at `now`, as it stands to the turns (`arrival`), finds a token it may take: one in
 * both buckets, and, before the earliest turn, one more by that turn's time, which is the turn's.
 * (Later turns are a step apart, a token's refill each.)
 */
export function tokenFor(turns: Turns, arrival: number, minute: Bucket, day: Bucket, shape: LimitShapes, now: number): boolean {
  if (minute.tokens < 1 || day.tokens < 1) return false
  if (arrival !== EARLY) return true
  const wait = turns.waiting[0]! - now
  return msUntilToken(minute, shape.minute, 2) <= wait && msUntilToken(day, shape.day, 2) <= wait
}

/**
 * A refused request: names its time (when both buckets hold a whole token, and a step after the last
 * time named while turns wait) and keeps it as a turn.
 */
export function nameTurn(turns: Turns, minute: Bucket, day: Bucket, shape: LimitShapes, now: number): void {
  // Each waiting turn keeps a minute token (taken on the way as it refills): the next time is when the
  // bucket holds one more than they take, and the day a token.
  const first = now + Math.max(msUntilToken(minute, shape.minute, 1 + turns.waiting.length), msUntilToken(day, shape.day))
  turns.last = turns.waiting.length > 0 && turns.last > now ? Math.max(first, turns.last + stepOf(shape)) : first
  turns.told = toldOf(turns.last, now)
  const { waiting } = turns
  if (waiting.length < MAX_TURNS) {
    let at = waiting.length
    while (at > 0 && waiting[at - 1]! > turns.told) at--
    waiting.splice(at, 0, turns.told)
  }
}

/**
 * After a take: with no turn waiting, no credit and no ban, the times last named and told matter no
 * more (the next refusal names the first token), and are dropped, so the Redis script stores nothing.
 */
export function settle(turns: Turns, banned: boolean): void {
  if (turns.waiting.length === 0 && turns.credit === 0 && !banned) {
    turns.last = 0
    turns.told = 0
  }
}

/**
 * A ban refuses every waiting client alike: the turns give way to the time of the next token, told as it
 * is (the ban's Retry-After covers it, from whenever it is asked).
 */
export function onBan(turns: Turns, minute: Bucket, day: Bucket, shape: LimitShapes, now: number): void {
  turns.last = now + msUntilTokens(minute, day, shape)
  turns.told = turns.last
  turns.waiting.length = 0
  turns.credit = 0
}
