/**
 * A key made with `keys create` works on the very next request to a running server, on the data file
 * and on PostgreSQL (with Redis too): a token the server does not know is looked for in storage first,
 * requests carrying the same token share the look-up, and only a token that stays unknown is counted
 * against its address. A new key's first burst is all 200s and leaves its address's keyless allowance
 * whole. Invented tokens do not turn into storage reads one for one (counted on PostgreSQL by the
 * server's own statistics of scans of the keys table).
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { join } from 'node:path'
import { cli, type Server, startServer, tempDir } from '../support/binary'
import { describeWithEngines } from '../support/engines'
import { postgresForSuite } from '../support/postgres'
import { type RedisServer, startRedis } from '../support/redis'
import { auth, killSpawned } from './helpers'

afterAll(killSpawned)
setDefaultTimeout(60_000)

function createKey(storage: string[], plan: string): string {
  const result = cli(['keys', 'create', '--plan', plan, ...storage])
  if (result.code !== 0) throw new Error(`keys create failed: ${result.stderr}`)
  return result.stdout.trim().split('\n').at(-1)!
}

/**
 * Three keys, each asked for as soon as `keys create` returns: the change poll (four a second) may
 * happen to run in between once, not three times.
 */
async function newKeysWorkAtOnce(server: Server, storage: string[]): Promise<void> {
  for (const plan of ['pro', 'business', 'free']) {
    const secret = createKey(storage, plan)
    const response = await fetch(`${server.base}/pets`, { headers: auth(secret) })
    expect({ plan, status: response.status }).toEqual({ plan, status: 200 })
    // Limited as that key, with its plan's numbers, from its first request.
    expect(response.headers.get('x-ratelimit-limit')).toBe(plan === 'pro' ? '300' : plan === 'business' ? '1000' : '60')
  }
}

/**
 * A key made a moment ago, then 64 requests with it at once, spread over the servers: every one is
 * 200, limited as that key; then a request without a key is its address's first keyless one.
 */
async function newKeyBurst(servers: Server[], storage: string[]): Promise<void> {
  const secret = createKey(storage, 'pro')
  const answers = await Promise.all(
    Array.from({ length: 64 }, (_, i) => fetch(`${servers[i % servers.length]!.base}/pets`, { headers: auth(secret) })),
  )
  const statuses = answers.map((answer) => answer.status)
  const keyless = await fetch(`${servers[0]!.base}/pets`)
  const count = (status: number) => statuses.filter((s) => s === status).length
  console.log(
    `a new key's first burst of 64: ${count(200)} x 200, ${count(429)} x 429; keyless remaining after: ${keyless.headers.get('x-ratelimit-remaining')}`,
  )
  expect(statuses).toEqual(Array(64).fill(200))
  expect(new Set(answers.map((answer) => answer.headers.get('x-ratelimit-limit')))).toEqual(new Set(['300']))
  expect(keyless.status).toBe(401)
  expect(keyless.headers.get('x-ratelimit-remaining')).toBe('59')
}

describe('on the data file', () => {
  test("a new key's first burst of 64 concurrent requests is all 200 and costs its address nothing", async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const storage = ['--data', dataFile]
    createKey(storage, 'free')
    const server = await startServer({ dataFile, args: ['--no-access-log'] })
    await newKeyBurst([server], storage)
    // Tokens that stay unknown are counted against the address: 59 left, so one of 60 guesses is a 429.
    const guesses = await Promise.all(
      Array.from({ length: 60 }, (_, i) => fetch(`${server.base}/pets`, { headers: auth(`psk_guess_${i}`) })),
    )
    const statuses = guesses.map((answer) => answer.status).sort()
    expect(statuses).toEqual([...Array(59).fill(401), 429])
    // A new Free key's burst of 64, resumed together by its one look-up, is limited exactly: 60 pass.
    const free = createKey(storage, 'free')
    const burst = await Promise.all(Array.from({ length: 64 }, () => fetch(`${server.base}/pets`, { headers: auth(free) })))
    expect(burst.map((answer) => answer.status).sort()).toEqual([...Array(60).fill(200), ...Array(4).fill(429)])
    expect(await server.stop()).toBe(0)
  })

  test('a key made by keys create works on the next request', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const storage = ['--data', dataFile]
    createKey(storage, 'free')
    const server = await startServer({ dataFile, args: ['--no-access-log', '--trust-proxy', 'loopback'] })
    await newKeysWorkAtOnce(server, storage)
    expect(await server.stop()).toBe(0)
  })
})

