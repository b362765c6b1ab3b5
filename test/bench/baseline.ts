/**
 * The yardstick: a bare Bun.serve that answers, for the selected scenario, the status, headers and body
 * the real server returned for the same request, captured once and replayed without any work.
 *
 *   bun test/bench/baseline.ts CAPTURES.json
 *
 * CAPTURES.json maps a scenario name to its captured answers by method ({GET?, POST?}). The harness
 * selects a scenario with `PUT /<name>` before driving load; any GET or POST then gets the answer.
 */
import { readFileSync } from 'node:fs'

export interface Captured {
  status: number
  /** Header fields as the real server sent them, except those Bun.serve writes itself. */
  headers: [string, string][]
  body: string
}

export type Captures = Record<string, { GET?: Captured; POST?: Captured }>

interface Prepared {
  body: string
  init: { status: number; headers: Headers }
}

if (import.meta.main) {
  const captures = JSON.parse(readFileSync(process.argv[2]!, 'utf8')) as Captures
  const prepared = new Map<string, { GET?: Prepared; POST?: Prepared }>()
  // Headers built once: per request Bun only copies them, the least work any server can do.
  const prepare = (c: Captured | undefined): Prepared | undefined =>
    c && { body: c.body, init: { status: c.status, headers: new Headers(c.headers) } }
  for (const [name, byMethod] of Object.entries(captures))
    prepared.set(name, { GET: prepare(byMethod.GET), POST: prepare(byMethod.POST) })

  let current: { GET?: Prepared; POST?: Prepared } = {}

  const server = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    fetch(request) {
      const method = request.method
      const answer = method === 'GET' ? current.GET : method === 'POST' ? current.POST : undefined
      if (answer) return new Response(answer.body, answer.init)
      if (method === 'PUT') {
        const name = new URL(request.url).pathname.slice(1)
        const selected = prepared.get(name)
        if (!selected) return new Response(`unknown scenario ${name}\n`, { status: 404 })
        current = selected
        return new Response('selected\n')
      }
      return new Response('no scenario selected for this method\n', { status: 503 })
    },
  })
  console.log(`baseline listening on http://127.0.0.1:${server.port}`)
  const stop = () => {
    server.stop(true)
    process.exit(0)
  }
  process.on('SIGTERM', stop)
  process.on('SIGINT', stop)
}
