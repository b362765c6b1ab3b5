/**
 * Per-key usage over the compiled binary and a real data file: known traffic from two keys (one pushed
 * into 429s, one calling the deprecated getPet) and from no key gives exactly those counts in
 * `keys usage --json`, written while the server runs and at its stop, and still there after a restart;
 * `keys set-plan` reaches a running server within a second; the retention flags and the commands'
 * arguments are checked.
 */
import { Database } from 'bun:sqlite'
import { afterAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { join } from 'node:path'
import { emptyCounts, OK } from '../../src/domain/usage'
import { DAY_MS, HOUR_MS } from '../../src/domain/time'
import { openSqliteStorage } from '../../src/storage/sqlite'
import { TAKE_BACK } from '../support/previous-schema'
import { MIGRATIONS } from '../../src/storage/sqlite/migrations'
import { cli, createKeyWithCli, eventually, keyId, startServer, tempDir } from '../support/binary'
import { startRedis } from '../support/redis'
import { auth, cliAsync, killSpawned, postPet, serveExpectingFailure, startWithConsole } from './helpers'

afterAll(killSpawned)
setDefaultTimeout(60_000)

interface Outcomes {
  requests: number
  ok: number
  clientErrors: number
  limited: number
  notImplemented: number
  serverErrors: number
}
interface KeyUsage {
  keyId: string | null
  name: string | null
  plan: string | null
  today: Outcomes
  window: Outcomes
  lastUsed: string | null
  lastUsedAt: string | null
  deprecated: { day: number; week: number; last: string | null }
}

const outcomes = (ok: number, clientErrors: number, limited: number): Outcomes => ({
  requests: ok + clientErrors + limited,
  ok,
  clientErrors,
  limited,
  notImplemented: 0,
  serverErrors: 0,
})

async function usage(dataFile: string, ...args: string[]): Promise<KeyUsage[]> {
  const result = await cliAsync(['keys', 'usage', '--json', '--data', dataFile, ...args])
  if (result.code !== 0) throw new Error(result.stderr)
  return (JSON.parse(result.stdout) as { keys: KeyUsage[] }).keys
}

/** The figures `keys usage` gives each key, by name ('(no key)' for the keyless bucket). */
async function figures(dataFile: string): Promise<Record<string, Pick<KeyUsage, 'today' | 'window' | 'deprecated'>>> {
  const rows = await usage(dataFile)
  return Object.fromEntries(
    rows.map((row) => [row.name ?? '(no key)', { today: row.today, window: row.window, deprecated: { ...row.deprecated, last: null } }]),
  )
}

describe('keys usage', () => {
  test('known traffic from two keys and from no key gives exactly its counts, written while serving and at the stop, and kept over a restart', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const limited = createKeyWithCli(dataFile, ['--plan', 'enterprise', '--rpm', '5', '--rpd', '1000', '--name', 'limited'])
    const caller = createKeyWithCli(dataFile, ['--plan', 'pro', '--name', 'caller'])
    const server = await startServer({ dataFile, args: ['--no-access-log'] })

    // "limited": 8 listings in a row on 5 a minute (one token back every 12 s): 5 answered, 3 refused.
    const statuses: number[] = []
    for (let i = 0; i < 8; i++) statuses.push((await fetch(`${server.base}/pets`, { headers: auth(limited) })).status)
    expect(statuses).toEqual([200, 200, 200, 200, 200, 429, 429, 429])
    // "caller": a create, three getPet of it, one getPet of a pet that does not exist.
    const created = (await (await postPet(server.base, caller, { name: 'Rex', categoryId: 1, status: 'available' })).json()) as {
      id: number
    }
    for (const id of [created.id, created.id, created.id, created.id + 1000])
      expect((await fetch(`${server.base}/pets/${id}`, { headers: auth(caller) })).status).toBe(id === created.id ? 200 : 404)
    // No key, twice; and outside the API, which is not usage.
    for (let i = 0; i < 2; i++) expect((await fetch(`${server.base}/pets`)).status).toBe(401)
    expect((await fetch(`${server.origin}/healthz`)).status).toBe(200)

    const expected = {
      limited: { today: outcomes(5, 0, 3), window: outcomes(5, 0, 3), deprecated: { day: 0, week: 0, last: null } },
      caller: { today: outcomes(4, 1, 0), window: outcomes(4, 1, 0), deprecated: { day: 4, week: 4, last: null } },
      '(no key)': { today: outcomes(0, 2, 0), window: outcomes(0, 2, 0), deprecated: { day: 0, week: 0, last: null } },
    }
    // Written by the server's own batch, while it runs: a few seconds at most.
    await eventually(async () => JSON.stringify(await figures(dataFile)) === JSON.stringify(expected), 15_000)
    expect(await figures(dataFile)).toEqual(expected)
    const rows = await usage(dataFile)
    const callerRow = rows.find((row) => row.name === 'caller')!
    expect(callerRow.keyId).toBe(keyId(dataFile, 'caller'))
    expect(Date.parse(callerRow.deprecated.last!)).toBeGreaterThan(Date.now() - 5 * 60_000)

    // The seconds counted since the last batch are written at the stop.
    expect((await fetch(`${server.base}/pets`, { headers: auth(caller) })).status).toBe(200)
    expect(await server.stop()).toBe(0)
    const afterStop = await figures(dataFile)
    expect(afterStop.caller!.today).toEqual(outcomes(5, 1, 0))
    // The stop saves the keys' last-used times: named as the console names them, and by the earlier name
    // beside it until the next release (docs/upgrading.md).
    const saved = (await usage(dataFile)).find((row) => row.name === 'caller')!
    expect(Date.parse(saved.lastUsedAt!)).toBeGreaterThan(Date.now() - 5 * 60_000)
    expect(saved.lastUsed).toBe(saved.lastUsedAt)

    // A restart adds to what is there.
    const again = await startServer({ dataFile, args: ['--no-access-log'] })
    expect((await fetch(`${again.base}/pets/${created.id}`, { headers: auth(caller) })).status).toBe(200)
    expect(await again.stop()).toBe(0)
    const restarted = await figures(dataFile)
    expect(restarted.caller).toEqual({ today: outcomes(6, 1, 0), window: outcomes(6, 1, 0), deprecated: { day: 5, week: 5, last: null } })
    expect(restarted.limited).toEqual(expected.limited)

    // One key: its figures and its minutes.
    const one = await cliAsync(['keys', 'usage', keyId(dataFile, 'limited'), '--json', '--since', '30m', '--data', dataFile])
    expect(one.code).toBe(0)
    const detail = JSON.parse(one.stdout) as KeyUsage & { series: { resolution: string; points: Outcomes[] } }
    expect(detail.window).toEqual(outcomes(5, 0, 3))
    expect(detail.series.resolution).toBe('minute')
    expect(detail.series.points.reduce((sum, point) => sum + point.limited, 0)).toBe(3)
    const table = await cliAsync(['keys', 'usage', '--data', dataFile])
    expect(table.stdout).toMatch(/^ID\s+NAME\s+PLAN\s+TODAY\s+429 TODAY/)
    expect(table.stdout).toMatch(/\(no key\)/)
  })

  test('the arguments are checked: a bad --since, an unknown key, flags of other commands', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    createKeyWithCli(dataFile, ['--plan', 'free'])
    for (const since of ['5x', '0m', '91d', '-1h']) {
      const result = cli(['keys', 'usage', `--since=${since}`, '--data', dataFile])
      expect(result.code).toBe(2)
      expect(result.stderr).toContain('--since must be a duration from 1m to 90d')
    }
    const unknown = cli(['keys', 'usage', 'key_nope', '--data', dataFile])
    expect(unknown.code).toBe(1)
    expect(unknown.stderr).toContain('no key with id "key_nope"')
    expect(cli(['keys', 'usage', '--plan', 'pro', '--data', dataFile]).stderr).toContain('--plan does not apply to keys usage')
    expect(cli(['keys', 'usage', 'a', 'b', '--data', dataFile]).stderr).toContain('unexpected argument "b"')
  })

  test('an expired key is marked as such in the table, as a revoked one is, and the JSON says when it expires', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    createKeyWithCli(dataFile, ['--plan', 'free', '--name', 'lasting'])
    createKeyWithCli(dataFile, ['--plan', 'pro', '--name', 'brief', '--expires-in', '1s'])
    createKeyWithCli(dataFile, ['--plan', 'free', '--name', 'gone'])
    expect(cli(['keys', 'revoke', keyId(dataFile, 'gone'), '--data', dataFile]).code).toBe(0)
    const rowOf = (table: string, name: string) => table.split('\n').find((line) => line.includes(` ${name} `)) ?? ''
    // The minimum expiry is a second away: the table is read until it has passed.
    let table = ''
    await eventually(async () =>
      rowOf((table = (await cliAsync(['keys', 'usage', '--data', dataFile])).stdout), 'brief').includes('pro (expired)'),
    )
    expect(rowOf(table, 'gone')).toContain('free (revoked)')
    expect(rowOf(table, 'lasting')).toMatch(/ free +\d/)
    const json = (await usage(dataFile)) as unknown as { name: string; expiresAt: string | null }[]
    expect(json.find((key) => key.name === 'brief')?.expiresAt).toMatch(/^\d{4}-\d\d-\d\dT/)
    expect(json.find((key) => key.name === 'lasting')?.expiresAt).toBeNull()
  })

  test('a key banned right now is marked (banned), with its bannedUntil, when its bans are in Redis; without --redis-url, the command says it cannot know', async () => {
    const redis = await startRedis()
    try {
      const dataFile = join(tempDir(), 'petstore.db')
      const noisy = createKeyWithCli(dataFile, ['--plan', 'enterprise', '--rpm', '1', '--rpd', '1000', '--name', 'noisy'])
      createKeyWithCli(dataFile, ['--plan', 'free', '--name', 'calm'])
      const server = await startServer({ dataFile, args: ['--no-access-log', '--redis-url', redis.url, '--ban-after', '1'] })
      // Its one token, the 429 naming the wait, one early 429, and the next early request starts the ban.
      const codes: string[] = []
      for (let i = 0; i < 4; i++) {
        const res = await fetch(`${server.base}/pets`, { headers: auth(noisy) })
        codes.push(res.status === 200 ? '200' : ((await res.json()) as { code: string }).code)
      }
      expect(codes).toEqual(['200', 'rate_limited', 'rate_limited', 'key_banned'])
      const rowOf = (table: string, name: string) => table.split('\n').find((line) => line.includes(` ${name} `)) ?? ''

      const table = await cliAsync(['keys', 'usage', '--data', dataFile, '--redis-url', redis.url])
      expect(table.code).toBe(0)
      expect(rowOf(table.stdout, 'noisy')).toContain('enterprise (banned)')
      expect(rowOf(table.stdout, 'calm')).toMatch(/ free +\d/)
      const json = JSON.parse((await cliAsync(['keys', 'usage', '--json', '--data', dataFile, '--redis-url', redis.url])).stdout) as {
        bansUnknown?: string
        keys: { name: string | null; bannedUntil?: string | null }[]
      }
      expect(json.bansUnknown).toBeUndefined()
      // --ban-seconds 600 by default: it ends 599 to 600 s from now.
      const until = Date.parse(json.keys.find((key) => key.name === 'noisy')!.bannedUntil!)
      expect(until - Date.now()).toBeGreaterThan(590_000)
      expect(until - Date.now()).toBeLessThanOrEqual(600_000)
      expect(json.keys.find((key) => key.name === 'calm')!.bannedUntil).toBeNull()
      const one = JSON.parse(
        (await cliAsync(['keys', 'usage', keyId(dataFile, 'noisy'), '--json', '--data', dataFile, '--redis-url', redis.url])).stdout,
      )
      expect(Date.parse(one.bannedUntil)).toBe(until)

      // Without the Redis the bans are in, nothing is marked and the command says why, in the table and the JSON.
      const blind = await cliAsync(['keys', 'usage', '--data', dataFile])
      expect(rowOf(blind.stdout, 'noisy')).toMatch(/ enterprise +\d/)
      expect(blind.stderr).toContain(
        'keys banned now are not marked: without --redis-url, a ban lives only in the memory of the server that started it',
      )
      const blindJson = JSON.parse((await cliAsync(['keys', 'usage', '--json', '--data', dataFile])).stdout)
      expect(blindJson.bansUnknown).toStartWith('without --redis-url')
      expect(blindJson.keys.every((key: object) => !('bannedUntil' in key))).toBe(true)
      await server.stop()
    } finally {
      await redis.destroy()
    }
  })
})