describeWithEngines(['postgresql'], 'on PostgreSQL', () => {
  const cluster = postgresForSuite()

  test("limits in process: a new key's first burst of 64 concurrent requests is all 200 and costs its address nothing", async () => {
    const databaseUrl = await cluster.createDatabase('new_key_burst_memory')
    const storage = ['--database-url', databaseUrl]
    createKey(storage, 'free')
    const server = await startServer({ databaseUrl, args: ['--no-access-log'] })
    await newKeyBurst([server], storage)
    expect(await server.stop()).toBe(0)
  })

  describeWithEngines(['redis-server'], 'with Redis', () => {
    let redis: RedisServer
    beforeAll(async () => {
      redis = await startRedis()
    })
    afterAll(() => redis?.destroy())

    test("two instances: a new key's first burst of 64 concurrent requests is all 200 and costs its address nothing", async () => {
      const databaseUrl = await cluster.createDatabase('new_key_burst')
      const storage = ['--database-url', databaseUrl]
      createKey(storage, 'free')
      const args = ['--no-access-log', '--redis-url', redis.url]
      const servers = [await startServer({ databaseUrl, args }), await startServer({ databaseUrl, args })]
      await newKeyBurst(servers, storage)
      for (const server of servers) expect(await server.stop()).toBe(0)
    })
  })

  test('a key made by keys create works on the next request; invented keys cost a bounded number of reads', async () => {
    const databaseUrl = await cluster.createDatabase('new_key_at_once')
    const storage = ['--database-url', databaseUrl]
    createKey(storage, 'free')
    const server = await startServer({ databaseUrl, args: ['--no-access-log', '--trust-proxy', 'loopback'] })
    await newKeysWorkAtOnce(server, storage)

    const admin = new Bun.SQL(databaseUrl, { max: 1 })
    try {
      const scans = async () => {
        await admin`SELECT pg_stat_clear_snapshot()`
        const [row] = await admin`SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) AS scans
                                  FROM pg_stat_user_tables WHERE relname = 'api_keys'`
        return Number(row.scans)
      }
      // 400 requests with invented keys, 200 of one repeated token and 200 different ones, each from an
      // address of its own so every one passes the address limit and is looked for.
      const before = await scans()
      const started = performance.now()
      const send = (token: string, i: number) =>
        fetch(`${server.base}/pets`, { headers: auth(token, { 'x-forwarded-for': `10.1.${i >> 8}.${i & 255}` }) })
      const answers = await Promise.all([
        ...Array.from({ length: 200 }, (_, i) => send('psk_the_same_invented_key', i)),
        ...Array.from({ length: 200 }, (_, i) => send(`psk_invented_${i}`, 200 + i)),
      ])
      const elapsedMs = performance.now() - started
      expect(answers.map((answer) => answer.status)).toEqual(Array(400).fill(401))
      // PostgreSQL publishes a backend's statistics at most once a second (PGSTAT_MIN_INTERVAL): there
      // is no condition to await, so they are read after that interval has passed.
      await Bun.sleep(1_500)
      const after = await scans()
      const polls = Math.ceil((performance.now() - started) / 250) + 2
      // At most one catch-up read per 10 ms while they arrived, beside the poll's reads.
      const bound = polls + Math.ceil(elapsedMs / 10) + 2
      console.log(`invented keys: ${after - before} scans of api_keys for 400 requests in ${Math.round(elapsedMs)} ms (bound ${bound})`)
      expect(after - before).toBeLessThan(Math.min(bound, 200))
    } finally {
      await admin.close()
    }
    expect(await server.stop()).toBe(0)
  })
})
