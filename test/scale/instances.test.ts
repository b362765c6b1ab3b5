/**
 * Several instances of the binary on one PostgreSQL and one Redis, spoken to over HTTP with requests
 * alternating between them: the issue's acceptance scenarios. Limits are exact across instances, bans
 * and revocations hold everywhere, idempotency and paging stay exact while both insert, a killed
 * instance loses no acknowledged pet, and the instances ride out Redis and PostgreSQL going away.
 */
import { afterAll, beforeAll, beforeEach, expect, test } from 'bun:test'
import type { Subprocess } from 'bun'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { encodeCursor } from '../../src/modules/pets/cursor'
import { LOCKS, MIGRATIONS } from '../../src/storage/postgres/migrations'
import { cli, eventually, type Server, startServer, tempDir } from '../support/binary'
import { describeWithEngines } from '../support/engines'
import { nginxInFront } from '../support/nginx'
import { type PostgresCluster, startPostgres } from '../support/postgres'
import { type RedisServer, startRedis } from '../support/redis'
import { reasonLine } from '../process/helpers'

let cluster: PostgresCluster
let redis: RedisServer
let databaseUrl: string
let databases = 0

const auth = (key: string) => ({ authorization: `Bearer ${key}` })
const json = { 'content-type': 'application/json' }

function createKey(plan: string, ...extra: string[]): string {
  const result = cli(['keys', 'create', '--plan', plan, '--database-url', databaseUrl, ...extra])
  if (result.code !== 0) throw new Error(result.stderr)
  return result.stdout.trim().split('\n').at(-1)!
}

async function instances(count: number, args: string[] = [], { accessLog = false } = {}): Promise<Server[]> {
  return Promise.all(
    Array.from({ length: count }, () =>
      startServer({ databaseUrl, args: ['--redis-url', redis.url, ...(accessLog ? [] : ['--no-access-log']), ...args] }),
    ),
  )
}

/**
 * Waits until every instance holds as many active keys as the database (its /metrics says so), so a key
 * just made with the CLI is known everywhere; asking with the key itself would spend its tokens.
 */
async function knownEverywhere(servers: Server[], _key: string): Promise<void> {
  const listed = JSON.parse(cli(['keys', 'list', '--json', '--database-url', databaseUrl]).stdout) as { revoked: string | null }[]
  const active = listed.filter((key) => key.revoked === null).length
  await eventually(async () => {
    const texts = await Promise.all(servers.map(async (s) => (await fetch(`${s.origin}/metrics`)).text()))
    return texts.every((text) => text.includes(`\npetstore_api_keys_active ${active}\n`))
  })
}

/** Every pet, following the cursor from page to page. */
async function allPets(server: Server, key: string): Promise<{ id: number; name: string }[]> {
  const pets: { id: number; name: string }[] = []
  for (let page: typeof pets = [], first = true; first || page.length === 100; first = false) {
    const cursor = pets.length ? `&cursor=${encodeCursor(pets.at(-1)!.id)}` : ''
    const answer = await fetch(`${server.base}/pets?limit=100${cursor}`, { headers: auth(key) })
    if (answer.status !== 200) throw new Error(`listing answered ${answer.status}: ${await answer.text()}`)
    page = (await answer.json()) as typeof pets
    pets.push(...page)
  }
  return pets
}

async function post(server: Server, key: string, body: unknown, headers: Record<string, string> = {}) {
  return fetch(`${server.base}/pets`, { method: 'POST', headers: { ...auth(key), ...json, ...headers }, body: JSON.stringify(body) })
}

