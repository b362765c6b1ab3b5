/**
 * What PostgreSQL does its own way for pets (storage/shared/pets.ts): many rows per statement, so a
 * batch takes a few round trips, and ids taken from the sequence before the insert.
 */
import { exactInteger } from '../shared/numbers'
import { CLAIM_COLUMNS, type ClaimRow, type PetInserts } from '../shared/pets'
import { changes, insertRows, rows, sql } from '../shared/sql'

/** Rows per INSERT statement: PostgreSQL takes at most 65,535 parameters, five per pet. */
const INSERT_ROWS = 10_000

export const POSTGRES_INSERTS: PetInserts = {
  *pets(pets, now) {
    if (pets.length === 0) return []
    const taken = yield* rows<{ id: string }>(sql`SELECT nextval('pets_id_seq') AS id FROM generate_series(1, ${pets.length})`)
    const ids = taken.map((row) => exactInteger(row.id)).sort((a, b) => a - b)
    for (let start = 0; start < pets.length; start += INSERT_ROWS) {
      const values = pets.slice(start, start + INSERT_ROWS).map((pet, i) => [ids[start + i], pet.name, pet.categoryId, pet.status, now])
      yield* changes(insertRows('INSERT INTO pets (id, name, category_id, status, created_at)', values))
    }
    return ids
  },

  /** One query for the whole batch. */
  held: (claims) =>
    rows<ClaimRow>(sql`SELECT ${CLAIM_COLUMNS} FROM idempotency
                       JOIN unnest(${claims.map((c) => c.keyId)}::text[], ${claims.map((c) => c.key)}::text[]) AS w(key_id, idem_key)
                         USING (key_id, idem_key)`),

  /** Seven parameters each. */
  claimsPerInsert: 8_000,
}
