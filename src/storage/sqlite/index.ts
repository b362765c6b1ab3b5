/**
 * SQLite storage through bun:sqlite: one file per environment, opened once, statements prepared once.
 * Every member answers at once, with no promise.
 */
import { Database } from 'bun:sqlite'
import {
  accessSync,
  chmodSync,
  constants as fs,
  existsSync,
  linkSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readlinkSync,
  rmSync,
  statSync,
} from 'node:fs'
import { basename, dirname, join, resolve } from 'node:path'
import { type BackendOptions, type LimiterHandover, type Storage, type StorageBackend, StorageOpenError } from '../../domain/repositories'
import { keySubject } from '../../domain/subject'
import { isAlive, passwdName } from '../../os/process'
import { SqlKeys } from '../shared/keys'
import { TakenByTheServer } from '../shared/limit-resets'
import { SqlLimiterState } from '../shared/limiter-state'
import { openFailure, opening } from '../shared/open-errors'
import { SqlOperators } from '../shared/operators'
import { SqlPets } from '../shared/pets'
import type { Runner } from '../shared/sql'
import { SqlUsage } from '../shared/usage'
import { dataFilePath, lockDataFile, lockDataFileWhenFree, lockFileOf } from './data-file-lock'
import { classified, damagedCode } from './failures'
import { liveClaimant, takeHandover, writeHandover } from './handover'
import {
  checkHeader,
  damagedFile,
  diskFingerprint,
  identityOf,
  isWritable,
  oddFileReason,
  openReadOnly,
  type OpenOptions,
  prepare,
  readOnlyBecause,
  removeIfPossible,
  SERVING_BUSY_MS,
} from './open'
import { SQLITE_INSERTS } from './pets'
import { ServingSqliteRunner, SqliteRunner } from './runner'
import { refuseInterruptedRestore } from './restore'
import { WorkerPetWriter } from './writer'

// The engine's door: nothing outside storage/ imports the files behind it.
export type { OpenOptions } from './open'
export { COMMAND_BUSY_MS, damagedFile } from './open'
export { restoreDataFile } from './restore'
/** What `serve --takeover` needs of the data file besides opening it: who serves it, and the claim. */
export { claimTakeover, liveClaimant, takeoverProgress, takeoverTarget } from './handover'
export { dataFilePath } from './data-file-lock'

/**
 * The data file as a command uses it, its writes waiting for the lock as its busy timeout says; with
 * `serving`, as a server does, its writes never blocking the event loop for it (runner.ts).
 */
export function openSqliteStorage(file: string, options?: OpenOptions & { mustWrite?: boolean }): SqliteStorage<'sync'>
export function openSqliteStorage(file: string, options: OpenOptions & { serving: true }): SqliteStorage<'serving'>
export function openSqliteStorage(
  file: string,
  options: OpenOptions & { mustWrite?: boolean; serving?: true } = {},
): SqliteStorage<'sync' | 'serving'> {
  const inMemory = file === ':memory:'
  if (!inMemory) {
    refuseDenied(file, { create: !options.mustExist, write: options.mustWrite === true })
    refuseInterruptedRestore(file)
    if (options.mustExist && !existsSync(file))
      throw new StorageOpenError(
        `no data file at ${file}; start the server once to create it, or name an existing one with --data (staging uses its own: --env staging)`,
      )
    prepareDataFolder(file)
    opening(`cannot use ${file} as the data file`, () => checkHeader(file))
  }
  const readOnly = !inMemory && existsSync(file) && !isWritable(file)
  const { db, immutable } = opening(`cannot open ${file}`, () =>
    readOnly ? openReadOnly(file) : { db: new Database(file, { create: true, strict: true }), immutable: false },
  )
  try {
    prepare(db, file, { ...options, readOnly })
  } catch (error) {
    db.close()
    throw openFailure(error, `${file} cannot be used`)
  }
  if (!inMemory && !readOnly) for (const path of [file, `${file}-wal`, `${file}-shm`]) if (existsSync(path)) chmodSync(path, 0o600)
  const runner = options.serving ? new ServingSqliteRunner(db) : new SqliteRunner(db)
  return new SqliteStorage(db, runner, readOnly, inMemory ? null : file, immutable)
}

