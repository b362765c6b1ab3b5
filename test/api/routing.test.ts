/**
 * Everything that is not a pets operation: GET /store/orders (501), unknown paths (JSON 404) and
 * known paths with other methods (405 with Allow).
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { auth, startApp, type TestApp } from '../support/app'

/** A response body as loosely typed JSON (the DOM typings say unknown). */
const jsonOf = (res: Response): Promise<any> => res.json()

let app: TestApp
let key: string

beforeAll(async () => {
  app = await startApp()
  key = await app.key('enterprise', { rpm: 100_000, rpd: 1_000_000 })
})
afterAll(() => app.stop())

async function expectError(res: Response, status: number, code: string) {
  expect(res.status).toBe(status)
  expect(res.headers.get('content-type')).toStartWith('application/json')
  expect(await jsonOf(res)).toEqual({ code, message: expect.any(String), status })
}

describe('GET /store/orders', () => {
  test('answers 501 not_implemented with a key', async () => {
    await expectError(await fetch(`${app.base}/store/orders`, { headers: auth(key) }), 501, 'not_implemented')
  })

  test('answers 401 without a key', async () => {
    const res = await fetch(`${app.base}/store/orders`)
    await expectError(res, 401, 'unauthorized')
    expect(res.headers.get('www-authenticate')).toBe('Bearer realm="petstore"')
  })

  test('answers 401 with a wrong key', async () => {
    await expectError(await fetch(`${app.base}/store/orders`, { headers: auth('psk_nope') }), 401, 'unauthorized')
  })
})

describe('unknown paths', () => {
  for (const path of ['/nothing', '/pets/1/photos', '/store', '/store/orders/1', '/petsx', '']) {
    test(`GET BASE${path || ' (the base itself)'} with a key is a JSON 404`, async () => {
      await expectError(await fetch(`${app.base}${path}`, { headers: auth(key) }), 404, 'not_found')
    })
  }

  test('GET / points to the API, its description and the docs', async () => {
    const res = await fetch(`${app.origin}/`)
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toBe('application/json')
    expect(await res.json()).toEqual({ name: 'Pet Store', version: '1.0.0', api: '/v1', docs: '/docs', openapi: '/openapi.json' })
  })

  for (const path of ['/nope', '/v2/pets', '/pets', '/V1/pets']) {
    test(`${path} outside the base is a JSON 404`, async () => {
      await expectError(await fetch(`${app.origin}${path}`), 404, 'not_found')
    })
  }

  test('a 404 message does not echo an unbounded path', async () => {
    const res = await fetch(`${app.base}/${'x'.repeat(5000)}`, { headers: auth(key) })
    expect(res.status).toBe(404)
    expect((await jsonOf(res)).message.length).toBeLessThan(1000)
  })
})

describe('known paths with another method', () => {
  const cases: [string, string, string[]][] = [
    ['DELETE', '/pets', ['GET', 'POST']],
    ['PUT', '/pets', ['GET', 'POST']],
    ['PATCH', '/pets', ['GET', 'POST']],
    ['PUT', '/pets/1', ['GET']],
    ['DELETE', '/pets/1', ['GET']],
    ['POST', '/pets/1', ['GET']],
    ['POST', '/store/orders', ['GET']],
  ]
  for (const [method, path, allowed] of cases) {
    test(`${method} ${path} is a 405 with Allow: ${allowed.join(', ')}`, async () => {
      const res = await fetch(`${app.base}${path}`, { method, headers: auth(key) })
      await expectError(res, 405, 'method_not_allowed')
      const allow = res.headers
        .get('allow')!
        .split(',')
        .map((m) => m.trim())
        .filter((m) => m !== 'HEAD' && m !== 'OPTIONS')
        .sort()
      expect(allow).toEqual(allowed)
    })
  }

  test('a 405 is a JSON Error also when the request has a body', async () => {
    const res = await fetch(`${app.base}/pets`, {
      method: 'DELETE',
      headers: { ...auth(key), 'content-type': 'application/json' },
      body: '{}',
    })
    await expectError(res, 405, 'method_not_allowed')
  })
})

describe('the Host header', () => {
  const withHost = (host: string) => fetch(`${app.base}/pets`, { headers: { ...auth(key), host } })

  test('fewer than four characters, port included (a default port is dropped), is a 400 that says what would work', async () => {
    // x:80 reaches the server as http://x/ (the default port dropped), which the router cannot read.
    for (const host of ['x', 'x:80', 'abc', 'x:1']) {
      const answer = await withHost(host)
      expect([host, answer.status]).toEqual([host, 400])
      expect(((await jsonOf(answer)) as { message: string }).message).toBe(
        'Host: a host of fewer than four characters, its port included, cannot be routed (x:80 counts as x); use a longer name or another port, such as x:8080',
      )
    }
    for (const host of ['x:8080', 'abcd', 'abc:81', 'x:10']) expect([host, (await withHost(host)).status]).toEqual([host, 200])
  })

  test('a port above 65535, or 0, is not a port: 400', async () => {
    for (const host of ['example.com:0', 'example.com:00000']) expect([host, (await withHost(host)).status]).toEqual([host, 400])
    const answer = await withHost('example.com:65536')
    expect(await jsonOf(answer)).toEqual({
      code: 'invalid_request',
      message: 'Host: is not a host name, IP address or [IPv6] literal with an optional port (1 to 65535)',
      status: 400,
    })
    expect((await withHost('example.com:65535')).status).toBe(200)
  })
})
