/**
 * PostgreSQL's bigint arrives from Bun.sql as a string, and a JS number beyond 2^53 would be sent
 * rounded. Ids, counts and times are safe integers, so a value that is not one is refused here rather
 * than silently changed (a categoryId, any int64, is a bigint instead: pets.ts).
 */
export function exactInteger(value: string | number | bigint): number {
  const number = Number(value)
  // A number or bigint that converts to a safe integer is exact; text must also read back the same ("1e3", "007").
  if (!Number.isSafeInteger(number) || (typeof value === 'string' && String(number) !== value))
    throw new RangeError(`the database holds ${value}, which is not an integer petstore can keep exactly`)
  return number
}
