/**
 * Differential test of the gate against the compiled binary: odd `Host` values and path shapes, sent
 * over raw sockets exactly as written, with no key, a wrong key or a revoked one. Whatever the routers
 * make of them, no request may reach an API handler without a valid key: every answer is the Host 400,
 * a 401 or 429 from the gate, a 404/405 for a path outside the API or an empty CORS preflight 204;
 * never another 2xx, never a 5xx, never a pet created.
 */
import { describe, expect, test } from 'bun:test'
import { connect } from 'node:net'
import { cli, eventually, startServer, type Server } from '../support/binary'
import { listAll, parseRawResponse, type RawResponse } from '../process/helpers'

const HOSTS = [
  null, // no Host header at all
  '',
  '@',
  'a@b',
  'a\\b',
  'a?b',
  'a#b',
  'a/b',
  'a b',
  'x',
  'ab',
  'abc',
  'ab:',
  ':80',
  '[::1]',
  '[::1]:1',
  '[::ffff:127.0.0.1]',
  '[zz]',
  '[::1',
  'a]b',
  'ä.example',
  'localhost:1/x',
  'LOCALHOST',
  'example.com:99999',
  'pets.example.com',
]

const PATHS = (basePath: string) => [
  `${basePath}/pets`,
  `${basePath}/pets?limit=1`,
  `${basePath}/pets/1`,
  `${basePath}/pets/1/`,
  `${basePath}/store/orders`,
  `${basePath}/nope`,
  basePath,
  `${basePath}/`,
  `${basePath}//pets`,
  `/junk${basePath}/pets`,
  `/x/..${basePath}/pets`,
  `/.${basePath}/pets`,
  `${basePath}/%70ets`,
  `${basePath.toUpperCase()}/pets`,
  `//${basePath}/pets`,
  `http://evil.example${basePath}/pets`,
]

const METHODS = ['GET', 'POST', 'DELETE', 'OPTIONS']
const PET = JSON.stringify({ name: 'Sneaky', categoryId: 1 })

/** One request over its own connection, bytes as given; the final response once the server closes. */
function exchange(port: number, head: string, body = ''): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(head + body))
    let text = ''
    socket.setEncoding('latin1')
    socket.on('data', (chunk) => (text += chunk))
    socket.on('error', reject)
    socket.on('close', () => {
      // Bun refuses some malformed requests itself, with no body and no Content-Length.
      const response = parseRawResponse(text) ?? parseRawResponse(text.replace('\r\n\r\n', '\r\nContent-Length: 0\r\n\r\n'))
      if (response) resolve(response)
      else reject(new Error(`no complete response to ${JSON.stringify(head)}: ${JSON.stringify(text)}`))
    })
  })
}

function request(method: string, target: string, host: string | null, credential: string | null): [string, string] {
  const body = method === 'POST' ? PET : ''
  const lines = [`${method} ${target} HTTP/1.1`]
  if (host !== null) lines.push(`Host: ${host}`)
  if (credential) lines.push(`Authorization: Bearer ${credential}`)
  if (method === 'OPTIONS') lines.push('Origin: https://app.example', 'Access-Control-Request-Method: GET')
  if (body) lines.push('Content-Type: application/json', `Content-Length: ${Buffer.byteLength(body)}`)
  lines.push('Connection: close')
  return [`${lines.join('\r\n')}\r\n\r\n`, body]
}

/** A key that was valid once: created and revoked through the CLI. */
function revokedKey(dataFile: string): string {
  const created = cli(['keys', 'create', '--plan', 'pro', '--data', dataFile])
  const id = /key (key_\S+)/.exec(created.stderr)![1]!
  expect(cli(['keys', 'revoke', id, '--data', dataFile]).code).toBe(0)
  return created.stdout.trim().split('\n').at(-1)!
}

