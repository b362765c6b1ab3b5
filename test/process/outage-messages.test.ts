/**
 * What the binary says while an engine it needs is away. PostgreSQL stopped: every answer says storage
 * does not answer (a create's 503 once said "reads still work" while reads failed too; a token not yet
 * known was called invalid or revoked, though storage could not be asked), the console
 * answers 503 rather than 500 with a stack trace in the log, and the log says storage does not answer;
 * set read-only instead, a create's 503 says reads still work, and they do. Redis stopped under an idle
 * instance: one line when it stops answering, one when it is back, nothing more, with no request at all.
 */
import { makeKey } from '../../src/domain/api-key'
import { afterAll, expect, setDefaultTimeout, test } from 'bun:test'
import { eventually, type Server, startServer } from '../support/binary'
import { describeWithEngines } from '../support/engines'
import { postgresForSuite } from '../support/postgres'
import { type RedisServer, startRedis } from '../support/redis'
import { auth, killSpawned, postPet, startWithConsole, unusedPort } from './helpers'

setDefaultTimeout(60_000)
afterAll(killSpawned)

const DOWN = { code: 'unavailable', message: 'Storage does not answer now; try again shortly.', status: 503 }
const WRITES_REFUSED = { code: 'unavailable', message: 'Storage cannot accept writes right now; reads still work.', status: 503 }

const answer = async (response: Response) => ({ status: response.status, body: await response.json() })

describeWithEngines(['postgresql'], 'a PostgreSQL outage under the binary', () => {
  const cluster = postgresForSuite()

  test('stopped: creates, reads and the console all say storage does not answer; back: creates work again', async () => {
    const url = await cluster.createDatabase('outage')
    const server = await startWithConsole({ databaseUrl: url, args: ['--no-access-log'] })
    const key = server.bootstrapKey!
    expect((await postPet(server.base, key, { name: 'before', categoryId: 1 })).status).toBe(201)
    const signIn = await fetch(`${server.console}/api/session`, {
      method: 'POST',
      headers: { origin: server.console, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'admin', password: server.password }),
    })
    const cookie = signIn.headers.get('set-cookie')!.split(';')[0]!
    await cluster.stop()
    try {
      const during = {
        create: await answer(await postPet(server.base, key, { name: 'during', categoryId: 1 })),
        list: await answer(await fetch(`${server.base}/pets`, { headers: auth(key) })),
        get: await answer(await fetch(`${server.base}/pets/1`, { headers: auth(key) })),
        // A well-formed secret this instance does not know may be a key made a moment ago: storage cannot say.
        unknownKey: await answer(await fetch(`${server.base}/pets`, { headers: auth(makeKey({ plan: 'free' }, 0).secret) })),
        consoleKeys: await answer(await fetch(`${server.console}/api/keys`, { headers: { cookie } })),
        signIn: await answer(
          await fetch(`${server.console}/api/session`, {
            method: 'POST',
            headers: { origin: server.console, 'content-type': 'application/json' },
            body: JSON.stringify({ name: 'admin', password: server.password }),
          }),
        ),
      }
      console.log('while PostgreSQL is stopped:', JSON.stringify(during))
      for (const seen of Object.values(during)) expect(seen).toEqual({ status: 503, body: DOWN })
      // A mistyped one (its checksum fails) is no key, whatever storage says: 401 at once.
      const mistyped = `${key.slice(0, -1)}${key.endsWith('A') ? 'B' : 'A'}`
      expect((await fetch(`${server.base}/pets`, { headers: auth(mistyped) })).status).toBe(401)
      await server.said('storage does not answer (')
      expect(server.stderr()).not.toContain('refuses writes')
      expect(server.stderr()).not.toContain('internal error')
    } finally {
      await cluster.start()
    }
    await eventually(async () => (await postPet(server.base, key, { name: 'after', categoryId: 1 })).status === 201, 10_000)
    await server.said('storage accepts writes again')
    await server.stop()
  })

  test('read-only: a create says reads still work, and they do', async () => {
    const url = await cluster.createDatabase('read_only')
    const server = await startWithConsole({ databaseUrl: url, args: ['--no-access-log'] })
    const key = server.bootstrapKey!
    expect((await postPet(server.base, key, { name: 'before', categoryId: 1 })).status).toBe(201)
    const admin = new Bun.SQL(url, { max: 1 })
    const readOnly = async (on: boolean) => {
      await admin.unsafe(`ALTER SYSTEM SET default_transaction_read_only = ${on ? 'on' : 'off'}`)
      await admin.unsafe('SELECT pg_reload_conf()')
    }
    try {
      await readOnly(true)
      // Sessions take the setting at their next transaction: creates until then may still be written.
      let create: { status: number; body: unknown } | undefined
      await eventually(async () => {
        create = await answer(await postPet(server.base, key, { name: 'during', categoryId: 1 }))
        return create.status === 503
      }, 10_000)
      expect(create).toEqual({ status: 503, body: WRITES_REFUSED })
      const list = await fetch(`${server.base}/pets`, { headers: auth(key) })
      expect(list.status).toBe(200)
      expect(((await list.json()) as { name: string }[])[0]!.name).toBe('before')
      await server.said('storage refuses writes (25006)')
    } finally {
      await readOnly(false)
      await admin.close()
    }
    await server.stop()
  })
})

