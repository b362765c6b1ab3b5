/**
 * The storage seam, declared by the domain. The server talks to these interfaces only: the embedded
 * SQLite file (storage/sqlite/) and PostgreSQL for several instances (storage/postgres/) both implement
 * them and return data. Members answer `T | Promise<T>` (as express-rate-limit's Store does): SQLite at
 * once, PostgreSQL with promises; callers await both alike. Abilities only a file has (read-only
 * serving, watching the file, backups) are on the SQLite adapter, not here.
 */
import type { ApiKeyRecord, KeyChange } from './api-key'
import type { CreatePetOutcome } from './idempotency'
import type { AuditEntry, Credential, CredentialKind, OperatorRecord } from './operators'
import type { Limits, Plan } from './plans'
import type { NewPet, Pet, PetStatus } from './pet'
import type { KeyTotals, Resolution, UsageRow } from './usage'

export type MaybePromise<T> = T | Promise<T>

export interface CreatePetCommand {
  pet: NewPet
  /** Set when the request carried an Idempotency-Key: the first response is kept under it. */
  idempotency?: { keyId: string; key: string; requestHash: string }
}

export interface PetRepository {
  /**
   * Pets with id > afterId in id order, at most `limit` of them. Ids become visible in increasing
   * order, so a page that ends before the newest pet never changes (until a seed or reset).
   */
  list(afterId: number, limit: number, status: PetStatus | undefined): MaybePromise<Pet[]>
  /**
   * Runs every command in one durable transaction (group commit); outcomes in command order. A command
   * with an Idempotency-Key is settled by the domain's rule (domain/idempotency.ts) inside the
   * transaction, and a created pet's answer is kept with the claim. Rejects with
   * StorageUnavailableError when storage cannot take writes now, and with BatchRolledBackError when
   * the transaction failed for another reason (nothing of it was written).
   */
  createMany(batch: PetBatch): MaybePromise<CreatePetOutcome[]>
  count(): MaybePromise<number>
  /** Adds pets in one transaction, outside the API (sample data); a running server re-reads its pages. */
  seed(pets: NewPet[], now: number): MaybePromise<void>
  /** Deletes every pet and idempotency record; a running server forgets what it cached. */
  reset(): MaybePromise<number>
  /** Changes whenever pets were seeded or reset by another process: cached pages must be dropped. */
  generation(): MaybePromise<number>
}

export interface KeyRepository {
  insert(record: ApiKeyRecord): MaybePromise<void>
  /** Inserts the record only when there is no key at all (the bootstrap key); false when there was one. */
  insertIfNone(record: ApiKeyRecord): MaybePromise<boolean>
  list(): MaybePromise<ApiKeyRecord[]>
  /** Marks a key revoked; false when no such key exists. */
  revoke(id: string, now: number): MaybePromise<boolean>
  /**
   * Moves a key that is not revoked to another plan and its limits, taking a change number (so running
   * servers apply it at their next poll); false when there is no such key, or it is revoked.
   */
  setPlan(id: string, plan: Plan, limits: Limits): MaybePromise<boolean>
  /**
   * The keys created or revoked after change number `after` (each create and revoke takes the next
   * number, visible in order), in the order of their changes; `changesSince(-1)` is every key. Costs
   * what changed, not the number of keys, so a server can ask four times a second.
   */
  changesSince(after: number): MaybePromise<KeyChanges>
  recordLastUsed(lastUsed: Map<string, number>): MaybePromise<void>
  /**
   * Refills a key's buckets and lifts its ban: its saved day bucket is deleted, and a running server
   * is asked (through takeLimitResets) to forget what it holds. False when there is no such key.
   */
  resetLimits(id: string, now: number): MaybePromise<boolean>
  /** The limit resets asked for since this handle's last call. */
  takeLimitResets(): MaybePromise<LimitReset[]>
}

export interface LimitReset {
  keyId: string
  /** The reset's number, increasing with each reset of any key, where storage is shared (PostgreSQL); else null. */
  seq: number | null
}

