/**
 * GET /pets over real HTTP: limit and status validation, ordering, keyset pagination through the
 * Link header, and the bare-array body.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { auth, postPet, startApp, type TestApp } from '../support/app'

/** A response body as loosely typed JSON (the DOM typings say unknown). */
const jsonOf = (res: Response): Promise<any> => res.json()

const UNLIMITED = { rpm: 1_000_000, rpd: 100_000_000 }
const STATUSES = ['available', 'pending', 'sold'] as const

let app: TestApp
let key: string
/** The absolute base URL the server puts in links (it follows the bound port). */
let linkBase: string
/** Pets created in beforeAll, in creation order. */
const created: { id: number; name: string; categoryId: number; status: string }[] = []

async function list(query = '', headers: Record<string, string> = auth(key)) {
  const res = await fetch(`${app.base}/pets${query}`, { headers })
  return { res, text: await res.text() }
}

/** The list asked with `query` is refused: 400 invalid_request, the message naming `name`. */
async function expectRefusedNaming(query: string, name: string) {
  const { res, text } = await list(query)
  expect(res.status).toBe(400)
  expect(JSON.parse(text)).toEqual({ code: 'invalid_request', message: expect.stringContaining(name), status: 400 })
}

/** Extracts the rel="next" URL from a Link header, asserting its exact shape. */
function nextUrl(link: string | null): string | null {
  if (link === null) return null
  const match = /^<([^>]+)>; rel="next"$/.exec(link)
  expect(match).not.toBeNull()
  return match![1]!
}

/** Follows rel="next" from a first page, returning every page's ids and the next URLs seen. */
async function walk(firstQuery: string) {
  const pages: number[][] = []
  const urls: string[] = []
  let url: string | null = `${app.base}/pets${firstQuery}`
  while (url !== null) {
    const res = await fetch(url, { headers: auth(key) })
    expect(res.status).toBe(200)
    const body = (await jsonOf(res)) as { id: number }[]
    pages.push(body.map((pet) => pet.id))
    const next = nextUrl(res.headers.get('link'))
    if (next !== null) {
      expect(next.startsWith(`${linkBase}/pets?`)).toBe(true)
      urls.push(next)
      url = app.base + next.slice(linkBase.length)
    } else url = null
    if (pages.length > 100) throw new Error('pagination does not end')
  }
  return { pages, urls }
}

beforeAll(async () => {
  app = await startApp()
  key = await app.key('enterprise', UNLIMITED)
  linkBase = `http://localhost:${new URL(app.origin).port}/v1`
  // 25 pets, statuses in a fixed rotation, created one after another so ids follow this order.
  for (let i = 0; i < 25; i++) {
    const res = await postPet(app.base, key, { name: `pet-${i}`, categoryId: i, status: STATUSES[i % 3] })
    expect(res.status).toBe(201)
    created.push(await jsonOf(res))
  }
})

afterAll(() => app.stop())

describe('GET /pets limit', () => {
  test('defaults to 20 pets and announces the next page', async () => {
    const { res, text } = await list()
    expect(res.status).toBe(200)
    const body = JSON.parse(text)
    expect(body).toHaveLength(20)
    expect(body.map((p: { id: number }) => p.id)).toEqual(created.slice(0, 20).map((p) => p.id))
    expect(res.headers.get('link')).toMatch(/limit=20/)
  })

  test('limit=1 returns exactly one pet', async () => {
    const { res, text } = await list('?limit=1')
    expect(res.status).toBe(200)
    expect(JSON.parse(text)).toEqual([created[0]])
  })

  test('limit=100 is accepted and returns every pet when fewer exist, with no next link', async () => {
    const { res, text } = await list('?limit=100')
    expect(res.status).toBe(200)
    expect(JSON.parse(text)).toEqual(created)
    expect(res.headers.get('link')).toBeNull()
  })

  const invalid: [string, string][] = [
    ['0', '?limit=0'],
    ['101', '?limit=101'],
    ['abc', '?limit=abc'],
    ['empty', '?limit='],
    ['1.5', '?limit=1.5'],
    ['leading space', '?limit=%201'],
    ['-1', '?limit=-1'],
    ['+1', '?limit=%2B1'],
    ['1e1', '?limit=1e1'],
    ['huge', '?limit=100000000000000000000'],
    ['duplicated', '?limit=1&limit=2'],
  ]
  for (const [label, query] of invalid) {
    test(`limit ${label} is a 400 naming limit`, async () => {
      const { res, text } = await list(query)
      expect(res.status).toBe(400)
      expect(res.headers.get('content-type')).toStartWith('application/json')
      const body = JSON.parse(text)
      expect(body).toEqual({ code: 'invalid_request', message: expect.stringContaining('limit'), status: 400 })
    })
  }
})

