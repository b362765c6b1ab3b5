/**
 * Several instances of the binary on one PostgreSQL and one Redis, spoken to over HTTP with requests
 * alternating between them: the issue's acceptance scenarios. Bans, revocations and resets hold
 * everywhere, a killed instance loses no acknowledged pet, the instances ride out Redis and PostgreSQL
 * going away, start together or during a migration, and nginx in front spreads requests over them. Those
 * that send bursts of concurrent requests through Redis, or time a change to the second, run alone: they
 * are in instances-bursts.test.ts.
 */
import { afterAll, expect, test } from 'bun:test'
import type { Subprocess } from 'bun'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { LOCKS, MIGRATIONS } from '../../src/storage/postgres/migrations'
import { cli, eventually, startServer, tempDir } from '../support/binary'
import { describeWithEngines } from '../support/engines'
import { inTurn } from '../support/unavailable'
import { nginxInFront } from '../support/nginx'
import { reasonLine } from '../process/helpers'
import { allPets, auth, post, severalInstances } from './helpers'

describeWithEngines(['postgresql', 'redis-server'], 'several instances on PostgreSQL and Redis', () => {
  const { engines, createKey, instances, knownEverywhere } = severalInstances('instances', { perTest: true })

  test('an instance left idle through a Redis restart serves its first request afterwards', async () => {
    const [server] = await instances(1)
    const key = createKey('pro')
    await knownEverywhere([server!], key)
    expect((await fetch(`${server!.base}/pets`, { headers: auth(key) })).status).toBe(200)
    await engines.redis.stop()
    await engines.redis.start()
    // No request meanwhile: the instance reconnects alone, which Redis sees as a client whose last
    // command is the instance's health check.
    await eventually(async () => ((await engines.redis.admin.send('CLIENT', ['LIST'])) as string).includes(' cmd=ping '), 5_000).catch(
      () => {},
    )
    // A ping can be seen while the instance's own reconnect still loads its scripts: wait, as a load
    // balancer would, for its readiness (no API request), then the first request must be served.
    await eventually(async () => (await fetch(`${server!.origin}/readyz`)).status === 200, 5_000)
    expect((await fetch(`${server!.base}/pets`, { headers: auth(key) })).status).toBe(200)
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
    await engines.redis.stop()
    try {
      const refused = await fetch(`${server!.base}/pets`, { headers: auth(key) })
      await server!.said('petstore: the shared rate limiter (Redis) does not answer: API requests get 503 until it does\n')
      expect(refused.status).toBe(503)
      expect(refused.headers.get('retry-after')).toBe('1')
      expect(((await refused.json()) as { code: string }).code).toBe('unavailable')
      // Every operation is limited, so every one answers this 503 (its document says so: the preload checks it).
      expect((await fetch(`${server!.base}/store/orders`, { headers: auth(key) })).status).toBe(503)
      expect((await fetch(`${server!.origin}/readyz`)).status).toBe(503)
    } finally {
      await engines.redis.start()
    }
    await eventually(async () => (await fetch(`${server!.base}/pets`, { headers: auth(key) })).status === 200, 5_000)
    expect((await fetch(`${server!.origin}/readyz`)).status).toBe(200)
    await server!.said('petstore: the shared rate limiter (Redis) answers again\n')
    expect(server!.stderr().match(/the shared rate limiter \(Redis\)/g)).toHaveLength(2)
  })

  test('with --limiter-fallback local, Redis stopped: each instance limits on its own, says so once, and returns to Redis', async () => {
    const [server] = await instances(1, ['--limiter-fallback', 'local'])
    const key = createKey('pro')
    await knownEverywhere([server!], key)
    await engines.redis.stop()
    try {
      const degraded = await fetch(`${server!.base}/pets`, { headers: auth(key) })
      expect(degraded.status).toBe(200)
      expect(degraded.headers.get('x-ratelimit-limit')).toBe('300')
      expect((await fetch(`${server!.origin}/readyz`)).status).toBe(200)
      expect(await (await fetch(`${server!.origin}/metrics`)).text()).toContain('petstore_rate_limiter_degraded 1')
    } finally {
      await engines.redis.start()
    }
    await eventually(async () => {
      await fetch(`${server!.base}/pets`, { headers: auth(key) })
      return (await (await fetch(`${server!.origin}/metrics`)).text()).includes('petstore_rate_limiter_degraded 0')
    }, 5_000)
    expect(server!.stderr().match(/does not answer: limiting in this process/g)).toHaveLength(1)
    await server!.said('the shared rate limiter (Redis) answers again')
  })

  test('PostgreSQL restarted: creates get 503 and /readyz 503 while it is down, then everything works without a restart', async () => {
    const [server] = await instances(1)
    const key = createKey('pro')
    await knownEverywhere([server!], key)
    expect((await post(server!, key, { name: 'before', categoryId: 1 })).status).toBe(201)
    await engines.cluster.stop()
    try {
      const refused = await post(server!, key, { name: 'during', categoryId: 1 })
      expect(refused.status).toBe(503)
      expect(((await refused.json()) as { code: string }).code).toBe('unavailable')
      expect((await fetch(`${server!.origin}/readyz`)).status).toBe(503)
    } finally {
      await engines.cluster.start()
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
    const alone = await startServer({ databaseUrl: engines.databaseUrl, args: ['--no-access-log'] })
    expect(alone.stderr()).toContain(
      'petstore: rate limits are per instance: with several instances, give them --redis-url to share them\n',
    )
  })

  test('an instance starting while another migrates waits for it longer than a serving lock wait, then starts', async () => {
    // A migration on a loaded host holds the schema lock for seconds; here a session holds it instead.
    const holder = new Bun.SQL(engines.databaseUrl, { max: 2 })
    try {
      const locked = Promise.withResolvers<void>()
      const release = Promise.withResolvers<void>()
      const holding = holder.begin(async (tx) => {
        await tx`SELECT pg_advisory_xact_lock(${LOCKS.schema})`
        locked.resolve()
        await release.promise
      })
      await locked.promise
      const starting = startServer({ databaseUrl: engines.databaseUrl, args: ['--no-access-log'] })
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
    const keys = JSON.parse(cli(['keys', 'list', '--json', '--database-url', engines.databaseUrl]).stdout) as unknown[]
    expect(keys).toHaveLength(1)
    const admin = new Bun.SQL(engines.databaseUrl, { max: 1 })
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
    const result = cli(['serve', '--port', '0', '--host', '127.0.0.1', '--database-url', engines.databaseUrl, '--no-access-log'], { cwd })
    expect(result.code).toBe(1)
    expect(result.stderr).toMatch(
      /petstore: cannot write the bootstrap key's secret to .*data\/petstore-postgres-127\.0\.0\.1-\d+-\w+-bootstrap-key\.txt\.\d+\.tmp: .*\n$/,
    )
    expect(JSON.parse(cli(['keys', 'list', '--json', '--database-url', engines.databaseUrl]).stdout)).toEqual([])
  })

  test('the database URL and the Redis URL never appear in a complaint, and backup points to pg_dump', async () => {
    const bad = cli(['keys', 'list', '--database-url', 'mysql://user:s3cret@host/db'])
    expect(bad.code).toBe(2)
    expect(bad.stderr).not.toContain('s3cret')
    const badRedis = cli(['keys', 'list', '--database-url', engines.databaseUrl, '--redis-url', 'http://:s3cret@host'])
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
      ['--redis-url', ['--database-url', engines.databaseUrl, '--redis-url', 'redis://:s3cret%@localhost:6379']],
    ] as const) {
      const refused = cli(['keys', 'list', ...args])
      expect([refused.code, reasonLine(refused.stderr)]).toEqual([
        2,
        `petstore: ${flag} has a % escape that is not valid: write a % in a password as %25, and other characters as their UTF-8 bytes (the value is not shown)`,
      ])
      expect(refused.stderr).not.toContain('s3cret')
    }
    const both = cli(['keys', 'list', '--database-url', engines.databaseUrl, '--data', `${tempDir()}/petstore.db`])
    expect(both.code).toBe(2)
    expect(reasonLine(both.stderr)).toBe('petstore: give either a data file (--data, PETSTORE_DATA) or a database URL, not both')
    const backup = cli(['backup', `${tempDir()}/copy.db`, '--database-url', engines.databaseUrl])
    expect(backup.code).toBe(2)
    expect(backup.stderr).toContain('pg_dump')
  })
})

describeWithEngines(['postgresql', 'redis-server', 'nginx-light'], 'two instances behind nginx (deploy/several-instances)', () => {
  const { instances } = severalInstances('behind_nginx', { perTest: false })
  let proxy: Subprocess | undefined
  afterAll(async () => {
    proxy?.kill('SIGTERM')
    await proxy?.exited
  })

  test("the README's nginx upstream spreads requests over both instances, which share one address bucket", async () => {
    const servers = await instances(2, ['--trust-proxy', 'loopback'], { accessLog: true })
    // The file as shipped, with the instances' and nginx's addresses made local.
    let origin: string
    ;({ origin, proc: proxy } = await nginxInFront([servers[0]!.port, servers[1]!.port]))
    // One keyless client: the Free plan's address bucket, 60 a minute, shared by both instances.
    const started = performance.now()
    const answers = await inTurn(70, () => fetch(`${origin}/v1/pets`, { headers: { 'x-forwarded-for': '203.0.113.9' } }))
    const statuses = answers.map((answer) => answer.status)
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
