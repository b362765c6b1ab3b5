/**
 * A key's lifecycle over the binary, on the data file and on two instances over PostgreSQL + Redis: a key
 * made to expire works, then gets 401 key_expired on every instance within a second, and works again
 * once given no expiry; a rolled key's two secrets both work during the overlap and share one bucket, the
 * previous one ends on time, a second roll ends the oldest at once, `--overlap 0s` ends it at once; each
 * secret's last use is kept apart; a key made before this release (no checksum) keeps working after the
 * upgrade.
 */
import { Database } from 'bun:sqlite'
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { randomToken } from '../../src/domain/api-key'
import { MIGRATIONS as PG_MIGRATIONS } from '../../src/storage/postgres/migrations'
import { MIGRATIONS } from '../../src/storage/sqlite/migrations'
import { cli, eventually, type Server, startServer, tempDir } from '../support/binary'
import { describeWithEngines } from '../support/engines'
import { type PostgresCluster, startPostgres } from '../support/postgres'
import { TAKE_BACK } from '../support/previous-schema'

/** The key lifecycle's step and the one after it: a data file as the release before the lifecycle left it. */
const BEFORE_LIFECYCLE = TAKE_BACK.slice(0, 2).flat()
import { type RedisServer, startRedis } from '../support/redis'
import { auth, killSpawned, startWithConsole } from './helpers'

afterAll(killSpawned)
setDefaultTimeout(60_000)

interface Answer {
  status: number
  code: string | undefined
  message: string | undefined
  challenge: string | null
}

async function ask(base: string, secret: string): Promise<Answer> {
  return (await askWithPolicy(base, secret)).answer
}

/** The answer, and the limits it was counted under (RateLimit-Policy): the key's plan, or the Free plan of its address. */
async function askWithPolicy(base: string, secret: string): Promise<{ answer: Answer; policy: string | null }> {
  const answer = await fetch(`${base}/pets?limit=1`, { headers: auth(secret) })
  const body = (await answer.json()) as { code?: string; message?: string }
  return {
    answer: { status: answer.status, code: body.code, message: body.message, challenge: answer.headers.get('www-authenticate') },
    policy: answer.headers.get('ratelimit-policy'),
  }
}

const FREE_POLICY = '"minute";q=60;w=60, "day";q=1000;w=86400'

