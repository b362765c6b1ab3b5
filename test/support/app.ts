/**
 * An in-process server for behaviour tests that need a fake clock or many fresh stores: a new app on a
 * `:memory:` database per call, listening on a free port, spoken to over real HTTP.
 */
import { createApp, type PetstoreApp } from '../../src/app'
import { bindPort, type ConfigInput, resolveConfig } from '../../src/config'
import { makeKey } from '../../src/modules/keys/service'
import { openSqliteStorage, type SqliteStorage } from '../../src/storage/sqlite'

export interface TestApp {
  petstore: PetstoreApp
  storage: SqliteStorage
  base: string
  origin: string
  clock: { now: number; advance(ms: number): void }
  /** Creates a key directly in storage and returns its secret. */
  key(plan?: string, limits?: { rpm: number; rpd: number }): string
  logLines: string[]
  stop(): void
}

const open = new Set<TestApp>()
/** Stops every in-process app a test left running; the preload runs it after the suite. */
export function cleanupApps(): void {
  for (const app of open) app.stop()
}

export function startApp(input: ConfigInput = {}, options: { realClock?: boolean } = {}): TestApp {
  const config = resolveConfig({ port: '0', host: '127.0.0.1', ...input }, {})
  const storage = openSqliteStorage(':memory:')
  const clock = {
    now: Date.UTC(2026, 0, 1),
    advance(ms: number) {
      clock.now += ms
    },
  }
  const logLines: string[] = []
  const petstore = createApp(config, {
    storage,
    now: options.realClock ? Date.now : () => clock.now,
    logSink: { write: (text) => logLines.push(...text.trimEnd().split('\n')), flush: () => 0 },
    warn: () => {},
  })
  petstore.app.listen({ hostname: config.host, port: 0 })
  bindPort(config, petstore.app.server!.port!)
  const origin = `http://127.0.0.1:${config.port}`
  const testApp: TestApp = {
    petstore,
    storage,
    origin,
    base: `${origin}/v1`,
    clock,
    logLines,
    key(plan = 'free', limits) {
      const { secret, record } = makeKey({ plan, rpm: limits?.rpm, rpd: limits?.rpd }, clock.now)
      storage.keys.insert(record)
      petstore.keys.reload()
      return secret
    },
    stop() {
      open.delete(testApp)
      void petstore.stopBackground()
      void petstore.app.stop(true)
      storage.close()
    },
  }
  open.add(testApp)
  return testApp
}

export const auth = (key: string, extra: Record<string, string> = {}) => ({ authorization: `Bearer ${key}`, ...extra })

export async function postPet(base: string, key: string, body: unknown, headers: Record<string, string> = {}) {
  return fetch(`${base}/pets`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...auth(key), ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  })
}
