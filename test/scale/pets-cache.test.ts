/**
 * The pets read cache of instances sharing one PostgreSQL (the binary, two instances): what one instance
 * keeps (single pets, their blocks, full pages) never hides what another instance or the CLI changed. A
 * `pets reset` is seen within a second, a pet created elsewhere is on the last page and found by id at
 * once, and pages read while both instances insert never skip or repeat a pet.
 */
import { afterAll, beforeEach, expect, test } from 'bun:test'
import { encodeCursor } from '../../src/modules/pets/cursor'
import { cli, eventually, type Server, startServer } from '../support/binary'
import { describeWithEngines } from '../support/engines'
import { postgresForSuite } from '../support/postgres'

let databaseUrl: string
let databases = 0
let key: string
const servers: Server[] = []

const auth = () => ({ authorization: `Bearer ${key}` })

async function twoInstances(): Promise<[Server, Server]> {
  const started = await Promise.all([0, 1].map(() => startServer({ databaseUrl, args: ['--no-access-log'] })))
  servers.push(...started)
  return started as [Server, Server]
}

async function page(server: Server, limit: number, after: number): Promise<{ ids: number[]; next: boolean }> {
  const cursor = after > 0 ? `&cursor=${encodeCursor(after)}` : ''
  const answer = await fetch(`${server.base}/pets?limit=${limit}${cursor}`, { headers: auth() })
  if (answer.status !== 200) throw new Error(`listing answered ${answer.status}: ${await answer.text()}`)
  const pets = (await answer.json()) as { id: number }[]
  return { ids: pets.map((pet) => pet.id), next: answer.headers.get('link') !== null }
}

async function getPet(server: Server, id: number): Promise<number> {
  const answer = await fetch(`${server.base}/pets/${id}`, { headers: auth() })
  await answer.arrayBuffer()
  return answer.status
}

async function create(server: Server, name: string): Promise<number> {
  const answer = await fetch(`${server.base}/pets`, {
    method: 'POST',
    headers: { ...auth(), 'content-type': 'application/json' },
    body: JSON.stringify({ name, categoryId: 1 }),
  })
  expect(answer.status).toBe(201)
  return ((await answer.json()) as { id: number }).id
}

