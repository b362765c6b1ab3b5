/**
 * Embedded files (Swagger UI, the console's page) answered brotli or gzip per Accept-Encoding, with
 * `Vary`. Each is compressed once, off the main thread, when first asked for, so each server start pays
 * it again: brotli quality 5 (Swagger UI's 1.7 MB script in 60 ms, 405 KB; quality 9 took 210 ms for 3 %
 * less, 11 ten seconds for 8 % less), gzip level 6 (21 ms; level 9 took twice as long for 1 % less).
 * /favicon.ico gets an empty answer browsers keep.
 */
import { promisify } from 'node:util'
import { brotliCompress, constants, gzip } from 'node:zlib'

type Encoding = 'br' | 'gzip'

const brotli = promisify(brotliCompress)
const gzipped = promisify(gzip)
/** Under this many bytes compressing saves less than its headers cost. */
const WORTH_COMPRESSING = 1024

/**
 * The encoding to send for an Accept-Encoding header: br before gzip (smaller), either only when its
 * q-value (or that of `*`) is above 0; null for the file as it is.
 */
export function chooseEncoding(header: string | null): Encoding | null {
  if (!header) return null
  const weights = new Map<string, number>()
  for (const part of header.split(',')) {
    const [name, ...parameters] = part.trim().toLowerCase().split(';')
    const q = parameters.map((p) => /^\s*q=([\d.]+)\s*$/.exec(p)?.[1]).find((v) => v !== undefined)
    if (name) weights.set(name.trim(), q === undefined ? 1 : Number(q))
  }
  const accepts = (name: Encoding) => (weights.get(name) ?? weights.get('*') ?? 0) > 0
  return accepts('br') ? 'br' : accepts('gzip') ? 'gzip' : null
}

/** Answers a file's bytes, compressed as the request accepts; `headers` go on every answer. */
export function compressedAsset(
  load: () => Promise<ArrayBuffer> | ArrayBuffer,
  headers: Record<string, string>,
): (request: Request) => Promise<Response> {
  let plain: Promise<Uint8Array> | undefined
  const encoded: Partial<Record<Encoding, Promise<Uint8Array>>> = {}
  const bytes = () => (plain ??= Promise.resolve(load()).then((body) => new Uint8Array(body)))
  const compress = (encoding: Encoding) =>
    (encoded[encoding] ??= bytes().then(async (input) =>
      encoding === 'br'
        ? new Uint8Array(
            await brotli(input, {
              params: { [constants.BROTLI_PARAM_QUALITY]: 5, [constants.BROTLI_PARAM_SIZE_HINT]: input.byteLength },
            }),
          )
        : new Uint8Array(await gzipped(input, { level: 6 })),
    ))
  return async (request) => {
    const input = await bytes()
    const encoding = input.byteLength < WORTH_COMPRESSING ? null : chooseEncoding(request.headers.get('accept-encoding'))
    const body = encoding ? await compress(encoding) : input
    return new Response(body, {
      headers: { ...headers, vary: 'Accept-Encoding', ...(encoding && { 'content-encoding': encoding }) },
    })
  }
}

/** /favicon.ico: nothing to show, said so a browser keeps it for a day instead of logging a 404 per page. */
export function noFavicon(): Response {
  return new Response(null, { status: 204, headers: { 'cache-control': 'public, max-age=86400' } })
}

/**
 * The headers of a page that acts with its user's credentials (the docs page, the console), which no
 * other site may frame to trick a click (clickjacking): CSP's frame-ancestors for today's browsers,
 * X-Frame-Options for older ones. `policy` is the rest of the page's Content-Security-Policy.
 */
export function noFraming(policy = ''): Record<string, string> {
  return { 'content-security-policy': `${policy}frame-ancestors 'none'`, 'x-frame-options': 'DENY' }
}
