/**
 * Pets and idempotency records in PostgreSQL. Sequence values commit in any order, so an id could become
 * visible after a larger one, and a client paging past it would never see it: every transaction that
 * takes pet ids holds one advisory lock until it commits, so ids become visible in order across
 * instances. Group commit pays for the lock: a batch is one transaction, one insert and one flush.
 */
import type { SQL } from 'bun'
import type { Database } from './pool'
import {
  type CreatePetOutcome,
  createdAnswer,
  type IdempotencyRecord,
  judgeIdempotent,
  type StoredResponse,
} from '../../domain/idempotency'
import type { NewPet, Pet, PetStatus } from '../../domain/pet'
import { batchFailed, type CreatePetCommand, type PetBatch, type PetRepository } from '../../domain/repositories'
import { guarded, writing } from './failures'
import { LOCKS } from './migrations'
import { exactInteger } from '../shared/numbers'

interface PetRow {
  id: string
  name: string
  category_id: string
  status: PetStatus
}

/** int8 arrives as its digits: the id must be a safe integer, the categoryId is any int64. */
function toPet(row: PetRow): Pet {
  return { id: exactInteger(row.id), name: row.name, categoryId: BigInt(row.category_id), status: row.status }
}

export class PostgresPets implements PetRepository {
  constructor(private readonly sql: Database) {}

  list(afterId: number, limit: number, status: PetStatus | undefined): Promise<Pet[]> {
    const { sql } = this
    return guarded(async () => {
      const rows: PetRow[] = status
        ? await sql`SELECT id, name, category_id, status FROM pets WHERE status = ${status} AND id > ${afterId} ORDER BY id LIMIT ${limit}`
        : await sql`SELECT id, name, category_id, status FROM pets WHERE id > ${afterId} ORDER BY id LIMIT ${limit}`
      return rows.map(toPet)
    })
  }

  count(): Promise<number> {
    return guarded(async () => exactInteger(((await this.sql`SELECT count(*) AS n FROM pets`) as { n: string }[])[0]!.n))
  }

  generation(): Promise<number> {
    return guarded(async () => {
      const [row] = (await this.sql`SELECT value FROM meta WHERE name = 'pets_generation'`) as { value: string }[]
      return exactInteger(row!.value)
    })
  }

  seed(pets: NewPet[], now: number): Promise<void> {
    return writing(this.sql, async (tx) => {
      await tx`SELECT pg_advisory_xact_lock(${LOCKS.petIds})`
      const ids = await takeIds(tx, pets.length)
      await insertPets(
        tx,
        pets.map((pet, i) => ({ id: ids[i]!, ...pet })),
        now,
      )
      await tx`UPDATE meta SET value = value + 1 WHERE name = 'pets_generation'`
    })
  }

  reset(): Promise<number> {
    return writing(this.sql, async (tx) => {
      await tx`SELECT pg_advisory_xact_lock(${LOCKS.petIds})`
      const deleted = await tx`DELETE FROM pets`
      await tx`DELETE FROM idempotency`
      await tx`UPDATE meta SET value = value + 1 WHERE name = 'pets_generation'`
      return deleted.count
    })
  }

