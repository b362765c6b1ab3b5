/**
 * The backends a server runs on, chosen once from the config: storage (the data file or PostgreSQL) and
 * the limiter's store (this process or Redis). Tests hand the server their own (see ServerOptions).
 */
import { existsSync, rmSync } from 'node:fs'
import { dirname, resolve } from 'node:path'
import type { DataFileWatch } from './readiness'
import type { Config } from '../config'
import { RedisLimiterBackend } from '../limiter/redis/backend'
import type { BanRule, SharedBackend } from '../limiter/backend'
import { openPostgresStorage } from '../storage/postgres'
import { lockDataFile, lockDataFileWhenFree, lockFileOf } from '../storage/sqlite/data-file-lock'
import { dropDeadClaim, takeHandover, writeHandover } from '../storage/sqlite/handover'
import { identityOf } from '../storage/sqlite/open'
import { openSqliteStorage, prepareDataFolder, readOnlyBecause, type SqliteStorage } from '../storage/sqlite'
import { WorkerPetWriter } from '../storage/sqlite/writer'
import type { ApiKeyRecord } from '../domain/api-key'
import { type LimiterHandover, StorageOpenError, type PetWriter, type Storage } from '../domain/repositories'
import { keySubject } from '../domain/subject'

/** The storage a server runs on, with what only that kind of storage needs. */
/**
 * The commit worker's entry. In the binary every import.meta.url is the binary itself, and the entries
 * are stored under their paths relative to src/ (scripts/build.ts); from the sources this file is in
 * src/server/.
 */
const COMMIT_WORKER = new URL(
  import.meta.url.endsWith('.ts') ? '../storage/sqlite/commit-worker.ts' : './storage/sqlite/commit-worker.ts',
  import.meta.url,
)

export interface StorageBackend {
  storage: Storage
  petWriter?: PetWriter
  dataFile?: DataFileWatch
  close(): Promise<void>
  /** Removes what a start that failed created. */
  undo(): void
  /** Rate-limit state the server before this one left beside the data file at its stop. */
  handedOver?: LimiterHandover
  /** Leaves the in-process limiter's state for the next server on the data file; absent elsewhere. */
  leave?(state: LimiterHandover): void
  /** The data file this backend checked whole, or took as checked (OpenOptions.checked): its device and inode. */
  checked?: string
}

export interface OpenOptions {
  /** Wait up to this long for another server to release the data file (a takeover's Arrival), instead of refusing. */
  lockWaitMs?: number
  /**
   * The data file this process checked whole and held until a moment ago (StorageBackend.checked): while
   * the path still names that file it is not read whole again (takeover.ts, serving again). Its schema is.
   */
  checked?: string
}

/** Where the limiter keeps its state when shared (Redis); undefined keeps it in this process. */
export type LimiterBackendFactory = (rule: BanRule) => SharedBackend

/** Opens the storage the config names: PostgreSQL when it names a database, else the data file. */
export async function openStorageBackend(config: Config, options: OpenOptions = {}): Promise<StorageBackend> {
  if (!config.database) return openEmbeddedBackend(config, options)
  // Shared with other instances: nothing on local disk, nothing to undo.
  const storage = await openPostgresStorage(config.database.url, { pool: config.database.pool })
  return { storage, close: () => storage.close(), undo() {} }
}

export function limiterBackendFactory(config: Config): LimiterBackendFactory | undefined {
  const url = config.redisUrl
  if (!url) return undefined
  return (rule) => new RedisLimiterBackend(rule, { url, maxAddresses: config.maxTrackedAddresses })
}

/** The data file: one server holds it (FILE.lock), commits on a worker thread and watches it. */
async function openEmbeddedBackend(config: Config, options: OpenOptions): Promise<StorageBackend> {
  const created = createdBy(config.dataFile)
  // The lock (beside the file, so after its folder) before the file: opening may migrate a file that
  // another server or a restore holds. A refused start undoes nothing: what is there is the holder's.
  prepareDataFolder(config.dataFile)
  const file = resolve(config.dataFile)
  const lock = options.lockWaitMs === undefined ? lockDataFile(file) : await lockDataFileWhenFree(file, options.lockWaitMs)
  // Holding the lock, this start is the file's server: a claim left by a taker that was killed goes.
  if (lock) dropDeadClaim(file)
  let storage: SqliteStorage | undefined
  let handedOver: LimiterHandover
  try {
    storage = openSqliteStorage(config.dataFile, { verify: options.checked === undefined || identityOf(file) !== options.checked })
    if (storage.readOnly && storage.keys.list().length === 0)
      throw new StorageOpenError(`${readOnlyBecause(config.dataFile)} and holds no API keys, so no request could be served`)
    const opened = storage
    handedOver = ofActiveKeys(takeHandover(file), () => opened.keys.list())
  } catch (error) {
    storage?.close()
    lock?.release()
    created.undo()
    throw error
  }
  if (storage.readOnly)
    console.error(
      `petstore: ${readOnlyBecause(config.dataFile)}: serving reads; creates answer 503 until it is writable and petstore restarts`,
    )
  return {
    storage,
    petWriter: storage.file !== null && !storage.readOnly ? new WorkerPetWriter(COMMIT_WORKER, storage.file) : undefined,
    dataFile: storage,
    handedOver,
    // Read-only, a server saves nothing at its stop, and nothing may be writable beside the file.
    leave: storage.readOnly ? undefined : (state) => writeHandover(file, state),
    checked: identityOf(file) ?? undefined,
    async close() {
      storage.close()
      lock?.release()
    },
    undo: () => created.undo(),
  }
}

/** A key revoked (or gone with a restore) while no server ran keeps no state: a ban it left could not be lifted. */
function ofActiveKeys(state: LimiterHandover, keys: () => ApiKeyRecord[]): LimiterHandover {
  if (state.keys.size === 0) return state
  const active = new Set(
    keys()
      .filter((key) => key.revokedAt === null)
      .map((key) => keySubject(key.id).name),
  )
  for (const name of state.keys.keys()) if (!active.has(name)) state.keys.delete(name)
  return state
}

/** What opening the data file will create (file, companions, lock, folders), so a failed start leaves nothing. */
function createdBy(dataFile: string): { undo(): void } {
  const file = resolve(dataFile)
  const folders: string[] = []
  for (let dir = dirname(file); !existsSync(dir); dir = dirname(dir)) folders.push(dir)
  const lock = lockFileOf(file)
  // Undone only by the start that held the lock, so a lock file it made is its own to remove.
  const made = existsSync(file) ? (existsSync(lock) ? [] : [lock]) : [file, `${file}-wal`, `${file}-shm`, lock]
  return {
    undo() {
      for (const path of made) rmSync(path, { force: true })
      for (const dir of folders) rmSync(dir, { recursive: true, force: true })
    },
  }
}
