/**
 * One key's view in the console reads that key's rows, not the fleet's: with 20,000 keys that all have
 * usage today, on PostgreSQL, its figures are right and the rows the server reads for it (counted by
 * PostgreSQL's own statistics of the keys and usage tables) stay a handful, however many keys there
 * are. How long it takes is printed, not asserted.
 */
import { expect, test } from 'bun:test'
import { COUNTER_COLUMNS } from '../../src/storage/shared/usage-columns'
import { cli, eventually, untilStill } from '../support/binary'
import { describeWithEngines } from '../support/engines'
import { postgresForSuite } from '../support/postgres'
import { startWithConsole } from './helpers'

const KEYS = 20_000
const TABLES = "'api_keys', 'usage_minutes', 'usage_hours'"

describeWithEngines(['postgresql'], "one key's usage among 20,000 keys", () => {
  const cluster = postgresForSuite()

  test('the console reads only its rows for its figures', async () => {
    const databaseUrl = await cluster.createDatabase('one_key_usage')
    const created = cli(['keys', 'create', '--plan', 'pro', '--name', 'watched', '--database-url', databaseUrl])
    expect(created.code).toBe(0)
    const listed = JSON.parse(cli(['keys', 'list', '--json', '--database-url', databaseUrl]).stdout) as { id: string }[]
    const id = listed[0]!.id
    const admin = new Bun.SQL(databaseUrl, { max: 1 })
    const server = await startWithConsole({ databaseUrl, args: ['--no-access-log'] })
    try {
      // Every key, the watched one included, made 3 requests in this minute (and so this hour): 2 ok, 1 limited.
      const minute = Math.floor(Date.now() / 60_000) * 60_000
      const hour = Math.floor(Date.now() / 3_600_000) * 3_600_000
      await admin.unsafe(`INSERT INTO api_keys (id, name, plan, rpm, rpd, secret_hash, created_at)
                          SELECT 'key_bulk' || i, 'bulk', 'free', 60, 1000, 'bulk-hash-' || i, 0 FROM generate_series(1, ${KEYS}) AS i`)
      for (const [table, at] of [
        ['usage_minutes', minute],
        ['usage_hours', hour],
      ] as const)
        await admin.unsafe(`INSERT INTO ${table} (at, key_id, ${COUNTER_COLUMNS.join(', ')})
                            SELECT ${at}, k, ${COUNTER_COLUMNS.map((column) => ({ ok: 2, limited: 1 })[column] ?? 0).join(', ')}
                            FROM (SELECT 'key_bulk' || i AS k FROM generate_series(1, ${KEYS}) AS i UNION ALL SELECT '${id}') AS keys`)
      await admin`ANALYZE`

      const signIn = await fetch(`${server.console}/api/session`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', origin: server.console },
        body: JSON.stringify({ name: 'admin', password: server.password }),
      })
      const cookie = signIn.headers.get('set-cookie')!.split(';')[0]!
      const view = async () => {
        const started = performance.now()
        const answer = await fetch(`${server.console}/api/keys/${id}/usage?window=day`, { headers: { cookie } })
        expect(answer.status).toBe(200)
        const body = (await answer.json()) as {
          key: { id: string; name: string; today: { requests: number; ok: number; limited: number } }
        }
        expect(body.key).toMatchObject({ id, name: 'watched', today: { requests: 3, ok: 2, limited: 1 } })
        return performance.now() - started
      }
      await view()

      /** Scans of the keys and usage tables and the rows they read, as the statistics say now. */
      const reads = async () => {
        await admin`SELECT pg_stat_clear_snapshot()`
        const [row] = await admin.unsafe(`SELECT sum(coalesce(seq_scan, 0) + coalesce(idx_scan, 0)) AS scans,
                                                 sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)) AS rows
                                          FROM pg_stat_user_tables WHERE relname IN (${TABLES})`)
        return { scans: Number(row.scans), rows: Number(row.rows) }
      }
      /**
       * One round: waits (at most 6 s) for the statistics to stand still for 1.5 s, longer than PostgreSQL
       * takes to report a busy connection's reads (it reports at most once a second), then views five
       * times and counts the rows read meanwhile. Other reads (the change poll's, a pool connection's
       * reads reported late: an idle one reports only after 10 s) can only add to the count, so the
       * smallest of a few rounds is what a view costs; a view that read the fleet's rows would read
       * thousands in every round.
       */
      const timeline: string[] = []
      const round = async () => {
        const { last: before } = await untilStill(reads, 1_500, 6_000, {
          same: (a, b) => a.rows === b.rows,
          onChange: (from, to) => timeline.push(`${Math.round(performance.now())} ms: ${to.rows - from.rows} rows read in the background`),
        })
        const times: number[] = []
        for (let i = 0; i < 5; i++) times.push(await view())
        // Five views of at least five queries each on the usage tables, shown within about a second.
        let after = before
        await eventually(async () => (after = await reads()).scans >= before.scans + 25, 10_000)
        const perView = (after.rows - before.rows) / 5
        timeline.push(
          `${Math.round(performance.now())} ms: ${perView} rows read per view, ${times.map((ms) => ms.toFixed(1)).join('/')} ms`,
        )
        return perView
      }
      let fewest = await round()
      for (let rounds = 1; fewest >= 200 && rounds < 4; rounds++) fewest = Math.min(fewest, await round())
      console.error(`one key's view among ${KEYS} keys:\n${timeline.join('\n')}`)
      // Its own rows, a row of the keys table, and the change polls' reads meanwhile: nowhere near a fleet's.
      expect(fewest, `the server's log:\n${server.stderr()}`).toBeLessThan(200)
    } finally {
      await server.stop()
      await admin.close()
    }
  }, 120_000)
})