describeWithEngines(['redis-server'], 'a Redis outage under an idle instance', () => {
  let redis: RedisServer | undefined
  afterAll(() => redis?.destroy())

  test('with no request arriving, one line when Redis stops answering and one when it answers again', async () => {
    redis = await startRedis()
    const server = await startWithConsole({ args: ['--no-access-log', '--redis-url', redis.url] })
    const lines = () =>
      server
        .stderr()
        .split('\n')
        .filter((line) => line.includes('the shared rate limiter (Redis)'))
    await redis.stop()
    await eventually(() => lines().length === 1, 5_000)
    expect(lines()).toEqual(['petstore: the shared rate limiter (Redis) does not answer: API requests get 503 until it does'])
    // Away for a while (four times the watch's turn), still one line: a change is said once, not at each look.
    await Bun.sleep(2_000)
    expect(lines()).toHaveLength(1)
    await redis.start()
    await eventually(() => lines().length === 2, 5_000)
    expect(lines()[1]).toBe('petstore: the shared rate limiter (Redis) answers again')
    const answered = await fetch(`${server.base}/pets`, { headers: auth(server.bootstrapKey!) })
    expect(answered.status).toBe(200)
    expect(lines()).toHaveLength(2)
    await server.stop()
  })
})

describeWithEngines(['redis-server'], 'a Redis the start cannot use', () => {
  let redis: RedisServer | undefined
  afterAll(() => redis?.destroy())

  test("the start's warning says why: Redis's own refusal, or what a closed connection means", async () => {
    redis = await startRedis()
    const warning = (server: Server) =>
      server
        .stderr()
        .split('\n')
        .find((line) => line.includes('does not answer yet'))
    // A database number Redis does not have: its own words, not only "does not answer".
    const wrongDb = await startServer({ args: ['--no-access-log', '--redis-url', `${redis.url}/99`] })
    expect(warning(wrongDb)).toMatch(
      /^petstore: Redis at redis:\/\/\S+\/99 does not answer yet \(ERR DB index is out of range\); API requests answer 503 until it does$/,
    )
    expect((await fetch(`${wrongDb.base}/pets`, { headers: auth(wrongDb.bootstrapKey!) })).status).toBe(503)
    expect(await wrongDb.stop()).toBe(0)
    // Nothing listening: Bun's client says only that the connection closed, as for a refused password.
    const nobody = await startServer({ args: ['--no-access-log', '--redis-url', `redis://127.0.0.1:${await unusedPort()}`] })
    expect(warning(nobody)).toContain(
      '(the connection closed while connecting: nothing listens there, or Redis refused the user or password in the URL)',
    )
    expect(await nobody.stop()).toBe(0)
  })
})