/**
 * Makes the data file's folder (owner-only) when it is missing, and nothing else: the server takes the
 * lock beside the file (data-file-lock.ts) after this and before it opens the file.
 */
export function prepareDataFolder(file: string): void {
  refuseDenied(file, { create: true, write: false })
  // Owner-only: the file holds key hashes, and the lock, WAL and SHM files inherit this mask.
  process.umask(0o077)
  opening(`cannot use ${file} as the data file`, () => {
    const odd = oddFileReason(file)
    if (odd) throw new Error(odd)
    mkdirSync(dirname(file), { recursive: true, mode: 0o700 })
  })
}

/**
 * Refuses a data file the permissions keep from this process, naming its user: an unreadable file never
 * passes for a missing one. With `create`, a missing file must be creatable; with `write`, the file and
 * its folder (for -wal and -shm) must be writable; without, a read-only file passes (served read-only).
 */
function refuseDenied(given: string, { create, write }: { create: boolean; write: boolean }): void {
  const file = resolve(given)
  const denied = (what: string) =>
    new StorageOpenError(
      `permission denied: ${what}; petstore runs as ${userNamed(process.getuid?.())}: give that user access, or run petstore as the data's owner`,
    )
  let stat: ReturnType<typeof statSync>
  try {
    stat = statSync(file, { throwIfNoEntry: false })
  } catch (error) {
    if ((error as { code?: string }).code === 'EACCES') throw denied(`${file} cannot be reached: a folder on its path cannot be entered`)
    // Anything else (a file where a folder should be) is for the open that follows to report.
    return
  }
  // Only permissions: a read-only mount (EROFS) is no one's permission, and fails later as it always did.
  const refused = (path: string, mode: number) => {
    try {
      accessSync(path, mode)
      return false
    } catch (error) {
      return ['EACCES', 'EPERM'].includes((error as { code?: string }).code ?? '')
    }
  }
  if (stat === undefined) {
    if (!create) return
    let folder = dirname(file)
    while (!existsSync(folder) && dirname(folder) !== folder) folder = dirname(folder)
    if (refused(folder, fs.W_OK | fs.X_OK)) throw denied(`${file} does not exist, and ${folder} cannot be written to create it`)
    return
  }
  if (stat.isDirectory()) return
  const owner = `owner ${userNamed(stat.uid)}, mode ${(stat.mode & 0o777).toString(8).padStart(4, '0')}`
  if (refused(file, fs.R_OK)) throw denied(`${file} exists but cannot be read (${owner})`)
  if (!write) return
  if (refused(file, fs.W_OK)) throw denied(`${file} can be read but not written (${owner})`)
  if (refused(dirname(file), fs.W_OK | fs.X_OK))
    throw denied(`${dirname(file)} cannot be written, and SQLite writes its -wal and -shm files beside ${basename(file)}`)
}

function userNamed(uid: number | undefined): string {
  // Windows has no uids: the account is the one that started petstore.
  if (uid === undefined) return 'this account'
  const name = passwdName(uid)
  return name ? `user ${name} (uid ${uid})` : `uid ${uid}`
}

/**
 * A second connection to a checked and migrated data file, for committing pets on another thread (busy
 * timeout and synchronous set again); failing to open is reported like a failed commit.
 */
export function openPetCommitter(file: string): { pets: SqlPets<'sync'>; close(): void } {
  let db: Database | undefined
  try {
    db = new Database(file, { readwrite: true, strict: true })
    db.run(`PRAGMA busy_timeout = ${SERVING_BUSY_MS}`)
    db.run('PRAGMA synchronous = FULL')
    const pets = new SqlPets<'sync'>(new SqliteRunner(db), SQLITE_INSERTS)
    return { pets, close: () => db!.close() }
  } catch (error) {
    db?.close()
    throw classified(error)
  }
}

/** A copy untouched this long, by a process that is gone, was abandoned (a backup killed while writing it). */
const ABANDONED_AFTER_MS = 10 * 60_000

/**
 * Removes what backups killed while copying left in `folder` (`.NAME.partial-PID` and its -journal, tens
 * of MB each): their process cannot, and rotations that match backups by name never see them. A copy
 * still being written changes by the second; one whose process this one cannot see (another container
 * sharing the folder) is left while it does.
 */
