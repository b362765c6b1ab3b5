/**
 * A whole number within a range, as every number petstore reads is held to (the API's queries, the
 * console's, the Prefer header, the flags, a key's own limits), and the words each complaint uses.
 */

/** How every range is phrased in a complaint. */
export function integerRule(min: number | bigint, max: number | bigint): string {
  return `must be an integer from ${min} to ${max}`
}

/** `text` as a whole number from `min` to `max`, written in at most `digits` decimal digits; else undefined. */
export function integerWithin(text: string, min: number, max: number, digits = Number.POSITIVE_INFINITY): number | undefined {
  if (text.length === 0 || text.length > digits || !/^\d+$/.test(text)) return undefined
  const value = Number(text)
  return value >= min && value <= max ? value : undefined
}
