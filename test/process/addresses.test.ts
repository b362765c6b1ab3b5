/**
 * Client addresses as the binary limits and logs them: one bucket per client however its address is
 * spelled, IPv6 clients limited per /64, and a dual-stack listener that tells IPv4 and IPv6 peers apart
 * only as the socket does.
 */
import { describe, expect, test } from 'bun:test'
import { clientSubject, forwardedClient, normaliseAddress, TrustedProxies } from '../../src/http/client-address'
import { cli, eventually, type Server, startServer } from '../support/binary'
import { reasonLine } from './helpers'

/** The client of each logged API request (the contract check's own /openapi.json fetches left out). */
function loggedClients(stdout: string): string[] {
  return stdout
    .trim()
    .split('\n')
    .filter((line) => line !== '') // nothing logged yet
    .map((line) => JSON.parse(line) as { path: string; client: string })
    .filter((line) => line.path.endsWith('/pets'))
    .map((line) => line.client)
}

/** Waits for the access log (flushed every 50 ms) to hold as many API lines as expected, then compares. */
async function expectLoggedClients(server: Server, expected: string[]): Promise<void> {
  await eventually(() => loggedClients(server.stdout()).length >= expected.length)
  expect(loggedClients(server.stdout())).toEqual(expected)
}

/** The headers of a keyless request said to come from `forwarded`, or of one that says nothing. */
const from = (forwarded?: string): Record<string, string> => (forwarded === undefined ? {} : { 'x-forwarded-for': forwarded })

/** Remaining requests in the address bucket after one keyless request from `forwarded` (0 when it is refused). */
async function remainingAfter(base: string, forwarded?: string): Promise<number> {
  const response = await fetch(`${base}/pets`, { headers: from(forwarded) })
  expect([401, 429]).toContain(response.status)
  return Number(response.headers.get('x-ratelimit-remaining'))
}

/**
 * Keyless requests from `forwarded` until its bucket refuses one; how many were sent. A drained bucket
 * holds a token more each second, so however slow the host, it stays far below the 59 a new bucket has
 * after one request (a one-request difference would not survive a one-second pause).
 */
async function drain(base: string, forwarded?: string): Promise<number> {
  for (let sent = 1; sent <= 100; sent++) {
    const response = await fetch(`${base}/pets`, { headers: from(forwarded) })
    if (response.status === 429) return sent
    expect(response.status).toBe(401)
  }
  throw new Error(`100 requests from ${forwarded} and none refused`)
}

describe('address normalisation', () => {
  test('spellings of one address are one address; IPv6 subjects are /64 blocks', () => {
    expect(normaliseAddress('::ffff:198.51.100.7')).toBe('198.51.100.7')
    expect(normaliseAddress('::FFFF:c633:6407')).toBe('198.51.100.7')
    expect(normaliseAddress('2001:DB8:0:0:0:0:0:1')).toBe('2001:db8::1')
    expect(normaliseAddress('2001:0db8:0000:0001:0000:0000:0000:0001')).toBe('2001:db8:0:1::1')
    expect(normaliseAddress('fe80::1%eth0')).toBe('fe80::1')
    expect(normaliseAddress('2001:db8:0:0:1:0:0:1')).toBe('2001:db8::1:0:0:1')
    expect(normaliseAddress('::1')).toBe('::1')
    expect(normaliseAddress('127.0.0.1')).toBe('127.0.0.1')
    expect(normaliseAddress('not an address')).toBeNull()
    expect(clientSubject('2001:db8:1:2:aaaa::1').name).toBe('ip:2001:db8:1:2::/64')
    expect(clientSubject('::1').name).toBe('ip:::/64')
    expect(clientSubject('198.51.100.7').name).toBe('ip:198.51.100.7')
  })

  test('the binary limits an IPv6 /64 as one client, and a mapped IPv4 address as the IPv4 one', async () => {
    const server = await startServer({ args: ['--trust-proxy', 'loopback'] })
    // A bucket drained by one address of a /64 is the bucket of every other spelling and address in it.
    const drained = await drain(server.base, '2001:db8:1:2::1')
    expect(await remainingAfter(server.base, '2001:db8:1:2:ffff:ffff:ffff:ffff')).toBeLessThan(30)
    expect(await remainingAfter(server.base, '2001:0DB8:0001:0002:0:0:0:9')).toBeLessThan(30)
    // Another /64 is another client.
    expect(await remainingAfter(server.base, '2001:db8:1:3::1')).toBe(59)
    // An IPv4 address written as IPv4-mapped IPv6 is the IPv4 address.
    const drainedV4 = await drain(server.base, '198.51.100.7')
    expect(await remainingAfter(server.base, '::ffff:198.51.100.7')).toBeLessThan(30)

    await expectLoggedClients(server, [
      ...Array<string>(drained).fill('2001:db8:1:2::1'),
      '2001:db8:1:2:ffff:ffff:ffff:ffff',
      '2001:db8:1:2::9',
      '2001:db8:1:3::1',
      ...Array<string>(drainedV4 + 1).fill('198.51.100.7'),
    ])
    expect(await server.stop()).toBe(0)
  })

  test('on a dual-stack listener, 127.0.0.1 and ::1 are two clients, each logged as the socket says', async () => {
    const server = await startServer({ args: ['--host', '::'] })
    expect(server.stderr()).toMatch(/listening on http:\/\/\[::\]:\d+,/)
    const drained = await drain(`http://127.0.0.1:${server.port}/v1`)
    expect(await remainingAfter(`http://[::1]:${server.port}/v1`)).toBe(59)
    expect(await remainingAfter(`http://127.0.0.1:${server.port}/v1`)).toBeLessThan(30)
    await expectLoggedClients(server, [...Array<string>(drained).fill('127.0.0.1'), '::1', '127.0.0.1'])
    expect(await server.stop()).toBe(0)
  })
})