describe('the 501 of GET /store/orders', () => {
  test('is counted and shown as not implemented, never as a server error: keys usage (JSON and table) and the console', async () => {
    const server = await startWithConsole({ args: ['--no-access-log'] })
    try {
      const key = createKeyWithCli(server.dataFile, ['--plan', 'pro', '--name', 'orders'])
      for (let i = 0; i < 3; i++) expect((await fetch(`${server.base}/store/orders`, { headers: auth(key) })).status).toBe(501)
      expect((await fetch(`${server.base}/pets`, { headers: auth(key) })).status).toBe(200)
      const expected = { requests: 4, ok: 1, clientErrors: 0, limited: 0, notImplemented: 3, serverErrors: 0 }
      const row = async () => (await usage(server.dataFile)).find((entry) => entry.name === 'orders')
      await eventually(async () => (await row())?.today.requests === 4, 15_000)
      expect((await row())!.today).toEqual(expected)

      const id = keyId(server.dataFile, 'orders')
      const table = await cliAsync(['keys', 'usage', id, '--since', '30m', '--data', server.dataFile])
      const lines = table.stdout.split('\n')
      const header = lines.findIndex((line) => line.startsWith('AT '))
      expect(lines[header]!.split(/\s+/).slice(0, 7)).toEqual(['AT', 'REQUESTS', '2XX', '4XX', '429', '501', '5XX'])
      expect(lines[header + 1]!.split(/\s+/).slice(1, 7)).toEqual(['4', '1', '0', '0', '3', '0'])

      // The console's overview and the key's figures say the same, as what they are.
      const token = cli(['operators', 'token', 'admin', '--data', server.dataFile]).stdout.trim()
      const read = async (path: string) =>
        (await (await fetch(`${server.console}${path}`, { headers: { authorization: `Bearer ${token}` } })).json()) as any
      const overview = await read('/api/overview')
      expect(overview.hour.total).toMatchObject(expected)
      expect(overview.hour.notImplemented.reduce((a: number, b: number) => a + b, 0)).toBe(3)
      expect(overview.hour.serverErrors.reduce((a: number, b: number) => a + b, 0)).toBe(0)
      expect((await read(`/api/keys/${id}/usage?window=hour`)).key.today).toEqual(expected)
    } finally {
      await server.stop()
    }
  })

  test('a data file from before 501s were counted apart keeps its rows: their 5xx stay 5xx, and 501s are counted apart from then on', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const key = createKeyWithCli(dataFile, ['--plan', 'pro', '--name', 'old'])
    const id = keyId(dataFile, 'old')
    // Taken back to the schema before the 501s' column, with a minute of usage as that schema held it.
    const older = new Database(dataFile)
    // The 501s' step and the three after it.
    for (const statement of TAKE_BACK.slice(0, 4).flat()) older.run(statement)
    older.run(`PRAGMA user_version = ${MIGRATIONS.length - 4}`)
    const latency = Array.from({ length: 19 }, (_, i) => `latency_${String(i).padStart(2, '0')}`)
    const at = Math.floor(Date.now() / 60_000) * 60_000
    for (const [table, start] of [
      ['usage_minutes', at],
      ['usage_hours', Math.floor(at / HOUR_MS) * HOUR_MS],
    ] as const)
      older
        .query(
          `INSERT INTO ${table} (at, key_id, ok, client_errors, limited, server_errors, deprecated, ${latency.join(', ')})
           VALUES (?, ?, 1, 0, 0, 2, 0, 3${', 0'.repeat(latency.length - 1)})`,
        )
        .run(start, id)
    older.close()

    const server = await startServer({ dataFile, args: ['--no-access-log'] })
    expect((await fetch(`${server.base}/store/orders`, { headers: auth(key) })).status).toBe(501)
    expect(await server.stop()).toBe(0)
    const check = new Database(dataFile, { readonly: true })
    expect(check.query('PRAGMA user_version').get()).toEqual({ user_version: MIGRATIONS.length })
    check.close()
    const row = (await usage(dataFile)).find((entry) => entry.name === 'old')!
    expect(row.today).toEqual({ requests: 4, ok: 1, clientErrors: 0, limited: 0, notImplemented: 1, serverErrors: 2 })
  })
})

