/** Lengths of time in ms, named once: the limits' windows (a minute, a day), usage buckets and retention. */

export const MINUTE_MS = 60_000
export const HOUR_MS = 60 * MINUTE_MS
export const DAY_MS = 24 * HOUR_MS
