/**
 * The storage seam, declared by the domain and implemented by storage/sqlite/ and storage/postgres/.
 * Members answer `T | Promise<T>` (as express-rate-limit's Store does): callers await both alike.
 * What only a file can do (read-only serving, watching, backups) is on the SQLite adapter, not here.
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
  /** Pets with id > afterId in id order, at most `limit`: ids become visible in order, so a full page never changes. */
  list(afterId: number, limit: number, status: PetStatus | undefined): MaybePromise<Pet[]>
  /**
   * Runs every command in one durable transaction, settling Idempotency-Keys by domain/idempotency.ts;
   * outcomes in command order. Rejects as PetWriter.write does.
   */
  createMany(batch: PetBatch): MaybePromise<CreatePetOutcome[]>
  count(): MaybePromise<number>
  /** Adds pets in one transaction, outside the API (sample data); a running server re-reads its pages. */
  seed(pets: NewPet[], now: number): MaybePromise<void>
  /** Deletes every pet and idempotency record; a running server forgets what it cached. */
  reset(): MaybePromise<number>
  /** Changes whenever pets were seeded or reset by another process: cached pages must be dropped. */
  generation(): MaybePromise<number>
  /** Deletes the records of Idempotency-Keys made before `olderThan`. */
  purgeIdempotency(olderThan: number): MaybePromise<void>
}

export interface KeyRepository {
  insert(record: ApiKeyRecord): MaybePromise<void>
  /** Inserts the record only when there is no key at all (the bootstrap key); false when there was one. */
  insertIfNone(record: ApiKeyRecord): MaybePromise<boolean>
  list(): MaybePromise<ApiKeyRecord[]>
  /** One key, revoked or not; null when there is none. */
  get(id: string): MaybePromise<ApiKeyRecord | null>
  /** Marks a key revoked, telling whether this call did: a key already revoked keeps its time. */
  revoke(id: string, now: number): MaybePromise<Revocation>
  /** Moves a key that is not revoked to another plan, taking a change number; false when none or revoked. */
  setPlan(id: string, plan: Plan, limits: Limits): MaybePromise<boolean>
  /** Sets a key's expiry (null: never), taking a change number; false when none or revoked. */
  setExpiry(id: string, expiresAt: number | null): MaybePromise<boolean>
  /**
   * Gives a key a new secret (its hash) at `now`: the one it had works until `previousEndsAt`, and one an
   * earlier roll kept ends at once (at most two work). Takes a change number; false when none or revoked.
   */
  roll(id: string, secretHash: string, now: number, previousEndsAt: number): MaybePromise<boolean>
  /**
   * The keys changed after change number `after`, in the order of their changes (`-1`: every key).
   * Costs what changed, not the number of keys, so a server can ask four times a second.
   */
  changesSince(after: number): MaybePromise<KeyChanges>
  /** Last uses by secret hash: the key's, and the secret's own (newest or previous). */
  recordLastUsed(lastUsed: Map<string, number>): MaybePromise<void>
  /**
   * Deletes a key's saved day bucket and asks running servers (takeLimitResets) to forget theirs; false when
   * there is no such key or it is revoked.
   */
  resetLimits(id: string, now: number): MaybePromise<boolean>
  /** The limit resets asked for since this handle's last call. */
  takeLimitResets(): MaybePromise<LimitReset[]>
}

export type Revocation = 'revoked' | 'already-revoked' | 'no-key'

/** The sign-in throttle's bounds for one attempt (domain/operators.ts says them). */
export interface SignInThrottle {
  /** The client address the attempt comes from. */
  address: string
  /** Attempts at or before this time no longer count. */
  since: number
  /** Attempts for one name from one address, after which that address is refused the name. */
  perAddress: number
  /** Attempts for one name from every address together, after which every address is refused it. */
  perName: number
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
  /**
   * The limits it was counted under: under others by the key's first request (a plan changed since), it is
   * not taken. Absent in rows saved before they were kept.
   */
  limits?: Limits
}

