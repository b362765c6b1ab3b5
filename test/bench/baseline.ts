/**
 * The bare server the goals are read against (as ../shared/bench/yardstick.ts): a Bun.serve that answers
 * the status, header fields and body the real server returned for the same request, captured once, and
 * does nothing else but read a POST's body and build its headers per request from a plain object, as any
 * server that sends per-request values (X-Request-Id, X-RateLimit-Remaining, RateLimit) must.
 *
 *   bun test/bench/baseline.ts CAPTURES.json
 *
 * CAPTURES.json maps a name (`<mode>/<scenario>`) to one captured answer. The harness selects one with
 * `PUT /<name>` before driving load; every GET or POST then gets that answer.
 */
import { readFileSync } from 'node:fs'

export interface Captured {
  status: number
  /** Header fields as the real server sent them, except those Bun.serve writes itself. */
  headers: [string, string][]
  body: string
}

export type Captures = Record<string, Captured>

/** Per request: a plain object with every field, made anew, turned into headers by Bun. */
function answerOf(c: Captured): () => Response {
  const { body, status, headers: fields } = c
  return () => {
    const headers: Record<string, string> = {}
    for (const [name, value] of fields) headers[name] = value
    return new Response(body, { status, headers })
  }
}

if (import.meta.main) {
  const captures = JSON.parse(readFileSync(process.argv[2]!, 'utf8')) as Captures
  const prepared = new Map(Object.entries(captures).map(([name, c]) => [name, answerOf(c)]))
  let answer: (() => Response) | undefined
  const server = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    async fetch(request) {
      const method = request.method
      if (method === 'GET' && answer) return answer()
      if (method === 'POST' && answer) {
        await request.arrayBuffer()
        return answer()
      }
      if (method === 'PUT') {
        const name = new URL(request.url).pathname.slice(1)
        answer = prepared.get(name)
        return answer ? new Response('selected\n') : new Response(`unknown answer ${name}\n`, { status: 404 })
      }
      return new Response('no answer selected\n', { status: 503 })
    },
  })
  console.log(`baseline listening on http://127.0.0.1:${server.port}`)
  process.on('SIGTERM', () => process.exit(0))
  process.on('SIGINT', () => process.exit(0))
}
