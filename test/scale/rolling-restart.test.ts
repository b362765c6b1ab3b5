/**
 * docs/upgrading.md's rolling restart: two instances on one PostgreSQL behind nginx with the shipped
 * upstream (deploy/several-instances/nginx.conf), each stopped with SIGTERM and started again in turn
 * while clients keep reading and creating through nginx: no read fails; a create that nginx had sent
 * on a cached connection just as the instance closed it may get 502 (nginx never resends a POST), and
 * the client's one retry with the same Idempotency-Key creates it exactly once; every 201 is stored.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test'
import type { Subprocess } from 'bun'
import { cli, eventually, tempDir } from '../support/binary'
import { describeWithEngines } from '../support/engines'
import { nginxInFront } from '../support/nginx'
import { freePorts } from '../support/ports'
import { postgresForSuite } from '../support/postgres'
import { auth, killSpawned, listAll, postPet, type RawServer, spawnServe } from '../process/helpers'

describeWithEngines(['postgresql', 'nginx-light'], 'a rolling restart behind nginx (docs/upgrading.md)', () => {
  let databaseUrl: string
  let proxy: Subprocess | undefined
  // Declared before the cluster, so nginx and the instances stop before PostgreSQL does.
  afterAll(async () => {
    proxy?.kill('SIGTERM')
    await proxy?.exited
    killSpawned()
  })
  const cluster = postgresForSuite()
  beforeAll(async () => {
    databaseUrl = await cluster.createDatabase('rolling')
  })

  test('each instance stopped and started in turn under load: no read fails, a create needs at most one retry with its Idempotency-Key, every 201 is stored once', async () => {
    const made = cli(['keys', 'create', '--plan', 'enterprise', '--rpm', '1000000', '--rpd', '1000000', '--database-url', databaseUrl])
    expect(made.code).toBe(0)
    const key = made.stdout.trim().split('\n').at(-1)!
    const ports = await freePorts(2)
    const start = (port: number) =>
      spawnServe(
        [
          '--port',
          String(port),
          '--host',
          '127.0.0.1',
          '--database-url',
          databaseUrl,
          '--no-access-log',
          '--trust-proxy',
          'loopback',
          '--console-address',
          'off',
        ],
        {
          cwd: tempDir(),
        },
      )
    const servers: RawServer[] = await Promise.all(ports.map(start))

    let origin: string
    ;({ origin, proc: proxy } = await nginxInFront([ports[0]!, ports[1]!]))
    const base = `${origin}/v1`

    const outcomes: { status: number | string; body: string }[] = []
    let running = true
    const clients = [0, 1, 2, 3].map(async (id) => {
      for (let i = 0; running; i++) {
        try {
          const create = () =>
            postPet(base, key, { name: `rolling ${id}.${i}`, categoryId: id }, { 'idempotency-key': `rolling-${id}-${i}` })
          const response = i % 2 === 0 ? await create().catch(create) : await fetch(`${base}/pets?limit=5`, { headers: auth(key) })
          outcomes.push({ status: response.status, body: await response.text() })
        } catch (error) {
          outcomes.push({ status: (error as Error).message, body: '' })
        }
      }
    })
    const progress = async (more: number) => {
      const target = outcomes.length + more
      await eventually(() => outcomes.length >= target, 30_000)
    }

    await progress(40)
    for (const [i, instancePort] of ports.entries()) {
      expect(await servers[i]!.stop('SIGTERM')).toBe(0)
      await progress(20)
      servers[i] = await start(instancePort)
      await eventually(async () => (await fetch(`${servers[i]!.origin}/readyz`)).status === 200, 20_000)
      await progress(40)
    }
    running = false
    await Promise.all(clients)

    expect(outcomes.filter((o) => o.status !== 200 && o.status !== 201)).toEqual([])
    const created = outcomes.filter((o) => o.status === 201).map((o) => JSON.parse(o.body) as { id: number; name: string })
    const stored = await listAll(`${servers[0]!.origin}/v1`, key)
    const storedIds = new Set(stored.map((pet) => pet.id))
    expect(created.filter((pet) => !storedIds.has(pet.id))).toEqual([])
    // Each create once, retried or not.
    expect(new Set(stored.map((pet) => pet.name)).size).toBe(stored.length)
    for (const server of servers) expect(await server.stop()).toBe(0)
  }, 120_000)
})