describe('keys set-plan', () => {
  test("a running server applies a key's new plan within a second: its limits and its rate-limit fields", async () => {
    const server = await startServer({ args: ['--no-access-log'] })
    const secret = createKeyWithCli(server.dataFile, ['--plan', 'free', '--name', 'moving'])
    const id = keyId(server.dataFile, 'moving')
    await eventually(async () => (await fetch(`${server.base}/pets`, { headers: auth(secret) })).status === 200)
    const policy = async () => (await fetch(`${server.base}/pets`, { headers: auth(secret) })).headers.get('ratelimit-policy')
    expect(await policy()).toBe('"minute";q=60;w=60, "day";q=1000;w=86400')

    const result = await cliAsync(['keys', 'set-plan', id, 'enterprise', '--rpm', '7', '--rpd', '70', '--data', server.dataFile])
    expect(result.code).toBe(0)
    expect(result.stderr).toContain(`${id} is now on the enterprise plan (7/min, 70/day)`)
    const changedAt = Date.now()
    await eventually(async () => (await policy()) === '"minute";q=7;w=60, "day";q=70;w=86400', 1_000)
    expect(Date.now() - changedAt).toBeLessThan(1_000)
    const listed = JSON.parse(cli(['keys', 'list', '--json', '--data', server.dataFile]).stdout) as {
      id: string
      plan: string
      rpm: number
    }[]
    expect(listed.find((key) => key.id === id)).toMatchObject({ plan: 'enterprise', rpm: 7, rpd: 70 })
    expect(await server.stop()).toBe(0)
  })

  test('a bad plan, missing limits, an unknown or revoked key are refused, and nothing changes', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    createKeyWithCli(dataFile, ['--plan', 'free', '--name', 'k'])
    const id = keyId(dataFile, 'k')
    const bad = cli(['keys', 'set-plan', id, 'gold', '--data', dataFile])
    expect(bad.code).toBe(2)
    expect(bad.stderr).toContain('--plan must be one of free, pro, business, enterprise, not "gold"')
    expect(cli(['keys', 'set-plan', id, 'enterprise', '--data', dataFile]).stderr).toContain('an enterprise key needs its own limits')
    expect(cli(['keys', 'set-plan', id, 'pro', '--rpm', '5', '--data', dataFile]).stderr).toContain(
      '--rpm and --rpd are only for --plan enterprise',
    )
    expect(cli(['keys', 'set-plan', id, '--data', dataFile]).stderr).toContain('keys set-plan needs a key ID and a plan')
    const missing = cli(['keys', 'set-plan', 'key_nope', 'pro', '--data', dataFile])
    expect(missing.code).toBe(1)
    expect(missing.stderr).toContain('no active key with id "key_nope"')
    expect(cli(['keys', 'revoke', id, '--data', dataFile]).code).toBe(0)
    expect(cli(['keys', 'set-plan', id, 'pro', '--data', dataFile]).code).toBe(1)
    expect(JSON.parse(cli(['keys', 'list', '--json', '--data', dataFile]).stdout)[0]).toMatchObject({ plan: 'free', rpm: 60, rpd: 1000 })
  })
})

