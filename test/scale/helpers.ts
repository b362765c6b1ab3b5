/**
 * What the several-instances suites share: one PostgreSQL and one Redis for the suite, instances of the
 * binary on them (requests alternate between them over HTTP), keys made with the CLI, and the waits and
 * reads around them.
 */
import { afterAll, beforeAll, beforeEach } from 'bun:test'
import { encodeCursor } from '../../src/modules/pets/cursor'
import { cli, eventually, type Server, startServer } from '../support/binary'
import { type PostgresCluster, startPostgres } from '../support/postgres'
import { type RedisServer, startRedis } from '../support/redis'

export const auth = (key: string) => ({ authorization: `Bearer ${key}` })
const json = { 'content-type': 'application/json' }

/** The suite's engines, and the database its current test runs on: read inside tests and hooks. */
export interface Engines {
  cluster: PostgresCluster
  redis: RedisServer
  databaseUrl: string
}

/**
 * PostgreSQL and Redis for the suite (describe) it is called in, started before its first test and
 * destroyed after its last. With `perTest`, each test gets a database of its own (`NAME_N`) and an empty
 * Redis; else the suite has the one database `NAME`. The functions make keys and start instances on the
 * current test's database.
 */
export function severalInstances(name: string, { perTest }: { perTest: boolean }) {
  const engines = {} as Engines
  let databases = 0
  beforeAll(async () => {
    ;[engines.cluster, engines.redis] = await Promise.all([startPostgres(), startRedis()])
    if (!perTest) engines.databaseUrl = await engines.cluster.createDatabase(name)
  })
  afterAll(async () => {
    await Promise.all([engines.cluster?.destroy(), engines.redis?.destroy()])
  })
  if (perTest)
    beforeEach(async () => {
      engines.databaseUrl = await engines.cluster.createDatabase(`${name}_${++databases}`)
      await engines.redis.admin.send('FLUSHALL', [])
    })

  /** A key made with the CLI on the test's database: its secret. */
  function createKey(plan: string, ...extra: string[]): string {
    const result = cli(['keys', 'create', '--plan', plan, '--database-url', engines.databaseUrl, ...extra])
    if (result.code !== 0) throw new Error(result.stderr)
    return result.stdout.trim().split('\n').at(-1)!
  }

  /** `count` instances on the test's database and the suite's Redis, started at once. */
  async function instances(count: number, args: string[] = [], { accessLog = false } = {}): Promise<Server[]> {
    return Promise.all(
      Array.from({ length: count }, () =>
        startServer({
          databaseUrl: engines.databaseUrl,
          args: ['--redis-url', engines.redis.url, ...(accessLog ? [] : ['--no-access-log']), ...args],
        }),
      ),
    )
  }

  /**
   * Waits until every instance holds as many active keys as the database (its /metrics says so), so a
   * key just made with the CLI is known everywhere; asking with the key itself would spend its tokens.
   */
  async function knownEverywhere(servers: Server[], _key: string): Promise<void> {
    const listed = JSON.parse(cli(['keys', 'list', '--json', '--database-url', engines.databaseUrl]).stdout) as {
      revoked: string | null
    }[]
    const active = listed.filter((key) => key.revoked === null).length
    await eventually(async () => {
      const texts = await Promise.all(servers.map(async (s) => (await fetch(`${s.origin}/metrics`)).text()))
      return texts.every((text) => text.includes(`\npetstore_api_keys_active ${active}\n`))
    })
  }

  return { engines, createKey, instances, knownEverywhere }
}

/** Every pet, following the cursor from page to page. */
export async function allPets(server: Server, key: string): Promise<{ id: number; name: string }[]> {
  const pets: { id: number; name: string }[] = []
  for (let page: typeof pets = [], first = true; first || page.length === 100; first = false) {
    const cursor = pets.length ? `&cursor=${encodeCursor(pets.at(-1)!.id)}` : ''
    let answer = await fetch(`${server.base}/pets?limit=100${cursor}`, { headers: auth(key) })
    // A 503 with Retry-After (the shared limiter answered late on a loaded host) is waited out, as a client does; a few times at most.
    for (let retries = 0; answer.status === 503 && answer.headers.has('retry-after') && retries < 5; retries++) {
      await Bun.sleep(Number(answer.headers.get('retry-after')) * 1000)
      answer = await fetch(`${server.base}/pets?limit=100${cursor}`, { headers: auth(key) })
    }
    if (answer.status !== 200) throw new Error(`listing answered ${answer.status}: ${await answer.text()}`)
    page = (await answer.json()) as typeof pets
    pets.push(...page)
  }
  return pets
}

export async function post(server: Server, key: string, body: unknown, headers: Record<string, string> = {}) {
  return fetch(`${server.base}/pets`, { method: 'POST', headers: { ...auth(key), ...json, ...headers }, body: JSON.stringify(body) })
}
