/**
 * How a write that could not be made reads (storage/sqlite/failures.ts), over a real SQLite file: one
 * that waited out another connection's write lock says so, where a command gives up after a minute.
 */
import { Database } from 'bun:sqlite'
import { expect, test } from 'bun:test'
import { join } from 'node:path'
import { StorageUnavailableError } from '../../src/domain/repositories'
import { writing } from '../../src/storage/sqlite/failures'
import { tempDir } from '../support/binary'

test('a write that waited out another write lock says another process held it', () => {
  const file = join(tempDir(), 'busy.db')
  const holder = new Database(file, { create: true })
  holder.run('PRAGMA journal_mode = WAL')
  holder.run('CREATE TABLE t (x)')
  holder.run('BEGIN IMMEDIATE')
  const waiter = new Database(file)
  waiter.run('PRAGMA busy_timeout = 0')
  try {
    let failed: unknown
    try {
      writing(waiter, () => waiter.run('INSERT INTO t VALUES (1)'))
    } catch (error) {
      failed = error
    }
    expect(failed).toBeInstanceOf(StorageUnavailableError)
    expect((failed as Error).message).toBe(
      'the data file cannot be written now: another process held its write lock each time this one tried (SQLITE_BUSY)',
    )
  } finally {
    waiter.close()
    holder.run('ROLLBACK')
    holder.close()
  }
})