function removeAbandonedCopies(folder: string): void {
  // Tidying only: a folder that cannot be listed, or a copy that cannot be removed, stops no backup.
  let names: string[] = []
  try {
    names = readdirSync(folder)
  } catch {}
  for (const name of names) {
    const pid = Number(/^\..+\.partial-(\d+)(?:-journal)?$/.exec(name)?.[1])
    if (!pid || pid === process.pid || isAlive(pid)) continue
    const path = join(folder, name)
    try {
      const stat = lstatSync(path)
      if (stat.isFile() && Date.now() - stat.mtimeMs > ABANDONED_AFTER_MS) rmSync(path)
    } catch {}
  }
}

export class SqliteStorage<M extends 'sync' | 'serving' = 'sync'> implements Storage {
  readonly pets: SqlPets<M>
  readonly keys: SqlKeys<M>
  readonly limiterState: SqlLimiterState<M>
  readonly usage: SqlUsage<M>
  readonly operators: SqlOperators<M>

  /** For an immutable open, the file as it was when opened; null when SQLite itself sees changes. */
  private readonly openedAs: string | null
  /** Device and inode of the file opened; null for a private in-memory database. */
  private readonly identity: string | null

  readonly location: string
  readonly writable: boolean
  /** One server per data file (data-file-lock.ts): every new pet passes through it. */
  readonly soleWriter = true
  readonly answersAtOnce = true

  constructor(
    private readonly db: Database,
    runner: Runner<M>,
    /** Opened from a file this process cannot write: reads work, every write fails as unavailable. */
    readonly readOnly: boolean,
    /** The data file, which a second connection may open; null for a private in-memory database. */
    readonly file: string | null,
    immutable: boolean,
  ) {
    this.location = file ? resolve(file) : ':memory:'
    this.writable = !readOnly
    this.openedAs = immutable && file ? diskFingerprint(file) : null
    this.identity = file ? identityOf(file) : null
    this.pets = new SqlPets(runner, SQLITE_INSERTS)
    this.keys = new SqlKeys(runner, new TakenByTheServer(runner))
    this.limiterState = new SqlLimiterState(runner)
    this.usage = new SqlUsage(runner)
    this.operators = new SqlOperators(runner)
  }

  /** True once a file opened as immutable has changed on disk: only a fresh open reads it right. */
  changedOnDisk(): boolean {
    return this.openedAs !== null && diskFingerprint(this.file!) !== this.openedAs
  }

  /** True once the path no longer names the file opened: writes would go to a file nobody opens again. */
  replaced(): boolean {
    return this.identity !== null && identityOf(this.file!) !== this.identity
  }

  readonly damagedCode = damagedCode

  ping(): void {
    this.db.query('SELECT 1').get()
  }

  /**
   * Writes and checks the copy under a temporary name, then links it under the final one (a link never
   * replaces a file): a backup killed or failed leaves nothing that could pass for a good one.
   */
  backup(file: string): void {
    const existing = lstatSync(file, { throwIfNoEntry: false })
    if (existing?.isSymbolicLink() && !existsSync(file))
      throw new StorageOpenError(
        `${file} is a symbolic link to ${readlinkSync(file)}, which does not exist; a backup is only written as a new file, never through a link: choose a new file name`,
      )
    if (existing) throw new StorageOpenError(`${file} already exists; choose a new file name`)
    if (!existsSync(dirname(file)))
      throw new StorageOpenError(`cannot write the backup to ${file}: the folder ${dirname(file)} does not exist`)
    const partial = join(dirname(file), `.${basename(file)}.partial-${process.pid}`)
    removeAbandonedCopies(dirname(file))
    try {
      rmSync(partial, { force: true })
      this.db.query('VACUUM INTO ?').run(partial)
      chmodSync(partial, 0o600)
      const copy = new Database(partial, { readonly: true, strict: true })
      try {
        const check = copy.query<{ quick_check: string }, []>('PRAGMA quick_check').get()?.quick_check
        if (check !== 'ok') throw new Error(`the copy does not check out (${check})`)
      } finally {
        copy.close()
      }
      linkSync(partial, file)
    } catch (error) {
      // The copy reads every page: a damaged one is the data file's fault, not the backup's.
      const damaged = damagedCode(error)
      if (damaged) throw damagedFile(this.location, damaged)
      const reason = (error as { code?: string }).code === 'EEXIST' ? 'it appeared while the copy was made' : (error as Error).message
      throw new StorageOpenError(`cannot write the backup to ${file}: ${reason}`)
    } finally {
      for (const path of [partial, `${partial}-journal`]) rmSync(path, { force: true })
    }
  }