describe('--trust-proxy ADDR|CIDR', () => {
  test('the proxy list is checked, and X-Forwarded-For is read from the right, past trusted hops', () => {
    expect(() => new TrustedProxies(['10.0.0.0/33'])).toThrow(/not an IP address, a CIDR block/)
    expect(() => new TrustedProxies(['proxy.local'])).toThrow(/proxy\.local/)
    expect(() => new TrustedProxies(['10.0.0.0/8/1'])).toThrow()
    const trusted = new TrustedProxies(['loopback', '10.0.0.0/8', '2001:db8::/32'])
    expect(['127.0.0.1', '127.9.9.9', '::1', '10.1.2.3', '2001:db8:ffff::1'].map((a) => trusted.has(a))).toEqual([
      true,
      true,
      true,
      true,
      true,
    ])
    expect(['11.0.0.1', '::2', '2001:db9::1', '128.0.0.1'].map((a) => trusted.has(a))).toEqual([false, false, false, false])
    expect(forwardedClient('127.0.0.1', '198.51.100.1, 10.0.0.5', trusted)).toBe('198.51.100.1')
    expect(forwardedClient('127.0.0.1', '6.6.6.6, 198.51.100.1', trusted)).toBe('198.51.100.1')
    expect(forwardedClient('127.0.0.1', '10.0.0.9, 10.0.0.5', trusted)).toBe('10.0.0.9')
    // Ports as some proxies write them; an entry a trusted hop appended that is no address leaves its client unknown.
    expect(forwardedClient('127.0.0.1', '198.51.100.1:4711', trusted)).toBe('198.51.100.1')
    expect(forwardedClient('127.0.0.1', '[2001:db9::7]:4711, 10.0.0.5:80', trusted)).toBe('2001:db9::7')
    expect(forwardedClient('127.0.0.1', '[2001:DB9:0::7]', trusted)).toBe('2001:db9::7')
    expect(forwardedClient('127.0.0.1', '2001:db9::7', trusted)).toBe('2001:db9::7')
    for (const unreadable of ['garbage, 10.0.0.5', 'unknown', '198.51.100.1:http', '[2001:db9::7', '198.51.100.1:1:2', ', 10.0.0.5'])
      expect({ unreadable, client: forwardedClient('127.0.0.1', unreadable, trusted) }).toEqual({ unreadable, client: null })
    // Left of the first untrusted hop, nothing is read: a client's own entries cannot make it unknown.
    expect(forwardedClient('127.0.0.1', 'garbage, 198.51.100.1', trusted)).toBe('198.51.100.1')
  })

  test('an X-Forwarded-For entry of a trusted proxy that is no address makes the client unknown, never the proxy; warned once', async () => {
    const server = await startServer({ args: ['--trust-proxy', 'loopback'] })
    const metrics = (forwarded: string) => fetch(`${server.origin}/metrics`, { headers: from(forwarded) }).then((r) => r.status)
    // /metrics answers this machine only: a client the proxy could not name is not this machine.
    expect(await metrics('garbage')).toBe(403)
    expect(await metrics('203.0.113.5:4444')).toBe(403)
    expect(await metrics('127.0.0.1')).toBe(200)
    // An empty header is sent, and names nobody: not the proxy either.
    expect(await metrics('')).toBe(403)
    for (const forwarded of ['203.0.113.5:4444', '[2001:db8::3]:443', 'unknown', 'garbage', ''])
      await remainingAfter(server.base, forwarded)
    await expectLoggedClients(server, ['203.0.113.5', '2001:db8::3', 'unknown', 'unknown', 'unknown'])
    expect(server.stderr()).not.toContain('carried no X-Forwarded-For')
    expect(server.stderr().match(/no address/g)).toHaveLength(1)
    expect(server.stderr()).toContain(
      'petstore: a request from 127.0.0.1, a trusted proxy (--trust-proxy), carried an X-Forwarded-For entry that is no address (such as "unknown", or an empty one), appended by a trusted hop: its client is limited as "unknown"',
    )
    expect(await server.stop()).toBe(0)
  })

  test('a client that reaches the port directly cannot forge its address', async () => {
    const server = await startServer({ args: ['--trust-proxy', '10.0.0.0/8'] })
    const drained = await drain(server.base, '198.51.100.1')
    expect(await remainingAfter(server.base, '198.51.100.2')).toBeLessThan(30)
    await expectLoggedClients(server, Array<string>(drained + 1).fill('127.0.0.1'))
    expect(await server.stop()).toBe(0)
  })

  test('behind a trusted proxy the client is the rightmost untrusted hop; a missing header on an API request is warned about once', async () => {
    const server = await startServer({ args: ['--trust-proxy', 'loopback', '--trust-proxy', '203.0.113.0/24'] })
    await remainingAfter(server.base, '6.6.6.6, 198.51.100.1, 203.0.113.5')
    // Outside the API nothing is limited by address: a local probe without the header is not warned about.
    for (const path of ['/healthz', '/metrics']) expect((await fetch(`${server.origin}${path}`)).status).toBe(200)
    await (await fetch(`${server.base}/pets`, { headers: { 'x-forwarded-for': '198.51.100.7' } })).arrayBuffer()
    await eventually(() => server.stdout().includes('198.51.100.7'))
    expect(server.stderr()).not.toContain('carried no X-Forwarded-For')
    for (let i = 0; i < 2; i++) expect((await fetch(`${server.base}/pets`)).status).toBe(401)
    await expectLoggedClients(server, ['198.51.100.1', '198.51.100.7', '127.0.0.1', '127.0.0.1'])
    expect(server.stderr().match(/carried no X-Forwarded-For/g)).toHaveLength(1)
    // With loopback trusted, a local curl sends no header either: the warning says it may be that.
    expect(server.stderr()).toContain(
      'petstore: a request from 127.0.0.1, a trusted proxy (--trust-proxy), carried no X-Forwarded-For: it may be a client on that machine reaching the server directly (a local curl)',
    )
    expect(await server.stop()).toBe(0)
  })

  test('PETSTORE_TRUST_PROXY sets the list; a bad entry stops the start with one line', async () => {
    const server = await startServer({ env: { PETSTORE_TRUST_PROXY: '192.0.2.1, loopback' } })
    await remainingAfter(server.base, '198.51.100.9')
    await expectLoggedClients(server, ['198.51.100.9'])
    expect(await server.stop()).toBe(0)
    const bad = cli(['serve', '--port', '0', '--trust-proxy', 'everyone'])
    expect(bad.code).toBe(2)
    expect(reasonLine(bad.stderr)).toBe(
      'petstore: --trust-proxy: "everyone" is not an IP address, a CIDR block like 10.0.0.0/8, or loopback',
    )
  })
})
