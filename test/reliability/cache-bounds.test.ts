/**
 * Caches bounded in size against the binary: a padded query string is refused past 1 KiB, and pages
 * of long names fill the list-page cache only up to its bound.
 */
import { describe, expect, test } from 'bun:test'
import { encodeCursor } from '../../src/modules/pets/cursor'
import { auth, postPet } from '../support/app'
import { createKeyWithCli, startServer, tempDir } from '../support/binary'
import { join } from 'node:path'

/** Runs `task(i)` for i in [0, count), `concurrency` at a time. */
async function each(count: number, concurrency: number, task: (i: number) => Promise<void>) {
  let next = 0
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < count) await task(next++)
    }),
  )
}

describe('caches bounded in bytes', () => {
  test('a query string over 1 KiB is a 400 naming the query; padding below that is served', async () => {
    const server = await startServer({ args: ['--no-access-log'] })
    const key = server.bootstrapKey!
    const long = await fetch(`${server.base}/pets?${'&'.repeat(1100)}limit=1`, { headers: auth(key) })
    expect(long.status).toBe(400)
    expect(await long.json()).toEqual({ code: 'invalid_request', message: 'query: is longer than 1024 characters', status: 400 })
    expect((await fetch(`${server.base}/pets?${'&'.repeat(1000)}limit=1`, { headers: auth(key) })).status).toBe(200)
    expect(await server.stop()).toBe(0)
  })

  test('pages of long names fill the page cache only up to its bound', async () => {
    const dataFile = join(tempDir(), 'p.db')
    const key = createKeyWithCli(dataFile, ['--plan', 'enterprise', '--rpm', '10000000', '--rpd', '100000000'])
    const server = await startServer({ dataFile, args: ['--no-access-log'] })
    // Two-byte characters: the pages below hold about 70 million characters of JSON in all.
    await each(2_000, 16, async (i) => {
      expect((await postPet(server.base, key, { name: `${i}-${'ж'.repeat(190)}`, categoryId: i })).status).toBe(201)
    })
    const cached = async () => {
      const text = await (await fetch(`${server.origin}/metrics`)).text()
      return Number(/^petstore_page_cache_chars (\d+)$/m.exec(text)![1])
    }
    let most = 0
    for (let round = 0; round < 4; round++) {
      await each(1_000, 16, async (j) => {
        const i = round * 1_000 + j
        const response = await fetch(`${server.base}/pets?limit=${100 - (i % 50)}&cursor=${encodeCursor(1 + (i % 1900))}`, {
          headers: auth(key),
        })
        expect(response.status).toBe(200)
        await response.arrayBuffer()
      })
      most = Math.max(most, await cached())
    }
    expect(most).toBeGreaterThan(30 * 1024 * 1024)
    expect(most).toBeLessThanOrEqual(32 * 1024 * 1024)
    expect(await server.stop()).toBe(0)
  })
})
