/**
 * The pet writer for storage that commits on the main thread (PostgreSQL, and an in-memory SQLite
 * database): a batch goes straight to the repository. A data file has its own writer, a thread
 * (storage/sqlite/writer.ts), so its fsyncs do not stop the event loop.
 */
import type { CreatePetOutcome } from '../../domain/idempotency'
import type { PetBatch, PetRepository, PetWriter } from '../../domain/repositories'

export class InThreadPetWriter implements PetWriter {
  constructor(private readonly pets: PetRepository) {}

  async write(batch: PetBatch): Promise<CreatePetOutcome[]> {
    return this.pets.createMany(batch)
  }

  async close(): Promise<void> {}
}
