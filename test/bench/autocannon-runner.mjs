// The fallback load generator: runs autocannon for one scenario (a JSON spec written by
// test/bench/lib/load.ts) and prints one line, `BENCH_RESULT {...}`. Runs on node when installed, else bun.
import { readFileSync } from 'node:fs'
import autocannon from 'autocannon'

const input = JSON.parse(readFileSync(process.argv[2], 'utf8'))
const { spec } = input

function addressOf(mode, i) {
  const first = mode === 'pool' ? 172 : 10
  const second = (mode === 'pool' ? 16 : 0) + (Math.floor(i / 65536) % 256)
  return `${first}.${second}.${Math.floor(i / 256) % 256}.${i % 256}`
}

function shape(request) {
  const out = { method: request.method, path: request.path, headers: { ...request.headers } }
  if (request.body !== undefined) out.body = request.body
  return out
}

const read = shape(spec.read)
const write = spec.write ? shape(spec.write.request) : undefined
const dynamic = spec.write !== undefined || spec.randomId !== undefined || spec.forwardedFor !== undefined

const options = {
  url: input.url,
  connections: input.connections,
  duration: input.durationS,
  pipelining: 1,
  timeout: 5,
}

if (!dynamic) {
  // autocannon takes the path of a fixed request from the URL.
  options.url = input.url + read.path
  options.method = read.method
  options.headers = read.headers
  if (read.body !== undefined) options.body = read.body
} else {
  let counter = 0
  let unique = input.offset
  const ff = spec.forwardedFor
  options.requests = [
    {
      setupRequest(request) {
        counter++
        if (write && counter % spec.write.every === 0) return { ...request, ...write }
        const next = { ...request, ...read, headers: { ...read.headers } }
        if (spec.randomId) next.path = read.path.replace('{id}', String(1 + Math.floor(Math.random() * spec.randomId.max)))
        if (ff) {
          const i = ff.mode === 'unique' ? unique++ % ff.size : Math.floor(Math.random() * ff.size)
          next.headers['x-forwarded-for'] = addressOf(ff.mode, i)
        }
        return next
      },
    },
  ]
}

// autocannon's own histogram keeps whole milliseconds of 2xx answers only; record every answer exactly.
let latencies = new Float64Array(1 << 16)
let count = 0
const statuses = {}

const instance = autocannon(options, (error, result) => {
  if (error) {
    console.error(error)
    process.exit(1)
  }
  const sorted = latencies.subarray(0, count).sort()
  const at = (q) => (count ? sorted[Math.min(count - 1, Math.floor(q * count))] : NaN)
  const durationS = result.duration
  const line = {
    requests: count,
    durationS,
    rps: count / durationS,
    p50Ms: at(0.5),
    p99Ms: at(0.99),
    maxMs: count ? sorted[count - 1] : NaN,
    socketErrors: result.errors,
    statuses,
  }
  process.stdout.write(`BENCH_RESULT ${JSON.stringify(line)}\n`)
  process.exit(0)
})
instance.on('response', (_client, statusCode, _bytes, responseTime) => {
  if (count === latencies.length) {
    const bigger = new Float64Array(latencies.length * 2)
    bigger.set(latencies)
    latencies = bigger
  }
  latencies[count++] = responseTime
  statuses[statusCode] = (statuses[statusCode] ?? 0) + 1
})
process.once('SIGTERM', () => instance.stop())