/** The lifecycle's checks against one deployment: `bases` (one instance or two) and how its CLI reaches storage. */
function lifecycle(deployment: () => { bases: string[]; storage: string[] }) {
  const keys = (args: string[]) => {
    const result = cli(['keys', ...args, ...deployment().storage])
    expect({ args, code: result.code, stderr: result.code === 0 ? '' : result.stderr }).toEqual({ args, code: 0, stderr: '' })
    return result
  }
  const secretOf = (result: { stdout: string }) => result.stdout.trim().split('\n').at(-1)!
  const idOf = (name: string) =>
    (JSON.parse(keys(['list', '--json']).stdout) as { id: string; name: string }[]).find((key) => key.name === name)!.id
  /** Every instance gives `status` (and `code`) to the secret, within `ms`. */
  const everywhere = (secret: string, status: number, code?: string, ms = 5_000) =>
    eventually(async () => {
      for (const base of deployment().bases) {
        const answer = await ask(base, secret)
        if (answer.status !== status || (code !== undefined && answer.code !== code)) return false
      }
      return true
    }, ms)

  test('a key made to expire works, then gets 401 key_expired on every instance within a second; --never brings it back', async () => {
    const secret = secretOf(keys(['create', '--plan', 'pro', '--name', 'expiring', '--expires-in', '3s']))
    const listed = JSON.parse(keys(['list', '--json']).stdout).find((key: { name: string }) => key.name === 'expiring')
    const expiresAt = Date.parse(listed.expiresAt)
    await everywhere(secret, 200)
    // Each instance refuses it from its expiry on: judged by its own clock, not by a poll.
    await eventually(() => Date.now() >= expiresAt + 5, 10_000)
    for (const base of deployment().bases) {
      const { answer, policy } = await askWithPolicy(base, secret)
      // Judged as a request without a valid key: its address pays, under the Free plan's limits, not the key's Pro ones.
      expect(policy).toBe(FREE_POLICY)
      expect(answer).toEqual({
        status: 401,
        code: 'key_expired',
        message: `This API key expired at ${new Date(expiresAt).toISOString()}.`,
        challenge: `Bearer realm="petstore", error="invalid_token", error_description="This API key expired at ${new Date(expiresAt).toISOString()}."`,
      })
    }
    expect(keys(['list']).stdout).toMatch(new RegExp(`expiring .* ${listed.expiresAt} \\(expired\\) +checked`))
    keys(['set-expiry', idOf('expiring'), '--never'])
    await everywhere(secret, 200, undefined, 1_500)
  })

  test("a rolled key's two secrets work during the overlap and share one bucket; the previous one ends on time", async () => {
    // Six a minute: the bucket gains a token every 10 s, none while the test sends.
    const first = secretOf(keys(['create', '--plan', 'enterprise', '--rpm', '6', '--rpd', '1000', '--name', 'rolled']))
    await everywhere(first, 200)
    const rolled = keys(['roll', idOf('rolled'), '--overlap', '4s'])
    const second = secretOf(rolled)
    expect(second).toMatch(/^psk_[0-9A-Za-z]{49}$/)
    expect(rolled.stdout.trim().split('\n')).toEqual([second])
    const endsAt = Date.parse(/works until (\S+),/.exec(rolled.stderr)![1]!)
    const bases = deployment().bases
    // One token went to each instance's check above, one to the newest secret's first use; the rest of
    // the six, whichever secret, then 429 for both.
    await eventually(async () => (await ask(bases[0]!, second)).status === 200)
    const left = 6 - bases.length - 1
    const statuses = []
    for (let i = 0; i < left; i++) statuses.push((await ask(bases[i % bases.length]!, i % 2 ? first : second)).status)
    expect(statuses).toEqual(Array(left).fill(200))
    expect((await ask(bases[0]!, first)).code).toBe('rate_limited')
    expect((await ask(bases.at(-1)!, second)).code).toBe('rate_limited')
    // After the overlap, the previous secret says it was replaced; the newest is still the key (limited, not refused).
    await eventually(() => Date.now() >= endsAt + 5, 10_000)
    for (const base of bases) {
      const answer = await ask(base, first)
      expect(answer.code).toBe('key_expired')
      expect(answer.message).toContain(`stopped working at ${new Date(endsAt).toISOString()}`)
      expect((await ask(base, second)).code).toBe('rate_limited')
    }
  })

  test('a second roll ends the oldest secret at once; --overlap 0s ends the previous at once; each secret keeps its last use', async () => {
    const first = secretOf(keys(['create', '--plan', 'pro', '--name', 'twice']))
    await everywhere(first, 200)
    const id = idOf('twice')
    const second = secretOf(keys(['roll', id, '--overlap', '1h']))
    await everywhere(second, 200, undefined, 1_500)
    expect((await ask(deployment().bases[0]!, first)).status).toBe(200)
    const third = secretOf(keys(['roll', id, '--overlap', '1h']))
    await everywhere(third, 200, undefined, 1_500)
    // The first is no secret of the key any more; the second works on.
    await everywhere(first, 401, 'unauthorized', 1_500)
    await everywhere(second, 200)
    // The operator sees which secret is still in use before the overlap ends.
    await eventually(() => {
      const usage = JSON.parse(keys(['usage', id, '--json']).stdout) as { secrets: { secret: string; lastUsedAt: string | null }[] }
      return usage.secrets.every((secret) => secret.lastUsedAt !== null)
    }, 10_000)
    const fourth = secretOf(keys(['roll', id, '--overlap', '0s']))
    await everywhere(third, 401, 'key_expired', 1_500)
    await everywhere(fourth, 200, undefined, 1_500)
  })

  test('a mistyped secret of the new form is refused without a look-up: 401', async () => {
    const secret = secretOf(keys(['create', '--plan', 'pro', '--name', 'typo']))
    const typo = secret.slice(0, 10) + (secret[10] === 'a' ? 'b' : 'a') + secret.slice(11)
    for (const base of deployment().bases) expect((await ask(base, typo)).code).toBe('unauthorized')
  })
}

