/**
 * Pet Store logic, free of HTTP. Reads are served from serialised pages (pets never change once
 * created, so a pet's own JSON is kept for good); concurrent creates are committed together, one
 * durable transaction per batch, so durability does not cost one fsync each. One batch is in flight at
 * a time; creates that arrive meanwhile form the next one. Storage answers a read at once (the embedded
 * file) or with a promise (PostgreSQL); the service awaits either, in one async form.
 */
import { type CreatePetOutcome, requestHash } from '../../domain/idempotency'
import { type NewPet, type Pet, type PetStatus, petJson } from '../../domain/pet'
import {
  BatchRolledBackError,
  type CreatePetCommand,
  type MaybePromise,
  type PetBatch,
  type PetRepository,
  type PetWriter,
  StorageDamagedError,
  StorageUnavailableError,
} from '../../domain/repositories'
import { ApiError, ClientClosedError, idempotencyConflict, storageUnavailable, unavailable } from '../../http/api-errors'

export interface PetServiceOptions {
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
  /** Called when a read finds the data file damaged. */
  onDamaged: (code: string) => void
  /**
   * True when every new pet passes through this process. Only then may a last page be cached, as only
   * then does this process know when it changes; a page that has a next page never changes either way.
   */
  soleWriter: boolean
}

export interface ListQuery {
  limit: number
  status: PetStatus | undefined
  afterId: number
}

export interface Page {
  body: string
  /** Id to continue after when more pets match, else null. */
  nextAfterId: number | null
  /** The `Link: rel="next"` value, filled in by the controller on first use. */
  link?: string
}

export interface Created {
  status: 201
  body: string
  location: string
  replayed: boolean
}

interface Pending {
  command: CreatePetCommand
  resolve: (outcome: CreatePetOutcome) => void
  reject: (error: unknown) => void
  /** Aborted once the client's connection is closed. */
  clientGone: AbortSignal | undefined
}

// The caches are bounded in entries and in size (string length in UTF-16 units, one or two bytes
// each), so long names cannot make a bounded number of entries large. Past a bound the oldest entries
// go first: dropping a whole cache at once would make every client miss together.
const MAX_CACHED_PAGES = 4096
export const MAX_PAGE_UNITS = 32 * 1024 * 1024
const MAX_CACHED_PETS = 100_000
/** Ids per single-pet read: a miss reads and keeps the pets of its block (see getJson). */
const PET_BLOCK = 64
export const MAX_PET_UNITS = 16 * 1024 * 1024

export class PetService {
  private readonly pages = new Map<string, Page>()
  /** Keys of cached pages that end the listing: the only ones a new pet can change. */
  private readonly lastPages = new Set<string>()
  private readonly pets = new Map<number, string>()
  private pageUnits = 0
  private petUnits = 0
  /** Counts the drops (dropCaches), so a read that straddles one keeps nothing. */
  private generation = 0
  private queue: Pending[] = []
  /** Settles when the queue is empty and no batch is in flight; null when that is already so. */
  private committing: Promise<void> | null = null
  private writesRefused = false

  constructor(
    private readonly repo: PetRepository,
    private readonly writer: PetWriter,
    private readonly options: PetServiceOptions,
  ) {}

  /**
   * Forgets every cached page and pet: another process seeded or reset the pets. A read begun before
   * the drop may have seen the pets as they were, so what it brings back is answered but not kept.
   */
  dropCaches(): void {
    this.generation++
    this.pages.clear()
    this.lastPages.clear()
    this.pets.clear()
    this.pageUnits = 0
    this.petUnits = 0
  }

  /** How much the caches hold, in characters of JSON (each one or two bytes). */
  get cacheSizes(): { pages: number; pets: number } {
    return { pages: this.pageUnits, pets: this.petUnits }
  }

  async list(query: ListQuery): Promise<Page> {
    const cacheKey = `${query.status ?? ''}:${query.limit}:${query.afterId}`
    const cached = this.pages.get(cacheKey)
    if (cached) return cached
    const generation = this.generation
    const rows = await this.read(() => this.repo.list(query.afterId, query.limit + 1, query.status))
    return this.cachePage(cacheKey, query, rows, generation === this.generation)
  }

  private cachePage(cacheKey: string, query: ListQuery, rows: Pet[], keep: boolean): Page {
    const more = rows.length > query.limit
    if (more) rows.pop()
    const page: Page = {
      body: `[${rows.map(petJson).join(',')}]`,
      nextAfterId: more ? rows[rows.length - 1]!.id : null,
    }
    if (!keep || (!more && !this.options.soleWriter)) return page
    for (const [oldest, old] of this.pages) {
      if (this.pages.size < MAX_CACHED_PAGES && this.pageUnits + page.body.length <= MAX_PAGE_UNITS) break
      this.pages.delete(oldest)
      this.lastPages.delete(oldest)
      this.pageUnits -= old.body.length
    }
    this.pages.set(cacheKey, page)
    this.pageUnits += page.body.length
    if (page.nextAfterId === null) this.lastPages.add(cacheKey)
    return page
  }

