/**
 * The console's rules that need a clock: the sign-in throttle's window passing and a session ending when
 * idle, over a real SQLite store (in memory) with the clock moved by hand; and the console's address
 * as the config resolves it.
 */
import { describe, expect, test } from 'bun:test'
import { resolveConfig, withBoundPort } from '../../src/config'
import { hashPassword, SESSION_IDLE_MS, THROTTLE_NAME_FAILURES, THROTTLE_WINDOW_MS } from '../../src/domain/operators'
import { KeyRegistry } from '../../src/modules/keys/service'
import { ConsoleService } from '../../src/modules/console/service'
import { RateLimiter } from '../../src/limiter/limiter'
import { openSqliteStorage } from '../../src/storage/sqlite'

async function consoleWithClock() {
  const storage = openSqliteStorage(':memory:')
  const clock = { now: 1_800_000_000_000 }
  const limiter = new RateLimiter({ banAfter: 5, banSeconds: 60, maxAddresses: 100 })
  const service = new ConsoleService({ storage, keys: new KeyRegistry(storage), limiter: limiter.admin, now: () => clock.now })
  storage.operators.add('eve', await hashPassword('right', null), clock.now)
  return { service, clock, storage }
}

const refusal = (promise: Promise<unknown>) =>
  promise.then(
    () => null,
    (error) => ({ status: error.status, headers: error.headers }),
  )

describe('sign-in throttle', () => {
  test('5 failures from an address within 15 minutes refuse the name to it until the oldest is 15 minutes old; another address may sign in', async () => {
    const { service, clock } = await consoleWithClock()
    const start = clock.now
    const guesser = '198.51.100.7'
    for (let i = 0; i < 5; i++) {
      expect(await refusal(service.signIn('eve', 'wrong', guesser))).toMatchObject({ status: 401 })
      clock.now += 60_000
    }
    // Four minutes after the fifth failure, the first is nine minutes old: six more to wait.
    clock.now += 4 * 60_000
    expect(await refusal(service.signIn('eve', 'right', guesser))).toEqual({ status: 429, headers: { 'retry-after': String(6 * 60) } })
    // The operator, elsewhere, is not locked out by a guesser.
    expect((await service.signIn('eve', 'right', '203.0.113.5')).operator).toBe('eve')
    clock.now = start + THROTTLE_WINDOW_MS - 1
    expect(await refusal(service.signIn('eve', 'right', guesser))).toEqual({ status: 429, headers: { 'retry-after': '1' } })
    clock.now = start + THROTTLE_WINDOW_MS
    expect((await service.signIn('eve', 'right', guesser)).operator).toBe('eve')
  })

  test(`${THROTTLE_NAME_FAILURES} failures from many addresses refuse the name to every address`, async () => {
    const { service } = await consoleWithClock()
    for (let i = 0; i < THROTTLE_NAME_FAILURES; i++)
      expect(await refusal(service.signIn('eve', 'wrong', `198.51.100.${i}`))).toMatchObject({ status: 401 })
    expect(await refusal(service.signIn('eve', 'right', '203.0.113.5'))).toMatchObject({ status: 429 })
    // Fifty argon2id checks: more than the default 5 s on a loaded two-core host.
  }, 60_000)
})

describe('sessions', () => {
  test('a session ends after SESSION_IDLE_MS without a request; each request moves its end', async () => {
    const { service, clock } = await consoleWithClock()
    const { secret } = await service.signIn('eve', 'right', '203.0.113.5')
    clock.now += SESSION_IDLE_MS - 1
    expect((await service.authenticate(secret, 'session')).operator).toBe('eve')
    clock.now += SESSION_IDLE_MS - 1
    expect((await service.authenticate(secret, 'session')).operator).toBe('eve')
    clock.now += SESSION_IDLE_MS + 1
    expect(await refusal(service.authenticate(secret, 'session'))).toMatchObject({ status: 401 })
    // Ended for good: coming back within the time does not revive it.
    clock.now -= 2
    expect(await refusal(service.authenticate(secret, 'session'))).toMatchObject({ status: 401 })
  })

  test('requests carrying the same secret at once share one read of it; once known to be none, it costs none', async () => {
    const { service, storage } = await consoleWithClock()
    const reads: string[] = []
    const credential = storage.operators.credential.bind(storage.operators)
    storage.operators.credential = (hash) => (reads.push(hash), credential(hash))
    const madeUp = 'a'.repeat(43)
    const answers = await Promise.all(Array.from({ length: 4 }, () => refusal(service.authenticate(madeUp, 'session'))))
    expect(answers).toEqual(Array(4).fill({ status: 401, headers: expect.anything() }))
    expect(reads.length).toBe(1)
    await refusal(service.authenticate(madeUp, 'session'))
    expect(reads.length).toBe(1)
  })
})

describe('console address', () => {
  test('127.0.0.1:8090 in production and :8091 in staging; a free port with --port 0; off; the variable; a bad value', () => {
    expect(resolveConfig({}, {}).consoleAddress).toEqual({ host: '127.0.0.1', port: 8090 })
    expect(resolveConfig({ env: 'staging' }, {}).consoleAddress).toEqual({ host: '127.0.0.1', port: 8091 })
    const free = resolveConfig({ port: '0' }, {})
    expect(free.consoleAddress).toEqual({ host: '127.0.0.1', port: 0 })
    expect(withBoundPort(free, 4321).consoleAddress).toEqual({ host: '127.0.0.1', port: 0 })
    expect(resolveConfig({ consoleAddress: 'off' }, {}).consoleAddress).toBeNull()
    expect(resolveConfig({}, { PETSTORE_CONSOLE_ADDRESS: '[::1]:9000' }).consoleAddress).toEqual({ host: '::1', port: 9000 })
    expect(resolveConfig({ consoleAddress: '0.0.0.0:9001' }, { PETSTORE_CONSOLE_ADDRESS: 'off' }).consoleAddress).toEqual({
      host: '0.0.0.0',
      port: 9001,
    })
    expect(() => resolveConfig({}, { PETSTORE_CONSOLE_ADDRESS: '9000' })).toThrow('PETSTORE_CONSOLE_ADDRESS must be HOST:PORT')
  })
})
