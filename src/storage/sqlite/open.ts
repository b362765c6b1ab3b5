/**
 * Opening a data file: is it ours, can it be written, is it whole; pragmas set once, with the reason
 * for each; the schema brought up to date.
 */
import { constants as sqlite, Database } from 'bun:sqlite'
import { accessSync, closeSync, constants as fs, existsSync, openSync, readSync, rmSync, statSync } from 'node:fs'
import { dirname } from 'node:path'
import { StorageOpenError } from '../../domain/repositories'
import { olderSchemaRefused } from '../shared/open-errors'
import { APPLICATION_ID, MIGRATIONS } from './migrations'

export interface OpenOptions {
  /** Run the integrity check: the server does, short-lived CLI commands need not. */
  verify?: boolean
  /** Refuse a missing file instead of creating it (commands that only read or change existing data). */
  mustExist?: boolean
  /**
   * A file at an older schema is upgraded (commands that write, the server), kept as it is (a backup,
   * so the copy can go back to the older binary), or refused (commands that only read).
   */
  olderSchema?: 'upgrade' | 'keep' | 'refuse'
  /** How long a write waits for another process's write lock: a server's request briefly, a command longer. */
  busyTimeoutMs?: number
}

/**
 * A server's writes wait for another process (server or CLI) up to 5 s, then answer 503. A command waits
 * up to a minute, as on PostgreSQL: a busy server commits back to back, and on a slow disk each commit
 * holds the write lock for its fsync, so a command that gave up after 5 s failed now and then.
 */
export const SERVING_BUSY_MS = 5_000
export const COMMAND_BUSY_MS = 60_000

const SQLITE_HEADER = 'SQLite format 3\0'

/**
 * Why `file` cannot be a data file, before SQLite opens it, or null: a folder; a device, a pipe or a
 * socket (SQLite would write its journal beside a device: /dev/null-journal); a file with hard links
 * (SQLite keeps the write-ahead log beside the name it opened, so what is written under one name would
 * never be read under another).
 */
export function oddFileReason(file: string): string | null {
  const stat = statSync(file, { throwIfNoEntry: false })
  if (!stat) return null
  if (stat.isDirectory()) return 'it is a directory'
  if (!stat.isFile()) return 'it is not a regular file (a device, a pipe or a socket)'
  if (stat.nlink > 1)
    return (
      `it has ${stat.nlink} names (hard links), and SQLite keeps a write-ahead log beside the name it opens, ` +
      'so a server or command on each name would write where the other never reads; keep one name and remove the other links'
    )
  return null
}

export function checkHeader(file: string): void {
  if (!existsSync(file) || statSync(file).size === 0) return
  if (readBytes(file, 0, 16).toString('latin1') !== SQLITE_HEADER)
    throw new StorageOpenError(`${file} is not a petstore data file (it is not an SQLite database)`)
}

/** Up to `length` bytes of `file` from `position`: fewer where the file ends sooner. */
export function readBytes(file: string, position: number, length: number): Buffer {
  const fd = openSync(file, 'r')
  try {
    const bytes = Buffer.alloc(length)
    return bytes.subarray(0, readSync(fd, bytes, 0, length, position))
  } finally {
    closeSync(fd)
  }
}

/**
 * Removes a leftover when it can: on a read-only volume nothing can be written there (and nothing left
 * there can mislead a server that cannot write either); after a failed start, the start's own reason is
 * what is reported, never a failure to tidy up after it.
 */
export function removeIfPossible(path: string, recursive = false): void {
  try {
    rmSync(path, { recursive, force: true })
  } catch {}
}

export function canWrite(path: string): boolean {
  try {
    accessSync(path, fs.W_OK)
    return true
  } catch {
    return false
  }
}

/** SQLite needs to write the file and to create its -wal and -shm companions beside it. */
export function isWritable(file: string): boolean {
  return canWrite(file) && canWrite(dirname(file))
}

/** What keeps a data file that is not writable from being written: the file itself, or its folder. */
export function readOnlyBecause(file: string): string {
  if (!canWrite(file)) return `${file} is read-only`
  return `${file} is in a read-only folder (SQLite writes its -wal and -shm files beside it)`
}

