/**
 * Ids past 2^53 are only in a hand-edited data file (ours count up from 1), and a double cannot tell them
 * apart: getPet must never answer one of them with another pet, whether it asked for it or read it beside
 * a pet it was asked for (a miss reads its neighbours and keeps them).
 */
import { afterAll, expect, test } from 'bun:test'
import { Database } from 'bun:sqlite'
import { join } from 'node:path'
import { createKeyWithCli, startServer, tempDir } from '../support/binary'
import { killSpawned } from './helpers'

afterAll(killSpawned)

test('pets with ids past 2^53 are never served under another id, before or after their neighbours are read', async () => {
  const dataFile = join(tempDir(), 'petstore.db')
  const key = createKeyWithCli(dataFile, ['--plan', 'pro'])
  const db = new Database(dataFile, { safeIntegers: true })
  const insert = db.query("INSERT INTO pets (id, name, category_id, status, created_at) VALUES (?, ?, 1, 'sold', 0)")
  for (const [id, name] of [
    [9007199254740991n, 'B'],
    [9007199254740992n, 'C'],
    [9007199254740993n, 'D'],
  ] as const)
    insert.run(id, name)
  db.close()
  const server = await startServer({ dataFile })
  const get = async (id: string) => {
    const res = await fetch(`${server.base}/pets/${id}`, { headers: { authorization: `Bearer ${key}` } })
    return `${res.status} ${res.status === 200 ? ((await res.json()) as { id: number; name: string }).name : ''}`
  }
  expect(await get('9007199254740993')).toBe('404 ')
  // The largest safe id is found, and its read must not keep C and D under rounded ids.
  expect(await get('9007199254740991')).toBe('200 B')
  expect(await get('9007199254740993')).toBe('404 ')
  expect(await get('9007199254740992')).toBe('404 ')
  expect(await server.stop()).toBe(0)
})
