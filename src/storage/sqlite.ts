/**
 * SQLite storage through bun:sqlite: one file per environment, opened once, statements prepared once.
 */
import { constants as sqlite, Database, type Statement } from 'bun:sqlite'
import { accessSync, chmodSync, closeSync, constants as fs, existsSync, linkSync, mkdirSync, openSync, readSync, rmSync, statSync } from 'node:fs'
import { basename, dirname, join } from 'node:path'
import {
  type ApiKeyRecord,
  type CreatePetCommand,
  type RenderPet,
  type CreatePetOutcome,
  type KeyRepository,
  type LimiterStateRepository,
  type NewPet,
  type Pet,
  type PetRepository,
  type PetStatus,
  type SavedBucket,
  type Storage,
  type StoredResponse,
  StorageDamagedError,
  StorageOpenError,
  StorageUnavailableError,
} from './types'

/** 'PETS' in ASCII: marks a file as ours, so a foreign SQLite database is refused, not migrated. */
const APPLICATION_ID = 0x50455453

const MIGRATIONS: string[] = [
  `CREATE TABLE pets (
     id INTEGER PRIMARY KEY AUTOINCREMENT,
     name TEXT NOT NULL,
     category_id INTEGER NOT NULL,
     status TEXT NOT NULL CHECK (status IN ('available', 'pending', 'sold')),
     created_at INTEGER NOT NULL
   );
   CREATE INDEX pets_by_status ON pets (status, id);
   CREATE TABLE api_keys (
     id TEXT PRIMARY KEY,
     name TEXT NOT NULL,
     plan TEXT NOT NULL,
     rpm INTEGER NOT NULL,
     rpd INTEGER NOT NULL,
     secret_hash TEXT NOT NULL UNIQUE,
     created_at INTEGER NOT NULL,
     last_used_at INTEGER,
     revoked_at INTEGER
   );
   CREATE TABLE idempotency (
     key_id TEXT NOT NULL,
     idem_key TEXT NOT NULL,
     request_hash TEXT NOT NULL,
     status INTEGER NOT NULL,
     body TEXT NOT NULL,
     location TEXT NOT NULL,
     created_at INTEGER NOT NULL,
     PRIMARY KEY (key_id, idem_key)
   ) WITHOUT ROWID;
   CREATE INDEX idempotency_by_age ON idempotency (created_at);
   CREATE TABLE limiter_state (
     subject TEXT PRIMARY KEY,
     tokens REAL NOT NULL,
     updated_at INTEGER NOT NULL
   ) WITHOUT ROWID;`,
  // Signals from the CLI to a running server: pets seeded or reset, key limits reset.
  `CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
   INSERT INTO meta (name, value) VALUES ('pets_generation', 0);
   CREATE TABLE limit_resets (key_id TEXT PRIMARY KEY, requested_at INTEGER NOT NULL) WITHOUT ROWID;`,
]

const SQLITE_HEADER = 'SQLite format 3\0'

/** Error codes that mean "cannot write now" rather than "bug": they become 503, not 500. */
const UNAVAILABLE_CODES = /^SQLITE_(FULL|READONLY|IOERR|CANTOPEN|BUSY|LOCKED|PERM)/

/** Codes SQLite gives when what it read is not a valid database: the file is damaged. */
const DAMAGED_CODES = /^SQLITE_(CORRUPT|NOTADB)/

/** Reads go through here: a damaged file is told apart from a bug. */
function reading<T>(read: () => T): T {
  try {
    return read()
  } catch (error) {
    const code = (error as { code?: string })?.code ?? ''
    if (DAMAGED_CODES.test(code)) throw new StorageDamagedError(code)
    throw error
  }
}

function describeUnavailable(error: unknown): never {
  const code = (error as { code?: string })?.code ?? ''
  if (UNAVAILABLE_CODES.test(code)) throw new StorageUnavailableError(code)
  throw error
}

function checkHeader(file: string): void {
  if (!existsSync(file) || statSync(file).size === 0) return
  const fd = openSync(file, 'r')
  try {
    const header = Buffer.alloc(16)
    readSync(fd, header, 0, 16, 0)
    if (header.toString('latin1') !== SQLITE_HEADER)
      throw new StorageOpenError(`${file} is not a petstore data file (it is not an SQLite database)`)
  } finally {
    closeSync(fd)
  }
}

export interface OpenOptions {
  /** Run the integrity check: the server does, short-lived CLI commands need not. */
  verify?: boolean
  /** Refuse a missing file instead of creating it (commands that only read or change existing data). */
  mustExist?: boolean
}