/**
 * A read-only file still serves reads. SQLite reads a WAL database read-only only while its -wal and
 * -shm exist (or can be made); else the file is opened as immutable, exact while every change is in the
 * main file: an unreadable leftover -wal is refused, and `changedOnDisk` watches for later changes.
 */
export function openReadOnly(file: string): { db: Database; immutable: boolean } {
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
export function identityOf(file: string): string | null {
  const stat = statSync(file, { throwIfNoEntry: false })
  return stat ? `${stat.dev}:${stat.ino}` : null
}

/** What changes when anything writes the file or starts a write-ahead log beside it. */
export function diskFingerprint(file: string): string {
  const main = statSync(file, { throwIfNoEntry: false })
  const wal = statSync(`${file}-wal`, { throwIfNoEntry: false })
  return `${main?.ino}:${main?.size}:${main?.mtimeMs}:${wal?.size}:${wal?.mtimeMs}`
}

/** What to do about a damaged data file. */
const RESTORE_REMEDY = 'restore it from a backup'

/** `PRAGMA quick_check`: refuses a damaged file, saying what to do about it. */
export function checkWhole(db: Database, file: string, remedy: string): void {
  const result = db.query<{ quick_check: string }, []>('PRAGMA quick_check').get()?.quick_check
  if (result === 'ok') return
  // SQLite lists the faults on several lines; the first few, on one, say enough.
  const faults = `${result}`.split('\n').filter((line) => !line.startsWith('***'))
  throw damagedFile(file, `${faults.slice(0, 2).join('; ')}${faults.length > 2 ? '; …' : ''}`, remedy)
}

/** The one line for a damaged file, whether found at open or by a later read or write. */
export function damagedFile(file: string, faults: string, remedy = RESTORE_REMEDY): StorageOpenError {
  return new StorageOpenError(`${file} is damaged (${faults}); ${remedy}`)
}

/**
 * The file's schema version, when it is ours (or empty) and no newer than this petstore serves; older
 * ones are brought up to date when opened for writing.
 */
export function checkSchema(db: Database, file: string): number {
  const version = db.query<{ user_version: number }, []>('PRAGMA user_version').get()!.user_version
  const appId = db.query<{ application_id: number }, []>('PRAGMA application_id').get()!.application_id
  const tables = db.query<{ n: number }, []>('SELECT count(*) AS n FROM sqlite_schema').get()!.n
  if (appId !== APPLICATION_ID && (version !== 0 || tables !== 0))
    throw new StorageOpenError(`${file} is an SQLite database that petstore did not create; refusing to use it`)
  // Most often met when going back to an older binary after an upgrade: say what to do.
  if (version > MIGRATIONS.length)
    throw new StorageOpenError(
      `${file} was written by a newer petstore (schema ${version}, this one knows up to ${MIGRATIONS.length}); ` +
        'run that newer petstore, or go back to this version by restoring the backup taken before the upgrade ' +
        '(petstore restore BACKUP, the server stopped; see docs/upgrading.md)',
    )
  checkObjects(db, file, version)
  return version
}

/** What SQLite itself may add to a file of ours: AUTOINCREMENT's counters, ANALYZE's statistics. */
const SQLITE_OWN_TABLES = /^sqlite_(sequence|stat[1-4])$/

/**
 * The tables and indexes the first `version` migrations make, as `type name` to their statement as SQLite
 * keeps it (spacing aside: see definitionOf), found by making them in memory once per version.
 */
const knownObjects = new Map<number, Map<string, string>>()
function objectsOf(version: number): Map<string, string> {
  let known = knownObjects.get(version)
  if (!known) {
    const db = new Database(':memory:')
    try {
      for (const step of MIGRATIONS.slice(0, version)) db.run(step)
      known = new Map(
        db
          .query<{ object: string; sql: string | null }, []>("SELECT type || ' ' || name AS object, sql FROM sqlite_schema")
          .all()
          .map((row) => [row.object, definitionOf(row.sql)]),
      )
    } finally {
      db.close()
    }
    knownObjects.set(version, known)
  }
  return known
}

/**
 * A statement with its spacing made uniform: a file made by an earlier petstore, whose statements read
 * alike but may be spaced otherwise, is as good as one made now; a column, a CHECK or a generated column
 * added to one of our tables is not.
 */
function definitionOf(sql: string | null): string {
  return (sql ?? '')
    .replace(/\s+/g, ' ')
    .replace(/ ?([(),;]) ?/g, '$1')
    .trim()
    .toLowerCase()
}

/**
 * Refuses a file holding what its schema version does not make: a trigger or a view (code a backup could
 * plant, run by the server at its next write or read), a table or index petstore does not know, or one of
 * its own made otherwise (a CHECK that refuses every write, a generated column the server cannot read).
 */
function checkObjects(db: Database, file: string, version: number): void {
  const known = objectsOf(version)
  const objects = db
    .query<{ type: string; name: string; sql: string | null }, []>('SELECT type, name, sql FROM sqlite_schema ORDER BY type, name')
    .all()
  const foreign = objects.filter(({ type, name }) => {
    if (known.has(`${type} ${name}`)) return false
    if (type === 'table' && SQLITE_OWN_TABLES.test(name)) return false
    // The index SQLite makes for a table's UNIQUE or PRIMARY KEY constraint, which holds no statement of its own.
    return !(type === 'index' && name.startsWith('sqlite_autoindex_'))
  })
  const altered = objects.filter(({ type, name, sql }) => {
    const definition = known.get(`${type} ${name}`)
    return definition !== undefined && definition !== definitionOf(sql)
  })
  const listed = (found: { type: string; name: string }[]) =>
    found
      .slice(0, 5)
      .map(({ type, name }) => `${type} ${JSON.stringify(name.slice(0, 64))}`)
      .join(', ') + (found.length > 5 ? `, and ${found.length - 5} more` : '')
  if (foreign.length > 0)
    throw new StorageOpenError(
      `${file} holds what petstore does not create (${listed(foreign)}); ` +
        'refusing to use it: restore a backup made with petstore backup, or remove them with the sqlite3 shell',
    )
  if (altered.length > 0)
    throw new StorageOpenError(
      `${file} holds petstore's ${listed(altered)} made otherwise than petstore makes it (schema ${version}); ` +
        'refusing to use it: restore a backup made with petstore backup',
    )
}

export function prepare(db: Database, file: string, options: OpenOptions & { readOnly: boolean }): void {
  // Wait for the other process (server or CLI) instead of failing at once when both write.
  db.run(`PRAGMA busy_timeout = ${options.busyTimeoutMs ?? SERVING_BUSY_MS}`)
  if (options.verify) checkWhole(db, file, RESTORE_REMEDY)
  const version = checkSchema(db, file)
  const older = options.olderSchema ?? 'upgrade'
  if (version < MIGRATIONS.length && older === 'refuse') throw olderSchemaRefused(file, version, MIGRATIONS.length)
  // Kept as it is, a file no petstore ever wrote (an empty one) has nothing to keep: no table to read or copy.
  if (version === 0 && older === 'keep')
    throw new StorageOpenError(
      `${file} holds no petstore data (no schema yet); start the server once on it, or name the data file with --data`,
    )
  if (options.readOnly) {
    if (version < MIGRATIONS.length && older === 'upgrade')
      throw new StorageOpenError(`${file} is read-only and needs its schema brought up to date; make it writable once`)
    return
  }
  // WAL lets the CLI and backups read while the server writes; FULL makes every commit survive power loss
  // before we answer 201.
  db.run('PRAGMA journal_mode = WAL')
  db.run('PRAGMA synchronous = FULL')
  if (older === 'keep') return
  for (let next = version; next < MIGRATIONS.length; next++) {
    db.transaction(() => {
      db.run(MIGRATIONS[next]!)
      db.run(`PRAGMA application_id = ${APPLICATION_ID}`)
      db.run(`PRAGMA user_version = ${next + 1}`)
    })()
  }
}
