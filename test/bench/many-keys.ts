/**
 * What 200,000 keys cost the server, on the data file and on a throwaway PostgreSQL: the start (exec
 * to the first 200 on /healthz, median of three), the latency of requests sent one after another
 * while nothing changes and while keys are created and revoked with the CLI, and the server's CPU time
 * while idle (its change poll). A measurement, not a test: it prints figures and never fails on one.
 *
 *   bun test/bench/many-keys.ts [--binary dist/petstore] [--keys 200000]
 */
import { Database } from 'bun:sqlite'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { freePort } from '../support/ports'
import { startPostgres } from '../support/postgres'
import { cleanEnv, cpuSecondsOf, median, round } from './lib/procs'

const { values } = parseArgs({
  options: { binary: { type: 'string', default: 'dist/petstore' }, keys: { type: 'string', default: '200000' } },
})
const BINARY = values.binary!
const KEYS = Number(values.keys)
const UNLIMITED = ['--plan', 'enterprise', '--rpm', '1000000000', '--rpd', '1000000000']

/** Runs a CLI command; its stdout and stderr. */
async function petstore(args: string[]): Promise<{ out: string; err: string }> {
  const proc = Bun.spawn([BINARY, ...args], { env: cleanEnv(), stdout: 'pipe', stderr: 'pipe' })
  const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited])
  if (code !== 0) throw new Error(`petstore ${args[0]} failed: ${err}`)
  return { out, err }
}

const secretOf = ({ out }: { out: string }) => out.trim().split('\n').at(-1)!

/** Starts a server; resolves with it and the milliseconds from exec to the first 200 on /healthz. */
async function start(storage: string[], port: number) {
  const started = performance.now()
  const flags = ['--port', String(port), '--host', '127.0.0.1', '--no-access-log', '--console-address', 'off']
  // In the run's folder: whatever a server writes by default beside where it starts goes with the run.
  const proc = Bun.spawn([BINARY, 'serve', ...flags, ...storage], {
    cwd: dir,
    env: cleanEnv(),
    stdout: 'ignore',
    stderr: 'ignore',
  })
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`serve exited with ${proc.exitCode}`)
    const healthy = await fetch(`http://127.0.0.1:${port}/healthz`).then(
      (r) => r.ok,
      () => false,
    )
    if (healthy) return { proc, ms: performance.now() - started }
    await Bun.sleep(5)
  }
}

/** Latencies of GET /pets sent one after another until `done` settles. */
async function probe(port: number, key: string, done: Promise<unknown>): Promise<string> {
  let finished = false
  void done.then(() => (finished = true))
  const latencies: number[] = []
  while (!finished) {
    const sent = performance.now()
    const response = await fetch(`http://127.0.0.1:${port}/v1/pets?limit=1`, { headers: { authorization: `Bearer ${key}` } })
    await response.arrayBuffer()
    if (response.status !== 200) throw new Error(`GET /pets answered ${response.status}`)
    latencies.push(performance.now() - sent)
  }
  latencies.sort((a, b) => a - b)
  const at = (q: number) => round(latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))]!)
  return `${latencies.length} requests, p50 ${at(0.5)} ms, p99 ${at(0.99)} ms, max ${round(latencies.at(-1)!)} ms`
}

async function measure(label: string, storage: string[], key: string): Promise<void> {
  const port = await freePort()
  const starts: number[] = []
  for (let i = 0; i < 3; i++) {
    const { proc, ms } = await start(storage, port)
    starts.push(ms)
    proc.kill('SIGTERM')
    await proc.exited
  }
  console.log(`${label}: start ${round(median(starts))} ms (median of ${starts.map((ms) => round(ms, 0)).join(', ')})`)
  const { proc } = await start(storage, port)
  try {
    console.log(`${label}: steady        ${await probe(port, key, Bun.sleep(3_000))}`)
    // The server's own work with no requests at all: the change poll, four times a second.
    const cpuBefore = cpuSecondsOf(proc.pid)
    await Bun.sleep(5_000)
    console.log(`${label}: idle CPU      ${round(((cpuSecondsOf(proc.pid) - cpuBefore) / 5) * 1000)} ms per second`)
    const changes = (async () => {
      for (let i = 0; i < 3; i++) {
        // The id is read from the create's message: `keys list` of every key would load the machine.
        const { err } = await petstore(['keys', 'create', '--plan', 'free', '--name', `bench ${i}`, ...storage])
        await Bun.sleep(500)
        await petstore(['keys', 'revoke', /created free key (\S+)/.exec(err)![1]!, ...storage])
        await Bun.sleep(500)
      }
    })()
    console.log(`${label}: keys changing ${await probe(port, key, changes)}`)
  } finally {
    proc.kill('SIGTERM')
    await proc.exited
  }
}

const dir = mkdtempSync(join(tmpdir(), 'petstore-many-keys-'))
const cluster = await startPostgres()
try {
  console.log(`${BINARY}, ${KEYS} keys`)
  const dataFile = join(dir, 'petstore.db')
  const fileKey = secretOf(await petstore(['keys', 'create', '--data', dataFile, ...UNLIMITED]))
  const db = new Database(dataFile)
  db.run(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${KEYS})
          INSERT INTO api_keys (id, name, plan, rpm, rpd, secret_hash, created_at)
          SELECT 'key_bulk' || i, 'bulk', 'free', 60, 1000, 'bulk-hash-' || i, 0 FROM n`)
  db.close()
  await measure('data file ', ['--data', dataFile], fileKey)

  const url = await cluster.createDatabase('many_keys')
  const pgKey = secretOf(await petstore(['keys', 'create', '--database-url', url, ...UNLIMITED]))
  const admin = new Bun.SQL(url, { max: 1 })
  await admin.unsafe(`INSERT INTO api_keys (id, name, plan, rpm, rpd, secret_hash, created_at)
                      SELECT 'key_bulk' || i, 'bulk', 'free', 60, 1000, 'bulk-hash-' || i, 0 FROM generate_series(1, ${KEYS}) AS i`)
  await admin.close()
  await measure('PostgreSQL', ['--database-url', url], pgKey)
} finally {
  await cluster.destroy()
  rmSync(dir, { recursive: true, force: true })
}
