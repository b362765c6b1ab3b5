/**
 * Pets and idempotency records, for both engines. Every transaction that gives out pet ids holds the
 * pet-id lock until it commits, so ids become visible in order (on PostgreSQL sequence values commit in
 * any order, and a client paging past an id would never see it); under it creating transactions run one
 * at a time, so looking up an Idempotency-Key and writing it is one atomic claim. A batch is one
 * transaction: on PostgreSQL one insert and one flush.
 */
import { type CreatePetOutcome, createdAnswer, type IdempotencyRecord, judgeIdempotent } from '../../domain/idempotency'
import type { NewPet, Pet, PetStatus } from '../../domain/pet'
import { batchFailed, type CreatePetCommand, type PetBatch, type PetRepository } from '../../domain/repositories'
import { exactInteger } from './numbers'
import type { Answer, Integer, Mode, Runner, Work, Written } from './sql'
import { changes, exactRows, failing, insertRows, lock, rows, sql, Words } from './sql'

/** An Idempotency-Key: the API key it was sent with, and the key itself. */
export interface Claim {
  keyId: string
  key: string
}

/** What each engine does its own way, many rows at once; called under the pet-id lock. */
export interface PetInserts {
  /** Inserts pets created at `now`, each with the next id; their ids, in order. */
  pets(pets: NewPet[], now: number): Work<number[]>
  /** The records the claims hold (a claim that holds none is left out), read with CLAIM_COLUMNS. */
  held(claims: Claim[]): Work<ClaimRow[]>
  /** How many records one statement saves. */
  claimsPerInsert: number
}

/** An idempotency record as both engines read it. */
export type ClaimRow = Claim & Omit<IdempotencyRecord, 'createdAt'> & { createdAt: Integer }
export const CLAIM_COLUMNS = new Words(
  'key_id AS "keyId", idem_key AS "key", request_hash AS "requestHash", status, body, location, created_at AS "createdAt"',
)

/**
 * A pet as read with every integer exact: a categoryId is any int64. An id past 2^53 (only in a hand-edited
 * file) comes back as the nearest double, which is not a safe integer: the pets service never serves or
 * keeps such an id, and the pets read beside it (a block read for one id) are still served.
 */
interface PetRow {
  id: Integer | bigint
  name: string
  category_id: Integer | bigint
  status: PetStatus
}

function toPet(row: PetRow): Pet {
  return { id: Number(row.id), name: row.name, categoryId: BigInt(row.category_id), status: row.status }
}

const PET_COLUMNS = new Words('id, name, category_id, status')
const BUMP_GENERATION = sql`UPDATE meta SET value = value + 1 WHERE name = 'pets_generation'`

export class SqlPets<M extends Mode> implements PetRepository {
  constructor(
    private readonly db: Runner<M>,
    private readonly inserts: PetInserts,
  ) {}

  list(afterId: number, limit: number, status: PetStatus | undefined): Answer<M, Pet[]> {
    return this.db.read(function* () {
      const found = yield* exactRows<PetRow>(
        status
          ? sql`SELECT ${PET_COLUMNS} FROM pets WHERE status = ${status} AND id > ${afterId} ORDER BY id LIMIT ${limit}`
          : sql`SELECT ${PET_COLUMNS} FROM pets WHERE id > ${afterId} ORDER BY id LIMIT ${limit}`,
      )
      return found.map(toPet)
    })
  }

  count(): Answer<M, number> {
    return this.db.read(function* () {
      const [row] = yield* rows<{ n: Integer }>(sql`SELECT count(*) AS n FROM pets`)
      return exactInteger(row!.n)
    })
  }

  generation(): Answer<M, number> {
    return this.db.read(function* () {
      const [row] = yield* rows<{ value: Integer }>(sql`SELECT value FROM meta WHERE name = 'pets_generation'`)
      return exactInteger(row!.value)
    })
  }

  seed(pets: NewPet[], now: number): Written<M, void> {
    const { inserts } = this
    return this.db.write(function* () {
      yield* lock({ of: 'pet-ids' })
      yield* inserts.pets(pets, now)
      yield* changes(BUMP_GENERATION)
    })
  }

