/**
 * The embedded files as a browser fetches them from the binary: Swagger UI at /docs and the console's
 * page come brotli- or gzip-compressed as Accept-Encoding allows (plain otherwise), always with
 * `Vary: Accept-Encoding`, and decompress to the very bytes sent plain; 30 first requests at once share
 * one compression. /favicon.ico answers on both listeners instead of a 404.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { brotliDecompressSync, gunzipSync } from 'node:zlib'
import { type Server, startServer } from '../support/binary'

let server: Server
let consoleOrigin: string
beforeAll(async () => {
  server = await startServer({ console: true })
  consoleOrigin = `http://127.0.0.1:${/, console at http:\/\/127\.0\.0\.1:(\d+)\//.exec(server.stderr())![1]}`
}, 60_000)
afterAll(async () => {
  await server.stop()
})

/** fetch without Bun's own decompression, so the test sees the bytes on the wire. */
async function raw(url: string, acceptEncoding: string | null) {
  const response = await fetch(url, {
    headers: acceptEncoding === null ? {} : { 'accept-encoding': acceptEncoding },
    decompress: false,
  } as RequestInit)
  return { response, bytes: new Uint8Array(await response.arrayBuffer()) }
}

describe('compressed assets', () => {
  test('Swagger UI and the console page: br, gzip or plain per Accept-Encoding, Vary on each, the same bytes', async () => {
    const page = await (await fetch(`${consoleOrigin}/`)).text()
    const consoleScript = /src="\.?\/?([^"]+\.js)"/.exec(page)![1]!
    const urls = [`${server.origin}/docs/swagger-ui-bundle.js`, `${server.origin}/docs/swagger-ui.css`, `${consoleOrigin}/${consoleScript}`]
    for (const url of urls) {
      // 30 first requests at once: one compression, every answer whole.
      const first = await Promise.all(Array.from({ length: 30 }, () => raw(url, 'gzip, deflate, br')))
      const plain = await raw(url, null)
      expect(plain.response.headers.get('content-encoding')).toBeNull()
      expect(plain.response.headers.get('vary')).toBe('Accept-Encoding')
      for (const { response, bytes } of first) {
        expect([url, response.status, response.headers.get('content-encoding'), response.headers.get('vary')]).toEqual([
          url,
          200,
          'br',
          'Accept-Encoding',
        ])
        expect(Buffer.from(brotliDecompressSync(bytes)).equals(Buffer.from(plain.bytes))).toBe(true)
      }
      const gz = await raw(url, 'gzip;q=0.8, br;q=0')
      expect(gz.response.headers.get('content-encoding')).toBe('gzip')
      expect(Buffer.from(gunzipSync(gz.bytes)).equals(Buffer.from(plain.bytes))).toBe(true)
      const identity = await raw(url, 'identity, *;q=0')
      expect(identity.response.headers.get('content-encoding')).toBeNull()
      expect(identity.bytes.byteLength).toBe(plain.bytes.byteLength)
      const ratio = first[0]!.bytes.byteLength / plain.bytes.byteLength
      console.log(
        `${url.replace(/^http:\/\/[^/]+/, '')}: ${plain.bytes.byteLength} bytes, br ${first[0]!.bytes.byteLength} (${(ratio * 100).toFixed(0)} %), gzip ${gz.bytes.byteLength}`,
      )
      expect(ratio).toBeLessThan(0.4)
    }
    // The page still renders what it says: the console's HTML keeps its headers, compressed too.
    const html = await raw(`${consoleOrigin}/`, 'br')
    expect(html.response.headers.get('content-security-policy')).toContain("default-src 'none'")
  }, 60_000)

  test('/favicon.ico answers on the API listener and on the console', async () => {
    for (const origin of [server.origin, consoleOrigin]) {
      const response = await fetch(`${origin}/favicon.ico`)
      expect([origin, response.status]).toEqual([origin, 204])
      expect(response.headers.get('cache-control')).toBe('public, max-age=86400')
    }
  })
})
