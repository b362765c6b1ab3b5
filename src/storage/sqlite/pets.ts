/**
 * What the data file does its own way for pets (storage/shared/pets.ts): a row per statement (bun:sqlite
 * keeps each prepared in its cache, by its text), and a new pet's id given by its insert (AUTOINCREMENT).
 */
import { CLAIM_COLUMNS, type ClaimRow, type PetInserts } from '../shared/pets'
import { rows, sql } from '../shared/sql'

export const SQLITE_INSERTS: PetInserts = {
  *pets(pets, now) {
    const ids: number[] = []
    for (const { name, categoryId, status } of pets) {
      const [row] = yield* rows<{ id: number }>(
        sql`INSERT INTO pets (name, category_id, status, created_at) VALUES (${name}, ${categoryId}, ${status}, ${now}) RETURNING id`,
      )
      ids.push(row!.id)
    }
    return ids
  },

  *held(claims) {
    const found: ClaimRow[] = []
    for (const { keyId, key } of claims)
      found.push(...(yield* rows<ClaimRow>(sql`SELECT ${CLAIM_COLUMNS} FROM idempotency WHERE key_id = ${keyId} AND idem_key = ${key}`)))
    return found
  },

  claimsPerInsert: 1,
}