describeWithEngines(['postgresql', 'redis-server'], 'several instances on PostgreSQL and Redis', () => {
  beforeAll(async () => {
    ;[cluster, redis] = await Promise.all([startPostgres(), startRedis()])
  })
  afterAll(async () => {
    await Promise.all([cluster?.destroy(), redis?.destroy()])
  })
  beforeEach(async () => {
    databaseUrl = await cluster.createDatabase(`instances_${++databases}`)
    await redis.admin.send('FLUSHALL', [])
  })

  test('64 concurrent clients on one Free key get exactly 60 answers in the first minute, and a ban holds on both', async () => {
    const servers = await instances(2, ['--ban-after', '5'])
    const key = createKey('free')
    await knownEverywhere(servers, key)
    const started = performance.now()
    const answers = await Promise.all(
      Array.from({ length: 128 }, (_, i) => fetch(`${servers[i % 2]!.base}/pets?limit=1`, { headers: auth(key) })),
    )
    // The minute bucket refills one token a second: a burst slower than a second earns at most one more a second.
    const refilled = Math.floor((performance.now() - started) / 1000)
    const statuses = answers.map((answer) => answer.status)
    const allowed = statuses.filter((status) => status === 200).length
    expect(allowed).toBeGreaterThanOrEqual(60)
    expect(allowed).toBeLessThanOrEqual(60 + refilled)
    expect(statuses.filter((status) => status === 200 || status === 429)).toHaveLength(128)
    const banned = await Promise.all(servers.map((s) => fetch(`${s.base}/pets`, { headers: auth(key) }).then((r) => r.json())))
    expect(banned.map((body) => (body as { code: string }).code)).toEqual(['key_banned', 'key_banned'])
  })

  test('a key revoked through one database is refused by both instances within one second', async () => {
    const servers = await instances(2)
    const key = createKey('pro')
    await knownEverywhere(servers, key)
    const id = (JSON.parse(cli(['keys', 'list', '--json', '--database-url', databaseUrl]).stdout) as { id: string; plan: string }[]).find(
      (k) => k.plan === 'pro',
    )!.id
    expect(cli(['keys', 'revoke', id, '--database-url', databaseUrl]).code).toBe(0)
    const revokedAt = Date.now()
    await eventually(async () => {
      const answers = await Promise.all(servers.map((s) => fetch(`${s.base}/pets`, { headers: auth(key) })))
      return answers.every((answer) => answer.status === 401)
    }, 1_000)
    expect(Date.now() - revokedAt).toBeLessThan(1_000)
  })

  test('keys reset-limits refills a key on every instance within a second, in Redis as well', async () => {
    const servers = await instances(2)
    // A day bucket of 30: spent by 30 requests however slowly they go (a minute bucket refills as they run).
    const key = createKey('enterprise', '--rpm', '1000', '--rpd', '30', '--name', 'refilled')
    await knownEverywhere(servers, key)
    for (let i = 0; i < 30; i++) await fetch(`${servers[i % 2]!.base}/pets`, { headers: auth(key) })
    expect((await fetch(`${servers[0]!.base}/pets`, { headers: auth(key) })).status).toBe(429)
    const id = (JSON.parse(cli(['keys', 'list', '--json', '--database-url', databaseUrl]).stdout) as { id: string; name: string }[]).find(
      (k) => k.name === 'refilled',
    )!.id
    expect(cli(['keys', 'reset-limits', id, '--database-url', databaseUrl]).code).toBe(0)
    // Each instance applies the reset at its next poll: wait for both, not for one and then read the other.
    let after: Response[] = []
    await eventually(async () => {
      after = await Promise.all(servers.map((s) => fetch(`${s.base}/pets`, { headers: auth(key) })))
      return after.every((answer) => answer.status === 200)
    }, 1_000)
    for (const answer of after) expect(Number(answer.headers.get('x-ratelimit-remaining'))).toBeGreaterThan(20)
  })

  test('keys reset-limits on three instances grants one full bucket, not one per instance', async () => {
    const servers = await instances(3)
    // A day bucket of 30 in force: nothing refills visibly while the test runs.
    const key = createKey('enterprise', '--rpm', '1000', '--rpd', '30')
    await knownEverywhere(servers, key)
    const ask = (i: number) => fetch(`${servers[i % 3]!.base}/pets?limit=1`, { headers: auth(key) })
    for (let i = 0; i < 30; i++) expect((await ask(i)).status).toBe(200)
    expect((await ask(0)).status).toBe(429)
    const id = (JSON.parse(cli(['keys', 'list', '--json', '--database-url', databaseUrl]).stdout) as { id: string; plan: string }[]).find(
      (k) => k.plan === 'enterprise',
    )!.id
    expect(cli(['keys', 'reset-limits', id, '--database-url', databaseUrl]).code).toBe(0)
    // Hammered on every instance until each has seen the reset many times over (they look four times
    // a second): one bucket of 30 in all.
    let served = 0
    let firstServed = Infinity
    for (const started = performance.now(); performance.now() - Math.min(firstServed, started + 5_000) < 2_000; ) {
      const statuses = await Promise.all([0, 1, 2, 0, 1, 2].map(async (i) => (await ask(i)).status))
      const ok = statuses.filter((status) => status === 200).length
      if (ok > 0) firstServed = Math.min(firstServed, performance.now())
      served += ok
    }
    expect(served).toBe(30)
  })

  test('an instance left idle through a Redis restart serves its first request afterwards', async () => {
    const [server] = await instances(1)
    const key = createKey('pro')
    await knownEverywhere([server!], key)
    expect((await fetch(`${server!.base}/pets`, { headers: auth(key) })).status).toBe(200)
    await redis.stop()
    await redis.start()
    // No request meanwhile: the instance reconnects alone, which Redis sees as a client whose last
    // command is the instance's health check.
    await eventually(async () => ((await redis.admin.send('CLIENT', ['LIST'])) as string).includes(' cmd=ping '), 5_000).catch(() => {})
    // A ping can be seen while the instance's own reconnect still loads its scripts: wait, as a load
    // balancer would, for its readiness (no API request), then the first request must be served.
    await eventually(async () => (await fetch(`${server!.origin}/readyz`)).status === 200, 5_000)
    expect((await fetch(`${server!.base}/pets`, { headers: auth(key) })).status).toBe(200)
  })

  test('one Idempotency-Key raced through both instances creates one pet; every other answer replays it', async () => {
    const servers = await instances(2)
    const key = createKey('business')
    await knownEverywhere(servers, key)
    for (let round = 0; round < 5; round++) {
      const answers = await Promise.all(
        Array.from({ length: 16 }, (_, i) =>
          post(servers[i % 2]!, key, { name: `Rex${round}`, categoryId: 1 }, { 'idempotency-key': `race-${round}` }),
        ),
      )
      expect(answers.map((answer) => answer.status)).toEqual(Array(16).fill(201))
      const bodies = new Set(await Promise.all(answers.map((answer) => answer.text())))
      expect(bodies.size).toBe(1)
      expect(answers.filter((answer) => answer.headers.get('idempotent-replayed') !== 'true')).toHaveLength(1)
    }
    const all = (await (await fetch(`${servers[0]!.base}/pets?limit=100`, { headers: auth(key) })).json()) as unknown[]
    expect(all).toHaveLength(5)
  })

  test('paging while both instances insert never skips or repeats a pet', async () => {
    const servers = await instances(2)
    const key = createKey('enterprise', '--rpm', '1000000', '--rpd', '100000000')
    await knownEverywhere(servers, key)
    let writing = true
    const writers = Array.from({ length: 8 }, async (_, w) => {
      for (let i = 0; i < 40; i++) expect((await post(servers[(w + i) % 2]!, key, { name: `p${w}.${i}`, categoryId: 1 })).status).toBe(201)
    })
    const seen: number[] = []
    const reader = (async () => {
      // The cursor of each page goes to the other instance; an empty page after the writers stopped ends it.
      for (let turn = 0, done = false; !done; turn++) {
        const stopped = !writing
        const cursor = seen.length ? `&cursor=${encodeCursor(seen.at(-1)!)}` : ''
        const answer = await fetch(`${servers[turn % 2]!.base}/pets?limit=7${cursor}`, { headers: auth(key) })
        const page = (await answer.json()) as { id: number }[]
        seen.push(...page.map((pet) => pet.id))
        done = stopped && page.length === 0
      }
    })()
    await Promise.all(writers)
    writing = false
    await reader
    const all = await allPets(servers[1]!, key)
    expect(all).toHaveLength(320)
    expect(seen).toEqual(all.map((pet) => pet.id))
  })

  test('kill -9 of one instance under 16 concurrent writers loses no acknowledged pet', async () => {
    const [doomed, survivor] = await instances(2)
    const key = createKey('enterprise', '--rpm', '1000000', '--rpd', '100000000')
    await knownEverywhere([doomed!, survivor!], key)
    const acknowledged: number[] = []
    let killed = false
    const writers = Array.from({ length: 16 }, async (_, w) => {
      for (let i = 0; i < 60; i++) {
        const target = (w + i) % 2 === 0 ? doomed! : survivor!
        try {
          const answer = await post(target, key, { name: `w${w}.${i}`, categoryId: 1 })
          if (answer.status === 201) acknowledged.push(((await answer.json()) as { id: number }).id)
        } catch {
          // The killed instance's connections fail; what it never acknowledged may or may not exist.
        }
        if (!killed && acknowledged.length >= 200) {
          killed = true
          doomed!.proc.kill('SIGKILL')
        }
      }
    })
    await Promise.all(writers)
    expect(killed).toBe(true)
    const stored = new Set((await allPets(survivor!, key)).map((pet) => pet.id))
    expect(acknowledged.length).toBeGreaterThan(200)
    expect(acknowledged.filter((id) => !stored.has(id))).toEqual([])
  })

  test('Redis stopped: API requests get 503 with Retry-After: 1 and /readyz 503; Redis back: answers again without a restart', async () => {
    const [server] = await instances(1)
    const key = createKey('pro')
    await knownEverywhere([server!], key)
    await redis.stop()
    try {
      const refused = await fetch(`${server!.base}/pets`, { headers: auth(key) })
      await eventually(() =>
        server!.stderr().includes('petstore: the shared rate limiter (Redis) does not answer: API requests get 503 until it does\n'),
      )
      expect(refused.status).toBe(503)
      expect(refused.headers.get('retry-after')).toBe('1')
      expect(((await refused.json()) as { code: string }).code).toBe('unavailable')
      // Every operation is limited, so every one answers this 503 (its document says so: the preload checks it).
      expect((await fetch(`${server!.base}/store/orders`, { headers: auth(key) })).status).toBe(503)
      expect((await fetch(`${server!.origin}/readyz`)).status).toBe(503)
    } finally {
      await redis.start()
    }
    await eventually(async () => (await fetch(`${server!.base}/pets`, { headers: auth(key) })).status === 200, 5_000)
    expect((await fetch(`${server!.origin}/readyz`)).status).toBe(200)
    await eventually(() => server!.stderr().includes('petstore: the shared rate limiter (Redis) answers again\n'))
    expect(server!.stderr().match(/the shared rate limiter \(Redis\)/g)).toHaveLength(2)
  })

  test('with --limiter-fallback local, Redis stopped: each instance limits on its own, says so once, and returns to Redis', async () => {
    const [server] = await instances(1, ['--limiter-fallback', 'local'])
    const key = createKey('pro')
    await knownEverywhere([server!], key)
    await redis.stop()
    try {
      const degraded = await fetch(`${server!.base}/pets`, { headers: auth(key) })
      expect(degraded.status).toBe(200)
      expect(degraded.headers.get('x-ratelimit-limit')).toBe('300')
      expect((await fetch(`${server!.origin}/readyz`)).status).toBe(200)
      expect(await (await fetch(`${server!.origin}/metrics`)).text()).toContain('petstore_rate_limiter_degraded 1')
    } finally {
      await redis.start()
    }
    await eventually(async () => {
      await fetch(`${server!.base}/pets`, { headers: auth(key) })
      return (await (await fetch(`${server!.origin}/metrics`)).text()).includes('petstore_rate_limiter_degraded 0')
    }, 5_000)
    expect(server!.stderr().match(/does not answer: limiting in this process/g)).toHaveLength(1)
    expect(server!.stderr()).toContain('the shared rate limiter (Redis) answers again')
  })

  test('PostgreSQL restarted: creates get 503 and /readyz 503 while it is down, then everything works without a restart', async () => {
    const [server] = await instances(1)
    const key = createKey('pro')
    await knownEverywhere([server!], key)
    expect((await post(server!, key, { name: 'before', categoryId: 1 })).status).toBe(201)
    await cluster.stop()
    try {
      const refused = await post(server!, key, { name: 'during', categoryId: 1 })
      expect(refused.status).toBe(503)
      expect(((await refused.json()) as { code: string }).code).toBe('unavailable')
      expect((await fetch(`${server!.origin}/readyz`)).status).toBe(503)
    } finally {
      await cluster.start()
    }
    await eventually(async () => (await post(server!, key, { name: 'after', categoryId: 1 })).status === 201, 10_000)
    expect((await fetch(`${server!.origin}/readyz`)).status).toBe(200)
    const names = (await allPets(server!, key)).map((p) => p.name)
    expect(names[0]).toBe('before')
    expect(names).not.toContain('during')
  })

  test('a Redis-limited key keeps its day bucket across an instance restart; without Redis, serve says limits are per instance', async () => {
    const [first] = await instances(1)
    const key = createKey('enterprise', '--rpm', '1000', '--rpd', '5')
    await knownEverywhere([first!], key)
    for (let i = 0; i < 2; i++) expect((await fetch(`${first!.base}/pets`, { headers: auth(key) })).status).toBe(200)
    expect(await first!.stop()).toBe(0)
    const [second] = await instances(1)
    const after = await fetch(`${second!.base}/pets`, { headers: auth(key) })
    // Two requests used 2 of 5; this is the 3rd.
    expect(after.headers.get('x-ratelimit-remaining')).toBe('2')
    expect(second!.stderr()).not.toContain('per instance')
    const alone = await startServer({ databaseUrl, args: ['--no-access-log'] })
    expect(alone.stderr()).toContain(
      'petstore: rate limits are per instance: with several instances, give them --redis-url to share them\n',
    )
  })

  test('an instance starting while another migrates waits for it longer than a serving lock wait, then starts', async () => {
    // A migration on a loaded host holds the schema lock for seconds; here a session holds it instead.
    const holder = new Bun.SQL(databaseUrl, { max: 2 })
    try {
      const locked = Promise.withResolvers<void>()
      const release = Promise.withResolvers<void>()
      const holding = holder.begin(async (tx) => {
        await tx`SELECT pg_advisory_xact_lock(${LOCKS.schema})`
        locked.resolve()
        await release.promise
      })
      await locked.promise
      const starting = startServer({ databaseUrl, args: ['--no-access-log'] })
      starting.catch(() => {}) // awaited below, after the lock is let go
      await eventually(async () => {
        const [row] = await holder`SELECT count(*)::int AS waiting FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`
        return row.waiting === 1
      })
      // Held past the serving lock wait (1 s), which ended the start with "canceling statement due to lock timeout".
      await Bun.sleep(1_500)
      release.resolve()
      await holding
      const server = await starting
      expect(server.bootstrapKey).toBeDefined()
      expect(await server.stop()).toBe(0)
    } finally {
      await holder.close()
    }
  })

  test('four instances starting at once on an empty database migrate once and make one bootstrap key', async () => {
    const servers = await instances(4)
    const announced = servers.filter((server) => server.bootstrapKey !== undefined)
    expect(announced).toHaveLength(1)
    const keys = JSON.parse(cli(['keys', 'list', '--json', '--database-url', databaseUrl]).stdout) as unknown[]
    expect(keys).toHaveLength(1)
    const admin = new Bun.SQL(databaseUrl, { max: 1 })
    try {
      expect((await admin`SELECT version FROM petstore_schema`).map((row: { version: number }) => row.version)).toEqual(
        MIGRATIONS.map((_, i) => i + 1),
      )
    } finally {
      await admin.close()
    }
    // The one key works on every instance.
    for (const server of servers)
      expect((await fetch(`${server.base}/pets`, { headers: auth(announced[0]!.bootstrapKey!) })).status).toBe(200)
  })

  test('a start that cannot write the bootstrap secret fails with one line, makes no key and leaves no process', async () => {
    const cwd = tempDir()
    writeFileSync(join(cwd, 'data'), 'not a folder')
    const result = cli(['serve', '--port', '0', '--host', '127.0.0.1', '--database-url', databaseUrl, '--no-access-log'], { cwd })
    expect(result.code).toBe(1)
    expect(result.stderr).toMatch(
      /petstore: cannot write the bootstrap key's secret to .*data\/petstore-postgres-127\.0\.0\.1-\d+-\w+-bootstrap-key\.txt\.\d+\.tmp: .*\n$/,
    )
    expect(JSON.parse(cli(['keys', 'list', '--json', '--database-url', databaseUrl]).stdout)).toEqual([])
  })

  test('the database URL and the Redis URL never appear in a complaint, and backup points to pg_dump', async () => {
    const bad = cli(['keys', 'list', '--database-url', 'mysql://user:s3cret@host/db'])
    expect(bad.code).toBe(2)
    expect(bad.stderr).not.toContain('s3cret')
    const badRedis = cli(['keys', 'list', '--database-url', databaseUrl, '--redis-url', 'http://:s3cret@host'])
    expect(badRedis.code).toBe(2)
    expect(reasonLine(badRedis.stderr)).toBe(
      'petstore: --redis-url must be a redis:// or rediss:// or redis+unix:// URL (the value is not shown)',
    )
    expect(badRedis.stderr).not.toContain('s3cret')
    // A password with a bare % (it must be written %25 in a URL) is a flag error, not an unexpected one.
    for (const [flag, args] of [
      ['--database-url', ['--database-url', 'postgres://user:s3cret%zz@localhost/db']],
      // Two hex digits each, but not UTF-8.
      ['--database-url', ['--database-url', 'postgres://u%ff:s3cret%C3%28@localhost/db']],
      ['--redis-url', ['--database-url', databaseUrl, '--redis-url', 'redis://:s3cret%@localhost:6379']],
    ] as const) {
      const refused = cli(['keys', 'list', ...args])
      expect([refused.code, reasonLine(refused.stderr)]).toEqual([
        2,
        `petstore: ${flag} has a % escape that is not valid: write a % in a password as %25, and other characters as their UTF-8 bytes (the value is not shown)`,
      ])
      expect(refused.stderr).not.toContain('s3cret')
    }
    const both = cli(['keys', 'list', '--database-url', databaseUrl, '--data', `${tempDir()}/petstore.db`])
    expect(both.code).toBe(2)
    expect(reasonLine(both.stderr)).toBe('petstore: give either a data file (--data, PETSTORE_DATA) or a database URL, not both')
    const backup = cli(['backup', `${tempDir()}/copy.db`, '--database-url', databaseUrl])
    expect(backup.code).toBe(2)
    expect(backup.stderr).toContain('pg_dump')
  })
})

