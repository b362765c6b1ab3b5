/**
 * Elysia reads a hook's or a handler's source text to decide whether to await it, and awaiting costs
 * every request a turn of the event loop: 5–10 % of a list's or a refusal's CPU. So where nothing a request
 * needs can wait (the data file read in this process, the limiter in its memory), the gate and the
 * reads are declared to answer at once; their work, written once as a value or a promise, is then a
 * value. This is the failure that says it was not: a 500, logged, never an answer given too early;
 * the promise met is left to end unheard (its rejection must not end the process).
 */
export function waitedWhereNothingWaits(what: string, pending: Promise<unknown>): Error {
  pending.catch(() => {})
  return new Error(`${what} was declared to answer at once but had to wait`)
}
