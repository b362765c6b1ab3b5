/**
 * The storage seam. The server talks to these interfaces only, so another backend (PostgreSQL for
 * several instances) can replace SQLite without touching the modules.
 */

export const PET_STATUSES = ['available', 'pending', 'sold'] as const
export type PetStatus = (typeof PET_STATUSES)[number]

export interface NewPet {
  name: string
  categoryId: number
  status: PetStatus
}

export interface Pet extends NewPet {
  id: number
}

export type Plan = 'free' | 'pro' | 'business' | 'enterprise'

export interface ApiKeyRecord {
  id: string
  name: string
  plan: Plan
  rpm: number
  rpd: number
  secretHash: string
  createdAt: number
  lastUsedAt: number | null
  revokedAt: number | null
}

export interface StoredResponse {
  requestHash: string
  status: number
  body: string
  location: string
}

export interface CreatePetCommand {
  pet: NewPet
  /** Set when the request carried an Idempotency-Key: the first response is kept under it. */
  idempotency?: { keyId: string; key: string; requestHash: string }
}

/** Builds a created pet's body and Location once its id is known, so a replay returns the same bytes. */
export type RenderPet = (pet: Pet) => { body: string; location: string }

export type CreatePetOutcome =
  | { kind: 'created'; pet: Pet; body: string; location: string }
  | { kind: 'replayed'; response: StoredResponse }
  | { kind: 'conflict' }

export interface PetRepository {
  /** Pets with id > afterId in id order, at most `limit` of them. */
  list(afterId: number, limit: number, status: PetStatus | undefined): Pet[]
  get(id: number): Pet | null
  /** Runs every command in one durable transaction (group commit); outcomes in command order. */
  createMany(commands: CreatePetCommand[], now: number, render: RenderPet): CreatePetOutcome[]
  count(): number
  /** Adds pets in one transaction, outside the API (sample data); a running server re-reads its pages. */
  seed(pets: NewPet[], now: number): void
  /** Deletes every pet and idempotency record; a running server forgets what it cached. */
  reset(): number
  /** Changes whenever pets were seeded or reset by another process: cached pages must be dropped. */
  generation(): number
}

export interface KeyRepository {
  insert(record: ApiKeyRecord): void
  list(): ApiKeyRecord[]
  /** Marks a key revoked; false when no such key exists. */
  revoke(id: string, now: number): boolean
  /** Differs whenever a key has been created or revoked since: far cheaper than listing every key. */
  changeMark(): string
  recordLastUsed(lastUsed: Map<string, number>): void
  /**
   * Refills a key's buckets and lifts its ban: its saved day bucket is deleted, and a running server
   * is asked (through takeLimitResets) to forget what it holds. False when there is no such key.
   */
  resetLimits(id: string, now: number): boolean
  /** The key ids whose limits were reset since the last call. */
  takeLimitResets(): string[]
}

export interface SavedBucket {
  tokens: number
  updatedAt: number
}

export interface LimiterStateRepository {
  load(): Map<string, SavedBucket>
  save(buckets: Map<string, SavedBucket>): void
}

export interface Storage {
  /** Opened from a file this process cannot write: reads work, every write fails as unavailable. */
  readOnly: boolean
  /** The data file, which a second connection may open; null for a private in-memory database. */
  file: string | null
  pets: PetRepository
  keys: KeyRepository
  limiterState: LimiterStateRepository
  /**
   * True once a file opened as immutable (read-only, no write-ahead log) has changed on disk: what the
   * open serves may then be stale, and only a fresh open reads it right.
   */
  changedOnDisk(): boolean
  /**
   * True once the path no longer names the file this storage opened (deleted, or replaced by another
   * file): whatever is written from then on goes to a file nobody will open again.
   */
  replaced(): boolean
  /** Throws when the data file does not answer. */
  ping(): void
  purgeIdempotency(olderThan: number): void
  backup(file: string): void
  close(): void
}

/** Storage cannot write (disk full, read-only file): the API answers 503 and keeps serving reads. */
export class StorageUnavailableError extends Error {
  constructor(readonly code: string) {
    super(`the data file cannot be written now (${code})`)
  }
}

/** Reading the data file failed because it is damaged: reads of it cannot be trusted any more. */
export class StorageDamagedError extends Error {
  constructor(readonly code: string) {
    super(`the data file is damaged (${code})`)
  }
}

/** The data file cannot be used at all: not ours, damaged, or from a newer version. */
export class StorageOpenError extends Error {}