export function openSqliteStorage(file: string, options: OpenOptions = {}): Storage {
  const inMemory = file === ':memory:'
  if (!inMemory) {
    // Owner-only: the file holds key hashes and the WAL/SHM files SQLite creates inherit this mask.
    process.umask(0o077)
    if (options.mustExist && !existsSync(file))
      throw new StorageOpenError(`no data file at ${file}; start the server once to create it, or name the file with --data (staging uses its own: --env staging)`)
    try {
      if (existsSync(file) && statSync(file).isDirectory()) throw new Error('it is a directory')
      mkdirSync(dirname(file), { recursive: true, mode: 0o700 })
      checkHeader(file)
    } catch (error) {
      if (error instanceof StorageOpenError) throw error
      throw new StorageOpenError(`cannot use ${file} as the data file: ${(error as Error).message}`)
    }
  }
  const readOnly = !inMemory && existsSync(file) && !isWritable(file)
  let db: Database
  let immutable = false
  try {
    if (readOnly) ({ db, immutable } = openReadOnly(file))
    else db = new Database(file, { create: true, strict: true })
  } catch (error) {
    if (error instanceof StorageOpenError) throw error
    throw new StorageOpenError(`cannot open ${file}: ${(error as Error).message}`)
  }
  try {
    prepare(db, file, { ...options, readOnly })
  } catch (error) {
    db.close()
    if (error instanceof StorageOpenError) throw error
    throw new StorageOpenError(`${file} cannot be used: ${(error as Error).message}`)
  }
  if (!inMemory && !readOnly)
    for (const path of [file, `${file}-wal`, `${file}-shm`]) if (existsSync(path)) chmodSync(path, 0o600)
  return new SqliteStorage(db, readOnly, inMemory ? null : file, immutable)
}

/**
 * A second connection to a data file that openSqliteStorage has already checked and migrated, for
 * committing pets on another thread. Busy timeout and synchronous are per connection, so they are set
 * again. Failing to open is reported like a failed commit: a refusal when the file cannot be written.
 */
export function openPetCommitter(file: string): { pets: PetRepository; close(): void } {
  let db: Database | undefined
  try {
    db = new Database(file, { readwrite: true, strict: true })
    db.run('PRAGMA busy_timeout = 5000')
    db.run('PRAGMA synchronous = FULL')
    const pets = new SqlitePets(db)
    return { pets, close: () => db!.close() }
  } catch (error) {
    db?.close()
    describeUnavailable(error)
  }
}

/** SQLite needs to write the file and to create its -wal and -shm companions beside it. */
function isWritable(file: string): boolean {
  try {
    accessSync(file, fs.W_OK)
    accessSync(dirname(file), fs.W_OK)
    return true
  } catch {
    return false
  }
}

/**
 * A read-only file (read-only mount, or permissions) still serves reads. SQLite reads a WAL database
 * read-only only while its -wal and -shm files exist (or it can make them); otherwise the file is
 * opened as immutable, which is exact while every change is in the main file. A leftover -wal that
 * cannot be read holds committed changes an immutable open would silently miss, so that is refused;
 * and as an immutable open never sees later changes, `changedOnDisk` watches the file for them.
 */
function openReadOnly(file: string): { db: Database; immutable: boolean } {
  const db = new Database(file, { readonly: true, strict: true })
  try {
    db.query('SELECT count(*) FROM sqlite_schema').get()
    return { db, immutable: false }
  } catch (error) {
    db.close()
    if (!/^SQLITE_(CANTOPEN|READONLY)/.test((error as { code?: string }).code ?? '')) throw error
  }
  const wal = `${file}-wal`
  if (existsSync(wal) && statSync(wal).size > 0)
    throw new StorageOpenError(
      `${file} is read-only and ${wal} still holds changes that cannot be read without writing; make the directory writable once`,
    )
  // In a URI, `?` and `#` would end the path and `%` start an escape.
  const uri = `file:${encodeURI(file).replace(/\?/g, '%3F').replace(/#/g, '%23')}?immutable=1`
  return { db: new Database(uri, sqlite.SQLITE_OPEN_READONLY | sqlite.SQLITE_OPEN_URI), immutable: true }
}

/** Which file the path names now: device and inode, or null when there is none. */
function identityOf(file: string): string | null {
  const stat = statSync(file, { throwIfNoEntry: false })
  return stat ? `${stat.dev}:${stat.ino}` : null
}

