/** The console page's files, and the security headers on every answer of the console listener. */
import type { HTMLBundle } from 'bun'
import { basename } from 'node:path'
import { notFound } from '../../../http/api-errors'
import { compressedAsset, noFraming } from '../../../http/assets'

export const SECURITY_HEADERS: Record<string, string> = {
  ...noFraming(
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'self'; ",
  ),
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-store',
}

/** Answers a path of the page with its file (found at the first ask), else 404. */
export function pageFiles(bundle: HTMLBundle): (path: string, request: Request) => Promise<Response> {
  let assets: ReturnType<typeof pageAssets> | undefined
  return async (path, request) => {
    const found = (await (assets ??= pageAssets(bundle))).get(path)
    if (!found) throw notFound(`No resource at ${path.slice(0, 200)}.`)
    return found(request)
  }
}

/**
 * The page's files by path, each an answer with the console's security headers. In the binary, `bun
 * build --compile` has bundled the page (HTML, script, stylesheet) into files of its own; from source,
 * the page is bundled here, once, in memory.
 */
async function pageAssets(bundle: HTMLBundle): Promise<Map<string, (request: Request) => Promise<Response>>> {
  /** A file's path in the page (the HTML's is `/`), and its answer. */
  const served = (path: string, html: boolean, type: string, body: Blob) =>
    [html ? '/' : `/${basename(path)}`, compressedAsset(() => body.arrayBuffer(), { ...SECURITY_HEADERS, 'content-type': type })] as const
  const compiled = (bundle as HTMLBundle & { files?: { path: string; loader: string; headers: Record<string, string> }[] }).files
  if (compiled)
    return new Map(compiled.map((file) => served(file.path, file.loader === 'html', file.headers['content-type']!, Bun.file(file.path))))
  const built = await Bun.build({ entrypoints: [bundle.index], target: 'browser', minify: true })
  if (!built.success) throw new Error(`the console's page does not build: ${built.logs.join('; ')}`)
  return new Map(built.outputs.map((output) => served(output.path, output.path.endsWith('.html'), output.type, output)))
}
