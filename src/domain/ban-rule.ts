/**
 * The ranges of the ban rule (a subject that keeps going after 429s is banned), stated once: the limiter
 * refuses a rule outside them and the config refuses a flag outside them, so a start never gets as far
 * as the limiter with a value the config let through.
 */

export interface Range {
  readonly min: number
  readonly max: number
}

/** 429s within a minute before a ban (the limiter keeps the last banAfter + 1 of them per subject). */
export const BAN_AFTER: Range = { min: 1, max: 100_000 }
/** A ban's length in seconds, up to a year. */
export const BAN_SECONDS: Range = { min: 0, max: 31_536_000 }

/**
 * When a ban that starts at `now` (ms) ends: banSeconds after the start of the whole second it starts in,
 * so that answer says Retry-After banSeconds exactly and X-RateLimit-Reset that second, and the two agree
 * (limiter.ts). redis/script.ts repeats it.
 */
export function banEnd(now: number, banSeconds: number): number {
  return Math.floor(now / 1000) * 1000 + banSeconds * 1000
}

/**
 * Times told after 429s kept per subject, for clients to claim when they come back (limiter/turns.ts):
 * more than a fleet sharing a key holds; past it a refusal is told a time but keeps none.
 */
export const MAX_TURNS = 64
