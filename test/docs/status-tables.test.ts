/**
 * The operations tables in README.md and docs/api.md list, for each operation, exactly the statuses the served
 * document gives it: the document is generated from the routes, the tables are written by hand, and they drift.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { startApp, type TestApp } from '../support/app'

const ROOT = join(import.meta.dir, '..', '..')
// A row: | `GET /pets?limit=&…` | 200 array of Pet; 400, 401, … |
const ROW = /^\| `(GET|POST) (\/[^`?]*)[^`]*`[^|]*\| ([^|]+)\|$/gm

let app: TestApp
let paths: Record<string, Record<string, { responses: Record<string, unknown> }>>

beforeAll(async () => {
  app = await startApp()
  paths = ((await (await fetch(`${app.origin}/openapi.json`)).json()) as { paths: typeof paths }).paths
})
afterAll(() => app.stop())

for (const file of ['README.md', 'docs/api.md']) {
  test(`${file}: each operation's row lists the statuses its document gives`, () => {
    const rows = [...readFileSync(join(ROOT, file), 'utf8').matchAll(ROW)]
      .map(([, method, path, statuses]) => ({ method: method!.toLowerCase(), path: path!, statuses }))
      .filter(({ method, path }) => paths[path]?.[method])
    // The four operations of the interface, each once.
    expect(rows.map(({ method, path }) => `${method} ${path}`).sort()).toEqual([
      'get /pets',
      'get /pets/{petId}',
      'get /store/orders',
      'post /pets',
    ])
    for (const { method, path, statuses } of rows) {
      const listed = [...statuses!.matchAll(/\b[1-5]\d\d\b/g)].map(([status]) => status).sort()
      expect(`${method} ${path}: ${listed.join(', ')}`).toBe(
        `${method} ${path}: ${Object.keys(paths[path]![method]!.responses).sort().join(', ')}`,
      )
    }
  })
}
