/**
 * The README's proxy snippets, tested as written (deploy/nginx-petstore.conf, deploy/Caddyfile,
 * deploy/several-instances/nginx.conf): each proxy terminates TLS in front of the binary on loopback
 * (the several-instances one is plain HTTP), passes the Host, and sets X-Forwarded-For, so the server
 * sees its clients and never warns that a trusted proxy sent none; and none of them lets the public
 * side read /metrics, which the scraper reads from the server itself. Only the public name, ports,
 * upstream addresses and certificate paths are replaced for the test. Without nginx or caddy the
 * file says so in one line and skips; with CI=true it fails instead.
 */
import { afterAll, describe, expect, test } from 'bun:test'
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Subprocess } from 'bun'
import { eventually, type Server, startServer, tempDir } from '../support/binary'
import { nginxCommand, nginxInFront } from '../support/nginx'
import { unusedPort } from './helpers'

const ROOT = join(import.meta.dir, '..', '..')
const NGINX = '/usr/sbin/nginx'
const CADDY = '/usr/bin/caddy'
const available = existsSync(NGINX) && existsSync(CADDY)
if (!available) {
  if (process.env.CI === 'true') throw new Error('nginx and caddy are missing: CI must install nginx-light and caddy')
  console.warn('proxy tests skipped: apt-get install -y nginx-light caddy')
}

const proxies: Subprocess[] = []
afterAll(async () => {
  // SIGTERM, not SIGKILL: nginx's master stops its workers on the way out.
  for (const proxy of proxies) proxy.kill('SIGTERM')
  await Promise.all(proxies.map((proxy) => proxy.exited))
})

/** Starts the binary behind a proxy that `configure` sets up; answers are read over TLS. */
async function behind(configure: (dir: string, backend: number, port: number) => string[]) {
  const server = await startServer({ args: ['--base-url', 'https://pets.example.com/v1', '--trust-proxy', 'loopback'] })
  const dir = tempDir()
  const port = await unusedPort()
  const proxy = Bun.spawn(configure(dir, server.port, port), {
    cwd: dir,
    env: { ...process.env, HOME: dir, XDG_DATA_HOME: dir, XDG_CONFIG_HOME: dir },
    stdout: 'ignore',
    stderr: 'pipe',
  })
  proxies.push(proxy)
  const origin = `https://localhost:${port}`
  const tls = { rejectUnauthorized: false }
  await eventually(async () => {
    try {
      return (await fetch(`${origin}/healthz`, { tls } as RequestInit)).status === 200
    } catch {
      return false
    }
  }, 20_000)
  const get = (path: string, headers: Record<string, string> = {}) => fetch(`${origin}${path}`, { headers, tls } as RequestInit)
  return { server, get, proxy, origin }
}

/**
 * /metrics, and what a proxy might not see as /metrics but the server would (a trailing slash, a query,
 * an escaped letter, a doubled slash, dot segments, another case), is not served on the public side;
 * the scraper on the server's machine still reads it from the server's own address. Dot segments go
 * through curl --path-as-is, as fetch resolves them before sending.
 */
async function expectMetricsKeptFromPublic(origin: string, server: Server) {
  for (const path of [
    '/metrics',
    '/metrics/',
    '/metrics?format=text',
    '/%6Detrics',
    '//metrics',
    '/METRICS',
    '/v1/../metrics',
    '/./metrics',
  ]) {
    const curl = Bun.spawnSync(['curl', '-sk', '--path-as-is', '-w', '\n%{http_code}', `${origin}${path}`], {
      stdout: 'pipe',
      stderr: 'pipe',
    })
    const output = curl.stdout.toString()
    expect({ path, status: output.slice(output.lastIndexOf('\n') + 1) }).toEqual({ path, status: '404' })
    expect(output).not.toContain('petstore_')
  }
  const scraped = await fetch(`${server.origin}/metrics`)
  expect(scraped.status).toBe(200)
  expect(await scraped.text()).toContain('petstore_requests_total')
}

