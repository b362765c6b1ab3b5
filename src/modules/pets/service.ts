/**
 * Pet Store logic, free of HTTP. Reads are served from serialised pages (pets never change once
 * created, so a pet's own JSON is kept for good); creates go through the group commit
 * (group-commit.ts). Storage answers a read at once (the embedded file) or with a promise
 * (PostgreSQL); the service's reads answer the same way (a value, or a promise), so a request that
 * need not wait is not made to (domain/at-once.ts).
 */
import { requestHash } from '../../domain/idempotency'
import { type NewPet, type Pet, type PetStatus, petJson } from '../../domain/pet'
import { type MaybePromise, type PetRepository, type PetWriter, StorageUnavailableError } from '../../domain/repositories'
import { idempotencyConflict, storageUnavailable } from '../../http/api-errors'
import { GroupCommit, type GroupCommitOptions } from './group-commit'

export interface PetServiceOptions extends GroupCommitOptions {
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

// The caches are bounded in entries and in size (string length in UTF-16 units, one or two bytes
// each), so long names cannot make a bounded number of entries large. Past a bound the oldest entries
// go first: dropping a whole cache at once would make every client miss together.
const MAX_CACHED_PAGES = 4096
export const MAX_PAGE_UNITS = 32 * 1024 * 1024
const MAX_CACHED_PETS = 100_000
/** Ids per single-pet read: a miss reads and keeps the pets of its block (see getJson). */
const PET_BLOCK = 64
export const MAX_PET_UNITS = 16 * 1024 * 1024

/** A failed read thrown on: see PetService.read. */
function unavailable(error: unknown): never {
  throw error instanceof StorageUnavailableError ? storageUnavailable(true) : error
}

export class PetService {
  private readonly pages = new Map<string, Page>()
  /** Keys of cached pages that end the listing: the only ones a new pet can change. */
  private readonly lastPages = new Set<string>()
  private readonly pets = new Map<number, string>()
  private pageUnits = 0
  private petUnits = 0
  /** Counts the drops (dropCaches), so a read that straddles one keeps nothing. */
  private generation = 0

  private readonly commits: GroupCommit

  constructor(
    private readonly repo: PetRepository,
    writer: PetWriter,
    private readonly options: PetServiceOptions,
  ) {
    this.commits = new GroupCommit(writer, options, () => this.forgetLastPages())
  }

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

  /** A page: at once when cached or read from storage that answers at once (the data file), else a promise. */
  list(query: ListQuery): MaybePromise<Page> {
    const cacheKey = `${query.status ?? ''}:${query.limit}:${query.afterId}`
    const cached = this.pages.get(cacheKey)
    if (cached) return cached
    const generation = this.generation
    const rows = this.read(() => this.repo.list(query.afterId, query.limit + 1, query.status))
    const page = (read: Pet[]) => this.cachePage(cacheKey, query, read, generation === this.generation)
    return rows instanceof Promise ? rows.then(page) : page(rows)
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
   * the block's start include the asked id whenever it exists. At once when cached or read from storage
   * that answers at once, else a promise.
   */
  getJson(id: number): MaybePromise<string | null> {
    // Past 2^53 a number stands for several ids: none is looked up or kept (a row there would be rounded).
    if (!Number.isSafeInteger(id)) return null
    const cached = this.pets.get(id)
    if (cached) return cached
    const after = id - 1 - ((id - 1) % PET_BLOCK)
    const generation = this.generation
    const rows = this.read(() => this.repo.list(after, PET_BLOCK, undefined))
    const json = (read: Pet[]) => this.keepBlock(id, read, generation === this.generation)
    return rows instanceof Promise ? rows.then(json) : json(rows)
  }

  /** The JSON of pet `id` among a block read, or null; every pet of the block kept when `keep`. */
  private keepBlock(id: number, rows: Pet[], keep: boolean): string | null {
    let json: string | null = null
    for (const pet of rows) {
      if (pet.id === id) json = petJson(pet)
      if (keep && Number.isSafeInteger(pet.id) && !this.pets.has(pet.id)) this.cachePet(pet.id, pet.id === id ? json! : petJson(pet))
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
    const outcome = await this.commits.create(command, clientGone)
    if (outcome.kind === 'conflict') throw idempotencyConflict()
    const { body, location } = outcome.kind === 'replayed' ? outcome.response : outcome
    return { status: 201, body, location, replayed: outcome.kind === 'replayed' }
  }

  /** Waits for the creates already taken to be committed and answered, then closes the writer. */
  close(): Promise<void> {
    return this.commits.close()
  }

  /**
   * A read whose failure is a 503 when storage cannot answer (a fault of storage, not a 500), whether the
   * read answers at once or later. A damaged file is the error handler's, as for any request.
   */
  private read<T>(read: () => MaybePromise<T>): MaybePromise<T> {
    try {
      const value = read()
      return value instanceof Promise ? value.catch(unavailable) : value
    } catch (error) {
      return unavailable(error)
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
}
