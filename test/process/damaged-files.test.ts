/**
 * Data files that are not ours or not whole: the server and the CLI refuse them with one clear line,
 * no stack trace, never start on an empty store, and leave the file as it was.
 */
import { Database } from 'bun:sqlite'
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import {
  closeSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  openSync,
  readFileSync,
  statSync,
  truncateSync,
  writeFileSync,
  writeSync,
} from 'node:fs'
import { join } from 'node:path'
import { cli, startServer, tempDir } from '../support/binary'
import { killSpawned, looksLikeStackTrace, postPet, serveExpectingFailure } from './helpers'

afterAll(killSpawned)
// Process tests wait on real processes; bunfig's [test] timeout is not applied by bun test 1.4.
setDefaultTimeout(20_000)

/** A real petstore data file with some pets, closed cleanly (checkpointed: no -wal beside it). */
let realFile: string
let realKey: string
beforeAll(async () => {
  realFile = join(tempDir(), 'real.db')
  // With the console, so that the file holds its first operator too (a password reset below).
  const server = await startServer({ dataFile: realFile, console: true })
  realKey = server.bootstrapKey!
  for (let i = 0; i < 60; i++)
    expect((await postPet(server.base, server.bootstrapKey!, { name: `pet ${i} ${'x'.repeat(100)}`, categoryId: i })).status).toBe(201)
  expect(await server.stop()).toBe(0)
  expect(existsSync(`${realFile}-wal`) && statSync(`${realFile}-wal`).size > 0).toBe(false)
})

/** A copy of the real file with the first page of one table overwritten: the open's checks still pass. */
function damagedCopy(name: string, table: string): string {
  const file = join(tempDir(), name)
  copyFileSync(realFile, file)
  const db = new Database(file, { readonly: true })
  const { rootpage } = db.query<{ rootpage: number }, [string]>('SELECT rootpage FROM sqlite_schema WHERE name = ?').get(table)!
  const { page_size: pageSize } = db.query<{ page_size: number }, []>('PRAGMA page_size').get()!
  db.close()
  const fd = openSync(file, 'r+')
  writeSync(fd, new Uint8Array(pageSize).fill(0xa5), 0, pageSize, (rootpage - 1) * pageSize)
  closeSync(fd)
  return file
}

const lastLine = (text: string) => text.trimEnd().split('\n').at(-1)

function expectOneLineRefusal(result: { code: number; stderr: string }, reason: RegExp) {
  expect(result.code).not.toBe(0)
  expect(looksLikeStackTrace(result.stderr)).toBe(false)
  const lines = result.stderr.trimEnd().split('\n')
  expect(lines).toHaveLength(1)
  expect(lines[0]).toMatch(/^petstore: /)
  expect(lines[0]).toMatch(reason)
}

async function expectRefusedEverywhere(file: string, reason: RegExp) {
  const before = readFileSync(file)
  const served = await serveExpectingFailure(['--port', '0', '--host', '127.0.0.1', '--data', file])
  expect(served.listened).toBe(false)
  expect(served.stderr).not.toMatch(/psk_/)
  expectOneLineRefusal(served, reason)
  for (const args of [
    ['keys', 'list', '--data', file],
    ['keys', 'create', '--plan', 'pro', '--data', file],
    ['backup', join(tempDir(), 'copy.db'), '--data', file],
  ]) {
    const result = cli(args)
    expect(result.stdout).toBe('')
    expectOneLineRefusal(result, reason)
  }
  // Nothing was written to it: not migrated, not emptied, not "repaired".
  expect(readFileSync(file).equals(before)).toBe(true)
}

