/**
 * One server per data file: two would each cache pages and count limits as if alone. The server holds
 * an exclusive lock on a companion database (`FILE.lock`) for its life, taken with the system's file
 * locks, which end with the process (`kill -9` included), so a crash leaves no stale lock; key
 * commands and backups do not take it. The holder's pid is in the lock file's header (user_version),
 * which `serve --takeover` reads with a plain read (the locks are advisory) to find whom to ask.
 */
import { Database } from 'bun:sqlite'
import { closeSync, existsSync, lstatSync, openSync, readlinkSync, realpathSync } from 'node:fs'
import { basename, dirname, join, resolve } from 'node:path'
import { StorageOpenError } from '../../domain/repositories'
import { opening } from '../shared/open-errors'
import { canWrite, identityOf, readBytes } from './open'

export interface DataFileLock {
  release(): void
}

/** A server's lock, which it keeps: see keep. */
export interface ServerLock extends DataFileLock {
  /**
   * Whether the lock file at its path is still the one held. One deleted (or replaced) under a running
   * server would let a second server start: it is made and taken again at once ('taken again'), unless
   * another process holds it there already ('lost'); throws when it cannot be made.
   */
  keep(): 'kept' | 'taken again' | 'lost'
}

/** Another server holds the lock: the one `--takeover` asks to hand over. */
export class DataFileBusyError extends StorageOpenError {}

/** Links followed to a file not made yet before giving up (as the system's own limit, ELOOP). */
const MAX_LINKS = 40

/**
 * The data file's own path, whatever name it was given by: symbolic links on the way resolved, so every
 * name of one file finds the one lock beside it (and the one claim and handover: handover.ts). A file not
 * made yet resolves as far as it can: a link to it is followed to where SQLite would make it, and its
 * folders as far as they exist. A path that cannot be resolved (a loop, a folder that cannot be entered)
 * is left as given, for the open to report. (Hard links are refused where the file is opened.)
 */
export function dataFilePath(file: string, links = 0): string {
  const path = resolve(file)
  try {
    return realpathSync(path)
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code
    if ((code !== 'ENOENT' && code !== 'ENOTDIR') || links > MAX_LINKS) return path
  }
  const folder = dirname(path)
  if (folder === path) return path
  // A relative target is read from the link's own folder as the system finds it (its links resolved), not as spelled.
  if (isLink(path)) return dataFilePath(resolve(dataFilePath(folder, links), readlinkSync(path)), links + 1)
  return join(dataFilePath(folder, links), basename(path))
}

function isLink(path: string): boolean {
  try {
    return lstatSync(path).isSymbolicLink()
  } catch {
    return false
  }
}

export function lockFileOf(file: string): string {
  return `${file}.lock`
}

/**
 * Takes the lock, or throws when another server holds it. Returns null when the folder cannot be
 * written: such a file is served read-only, and read-only servers cannot disagree about writes.
 */
export function lockDataFile(file: string): ServerLock | null {
  const path = lockFileOf(file)
  if (!canWrite(existsSync(path) ? path : dirname(file))) return null
  const what = `${file} for serving`
  const first = lockNamed(path, what)
  if (first === 'busy') throw new DataFileBusyError(`${file} is in use by ${holderOf(file)} (a server, or a restore); stop it first`)
  let { lock: held, identity } = first
  return {
    release: () => held.release(),
    keep: () => {
      if (identityOf(path) === identity) return 'kept'
      // Throws when it cannot be made now (the folder's permissions changed): asked again at the next look.
      const again = lockNamed(path, what)
      if (again === 'busy') return 'lost'
      held.release()
      held = again.lock
      identity = again.identity
      return 'taken again'
    },
  }
}

/**
 * lockExclusively, with the file the lock is on: the one the path names before and after it is taken
 * (a file deleted and made again meanwhile, by a second server, would pass for held). Tried a few
 * times while the path keeps changing, then 'busy': something keeps replacing it.
 */
