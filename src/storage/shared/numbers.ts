/**
 * PostgreSQL's bigint arrives from Bun.sql as a string, and a JS number beyond 2^53 would be sent
 * rounded. Ids, counts and times are safe integers, so a value that is not one is refused here rather
 * than silently changed (a categoryId, any int64, is a bigint instead: pets.ts).
 */
export function exactInteger(value: string | number | bigint): number {
  const number = Number(value)
  if (!Number.isSafeInteger(number) || String(number) !== String(value))
    throw new RangeError(`the database holds ${value}, which is not an integer petstore can keep exactly`)
  return number
}
