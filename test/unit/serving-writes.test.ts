/**
 * A serving process's writes to the data file (storage/sqlite/runner.ts, ServingSqliteRunner), over a
 * real SQLite file with another connection holding its write lock: writes wait for the lock without
 * stopping the event loop, however many wait, are made in the order given once the lock is let go, and
 * fail as a blocked write does when the lock stays held past their patience. With the lock free a
 * write answers at once.
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
  const runner = new ServingSqliteRunner(db)
  const insert = (x: number) =>
    runner.write(function* () {
      return yield* changes(sql`INSERT INTO t VALUES (${x})`)
    })
  const count = () => runner.read(() => rows<{ n: number }>(sql`SELECT count(*) AS n FROM t`))[0]!.n
  const order = () => runner.read(() => rows<{ x: number }>(sql`SELECT x FROM t ORDER BY rowid`)).map((row) => row.x)
  return { other, insert, count, order }
}

/**
 * The event loop's turns in `ms`, and the longest it went without one: a loop held by a waiting write
 * (each try may block it 10 ms) still turns hundreds of times; one held by a busy_timeout wait turns once.
 */
async function loopWithin(ms: number): Promise<{ turns: number; longestMs: number }> {
  let last = performance.now()
  const until = last + ms
  let turns = 0
  let longestMs = 0
  while (performance.now() < until) {
    await new Promise((resolve) => setImmediate(resolve))
    const now = performance.now()
    longestMs = Math.max(longestMs, now - last)
    last = now
    turns++
  }
  return { turns, longestMs }
}

test('with the write lock free, a write answers at once', () => {
  const { insert, count } = dataFile(5_000)
  expect(insert(1)).toBe(1)
  expect(count()).toBe(1)
})

test('writes wait for a lock another connection holds without stopping the event loop, and are made in order once it is let go', async () => {
  const { other, insert, count, order } = dataFile(5_000)
  other.run('BEGIN IMMEDIATE')
  const written = [1, 2, 3, 4, 5].map(insert)
  try {
    for (const write of written) expect(write).toBeInstanceOf(Promise)
    expect((await loopWithin(300)).turns).toBeGreaterThan(50)
    expect(count()).toBe(0)
  } finally {
    other.run('COMMIT')
  }
  expect(await Promise.all(written)).toEqual([1, 1, 1, 1, 1])
  // A write given while another waits goes after it, even with the lock free by then.
  other.run('BEGIN IMMEDIATE')
  const held = insert(6)
  other.run('COMMIT')
  const after = insert(7)
  expect(after).toBeInstanceOf(Promise)
  await Promise.all([held, after])
  expect(order()).toEqual([1, 2, 3, 4, 5, 6, 7])
})

test('a write whose lock stays held past its patience fails as a blocked write does, and writes nothing', async () => {
  const { other, insert, count } = dataFile(300)
  other.run('BEGIN IMMEDIATE')
  const started = performance.now()
  const failed = await Promise.resolve(insert(7)).catch((error: unknown) => error)
  expect(performance.now() - started).toBeGreaterThanOrEqual(290)
  expect(failed).toBeInstanceOf(StorageUnavailableError)
  expect((failed as Error).message).toBe(
    'the data file cannot be written now: another process held its write lock each time this one tried (SQLITE_BUSY)',
  )
  other.run('COMMIT')
  expect(count()).toBe(0)
})

test('writes that wait past their patience together fail without a try each, so they do not hold the event loop', async () => {
  const { other, insert, count } = dataFile(300)
  other.run('BEGIN IMMEDIATE')
  const written = Array.from({ length: 50 }, (_, i) => Promise.resolve(insert(i)).catch((error: unknown) => error))
  // The longest the loop went without a turn while they waited and failed: a try of each (10 ms) would
  // hold it half a second as they end.
  const { longestMs: longest } = await loopWithin(600)
  const failed = await Promise.all(written)
  other.run('COMMIT')
  expect(longest).toBeLessThan(200)
  for (const error of failed) expect((error as Error).message).toContain('another process held its write lock')
  expect(count()).toBe(0)
})