describeWithEngines(['postgresql', 'redis-server', 'nginx-light'], 'two instances behind nginx (deploy/several-instances)', () => {
  let proxy: Subprocess | undefined
  beforeAll(async () => {
    ;[cluster, redis] = await Promise.all([startPostgres(), startRedis()])
    databaseUrl = await cluster.createDatabase('behind_nginx')
  })
  afterAll(async () => {
    proxy?.kill('SIGTERM')
    await proxy?.exited
    await Promise.all([cluster?.destroy(), redis?.destroy()])
  })

  test("the README's nginx upstream spreads requests over both instances, which share one address bucket", async () => {
    const servers = await instances(2, ['--trust-proxy', 'loopback'], { accessLog: true })
    // The file as shipped, with the instances' and nginx's addresses made local.
    let origin: string
    ;({ origin, proc: proxy } = await nginxInFront([servers[0]!.port, servers[1]!.port]))
    // One keyless client: the Free plan's address bucket, 60 a minute, shared by both instances.
    const statuses: number[] = []
    const started = performance.now()
    for (let i = 0; i < 70; i++) statuses.push((await fetch(`${origin}/v1/pets`, { headers: { 'x-forwarded-for': '203.0.113.9' } })).status)
    // The bucket refills one token a second: a loop slower than a second earns that many more 401s.
    const refilled = Math.floor((performance.now() - started) / 1000)
    expect(statuses.slice(0, 60)).toEqual(Array(60).fill(401))
    expect(statuses.filter((status) => status !== 401 && status !== 429)).toEqual([])
    // Past the 60, a 401 for each token refilled meanwhile (wherever it fell), the rest 429.
    expect(statuses.slice(60).filter((status) => status === 401).length).toBeLessThanOrEqual(refilled)
    expect(statuses.slice(60).filter((status) => status === 429).length).toBeGreaterThanOrEqual(10 - refilled)
    // Both instances answered, and each saw the client that nginx named, not nginx.
    await eventually(() => servers.every((server) => server.stdout().includes('"client":"203.0.113.9"')))
    for (const server of servers) {
      const lines = server.stdout().split('\n').slice(0, -1) // the last is empty, or a line still arriving
      const clients = lines.filter((line) => line.includes('"path":"/v1/pets"')).map((line) => JSON.parse(line).client)
      expect(new Set(clients)).toEqual(new Set(['203.0.113.9']))
    }
  })
})