describe('key lifecycle on the data file', () => {
  let server: Server
  beforeAll(async () => {
    server = await startServer({ args: ['--no-access-log'] })
  })
  afterAll(() => server?.stop())
  lifecycle(() => ({ bases: [server.base], storage: ['--data', server.dataFile] }))

  test('a key made by the previous release (no checksum) keeps working after the upgrade, and keys list says its format', async () => {
    const dataFile = `${tempDir()}/petstore.db`
    expect(cli(['keys', 'create', '--plan', 'free', '--data', dataFile]).code).toBe(0)
    const legacy = `psk_${randomToken(32)}`
    const db = new Database(dataFile)
    for (const statement of BEFORE_LIFECYCLE) db.run(statement)
    db.run('DELETE FROM api_keys')
    db.query(
      "INSERT INTO api_keys (id, name, plan, rpm, rpd, secret_hash, created_at, change) VALUES ('key_old', 'old', 'pro', 300, 10000, ?, 0, 1)",
    ).run(new Bun.CryptoHasher('sha256').update(legacy).digest('hex'))
    db.run(`PRAGMA user_version = ${MIGRATIONS.length - 2}`)
    db.close()
    const upgraded = await startServer({ dataFile, args: ['--no-access-log'] })
    try {
      expect((await ask(upgraded.base, legacy)).status).toBe(200)
      expect(JSON.parse(cli(['keys', 'list', '--json', '--data', dataFile]).stdout)).toEqual([
        expect.objectContaining({ id: 'key_old', format: 'legacy', expiresAt: null }),
      ])
    } finally {
      await upgraded.stop()
    }
  })
})

describeWithEngines(['postgresql', 'redis-server'], 'key lifecycle on two instances over PostgreSQL and Redis', () => {
  let cluster: PostgresCluster
  let redis: RedisServer
  let databaseUrl: string
  let instances: Server[] = []
  beforeAll(async () => {
    ;[cluster, redis] = await Promise.all([startPostgres(), startRedis()])
    databaseUrl = await cluster.createDatabase('key_lifecycle')
    const args = ['--redis-url', redis.url, '--no-access-log']
    instances = [await startServer({ databaseUrl, args })]
    instances.push(await startServer({ databaseUrl, args }))
  })
  afterAll(async () => {
    await Promise.all(instances.map((server) => server.stop()))
    await Promise.all([cluster?.destroy(), redis?.destroy()])
  })
  lifecycle(() => ({ bases: instances.map((server) => server.base), storage: ['--database-url', databaseUrl] }))

  test('a key made by the previous release (no checksum) keeps working after the upgrade', async () => {
    const url = await cluster.createDatabase('key_lifecycle_upgrade')
    expect(cli(['keys', 'create', '--plan', 'free', '--database-url', url]).code).toBe(0)
    const legacy = `psk_${randomToken(32)}`
    const admin = new Bun.SQL(url, { max: 1 })
    try {
      for (const statement of BEFORE_LIFECYCLE) await admin.unsafe(statement)
      await admin`DELETE FROM petstore_schema WHERE version >= ${PG_MIGRATIONS.length - 1}`
      await admin`DELETE FROM api_keys`
      await admin`INSERT INTO api_keys (id, name, plan, rpm, rpd, secret_hash, created_at)
                  VALUES ('key_old', 'old', 'pro', 300, 10000, ${new Bun.CryptoHasher('sha256').update(legacy).digest('hex')}, 0)`
    } finally {
      await admin.close()
    }
    const upgraded = await startServer({ databaseUrl: url, args: ['--no-access-log'] })
    try {
      expect((await ask(upgraded.base, legacy)).status).toBe(200)
      expect(JSON.parse(cli(['keys', 'list', '--json', '--database-url', url]).stdout)).toEqual([
        expect.objectContaining({ id: 'key_old', format: 'legacy' }),
      ])
    } finally {
      await upgraded.stop()
    }
  })
})

