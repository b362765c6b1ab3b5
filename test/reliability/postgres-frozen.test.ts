/**
 * A PostgreSQL that stops answering without closing its connections (SIGSTOP of the postmaster and every
 * backend, as a stalled host or a black-holed network looks to a client), under the compiled binary.
 * PostgreSQL's own timeouts never fire then; the server's deadlines must: creates get 503 within 5 s,
 * reads well under that, /healthz keeps answering, SIGTERM ends the server within its drain, and once
 * PostgreSQL resumes the server serves again on fresh connections, and an idempotent retry of every
 * create that was cut off settles it to exactly one pet.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test'
import { SQL } from 'bun'
import { auth, listAll, postPet } from '../process/helpers'
import { eventually, type Server, startServer } from '../support/binary'
import { describeWithEngines } from '../support/engines'
import { type PostgresCluster, postgresForSuite } from '../support/postgres'

/** Writes answer within this (README: "a create gets its answer within 5 s"); reads within a second and a bit. */
const WRITE_BOUND_MS = 5_000
const READ_BOUND_MS = 2_000

let cluster: PostgresCluster
let url: string
const frozen = new Set<number>()

/** The postmaster of the cluster and all its children (backends, checkpointer, ...). */
function postgresProcesses(): number[] {
  const pgrep = (args: string[]) =>
    Bun.spawnSync(['pgrep', ...args])
      .stdout.toString()
      .split('\n')
      .filter(Boolean)
      .map(Number)
  const postmaster = pgrep(['-f', `postgres -D \\S+ -p ${cluster.port} `])
  if (postmaster.length !== 1) throw new Error(`expected one postmaster on port ${cluster.port}, found ${postmaster.length}`)
  return [postmaster[0]!, ...pgrep(['-P', String(postmaster[0])])]
}

function freeze(): void {
  for (const pid of postgresProcesses()) {
    process.kill(pid, 'SIGSTOP')
    frozen.add(pid)
  }
}

function thaw(): void {
  for (const pid of frozen) {
    try {
      process.kill(pid, 'SIGCONT')
    } catch {}
  }
  frozen.clear()
}

/** Sends a request and measures it; a server that hangs fails the test (status 0) instead of hanging it. */
async function timed(request: () => Promise<Response>): Promise<{ status: number; ms: number; code?: unknown }> {
  const started = performance.now()
  try {
    const response = await request()
    const body = (await response.json().catch(() => null)) as { code?: unknown } | null
    return { status: response.status, ms: performance.now() - started, code: body?.code }
  } catch (error) {
    return { status: 0, ms: performance.now() - started, code: `no answer: ${(error as Error).name}` }
  }
}

/** Long past every bound, so that a request the server holds shows as a failure, not a hung test. */
const patience = () => ({ signal: AbortSignal.timeout(15_000) })