describeWithEngines(['postgresql'], 'the pets read cache of instances on one PostgreSQL', () => {
  const cluster = postgresForSuite()
  beforeEach(async () => {
    await Promise.all(servers.splice(0).map((server) => server.stop()))
    databaseUrl = await cluster.createDatabase(`pets_cache_${++databases}`)
    const made = cli(['keys', 'create', '--plan', 'enterprise', '--rpm', '10000000', '--rpd', '100000000', '--database-url', databaseUrl])
    if (made.code !== 0) throw new Error(made.stderr)
    key = made.stdout.trim().split('\n').at(-1)!
  })
  afterAll(async () => {
    await Promise.all(servers.splice(0).map((server) => server.stop()))
  })

  test('pets reset through the CLI: an instance that has read every pet serves none of them within a second', async () => {
    expect(cli(['pets', 'seed', '--count', '300', '--database-url', databaseUrl]).code).toBe(0)
    const [, b] = await twoInstances()
    // B reads every pet by id (and so their blocks) and every full page: all of it is cached.
    const ids: number[] = []
    for (let after = 0, next = true; next; ) {
      const read = await page(b, 20, after)
      ids.push(...read.ids)
      next = read.next
      after = read.ids.at(-1) ?? after
    }
    expect(ids).toHaveLength(300)
    expect((await Promise.all(ids.map((id) => getPet(b, id)))).every((status) => status === 200)).toBe(true)
    // 32 readers keep asking B for pets while the reset runs: no read begun before it may be kept after.
    let reading = true
    const readers = Array.from({ length: 32 }, async (_, r) => {
      for (let i = r; reading; i += 32) await getPet(b, ids[i % ids.length]!)
    })
    const firstPage = async () => (await page(b, 20, 0)).ids.length === 0
    const noneFound = async () => (await Promise.all(ids.map((id) => getPet(b, id)))).every((status) => status === 404)
    let seenAfterMs = Infinity
    try {
      const reset = cli(['pets', 'reset', '--yes', '--database-url', databaseUrl])
      const resetAt = performance.now()
      expect(reset.code).toBe(0)
      // Timed from the start of the first check that found nothing: a check asks for 301 answers.
      await eventually(async () => {
        const checkedAt = performance.now()
        if (!((await firstPage()) && (await noneFound()))) return false
        seenAfterMs = checkedAt - resetAt
        return true
      }, 3_000).catch(() => {})
    } finally {
      reading = false
      await Promise.all(readers)
    }
    expect(seenAfterMs).toBeLessThan(1_000)
    // And it stays so: the caches were not filled again by a read that straddled the reset.
    expect(await noneFound()).toBe(true)
    expect((await page(b, 100, 0)).ids).toEqual([])
  })

  test('a pet created on one instance is on the last page of the other, and found by id there, on the next read', async () => {
    expect(cli(['pets', 'seed', '--count', '45', '--database-url', databaseUrl]).code).toBe(0)
    const [a, b] = await twoInstances()
    for (let round = 0; round < 3; round++) {
      // B reads the pages (two full, the last one not) and the last pets by id, twice: whatever it keeps is kept.
      let last: number[] = []
      for (let twice = 0; twice < 2; twice++) {
        const first = await page(b, 20, 0)
        const second = await page(b, 20, first.ids.at(-1)!)
        expect([first.next, second.next]).toEqual([true, true])
        last = (await page(b, 20, second.ids.at(-1)!)).ids
        expect(await getPet(b, last.at(-1)!)).toBe(200)
        expect(await getPet(b, last.at(-1)! + 1)).toBe(404)
        expect((await page(b, 100, 0)).next).toBe(false)
      }
      const id = await create(a, `from A ${round}`)
      expect(id).toBe(last.at(-1)! + 1)
      const first = await page(b, 20, 0)
      const second = await page(b, 20, first.ids.at(-1)!)
      expect((await page(b, 20, second.ids.at(-1)!)).ids).toEqual([...last, id])
      expect((await page(b, 100, 0)).ids.at(-1)).toBe(id)
      expect(await getPet(b, id)).toBe(200)
    }
  })

  test('32 readers paging while the other instance inserts never skip or repeat a pet', async () => {
    expect(cli(['pets', 'seed', '--count', '100', '--database-url', databaseUrl]).code).toBe(0)
    const servers = await twoInstances()
    let writing = true
    // All on the first instance: the second learns of the new pets only from PostgreSQL.
    const writers = Array.from({ length: 8 }, async (_, w) => {
      for (let i = 0; i < 30; i++) await create(servers[0]!, `p${w}.${i}`)
    })
    const readers = Array.from({ length: 32 }, async (_, r) => {
      const seen: number[] = []
      // Half the readers on the second instance alone, half sending each page to the other instance; an
      // empty page begun after the writers stopped ends a reader's listing.
      for (let turn = 0, done = false; !done; turn++) {
        const stopped = !writing
        const read = await page(servers[r % 2 === 0 ? 1 : turn % 2]!, 7, seen.at(-1) ?? 0)
        seen.push(...read.ids)
        done = stopped && read.ids.length === 0
      }
      return seen
    })
    await Promise.all(writers)
    writing = false
    const all: number[] = []
    for (let after = 0, more = true; more; ) {
      const read = await page(servers[0]!, 100, after)
      all.push(...read.ids)
      more = read.ids.length > 0
      after = read.ids.at(-1) ?? after
    }
    expect(all).toHaveLength(340)
    for (const seen of await Promise.all(readers)) expect(seen).toEqual(all)
  })
})
