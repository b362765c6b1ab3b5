/**
 * Secrets in database and Redis URLs are never printed, whichever part of the URL carries them (the
 * user info, or the `password` and `sslpassword` query parameters Bun's client reads), by `serve` and by
 * every command, whether the connection works or fails (error messages may echo what they were given).
 */
import { beforeAll, expect, test } from 'bun:test'
import { cli, type CliResult, startServer } from '../support/binary'
import { describeWithEngines } from '../support/engines'
import { freePort } from '../support/ports'
import { type PostgresCluster, postgresForSuite } from '../support/postgres'
import { redisForSuite } from '../support/redis'
import { cliAsync, serveExpectingFailure } from './helpers'

const SECRETS = ['UserInfoSecret1', 'QueryPasswordSecret2', 'SslPasswordSecret3', 'RedisSecret4', 'RedisQuerySecret5']

let cluster: PostgresCluster
let closedPort: number

function expectNoSecret(result: { stdout: string; stderr: string }, what: string): void {
  const printed = result.stdout + result.stderr
  for (const secret of SECRETS) expect({ what, secret, leaked: printed.includes(secret) }).toEqual({ what, secret, leaked: false })
}

/** The cluster's database URL with a secret in each place a PostgreSQL URL can carry one. */
function postgresUrls(database: string, port = cluster.port): string[] {
  const base = `127.0.0.1:${port}/${database}`
  return [
    `postgres://postgres:${SECRETS[0]}@${base}`,
    `postgres://postgres@${base}?password=${SECRETS[1]}`,
    `postgresql://postgres@${base}?sslmode=disable&sslpassword=${SECRETS[2]}`,
  ]
}

/** Every command that opens the database, with the URL from the flag or from the variable. */
async function everyCommand(url: string): Promise<CliResult[]> {
  const env = { PETSTORE_DATABASE_URL: url }
  return Promise.all([
    cliAsync(['keys', 'create', '--plan', 'free', '--name', 'secrets'], { env }),
    cliAsync(['keys', 'list'], { env }),
    cliAsync(['keys', 'revoke', 'key_nope', '--database-url', url]),
    cliAsync(['keys', 'reset-limits', 'key_nope'], { env }),
    cliAsync(['pets', 'seed', '--count', '2'], { env }),
    cliAsync(['pets', 'reset'], { env }),
    cliAsync(['keys', 'list', '--redis-url', `redis://:${SECRETS[3]}@127.0.0.1:1`], { env }),
  ])
}

describeWithEngines(['postgresql', 'redis-server'], 'secrets in URLs', () => {
  cluster = postgresForSuite()
  const redis = redisForSuite()
  beforeAll(async () => {
    await cluster.createDatabase('secrets')
    closedPort = await freePort()
  })

  test('serve prints no secret from the database or Redis URL, at start, in requests, and at shutdown', async () => {
    const redisPort = new URL(redis.url).port
    // The third URL's sslpassword makes Bun's client ask for TLS, which the throwaway cluster lacks: it is
    // tried below, where the start fails.
    for (const [i, url] of postgresUrls('secrets').slice(0, 2).entries()) {
      // Redis has no password set; Bun's client sends the one given, which Redis refuses or ignores.
      const redisUrl =
        i === 0 ? `redis://default:${SECRETS[3]}@127.0.0.1:${redisPort}` : `redis://127.0.0.1:${redisPort}?password=${SECRETS[4]}`
      // With the console: its first operator's lines name a file made from the database URL.
      const server = await startServer({
        databaseUrl: url,
        console: true,
        args: ['--redis-url', redisUrl, '--limiter-fallback', 'local'],
      })
      expect(server.stderr()).toContain('listening on')
      await fetch(`${server.base}/pets`, { headers: { authorization: `Bearer ${server.bootstrapKey}` } })
      await server.stop()
      expectNoSecret({ stdout: server.stdout(), stderr: server.stderr() }, `serve with ${i}`)
    }
  })

  test('serve prints no secret when it cannot reach the database or Redis', async () => {
    for (const url of [...postgresUrls('secrets', closedPort), postgresUrls('secrets')[2]!]) {
      const result = await serveExpectingFailure(['--port', '0', '--database-url', url])
      expect(result.code).toBe(1)
      expectNoSecret(result, `unreachable ${url.slice(0, 12)}`)
    }
    const unreachableRedis = await serveExpectingFailure(
      ['--port', '0', '--host', '127.0.0.1', '--redis-url', `redis://:${SECRETS[3]}@127.0.0.1:${closedPort}?password=${SECRETS[4]}`],
      { env: { PETSTORE_DATABASE_URL: postgresUrls('secrets')[1]! } },
    )
    expect(unreachableRedis.listened).toBe(true)
    expectNoSecret(unreachableRedis, 'unreachable Redis')
  })

  test('every command prints no secret, with a database that answers and one that does not', async () => {
    for (const url of [...postgresUrls('secrets'), ...postgresUrls('secrets', closedPort), ...postgresUrls('missing')])
      for (const result of await everyCommand(url)) expectNoSecret(result, `${result.code} ${url.slice(0, 12)}`)
    // A malformed URL is refused without being repeated.
    const malformed = cli(['keys', 'list', '--database-url', `postgres://u:${SECRETS[0]}@[bad`])
    expect(malformed.code).toBe(2)
    expectNoSecret(malformed, 'malformed')
  })
})
