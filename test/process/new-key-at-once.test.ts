/**
 * A key made with `keys create` works on the very next request to a running server, on the data file
 * and on PostgreSQL: a token the server does not know is looked for in storage once its address's
 * bucket lets it through. Invented tokens do not turn into storage reads one for one (counted on
 * PostgreSQL by the server's own statistics of scans of the keys table).
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { join } from 'node:path'
import { cli, type Server, startServer, tempDir } from '../support/binary'
import { describeWithEngines } from '../support/engines'
import { type PostgresCluster, startPostgres } from '../support/postgres'
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

describe('on the data file', () => {
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
  let cluster: PostgresCluster
  beforeAll(async () => {
    cluster = await startPostgres()
  })
  afterAll(() => cluster?.destroy())

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
