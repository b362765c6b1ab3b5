/**
 * The Idempotency-Key rule: for 24 hours the same create under a key gets its first answer's bytes again
 * and a different one is a conflict. Every backend applies it in the transaction that claims the key,
 * storing the answer rendered here, so a replay returns exactly what was sent.
 */
import { type NewPet, type Pet, petJson } from './pet'
import { DAY_MS } from './time'

/** What an Idempotency-Key may be (the OpenAPI document gives it as the header's pattern), and the rule in the words a 400 uses. */
export const IDEMPOTENCY_KEY = /^[!-~]{1,255}$/
export const IDEMPOTENCY_KEY_RULE = 'must be 1 to 255 visible ASCII characters'

/** How long an Idempotency-Key holds its first answer. */
export const IDEMPOTENCY_TTL_MS = DAY_MS

/** The answer kept under an Idempotency-Key. */
export interface StoredResponse {
  requestHash: string
  status: number
  body: string
  location: string
}

/** What an Idempotency-Key already holds: the first answer given under it, and when. */
export interface IdempotencyRecord extends StoredResponse {
  createdAt: number
}

export type CreatePetOutcome =
  | { kind: 'created'; pet: Pet; body: string; location: string }
  | { kind: 'replayed'; response: StoredResponse }
  | { kind: 'conflict' }

/** The body and Location of a created pet; `locationPrefix` is the pets collection's URL with a slash. */
export function createdAnswer(pet: Pet, locationPrefix: string): { body: string; location: string } {
  return { body: petJson(pet), location: locationPrefix + pet.id }
}

/**
 * What a create under a key that already holds `previous` gets: the first answer again for the same
 * request, a conflict for a different one, or (null) a new pet once the record has expired.
 */
export function judgeIdempotent(previous: IdempotencyRecord, requestHash: string, now: number): CreatePetOutcome | null {
  if (previous.createdAt <= now - IDEMPOTENCY_TTL_MS) return null
  if (previous.requestHash !== requestHash) return { kind: 'conflict' }
  return { kind: 'replayed', response: previous }
}

/**
 * What makes two creates "the same request": the new pet's fields, as the JSON array
 * `[name, categoryId, status]` (written by hand, as JSON.stringify cannot write a bigint; the same
 * bytes it wrote for a number, so hashes stored before categoryId became a bigint still match).
 */
export function requestHash(pet: NewPet): string {
  return new Bun.CryptoHasher('sha256')
    .update(`[${JSON.stringify(pet.name)},${pet.categoryId},${JSON.stringify(pet.status)}]`)
    .digest('hex')
}