/** What changes when anything writes the file or starts a write-ahead log beside it. */
function diskFingerprint(file: string): string {
  const main = statSync(file, { throwIfNoEntry: false })
  const wal = statSync(`${file}-wal`, { throwIfNoEntry: false })
  return `${main?.ino}:${main?.size}:${main?.mtimeMs}:${wal?.size}:${wal?.mtimeMs}`
}

function prepare(db: Database, file: string, options: OpenOptions & { readOnly: boolean }): void {
  // Wait for the other process (server or CLI) instead of failing at once when both write.
  db.run('PRAGMA busy_timeout = 5000')
  if (options.verify) {
    const result = db.query<{ quick_check: string }, []>('PRAGMA quick_check').get()
    if (result?.quick_check !== 'ok')
      throw new StorageOpenError(`${file} is damaged (${result?.quick_check}); restore it from a backup`)
  }
  const version = db.query<{ user_version: number }, []>('PRAGMA user_version').get()!.user_version
  const appId = db.query<{ application_id: number }, []>('PRAGMA application_id').get()!.application_id
  const tables = db.query<{ n: number }, []>("SELECT count(*) AS n FROM sqlite_schema").get()!.n
  if (appId !== APPLICATION_ID && (version !== 0 || tables !== 0))
    throw new StorageOpenError(`${file} is an SQLite database that petstore did not create; refusing to use it`)
  if (version > MIGRATIONS.length)
    throw new StorageOpenError(`${file} was written by a newer petstore (schema ${version}); upgrade petstore`)
  if (options.readOnly) {
    if (version < MIGRATIONS.length)
      throw new StorageOpenError(`${file} is read-only and needs its schema brought up to date; make it writable once`)
    return
  }
  // WAL lets the CLI and backups read while the server writes; FULL makes every commit survive power loss
  // before we answer 201.
  db.run('PRAGMA journal_mode = WAL')
  db.run('PRAGMA synchronous = FULL')
  for (let next = version; next < MIGRATIONS.length; next++) {
    db.transaction(() => {
      db.run(MIGRATIONS[next]!)
      db.run(`PRAGMA application_id = ${APPLICATION_ID}`)
      db.run(`PRAGMA user_version = ${next + 1}`)
    })()
  }
}

interface PetRow {
  id: number
  name: string
  categoryId: number
  status: PetStatus
}

interface KeyRow {
  id: string
  name: string
  plan: ApiKeyRecord['plan']
  rpm: number
  rpd: number
  secretHash: string
  createdAt: number
  lastUsedAt: number | null
  revokedAt: number | null
}

const PET_COLUMNS = 'id, name, category_id AS categoryId, status'
const KEY_COLUMNS =
  'id, name, plan, rpm, rpd, secret_hash AS secretHash, created_at AS createdAt, last_used_at AS lastUsedAt, revoked_at AS revokedAt'

class SqlitePets implements PetRepository {
  private readonly listAll: Statement<PetRow, [number, number]>
  private readonly listByStatus: Statement<PetRow, [string, number, number]>
  private readonly byId: Statement<PetRow, [number]>
  private readonly insert: Statement<{ id: number }, [string, number, string, number]>
  private readonly findIdempotent: Statement<StoredResponse & { createdAt: number }, [string, string]>
  private readonly saveIdempotent: Statement<unknown, [string, string, string, number, string, string, number]>
  private readonly countAll: Statement<{ n: number }, []>
  private readonly bumpGeneration: Statement<unknown, []>
  private readonly readGeneration: Statement<{ value: number }, []>
  private readonly createTransaction: {
    immediate: (commands: CreatePetCommand[], now: number, render: RenderPet) => CreatePetOutcome[]
  }

  constructor(private readonly db: Database) {
    this.listAll = db.query(`SELECT ${PET_COLUMNS} FROM pets WHERE id > ? ORDER BY id LIMIT ?`)
    this.listByStatus = db.query(
      `SELECT ${PET_COLUMNS} FROM pets WHERE status = ? AND id > ? ORDER BY id LIMIT ?`,
    )
    this.byId = db.query(`SELECT ${PET_COLUMNS} FROM pets WHERE id = ?`)
    this.insert = db.query(
      'INSERT INTO pets (name, category_id, status, created_at) VALUES (?, ?, ?, ?) RETURNING id',
    )
    this.findIdempotent = db.query(
      `SELECT request_hash AS requestHash, status, body, location, created_at AS createdAt
         FROM idempotency WHERE key_id = ? AND idem_key = ?`,
    )
    this.saveIdempotent = db.query(
      `INSERT OR REPLACE INTO idempotency (key_id, idem_key, request_hash, status, body, location, created_at)
       VALUES (?, ?, ?, ?, ?, ?, ?)`,
    )
    this.countAll = db.query('SELECT count(*) AS n FROM pets')
    this.bumpGeneration = db.query("UPDATE meta SET value = value + 1 WHERE name = 'pets_generation'")
    this.readGeneration = db.query("SELECT value FROM meta WHERE name = 'pets_generation'")
    this.createTransaction = db.transaction((commands: CreatePetCommand[], now: number, render: RenderPet) =>
      commands.map((command) => this.createOne(command, now, render)),
    )
  }

