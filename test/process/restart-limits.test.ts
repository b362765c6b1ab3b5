/**
 * The in-process limiter's state across a plain restart on the data file, over the compiled binary: a
 * stopping server leaves its bans and buckets in `FILE.handover` as a takeover's does, and a plain
 * `serve` takes them up; what the command line changed meanwhile wins; time that passed counts; a
 * `kill -9` loses them. The takeover's own hand-over is tested in takeover.test.ts.
 */
import { afterAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { cli, createKeyWithCli, tempDir } from '../support/binary'
import { describeWithEngines } from '../support/engines'
import { redisForSuite } from '../support/redis'
import { auth, killSpawned, type RawServer, serveExpectingFailure, spawnServe } from './helpers'

afterAll(killSpawned)
setDefaultTimeout(60_000)

const BAN_SECONDS = 600

const serve = (dataFile: string, more: string[] = []) =>
  spawnServe([
    ...['--port', '0', '--host', '127.0.0.1', '--data', dataFile, '--no-access-log', '--console-address', 'off'],
    ...['--ban-after', '3', '--ban-seconds', String(BAN_SECONDS), '--trust-proxy', 'loopback', ...more],
  ])

const from = (address: string, headers: Record<string, string> = {}) => ({ ...headers, 'x-forwarded-for': address })

async function answer(server: RawServer, headers: Record<string, string>) {
  const response = await fetch(`${server.base}/pets`, { headers })
  const body = (await response.json()) as { code?: string }
  return {
    status: response.status,
    code: body.code ?? 'ok',
    retryAfter: Number(response.headers.get('retry-after') ?? 0),
    remaining: Number(response.headers.get('x-ratelimit-remaining')),
  }
}

/** A key of 2 requests a minute, named, with its id. */
function tinyKey(dataFile: string, name: string): { id: string; secret: string } {
  const secret = createKeyWithCli(dataFile, ['--plan', 'enterprise', '--rpm', '2', '--rpd', '1000', '--name', name])
  const listed = JSON.parse(cli(['keys', 'list', '--json', '--data', dataFile]).stdout) as { id: string; name: string }[]
  return { id: listed.find((key) => key.name === name)!.id, secret }
}

/** Its 2, a 429 naming the wait, then 429s until the fourth sent before it starts its ban (--ban-after 3). */
async function banKey(server: RawServer, secret: string): Promise<void> {
  const codes: string[] = []
  while (codes.at(-1) !== 'key_banned' && codes.length < 10) codes.push((await answer(server, auth(secret, from('198.51.100.1')))).code)
  expect(codes).toEqual(['ok', 'ok', 'rate_limited', 'rate_limited', 'rate_limited', 'rate_limited', 'key_banned'])
}

/** Spends the address's keyless 60 a minute, 30 requests at a time; then, when asked, keeps going until it is banned. */
async function spendAddress(server: RawServer, address: string, ban: boolean): Promise<void> {
  for (let round = 0; round < 2; round++) {
    const statuses = await Promise.all(Array.from({ length: 30 }, () => answer(server, from(address)).then((a) => a.status)))
    expect(statuses).toEqual(statuses.map(() => 401))
  }
  expect((await answer(server, from(address))).code).toBe('rate_limited')
  if (!ban) return
  for (let i = 0; i < 3; i++) await answer(server, from(address))
  expect((await answer(server, from(address))).code).toBe('address_banned')
}

async function stopWith(server: RawServer, signal: NodeJS.Signals): Promise<number> {
  server.proc.kill(signal)
  return server.exited
}

interface LeftState {
  keys: Record<string, { minute: { tokens: number; updatedAt: number }; bannedUntil?: number; rejections?: number[] }>
  addresses: Record<string, { bannedUntil?: number }>
}

const leftState = (dataFile: string) => JSON.parse(readFileSync(`${dataFile}.handover`, 'utf8')) as LeftState

describe('a plain restart on the data file', () => {
  test('bans, address buckets and minute buckets carry over SIGTERM, SIGQUIT and SIGINT; kill -9 loses them', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const banned = tinyKey(dataFile, 'banned')
    const free = createKeyWithCli(dataFile, ['--plan', 'free'])
    let server = await serve(dataFile)
    const bannedAt = Date.now()
    await banKey(server, banned.secret)
    await spendAddress(server, '203.0.113.5', false)
    const addressSpentAt = Date.now()
    await spendAddress(server, '203.0.113.6', true)
    // The Free key (60 a minute) spends 20 of its minute.
    let remaining = 0
    for (let i = 0; i < 20; i++) remaining = (await answer(server, auth(free))).remaining
    expect(remaining).toBe(40)
    let spentAt = Date.now()

    for (const signal of ['SIGTERM', 'SIGQUIT', 'SIGINT'] as const) {
      expect(await stopWith(server, signal)).toBe(0)
      const left = existsSync(`${dataFile}.handover`)
        ? { mode: statSync(`${dataFile}.handover`).mode & 0o777, text: readFileSync(`${dataFile}.handover`, 'utf8') }
        : null
      server = await serve(dataFile)
      expect(existsSync(`${dataFile}.handover`)).toBe(false)

      const banLeft = BAN_SECONDS - Math.floor((Date.now() - bannedAt) / 1000)
      const keyNow = await answer(server, auth(banned.secret, from('198.51.100.1')))
      expect({ signal, ...keyNow }).toMatchObject({ signal, status: 429, code: 'key_banned', remaining: 0 })
      expect(keyNow.retryAfter).toBeGreaterThanOrEqual(banLeft - 1)
      expect(keyNow.retryAfter).toBeLessThanOrEqual(BAN_SECONDS)
      const addressNow = await answer(server, from('203.0.113.6'))
      expect({ signal, ...addressNow }).toMatchObject({ signal, status: 429, code: 'address_banned' })
      expect(addressNow.retryAfter).toBeGreaterThanOrEqual(banLeft - 1)
      expect(addressNow.retryAfter).toBeLessThanOrEqual(BAN_SECONDS)
      // The spent address stays spent: refused, or let through on what refilled since (one a second), never a fresh 59.
      const spent = await answer(server, from('203.0.113.5'))
      const refilled = Math.ceil((Date.now() - addressSpentAt) / 1000)
      const spentNow = spent.status === 429 ? spent.code : spent.remaining < refilled ? 'refilled' : `fresh: ${spent.remaining} left`
      expect(['rate_limited', 'refilled']).toContain(spentNow)
      // An address no server saw starts with its full allowance.
      expect(await answer(server, from('203.0.113.7'))).toMatchObject({ status: 401 })
      // The minute bucket counts on: one taken now, plus one a second refilled meanwhile, not a fresh 59.
      const now = (await answer(server, auth(free))).remaining
      expect({ signal, now }).toEqual({ signal, now: expect.any(Number) })
      expect(now).toBeGreaterThanOrEqual(remaining - 1)
      expect(now).toBeLessThanOrEqual(remaining - 1 + Math.ceil((Date.now() - spentAt) / 1000))
      expect(now).toBeLessThan(59)
      remaining = now
      spentAt = Date.now()
      // Owner-only, and it names keys by id, never by secret.
      expect(left?.mode).toBe(0o600)
      expect([left?.text.includes(banned.secret), left?.text.includes(free)]).toEqual([false, false])
    }

    // kill -9 leaves nothing: the next start begins afresh.
    expect(await stopWith(server, 'SIGKILL')).toBe(137)
    expect(existsSync(`${dataFile}.handover`)).toBe(false)
    server = await serve(dataFile)
    expect(await answer(server, auth(banned.secret, from('198.51.100.1')))).toMatchObject({ status: 200, remaining: 1 })
    expect(await answer(server, from('203.0.113.6'))).toMatchObject({ status: 401 })
    expect(await stopWith(server, 'SIGTERM')).toBe(0)
  })

  test('a key reset while no server runs is not banned at the first request after the start; one revoked keeps no state', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const [reset, kept, revoked] = ['reset', 'kept', 'revoked'].map((name) => tinyKey(dataFile, name)) as [
      ReturnType<typeof tinyKey>,
      ReturnType<typeof tinyKey>,
      ReturnType<typeof tinyKey>,
    ]
    let server = await serve(dataFile)
    for (const key of [reset, kept, revoked]) await banKey(server, key.secret)
    expect(await stopWith(server, 'SIGTERM')).toBe(0)
    const leftFirst = existsSync(`${dataFile}.handover`) ? Object.keys(leftState(dataFile).keys).sort() : []

    expect(cli(['keys', 'reset-limits', reset.id, '--data', dataFile]).code).toBe(0)
    expect(cli(['keys', 'revoke', revoked.id, '--data', dataFile]).code).toBe(0)
    server = await serve(dataFile)
    // At once, not after the first poll for changes: full buckets (2 a minute, one taken) and no ban.
    expect(await answer(server, auth(reset.secret, from('198.51.100.1')))).toMatchObject({ status: 200, remaining: 1 })
    expect(await answer(server, auth(kept.secret, from('198.51.100.1')))).toMatchObject({ status: 429, code: 'key_banned' })
    expect(await answer(server, auth(revoked.secret, from('198.51.100.1')))).toMatchObject({ status: 401 })
    expect(await stopWith(server, 'SIGTERM')).toBe(0)
    expect(leftFirst).toEqual([reset.id, kept.id, revoked.id].map((id) => `key:${id}`).sort())
    const left = leftState(dataFile).keys
    expect(Object.keys(left).sort()).toEqual([reset.id, kept.id].map((id) => `key:${id}`).sort())
    expect(left[`key:${reset.id}`]!.bannedUntil).toBeUndefined()
  })

  test('a start that fails after reading the state (its port is taken) leaves it for the next one', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const key = tinyKey(dataFile, 'banned')
    let server = await serve(dataFile)
    await banKey(server, key.secret)
    expect(await stopWith(server, 'SIGTERM')).toBe(0)
    const taken = Bun.serve({ hostname: '127.0.0.1', port: 0, fetch: () => new Response() })
    try {
      const args = ['--port', String(taken.port), '--host', '127.0.0.1', '--data', dataFile, '--console-address', 'off']
      const refused = await serveExpectingFailure([...args, '--ban-after', '3', '--ban-seconds', String(BAN_SECONDS)])
      expect({ code: refused.code, listened: refused.listened }).toEqual({ code: 1, listened: false })
    } finally {
      taken.stop(true)
    }
    server = await serve(dataFile)
    expect(await answer(server, auth(key.secret, from('198.51.100.1')))).toMatchObject({ status: 429, code: 'key_banned' })
    expect(await stopWith(server, 'SIGTERM')).toBe(0)
  })

  test('a state left for a day: bans that ended are over, buckets are full, and what nobody used since is not carried on', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const key = tinyKey(dataFile, 'banned')
    let server = await serve(dataFile)
    await banKey(server, key.secret)
    await spendAddress(server, '203.0.113.5', false)
    await spendAddress(server, '203.0.113.6', true)
    expect(await stopWith(server, 'SIGTERM')).toBe(0)
    expect(Object.keys(leftState(dataFile).addresses).sort()).toEqual(['ip:203.0.113.5', 'ip:203.0.113.6'])

    // As if the server had stopped 25 hours ago: every time in the file that much earlier.
    const EARLIER = 25 * 3_600_000
    const earlier = (_: string, value: unknown) => (typeof value === 'number' && value > 1e12 ? value - EARLIER : value)
    const path = `${dataFile}.handover`
    writeFileSync(path, JSON.stringify(JSON.parse(readFileSync(path, 'utf8'), earlier)))
    server = await serve(dataFile)
    expect(await answer(server, auth(key.secret, from('198.51.100.1')))).toMatchObject({ status: 200, remaining: 1 })
    expect(await answer(server, from('203.0.113.6'))).toMatchObject({ status: 401 })
    expect(await stopWith(server, 'SIGTERM')).toBe(0)
    // The two seen again are left as any subject used in the last minute; the address not seen since is not.
    const left = leftState(dataFile)
    expect(Object.keys(left.keys)).toEqual([`key:${key.id}`])
    expect(left.keys[`key:${key.id}`]!.bannedUntil).toBeUndefined()
    expect(Object.keys(left.addresses)).toEqual(['ip:203.0.113.6'])
    expect(left.addresses['ip:203.0.113.6']!.bannedUntil).toBeUndefined()
  })
})

describeWithEngines(['redis-server'], 'a plain restart with --redis-url', () => {
  const redis = redisForSuite()

  test('leaves nothing beside the data file: the ban is in Redis, and holds', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const key = tinyKey(dataFile, 'banned')
    let server = await serve(dataFile, ['--redis-url', redis.url])
    await banKey(server, key.secret)
    expect(await stopWith(server, 'SIGTERM')).toBe(0)
    expect(existsSync(`${dataFile}.handover`)).toBe(false)
    server = await serve(dataFile, ['--redis-url', redis.url])
    expect(await answer(server, auth(key.secret, from('198.51.100.1')))).toMatchObject({ status: 429, code: 'key_banned' })
    expect(await stopWith(server, 'SIGTERM')).toBe(0)
  })
})
