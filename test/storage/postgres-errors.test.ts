/**
 * The rule that tells PostgreSQL's "not now" (503) from a bug (500), class by class, with each failure
 * produced by a real PostgreSQL (or by Bun's client against a real socket), never by a made-up error.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test'
import { SQL } from 'bun'
import { createServer, type Server } from 'node:net'
import { guarded } from '../../src/storage/postgres/failures'
import { openDatabase } from '../../src/storage/postgres/pool'
import { StorageUnavailableError } from '../../src/domain/repositories'
import { describeWithEngines } from '../support/engines'
import { eventually } from '../support/binary'
import { freePort } from '../support/ports'
import { type PostgresCluster, postgresForSuite } from '../support/postgres'

let cluster: PostgresCluster
const clients: SQL[] = []

function client(url = cluster.url, options: Omit<SQL.PostgresOrMySQLOptions, 'url'> = {}): SQL {
  const sql = new SQL(url, { max: 1, connectionTimeout: 2, ...options })
  clients.push(sql)
  return sql
}

/** The failure of `query` after the rule: 503 (StorageUnavailableError) or 500 (anything else). */
async function classify(query: () => Promise<unknown>): Promise<{ answer: 503 | 500; errno: unknown; code: unknown }> {
  try {
    await guarded(query)
  } catch (error) {
    const cause = error instanceof StorageUnavailableError ? error.code : (error as { errno?: unknown }).errno
    return { answer: error instanceof StorageUnavailableError ? 503 : 500, errno: cause, code: (error as { code?: unknown }).code }
  }
  throw new Error('the query did not fail')
}

/** A database URL on the cluster with something changed. */
function urlWith(change: (url: URL) => void): string {
  const url = new URL(cluster.url)
  change(url)
  return url.toString()
}

