/**
 * Graceful shutdown: SIGTERM/SIGINT stop accepting, let the requests already in the server's hands
 * finish with complete answers, and exit 0; afterwards nothing listens on the port. Delayed answers
 * (staging's Prefer: delay) end at once with a 503 instead of racing the drain's end.
 */
import { afterAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { join } from 'node:path'
import { createKeyWithCli, eventually, startServer, tempDir } from '../support/binary'
import { auth, connectionRefused, killSpawned, listAll, type PetBody, postPet, startSlowPost } from './helpers'

afterAll(killSpawned)
// Process tests wait on real processes; bunfig's [test] timeout is not applied by bun test 1.4.
setDefaultTimeout(20_000)

describe('graceful shutdown', () => {
  test.each(['SIGTERM', 'SIGINT'] as const)(
    '%s: requests in flight finish with 201, new connections are refused meanwhile, exit 0',
    async (signal) => {
      const dataFile = join(tempDir(), 'petstore.db')
      const key = createKeyWithCli(dataFile, ['--plan', 'pro'])
      const server = await startServer({ dataFile })
      // Five POSTs the server has accepted (it answered 100 Continue), each waiting for the rest of its body.
      const slow = await Promise.all(
        Array.from({ length: 5 }, (_, i) => startSlowPost(server.port, '/v1', key, { name: `inflight ${i}`, categoryId: i })),
      )
      server.proc.kill(signal)
      await server.said(`${signal} received`)
      // No new connection while it drains.
      await eventually(() => connectionRefused(server.port), 2_000)
      expect(server.proc.exitCode).toBeNull()
      for (const request of slow) request.finish()
      const responses = await Promise.all(slow.map((request) => request.response))
      for (const [i, response] of responses.entries()) {
        expect(response.status).toBe(201)
        expect(response.headers['content-type']).toContain('application/json')
        expect(JSON.parse(response.body)).toMatchObject({ name: `inflight ${i}`, categoryId: i, status: 'available' })
      }
      expect(await server.exited).toBe(0)
      expect(server.stderr()).toMatch(/stopped/)
      for (const request of slow) request.close()
      expect(await connectionRefused(server.port)).toBe(true)

      // What was answered 201 is stored.
      const again = await startServer({ dataFile })
      const stored = await listAll(again.base, key)
      for (const response of responses) expect(stored).toContainEqual(JSON.parse(response.body))
      expect(await again.stop()).toBe(0)
    },
  )

  test('SIGTERM during a burst of POSTs: every answer is a complete 201, every 201 is stored, nothing unanswered is stored', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const key = createKeyWithCli(dataFile, ['--plan', 'enterprise', '--rpm', '100000', '--rpd', '100000'])
    const server = await startServer({ dataFile })
    // Warm connections so the burst is already on accepted sockets.
    expect((await postPet(server.base, key, { name: 'warm', categoryId: 0 })).status).toBe(201)
    const burst = Array.from({ length: 16 }, (_, i) =>
      postPet(server.base, key, { name: `burst ${i}`, categoryId: i }).then(async (r) => ({ status: r.status, body: await r.text() })),
    )
    server.proc.kill('SIGTERM')
    const settled = await Promise.allSettled(burst)
    expect(await server.exited).toBe(0)
    const answered = settled.filter((s) => s.status === 'fulfilled').map((s) => s.value)
    for (const answer of answered) {
      expect(answer.status).toBe(201)
      expect(JSON.parse(answer.body)).toMatchObject({ categoryId: expect.any(Number) })
    }
    expect(await connectionRefused(server.port)).toBe(true)

    const again = await startServer({ dataFile })
    const stored = await listAll(again.base, key)
    for (const answer of answered) expect(stored).toContainEqual(JSON.parse(answer.body) as PetBody)
    // And the server acted on no request it then left unanswered.
    const storedBurst = stored
      .filter((pet) => pet.name.startsWith('burst '))
      .map((pet) => pet.name)
      .sort()
    expect(storedBurst).toEqual(answered.map((a) => (JSON.parse(a.body) as PetBody).name).sort())
    expect(await again.stop()).toBe(0)
  })

  test('SIGTERM while 100 delayed creates wait (Prefer: delay=10000): each is a 503 with Retry-After at once, no pet is made, and each retry under its Idempotency-Key makes one', async () => {
    const dataFile = join(tempDir(), 'staging.db')
    const key = createKeyWithCli(dataFile, ['--env', 'staging', '--plan', 'enterprise', '--rpm', '100000', '--rpd', '100000'])
    const args = ['--env', 'staging', '--no-access-log', '--console-address', 'off']
    const server = await startServer({ dataFile, args })
    const create = (base: string, i: number, prefer: Record<string, string>) =>
      postPet(base, key, { name: `delayed ${i}`, categoryId: i }, { 'idempotency-key': `stop-${i}`, ...prefer }).then(
        async (response) => ({ status: response.status, retryAfter: response.headers.get('retry-after'), body: await response.text() }),
        (error: Error & { code?: string }) => ({ status: error.code ?? error.message, retryAfter: null, body: '' }),
      )
    const delayed = Array.from({ length: 100 }, (_, i) => create(server.base, i, { prefer: 'delay=10000' }))
    // 100 is the key's bound on waiting delays: a probe refused at once says that every create waits.
    await eventually(async () => {
      const probe = await fetch(`${server.base}/pets`, { headers: auth(key, { prefer: 'code=429, delay=0' }) })
      return probe.status === 503
    }, 10_000)
    const signalledAt = performance.now()
    server.proc.kill('SIGTERM')
    const answers = await Promise.all(delayed)
    const answeredInMs = performance.now() - signalledAt
    const tally: Record<string, number> = {}
    for (const { status, retryAfter } of answers)
      tally[`${status}, Retry-After ${retryAfter}`] = (tally[`${status}, Retry-After ${retryAfter}`] ?? 0) + 1
    // At once, not after the drain's 10 s grace, which the delays would have filled.
    expect({ tally, seconds: Math.round(answeredInMs / 1000) }).toEqual({ tally: { '503, Retry-After 1': 100 }, seconds: 0 })
    expect(JSON.parse(answers[0]!.body)).toEqual({
      code: 'unavailable',
      message: 'The server is stopping; retry in a moment.',
      status: 503,
    })
    expect(await server.exited).toBe(0)

    const again = await startServer({ dataFile, args })
    expect(await listAll(again.base, key)).toEqual([])
    const retried = await Promise.all(Array.from({ length: 100 }, (_, i) => create(again.base, i, {})))
    expect(retried.filter((answer) => answer.status !== 201)).toEqual([])
    expect((await listAll(again.base, key)).map((pet) => pet.name).sort()).toEqual(
      Array.from({ length: 100 }, (_, i) => `delayed ${i}`).sort(),
    )
    expect(await again.stop()).toBe(0)
  })

  // Fifteen starts and stops, each stop letting kept-alive clients go first (50 ms at least): on a
  // loaded 2-core machine, 20 s was at the edge before that.
  test('a signal right after the "listening" line is handled: exit 0, never killed by it', async () => {
    const codes: number[] = []
    for (let i = 0; i < 15; i++) {
      const server = await startServer()
      codes.push(await server.stop(i % 2 ? 'SIGINT' : 'SIGTERM'))
    }
    expect(codes).toEqual(codes.map(() => 0))
  }, 30_000)

  test('after SIGTERM the port refuses connections and the data file opens again at once', async () => {
    const server = await startServer()
    expect((await fetch(`${server.base}/pets`, { headers: auth(server.bootstrapKey!) })).status).toBe(200)
    expect(await server.stop()).toBe(0)
    expect(await connectionRefused(server.port)).toBe(true)
    await expect(fetch(`${server.origin}/healthz`)).rejects.toThrow()
    const again = await startServer({ dataFile: server.dataFile })
    expect((await fetch(`${again.base}/pets`, { headers: auth(server.bootstrapKey!) })).status).toBe(200)
    expect(await again.stop()).toBe(0)
  })
})
