/**
 * Several instances of the binary on one PostgreSQL and one Redis, spoken to over HTTP with requests
 * alternating between them: the acceptance scenarios that send bursts of concurrent requests
 * through the instances to Redis (128, 16, 8 writers and a reader, 6) and check every answer, and those
 * that time a change made through the database to the second (a revocation, a reset of limits). Limits
 * are exact across instances, idempotency and paging stay exact while both insert. Run last and alone
 * by `bun run test` (test/support/run-suites.ts): beside two busy jobs on two cores, Redis met its 100 ms
 * deadline late for some of such a burst, and the documented 503 came where the test checks a result;
 * and with the two cores saturated (a load of 10), a revocation reached both instances in 1,266 ms.
 * The other scenarios, the kill -9 under 16 writers among them (it counts the 201s, whatever else
 * comes), are in instances.test.ts.
 */
import { expect, test } from 'bun:test'
import { encodeCursor } from '../../src/modules/pets/cursor'
import { cli, eventually } from '../support/binary'
import { describeWithEngines } from '../support/engines'
import { allPets, auth, post, severalInstances } from './helpers'

describeWithEngines(['postgresql', 'redis-server'], 'several instances on PostgreSQL and Redis, under bursts', () => {
  const { engines, createKey, instances, knownEverywhere } = severalInstances('bursts', { perTest: true })

  test('a key revoked through one database is refused by both instances within one second', async () => {
    const servers = await instances(2)
    const key = createKey('pro')
    await knownEverywhere(servers, key)
    const id = (
      JSON.parse(cli(['keys', 'list', '--json', '--database-url', engines.databaseUrl]).stdout) as { id: string; plan: string }[]
    ).find((k) => k.plan === 'pro')!.id
    expect(cli(['keys', 'revoke', id, '--database-url', engines.databaseUrl]).code).toBe(0)
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
    const id = (
      JSON.parse(cli(['keys', 'list', '--json', '--database-url', engines.databaseUrl]).stdout) as { id: string; name: string }[]
    ).find((k) => k.name === 'refilled')!.id
    expect(cli(['keys', 'reset-limits', id, '--database-url', engines.databaseUrl]).code).toBe(0)
    // Each instance applies the reset at its next poll: wait for both, not for one and then read the other.
    let after: Response[] = []
    await eventually(async () => {
      after = await Promise.all(servers.map((s) => fetch(`${s.base}/pets`, { headers: auth(key) })))
      return after.every((answer) => answer.status === 200)
    }, 1_000)
    for (const answer of after) expect(Number(answer.headers.get('x-ratelimit-remaining'))).toBeGreaterThan(20)
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

  test('keys reset-limits on three instances grants one full bucket, not one per instance', async () => {
    const servers = await instances(3)
    // A day bucket of 30 in force: nothing refills visibly while the test runs.
    const key = createKey('enterprise', '--rpm', '1000', '--rpd', '30')
    await knownEverywhere(servers, key)
    const ask = (i: number) => fetch(`${servers[i % 3]!.base}/pets?limit=1`, { headers: auth(key) })
    for (let i = 0; i < 30; i++) expect((await ask(i)).status).toBe(200)
    expect((await ask(0)).status).toBe(429)
    const id = (
      JSON.parse(cli(['keys', 'list', '--json', '--database-url', engines.databaseUrl]).stdout) as { id: string; plan: string }[]
    ).find((k) => k.plan === 'enterprise')!.id
    expect(cli(['keys', 'reset-limits', id, '--database-url', engines.databaseUrl]).code).toBe(0)
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
})