describeWithEngines(['postgresql'], 'a frozen PostgreSQL under the binary', () => {
  let server: Server
  let key: string

  // Declared before the cluster, so it runs before the cluster's own afterAll: a frozen PostgreSQL cannot stop.
  afterAll(async () => {
    thaw()
    if (server.proc.exitCode === null) await server.stop('SIGKILL')
  })
  cluster = postgresForSuite()
  beforeAll(async () => {
    url = await cluster.createDatabase('frozen')
    server = await startServer({ databaseUrl: url, args: ['--no-access-log'] })
    key = server.bootstrapKey!
  })

  test('requests get 503 within their bounds while it is frozen, and everything is settled once it resumes', async () => {
    expect((await postPet(server.base, key, { name: 'before', categoryId: 1 })).status).toBe(201)

    // Creates in flight as it freezes (some may be mid-commit), and more while it is frozen: the later
    // ones wait for the batch ahead of theirs, and still answer within the bound.
    try {
      await frozenThenResumed()
    } finally {
      thaw()
    }
  })

  async function frozenThenResumed() {
    const names = Array.from({ length: 6 }, (_, i) => `frozen-${i}`)
    const create = (name: string) => () =>
      fetch(`${server.base}/pets`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...auth(key), 'idempotency-key': name },
        body: JSON.stringify({ name, categoryId: 2 }),
        ...patience(),
      })
    const early = names.slice(0, 3).map((name) => timed(create(name)))
    freeze()
    const late: Promise<{ status: number; ms: number; code?: unknown }>[] = []
    for (const name of names.slice(3)) {
      late.push(timed(create(name)))
      await Bun.sleep(300)
    }
    const read = await timed(() => fetch(`${server.base}/pets?status=sold`, { headers: auth(key), ...patience() }))
    const one = await timed(() => fetch(`${server.base}/pets/999999`, { headers: auth(key), ...patience() }))
    const health = await timed(() => fetch(`${server.origin}/healthz`, patience()))
    const ready = await timed(() => fetch(`${server.origin}/readyz`, patience()))
    const creates = await Promise.all([...early, ...late])
    console.log('while frozen:', JSON.stringify({ creates, read, one, health, ready }))

    expect(health).toMatchObject({ status: 200 })
    expect(ready.status).toBe(503)
    expect(read).toMatchObject({ status: 503, code: 'unavailable' })
    expect(read.ms).toBeLessThan(READ_BOUND_MS)
    expect(one).toMatchObject({ status: 503, code: 'unavailable' })
    expect(one.ms).toBeLessThan(READ_BOUND_MS)
    // Those sent as it froze may have committed before it; either way they answered in time.
    for (const answer of creates.slice(0, 3)) expect([201, 503]).toContain(answer.status)
    for (const answer of creates.slice(3)) expect(answer).toMatchObject({ status: 503, code: 'unavailable' })
    expect(Math.max(...creates.map((answer) => answer.ms))).toBeLessThan(WRITE_BOUND_MS)

    thaw()
    await eventually(async () => (await fetch(`${server.origin}/readyz`)).status === 200, 10_000)
    // The retry with the same Idempotency-Key settles each create, whether or not it committed late.
    for (const name of names) expect((await create(name)()).status).toBe(201)
    const pets = await listAll(server.base, key)
    for (const name of names) expect(pets.filter((pet) => pet.name === name)).toHaveLength(1)

    // Fresh connections: the ones that missed a deadline are closed, and none is left beside the pool.
    const admin = new SQL(url, { max: 1 })
    try {
      await eventually(async () => {
        const [{ n }] = await admin`SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'petstore'`
        return n <= 4
      }, 10_000)
    } finally {
      await admin.close()
    }
  }

  test('a start while it is frozen waits for it, as a command does, and serves once it resumes', async () => {
    const fresh = await cluster.createDatabase('frozen_at_start')
    freeze()
    const starting = startServer({ databaseUrl: fresh, args: ['--no-access-log'] })
    starting.catch(() => {}) // awaited once thawed
    // Frozen past a query's second, the serving deadline that ended such a start with exit 1.
    await Bun.sleep(2_500)
    thaw()
    const late = await starting
    await eventually(async () => (await fetch(`${late.origin}/readyz`)).status === 200, 10_000)
    expect(await late.stop()).toBe(0)
  })

  test('SIGTERM ends the server within its 10 s drain while PostgreSQL is frozen', async () => {
    await eventually(async () => (await fetch(`${server.origin}/readyz`)).status === 200, 10_000)
    freeze()
    const inFlight = timed(() => postPet(server.base, key, { name: 'at shutdown', categoryId: 3 }))
    await Bun.sleep(200)
    const started = performance.now()
    server.proc.kill('SIGTERM')
    const exited = await Promise.race([server.exited, Bun.sleep(20_000).then(() => 'still running')])
    const ms = performance.now() - started
    console.log(`SIGTERM while frozen: exit ${exited} after ${Math.round(ms)} ms`)
    expect(exited).not.toBe('still running')
    expect(ms).toBeLessThan(11_000)
    expect(await inFlight).toMatchObject({ status: 503, code: 'unavailable' })
  })
})