/** One subject's in-memory limiter state, handed to the server taking over: else every upgrade resets abusers. */
export interface HandedSubject {
  /**
   * The limits its buckets were counted under; under others (a key's plan changed while no server ran)
   * only its ban is taken over, as a running server keeps only the ban. Absent when written before they were.
   */
  limits?: Limits
  minute: SavedBucket
  /** Always for addresses; for keys when not yet saved in storage as the server stopped. */
  day?: SavedBucket
  /** When its ban ends (ms); absent when it is not banned. */
  bannedUntil?: number
  /** Times (ms) of its recent early refusals, oldest first: the count toward a ban. */
  rejections?: number[]
  /** The time its last refusal told it to wait for (ms); absent when passed and no turn waits. */
  retryAt?: number
  /** The times told and not yet claimed, earliest first (limiter/turns.ts); absent when none. */
  turns?: number[]
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

/** Per-key usage by minute and by hour (domain/usage.ts); every instance adds to the same rows. */
export interface UsageRepository {
  /** Adds each minute row to its minute, and to its hour (summed), in one transaction. */
  add(minutes: UsageRow[]): MaybePromise<void>
  /** Per key (NO_KEY included), or of one key, the sums of the buckets that start at `from` or later. */
  totals(resolution: Resolution, from: number, keyId?: string): MaybePromise<KeyTotals[]>
  /** The non-empty buckets from `from` on, oldest first: of one key, or of all summed (keyId NO_KEY). */
  series(resolution: Resolution, from: number, keyId?: string): MaybePromise<UsageRow[]>
  /** Deletes the buckets that start before `before`; how many went. */
  prune(resolution: Resolution, before: number): MaybePromise<number>
}

/** What a sign-in checks: the operator's hash, and the oldest operator's, whose setting every hash of the store shares. */
export interface PasswordHashes {
  hash: string | null
  oldest: string | null
}

/**
 * The console's operators, their credentials (sessions and tokens, by secret hash), sign-in attempts
 * and the audit log; in storage, so that removing an operator ends their sessions on every instance.
 */
export interface OperatorRepository {
  /** False when an operator of that name exists already. */
  add(name: string, passwordHash: string, now: number): MaybePromise<boolean>
  /** Adds the operator only when there is none at all (the first serve); false when there was one. */
  addIfNone(name: string, passwordHash: string, now: number): MaybePromise<boolean>
  list(): MaybePromise<OperatorRecord[]>
  /** The operator's password hash (null when there is no such operator), and the oldest operator's (null when none). */
  passwordHashes(name: string): MaybePromise<PasswordHashes>
  /** Deletes the operator and every credential of theirs; false when there was none. */
  remove(name: string): MaybePromise<boolean>
  /** Replaces the password hash and ends the operator's browser sessions (not their token); false when no such operator. */
  setPassword(name: string, passwordHash: string): MaybePromise<boolean>
  /**
   * Stores a credential (a token replaces the previous one). False when no such operator, or when
   * `checkedHash` is no longer their password hash (compared in the same transaction).
   */
  addCredential(hash: string, operator: string, kind: CredentialKind, now: number, checkedHash?: string): MaybePromise<boolean>
  /** The credential with this secret hash (read only); null when there is none. */
  credential(hash: string): MaybePromise<Credential | null>
  /** Moves the credential's last use to `now` if it is before `before`: one write per interval, however many ask. */
  touchCredential(hash: string, now: number, before: number): MaybePromise<void>
  endCredential(hash: string): MaybePromise<void>
  /**
   * Reserves a sign-in attempt before the password is checked, atomically on every instance: null when
   * reserved (a failure at `at` until released), else, with the throttle's attempts since its `since`
   * (from its address, or from all together), the time at which the oldest of them stops counting.
   */
  reserveSignIn(name: string, at: number, throttle: SignInThrottle): MaybePromise<number | null>
  /** What reserveSignIn would refuse with, read without a write (a name already throttled is answered from it). */
  signInBlocked(name: string, throttle: SignInThrottle): MaybePromise<number | null>
  /** Forgets the reservation made at `at` (the sign-in succeeded). */
  releaseSignIn(name: string, at: number): MaybePromise<void>
  /** Counts a sign-in as an unknown name in the one UNKNOWN_NAMES_ACTOR entry since `since`: one entry a day. */
  countUnknownSignIn(at: number, since: number): MaybePromise<void>
  /** Deletes sessions idle since `idleSince`, attempts before `failuresBefore`, refusals before `refusalsBefore`. */
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
  /** True when every new pet passes through this process (one server per data file): cached pages stay exact. */
  readonly soleWriter: boolean
  /** True when reads answer at once, in this process (the data file): a request that needs one need not wait. */
  readonly answersAtOnce: boolean
  pets: PetRepository
  keys: KeyRepository
  limiterState: LimiterStateRepository
  usage: UsageRepository
  operators: OperatorRepository
  /** The code when a failure says the stored data is damaged (a page of the data file), else undefined. */
  damagedCode?(error: unknown): string | undefined
  /** Throws when storage does not answer. */
  ping(): MaybePromise<void>
  close(): MaybePromise<void>
}

/** Where batches of new pets are committed: one batch at a time. */
export interface PetWriter {
  /**
   * Commits the batch in one durable transaction; outcomes in command order. Rejects with
   * StorageUnavailableError, BatchRolledBackError (nothing written), or any error (its fate unknown).
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

/** The embedded data file, watched for being replaced and (when read-only) changed under the server. */
export interface DataFileWatch {
  replaced(): boolean
  changedOnDisk(): boolean
}

/** The storage a server runs on, opened by an engine's index, with what only that kind of storage needs. */
export interface StorageBackend {
  storage: Storage
  petWriter?: PetWriter
  dataFile?: DataFileWatch
  /** The data file's own path, its links resolved at the start: its lock, a takeover's claim and the handover are beside it. */
  file?: string
  /** Looks that the server's lock on the data file is still held, taking it again if its file was deleted (data-file-lock.ts). */
  keepLock?: () => 'kept' | 'taken again' | 'lost'
  close(): Promise<void>
  /** Removes what a start that failed created. */
  undo(): void
  /** Rate-limit state the server before this one left beside the data file at its stop. */
  handedOver?: LimiterHandover
  /** Leaves the in-process limiter's state for the next server on the data file; absent elsewhere. */
  leave?(state: LimiterHandover): void
  /** The data file this backend checked whole, or took as checked (BackendOptions.checked): its device and inode. */
  checked?: string
  /**
   * How long a write may wait for storage before it fails, when longer than a stop's own floor: a stop
   * gives its last writes (usage, rate-limit state) this long after the requests end.
   */
  writePatienceMs?: number
}

/** How a server opens its storage backend. */
export interface BackendOptions {
  /** Wait up to this long for another server to release the data file (a takeover's Arrival), instead of refusing. */
  lockWaitMs?: number
  /**
   * The data file this process checked whole and held until a moment ago (StorageBackend.checked): while
   * the path still names that file it is not read whole again (a takeover's server serving again). Its schema is.
   */
  checked?: string
}

/** Storage cannot write (`down`: nor read) now: disk full, read-only file, database down. The API answers 503. */
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

/** A batch's transaction failed otherwise and was rolled back: its commands may be tried again apart. */
export class BatchRolledBackError extends Error {
  constructor(readonly reason: unknown) {
    super((reason as Error)?.message ?? String(reason))
  }
}

/** How a failed batch transaction is reported: unavailable or damaged as it is, anything else as rolled back. */
export function batchFailed(error: unknown): never {
  if (error instanceof StorageUnavailableError || error instanceof StorageDamagedError || error instanceof BatchRolledBackError) throw error
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
