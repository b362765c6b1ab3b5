/**
 * A pet, and what a new pet must be. The rules are stated here once; the HTTP schemas
 * (modules/pets/model.ts) and both storage schemas express them, and a pet's JSON is written here, so
 * a page, a single pet and a replayed create carry the same bytes.
 */

export const PET_STATUSES = ['available', 'pending', 'sold'] as const
export type PetStatus = (typeof PET_STATUSES)[number]

/** The status of a new pet that names none. */
export const DEFAULT_STATUS: PetStatus = 'available'

/** A name is 1 to NAME_MAX characters (code points). */
export const NAME_MAX = 200

/** Characters no name may hold (C0 and C1 controls), as a pattern's class: API keys' names obey it too. */
export const CONTROL_CHARACTERS = '\\u0000-\\u001f\\u007f-\\u009f'

/**
 * A categoryId is any int64. It is a bigint from the request's digits to storage and back to the
 * answer's digits: a JS number would round values beyond ±(2^53 − 1).
 */
export const INT64_MIN = -(2n ** 63n)
export const INT64_MAX = 2n ** 63n - 1n

export interface NewPet {
  name: string
  categoryId: bigint
  status: PetStatus
}

export interface Pet extends NewPet {
  id: number
}

/** A pet's JSON, in the contract's field order; the categoryId's digits are written exactly (JSON.stringify cannot write a bigint). */
export function petJson(pet: Pet): string {
  return `{"id":${pet.id},"name":${JSON.stringify(pet.name)},"categoryId":${pet.categoryId},"status":"${pet.status}"}`
}
