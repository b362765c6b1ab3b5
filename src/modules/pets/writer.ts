/**
 * Where batches of new pets are committed: one small interface, so the commit can move off the main
 * thread without the service noticing.
 */
import type { CreatePetCommand, CreatePetOutcome, Pet, PetRepository } from '../../storage/types'
import { petJson } from './service'

export interface PetBatch {
  commands: Omit<CreatePetCommand, 'render'>[]
  now: number
  /** `${baseUrl}/pets/`: a pet's Location is this followed by its id. */
  locationPrefix: string
}

export interface PetWriter {
  /**
   * Commits the batch in one durable transaction; outcomes in command order. One batch at a time.
   * Rejects with StorageUnavailableError when the data file refuses writes.
   */
  write(batch: PetBatch): Promise<CreatePetOutcome[]>
  /** Closes the writer's connection; call it with no batch in flight. */
  close(): Promise<void>
}

/** The one place a batch becomes storage commands, on whichever thread commits it. */
export function commitBatch(pets: PetRepository, batch: PetBatch): CreatePetOutcome[] {
  const render = (pet: Pet) => ({ body: petJson(pet), location: batch.locationPrefix + pet.id })
  return pets.createMany(
    batch.commands.map((command) => ({ ...command, render })),
    batch.now,
  )
}

export class InThreadPetWriter implements PetWriter {
  constructor(private readonly pets: PetRepository) {}

  async write(batch: PetBatch): Promise<CreatePetOutcome[]> {
    return commitBatch(this.pets, batch)
  }

  async close(): Promise<void> {}
}
