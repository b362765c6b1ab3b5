/**
 * Scenarios on request (issue 18), over the compiled binary: every forced answer is compared header by
 * header with a real one of the same status made the real way in the same test (a 500 cannot be made
 * on purpose: it is compared with the constructor the error handler uses, and with a real error's
 * headers), forced answers spend no token and start no ban, fail=N counts tries under an
 * Idempotency-Key, delays are measured, and with scenarios off Prefer changes nothing.
 */
import { afterAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { connect } from 'node:net'
import { join } from 'node:path'
import { internalError, LIMITER_DOWN } from '../../src/http/api-errors'
import { cli, createKeyWithCli, eventually, type Server, startServer, tempDir } from '../support/binary'
import { describeWithEngines } from '../support/engines'
import { postgresForSuite } from '../support/postgres'
import { type RedisServer, redisForSuite, startRedis } from '../support/redis'
import { startRelay } from '../support/relay'
import { auth, killSpawned, listAll, postPet, serveExpectingFailure, spawnServe } from './helpers'

setDefaultTimeout(60_000)
afterAll(killSpawned)

/** Headers that name the exchange, not the answer: never compared. */
const PER_EXCHANGE = new Set(['x-request-id', 'date', 'content-length'])

function headersOf(response: Response): Map<string, string> {
  const headers = new Map<string, string>()
  response.headers.forEach((value, name) => {
    if (!PER_EXCHANGE.has(name)) headers.set(name, value)
  })
  return headers
}

/**
 * A forced answer against a real one: the same header names (the forced one adds only
 * Preference-Applied, with `applied`), and the same values but for the names in `differ`.
 */
function expectSameHeaders(forced: Response, real: Response, applied: string, differ: string[] = []): void {
  const mine = headersOf(forced)
  const theirs = headersOf(real)
  expect(mine.get('preference-applied')).toBe(applied)
  expect(theirs.has('preference-applied')).toBe(false)
  mine.delete('preference-applied')
  expect([...mine.keys()].sort()).toEqual([...theirs.keys()].sort())
  for (const [name, value] of theirs) if (!differ.includes(name)) expect(`${name}: ${mine.get(name)}`).toBe(`${name}: ${value}`)
}

const prefer = (key: string, value: string, extra: Record<string, string> = {}) => auth(key, { prefer: value, ...extra })
const remaining = (response: Response) => Number(response.headers.get('x-ratelimit-remaining'))

/** A staging server with keys made before it starts: `limits` names each key's rpm. */
async function staging(limits: Record<string, number>, args: string[] = []): Promise<{ server: Server; keys: Record<string, string> }> {
  const dataFile = join(tempDir(), 'staging.db')
  const keys: Record<string, string> = {}
  for (const [name, rpm] of Object.entries(limits))
    keys[name] = createKeyWithCli(dataFile, ['--env', 'staging', '--plan', 'enterprise', '--rpm', String(rpm), '--rpd', '1000'])
  const server = await startServer({ dataFile, args: ['--env', 'staging', ...args] })
  return { server, keys }
}

/**
 * Ten keys send 1,000 made-up Idempotency-Keys each (forced answers spend no token) while a victim
 * key's fail=1 try waits for its retry: the retry must be counted as the second, and get the real answer.
 * Every flood answer is a 503: forced, or refused as one too many tries counted (without Preference-Applied).
 */
async function tenFloodsSpareAVictim(args: string[], refusedTries: number): Promise<void> {
  const floods = Object.fromEntries(Array.from({ length: 10 }, (_, i) => [`flood${i}`, 100]))
  const { server, keys } = await staging({ victim: 100, ...floods }, args)
  const send = (key: string, idempotencyKey: string, fail = 100) =>
    fetch(`${server.base}/pets`, { headers: prefer(key, `fail=${fail}, code=503`, { 'idempotency-key': idempotencyKey }) })
  expect((await send(keys.victim!, 'victim', 1)).status).toBe(503)
  const statuses = new Map<number, number>()
  const refused: Response[] = []
  await Promise.all(
    Array.from({ length: 10 }, async (_, i) => {
      const key = keys[`flood${i}`]!
      for (let n = 0; n < 1_000; n += 4) {
        const answers = await Promise.all([0, 1, 2, 3].map((j) => send(key, `flood-${n + j}`)))
        for (const answer of answers) {
          statuses.set(answer.status, (statuses.get(answer.status) ?? 0) + 1)
          if (!answer.headers.has('preference-applied')) refused.push(answer)
        }
      }
    }),
  )
  expect(statuses.get(503)).toBe(10_000)
  // In process, 10,000 counts are held in all: the one past them is refused, not counted over another's.
  // With Redis, a count Redis answers too late on a loaded host is the limiter's own 503 (docs/scenarios.md).
  const messages = await Promise.all(refused.map(async (answer) => ((await answer.json()) as { message: string }).message))
  const tooMany = refused.filter((_, i) => messages[i]!.startsWith('Too many tries (Prefer: fail) are being counted at once'))
  expect(tooMany.length).toBe(refusedTries)
  for (const answer of tooMany) expect(Number(answer.headers.get('retry-after'))).toBeGreaterThan(3_500)
  const others = messages.filter((message) => !message.startsWith('Too many tries'))
  expect(others.filter((message) => message !== LIMITER_DOWN.message)).toEqual([])
  if (refusedTries > 0) expect(others).toEqual([])
  const retry = await send(keys.victim!, 'victim', 1)
  expect(`${retry.status} ${retry.headers.get('preference-applied')}`).toBe('200 fail=1')
}

/**
 * A key that has spent its minute, then one that is banned: whatever its Prefer (a forced answer, a bad
 * value, a fail under an Idempotency-Key), the limiter's refusal comes first, as for any request.
 */
async function refusedKeysGetNoScenario(args: string[]): Promise<void> {
  // Two a minute, banned at the second refusal sent before the wait the first one named.
  const { server, keys } = await staging({ key: 2 }, ['--ban-after', '1', ...args])
  const get = (value?: string, extra: Record<string, string> = {}) =>
    fetch(`${server.base}/pets/1`, { headers: value === undefined ? auth(keys.key!) : prefer(keys.key!, value, extra) })
  // A forced answer while the key has tokens spends none.
  expect(remaining(await get('code=500'))).toBe(2)
  expect((await get()).status).toBe(404)
  expect((await get()).status).toBe(404)
  const answer = async (value: string, extra: Record<string, string> = {}) => {
    const response = await get(value, extra)
    const body = (await response.json()) as { code: string }
    return `${value} → ${response.status} ${body.code} ${response.headers.get('preference-applied')}`
  }
  // Spent: refused as any request is; the first refusal names the wait, and the second one sent before it
  // starts the ban (--ban-after 1), which that answer already says.
  expect(await answer('code=404')).toBe('code=404 → 429 rate_limited null')
  expect(await answer('code=abc')).toBe('code=abc → 429 rate_limited null')
  for (const value of ['code=404', 'code=500', 'code=503', 'code=abc', 'delay=-1', 'fail=1; code=503', 'code=404, delay=10'])
    expect(await answer(value, { 'idempotency-key': 'try-1' })).toBe(`${value} → 429 key_banned null`)
  expect(await answer('nonsense;;;')).toBe('nonsense;;; → 429 key_banned null')
}

describe('scenarios: on in staging, off in production, and said so at startup', () => {
  test('the defaults, the flag and the variable', async () => {
    const cases: [string[], Record<string, string>, 'on' | 'off'][] = [
      [['--env', 'staging'], {}, 'on'],
      [[], {}, 'off'],
      [['--env', 'staging', '--scenarios', 'off'], {}, 'off'],
      [[], { PETSTORE_SCENARIOS: 'on' }, 'on'],
      [['--scenarios', 'off'], { PETSTORE_SCENARIOS: 'on' }, 'off'],
    ]
    for (const [args, env, mode] of cases) {
      const server = await spawnServe(['--port', '0', '--host', '127.0.0.1', '--data', join(tempDir(), 'p.db'), ...args], { env })
      expect(server.stderr()).toMatch(mode === 'on' ? /, scenarios on \(Prefer: code, delay, fail\)[,\n]/ : /, scenarios off[,\n]/)
      const answer = await fetch(`${server.base}/pets`, { headers: prefer(server.bootstrapKey!, 'code=429') })
      expect(answer.status).toBe(mode === 'on' ? 429 : 200)
      expect(await server.stop()).toBe(0)
    }
  })

  test('a bad value for --scenarios or PETSTORE_SCENARIOS is refused by name', async () => {
    const flag = await serveExpectingFailure(['--port', '0', '--scenarios', 'yes', '--data', join(tempDir(), 'x.db')])
    expect(flag.code).toBe(2)
    expect(flag.stderr).toContain('--scenarios must be on or off, not "yes"')
    const variable = await serveExpectingFailure(['--port', '0', '--data', join(tempDir(), 'x.db')], { env: { PETSTORE_SCENARIOS: '1' } })
    expect(variable.code).toBe(2)
    expect(variable.stderr).toContain('PETSTORE_SCENARIOS must be on or off, not "1"')
  })
})

describe('forced answers look like real ones and cost nothing', () => {
  test('code=429: as a real 429 from a spent key, header by header; no token taken, no ban started', async () => {
    // --ban-after 1: a real 429 and two more before its wait would ban; many forced ones must not.
    const { server, keys } = await staging({ tiny: 1, other: 1, counted: 10 }, ['--ban-after', '1'])
    expect((await fetch(`${server.base}/pets`, { headers: auth(keys.tiny!) })).status).toBe(200)
    const real = await fetch(`${server.base}/pets`, { headers: auth(keys.tiny!) })
    const forced = await fetch(`${server.base}/pets`, { headers: prefer(keys.other!, 'code=429') })
    expect(real.status).toBe(429)
    expect(forced.status).toBe(429)
    // Both say a full minute (one token a minute): Reset may fall a second apart if the clock ticked between.
    expectSameHeaders(forced, real, 'code=429', ['x-ratelimit-reset'])
    expect(Math.abs(Number(forced.headers.get('x-ratelimit-reset')) - Number(real.headers.get('x-ratelimit-reset')))).toBeLessThanOrEqual(1)
    expect(await forced.json()).toEqual(await real.json())

    for (let i = 0; i < 5; i++) {
      const again = await fetch(`${server.base}/pets`, { headers: prefer(keys.counted!, 'code=429') })
      expect(again.status).toBe(429)
      expect(again.headers.get('x-ratelimit-remaining')).toBe('0')
    }
    const next = await fetch(`${server.base}/pets`, { headers: auth(keys.counted!) })
    expect(next.status).toBe(200)
    expect(remaining(next)).toBe(9)
    // The key whose forced 429 came first still has its one token.
    expect((await fetch(`${server.base}/pets`, { headers: auth(keys.other!) })).status).toBe(200)
  })

  test('a spent or banned key gets its 429 whatever its Prefer: no forced answer, no 400 about Prefer (in process)', async () => {
    await refusedKeysGetNoScenario([])
  })

  test('code=404 on getPet: as a real 404 of a missing pet, with the rate-limit fields as they stand', async () => {
    // 10 a minute: a token takes 6 s to come back, so counts below are not blurred by refill.
    const { server, keys } = await staging({ key: 10 })
    const created = await postPet(server.base, keys.key!, { name: 'Rex', categoryId: 1 })
    const { id } = (await created.json()) as { id: number }
    const real = await fetch(`${server.base}/pets/999999`, { headers: auth(keys.key!) })
    const forced = await fetch(`${server.base}/pets/${id}`, { headers: prefer(keys.key!, 'code=404') })
    expect(real.status).toBe(404)
    expect(forced.status).toBe(404)
    expectSameHeaders(forced, real, 'code=404', ['x-ratelimit-reset', 'ratelimit'])
    expect(await forced.json()).toEqual({ code: 'not_found', message: `No pet with id ${id}.`, status: 404 })
    expect(await real.json()).toEqual({ code: 'not_found', message: 'No pet with id 999999.', status: 404 })
    // The real 404 took the second token; the forced one took none, so the next real request takes the third.
    expect(remaining(real)).toBe(8)
    expect(remaining(forced)).toBe(8)
    expect(remaining(await fetch(`${server.base}/pets/${id}`, { headers: auth(keys.key!) }))).toBe(7)
  })

  test("code=500: the error handler's 500 (a real one cannot be made on purpose), with a real error's headers", async () => {
    const { server, keys } = await staging({ key: 10 })
    const real = await fetch(`${server.base}/pets?limit=0`, { headers: auth(keys.key!) })
    const forced = await fetch(`${server.base}/pets`, { headers: prefer(keys.key!, 'code=500') })
    expect(real.status).toBe(400)
    expect(forced.status).toBe(500)
    expectSameHeaders(forced, real, 'code=500', ['x-ratelimit-reset', 'ratelimit', 'x-ratelimit-remaining'])
    expect(await forced.text()).toBe(internalError().body)
    expect(remaining(forced)).toBe(remaining(real))
    expect(server.stderr()).not.toContain('internal error')
  })

  test('a code the operation does not document, or a bad value, is a 400 naming the preference; no token spent', async () => {
    const { server, keys } = await staging({ key: 100 })
    const cases: [string, string, string, Record<string, string>?][] = [
      ['/pets', 'code=abc', 'Prefer code: must be one of 429, 500, 503 for listPets, not "abc"'],
      ['/pets', 'code=404', 'Prefer code: must be one of 429, 500, 503 for listPets, not "404"'],
      ['/store/orders', 'code=500', 'Prefer code: must be one of 429, 503 for listOrders, not "500"'],
      ['/pets', 'code', 'Prefer code: must be one of 429, 500, 503 for listPets, not ""'],
      ['/pets', 'delay=-1', 'Prefer delay: must be an integer from 0 to 10000 (milliseconds), not "-1"'],
      ['/pets', 'delay=20000', 'Prefer delay: must be an integer from 0 to 10000 (milliseconds), not "20000"'],
      ['/pets', 'fail=2; code=503', 'Prefer fail: needs an Idempotency-Key header, under which the tries are counted'],
      [
        '/pets',
        'fail=2; code=503, code=429',
        'Prefer code: differs from the code parameter of fail; give one of them',
        { 'idempotency-key': 'k1' },
      ],
      ['/pets', 'code=429 x', 'Prefer: is not a list of preferences as RFC 7240 writes them (at character 10)'],
    ]
    for (const [path, value, message, extra] of cases) {
      const answer = await fetch(`${server.base}${path}`, { headers: prefer(keys.key!, value, extra) })
      expect(`${value} → ${answer.status}`).toBe(`${value} → 400`)
      expect(await answer.json()).toEqual({ code: 'invalid_request', message, status: 400 })
      expect(answer.headers.get('x-ratelimit-remaining')).toBe('100')
      expect(answer.headers.has('preference-applied')).toBe(false)
    }
    // Unknown preferences are ignored, known ones read in any case, among others, with parameters and quotes.
    const ignored = await fetch(`${server.base}/pets`, { headers: prefer(keys.key!, 'return=minimal, respond-async; x="a,b", wait=5') })
    expect(ignored.status).toBe(200)
    expect(ignored.headers.has('preference-applied')).toBe(false)
    const mixed = await fetch(`${server.base}/pets`, { headers: prefer(keys.key!, 'return=minimal, CODE="429"; why=testing') })
    expect(mixed.status).toBe(429)
    expect(mixed.headers.get('preference-applied')).toBe('code=429')
  })

  test('without a valid key no scenario applies: the gate answers 401 first', async () => {
    const { server, keys } = await staging({ key: 100 })
    const none = await fetch(`${server.base}/pets`, { headers: { prefer: 'code=429' } })
    expect(none.status).toBe(401)
    expect(none.headers.has('preference-applied')).toBe(false)
    const wrong = await fetch(`${server.base}/pets`, { headers: prefer('psk_not-a-key', 'code=503, delay=3000') })
    expect(wrong.status).toBe(401)
    const bad = await fetch(`${server.base}/pets`, { headers: { prefer: 'code=abc' } })
    expect(bad.status).toBe(401)
    expect(keys.key).toBeDefined()
  })
})

describe('fail=N with an Idempotency-Key', () => {
  test('fail=2; code=503 gives 503, 503, 201, then the replay; one pet is made', async () => {
    const { server, keys } = await staging({ key: 100 })
    const statuses: number[] = []
    const applied: (string | null)[] = []
    for (let i = 0; i < 4; i++) {
      const answer = await postPet(
        server.base,
        keys.key!,
        { name: 'Once', categoryId: 3 },
        { prefer: 'fail=2; code=503', 'idempotency-key': 'create-once' },
      )
      statuses.push(answer.status)
      applied.push(answer.headers.get('preference-applied'))
      if (i === 3) expect(answer.headers.get('idempotent-replayed')).toBe('true')
    }
    expect(statuses).toEqual([503, 503, 201, 201])
    expect(applied).toEqual(['fail=2, code=503', 'fail=2, code=503', 'fail=2', 'fail=2'])
    expect((await listAll(server.base, keys.key!)).map((pet) => pet.name)).toEqual(['Once'])
  })

  test('the Prism-like form fail=1, code=429 reads alike, and tries are counted per Idempotency-Key', async () => {
    const { server, keys } = await staging({ key: 100 })
    const send = (idempotencyKey: string) =>
      fetch(`${server.base}/pets`, { headers: prefer(keys.key!, 'fail=1, code=429', { 'idempotency-key': idempotencyKey }) })
    expect((await send('a')).status).toBe(429)
    expect((await send('b')).status).toBe(429)
    expect((await send('a')).status).toBe(200)
    expect((await send('b')).status).toBe(200)
  })

  test("another key's flood of Idempotency-Keys does not reset a key's count of tries", async () => {
    const { server, keys } = await staging({ mine: 100, flood: 100 })
    const send = (key: string, idempotencyKey: string) =>
      fetch(`${server.base}/pets`, { headers: prefer(key, 'fail=2, code=503', { 'idempotency-key': idempotencyKey }) }).then(
        (r) => r.status,
      )
    expect(await send(keys.mine!, 'mine')).toBe(503)
    // Forced answers cost no token, so a key may send as many as it likes, each under a new id.
    let next = 0
    const flood = async () => {
      while (next < 10_000) expect(await send(keys.flood!, `flood-${next++}`)).toBe(503)
    }
    await Promise.all(Array.from({ length: 16 }, flood))
    expect([await send(keys.mine!, 'mine'), await send(keys.mine!, 'mine')]).toEqual([503, 200])
  })

  test("ten keys' floods of Idempotency-Keys leave another key's count of tries alone (in process)", async () => {
    await tenFloodsSpareAVictim([], 1)
  })

  test('a forced 503 is the 503 of a limiter that does not answer, as a real one from a stopped Redis', async () => {
    // The comparison with a real one is in the Redis suite below; here, its shape without Redis.
    const { server, keys } = await staging({ key: 100 })
    const forced = await fetch(`${server.base}/pets`, { headers: prefer(keys.key!, 'code=503') })
    expect(forced.status).toBe(503)
    expect(forced.headers.get('retry-after')).toBe('1')
    expect(forced.headers.has('x-ratelimit-remaining')).toBe(false)
  })
})

describe('delay=MS', () => {
  test('the answer comes no earlier than asked, the normal one with its token, or the forced one without', async () => {
    const { server, keys } = await staging({ key: 10 })
    let started = performance.now()
    const slow = await fetch(`${server.base}/pets`, { headers: prefer(keys.key!, 'delay=800') })
    expect(performance.now() - started).toBeGreaterThanOrEqual(800)
    expect(slow.status).toBe(200)
    expect(await slow.json()).toEqual([])
    expect(slow.headers.get('preference-applied')).toBe('delay=800')
    expect(remaining(slow)).toBe(9)
    started = performance.now()
    const slowFailure = await fetch(`${server.base}/pets`, { headers: prefer(keys.key!, 'code=503, delay=500') })
    expect(performance.now() - started).toBeGreaterThanOrEqual(500)
    expect(slowFailure.status).toBe(503)
    expect(slowFailure.headers.get('preference-applied')).toBe('delay=500, code=503')
    expect(remaining(await fetch(`${server.base}/pets`, { headers: auth(keys.key!) }))).toBe(8)
  })

  test('one key may have 100 delayed answers waiting at once; one more is a 503 at once', async () => {
    const { server, keys } = await staging({ key: 10 })
    const send = (value: string) => fetch(`${server.base}/pets`, { headers: prefer(keys.key!, value) })
    const waiting = Array.from({ length: 100 }, () => send('code=429, delay=10000'))
    // Once all 100 wait, a probe is refused without waiting; forced probes spend nothing meanwhile.
    let refused: Response | undefined
    await eventually(async () => {
      const probe = await send('code=429, delay=1')
      if (probe.status === 503) refused = probe
      return refused !== undefined
    }, 9_000)
    expect(await refused!.json()).toMatchObject({ code: 'unavailable', status: 503 })
    expect(refused!.headers.get('retry-after')).toBe('1')
    expect((await Promise.all(waiting)).every((answer) => answer.status === 429)).toBe(true)
    expect((await send('code=429, delay=1')).status).toBe(429)
  })

  test('a client that goes during the delay costs nothing: no pet, no token, a 499 in the log', async () => {
    const { server, keys } = await staging({ key: 100 })
    const body = JSON.stringify({ name: 'Never', categoryId: 1 })
    const request =
      `POST /v1/pets HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\nAuthorization: Bearer ${keys.key}\r\nPrefer: delay=5000\r\n` +
      `X-Request-Id: went-away\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`
    // The whole request is handed to the kernel, then the client goes, well within the delay.
    const socket = connect(server.port, '127.0.0.1')
    await new Promise<void>((resolve, reject) => {
      socket.once('error', reject)
      socket.once('connect', () => socket.write(request, () => resolve()))
    })
    const wentAt = performance.now()
    socket.destroy()
    await eventually(() => /"requestId":"went-away"[^\n]*"status":499/.test(server.stdout()), 10_000)
    // Logged when it went, not when the delay would have ended.
    expect(performance.now() - wentAt).toBeLessThan(4_000)
    const next = await fetch(`${server.base}/pets`, { headers: auth(keys.key!) })
    expect(await next.json()).toEqual([])
    expect(remaining(next)).toBe(99)
  })
})

describe('the OpenAPI document and the docs page', () => {
  type Operation = {
    operationId: string
    parameters?: { name: string; in: string; description: string; example?: unknown; schema: { enum?: string[]; default?: unknown } }[]
  }
  const operations = async (server: { origin: string }): Promise<Operation[]> => {
    const document = (await (await fetch(`${server.origin}/openapi.json`)).json()) as { paths: Record<string, Record<string, Operation>> }
    return Object.values(document.paths).flatMap((item) => Object.values(item))
  }
  const preferOf = (operation: Operation) => operation.parameters?.find((parameter) => parameter.name === 'Prefer')

  test('with scenarios on, every operation describes Prefer with its own scenarios as examples, none sent by default', async () => {
    const { server } = await staging({ key: 100 })
    const all = await operations(server)
    expect(all.map((operation) => operation.operationId).sort()).toEqual(['createPet', 'getPet', 'listOrders', 'listPets'])
    // Examples in the description: any text is a Prefer (unknown preferences are ignored), so no enum.
    const examples = (operation: Operation) =>
      [.../Examples: (.*)$/.exec(preferOf(operation)?.description ?? '')![1]!.matchAll(/`([^`]+)`/g)].map((match) => match[1])
    const choices = Object.fromEntries(all.map((operation) => [operation.operationId, examples(operation)]))
    expect(choices).toEqual({
      listPets: ['code=429', 'code=500', 'code=503', 'delay=2000', 'code=503, delay=2000'],
      createPet: ['code=429', 'code=500', 'code=503', 'delay=2000', 'code=503, delay=2000', 'fail=2; code=503'],
      getPet: ['code=404', 'code=429', 'code=500', 'code=503', 'delay=2000', 'code=503, delay=2000'],
      listOrders: ['code=429', 'code=503', 'delay=2000', 'code=503, delay=2000'],
    })
    for (const operation of all) {
      const parameter = preferOf(operation)!
      expect(parameter.in).toBe('header')
      // Swagger UI sends an example or a default as the value: Try it out would force an answer.
      expect(parameter.example).toBeUndefined()
      expect(parameter.schema).toEqual({ type: 'string' } as never)
    }
  })

  test('with scenarios off (production), Prefer is not described and changes nothing', async () => {
    const server = await startServer()
    const key = server.bootstrapKey!
    expect(server.stderr()).toContain(', scenarios off')
    for (const operation of await operations(server)) expect(preferOf(operation)).toBeUndefined()
    for (const value of ['code=429', 'code=abc', 'delay=-1', 'fail=2; code=503']) {
      const answer = await fetch(`${server.base}/pets`, { headers: prefer(key, value) })
      expect(`${value} → ${answer.status}`).toBe(`${value} → 200`)
      expect(answer.headers.has('preference-applied')).toBe(false)
    }
    const started = performance.now()
    expect((await fetch(`${server.base}/pets`, { headers: prefer(key, 'delay=3000') })).status).toBe(200)
    expect(performance.now() - started).toBeLessThan(3_000)
  })
})

describeWithEngines(['redis-server'], 'scenarios with the rate limits in Redis', () => {
  let redis: RedisServer
  afterAll(async () => {
    await redis?.destroy()
  })

  test('a forced 503 is, header by header, the 503 of a real Redis outage; forced answers read the shared buckets without taking', async () => {
    redis = await startRedis()
    const { server, keys } = await staging({ key: 10 }, ['--redis-url', redis.url])
    expect(remaining(await fetch(`${server.base}/pets`, { headers: auth(keys.key!) }))).toBe(9)
    const forced404 = await fetch(`${server.base}/pets/1`, { headers: prefer(keys.key!, 'code=404') })
    expect(forced404.status).toBe(404)
    expect(remaining(forced404)).toBe(9)
    expect((await fetch(`${server.base}/pets`, { headers: prefer(keys.key!, 'code=429') })).status).toBe(429)
    expect(remaining(await fetch(`${server.base}/pets`, { headers: auth(keys.key!) }))).toBe(8)

    const forced = await fetch(`${server.base}/pets`, { headers: prefer(keys.key!, 'code=503') })
    await redis.stop()
    const real = await fetch(`${server.base}/pets`, { headers: auth(keys.key!) })
    expect(real.status).toBe(503)
    expect(forced.status).toBe(503)
    expectSameHeaders(forced, real, 'code=503')
    expect(await forced.json()).toEqual(await real.json())
  })

  test('a spent or banned key gets its 429 whatever its Prefer: no forced answer, no 400 about Prefer (in Redis)', async () => {
    const own = await startRedis()
    try {
      await refusedKeysGetNoScenario(['--redis-url', own.url])
    } finally {
      await own.destroy()
    }
  })

  test('a try Redis counts too late is the 503 of a limiter that does not answer, never the real create', async () => {
    const own = await startRedis()
    const relay = startRelay(own.port)
    try {
      const { server, keys } = await staging({ key: 100 }, ['--redis-url', `redis://127.0.0.1:${relay.port}`])
      // The count of tries (the only integer reply) is held until the server sends another script call: a
      // server that went on to the real create would send one (the gate's take), and then both answers
      // come, the take's in time. So the count comes after the server gave up on it however slow the host,
      // and a server that went on would find Redis answering again.
      let late = 0
      relay.answerDelayMs = (chunk) => (chunk[0] === 0x3a /* : */ ? (late++, Infinity) : 0)
      relay.sent = (chunk) => {
        if (late > 0 && new TextDecoder().decode(chunk).includes('EVALSHA')) relay.release()
      }
      const answer = await postPet(
        server.base,
        keys.key!,
        { name: 'Never', categoryId: 1 },
        { prefer: 'fail=5; code=503', 'idempotency-key': 'late-count' },
      )
      relay.answerDelayMs = () => 0
      relay.release()
      console.log(
        `a fail=5 try whose count came ${late} time(s) late: ${answer.status}, Preference-Applied ${answer.headers.get('preference-applied')}`,
      )
      expect(late).toBe(1)
      expect(answer.status).toBe(503)
      expect(answer.headers.get('retry-after')).toBe('1')
      expect(answer.headers.has('preference-applied')).toBe(false)
      expect(await listAll(server.base, keys.key!)).toEqual([])
    } finally {
      relay.close()
      await own.destroy()
    }
  })

  test("ten keys' floods of Idempotency-Keys leave another key's count of tries alone (in Redis)", async () => {
    const own = await startRedis()
    try {
      await tenFloodsSpareAVictim(['--redis-url', own.url], 0)
    } finally {
      await own.destroy()
    }
  })
})

