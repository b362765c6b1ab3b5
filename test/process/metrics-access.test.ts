/**
 * /metrics under the operator's control: on a listener of its own (--metrics-address), or behind a
 * bearer token (--metrics-token / PETSTORE_METRICS_TOKEN), against the binary.
 */
import { describe, expect, test } from 'bun:test'
import { cli, startServer } from '../support/binary'
import { reasonLine } from './helpers'

const TOKEN = 'metrics-token-0123456789abcdef'

describe('/metrics access', () => {
  test('--metrics-address serves /metrics there and nowhere else', async () => {
    const server = await startServer({ args: ['--metrics-address', '127.0.0.1:0'] })
    const port = Number(/, metrics at http:\/\/127\.0\.0\.1:(\d+)\/metrics/.exec(server.stderr())![1])
    expect(port).not.toBe(server.port)
    const beside = await fetch(`${server.origin}/metrics`)
    expect(beside.status).toBe(404)
    expect(((await beside.json()) as { code: string }).code).toBe('not_found')
    const own = await fetch(`http://127.0.0.1:${port}/metrics`)
    expect(own.status).toBe(200)
    expect(await own.text()).toContain('petstore_requests_total')
    const other = await fetch(`http://127.0.0.1:${port}/healthz`)
    expect(other.status).toBe(404)
    expect(await server.stop()).toBe(0)
  })

  test('a metrics token is asked for, never shown, and a short one is refused at start', async () => {
    const server = await startServer({ env: { PETSTORE_METRICS_TOKEN: TOKEN } })
    const none = await fetch(`${server.origin}/metrics`)
    expect(none.status).toBe(401)
    expect(none.headers.get('www-authenticate')).toBe('Bearer realm="petstore-metrics"')
    expect(((await none.json()) as { code: string }).code).toBe('unauthorized')
    const wrong = await fetch(`${server.origin}/metrics`, { headers: { authorization: `Bearer ${TOKEN.slice(0, -1)}x` } })
    expect(wrong.status).toBe(401)
    const right = await fetch(`${server.origin}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } })
    expect(right.status).toBe(200)
    // The rest of the server does not change: health needs no token.
    expect((await fetch(`${server.origin}/healthz`)).status).toBe(200)
    expect(await server.stop()).toBe(0)
    expect(server.stderr() + server.stdout()).not.toContain(TOKEN)

    const short = cli(['serve', '--port', '0', '--metrics-token', 'short'])
    expect(short.code).toBe(2)
    expect(reasonLine(short.stderr)).toBe(
      'petstore: --metrics-token must be 16 to 256 characters of A-Z a-z 0-9 . _ ~ + / = - (the value is not shown)',
    )
    const bad = cli(['serve', '--port', '0', '--metrics-address', 'localhost'])
    expect(reasonLine(bad.stderr)).toBe(
      'petstore: --metrics-address must be HOST:PORT, such as 127.0.0.1:9464 or [::1]:9464, not "localhost"',
    )
  })
})