export interface KeyChanges {
  records: KeyChange[]
  /** The newest change number read: ask for the changes after it next. `after` when nothing changed. */
  last: number
}

export interface SavedBucket {
  tokens: number
  updatedAt: number
}

/**
 * One subject's rate-limit state that lives only in memory, handed from a server that stops to the one
 * taking over from it (embedded mode): without it every upgrade would give abusers a fresh start.
 */
export interface HandedSubject {
  minute: SavedBucket
  /** Addresses only: keys' day buckets are saved in storage at every stop. */
  day?: SavedBucket
  /** When its ban ends (ms); absent when it is not banned. */
  bannedUntil?: number
  /** Times (ms) of its recent rejections, oldest first: the count toward a ban. */
  rejections?: number[]
}

export interface LimiterHandover {
  /** By key subject (`key:ID`). */
  keys: Map<string, HandedSubject>
  /** By address subject (`ip:ADDR`). */
  addresses: Map<string, HandedSubject>
}

export interface LimiterStateRepository {
  load(): MaybePromise<Map<string, SavedBucket>>
  save(buckets: Map<string, SavedBucket>): MaybePromise<void>
}

/**
 * Per-key usage by minute and by hour (domain/usage.ts). Writers add: every instance adds its counts
 * to the same rows, so what is read is the fleet's.
 */
export interface UsageRepository {
  /** Adds each minute row to its minute, and to its hour (summed), in one transaction. */
  add(minutes: UsageRow[]): MaybePromise<void>
  /** Per key (NO_KEY included), the sums of the buckets that start at `from` or later. */
  totals(resolution: Resolution, from: number): MaybePromise<KeyTotals[]>
  /**
   * The buckets that start at `from` or later and hold a count, oldest first: of one key, or summed
   * over every key (keyId of the rows then NO_KEY) when `keyId` is undefined.
   */
  series(resolution: Resolution, from: number, keyId?: string): MaybePromise<UsageRow[]>
  /** Deletes the buckets that start before `before`; how many went. */
  prune(resolution: Resolution, before: number): MaybePromise<number>
}

/**
 * The console's operators, their credentials (browser sessions and script tokens, by secret hash), the
 * sign-in attempts that throttle a name, and the audit log. In storage, so that every instance sharing it
 * sees the same sessions: removing an operator or resetting a password ends them everywhere.
 */
export interface OperatorRepository {
  /** False when an operator of that name exists already. */
  add(name: string, passwordHash: string, now: number): MaybePromise<boolean>
  /** Adds the operator only when there is none at all (the first serve); false when there was one. */
  addIfNone(name: string, passwordHash: string, now: number): MaybePromise<boolean>
  list(): MaybePromise<OperatorRecord[]>
  /** The stored password hash, or null when there is no such operator. */
  passwordHash(name: string): MaybePromise<string | null>
  /** Deletes the operator and every credential of theirs; false when there was none. */
  remove(name: string): MaybePromise<boolean>
  /** Replaces the password hash and ends the operator's browser sessions (not their token); false when no such operator. */
  setPassword(name: string, passwordHash: string): MaybePromise<boolean>
  /**
   * Stores a credential; a token replaces the operator's previous token. False when no such operator,
   * or when `checkedHash` is given and is no longer the operator's password hash (a reset came first):
   * compared in the transaction that stores it.
   */
  addCredential(hash: string, operator: string, kind: CredentialKind, now: number, checkedHash?: string): MaybePromise<boolean>
  /** The credential with this secret hash (read only); null when there is none. */
  credential(hash: string): MaybePromise<Credential | null>
  /** Moves the credential's last use to `now` if it is before `before`: one write per interval, however many ask. */
  touchCredential(hash: string, now: number, before: number): MaybePromise<void>
  endCredential(hash: string): MaybePromise<void>
  /**
   * Reserves a sign-in attempt for the name before its password is checked, atomically with the count
   * (every handle, every instance): null when reserved (the attempt counts as a failure at `at` until
   * released), or, when `limit` attempts after `since` are counted already, the time of the one whose
   * leaving the window frees a place.
   */
  reserveSignIn(name: string, at: number, since: number, limit: number): MaybePromise<number | null>
  /** Forgets the reservation made at `at` (the sign-in succeeded). */
  releaseSignIn(name: string, at: number): MaybePromise<void>
  /**
   * Counts a refused sign-in for a name that is no operator in the one audit entry of UNKNOWN_NAMES_ACTOR
   * since `since` (its target the count), which becomes the newest entry: a flood of made-up names adds
   * one entry a day.
   */
  countUnknownSignIn(at: number, since: number): MaybePromise<void>
  /**
   * Background pruning: sessions last used before `idleSince`, sign-in attempts before `failuresBefore`,
   * refused sign-ins in the audit log before `refusalsBefore`.
   */
  prune(idleSince: number, failuresBefore: number, refusalsBefore: number): MaybePromise<void>
  audit(entry: AuditEntry): MaybePromise<void>
  /** The newest `limit` entries, newest first. */
  auditLog(limit: number): MaybePromise<AuditEntry[]>
}

