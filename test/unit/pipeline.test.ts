/**
 * Elysia reads each hook's and handler's source text to decide what context to build and whether to
 * await it (a `return f(…)` or an `=> f(` reads as maybe-async, and a context handed on whole makes it
 * parse cookies and copy headers). This guards the hot path: the request hooks and the GET handlers
 * must compile to synchronous code, as they do from these sources. The build does not minify, since
 * minified code would read as async everywhere (and lose the inference of the fields it uses).
 */
import { expect, test } from 'bun:test'
import { createApp } from '../../src/app'
import { resolveConfig } from '../../src/config'
import { openSqliteStorage } from '../../src/storage/sqlite'

test('the request hooks and the GET handlers compile to synchronous code', () => {
  const config = resolveConfig({ port: '0', host: '127.0.0.1' }, {})
  const { app } = createApp(config, { storage: openSqliteStorage(':memory:'), logSink: null, warn: () => {} })
  app.compile()
  const pipeline = String((app as unknown as { fetch: () => unknown }).fetch)
  expect(pipeline).toStartWith('function map(')
  expect(pipeline).not.toContain('await ')
  const routes = (app as unknown as { router: { history: { method: string; path: string; compile: () => unknown }[] } }).router.history
  const gets = routes.filter((route) => route.method === 'GET' && route.path.startsWith('/v1/'))
  expect(gets.map((route) => route.path).sort()).toEqual(['/v1/pets', '/v1/pets/:petId', '/v1/store/orders'])
  for (const route of gets) expect(`${route.path}: ${String(route.compile()).slice(0, 16)}`).toBe(`${route.path}: function handle(`)
})

test('the build does not minify', async () => {
  const manifest = (await Bun.file(`${import.meta.dir}/../../package.json`).json()) as { scripts: Record<string, string> }
  expect(manifest.scripts.build).not.toMatch(/--minify/)
})
