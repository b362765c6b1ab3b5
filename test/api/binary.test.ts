/**
 * A few contract checks against the compiled binary, as users run it: the operations with their
 * headers, keys created and revoked with the CLI while the server runs, the embedded docs assets,
 * the access log on stdout, and a clean exit on SIGTERM.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { statSync } from 'node:fs'
import { auth, postPet } from '../support/app'
import { BINARY, cli, createKeyWithCli, eventually, type Server, startServer } from '../support/binary'

/** A response body as loosely typed JSON (the DOM typings say unknown). */
const jsonOf = (res: Response): Promise<any> => res.json()

let server: Server
let key: string
let linkBase: string

beforeAll(async () => {
  server = await startServer()
  key = server.bootstrapKey!
  // The hint names the data file when it is not the default one, so the key lands where the server reads.
  // The binary as it was run (here by its whole path), so the hint works as printed.
  expect(server.stderr()).toContain(`make more with: ${BINARY} keys create --plan pro --name NAME --data ${server.dataFile}\n`)
  // The bootstrap secret is in a file of the owner's beside the data file, never in the log.
  const file = server.dataFile.replace(/\.db$/, '-bootstrap-key.txt')
  expect(server.stderr()).toContain(`its secret is in ${file} (readable by this user only)`)
  expect(server.stderr()).not.toContain(server.bootstrapKey!)
  expect(statSync(file).mode & 0o777).toBe(0o600)
  linkBase = `http://localhost:${server.port}/v1`
})
afterAll(async () => {
  if (server.proc.exitCode === null) await server.stop()
})

function keyIdOf(name: string): string {
  const listed = cli(['keys', 'list', '--json', '--data', server.dataFile])
  expect(listed.code).toBe(0)
  const keys = JSON.parse(listed.stdout) as { id: string; name: string }[]
  const found = keys.find((k) => k.name === name)
  if (!found) throw new Error(`no key named ${name}`)
  return found.id
}