  close(): void {
    this.db.close()
  }
}

/*
 * The data file as a server's storage backend: one server holds it (FILE.lock), commits on a worker
 * thread, watches it, and takes and leaves the rate-limit state beside it (handover.ts).
 */

/**
 * The commit worker's entry. In the binary every import.meta.url is the binary itself, and the entries
 * are stored under their paths relative to src/ (scripts/build.ts); from the sources it is beside this file.
 */
const COMMIT_WORKER = new URL(import.meta.url.endsWith('.ts') ? './commit-worker.ts' : './storage/sqlite/commit-worker.ts', import.meta.url)

export async function openEmbeddedBackend(given: string, options: BackendOptions): Promise<StorageBackend> {
  const file = dataFilePath(given)
  const created = createdBy(file)
  // The lock (beside the file, so after its folder) before the file: opening may migrate a file that
  // another server or a restore holds. A refused start undoes nothing: what is there is the holder's.
  prepareDataFolder(file)
  const lock = options.lockWaitMs === undefined ? lockDataFile(file) : await lockDataFileWhenFree(file, options.lockWaitMs)
  // Holding the lock, this start is the file's server: a claim left by a taker that was killed goes as it is read.
  if (lock) liveClaimant(file)
  let storage: SqliteStorage<'serving'> | undefined
  let handedOver: LimiterHandover
  try {
    const verify = options.checked === undefined || identityOf(file) !== options.checked
    storage = openSqliteStorage(file, { verify, serving: true })
    if (storage.readOnly && storage.keys.list().length === 0)
      throw new StorageOpenError(`${readOnlyBecause(file)} and holds no API keys, so no request could be served`)
    handedOver = ofActiveKeys(takeHandover(file), storage.keys)
  } catch (error) {
    storage?.close()
    lock?.release()
    created.undo()
    throw error
  }
  if (storage.readOnly)
    console.error(`petstore: ${readOnlyBecause(file)}: serving reads; creates answer 503 until it is writable and petstore restarts`)
  return {
    storage,
    petWriter: storage.file !== null && !storage.readOnly ? new WorkerPetWriter(COMMIT_WORKER, storage.file) : undefined,
    dataFile: storage,
    file,
    keepLock: lock ? () => lock.keep() : undefined,
    handedOver,
    // Read-only, a server saves nothing at its stop, and nothing may be writable beside the file.
    leave: storage.readOnly ? undefined : (state) => writeHandover(file, state),
    checked: identityOf(file) ?? undefined,
    // A write waits this long for another process's write lock (runner.ts).
    writePatienceMs: SERVING_BUSY_MS,
    async close() {
      storage.close()
      lock?.release()
    },
    undo: () => created.undo(),
  }
}

/** A key revoked (or gone with a restore) while no server ran keeps no state: a ban it left could not be lifted. */
function ofActiveKeys(state: LimiterHandover, keys: SqlKeys<'serving'>): LimiterHandover {
  if (state.keys.size === 0) return state
  const active = new Set(
    keys
      .list()
      .filter((key) => key.revokedAt === null)
      .map((key) => keySubject(key.id).name),
  )
  for (const name of state.keys.keys()) if (!active.has(name)) state.keys.delete(name)
  return state
}

/** What opening the data file will create (file, companions, lock, folders), so a failed start leaves nothing. */
function createdBy(file: string): { undo(): void } {
  const folders: string[] = []
  for (let dir = dirname(file); !existsSync(dir); dir = dirname(dir)) folders.push(dir)
  const lock = lockFileOf(file)
  // Undone only by the start that held the lock, so a lock file it made is its own to remove.
  const made = existsSync(file) ? (existsSync(lock) ? [] : [lock]) : [file, `${file}-wal`, `${file}-shm`, lock]
  return {
    // Where it can: on a read-only volume it made nothing, and removing what is not there fails (EROFS).
    undo() {
      for (const path of made) removeIfPossible(path)
      for (const dir of folders) removeIfPossible(dir, true)
    },
  }
}
