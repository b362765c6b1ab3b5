/**
 * How a batch of creates becomes storage commands, and the domain's rules for it: a pet's answer is
 * rendered once its id is known, and an Idempotency-Key settles to a replay or a conflict for 24 hours.
 * Every backend applies these same rules inside its own transaction, on whichever thread commits.
 */
import type { CreatePetOutcome, CreateRules, IdempotencyRecord, Pet, PetBatch, PetRepository, PetWriter } from '../../storage/types'
import { petJson } from './service'

/** How long an Idempotency-Key holds its first answer. */
export const IDEMPOTENCY_TTL_MS = 24 * 60 * 60 * 1000

/**
 * What a create under a key that already holds `previous` gets: the first answer again for the same
 * request, a conflict for a different one, or (null) a new pet once the record has expired.
 */
export function judgeIdempotent(previous: IdempotencyRecord, requestHash: string, now: number): CreatePetOutcome | null {
  if (previous.createdAt <= now - IDEMPOTENCY_TTL_MS) return null
  if (previous.requestHash !== requestHash) return { kind: 'conflict' }
  return { kind: 'replayed', response: previous }
}

export function batchRules(batch: PetBatch): CreateRules {
  return {
    render: (pet: Pet) => ({ body: petJson(pet), location: batch.locationPrefix + pet.id }),
    judge: (previous, requestHash) => judgeIdempotent(previous, requestHash, batch.now),
  }
}

/** Commits on this thread, through the repository: PostgreSQL, and an in-memory SQLite database. */
export class InThreadPetWriter implements PetWriter {
  constructor(private readonly pets: PetRepository) {}

  async write(batch: PetBatch): Promise<CreatePetOutcome[]> {
    return this.pets.createMany(batch.commands, batch.now, batchRules(batch))
  }

  async close(): Promise<void> {}
}
