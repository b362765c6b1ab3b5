/**
 * Two instances of the binary on one PostgreSQL: each adds its usage counts to the same rows, so
 * `keys usage` gives the sums of the traffic sent to both, while they serve and after they stop; and
 * each instance's console API gives those same sums.
 */
import { expect, setDefaultTimeout, test } from 'bun:test'
import { cli, eventually, startServer } from '../support/binary'
import { describeWithEngines } from '../support/engines'
import { postgresForSuite } from '../support/postgres'

setDefaultTimeout(90_000)

const auth = (key: string) => ({ authorization: `Bearer ${key}` })

interface Figures {
  name: string | null
  today: { requests: number; ok: number; clientErrors: number; limited: number; notImplemented: number; serverErrors: number }
  deprecated: { day: number; week: number }
}

describeWithEngines(['postgresql'], 'usage summed over two instances on PostgreSQL', () => {
  const cluster = postgresForSuite()

  test('two instances add their counts: keys usage gives the sums of both', async () => {
    const databaseUrl = await cluster.createDatabase('usage_sums')
    const createKey = (...args: string[]) => {
      const result = cli(['keys', 'create', '--database-url', databaseUrl, ...args])
      if (result.code !== 0) throw new Error(result.stderr)
      return result.stdout.trim().split('\n').at(-1)!
    }
    // Without Redis each instance limits on its own: 3 a minute on each, so 5 to each is 3 answered and 2 refused.
    const limited = createKey('--plan', 'enterprise', '--rpm', '3', '--rpd', '1000', '--name', 'limited')
    const caller = createKey('--plan', 'pro', '--name', 'caller')
    const servers = await Promise.all([0, 1].map(() => startServer({ console: true, databaseUrl, args: ['--no-access-log'] })))
    const figures = () => {
      const result = cli(['keys', 'usage', '--json', '--database-url', databaseUrl])
      if (result.code !== 0) throw new Error(result.stderr)
      const keys = (JSON.parse(result.stdout) as { keys: Figures[] }).keys
      return Object.fromEntries(
        keys.map((k) => [k.name ?? '(no key)', { today: k.today, deprecated: { day: k.deprecated.day, week: k.deprecated.week } }]),
      )
    }

    for (const server of servers) {
      const statuses: number[] = []
      for (let i = 0; i < 5; i++) statuses.push((await fetch(`${server.base}/pets`, { headers: auth(limited) })).status)
      expect(statuses).toEqual([200, 200, 200, 429, 429])
      for (let i = 0; i < 3; i++) expect((await fetch(`${server.base}/pets/1`, { headers: auth(caller) })).status).toBe(404)
      expect((await fetch(`${server.base}/pets`)).status).toBe(401)
    }
    const expected = {
      limited: {
        today: { requests: 10, ok: 6, clientErrors: 0, limited: 4, notImplemented: 0, serverErrors: 0 },
        deprecated: { day: 0, week: 0 },
      },
      caller: {
        today: { requests: 6, ok: 0, clientErrors: 6, limited: 0, notImplemented: 0, serverErrors: 0 },
        deprecated: { day: 6, week: 6 },
      },
      '(no key)': {
        today: { requests: 2, ok: 0, clientErrors: 2, limited: 0, notImplemented: 0, serverErrors: 0 },
        deprecated: { day: 0, week: 0 },
      },
    }
    await eventually(() => JSON.stringify(figures()) === JSON.stringify(expected), 15_000)
    expect(figures()).toEqual(expected)

    // Each instance's console API: the same sums, for a script with an operator token.
    expect(cli(['operators', 'add', 'ops', '--database-url', databaseUrl]).code).toBe(0)
    const token = cli(['operators', 'token', 'ops', '--database-url', databaseUrl]).stdout.trim().split('\n').at(-1)!
    for (const server of servers) {
      const consoleOrigin = `http://127.0.0.1:${/, console at http:\/\/127\.0\.0\.1:(\d+)\//.exec(server.stderr())![1]}`
      const read = async (path: string) => (await (await fetch(`${consoleOrigin}${path}`, { headers: auth(token) })).json()) as any
      const { keys } = await read('/api/keys')
      const row = (name: string) => keys.find((key: { name: string }) => key.name === name)
      expect([row('limited').requestsToday, row('limited').limitedToday, row('limited').deprecatedWeek]).toEqual([10, 4, 0])
      expect([row('caller').requestsToday, row('caller').limitedToday, row('caller').deprecatedWeek]).toEqual([6, 0, 6])
      const { callers } = await read('/api/deprecation')
      expect(callers.map((caller: { name: string; day: number; week: number }) => [caller.name, caller.day, caller.week])).toEqual([
        ['caller', 6, 6],
      ])
      const one = await read(`/api/keys/${row('limited').id}/usage?window=hour`)
      expect(one.series.total).toMatchObject({ requests: 10, ok: 6, limited: 4 })
      const overview = await read('/api/overview')
      expect(overview.hour.total.requests).toBe(10 + 6 + 2)
      expect(overview.activeKeysToday).toBe(2)
    }

    // One more from each, written at their stops.
    for (const server of servers) expect((await fetch(`${server.base}/pets/1`, { headers: auth(caller) })).status).toBe(404)
    expect(await Promise.all(servers.map((server) => server.stop()))).toEqual([0, 0])
    expect(figures().caller).toEqual({
      today: { requests: 8, ok: 0, clientErrors: 8, limited: 0, notImplemented: 0, serverErrors: 0 },
      deprecated: { day: 8, week: 8 },
    })
  })
})