  list(afterId: number, limit: number, status: PetStatus | undefined): Pet[] {
    return reading(() => (status ? this.listByStatus.all(status, afterId, limit) : this.listAll.all(afterId, limit)))
  }

  get(id: number): Pet | null {
    return reading(() => this.byId.get(id))
  }

  count(): number {
    return this.countAll.get()!.n
  }

  seed(pets: NewPet[], now: number): void {
    try {
      this.db.transaction(() => {
        for (const pet of pets) this.insert.get(pet.name, pet.categoryId, pet.status, now)
        this.bumpGeneration.run()
      }).immediate()
    } catch (error) {
      describeUnavailable(error)
    }
  }

  reset(): number {
    try {
      return this.db.transaction(() => {
        const deleted = this.db.run('DELETE FROM pets').changes
        this.db.run('DELETE FROM idempotency')
        this.bumpGeneration.run()
        return deleted
      }).immediate()
    } catch (error) {
      describeUnavailable(error)
    }
  }

  generation(): number {
    return this.readGeneration.get()!.value
  }

  createMany(commands: CreatePetCommand[], now: number, render: RenderPet): CreatePetOutcome[] {
    try {
      // IMMEDIATE: a batch that starts with an idempotency lookup would otherwise begin as a reader, and
      // SQLite answers a reader that wants to write while another connection writes with SQLITE_BUSY at
      // once, skipping the busy timeout.
      return this.createTransaction.immediate(commands, now, render)
    } catch (error) {
      describeUnavailable(error)
    }
  }

  private createOne({ pet, idempotency }: CreatePetCommand, now: number, render: RenderPet): CreatePetOutcome {
    if (idempotency) {
      const previous = this.findIdempotent.get(idempotency.keyId, idempotency.key)
      if (previous && previous.createdAt > now - IDEMPOTENCY_TTL_MS) {
        if (previous.requestHash !== idempotency.requestHash) return { kind: 'conflict' }
        return { kind: 'replayed', response: previous }
      }
    }
    const { id } = this.insert.get(pet.name, pet.categoryId, pet.status, now)!
    const created = { id, ...pet }
    const { body, location } = render(created)
    if (idempotency)
      this.saveIdempotent.run(idempotency.keyId, idempotency.key, idempotency.requestHash, 201, body, location, now)
    return { kind: 'created', pet: created, body, location }
  }
}

export const IDEMPOTENCY_TTL_MS = 24 * 60 * 60 * 1000

class SqliteKeys implements KeyRepository {
  private readonly insertKey: Statement<unknown, [string, string, string, number, number, string, number]>
  private readonly listKeys: Statement<KeyRow, []>
  private readonly revokeKey: Statement<unknown, [number, string]>
  private readonly touchKey: Statement<unknown, [number, string]>
  private readonly countKeys: Statement<{ keys: number; revoked: number }, []>

  constructor(private readonly db: Database) {
    this.insertKey = db.query(
      'INSERT INTO api_keys (id, name, plan, rpm, rpd, secret_hash, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)',
    )
    this.listKeys = db.query(`SELECT ${KEY_COLUMNS} FROM api_keys ORDER BY created_at, id`)
    this.revokeKey = db.query('UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?')
    this.touchKey = db.query(
      'UPDATE api_keys SET last_used_at = max(coalesce(last_used_at, 0), ?) WHERE id = ?',
    )
    this.countKeys = db.query('SELECT count(*) AS keys, count(revoked_at) AS revoked FROM api_keys')
  }

  insert(r: ApiKeyRecord): void {
    try {
      this.insertKey.run(r.id, r.name, r.plan, r.rpm, r.rpd, r.secretHash, r.createdAt)
    } catch (error) {
      describeUnavailable(error)
    }
  }

  list(): ApiKeyRecord[] {
    return this.listKeys.all()
  }

  revoke(id: string, now: number): boolean {
    try {
      return this.revokeKey.run(now, id).changes > 0
    } catch (error) {
      describeUnavailable(error)
    }
  }

