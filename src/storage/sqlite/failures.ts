/** SQLite's error codes, told apart: "cannot read or write now" (503), "the file is damaged", and bugs. */
import type { Database } from 'bun:sqlite'
import { StorageDamagedError, StorageUnavailableError } from '../../domain/repositories'

/** Error codes that mean "cannot read or write now" rather than "bug": they become 503, not 500. */
const UNAVAILABLE_CODES = /^SQLITE_(FULL|READONLY|IOERR|CANTOPEN|BUSY|LOCKED|PERM)/

/** Codes SQLite gives when what it read is not a valid database: the file is damaged. */
const DAMAGED_CODES = /^SQLITE_(CORRUPT|NOTADB)/

/**
 * Reads go through here: a damaged file, and one that cannot be read now (an I/O error, as when the file
 * was deleted and another made beside its WAL), are told apart from a bug: a 503, never a 500; and a
 * token looked up then is not called unknown.
 */
export function reading<T>(read: () => T): T {
  try {
    return read()
  } catch (error) {
    throw classified(error, 'read')
  }
}

/** SQLite's code when a read or write met a page that is not valid (the file is damaged), else undefined. */
export function damagedCode(error: unknown): string | undefined {
  if (error instanceof StorageDamagedError) return error.code
  const code = (error as { code?: string })?.code ?? ''
  return DAMAGED_CODES.test(code) ? code : undefined
}

/**
 * A failed `read` or write as StorageUnavailableError when the file cannot be used now (a read that
 * cannot be made is storage down: reads fail as well), StorageDamagedError when it is damaged; otherwise
 * as it was.
 */
export function classified(error: unknown, failed: 'read' | 'write' = 'write'): unknown {
  const code = (error as { code?: string })?.code ?? ''
  const down = failed === 'read'
  if (UNAVAILABLE_CODES.test(code)) {
    // Said, as a command waits a minute in silence before it gives up.
    const why = !down && /^SQLITE_BUSY(_TIMEOUT)?$/.test(code) ? ': another process held its write lock each time this one tried' : ''
    return new StorageUnavailableError(code, `the data file cannot be ${down ? 'read' : 'written'} now${why} (${code})`, down)
  }
  return DAMAGED_CODES.test(code) ? new StorageDamagedError(code) : error
}

/** A write in one immediate transaction (it holds the file's write lock), its failure told apart as above. */
export function writing<T>(db: Database, work: () => T): T {
  try {
    return db.transaction(work).immediate()
  } catch (error) {
    throw classified(error)
  }
}