describe("key lifecycle through the console's API", () => {
  test('roll and expiry: the new secret once, the previous until its overlap, 400s naming the field, audit entries naming the operator', async () => {
    const server = await startWithConsole({ args: ['--no-access-log'] })
    try {
      const token = cli(['operators', 'token', 'admin', '--data', server.dataFile]).stdout.trim()
      const headers = { authorization: `Bearer ${token}`, 'content-type': 'application/json' }
      const call = async (method: string, path: string, body?: unknown) => {
        const answer = await fetch(`${server.console}/api${path}`, { method, headers, body: JSON.stringify(body) })
        return { status: answer.status, body: (answer.status === 204 ? null : await answer.json()) as any }
      }
      const made = await call('POST', '/keys', { plan: 'pro', name: 'console-rolled' })
      const { id } = made.body.key
      const first: string = made.body.secret
      const rolled = await call('POST', `/keys/${id}/roll`, { overlapSeconds: 60 })
      expect(rolled.status).toBe(201)
      expect(rolled.body).toEqual({ id, secret: expect.stringMatching(/^psk_[0-9A-Za-z]{49}$/), previousSecretEndsAt: expect.any(String) })
      for (const secret of [first, rolled.body.secret]) expect((await ask(server.base, secret)).status).toBe(200)
      expect(await call('POST', `/keys/${id}/roll`, { overlapSeconds: -1 })).toMatchObject({
        status: 400,
        body: { message: 'overlapSeconds: must be an integer from 0 to 31536000' },
      })
      expect((await call('POST', '/keys/key_missing/roll', {})).status).toBe(404)

      const soon = new Date(Date.now() + 2_000).toISOString()
      expect((await call('PUT', `/keys/${id}/expiry`, { expiresAt: soon })).status).toBe(204)
      expect(await call('PUT', `/keys/${id}/expiry`, { expiresAt: 'tomorrow' })).toMatchObject({
        status: 400,
        body: { message: expect.stringMatching(/^expiresAt: must be an ISO 8601 time with its zone/) },
      })
      // A time that was read but has passed is told apart from one that could not be read.
      expect(await call('PUT', `/keys/${id}/expiry`, { expiresAt: '2020-01-31T18:00:00+01:00' })).toMatchObject({
        status: 400,
        body: { message: 'expiresAt: must be a time still to come, not 2020-01-31T17:00:00.000Z' },
      })
      const listed = (await call('GET', '/keys')).body.keys.find((key: { id: string }) => key.id === id)
      expect(listed).toMatchObject({ expiresAt: soon, format: 'checked', versions: [{ version: 'newest' }, { version: 'previous' }] })
      await eventually(async () => (await ask(server.base, rolled.body.secret)).code === 'key_expired', 5_000)
      expect((await call('PUT', `/keys/${id}/expiry`, { expiresAt: null })).status).toBe(204)
      expect((await ask(server.base, rolled.body.secret)).status).toBe(200)

      const entries = (await call('GET', '/audit')).body.entries as { actor: string; action: string; target: string }[]
      expect(
        entries.filter((entry) => entry.action === 'key.roll' || entry.action === 'key.set-expiry').map((entry) => entry.action),
      ).toEqual(['key.set-expiry', 'key.set-expiry', 'key.roll'])
      expect(entries.every((entry) => entry.actor.length > 0)).toBe(true)
    } finally {
      await server.stop()
    }
  })
})