describe('the compiled binary', () => {
  test('creates, lists and reads pets with Location, Link and deprecation fields', async () => {
    expect(key).toMatch(/^psk_/)
    const ids: number[] = []
    for (const name of ['a', 'b', 'c']) {
      const res = await postPet(server.base, key, { name, categoryId: 9007199254740991 })
      expect(res.status).toBe(201)
      const pet = await jsonOf(res)
      expect(res.headers.get('location')).toBe(`${linkBase}/pets/${pet.id}`)
      expect(pet.categoryId).toBe(9007199254740991)
      ids.push(pet.id)
    }
    const page = await fetch(`${server.base}/pets?limit=2`, { headers: auth(key) })
    expect(page.status).toBe(200)
    expect(((await jsonOf(page)) as { id: number }[]).map((p) => p.id)).toEqual(ids.slice(0, 2))
    const link = page.headers.get('link')!
    expect(link).toMatch(new RegExp(`^<${linkBase.replace(/[.]/g, '\\.')}/pets\\?limit=2&cursor=[A-Za-z0-9_-]+>; rel="next"$`))
    expect(page.headers.get('x-ratelimit-limit')).toBe('60')

    const one = await fetch(`${server.base}/pets/${ids[2]}`, { headers: auth(key) })
    expect(one.status).toBe(200)
    expect(one.headers.get('sunset')).toBe('Thu, 05 Dec 2030 00:00:00 GMT')
    expect(one.headers.get('link')).toBe(`<${linkBase}/pets>; rel="successor-version"`)
  })

  test('a key created with the CLI works, and once revoked gets 401 within a second', async () => {
    const secret = createKeyWithCli(server.dataFile, ['--plan', 'pro', '--name', 'cli-made'])
    expect(secret).toMatch(/^psk_/)
    await eventually(async () => (await fetch(`${server.base}/pets`, { headers: auth(secret) })).status === 200, 2_000)
    const limited = await fetch(`${server.base}/pets`, { headers: auth(secret) })
    expect(limited.headers.get('x-ratelimit-limit')).toBe('300')

    const revoked = cli(['keys', 'revoke', keyIdOf('cli-made'), '--data', server.dataFile])
    expect(revoked.code).toBe(0)
    const started = Date.now()
    await eventually(async () => (await fetch(`${server.base}/pets`, { headers: auth(secret) })).status === 401, 2_000)
    expect(Date.now() - started).toBeLessThan(1_000)
    const res = await fetch(`${server.base}/pets`, { headers: auth(secret) })
    expect(res.headers.get('www-authenticate')).toBe('Bearer realm="petstore", error="invalid_token"')
    // The bootstrap key is unaffected.
    expect((await fetch(`${server.base}/pets`, { headers: auth(key) })).status).toBe(200)
  })

  test('serves the docs page and its assets from inside the binary', async () => {
    const page = await fetch(`${server.origin}/docs`)
    expect(page.status).toBe(200)
    const html = await page.text()
    expect(html).not.toMatch(/https?:\/\//)
    const urls = [...html.matchAll(/(?:src|href)\s*=\s*["']([^"']+)["']/g)].map((m) => m[1]!)
    expect(urls.length).toBeGreaterThanOrEqual(2)
    for (const url of urls) {
      expect(url).toMatch(/^\/docs\//)
      const asset = await fetch(`${server.origin}${url}`)
      expect(asset.status).toBe(200)
      expect((await asset.arrayBuffer()).byteLength).toBeGreaterThan(10_000)
    }
    const openapi = await fetch(`${server.origin}/openapi.json`)
    expect(openapi.status).toBe(200)
    expect((await jsonOf(openapi)).openapi).toMatch(/^3\.1/)
  })

  test('writes one JSON access-log line per request to stdout, without the secret', async () => {
    await fetch(`${server.base}/pets`, { headers: auth(key, { 'x-request-id': 'binary-log-1' }) })
    await eventually(() => server.stdout().includes('"binary-log-1"'))
    const lines = server
      .stdout()
      .trimEnd()
      .split('\n')
      .filter((l) => l.includes('"binary-log-1"'))
    expect(lines).toHaveLength(1)
    const entry = JSON.parse(lines[0]!)
    expect(entry).toMatchObject({ requestId: 'binary-log-1', method: 'GET', path: '/v1/pets', status: 200 })
    expect(entry.keyId).toMatch(/^key_/)
    expect(server.stdout()).not.toContain(key.slice(4))
  })

  test('a request without a key is logged and limited under its socket address', async () => {
    const res = await fetch(`${server.base}/pets`, { headers: { 'x-request-id': 'binary-anon-1' } })
    expect(res.status).toBe(401)
    expect(res.headers.get('x-ratelimit-limit')).toBe('60')
    // Whole lines only: the log hands its lines over in batches, which a read may catch half way.
    const logged = () =>
      server
        .stdout()
        .split('\n')
        .find((l) => l.includes('"binary-anon-1"') && l.endsWith('}'))
    await eventually(() => logged() !== undefined)
    const line = logged()!
    expect(JSON.parse(line)).toMatchObject({ status: 401, client: '127.0.0.1' })
  })

  test('/healthz, /readyz and /metrics answer without a key', async () => {
    for (const path of ['/healthz', '/readyz', '/metrics']) expect((await fetch(`${server.origin}${path}`)).status).toBe(200)
    expect(await (await fetch(`${server.origin}/metrics`)).text()).not.toContain(key.slice(4))
  })

  test('logs a ban to stderr, naming the key id but not its secret', async () => {
    const banning = await startServer({ args: ['--ban-after', '1', '--ban-seconds', '60'] })
    const secret = banning.bootstrapKey!
    const statuses: number[] = []
    const codes: string[] = []
    for (let i = 0; i < 63; i++) {
      const res = await fetch(`${banning.base}/pets`, { headers: auth(secret) })
      statuses.push(res.status)
      codes.push(res.status === 429 ? (await jsonOf(res)).code : '')
      if (res.status === 200) await res.arrayBuffer()
    }
    expect(statuses.slice(0, 60).every((s) => s === 200)).toBe(true)
    expect(codes.slice(60)).toEqual(['rate_limited', 'rate_limited', 'key_banned'])
    await eventually(() => /banned key key_\S+/.test(banning.stderr()))
    // The ban line names only the key id; the secret is nowhere in the log.
    const banLine = banning
      .stderr()
      .split('\n')
      .find((l) => l.includes('banned'))!
    expect(banLine).toMatch(/banned key key_\S+/)
    expect(banning.stderr()).not.toContain(secret.slice(4))
    expect(await banning.stop()).toBe(0)
  })

  test("pets and the day's quota survive a restart", async () => {
    const first = await startServer()
    const secret = createKeyWithCli(first.dataFile, ['--plan', 'enterprise', '--rpm', '100', '--rpd', '5', '--name', 'restart'])
    await eventually(async () => (await fetch(`${first.base}/pets`, { headers: auth(secret) })).status === 200, 2_000)
    const created = await postPet(first.base, secret, { name: 'Survivor', categoryId: 3 })
    expect(created.status).toBe(201)
    const pet = await jsonOf(created)
    const third = await fetch(`${first.base}/pets`, { headers: auth(secret) })
    expect(third.headers.get('x-ratelimit-remaining')).toBe('2')
    expect(await first.stop('SIGTERM')).toBe(0)

    const second = await startServer({ dataFile: first.dataFile })
    try {
      const read = await fetch(`${second.base}/pets/${pet.id}`, { headers: auth(secret) })
      expect(read.status).toBe(200)
      expect(await jsonOf(read)).toEqual(pet)
      expect(read.headers.get('x-ratelimit-limit')).toBe('5')
      expect(read.headers.get('x-ratelimit-remaining')).toBe('1')
    } finally {
      expect(await second.stop()).toBe(0)
    }
  })

  test('exits 0 on SIGTERM', async () => {
    const other = await startServer()
    expect((await fetch(`${other.origin}/healthz`)).status).toBe(200)
    expect(await other.stop('SIGTERM')).toBe(0)
  })
})