function lockNamed(path: string, what: string): { lock: DataFileLock; identity: string } | 'busy' {
  for (let tries = 0; tries < 5; tries++) {
    // Made first (owner-only, as lockExclusively makes it), so that it has an identity before it is taken.
    opening(`cannot create the lock file ${path}`, () => {
      if (!existsSync(path)) closeSync(openSync(path, 'a', 0o600))
    })
    const before = identityOf(path)
    const lock = lockExclusively(path, { recordPid: true, what })
    if (lock === 'busy') return 'busy'
    if (before !== null && identityOf(path) === before) return { lock, identity: before }
    lock.release()
  }
  return 'busy'
}

/**
 * An exclusive lock on the companion database at `path` (created if missing), held until released or
 * until this process ends; 'busy' while another connection holds it. With `recordPid`, the holder's pid
 * goes into the header (see recordedPid); without, the header is left as it is.
 */
export function lockExclusively(path: string, options: { recordPid: boolean; what: string }): DataFileLock | 'busy' {
  // A folder whose mode allows writing can still refuse a new file (/proc, a full inode table). Made
  // owner-only first, like the data file (SQLite would make it with the process's umask).
  const db = opening(`cannot create the lock file ${path}`, () => {
    if (!existsSync(path)) closeSync(openSync(path, 'a', 0o600))
    return new Database(path, { create: true, strict: true })
  })
  try {
    // Exclusive locking mode keeps the lock of the first exclusive transaction until the connection
    // closes. The transaction only rewrites the header's process id in place, with its journal in
    // memory (Bun's defensive mode refuses journal_mode OFF), so a full disk cannot stop a restart here.
    // Without a pid to record the transaction stays open, and the lock with it, until the close.
    db.run('PRAGMA busy_timeout = 0')
    db.run('PRAGMA journal_mode = MEMORY')
    db.run('PRAGMA locking_mode = EXCLUSIVE')
    db.run('BEGIN EXCLUSIVE')
    if (options.recordPid) {
      db.run(`PRAGMA user_version = ${process.pid}`)
      db.run('COMMIT')
    }
  } catch (error) {
    db.close()
    if (/^SQLITE_BUSY/.test((error as { code?: string }).code ?? '')) return 'busy'
    throw new StorageOpenError(`cannot lock ${options.what}: ${(error as Error).message}`)
  }
  return { release: () => db.close() }
}

/**
 * lockExclusively tried every 5 ms while the lock is busy and `worthWaiting` says so, for up to `ms`;
 * 'busy' after. It blocks: for holders that are going within milliseconds.
 */
export function lockExclusivelyWithin(
  path: string,
  options: { recordPid: boolean; what: string },
  ms: number,
  worthWaiting: () => boolean = () => true,
): DataFileLock | 'busy' {
  const deadline = Date.now() + ms
  for (;;) {
    const lock = lockExclusively(path, options)
    if (lock !== 'busy' || Date.now() > deadline || !worthWaiting()) return lock
    Bun.sleepSync(5)
  }
}

/** Who holds the lock, in words: its process id when it wrote one. */
function holderOf(file: string): string {
  const pid = lockHolder(file)
  return pid === null ? 'another petstore' : `petstore process ${pid}`
}

/** The process id the lock's holder wrote (user_version, bytes 60-63 of the header); null when none. */
export function lockHolder(file: string): number | null {
  return recordedPid(lockFileOf(file))
}

/** The same for any lock taken with `recordPid`. */
export function recordedPid(path: string): number | null {
  if (!existsSync(path)) return null
  const header = readBytes(path, 60, 4)
  const pid = header.length < 4 ? 0 : header.readUInt32BE(0)
  return pid > 0 ? pid : null
}

/**
 * Takes the lock once its holder has let it go, trying every 20 ms for up to `ms`; the last refusal
 * after that. For the server that takes over: the old one releases the lock as its last act.
 */
export async function lockDataFileWhenFree(file: string, ms: number): Promise<ServerLock | null> {
  const deadline = Date.now() + ms
  for (;;) {
    try {
      return lockDataFile(file)
    } catch (error) {
      if (!(error instanceof DataFileBusyError)) throw error
      if (Date.now() > deadline)
        throw new DataFileBusyError(
          `cannot take over: ${file} was not let go within ${Math.round(ms / 1000)} s (is the running server stopped, by SIGSTOP or a frozen machine?); ` +
            'the takeover is withdrawn, so it keeps serving once it runs',
        )
    }
    await Bun.sleep(20)
  }
}
