/**
 * An engine a suite (describe) shares, PostgreSQL or Redis: started before its first test, destroyed after
 * its last. The handle is read inside tests and hooks, where it stands for the started engine; read before,
 * it says so.
 */
import { afterAll, beforeAll } from 'bun:test'

export function forSuite<T extends { destroy(): unknown }>(name: string, start: () => Promise<T>): T {
  let started: T | undefined
  beforeAll(async () => {
    started = await start()
  })
  afterAll(() => started?.destroy())
  return new Proxy({} as T, {
    get(_, member) {
      if (!started) throw new Error(`the suite's ${name} is not started yet: use it inside a test or a hook`)
      const value = Reflect.get(started, member)
      return typeof value === 'function' ? value.bind(started) : value
    },
  })
}