describe('GET /pets status filter and query strictness', () => {
  for (const status of STATUSES) {
    test(`status=${status} returns only ${status} pets, in id order`, async () => {
      const { res, text } = await list(`?status=${status}&limit=100`)
      expect(res.status).toBe(200)
      const expected = created.filter((p) => p.status === status)
      expect(expected.length).toBeGreaterThan(0)
      expect(JSON.parse(text)).toEqual(expected)
    })
  }

  for (const [label, query] of [
    ['unknown value', '?status=lost'],
    ['wrong case', '?status=Available'],
    ['empty', '?status='],
    ['duplicated', '?status=sold&status=sold'],
  ]) {
    test(`status ${label} is a 400 naming status`, async () => {
      await expectRefusedNaming(query!, 'status')
    })
  }

  test('an unknown query parameter is a 400 naming it', async () => {
    await expectRefusedNaming('?colour=brown', 'colour')
  })

  test('offset-style parameters are not silently ignored', async () => {
    const { res } = await list('?offset=5')
    expect(res.status).toBe(400)
  })
})

describe('GET /pets body', () => {
  test('is a bare JSON array of Pet objects ordered by id', async () => {
    const { res, text } = await list('?limit=100')
    expect(res.headers.get('content-type')).toStartWith('application/json')
    expect(text.startsWith('[')).toBe(true)
    const body = JSON.parse(text) as { id: number }[]
    expect(Array.isArray(body)).toBe(true)
    for (const pet of body) expect(Object.keys(pet).sort()).toEqual(['categoryId', 'id', 'name', 'status'])
    const ids = body.map((p) => p.id)
    expect(ids).toEqual([...ids].sort((a, b) => a - b))
    expect(new Set(ids).size).toBe(ids.length)
  })

  test('an empty store lists as [] with no next link', async () => {
    const empty = await startApp()
    try {
      const res = await fetch(`${empty.base}/pets`, { headers: auth(await empty.key()) })
      expect(res.status).toBe(200)
      expect(await res.text()).toBe('[]')
      expect(res.headers.get('link')).toBeNull()
    } finally {
      empty.stop()
    }
  })

  test('a filter that matches nothing is [] with no next link', async () => {
    const other = await startApp()
    try {
      const k = await other.key()
      expect((await postPet(other.base, k, { name: 'a', categoryId: 1 })).status).toBe(201)
      const res = await fetch(`${other.base}/pets?status=sold`, { headers: auth(k) })
      expect(await res.text()).toBe('[]')
      expect(res.headers.get('link')).toBeNull()
    } finally {
      other.stop()
    }
  })
})