async function sweep(server: Server, basePath: string, credentials: (string | null)[]) {
  const seen = new Map<number, number>()
  const failures: string[] = []
  for (const credential of credentials)
    for (const method of METHODS)
      for (const target of PATHS(basePath)) {
        // In parallel per path: one connection per host value.
        const answers = await Promise.all(
          HOSTS.map(async (host) => {
            const [head, body] = request(method, target, host, credential)
            return { host, response: await exchange(server.port, head, body) }
          }),
        )
        for (const { host, response } of answers) {
          seen.set(response.status, (seen.get(response.status) ?? 0) + 1)
          const what = `${method} ${target} Host=${JSON.stringify(host)} key=${credential ? 'wrong/revoked' : 'none'}`
          // A CORS preflight is answered without a key, and says nothing but the CORS headers; Bun itself
          // refuses a request with no Host with an empty 400, before any of our code runs.
          if (method === 'OPTIONS' && response.status === 204 && response.body === '') continue
          if (host === null && response.status === 400 && response.body === '') continue
          const error = JSON.parse(response.body || 'null') as { code?: string; status?: number } | null
          if (![400, 401, 404, 405, 429].includes(response.status))
            failures.push(`${what} → ${response.status} ${response.body.slice(0, 120)}`)
          else if (error?.status !== response.status || response.headers['content-type'] !== 'application/json')
            failures.push(`${what} → ${response.status} without the Error body: ${response.body.slice(0, 120)}`)
          else if ((response.status === 404 || response.status === 405) && response.headers['x-ratelimit-limit'])
            failures.push(`${what} → ${response.status} from behind the gate: an API route was reached without a key`)
        }
      }
  return { seen, failures }
}

describe('no Host or path shape reaches an API handler without a valid key', () => {
  for (const basePath of ['/v1', '/api/v2']) {
    test(`base path ${basePath}, with CORS on`, async () => {
      const server = await startServer({
        args: ['--cors-origin', 'https://app.example', ...(basePath === '/v1' ? [] : ['--base-url', `http://localhost:1${basePath}`])],
      })
      const revoked = revokedKey(server.dataFile)
      const { seen, failures } = await sweep(server, basePath, [null, 'psk_not-a-key', revoked])
      expect(failures).toEqual([])
      // The corpus exercises every refusal the invariant allows, so it is not passing vacuously.
      for (const status of [400, 401, 404, 429]) expect(seen.get(status) ?? 0).toBeGreaterThan(0)

      // Nothing was created, and the server is healthy and serving the right key.
      const pets = await listAll(`${server.origin}${basePath}`, server.bootstrapKey!)
      expect(pets).toEqual([])
      // The log hands its lines over every 50 ms: a last request's whole line shows every earlier one is in.
      await (await fetch(`${server.origin}/healthz`, { headers: { 'x-request-id': 'sweep-last' } })).arrayBuffer()
      await eventually(() => server.stdout().includes('"sweep-last"') && server.stdout().endsWith('\n'))
      const log = server
        .stdout()
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line) as { status: number })
      expect(log.filter((line) => line.status >= 500)).toEqual([])
      expect(await server.stop()).toBe(0)
    })
  }
})

describe("the runtime's own answers", () => {
  test('what Bun refuses itself ends with an empty body; what it passes on gets the Error body', async () => {
    const server = await startServer()
    const host = `Host: 127.0.0.1:${server.port}\r\n`
    const refusedByBun: [string, number][] = [
      ['GET /v1/pets HTTP/1.1\r\nConnection: close\r\n\r\n', 400], // HTTP/1.1 without Host
      [`GET /v1/pets HTTP/1.1\r\n${host}X-Big: ${'a'.repeat(70_000)}\r\nConnection: close\r\n\r\n`, 431],
      [`GET /v1/pets HTTP/1.1\r\n${host}Bad Header\r\nConnection: close\r\n\r\n`, 400],
      [`GET * HTTP/1.1\r\n${host}Connection: close\r\n\r\n`, 400],
      [`GET /v1/pets HTTP/9.9\r\n${host}Connection: close\r\n\r\n`, 505],
    ]
    for (const [head, status] of refusedByBun) {
      const response = await exchange(server.port, head)
      expect([response.status, response.body]).toEqual([status, ''])
    }
    // HTTP/1.0 may omit Host; Bun passes it on, and the server answers it with its own 400.
    const http10 = await exchange(server.port, 'GET /v1/pets HTTP/1.0\r\n\r\n')
    expect(http10.status).toBe(400)
    expect(JSON.parse(http10.body)).toEqual({
      code: 'invalid_request',
      message: expect.stringMatching(/^Host: /),
      status: 400,
    })
    // Still serving.
    expect((await fetch(`${server.origin}/healthz`)).status).toBe(200)
    expect(await server.stop()).toBe(0)
  })
})