  reset(): Written<M, number> {
    return this.db.write(function* () {
      yield* lock({ of: 'pet-ids' })
      const deleted = yield* changes(sql`DELETE FROM pets`)
      yield* changes(sql`DELETE FROM idempotency`)
      yield* changes(BUMP_GENERATION)
      return deleted
    })
  }

  createMany(batch: PetBatch): Written<M, CreatePetOutcome[]> {
    return failing(() => this.db.write(() => create(batch, this.inserts)), batchFailed)
  }

  purgeIdempotency(olderThan: number): Written<M, void> {
    return this.db.write(function* () {
      yield* changes(sql`DELETE FROM idempotency WHERE created_at < ${olderThan}`)
    })
  }
}

/** The batch's commands settle in order: a key claimed earlier in the batch is judged as if already saved. */
function* create({ commands, now, locationPrefix }: PetBatch, inserts: PetInserts): Work<CreatePetOutcome[]> {
  yield* lock({ of: 'pet-ids' })
  const held = yield* heldClaims(commands, inserts)
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
    const claim = claimName(idempotency)
    const earlier = claimedBy.get(claim)
    const previous = earlier === undefined ? held.get(claim) : pendingRecord(commands[earlier]!, now)
    const settled = previous ? judgeIdempotent(previous, idempotency.requestHash, now) : null
    if (!settled) claimedBy.set(claim, index)
    else if (earlier !== undefined && settled.kind === 'replayed') replaysOfBatch.set(index, earlier)
    outcomes.push(settled)
  }
  const creating = outcomes.flatMap((outcome, index) => (outcome ? [] : [index]))
  const ids = yield* inserts.pets(
    creating.map((index) => commands[index]!.pet),
    now,
  )
  const answers = new Map<number, { body: string; location: string }>()
  for (const [i, index] of creating.entries()) {
    const pet: Pet = { id: ids[i]!, ...commands[index]!.pet }
    const answer = createdAnswer(pet, locationPrefix)
    answers.set(index, answer)
    outcomes[index] = { kind: 'created', pet, ...answer }
  }
  const claims = creating.flatMap((index) => {
    const { idempotency } = commands[index]!
    const { body, location } = answers.get(index)!
    return idempotency ? [[idempotency.keyId, idempotency.key, idempotency.requestHash, 201, body, location, now]] : []
  })
  yield* saveClaims(claims, inserts.claimsPerInsert)
  // A replay of a pet created earlier in this batch returns that pet's answer, known only now.
  for (const [index, creator] of replaysOfBatch) {
    const { response } = outcomes[index] as Extract<CreatePetOutcome, { kind: 'replayed' }>
    outcomes[index] = { kind: 'replayed', response: { ...response, ...answers.get(creator)! } }
  }
  return outcomes as CreatePetOutcome[]
}

function claimName({ keyId, key }: Claim): string {
  return `${keyId}\n${key}`
}

/** What a key claimed earlier in the same batch holds; its answer is filled in once the pet has an id. */
function pendingRecord(command: CreatePetCommand, now: number): IdempotencyRecord {
  return { requestHash: command.idempotency!.requestHash, status: 201, body: '', location: '', createdAt: now }
}

/** The records the batch's Idempotency-Keys already hold, by claim name. */
function* heldClaims(commands: CreatePetCommand[], inserts: PetInserts): Work<Map<string, IdempotencyRecord>> {
  const claims = commands.flatMap(({ idempotency }) => (idempotency ? [idempotency] : []))
  const held = new Map<string, IdempotencyRecord>()
  if (claims.length === 0) return held
  for (const { keyId, key, createdAt, ...record } of yield* inserts.held(claims))
    held.set(claimName({ keyId, key }), { ...record, createdAt: exactInteger(createdAt) })
  return held
}

/** Saves each record (its columns in the order below) under its claim, replacing what the claim held. */
function* saveClaims(records: unknown[][], perInsert: number): Work<void> {
  for (let start = 0; start < records.length; start += perInsert)
    yield* changes(
      insertRows(
        'INSERT INTO idempotency (key_id, idem_key, request_hash, status, body, location, created_at)',
        records.slice(start, start + perInsert),
        `ON CONFLICT (key_id, idem_key) DO UPDATE SET request_hash = excluded.request_hash, status = excluded.status, body = excluded.body,
           location = excluded.location, created_at = excluded.created_at`,
      ),
    )
}
