/**
 * The data file taken away or damaged under a running binary: readiness and creates turn to 503 with
 * one log line, and no create is acknowledged into a file nobody will open again.
 */
import { Database } from 'bun:sqlite'
import { describe, expect, test } from 'bun:test'
import { closeSync, openSync, renameSync, rmSync, statSync, writeSync } from 'node:fs'
import { join } from 'node:path'
import { encodeCursor } from '../../src/modules/pets/cursor'
import { auth, postPet } from '../support/app'
import { createKeyWithCli, eventually, startServer, tempDir } from '../support/binary'
import { startWithConsole } from '../process/helpers'

const signInAsAdmin = (origin: string, password: string) =>
  fetch(`${origin}/api/session`, {
    method: 'POST',
    headers: { origin, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'admin', password }),
  })

describe('a data file lost or damaged while serving', () => {
  for (const how of ['deleted', 'replaced'] as const) {
    test(`${how}: /readyz and creates answer 503, one log line, nothing acknowledged after`, async () => {
      const server = await startServer()
      const key = server.bootstrapKey!
      expect((await postPet(server.base, key, { name: 'before', categoryId: 1 })).status).toBe(201)
      if (how === 'deleted') for (const suffix of ['', '-wal', '-shm']) rmSync(server.dataFile + suffix, { force: true })
      else {
        const other = join(tempDir(), 'other.db')
        new Database(other, { create: true }).close()
        renameSync(other, server.dataFile)
      }
      // A create sent at once is refused too: the file is checked around every batch, not only by the poll.
      const right = await postPet(server.base, key, { name: 'after', categoryId: 1 })
      expect(right.status).toBe(503)
      expect(((await right.json()) as { code: string }).code).toBe('unavailable')
      await eventually(async () => (await fetch(`${server.origin}/readyz`)).status === 503, 2_000)
      expect((await fetch(`${server.origin}/healthz`)).status).toBe(200)
      await server.said('the data file was deleted or replaced under the server')
      expect(server.stderr().match(/the data file was deleted or replaced under the server/g)).toHaveLength(1)
      // What was there is still served from the open file.
      expect(((await (await fetch(`${server.base}/pets`, { headers: auth(key) })).json()) as unknown[]).length).toBe(1)
      expect(await server.stop()).toBe(0)
    })
  }

  test('deleted, and another made at its path beside its WAL: reads it cannot make are 503, never 500, and a token looked up then is not called unknown', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const key = createKeyWithCli(dataFile, ['--plan', 'business'])
    const server = await startServer({ dataFile })
    expect((await postPet(server.base, key, { name: 'before', categoryId: 1 })).status).toBe(201)
    // Only the file goes; the CLI then makes a new one at its path, beside the old -wal and -shm, which
    // the server's connection still shares: its reads meet an I/O error (SQLITE_IOERR) from then on.
    rmSync(dataFile)
    createKeyWithCli(dataFile, ['--plan', 'pro'])
    await eventually(async () => (await fetch(`${server.origin}/readyz`)).status === 503, 2_000)
    // A secret of the right shape the server has not seen: it is looked for in storage.
    const unseen = createKeyWithCli(join(tempDir(), 'elsewhere.db'), ['--plan', 'pro'])
    for (const [path, secret] of [
      ['/pets/500', key],
      ['/pets?limit=7', key],
      ['/pets', unseen],
    ] as const) {
      const answer = await fetch(`${server.base}${path}`, { headers: auth(secret) })
      const body = (await answer.json()) as { code: string; message: string }
      expect(`${path} ${answer.status} ${body.code} ${body.message}`).toBe(
        `${path} 503 unavailable Storage does not answer now; try again shortly.`,
      )
    }
    expect(server.stderr()).not.toContain('internal error')
    // Its last writes cannot be made either: it says so, and exits 1.
    expect(await server.stop()).toBe(1)
    expect(server.stderr()).toContain('stopped without them')
  })

  test('replaced: the console refuses key changes with 503, as creates are refused; reads and signing out go on', async () => {
    const server = await startWithConsole()
    const ask = async (method: string, path: string, cookie: string, body?: unknown) =>
      fetch(`${server.console}${path}`, {
        method,
        headers: { origin: server.console, cookie, ...(body ? { 'content-type': 'application/json' } : {}) },
        body: body ? JSON.stringify(body) : undefined,
      })
    const cookie = (await signInAsAdmin(server.console, server.password)).headers.get('set-cookie')!.split(';')[0]!
    const { key } = (await (await ask('POST', '/api/keys', cookie, { plan: 'pro' })).json()) as { key: { id: string } }
    renameSync(server.dataFile, join(tempDir(), 'moved.db'))

    for (const [method, path, body] of [
      ['POST', '/api/keys', { plan: 'pro' }],
      ['DELETE', `/api/keys/${key.id}`],
      ['PUT', `/api/keys/${key.id}/plan`, { plan: 'free' }],
      ['POST', `/api/keys/${key.id}/reset-limits`],
    ] as const) {
      const refused = await ask(method, path, cookie, body)
      expect([method, path, refused.status]).toEqual([method, path, 503])
      expect(((await refused.json()) as { message: string }).message).toContain('the data file was deleted or replaced under the server')
    }
    expect((await ask('GET', '/api/keys', cookie)).status).toBe(200)
    expect((await ask('DELETE', '/api/session', cookie)).status).toBe(204)
    await server.said('the data file was deleted or replaced under the server')
    expect(server.stderr().match(/the data file was deleted or replaced under the server/g)).toHaveLength(1)
    expect(await server.stop()).toBe(0)
  })

  test('damaged: a list that hits a broken page is a 503 and /readyz turns 503', async () => {
    const dir = tempDir()
    const dataFile = join(dir, 'petstore.db')
    const key = createKeyWithCli(dataFile, ['--plan', 'enterprise', '--rpm', '1000000', '--rpd', '1000000'])
    // More pets than SQLite's page cache holds, so reads deep in the table go to the disk.
    const db = new Database(dataFile)
    db.transaction(() => {
      const insert = db.query('INSERT INTO pets (name, category_id, status, created_at) VALUES (?, 1, ?, 0)')
      for (let i = 0; i < 60_000; i++) insert.run(`${i}-${'x'.repeat(180)}`, 'available')
    })()
    db.run('PRAGMA wal_checkpoint(TRUNCATE)')
    db.close()
    const server = await startServer({ dataFile })
    const size = statSync(dataFile).size
    const fd = openSync(dataFile, 'r+')
    writeSync(fd, Buffer.alloc(size / 2, 0xa5), 0, size / 2, Math.floor(size / 4 / 4096) * 4096)
    closeSync(fd)
    const deep = await fetch(`${server.base}/pets?limit=100&cursor=${encodeCursor(30_000)}`, { headers: auth(key) })
    expect(deep.status).toBe(503)
    expect(((await deep.json()) as { code: string }).code).toBe('unavailable')
    expect((await fetch(`${server.origin}/readyz`)).status).toBe(503)
    await server.said('the data file is damaged (SQLITE_CORRUPT')
    expect(server.stderr().match(/the data file is damaged \(SQLITE_CORRUPT/g)).toHaveLength(1)
    expect(server.stdout()).not.toContain('"status":500')
    await server.stop('SIGKILL')
  })

  test('damaged: a token looked up in a broken page of the keys is a 503, noted once, never a 401 that costs its address', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const key = createKeyWithCli(dataFile, ['--plan', 'pro'])
    const server = await startServer({ dataFile })
    expect((await fetch(`${server.base}/pets`, { headers: auth(key) })).status).toBe(200)
    breakRootPages(dataFile, ['api_keys', 'api_keys_by_change'])
    // A secret of the right shape the server has not seen: it is looked for in the keys' broken pages.
    const unseen = createKeyWithCli(join(tempDir(), 'elsewhere.db'), ['--plan', 'pro'])
    const answer = await fetch(`${server.base}/pets`, { headers: auth(unseen) })
    expect([answer.status, ((await answer.json()) as { code: string }).code]).toEqual([503, 'unavailable'])
    // Noted as the damage it is, once: /readyz and creates answer 503 from now on.
    await server.said('the data file is damaged (SQLITE_CORRUPT); /readyz and creates answer 503')
    expect(server.stderr().match(/the data file is damaged \(SQLITE_CORRUPT\); \/readyz/g)).toHaveLength(1)
    expect((await fetch(`${server.origin}/readyz`)).status).toBe(503)
    expect(server.stderr()).not.toContain('internal error')
    await server.stop('SIGKILL')
  })

  test('damaged: a create and a console sign-in that meet a broken page are 503, noted once, and /readyz turns 503', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    // Made by a first start and closed (checkpointed), so the next start reads these pages from the file.
    const first = await startWithConsole({ dataFile })
    const { bootstrapKey: key, password } = first
    expect(await first.stop()).toBe(0)
    const server = await startWithConsole({ dataFile })
    breakRootPages(dataFile, ['pets', 'audit_log'])

    const create = await postPet(server.base, key!, { name: 'into a broken page', categoryId: 1 })
    expect([create.status, ((await create.json()) as { code: string }).code]).toEqual([503, 'unavailable'])
    expect((await fetch(`${server.origin}/readyz`)).status).toBe(503)
    expect((await signInAsAdmin(server.console, password)).status).toBe(503)
    await server.said('the data file is damaged (SQLITE_CORRUPT')
    expect(server.stderr().match(/the data file is damaged \(SQLITE_CORRUPT/g)).toHaveLength(1)
    expect(server.stderr()).not.toContain('internal error')
    expect(server.stdout()).not.toContain('"status":500')
    await server.stop('SIGKILL')
  })
})

/**
 * Overwrites the root pages of the named tables and indexes, then commits from another connection (as
 * a command's would be, waiting its turn: a server's start-up prunes may hold the write lock), which
 * makes a running server read its pages from the file again.
 */
function breakRootPages(dataFile: string, names: string[]): void {
  const db = new Database(dataFile, { readonly: true })
  const roots = db
    .query<{ rootpage: number }, string[]>(`SELECT rootpage FROM sqlite_schema WHERE name IN (${names.map(() => '?').join(', ')})`)
    .all(...names)
  const { page_size: pageSize } = db.query<{ page_size: number }, []>('PRAGMA page_size').get()!
  db.close()
  expect(roots).toHaveLength(names.length)
  const fd = openSync(dataFile, 'r+')
  for (const { rootpage } of roots) writeSync(fd, Buffer.alloc(pageSize, 0xa5), 0, pageSize, (rootpage - 1) * pageSize)
  closeSync(fd)
  const other = new Database(dataFile)
  other.run('PRAGMA busy_timeout = 5000')
  other.run(`PRAGMA user_version = ${other.query<{ user_version: number }, []>('PRAGMA user_version').get()!.user_version}`)
  other.close()
}
