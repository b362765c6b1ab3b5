/**
 * A server over 200,000 keys, on the data file and on PostgreSQL: a key created or revoked with the CLI
 * takes effect within the usual second, and the change poll reads only what changed (on PostgreSQL,
 * counted by the server's own statistics of rows read from the keys table). The speed figures (start
 * time, latency while keys change) are measured by test/bench/many-keys.ts, not asserted here.
 */
import { Database } from 'bun:sqlite'
import { afterAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { join } from 'node:path'
import { cli, eventually, type Server, startServer, tempDir } from '../support/binary'
import { describeWithEngines } from '../support/engines'
import { postgresForSuite } from '../support/postgres'
import { auth, killSpawned } from './helpers'

afterAll(killSpawned)
setDefaultTimeout(90_000)

const KEYS = 200_000
// The keys are inserted as rows from before change numbers (no `change` given): the server reads them
// all at start, and only changes after that.

/** `keys create` on the store `storage` names (`--data FILE` or `--database-url URL`); the secret. */
function createKey(storage: string[], name: string): string {
  const result = cli(['keys', 'create', '--plan', 'pro', '--name', name, ...storage])
  if (result.code !== 0) throw new Error(`keys create failed: ${result.stderr}`)
  return result.stdout.trim().split('\n').at(-1)!
}

/** A key made and then revoked with the CLI is served, then refused, each within about a second. */
async function keyChangesTakeEffect(server: Server, storage: string[]): Promise<void> {
  // Timed from when the command has made the key: its own start-up is not the server's delay.
  const secret = createKey(storage, 'late')
  const created = Date.now()
  await eventually(async () => (await fetch(`${server.base}/pets`, { headers: auth(secret) })).status === 200, 5_000)
  expect(Date.now() - created).toBeLessThan(1_500)
  const listed = JSON.parse(cli(['keys', 'list', '--json', ...storage]).stdout) as { id: string; name: string }[]
  expect(listed).toHaveLength(KEYS + 2)
  const id = listed.find((key) => key.name === 'late')!.id
  expect(cli(['keys', 'revoke', id, ...storage]).code).toBe(0)
  const revoked = Date.now()
  await eventually(async () => (await fetch(`${server.base}/pets`, { headers: auth(secret) })).status === 401, 5_000)
  expect(Date.now() - revoked).toBeLessThan(1_500)
}

describe('200,000 keys on the data file', () => {
  test('a key created or revoked with the CLI takes effect within a second', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const storage = ['--data', dataFile]
    createKey(storage, 'first')
    const db = new Database(dataFile)
    db.transaction(() => {
      db.run(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${KEYS})
              INSERT INTO api_keys (id, name, plan, rpm, rpd, secret_hash, created_at)
              SELECT 'key_bulk' || i, 'bulk', 'free', 60, 1000, 'bulk-hash-' || i, 0 FROM n`)
    })()
    db.close()
    const server = await startServer({ dataFile, args: ['--no-access-log'] })
    await keyChangesTakeEffect(server, storage)
    expect(await server.stop()).toBe(0)
  })
})

describeWithEngines(['postgresql'], '200,000 keys on PostgreSQL', () => {
  const cluster = postgresForSuite()

  test('the change poll reads only changed rows, and CLI changes take effect within a second', async () => {
    const databaseUrl = await cluster.createDatabase('many_keys')
    const storage = ['--database-url', databaseUrl]
    createKey(storage, 'first')
    const admin = new Bun.SQL(databaseUrl, { max: 1 })
    try {
      await admin.unsafe(`INSERT INTO api_keys (id, name, plan, rpm, rpd, secret_hash, created_at)
                          SELECT 'key_bulk' || i, 'bulk', 'free', 60, 1000, 'bulk-hash-' || i, 0
                          FROM generate_series(1, ${KEYS}) AS i`)
      /** Scans of the keys table and rows they read, as the statistics say now. */
      const reads = async () => {
        await admin`SELECT pg_stat_clear_snapshot()`
        const [row] = await admin`SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) AS scans,
                                         coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) AS rows
                                  FROM pg_stat_user_tables WHERE relname = 'api_keys'`
        return { scans: Number(row.scans), rows: Number(row.rows) }
      }
      const server = await startServer({ databaseUrl, args: ['--no-access-log'] })
      // The start reads every key once; the statistics show it within about a second.
      let before = await reads()
      await eventually(async () => (before = await reads()).rows >= KEYS, 10_000)
      // A dozen polls later (three seconds at four a second), they have read next to nothing.
      let after = before
      await eventually(async () => (after = await reads()).scans >= before.scans + 12, 15_000)
      expect(after.rows - before.rows).toBeLessThan(1_000)
      await keyChangesTakeEffect(server, storage)
      expect(await server.stop()).toBe(0)
    } finally {
      await admin.close()
    }
  })
})