export interface Storage {
  /** Where the data is, for log lines: a file path, or a database URL without its password. */
  readonly location: string
  /** False when every write would fail (a read-only data file): writes are then not even tried. */
  readonly writable: boolean
  /**
   * True when this process is the only one that creates pets (one server per data file): cached last
   * pages of the listing stay exact, since every new pet passes through this process.
   */
  readonly soleWriter: boolean
  pets: PetRepository
  keys: KeyRepository
  limiterState: LimiterStateRepository
  usage: UsageRepository
  operators: OperatorRepository
  /** Throws when storage does not answer. */
  ping(): MaybePromise<void>
  purgeIdempotency(olderThan: number): MaybePromise<void>
  close(): MaybePromise<void>
}

/** Where batches of new pets are committed: one batch at a time. */
export interface PetWriter {
  /**
   * Commits the batch in one durable transaction; outcomes in command order. Rejects with
   * StorageUnavailableError when storage refuses writes, with BatchRolledBackError when the
   * transaction failed and wrote nothing, and otherwise (the batch's fate unknown) with any error.
   */
  write(batch: PetBatch): Promise<CreatePetOutcome[]>
  /** Closes the writer's connection; call it with no batch in flight. */
  close(): Promise<void>
}

export interface PetBatch {
  commands: CreatePetCommand[]
  now: number
  /** `${baseUrl}/pets/`: a pet's Location is this followed by its id. */
  locationPrefix: string
}

/**
 * Storage cannot write, or does not answer (disk full, read-only file, database down): the API answers
 * 503 and keeps serving what it can. `down` tells the two apart, so that no answer says reads work
 * while they fail too.
 */
export class StorageUnavailableError extends Error {
  constructor(
    readonly code: string,
    message = `the data file cannot be written now (${code})`,
    /** Storage does not answer at all (its connection, its server): reads fail as well as writes. */
    readonly down = false,
  ) {
    super(message)
  }
}

/**
 * A batch's transaction failed for a reason other than availability (a row storage refused, a bug)
 * and was rolled back: nothing of it was written, so its commands may be tried again apart.
 */
export class BatchRolledBackError extends Error {
  constructor(readonly reason: unknown) {
    super((reason as Error)?.message ?? String(reason))
  }
}

/** How a failed batch transaction is reported: unavailable as it is, anything else as rolled back. */
export function batchFailed(error: unknown): never {
  if (error instanceof StorageUnavailableError || error instanceof BatchRolledBackError) throw error
  throw new BatchRolledBackError(error)
}

/** Reading the data file failed because it is damaged: reads of it cannot be trusted any more. */
export class StorageDamagedError extends Error {
  constructor(readonly code: string) {
    super(`the data file is damaged (${code})`)
  }
}

/** The data file cannot be used at all: not ours, damaged, or from a newer version. */
export class StorageOpenError extends Error {}
