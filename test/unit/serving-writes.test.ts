/**
 * A serving process's writes to the data file (storage/sqlite/runner.ts, ServingSqliteRunner), over a
 * real SQLite file with another connection holding its write lock: the write waits for the lock without
 * stopping the event loop, is made once the lock is let go, and fails as a blocked write does when the
 * lock stays held past its patience. With the lock free it answers at once.
 */
import { Database } from 'bun:sqlite'
import { afterEach, expect, test } from 'bun:test'
import { join } from 'node:path'
import { StorageUnavailableError } from '../../src/domain/repositories'
import { changes, rows, sql } from '../../src/storage/shared/sql'
import { ServingSqliteRunner } from '../../src/storage/sqlite/runner'
import { tempDir } from '../support/binary'

const open: Database[] = []
afterEach(() => {
  for (const db of open.splice(0)) db.close()
})

/** The server's connection and its runner, and another connection that can hold the write lock. */
function dataFile(patienceMs: number) {
  const file = join(tempDir(), 'serving.db')
  const other = new Database(file, { create: true })
  other.run('PRAGMA journal_mode = WAL')
  other.run('CREATE TABLE t (x)')
  const db = new Database(file)
  db.run(`PRAGMA busy_timeout = ${patienceMs}`)
  open.push(db, other)
  const runner = new ServingSqliteRunner(db, patienceMs)
  const insert = (x: number) =>
    runner.write(function* () {
      return yield* changes(sql`INSERT INTO t VALUES (${x})`)
    })
  const count = () => runner.read(() => rows<{ n: number }>(sql`SELECT count(*) AS n FROM t`))[0]!.n
  return { other, insert, count }
}

/** Milliseconds past `ms` that a timer set now fires: how long the event loop was kept from it. */
function lateness(ms: number): Promise<number> {
  const at = performance.now()
  return new Promise((resolve) => setTimeout(() => resolve(performance.now() - at - ms), ms))
}

test('with the write lock free, a write answers at once', () => {
  const { insert, count } = dataFile(5_000)
  expect(insert(1)).toBe(1)
  expect(count()).toBe(1)
})

test('a write waits for a lock another connection holds without stopping the event loop, and is made once it is let go', async () => {
  const { other, insert, count } = dataFile(5_000)
  other.run('BEGIN IMMEDIATE')
  const written = insert(7)
  expect(written).toBeInstanceOf(Promise)
  // Timers keep firing while the write waits: each try blocks for 10 ms at most.
  const late = await Promise.all([lateness(50), lateness(150), lateness(300)])
  expect(Math.max(...late)).toBeLessThan(40)
  expect(count()).toBe(0)
  other.run('COMMIT')
  expect(await written).toBe(1)
  expect(count()).toBe(1)
})

test('a write whose lock stays held past its patience fails as a blocked write does, and writes nothing', async () => {
  const { other, insert, count } = dataFile(300)
  other.run('BEGIN IMMEDIATE')
  const started = performance.now()
  const failed = await Promise.resolve(insert(7)).catch((error: unknown) => error)
  expect(performance.now() - started).toBeGreaterThanOrEqual(300)
  expect(failed).toBeInstanceOf(StorageUnavailableError)
  expect((failed as Error).message).toBe(
    'the data file cannot be written now: another process held its write lock each time this one tried (SQLITE_BUSY)',
  )
  other.run('COMMIT')
  expect(count()).toBe(0)
})
