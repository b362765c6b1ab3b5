/**
 * Clients that go away, against the binary: an upload aborted half way is logged as 499 ("client
 * closed"), never as a 500; a POST with a request pipelined behind it (which Bun answers by closing the
 * connection) is not carried out, so no pet exists that nobody was told about.
 */
import { describe, expect, test } from 'bun:test'
import { connect } from 'node:net'
import { auth } from '../support/app'
import { eventually, type Server, startServer } from '../support/binary'

const BODY = JSON.stringify({ name: 'Rex', categoryId: 1 })

/** Writes `text` on a new connection; resolves with what came back once the server closes it or `ms` pass. */
function send(server: Server, text: string, options: { closeAfterMs?: number; waitMs?: number } = {}): Promise<string> {
  return new Promise((resolve) => {
    let received = ''
    const socket = connect(server.port, '127.0.0.1', () => {
      socket.write(text)
      if (options.closeAfterMs !== undefined) setTimeout(() => socket.destroy(), options.closeAfterMs)
    })
    socket.setEncoding('latin1')
    socket.on('data', (chunk) => (received += chunk))
    socket.on('error', () => {})
    socket.on('close', () => resolve(received))
    if (options.waitMs !== undefined) setTimeout(() => socket.destroy(), options.waitMs)
  })
}

function logLines(server: Server): { method: string; status: number }[] {
  return server
    .stdout()
    .trim()
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as { method: string; status: number })
}

describe('clients that go away', () => {
  test('an upload aborted half way is a 499 in the log and the metrics, not a 500', async () => {
    const server = await startServer()
    const head = (framing: string) =>
      `POST /v1/pets HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\nAuthorization: Bearer ${server.bootstrapKey}\r\n` +
      `Content-Type: application/json\r\n${framing}\r\n\r\n`
    await send(server, `${head('Content-Length: 1000')}{"name":`, { closeAfterMs: 100 })
    await send(server, `${head('Transfer-Encoding: chunked')}5\r\n{"nam\r\n`, { closeAfterMs: 100 })
    await eventually(() => logLines(server).filter((line) => line.method === 'POST').length === 2)
    expect(
      logLines(server)
        .filter((line) => line.method === 'POST')
        .map((line) => line.status),
    ).toEqual([499, 499])
    const metrics = await (await fetch(`${server.origin}/metrics`)).text()
    expect(metrics).toContain('petstore_requests_total{operation="createPet",status="499"} 2')
    expect(metrics).not.toContain('status="500"')
    expect(server.stderr()).not.toContain('internal error')
    expect(await server.stop()).toBe(0)
  })

  test("a POST with a request pipelined behind it: the connection closes, and no pet is created behind the client's back", async () => {
    const server = await startServer()
    const key = server.bootstrapKey!
    const post =
      `POST /v1/pets HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\nAuthorization: Bearer ${key}\r\n` +
      `Content-Type: application/json\r\nContent-Length: ${BODY.length}\r\n\r\n${BODY}`
    const get = `GET /v1/pets HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\nAuthorization: Bearer ${key}\r\n\r\n`
    const received = await send(server, post + get, { waitMs: 2_000 })
    // Whatever Bun delivers, a 201 that reached the client and the stored pets agree.
    const answered201 = received.includes('HTTP/1.1 201 ')
    await eventually(() => logLines(server).some((line) => line.method === 'POST'))
    const pets = (await (await fetch(`${server.base}/pets`, { headers: auth(key) })).json()) as unknown[]
    expect(pets.length).toBe(answered201 ? 1 : 0)
    expect(logLines(server).find((line) => line.method === 'POST')!.status).toBe(answered201 ? 201 : 499)
    // The same POST on its own connection is carried out.
    expect(await send(server, post, { waitMs: 1_000 })).toStartWith('HTTP/1.1 201 ')
    expect(await server.stop()).toBe(0)
  })
})