async function expectServedThrough(target: Awaited<ReturnType<typeof behind>>) {
  const { server, get, origin } = target
  await expectMetricsKeptFromPublic(origin, server)
  const key = server.bootstrapKey!
  const listed = await get('/v1/pets', { authorization: `Bearer ${key}` })
  expect(listed.status).toBe(200)
  const keyless = await get('/v1/pets')
  expect(keyless.status).toBe(401)
  expect((await get('/v1/pets/1', { authorization: `Bearer ${key}` })).headers.get('link')).toBe(
    '<https://pets.example.com/v1/pets>; rel="successor-version"',
  )
  // The proxy set X-Forwarded-For: no warning, and the keyless client is logged by its address.
  // Whole lines only: the log hands its lines over in batches, which a read may catch half way.
  const logged = () =>
    server
      .stdout()
      .split('\n')
      .find((l) => l.includes('"status":401') && l.endsWith('}'))
  await eventually(() => logged() !== undefined)
  expect(server.stderr()).not.toContain('carried no X-Forwarded-For')
  const line = logged()!
  // The test's client reaches the proxy on loopback (IPv4 or IPv6, as the proxy listens).
  expect(['127.0.0.1', '::1']).toContain(JSON.parse(line).client)
  expect(await server.stop()).toBe(0)
}

describe.skipIf(!available)("behind the README's proxies", () => {
  test('nginx (deploy/nginx-petstore.conf): TLS in front, Host and X-Forwarded-For set', async () => {
    const target = await behind((dir, backend, port) => {
      Bun.spawnSync(
        [
          'openssl',
          'req',
          '-x509',
          '-newkey',
          'rsa:2048',
          '-nodes',
          '-days',
          '1',
          '-subj',
          '/CN=localhost',
          '-keyout',
          join(dir, 'key.pem'),
          '-out',
          join(dir, 'cert.pem'),
        ],
        { stdout: 'ignore', stderr: 'ignore' },
      )
      const snippet = readFileSync(join(ROOT, 'deploy', 'nginx-petstore.conf'), 'utf8')
        .replace('listen 443 ssl;', `listen 127.0.0.1:${port} ssl;`)
        .replace('/etc/ssl/certs/pets.example.com.pem', join(dir, 'cert.pem'))
        .replace('/etc/ssl/private/pets.example.com.key', join(dir, 'key.pem'))
        .replaceAll('127.0.0.1:8080', `127.0.0.1:${backend}`)
      return nginxCommand(dir, snippet)
    })
    await expectServedThrough(target)
  }, 60_000)

  test('Caddy (deploy/Caddyfile): TLS in front, X-Forwarded-For set by itself', async () => {
    const target = await behind((dir, backend, port) => {
      const site = readFileSync(join(ROOT, 'deploy', 'Caddyfile'), 'utf8')
        .replace('pets.example.com {', `https://localhost:${port} {\n\ttls internal`)
        .replaceAll('127.0.0.1:8080', `127.0.0.1:${backend}`)
      // The test's own settings: no admin port, no attempt to install the local CA into the system.
      writeFileSync(join(dir, 'Caddyfile'), `{\n\tadmin off\n\tskip_install_trust\n}\n${site}`)
      return [CADDY, 'run', '--config', join(dir, 'Caddyfile'), '--adapter', 'caddyfile']
    })
    await expectServedThrough(target)
  }, 60_000)

  test('nginx for several instances (deploy/several-instances/nginx.conf): /metrics only from each instance', async () => {
    const servers = [await startServer(), await startServer()]
    const { origin, proc } = await nginxInFront([servers[0]!.port, servers[1]!.port])
    proxies.push(proc)
    for (const server of servers) await expectMetricsKeptFromPublic(origin, server)
    for (const server of servers) expect(await server.stop()).toBe(0)
  }, 60_000)
})