describe('usage retention flags', () => {
  test('each is an integer of days in range, hours kept at least as long as minutes, from a flag or its variable', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const cases: [string[], Record<string, string>, string][] = [
      [['--usage-minutes-days', '0'], {}, '--usage-minutes-days must be an integer from 1 to 365, not "0"'],
      [['--usage-hours-days', 'x'], {}, '--usage-hours-days must be an integer from 1 to 3650, not "x"'],
      [[], { PETSTORE_USAGE_HOURS_DAYS: '99999' }, 'PETSTORE_USAGE_HOURS_DAYS must be an integer from 1 to 3650, not "99999"'],
      [
        ['--usage-minutes-days', '30', '--usage-hours-days', '20'],
        {},
        '--usage-hours-days (20) must be at least --usage-minutes-days (30)',
      ],
      [[], { PETSTORE_USAGE_MINUTES_DAYS: '100' }, '--usage-hours-days'],
    ]
    for (const [args, env, message] of cases) {
      const result = await serveExpectingFailure(['--port', '0', '--host', '127.0.0.1', '--data', dataFile, ...args], { env })
      expect(result.listened).toBe(false)
      expect(result.code).toBe(2)
      expect(result.stderr).toContain(message)
    }
    const accepted = await startServer({ dataFile, args: ['--usage-minutes-days', '1', '--usage-hours-days', '1'] })
    expect(await accepted.stop()).toBe(0)
  })
})