describeWithEngines(['postgresql'], 'PostgreSQL failures: not now (503) or a bug (500)', () => {
  // Declared before the cluster, so the clients close before PostgreSQL stops.
  afterAll(async () => {
    for (const sql of clients.splice(0)) await sql.close({ timeout: 0 })
  })
  cluster = postgresForSuite()
  beforeAll(async () => {
    await client()`CREATE TABLE t (id int PRIMARY KEY)`
    await client()`INSERT INTO t VALUES (1), (2)`
  })

  test("08 and Bun's connection codes: a refused port, a server that never answers, a session the server ended, a connection closed under a query", async () => {
    const closed = await freePort()
    const refused = await classify(() => client(urlWith((u) => (u.port = String(closed))))`SELECT 1`)
    expect(refused).toMatchObject({ answer: 503, errno: 'ERR_POSTGRES_CONNECTION_REFUSED' })

    // Accepts the connection and never says a word, as a stopped server's kernel does.
    const silent: Server = createServer(() => {})
    const silentPort = await freePort()
    await new Promise<void>((resolve) => silent.listen(silentPort, '127.0.0.1', resolve))
    try {
      const timedOut = await classify(
        () =>
          client(
            urlWith((u) => (u.port = String(silentPort))),
            { connectionTimeout: 0.5 },
          )`SELECT 1`,
      )
      expect(timedOut).toMatchObject({ answer: 503, errno: 'ERR_POSTGRES_CONNECTION_TIMEOUT' })
    } finally {
      silent.close()
    }

    // Ended while its query runs, so the query sees the server's 57P01 (a query sent after the end could
    // instead find the pool reconnected).
    const victim = client()
    const [{ pid }] = await victim`SELECT pg_backend_pid() AS pid`
    const terminated = classify(() => victim`SELECT pg_sleep(5)`)
    const admin = client()
    await eventually(async () => (await admin`SELECT 1 FROM pg_stat_activity WHERE pid = ${pid} AND wait_event = 'PgSleep'`).length === 1)
    await admin`SELECT pg_terminate_backend(${pid})`
    expect(await terminated).toMatchObject({ answer: 503, errno: '57P01' })

    // A connection closed under a running query: what a pool closed for a missed deadline does.
    const closing = client()
    const cut = classify(() => closing`SELECT pg_sleep(5)`)
    await Bun.sleep(100)
    await closing.close({ timeout: 0 })
    expect(await cut).toMatchObject({ answer: 503, errno: 'ERR_POSTGRES_CONNECTION_CLOSED' })
  })

  test('28 invalid authorization and 3D invalid catalog: a role or a database that is not there (any more)', async () => {
    expect(await classify(() => client(urlWith((u) => (u.username = 'nobody')))`SELECT 1`)).toMatchObject({ answer: 503, errno: '28000' })
    expect(await classify(() => client(urlWith((u) => (u.pathname = '/dropped')))`SELECT 1`)).toMatchObject({ answer: 503, errno: '3D000' })
  })

  test('40 transaction rollback: a serialization failure and a deadlock', async () => {
    const [a, b] = [client(), client()]
    const serialization = await classify(async () => {
      await a.begin('ISOLATION LEVEL SERIALIZABLE', async (ta) => {
        await ta`SELECT count(*) FROM t`
        await b.begin('ISOLATION LEVEL SERIALIZABLE', async (tb) => {
          await tb`SELECT count(*) FROM t`
          await tb`INSERT INTO t VALUES (10)`
        })
        await ta`INSERT INTO t VALUES (11)`
      })
    })
    expect(serialization).toMatchObject({ answer: 503, errno: '40001' })

    // Each takes its first row, waits until the other has too, then asks for the other's row.
    const firsts = [Promise.withResolvers<void>(), Promise.withResolvers<void>()]
    const results = await Promise.all(
      [a, b].map((sql, i) =>
        classify(() =>
          sql.begin(async (tx) => {
            await tx`SELECT * FROM t WHERE id = ${i + 1} FOR UPDATE`
            firsts[i]!.resolve()
            await firsts[1 - i]!.promise
            await tx`SELECT * FROM t WHERE id = ${2 - i} FOR UPDATE`
          }),
        ).catch(() => ({ answer: 'committed' as const })),
      ),
    )
    expect(results).toContainEqual(expect.objectContaining({ answer: 503, errno: '40P01' }))
  })

  test('53 insufficient resources: too many connections', async () => {
    await client()`CREATE ROLE limited LOGIN CONNECTION LIMIT 1`
    const limited = urlWith((u) => (u.username = 'limited'))
    await client(limited)`SELECT 1`
    expect(await classify(() => client(limited)`SELECT 1`)).toMatchObject({ answer: 503, errno: '53300' })
  })

  test('57 operator intervention: a statement timeout', async () => {
    const sql = client(cluster.url, { connection: { statement_timeout: '50ms' } })
    expect(await classify(() => sql`SELECT pg_sleep(2)`)).toMatchObject({ answer: 503, errno: '57014' })
  })

  test('58 system error: a file the server cannot read', async () => {
    expect(await classify(() => client()`SELECT pg_read_file('/nonexistent/petstore')`)).toMatchObject({ answer: 503, errno: '58P01' })
  })

  test('25: a read-only transaction, and a session ended for idling in a transaction (an instance frozen mid-transaction)', async () => {
    const readOnly = client(cluster.url, { connection: { default_transaction_read_only: 'on' } })
    expect(await classify(() => readOnly`INSERT INTO t VALUES (20)`)).toMatchObject({ answer: 503, errno: '25006' })

    const idle = client(cluster.url, { connection: { idle_in_transaction_session_timeout: '100ms' } })
    const ended = await classify(() =>
      idle.begin(async (tx) => {
        await tx`SELECT 1`
        // The event loop held, as a frozen instance holds it: the transaction sits idle in the server.
        Bun.sleepSync(500)
        await tx`SELECT 2`
      }),
    )
    expect(ended).toMatchObject({ answer: 503, errno: '25P03' })
  })

  test('55: a lock not available within lock_timeout, and a database in use', async () => {
    const holder = client()
    const waiter = client(cluster.url, { connection: { lock_timeout: '50ms' } })
    const outcome = await holder.begin(async (tx) => {
      await tx`SELECT * FROM t WHERE id = 1 FOR UPDATE`
      return classify(() => waiter`SELECT * FROM t WHERE id = 1 FOR UPDATE`)
    })
    expect(outcome).toMatchObject({ answer: 503, errno: '55P03' })

    const used = await cluster.createDatabase('in_use')
    await client(used)`SELECT 1`
    // PostgreSQL waits five seconds for the other session to leave before it refuses the DROP.
    expect(await classify(() => client()`DROP DATABASE in_use`)).toMatchObject({ answer: 503, errno: '55006' })
  }, 15_000)

  test('a query past our own deadline says so, not the "Connection closed" of the pool closed behind it', async () => {
    const db = openDatabase(cluster.url, { max: 1 }, { queryMs: 300, transactionMs: 300 })
    try {
      for (const late of [() => db`SELECT pg_sleep(3)`, () => db.begin((tx) => tx`SELECT pg_sleep(3)`)]) {
        const error = await late().then(
          () => null,
          (failure: unknown) => failure,
        )
        expect(error).toBeInstanceOf(StorageUnavailableError)
        expect((error as Error).message).toBe('the database did not answer within 300 ms')
      }
    } finally {
      await db.close()
    }
  })

  test('a bug stays a 500: a syntax error, a constraint, a number out of range, a missing table, a failed transaction, an unsafe BEGIN', async () => {
    const sql = client()
    expect(await classify(() => sql`SELEC 1`)).toMatchObject({ answer: 500, errno: '42601' })
    expect(await classify(() => sql`INSERT INTO t VALUES (1)`)).toMatchObject({ answer: 500, errno: '23505' })
    expect(await classify(() => sql`SELECT 2147483647::int + 1`)).toMatchObject({ answer: 500, errno: '22003' })
    expect(await classify(() => sql`SELECT * FROM missing`)).toMatchObject({ answer: 500, errno: '42P01' })
    expect(
      await classify(() =>
        sql.begin(async (tx) => {
          await tx`SELECT 1/0`.catch(() => {})
          await tx`SELECT 1`
        }),
      ),
    ).toMatchObject({ answer: 500, errno: '25P02' })
    expect(await classify(() => client(cluster.url, { max: 2 })`BEGIN`)).toMatchObject({
      answer: 500,
      code: 'ERR_POSTGRES_UNSAFE_TRANSACTION',
    })
  })
})
