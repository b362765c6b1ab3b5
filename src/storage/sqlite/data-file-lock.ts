/**
 * One server per data file. Two servers on one file would each cache pages and count limits as if
 * alone, so the second would serve stale pages and hand out limits twice. The server holds an
 * exclusive lock on a small companion database (`FILE.lock`) for its whole life; SQLite takes it with
 * the operating system's file locks, which every platform drops when the process ends, `kill -9`
 * included, so a crash never leaves a stale lock. Key commands and backups do not take it.
 */
import { Database } from 'bun:sqlite'
import { accessSync, constants, existsSync } from 'node:fs'
import { dirname } from 'node:path'
import { StorageOpenError } from '../../domain/repositories'

export interface DataFileLock {
  release(): void
}

export function lockFileOf(file: string): string {
  return `${file}.lock`
}

/**
 * Takes the lock, or throws when another server holds it. Returns null when the folder cannot be
 * written: such a file is served read-only, and read-only servers cannot disagree about writes.
 */
export function lockDataFile(file: string): DataFileLock | null {
  const path = lockFileOf(file)
  if (!canWrite(existsSync(path) ? path : dirname(file))) return null
  const db = new Database(path, { create: true, strict: true })
  try {
    // Exclusive locking mode keeps the lock of the first exclusive transaction until the connection
    // closes; the transaction writes nothing, so a full disk cannot stop a restart here.
    db.run('PRAGMA busy_timeout = 0')
    db.run('PRAGMA locking_mode = EXCLUSIVE')
    db.run('BEGIN EXCLUSIVE')
    db.run('COMMIT')
  } catch (error) {
    db.close()
    if (/^SQLITE_BUSY/.test((error as { code?: string }).code ?? ''))
      throw new StorageOpenError(
        `${file} is already served by another petstore; stop that one first`,
      )
    throw new StorageOpenError(`cannot lock ${file} for serving: ${(error as Error).message}`)
  }
  return { release: () => db.close() }
}

function canWrite(path: string): boolean {
  try {
    accessSync(path, constants.W_OK)
    return true
  } catch {
    return false
  }
}
