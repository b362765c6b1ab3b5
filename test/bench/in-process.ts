#!/usr/bin/env bun
/**
 * The app's own CPU per request, with no socket: `app.handle()` in a loop on the test harness's app
 * (in-memory data file, 100 pets, one Enterprise key out of reach of its limits, access log into memory).
 *
 *   bun test/bench/in-process.ts [--path list|get] [--concurrency N] [--requests N]
 *
 * Prints the median of five rounds after one to warm up. The figure includes building each Request and
 * reading each answer; set it beside `bun run bench`, which measures the same app behind a socket
 * (docs/benchmark.md, "The same code in a loop and behind a socket"). No refusals: without a socket
 * every request comes from one unknown address, which its limits soon refuse with 429.
 */
import { parseArgs } from 'node:util'
import { postPet, startApp } from '../support/app'

const { values } = parseArgs({
  options: {
    path: { type: 'string', default: 'list' },
    concurrency: { type: 'string', default: '1' },
    requests: { type: 'string', default: '200000' },
  },
})
/** Each path's request and the status every answer must have, so a broken setup is not measured. */
const PATHS: Record<string, { path: (i: number) => string; status: number }> = {
  list: { path: () => '/pets?limit=20', status: 200 },
  get: { path: (i) => `/pets/${1 + (i % 100)}`, status: 200 },
}
const measured = PATHS[values.path!]
const concurrency = Number(values.concurrency)
const requests = Number(values.requests)
if (!measured || !(concurrency >= 1) || !(requests >= concurrency))
  throw new Error(`--path is one of ${Object.keys(PATHS).join(', ')}; --concurrency and --requests are positive`)

const harness = await startApp({}, { realClock: true })
const key = await harness.key('enterprise', { rpm: 1_000_000_000, rpd: 1_000_000_000 })
for (let i = 0; i < 100; i++) await postPet(harness.base, key, { name: `pet ${i}`, categoryId: 1 })
const headers = { authorization: `Bearer ${key}` }
const app = harness.petstore.app

async function one(i: number): Promise<void> {
  const answer = await app.handle(new Request(harness.base + measured!.path(i), { headers }))
  await answer.arrayBuffer()
  if (answer.status !== measured!.status) throw new Error(`${values.path}: answered ${answer.status}, not ${measured!.status}`)
}

/** CPU µs per request over one round. */
async function round(): Promise<number> {
  const before = process.cpuUsage()
  for (let i = 0; i < requests; i += concurrency) await Promise.all(Array.from({ length: concurrency }, (_, j) => one(i + j)))
  harness.logLines.length = 0
  const { user, system } = process.cpuUsage(before)
  return (user + system) / requests
}

await round()
const rounds: number[] = []
for (let i = 0; i < 5; i++) rounds.push(await round())
const sorted = rounds.toSorted((a, b) => a - b)
console.log(
  `${values.path}: ${sorted[2]!.toFixed(1)} µs CPU a request (median of 5 rounds of ${requests}: ${rounds.map((r) => r.toFixed(1)).join(', ')})`,
)
await harness.stop()
