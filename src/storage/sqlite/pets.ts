/** Pets and idempotency records in the data file, through statements prepared once. */
import type { Database, Statement } from 'bun:sqlite'
import { type CreatePetOutcome, createdAnswer, type IdempotencyRecord, judgeIdempotent } from '../../domain/idempotency'
import type { NewPet, Pet, PetStatus } from '../../domain/pet'
import { batchFailed, type CreatePetCommand, type PetBatch, type PetRepository } from '../../domain/repositories'
import { classified, reading, writing } from './failures'

/** A pet as read with safe integers: every INTEGER as a bigint, so a categoryId beyond 2^53 is exact. */
interface PetRow {
  id: bigint
  name: string
  categoryId: bigint
  status: PetStatus
}

function toPet(row: PetRow): Pet {
  return { id: Number(row.id), name: row.name, categoryId: row.categoryId, status: row.status }
}

const PET_COLUMNS = 'id, name, category_id AS categoryId, status'

export class SqlitePets implements PetRepository {
  private readonly listAll: Statement<PetRow, [number, number]>
  private readonly listByStatus: Statement<PetRow, [string, number, number]>
  private readonly insert: Statement<{ id: number }, [string, bigint, string, number]>
  private readonly findIdempotent: Statement<IdempotencyRecord, [string, string]>
  private readonly saveIdempotent: Statement<unknown, [string, string, string, number, string, string, number]>
  private readonly countAll: Statement<{ n: number }, []>
  private readonly bumpGeneration: Statement<unknown, []>
  private readonly readGeneration: Statement<{ value: number }, []>
  private readonly createTransaction: {
    immediate: (batch: PetBatch) => CreatePetOutcome[]
  }

  constructor(private readonly db: Database) {
    this.listAll = db.query<PetRow, [number, number]>(`SELECT ${PET_COLUMNS} FROM pets WHERE id > ? ORDER BY id LIMIT ?`).safeIntegers(true)
    this.listByStatus = db
      .query<PetRow, [string, number, number]>(`SELECT ${PET_COLUMNS} FROM pets WHERE status = ? AND id > ? ORDER BY id LIMIT ?`)
      .safeIntegers(true)
    this.insert = db.query('INSERT INTO pets (name, category_id, status, created_at) VALUES (?, ?, ?, ?) RETURNING id')
    this.findIdempotent = db.query(
      `SELECT request_hash AS requestHash, status, body, location, created_at AS createdAt
         FROM idempotency WHERE key_id = ? AND idem_key = ?`,
    )
    this.saveIdempotent = db.query(
      `INSERT OR REPLACE INTO idempotency (key_id, idem_key, request_hash, status, body, location, created_at)
       VALUES (?, ?, ?, ?, ?, ?, ?)`,
    )
    this.countAll = db.query('SELECT count(*) AS n FROM pets')
    this.bumpGeneration = db.query("UPDATE meta SET value = value + 1 WHERE name = 'pets_generation'")
    this.readGeneration = db.query("SELECT value FROM meta WHERE name = 'pets_generation'")
    this.createTransaction = db.transaction((batch: PetBatch) => batch.commands.map((command) => this.createOne(command, batch)))
  }

  list(afterId: number, limit: number, status: PetStatus | undefined): Pet[] {
    return reading(() => (status ? this.listByStatus.all(status, afterId, limit) : this.listAll.all(afterId, limit)).map(toPet))
  }

  count(): number {
    return this.countAll.get()!.n
  }

  seed(pets: NewPet[], now: number): void {
    writing(this.db, () => {
      for (const pet of pets) this.insert.get(pet.name, pet.categoryId, pet.status, now)
      this.bumpGeneration.run()
    })
  }

  reset(): number {
    return writing(this.db, () => {
      const deleted = this.db.run('DELETE FROM pets').changes
      this.db.run('DELETE FROM idempotency')
      this.bumpGeneration.run()
      return deleted
    })
  }

  generation(): number {
    return this.readGeneration.get()!.value
  }

  createMany(batch: PetBatch): CreatePetOutcome[] {
    try {
      // IMMEDIATE: a batch that starts with an idempotency lookup would otherwise begin as a reader, and
      // SQLite answers a reader that wants to write while another connection writes with SQLITE_BUSY at
      // once, skipping the busy timeout.
      return this.createTransaction.immediate(batch)
    } catch (error) {
      batchFailed(classified(error))
    }
  }

  /** The transaction holds SQLite's write lock, so the lookup and the insert are one atomic claim. */
  private createOne({ pet, idempotency }: CreatePetCommand, { now, locationPrefix }: PetBatch): CreatePetOutcome {
    if (idempotency) {
      const previous = this.findIdempotent.get(idempotency.keyId, idempotency.key)
      const settled = previous && judgeIdempotent(previous, idempotency.requestHash, now)
      if (settled) return settled
    }
    const { id } = this.insert.get(pet.name, pet.categoryId, pet.status, now)!
    const created = { id, ...pet }
    const { body, location } = createdAnswer(created, locationPrefix)
    if (idempotency) this.saveIdempotent.run(idempotency.keyId, idempotency.key, idempotency.requestHash, 201, body, location, now)
    return { kind: 'created', pet: created, body, location }
  }
}