describeWithEngines(['postgresql', 'redis-server'], 'scenarios on several instances (PostgreSQL and Redis)', () => {
  const cluster = postgresForSuite()
  const redis = redisForSuite()

  test('fail=2 counts tries in Redis, so through two instances it is still 503, 503, 201, and one pet', async () => {
    const databaseUrl = await cluster.createDatabase('scenarios')
    const created = cli(['keys', 'create', '--plan', 'pro', '--database-url', databaseUrl])
    expect(created.code).toBe(0)
    const key = created.stdout.trim().split('\n').at(-1)!
    const args = ['--env', 'staging', '--redis-url', redis.url]
    const instances = [await startServer({ databaseUrl, args }), await startServer({ databaseUrl, args })]
    const statuses: number[] = []
    for (let i = 0; i < 4; i++) {
      const answer = await postPet(
        instances[i % 2]!.base,
        key,
        { name: 'Shared', categoryId: 1 },
        { prefer: 'fail=2; code=503', 'idempotency-key': 'shared-1' },
      )
      statuses.push(answer.status)
    }
    expect(statuses).toEqual([503, 503, 201, 201])
    expect((await listAll(instances[0]!.base, key)).map((pet) => pet.name)).toEqual(['Shared'])
    for (const instance of instances) expect(await instance.stop()).toBe(0)
  })
})
