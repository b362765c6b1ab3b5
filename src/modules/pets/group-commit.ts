/**
 * Concurrent creates committed together, one durable transaction per batch, so durability does not
 * cost one fsync each. One batch is in flight at a time; creates that arrive meanwhile form the next.
 */
import type { CreatePetOutcome } from '../../domain/idempotency'
import {
  BatchRolledBackError,
  type CreatePetCommand,
  type PetBatch,
  type PetWriter,
  StorageDamagedError,
  StorageUnavailableError,
} from '../../domain/repositories'
import { ApiError, ClientClosedError, DATA_DAMAGED, storageUnavailable, unavailable } from '../../http/api-errors'

export interface GroupCommitOptions {
  now: () => number
  /** Absolute URL of the pets collection with a trailing slash; a pet's Location adds its id. */
  locationPrefix: string
  onInternalError: (error: unknown) => void
  /** Called when storage starts refusing writes (with why) and when it accepts them again (null). */
  onWritesRefused: (refusal: StorageUnavailableError | null) => void
  /**
   * Why storage may no longer be trusted (its file replaced or found damaged), or null. Asked before and
   * after each batch, so no create is acknowledged into a file nobody will open again.
   */
  storageFault: () => string | null
  /** Called when a write finds the data file damaged (then a fault: later creates are refused). */
  onDamaged: (code: string) => void
}

interface Pending {
  command: CreatePetCommand
  resolve: (outcome: CreatePetOutcome) => void
  reject: (error: unknown) => void
  /** Aborted once the client's connection is closed. */
  clientGone: AbortSignal | undefined
}

export class GroupCommit {
  private queue: Pending[] = []
  /** Settles when the queue is empty and no batch is in flight; null when that is already so. */
  private committing: Promise<void> | null = null
  private writesRefused = false

  constructor(
    private readonly writer: PetWriter,
    private readonly options: GroupCommitOptions,
    /** Called after a batch that may have added pets (one that failed may still have been committed). */
    private readonly onMayHaveAdded: () => void,
  ) {}

  /** Resolves once the command's row is durable (or with the earlier answer its Idempotency-Key names). */
  create(command: CreatePetCommand, clientGone?: AbortSignal): Promise<CreatePetOutcome> {
    return new Promise<CreatePetOutcome>((resolve, reject) => {
      this.queue.push({ command, resolve, reject, clientGone })
      this.committing ??= this.commitQueue()
    })
  }

  /** Waits for the creates already taken to be committed and answered, then closes the writer. */
  async close(): Promise<void> {
    await this.committing
    await this.writer.close()
  }

  private async commitQueue(): Promise<void> {
    // One turn of the event loop lets the creates that arrive together form the first batch.
    await new Promise<void>((resolve) => setImmediate(resolve))
    while (this.queue.length > 0) {
      // A create whose client has gone by now is not carried out: nobody could be told it was.
      const batch = this.queue.filter((pending) => {
        if (!pending.clientGone?.aborted) return true
        pending.reject(new ClientClosedError())
        return false
      })
      this.queue = []
      if (batch.length > 0) await this.commit(batch)
    }
    this.committing = null
  }

  private async commit(batch: Pending[]): Promise<void> {
    const refuse = (fault: string) => {
      for (const pending of batch) pending.reject(unavailable(`Creates are refused: ${fault}.`))
    }
    const before = this.options.storageFault()
    if (before) return refuse(before)
    const results = await this.writeApart({
      commands: batch.map((pending) => pending.command),
      now: this.options.now(),
      locationPrefix: this.options.locationPrefix,
    })
    // A batch that failed may still have been committed (a commit thread that stopped before it could
    // answer), so the pages it could have changed are made again, as after a create.
    if (results.some((result) => !('outcome' in result) || result.outcome.kind === 'created')) this.onMayHaveAdded()
    const written = results.some((result) => 'outcome' in result)
    const after = written ? this.options.storageFault() : null
    if (after) return refuse(after)
    const refusal = results.find(
      (result): result is { error: StorageUnavailableError } => 'error' in result && result.error instanceof StorageUnavailableError,
    )
    if (refusal) this.noteRefusal(refusal.error)
    else if (written) this.noteRefusal(null)
    /** One answer per error, so a batch that failed as a whole is logged once. */
    const answers = new Map<unknown, ApiError>()
    for (const [i, result] of results.entries()) {
      if ('outcome' in result) {
        batch[i]!.resolve(result.outcome)
        continue
      }
      const { error } = result
      if (!answers.has(error)) answers.set(error, this.answerFor(error))
      batch[i]!.reject(answers.get(error))
    }
  }

  /**
   * Writes the batch; when its transaction was rolled back (a row storage refuses), the halves are written
   * apart, in order, down to the command that fails, so one bad row never fails the others.
   */
  private async writeApart(batch: PetBatch): Promise<({ outcome: CreatePetOutcome } | { error: unknown })[]> {
    try {
      return (await this.writer.write(batch)).map((outcome) => ({ outcome }))
    } catch (error) {
      if (!(error instanceof BatchRolledBackError) || batch.commands.length === 1)
        return batch.commands.map(() => ({ error: error instanceof BatchRolledBackError ? error.reason : error }))
      const half = Math.ceil(batch.commands.length / 2)
      const first = await this.writeApart({ ...batch, commands: batch.commands.slice(0, half) })
      const rest = batch.commands.slice(half)
      // Storage that stopped taking writes meanwhile, or was found damaged, refuses the rest too, without being asked again.
      const refused = first.find(
        (result) => 'error' in result && (result.error instanceof StorageUnavailableError || result.error instanceof StorageDamagedError),
      )
      return [...first, ...(refused ? rest.map(() => refused) : await this.writeApart({ ...batch, commands: rest }))]
    }
  }

  /** The answer to a create whose write failed: 503 when storage cannot be written or is damaged, else 500. */
  private answerFor(error: unknown): ApiError {
    if (error instanceof StorageUnavailableError) return storageUnavailable(error.down)
    if (error instanceof StorageDamagedError) {
      this.options.onDamaged(error.code)
      return DATA_DAMAGED
    }
    this.options.onInternalError(error)
    return new ApiError(500, 'internal_error', 'The server failed to store the pet.')
  }

  /** Reports the change only, so a full disk logs one line, not one per refused request. */
  private noteRefusal(refusal: StorageUnavailableError | null): void {
    if ((refusal !== null) === this.writesRefused) return
    this.writesRefused = refusal !== null
    this.options.onWritesRefused(refusal)
  }
}