describe('usage retention', () => {
  test('a server prunes minutes and hours past their retention at its start, by default and as the flags say', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const hour = Math.floor(Date.now() / HOUR_MS) * HOUR_MS
    const ages = [0, 2, 8, 91].map((days) => hour - days * DAY_MS)
    const seed = openSqliteStorage(dataFile)
    seed.usage.add(ages.map((at) => ({ at, keyId: 'key_x', counts: Object.assign(emptyCounts(), { [OK]: 1 }) })))
    seed.close()
    const kept = () => {
      const storage = openSqliteStorage(dataFile)
      try {
        return {
          minute: storage.usage.series('minute', 0).map((row) => row.at),
          hour: storage.usage.series('hour', 0).map((row) => row.at),
        }
      } finally {
        storage.close()
      }
    }
    expect(kept()).toEqual({ minute: [...ages].reverse(), hour: [...ages].reverse() })

    const byDefault = await startServer({ dataFile, args: ['--no-access-log'] })
    // 7 days of minutes, 90 of hours.
    await eventually(() => JSON.stringify(kept()) === JSON.stringify({ minute: [ages[1], ages[0]], hour: [ages[2], ages[1], ages[0]] }))
    expect(await byDefault.stop()).toBe(0)

    const shorter = await startServer({ dataFile, args: ['--no-access-log', '--usage-minutes-days', '1', '--usage-hours-days', '3'] })
    await eventually(() => JSON.stringify(kept()) === JSON.stringify({ minute: [ages[0]], hour: [ages[1], ages[0]] }))
    expect(await shorter.stop()).toBe(0)
  })
})