describe('GET /pets keyset pagination', () => {
  test('the Link header has the exact RFC 8288 shape with limit and cursor', async () => {
    const { res } = await list('?limit=7')
    const link = res.headers.get('link')
    expect(link).toMatch(/^<http:\/\/localhost:\d+\/v1\/pets\?limit=7&cursor=[A-Za-z0-9_-]+>; rel="next"$/)
    expect(link!.startsWith(`<${linkBase}/pets?`)).toBe(true)
  })

  test('following rel="next" walks every pet once, in order, with no gaps', async () => {
    const { pages } = await walk('?limit=7')
    expect(pages.map((p) => p.length)).toEqual([7, 7, 7, 4])
    expect(pages.flat()).toEqual(created.map((p) => p.id))
  })

  test('the link is present exactly when more pets match (page ends on the last pet)', async () => {
    const { pages, urls } = await walk('?limit=5')
    expect(pages.map((p) => p.length)).toEqual([5, 5, 5, 5, 5])
    expect(urls).toHaveLength(4)
    expect(pages.flat()).toEqual(created.map((p) => p.id))
    // One pet per page: 25 pages, 24 next links.
    const single = await walk('?limit=1')
    expect(single.pages.flat()).toEqual(created.map((p) => p.id))
    expect(single.urls).toHaveLength(24)
  })

  test('a limit equal to the number of pets gives one page and no link', async () => {
    const { res, text } = await list('?limit=25')
    expect(JSON.parse(text)).toHaveLength(25)
    expect(res.headers.get('link')).toBeNull()
    const { res: res24 } = await list('?limit=24')
    expect(res24.headers.get('link')).not.toBeNull()
  })

  test('pagination keeps the status filter across pages', async () => {
    const expected = created.filter((p) => p.status === 'pending').map((p) => p.id)
    expect(expected).toHaveLength(8)
    const { pages, urls } = await walk('?status=pending&limit=3')
    expect(pages.map((p) => p.length)).toEqual([3, 3, 2])
    expect(pages.flat()).toEqual(expected)
    for (const url of urls) expect(new URL(url).searchParams.get('status')).toBe('pending')
  })

  test('pets created after a page was served appear on later pages', async () => {
    const other = await startApp()
    try {
      const k = await other.key('enterprise', UNLIMITED)
      const ids: number[] = []
      for (let i = 0; i < 3; i++) ids.push((await jsonOf(await postPet(other.base, k, { name: `p${i}`, categoryId: 1 }))).id)
      const first = await fetch(`${other.base}/pets?limit=2`, { headers: auth(k) })
      const next = nextUrl(first.headers.get('link'))!
      ids.push((await jsonOf(await postPet(other.base, k, { name: 'late', categoryId: 1 }))).id)
      const second = await fetch(other.base + next.slice(next.indexOf('/v1') + 3), { headers: auth(k) })
      expect(((await jsonOf(second)) as { id: number }[]).map((p) => p.id)).toEqual(ids.slice(2))
    } finally {
      other.stop()
    }
  })

  test('pages served before a create are served fresh after it: last pages grow, full pages stay', async () => {
    const other = await startApp()
    try {
      const k = await other.key('enterprise', UNLIMITED)
      const create = async (status: string) =>
        (await jsonOf(await postPet(other.base, k, { name: status, categoryId: 1, status }))).id as number
      const ids: number[] = [await create('sold'), await create('available'), await create('sold')]
      const read = async (query: string) => {
        const res = await fetch(`${other.base}/pets${query}`, { headers: auth(k) })
        return { ids: ((await jsonOf(res)) as { id: number }[]).map((p) => p.id), next: res.headers.get('link') !== null }
      }
      const queries = ['?limit=2', '?limit=3', '?limit=100', '?status=sold', '?status=available&limit=1']
      const before = await Promise.all(queries.map(read))
      expect(before).toEqual([
        { ids: ids.slice(0, 2), next: true },
        { ids, next: false },
        { ids, next: false },
        { ids: [ids[0]!, ids[2]!], next: false },
        { ids: [ids[1]!], next: false },
      ])
      const sold = await create('sold')
      expect(await Promise.all(queries.map(read))).toEqual([
        { ids: ids.slice(0, 2), next: true },
        { ids, next: true },
        { ids: [...ids, sold], next: false },
        { ids: [ids[0]!, ids[2]!, sold], next: false },
        { ids: [ids[1]!], next: false },
      ])
      const available = await create('available')
      expect(await read('?status=available&limit=1')).toEqual({ ids: [ids[1]!], next: true })
      expect(await read('?limit=100')).toEqual({ ids: [...ids, sold, available], next: false })
    } finally {
      other.stop()
    }
  })

  test('a garbage cursor is a 400 naming cursor', async () => {
    for (const cursor of ['garbage', 'x', '%00', 'AAAA', '-', 'a'.repeat(65)]) {
      await expectRefusedNaming(`?cursor=${cursor}`, 'cursor')
    }
  })

  test('a tampered cursor is a 400', async () => {
    const { res } = await list('?limit=2')
    const cursor = new URL(nextUrl(res.headers.get('link'))!).searchParams.get('cursor')!
    const flipped = cursor.slice(0, -1) + (cursor.endsWith('A') ? 'B' : 'A')
    const forged = Buffer.from('p1.-5').toString('base64url')
    const wrongVersion = Buffer.from('p2.5').toString('base64url')
    for (const bad of [flipped, `${cursor}A`, forged, wrongVersion, '']) {
      const r = await list(`?cursor=${bad}`)
      expect(r.res.status).toBe(400)
      expect(JSON.parse(r.text).code).toBe('invalid_request')
    }
  })

  test('an empty cursor is a 400, not the first page', async () => {
    const { res } = await list('?cursor=')
    expect(res.status).toBe(400)
  })
})