  /**
   * The batch in one transaction. Under the pet-id lock creating transactions run one at a time on every
   * instance, so looking up an Idempotency-Key and writing it is one atomic claim; commands settle in order.
   */
  createMany({ commands, now, locationPrefix }: PetBatch): Promise<CreatePetOutcome[]> {
    return writing(this.sql, async (tx) => {
      await tx`SELECT pg_advisory_xact_lock(${LOCKS.petIds})`
      const held = await heldClaims(tx, commands)
      const outcomes: (CreatePetOutcome | null)[] = []
      /** For a key claimed earlier in this batch, the index of the command that claimed it. */
      const claimedBy = new Map<string, number>()
      /** Commands that replay a pet created earlier in this batch, and the index of its create. */
      const replaysOfBatch = new Map<number, number>()
      for (const [index, { idempotency }] of commands.entries()) {
        if (!idempotency) {
          outcomes.push(null)
          continue
        }
        const claim = claimName(idempotency.keyId, idempotency.key)
        const earlier = claimedBy.get(claim)
        const previous = earlier === undefined ? held.get(claim) : pendingRecord(commands[earlier]!, now)
        const settled = previous ? judgeIdempotent(previous, idempotency.requestHash, now) : null
        if (!settled) claimedBy.set(claim, index)
        else if (earlier !== undefined && settled.kind === 'replayed') replaysOfBatch.set(index, earlier)
        outcomes.push(settled)
      }
      const creating = outcomes.flatMap((outcome, index) => (outcome ? [] : [index]))
      const ids = await takeIds(tx, creating.length)
      const answers = new Map<number, { body: string; location: string }>()
      const created = creating.map((index, i) => {
        const pet: Pet = { id: ids[i]!, ...commands[index]!.pet }
        const answer = createdAnswer(pet, locationPrefix)
        answers.set(index, answer)
        outcomes[index] = { kind: 'created', pet, ...answer }
        return pet
      })
      await insertPets(tx, created, now)
      const records = creating.flatMap((index) => {
        const { idempotency } = commands[index]!
        if (!idempotency) return []
        const { body, location } = answers.get(index)!
        return [
          {
            key_id: idempotency.keyId,
            idem_key: idempotency.key,
            request_hash: idempotency.requestHash,
            status: 201,
            body,
            location,
            created_at: now,
          },
        ]
      })
      for (let start = 0; start < records.length; start += CLAIM_ROWS)
        await tx`INSERT INTO idempotency ${tx(records.slice(start, start + CLAIM_ROWS))}
                 ON CONFLICT (key_id, idem_key) DO UPDATE SET request_hash = EXCLUDED.request_hash, status = EXCLUDED.status,
                   body = EXCLUDED.body, location = EXCLUDED.location, created_at = EXCLUDED.created_at`
      // A replay of a pet created earlier in this batch returns that pet's answer, known only now.
      for (const [index, creator] of replaysOfBatch) {
        const { response } = outcomes[index] as Extract<CreatePetOutcome, { kind: 'replayed' }>
        outcomes[index] = { kind: 'replayed', response: { ...response, ...answers.get(creator)! } }
      }
      return outcomes as CreatePetOutcome[]
    }).catch(batchFailed)
  }
}

/** Rows per INSERT statement: PostgreSQL takes at most 65,535 parameters, five per pet, seven per claim. */
const INSERT_ROWS = 10_000
const CLAIM_ROWS = 8_000

function claimName(keyId: string, key: string): string {
  return `${keyId}\n${key}`
}

/** What a key claimed earlier in the same batch holds; its answer is filled in once the pet has an id. */
function pendingRecord(command: CreatePetCommand, now: number): IdempotencyRecord {
  return { requestHash: command.idempotency!.requestHash, status: 201, body: '', location: '', createdAt: now }
}

/** The records the batch's Idempotency-Keys already hold, by claim name: one query, under the lock. */
async function heldClaims(tx: SQL, commands: CreatePetCommand[]): Promise<Map<string, IdempotencyRecord>> {
  const held = new Map<string, IdempotencyRecord>()
  const claims = commands.flatMap(({ idempotency }) => (idempotency ? [idempotency] : []))
  if (claims.length === 0) return held
  const rows = (await tx`SELECT i.key_id, i.idem_key, i.request_hash AS "requestHash", i.status, i.body, i.location,
                                i.created_at AS "createdAt"
                         FROM idempotency i
                         JOIN unnest(${claims.map((c) => c.keyId)}::text[], ${claims.map((c) => c.key)}::text[]) AS w(key_id, idem_key)
                           USING (key_id, idem_key)`) as (StoredResponse & { key_id: string; idem_key: string; createdAt: string })[]
  for (const { key_id, idem_key, ...record } of rows)
    held.set(claimName(key_id, idem_key), { ...record, createdAt: exactInteger(record.createdAt) })
  return held
}

/** `count` new ids in increasing order; call it holding the pet-id lock. */
async function takeIds(tx: SQL, count: number): Promise<number[]> {
  if (count === 0) return []
  const rows = (await tx`SELECT nextval('pets_id_seq') AS id FROM generate_series(1, ${count})`) as { id: string }[]
  return rows.map((row) => exactInteger(row.id)).sort((a, b) => a - b)
}

/** `INSERT_ROWS` pets to a statement. */
async function insertPets(tx: SQL, pets: Pet[], now: number): Promise<void> {
  for (let start = 0; start < pets.length; start += INSERT_ROWS) {
    const rows = pets
      .slice(start, start + INSERT_ROWS)
      .map((pet) => ({ id: pet.id, name: pet.name, category_id: pet.categoryId, status: pet.status, created_at: now }))
    await tx`INSERT INTO pets ${tx(rows)}`
  }
}
