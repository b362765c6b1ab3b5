/**
 * PostgreSQL's bigint arrives from Bun.sql as a string, and a JS number beyond 2^53 would be sent
 * rounded. Every integer the API deals in is a safe integer, so a value that is not one is refused
 * here rather than silently changed.
 */
export function exactInteger(value: string | number | bigint): number {
  const number = Number(value)
  if (!Number.isSafeInteger(number) || String(number) !== String(value))
    throw new RangeError(`the database holds ${value}, which is not an integer petstore can keep exactly`)
  return number
}
