/**
 * Limiters over each store for the limiter suites: the same options, an injected clock, and a key
 * prefix of its own per Redis limiter so tests sharing one Redis never see each other's subjects.
 */
import { type Subject, subjectNamed } from '../../src/domain/subject'
import { type LimiterOptions, RateLimiter } from '../../src/limiter/limiter'
import { RedisLimiterBackend, type RedisBackendOptions } from '../../src/limiter/redis/backend'

export type AnyLimiter = RateLimiter
export type LimiterSettings = Partial<Omit<LimiterOptions, 'backend'>>

/**
 * A clock a year ahead of now, on a whole second: Redis expires keys by its own clock, so injected
 * times must not lie in the past, or a key would be gone as soon as it was written.
 */
export function futureClock() {
  const clock = { now: (Math.ceil(Date.now() / 1000) + 365 * 86_400) * 1000 }
  return { clock, start: clock.now, advance: (ms: number) => (clock.now += ms) }
}

const defaults = { banAfter: 50, banSeconds: 600, maxAddresses: 100_000 }

export function memoryLimiter(settings: LimiterSettings = {}): AnyLimiter {
  return new RateLimiter({ ...defaults, ...settings })
}

let prefixes = 0
export function uniquePrefix(): string {
  return `test${++prefixes}-${process.pid}:`
}

export function redisLimiter(url: string, settings: LimiterSettings = {}, store: Partial<RedisBackendOptions> = {}): AnyLimiter {
  const prefix = store.prefix ?? uniquePrefix()
  return new RateLimiter({
    ...defaults,
    ...settings,
    backend: (rule) => new RedisLimiterBackend(rule, { url, ...store, prefix }),
  })
}

/** The subject a kept name (`key:ID`, `ip:ADDRESS`) stands for. */
export function named(name: string): Subject {
  return subjectNamed(name)!
}
