/** Lengths of time in ms, named once (the limits' windows, usage buckets and retention), times as text, and a deadline on a wait. */

export const MINUTE_MS = 60_000
export const HOUR_MS = 60 * MINUTE_MS
export const DAY_MS = 24 * HOUR_MS

/** A time (ms) as ISO 8601 text in UTC; null stays null. */
export function iso(ms: number): string
export function iso(ms: number | null): string | null
export function iso(ms: number | null): string | null {
  return ms === null ? null : new Date(ms).toISOString()
}

/** What `work` settles with, or once `ms` have passed what `late` gives (or throws); the timer goes either way. */
export function withDeadline<T>(work: T | Promise<T>, ms: number, late: () => T): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined
  const deadline = new Promise<T>((resolve) => {
    timer = setTimeout(() => resolve(Promise.resolve().then(late)), ms)
  })
  return Promise.race([work, deadline]).finally(() => clearTimeout(timer))
}
