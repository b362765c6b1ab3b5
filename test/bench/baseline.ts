/**
 * The yardstick: a bare Bun.serve that answers, for the selected scenario, the status, header fields and
 * body the real server returned for the same request, captured once and replayed without any other work.
 *
 *   bun test/bench/baseline.ts CAPTURES.json
 *
 * It listens twice. The first listener builds each answer's headers per request from a plain object,
 * as any server that sends per-request values (X-Request-Id, X-RateLimit-Remaining, RateLimit) must:
 * the goals are read against it. The second replays `Headers` objects built once at start, which Bun
 * only copies: the least work any server can do, a stricter yardstick (`bun run bench --strict`).
 *
 * CAPTURES.json maps a scenario name to its captured answers by method ({GET?, POST?}). The harness
 * selects a scenario with `PUT /<name>` on either listener before driving load; any GET or POST then
 * gets the answer.
 */
import { readFileSync } from 'node:fs'

export interface Captured {
  status: number
  /** Header fields as the real server sent them, except those Bun.serve writes itself. */
  headers: [string, string][]
  body: string
}

export type Captures = Record<string, { GET?: Captured; POST?: Captured }>

type ByMethod<T> = { GET?: T; POST?: T }

function serve(label: string, prepared: Map<string, ByMethod<() => Response>>): void {
  let current: ByMethod<() => Response> = {}
  const server = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    fetch(request) {
      const method = request.method
      const answer = method === 'GET' ? current.GET : method === 'POST' ? current.POST : undefined
      if (answer) return answer()
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
  console.log(`baseline ${label} listening on http://127.0.0.1:${server.port}`)
}

/** Per request: a plain object with every field, made anew, turned into headers by Bun. */
function perRequest(c: Captured): () => Response {
  const { body, status, headers: fields } = c
  return () => {
    const headers: Record<string, string> = {}
    for (const [name, value] of fields) headers[name] = value
    return new Response(body, { status, headers })
  }
}

/** Prebuilt: one Headers object for every answer. */
function prebuilt(c: Captured): () => Response {
  const init = { status: c.status, headers: new Headers(c.headers) }
  return () => new Response(c.body, init)
}

if (import.meta.main) {
  const captures = JSON.parse(readFileSync(process.argv[2]!, 'utf8')) as Captures
  for (const [label, make] of [
    ['per-request', perRequest],
    ['prebuilt', prebuilt],
  ] as const) {
    const prepared = new Map<string, ByMethod<() => Response>>()
    for (const [name, { GET, POST }] of Object.entries(captures)) prepared.set(name, { GET: GET && make(GET), POST: POST && make(POST) })
    serve(label, prepared)
  }
  process.on('SIGTERM', () => process.exit(0))
  process.on('SIGINT', () => process.exit(0))
}