  /** Keys are never deleted and a revocation is never undone, so the two counts only grow with each change. */
  changeMark(): string {
    const { keys, revoked } = this.countKeys.get()!
    return `${keys}:${revoked}`
  }

  resetLimits(id: string, now: number): boolean {
    try {
      return this.db.transaction(() => {
        if (!this.db.query('SELECT 1 FROM api_keys WHERE id = ?').get(id)) return false
        this.db.query('DELETE FROM limiter_state WHERE subject = ?').run(`key:${id}`)
        this.db.query('INSERT OR REPLACE INTO limit_resets (key_id, requested_at) VALUES (?, ?)').run(id, now)
        return true
      }).immediate()
    } catch (error) {
      describeUnavailable(error)
    }
  }

  takeLimitResets(): string[] {
    const pending = this.db.query<{ keyId: string }, []>('SELECT key_id AS keyId FROM limit_resets')
    if (!pending.get()) return []
    // Taken and cleared together, with any day bucket the server saved since the reset was asked for.
    return this.db.transaction(() => {
      const ids = pending.all().map((row) => row.keyId)
      for (const id of ids) {
        this.db.query('DELETE FROM limiter_state WHERE subject = ?').run(`key:${id}`)
        this.db.query('DELETE FROM limit_resets WHERE key_id = ?').run(id)
      }
      return ids
    }).immediate()
  }

  recordLastUsed(lastUsed: Map<string, number>): void {
    if (lastUsed.size === 0) return
    this.db.transaction(() => {
      for (const [id, at] of lastUsed) this.touchKey.run(at, id)
    }).immediate()
  }
}

class SqliteLimiterState implements LimiterStateRepository {
  constructor(private readonly db: Database) {}

  load(): Map<string, SavedBucket> {
    const rows = this.db
      .query<{ subject: string; tokens: number; updatedAt: number }, []>(
        'SELECT subject, tokens, updated_at AS updatedAt FROM limiter_state',
      )
      .all()
    return new Map(rows.map((row) => [row.subject, { tokens: row.tokens, updatedAt: row.updatedAt }]))
  }

  save(buckets: Map<string, SavedBucket>): void {
    if (buckets.size === 0) return
    const upsert = this.db.query(
      'INSERT OR REPLACE INTO limiter_state (subject, tokens, updated_at) VALUES (?, ?, ?)',
    )
    this.db.transaction(() => {
      for (const [subject, bucket] of buckets) upsert.run(subject, bucket.tokens, bucket.updatedAt)
    }).immediate()
  }
}

class SqliteStorage implements Storage {
  readonly pets: SqlitePets
  readonly keys: SqliteKeys
  readonly limiterState: SqliteLimiterState

  /** For an immutable open, the file as it was when opened; null when SQLite itself sees changes. */
  private readonly openedAs: string | null
  /** Device and inode of the file opened; null for a private in-memory database. */
  private readonly identity: string | null

  constructor(
    private readonly db: Database,
    readonly readOnly: boolean,
    readonly file: string | null,
    immutable: boolean,
  ) {
    this.openedAs = immutable && file ? diskFingerprint(file) : null
    this.identity = file ? identityOf(file) : null
    this.pets = new SqlitePets(db)
    this.keys = new SqliteKeys(db)
    this.limiterState = new SqliteLimiterState(db)
  }

  changedOnDisk(): boolean {
    return this.openedAs !== null && diskFingerprint(this.file!) !== this.openedAs
  }

  replaced(): boolean {
    return this.identity !== null && identityOf(this.file!) !== this.identity
  }

  ping(): void {
    this.db.query('SELECT 1').get()
  }

  purgeIdempotency(olderThan: number): void {
    try {
      this.db.query('DELETE FROM idempotency WHERE created_at < ?').run(olderThan)
    } catch (error) {
      describeUnavailable(error)
    }
  }

  /**
   * Writes the copy under a temporary name in the target folder, checks it, and only then links it
   * under the final name (a link, unlike a rename, never replaces a file that appeared meanwhile): a
   * backup that is killed or fails leaves nothing that could be mistaken for a good one.
   */
  backup(file: string): void {
    if (existsSync(file)) throw new StorageOpenError(`${file} already exists; choose a new file name`)
    const partial = join(dirname(file), `.${basename(file)}.partial-${process.pid}`)
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
      const reason = (error as { code?: string }).code === 'EEXIST' ? 'it appeared while the copy was made' : (error as Error).message
      throw new StorageOpenError(`cannot write the backup to ${file}: ${reason}`)
    } finally {
      rmSync(partial, { force: true })
    }
  }

  close(): void {
    this.db.close()
  }
}
