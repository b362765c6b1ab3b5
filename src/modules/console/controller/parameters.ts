/** The console's query and path parameters, read within the bounds and words their models state. */
import type { TInteger, TLiteral, TUnion } from '@sinclair/typebox'
import { badRequest } from '../../../http/api-errors'
import { clientSubject, normaliseAddress } from '../../../http/client-address'
import { integerRule, integerWithin } from '../../../domain/integer-range'
import { type AddressSubject, UNKNOWN_CLIENT } from '../../../domain/subject'
import { KEY_ID } from '../../../domain/api-key'
import { KeysLimit, ListLimit } from '../model'

/** A query's integer parameter within the bounds its model states; absent, the model's default (if any). */
export function integerParameter(query: URLSearchParams, name: string, schema: TInteger): number | undefined {
  const text = query.get(name)
  if (text === null) return schema.default
  const { minimum, maximum } = schema as TInteger & { minimum: number; maximum: number }
  const value = integerWithin(text, minimum, maximum, 10)
  if (value === undefined) throw badRequest(`${name}: ${integerRule(minimum, maximum)}`)
  return value
}

/** A query's parameter, one of the words its model states; absent, the model's default. */
export function choiceOf<T extends string>(query: URLSearchParams, name: string, schema: TUnion<TLiteral<T>[]>): T {
  const choices: string[] = schema.anyOf.map((choice) => choice.const)
  const value = query.get(name) ?? schema.default
  if (!choices.includes(value)) throw badRequest(`${name}: must be one of ${choices.join(', ')}`)
  return value
}

export function limitOf(query: URLSearchParams): number {
  return integerParameter(query, 'limit', ListLimit)!
}

/** The limiter's subject for an address as the ban list gives it (an IPv6 client's /64 included, and `unknown`). */
export function addressSubjectOf(text: string): AddressSubject {
  if (text === UNKNOWN_CLIENT) return clientSubject(UNKNOWN_CLIENT)
  const [address, prefix] = text.split('/')
  const normal = normaliseAddress(address ?? '')
  if (!normal || (prefix !== undefined && !(normal.includes(':') && prefix === '64')))
    throw badRequest(`address: must be an IPv4 address, an IPv6 address (or its /64) as the ban list gives it, or ${UNKNOWN_CLIENT}`)
  return clientSubject(normal)
}

/** A page of the key list (limit, and the cursor of the page before), or undefined for every key. */
export function keyPageOf(query: URLSearchParams): { limit: number; after?: string } | undefined {
  const limit = integerParameter(query, 'limit', KeysLimit)
  const after = query.get('cursor') ?? undefined
  if (after !== undefined && (limit === undefined || !KEY_ID.test(after)))
    throw badRequest("cursor: is not a cursor this server issued; give it with the limit, as the previous page's next")
  return limit === undefined ? undefined : { limit, after }
}
