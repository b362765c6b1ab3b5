/**
 * Suites that need PostgreSQL or Redis start their own (postgres.ts, redis.ts) from Debian's packages,
 * as the proxy and browser suites use Debian's nginx and Chromium (browser.ts).
 * When a package is missing, such a suite is skipped and one line at the end of the run says which and
 * how to install what they need; under CI (CI=true) a missing engine fails the run instead, so a CI
 * machine can never pass by skipping.
 */
import { describe } from 'bun:test'
import { existsSync } from 'node:fs'
import { postgresBinaries } from './postgres'
import { redisBinary } from './redis'

/** Debian packages, by the name apt-get installs them under. */
type Engine = 'postgresql' | 'redis-server' | 'nginx-light' | 'chromium'

const available: Record<Engine, () => boolean> = {
  postgresql: () => postgresBinaries() !== null,
  'redis-server': () => redisBinary() !== null,
  'nginx-light': () => existsSync(NGINX),
  chromium: () => existsSync(CHROMIUM),
}

export const NGINX = '/usr/sbin/nginx'
export const CHROMIUM = '/usr/bin/chromium'

const skipped: string[] = []
const missingPackages = new Set<Engine>()

process.on('exit', () => {
  if (skipped.length === 0) return
  console.error(
    `petstore tests: skipped ${skipped.length} suite(s) that need ${[...missingPackages].join(' and ')} ` +
      `(${skipped.join(', ')}); install with: apt-get install -y ${[...missingPackages].join(' ')}`,
  )
})

/** `describe`, when every engine the suite needs is installed. */
export function describeWithEngines(engines: Engine[], title: string, body: () => void): void {
  const missing = engines.filter((engine) => !available[engine]())
  if (missing.length === 0) {
    describe(title, body)
    return
  }
  if (process.env.CI === 'true')
    throw new Error(`${title} needs ${missing.join(' and ')}, which CI must install (apt-get install -y ${missing.join(' ')})`)
  for (const engine of missing) missingPackages.add(engine)
  skipped.push(title)
  describe.skip(title, body)
}