describe('refused data files', () => {
  test('a file that is not SQLite (random bytes)', async () => {
    const file = join(tempDir(), 'random.db')
    writeFileSync(file, crypto.getRandomValues(new Uint8Array(64 * 1024)))
    await expectRefusedEverywhere(file, /random\.db.*not .*(SQLite|petstore)/i)
  })

  test('a file with the SQLite header followed by garbage', async () => {
    const file = join(tempDir(), 'garbage.db')
    const bytes = crypto.getRandomValues(new Uint8Array(64 * 1024))
    bytes.set(new TextEncoder().encode('SQLite format 3\0'))
    writeFileSync(file, bytes)
    await expectRefusedEverywhere(file, /garbage\.db/)
  })

  test('a foreign SQLite database (another application’s tables)', async () => {
    const file = join(tempDir(), 'foreign.db')
    const db = new Database(file)
    db.run('CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)')
    db.run("INSERT INTO customers (name) VALUES ('Ada'), ('Grace')")
    db.close()
    await expectRefusedEverywhere(file, /foreign\.db.*(not create|refus|foreign|not a petstore)/i)
    const check = new Database(file, { readonly: true })
    expect(check.query('SELECT name FROM sqlite_schema').all()).toEqual([{ name: 'customers' }])
    expect(check.query('PRAGMA user_version').get()).toEqual({ user_version: 0 })
    check.close()
  })

  test('a petstore file truncated to half its size', async () => {
    const file = join(tempDir(), 'truncated.db')
    copyFileSync(realFile, file)
    const size = statSync(file).size
    expect(size).toBeGreaterThan(8192)
    truncateSync(file, Math.floor(size / 2))
    await expectRefusedEverywhere(file, /truncated\.db.*(damaged|malformed|corrupt)/i)
  })

  test('a petstore file written by a newer version', async () => {
    const file = join(tempDir(), 'newer.db')
    copyFileSync(realFile, file)
    const db = new Database(file)
    db.run('PRAGMA user_version = 99')
    db.close()
    await expectRefusedEverywhere(file, /newer\.db.*newer/i)
  })

  test('a page found damaged after the open: exit 1 with the file and the remedy, not an unexpected error', async () => {
    const keyTable = damagedCopy('keys-page.db', 'api_keys')
    const damaged = new RegExp(`^petstore: ${keyTable} is damaged \\(SQLITE_CORRUPT\\); restore it from a backup$`)
    // The reports' headings come after the reads: the refusal is the only line.
    for (const report of [['list'], ['usage']]) {
      const listed = cli(['keys', ...report, '--data', keyTable])
      expect([listed.code, listed.stdout]).toEqual([1, ''])
      expectOneLineRefusal(listed, damaged)
    }
    // A backup reads every page: the fault is the data file's, not the backup's, and no copy is left.
    const copy = join(tempDir(), 'copy.db')
    const backedUp = cli(['backup', copy, '--data', keyTable])
    expectOneLineRefusal(backedUp, damaged)
    expect([backedUp.code, existsSync(copy)]).toEqual([1, false])

    // The key is written before its audit record: it was made, so its secret is still printed.
    const auditTable = damagedCopy('audit-page.db', 'audit_log')
    const created = cli(['keys', 'create', '--plan', 'pro', '--data', auditTable])
    expect(created.code).toBe(1)
    expect(created.stdout).toMatch(/^psk_\S+\n$/)
    expect(lastLine(created.stderr)).toBe(`petstore: ${auditTable} is damaged (SQLITE_CORRUPT); restore it from a backup`)

    // So is a new password: admin is not locked out by a reset whose audit record failed.
    const reset = cli(['operators', 'reset-password', 'admin', '--data', auditTable])
    expect(reset.code).toBe(1)
    expect(reset.stdout).toMatch(/^[A-Za-z0-9_-]{22}\n$/)
    const db = new Database(auditTable, { readonly: true })
    const { password_hash: hash } = db
      .query<{ password_hash: string }, []>("SELECT password_hash FROM operators WHERE name = 'admin'")
      .get()!
    db.close()
    expect(await Bun.password.verify(reset.stdout.trim(), hash)).toBe(true)
  })

  test('the untouched original still starts, with its pets (the fixtures above are fair)', async () => {
    const file = join(tempDir(), 'copy.db')
    copyFileSync(realFile, file)
    const server = await startServer({ dataFile: file })
    expect(server.bootstrapKey).toBeUndefined()
    const response = await fetch(`${server.base}/pets?limit=100`, { headers: { authorization: `Bearer ${realKey}` } })
    expect(response.status).toBe(200)
    expect(await response.json()).toHaveLength(60)
    expect(await server.stop()).toBe(0)
  })
})

describe('unusable data paths', () => {
  test('--data naming a directory: one line, no stack trace', async () => {
    const dir = join(tempDir(), 'a-directory.db')
    mkdirSync(dir)
    const served = await serveExpectingFailure(['--port', '0', '--host', '127.0.0.1', '--data', dir])
    expect(served.listened).toBe(false)
    expectOneLineRefusal(served, /a-directory\.db/)
    expectOneLineRefusal(cli(['keys', 'list', '--data', dir]), /a-directory\.db/)
  })

  test('--data under a regular file: one line, no stack trace', async () => {
    const file = join(tempDir(), 'plain-file')
    writeFileSync(file, 'x')
    const served = await serveExpectingFailure(['--port', '0', '--host', '127.0.0.1', '--data', join(file, 'petstore.db')])
    expect(served.listened).toBe(false)
    expectOneLineRefusal(served, /plain-file/)
    expectOneLineRefusal(cli(['keys', 'create', '--plan', 'pro', '--data', join(file, 'petstore.db')]), /plain-file/)
  })

  test('--data in a folder that takes no new file (/proc): exit 1 with one line, not an unexpected error', async () => {
    const served = await serveExpectingFailure(['--port', '0', '--host', '127.0.0.1', '--data', '/proc/petstore-test.db'])
    expect([served.listened, served.code]).toEqual([false, 1])
    expectOneLineRefusal(served, /cannot create the lock file \/proc\/petstore-test\.db\.lock/)
  })

  test('backup of an empty (0-byte) file: exit 1 with one line, and no copy written', () => {
    const file = join(tempDir(), 'empty.db')
    writeFileSync(file, '')
    const copy = join(tempDir(), 'copy.db')
    const result = cli(['backup', copy, '--data', file])
    expect(result.code).toBe(1)
    expectOneLineRefusal(result, /empty\.db holds no petstore data/)
    expect(existsSync(copy)).toBe(false)
  })
})