  /**
   * The pet's JSON, or null when there is no such pet. A miss reads the pet's whole block of ids in one
   * keyset read and keeps every pet in it: random ids fill the cache PET_BLOCK times faster, for one
   * round trip each (PostgreSQL's is what a miss costs there). The first PET_BLOCK pets with an id above
   * the block's start include the asked id whenever it exists.
   */
  async getJson(id: number): Promise<string | null> {
    const cached = this.pets.get(id)
    if (cached) return cached
    if (!Number.isSafeInteger(id)) return null
    const after = id - 1 - ((id - 1) % PET_BLOCK)
    const generation = this.generation
    const rows = await this.read(() => this.repo.list(after, PET_BLOCK, undefined))
    const keep = generation === this.generation
    let json: string | null = null
    for (const pet of rows) {
      if (pet.id === id) json = petJson(pet)
      if (keep && !this.pets.has(pet.id)) this.cachePet(pet.id, pet.id === id ? json! : petJson(pet))
    }
    return json
  }

  private cachePet(id: number, json: string): void {
    for (const [oldest, old] of this.pets) {
      if (this.pets.size < MAX_CACHED_PETS && this.petUnits + json.length <= MAX_PET_UNITS) break
      this.pets.delete(oldest)
      this.petUnits -= old.length
    }
    this.pets.set(id, json)
    this.petUnits += json.length
  }

  /**
   * Creates a pet; resolves once its row is durable. With an idempotency key, a repeat of the same
   * request returns the first response and a different request under the same key is refused.
   */
  async create(pet: NewPet, idempotency?: { keyId: string; key: string }, clientGone?: AbortSignal): Promise<Created> {
    const command = { pet, idempotency: idempotency && { ...idempotency, requestHash: requestHash(pet) } }
    const outcome = await new Promise<CreatePetOutcome>((resolve, reject) => {
      this.queue.push({ command, resolve, reject, clientGone })
      this.committing ??= this.commitQueue()
    })
    if (outcome.kind === 'conflict') throw idempotencyConflict()
    if (outcome.kind === 'replayed')
      return { status: 201, body: outcome.response.body, location: outcome.response.location, replayed: true }
    return { status: 201, body: outcome.body, location: outcome.location, replayed: false }
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

  /**
   * A read whose failure is a 503 when storage cannot answer or its file is damaged (a fault of
   * storage, not a 500), whether the read answers at once or later.
   */
  private async read<T>(read: () => MaybePromise<T>): Promise<T> {
    try {
      return await read()
    } catch (error) {
      return this.readFailed(error)
    }
  }

  private readFailed(error: unknown): never {
    if (error instanceof StorageUnavailableError) throw storageUnavailable(true)
    if (!(error instanceof StorageDamagedError)) throw error
    this.options.onDamaged(error.code)
    throw unavailable('The data file is damaged; the server needs a restart on a good copy.')
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
    if (results.some((result) => !('outcome' in result) || result.outcome.kind === 'created')) this.forgetLastPages()
    const written = results.some((result) => 'outcome' in result)
    if (written) {
      const after = this.options.storageFault()
      if (after) return refuse(after)
    }
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
      if (!answers.has(error))
        answers.set(error, error instanceof StorageUnavailableError ? storageUnavailable(error.down) : toInternal(error, this.options))
      batch[i]!.reject(answers.get(error))
    }
  }

  /**
   * Writes the batch; when its transaction fails for a reason other than availability and wrote
   * nothing (a row storage refuses), the halves are written apart, in order, down to the one command
   * that fails, so one bad row never fails the others. Halves go one after the other, so ids and
   * Idempotency-Keys settle as if the batch had been one; a half that cannot be written gets its error.
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
      // Storage that stopped taking writes meanwhile refuses the rest too, without being asked again.
      const refused = first.find((result) => 'error' in result && result.error instanceof StorageUnavailableError)
      return [...first, ...(refused ? rest.map(() => refused) : await this.writeApart({ ...batch, commands: rest }))]
    }
  }

  /**
   * Ids only grow, so a new pet sorts after every stored one: a page that had a next page keeps its
   * exact content and cursor, and only last pages (which the new pet may join) must be made again.
   */
  private forgetLastPages(): void {
    for (const cacheKey of this.lastPages) {
      this.pageUnits -= this.pages.get(cacheKey)?.body.length ?? 0
      this.pages.delete(cacheKey)
    }
    this.lastPages.clear()
  }

  /** Reports the change only, so a full disk logs one line, not one per refused request. */
  private noteRefusal(refusal: StorageUnavailableError | null): void {
    if ((refusal !== null) === this.writesRefused) return
    this.writesRefused = refusal !== null
    this.options.onWritesRefused(refusal)
  }
}

function toInternal(error: unknown, options: PetServiceOptions): ApiError {
  options.onInternalError(error)
  return new ApiError(500, 'internal_error', 'The server failed to store the pet.')
}
