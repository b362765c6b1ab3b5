/**
 * Storage faults on a real file system: a data file on a tiny tmpfs that fills up under a running
 * server. Writes must answer 503 `unavailable`, reads must go on, and every pet acknowledged before the
 * fault must still be there after a restart. Needs root (mount); skipped otherwise.
 */
import { afterAll, describe, expect, test } from 'bun:test'
import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { createKeyWithCli, startServer, tempDir } from '../support/binary'

const canMount = process.getuid?.() === 0 && Bun.spawnSync(['which', 'mount']).exitCode === 0
const mounts: string[] = []

function mountTmpfs(sizeKiB: number): string {
  const dir = join(tempDir(), 'mnt')
  mkdirSync(dir)
  const result = Bun.spawnSync(['mount', '-t', 'tmpfs', '-o', `size=${sizeKiB}k,mode=0700`, 'tmpfs', dir])
  if (result.exitCode !== 0) throw new Error(`mount failed: ${result.stderr.toString()}`)
  mounts.push(dir)
  return dir
}

afterAll(() => {
  for (const dir of mounts.splice(0)) Bun.spawnSync(['umount', '-l', dir])
})

const headers = (key: string) => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json' })

async function create(base: string, key: string, name: string) {
  const response = await fetch(`${base}/pets`, {
    method: 'POST',
    headers: headers(key),
    body: JSON.stringify({ name, categoryId: 1 }),
  })
  return { status: response.status, body: (await response.json()) as Record<string, unknown> }
}

describe.skipIf(!canMount)('storage faults', () => {
  test('a full disk answers 503 unavailable on writes, keeps serving reads, and loses nothing acknowledged', async () => {
    const dir = mountTmpfs(768)
    const dataFile = join(dir, 'petstore.db')
    const key = createKeyWithCli(dataFile, ['--plan', 'enterprise', '--rpm', '1000000', '--rpd', '1000000'])
    const server = await startServer({ dataFile, args: ['--no-access-log'] })
    const acknowledged: Record<string, unknown>[] = []
    let refusal: { status: number; body: Record<string, unknown> } | undefined
    for (let i = 0; i < 20_000 && !refusal; i++) {
      const answer = await create(server.base, key, `${i}-${'x'.repeat(190)}`)
      if (answer.status === 201) acknowledged.push(answer.body)
      else refusal = answer
    }
    expect(refusal).toBeDefined()
    expect(refusal!.status).toBe(503)
    expect(refusal!.body).toEqual({ code: 'unavailable', message: expect.any(String), status: 503 })
    expect(acknowledged.length).toBeGreaterThan(10)

    const again = await create(server.base, key, 'after the disk filled')
    expect(again.status).toBe(503)
    expect((await fetch(`${server.origin}/healthz`)).status).toBe(200)
    for (const pet of [acknowledged[0]!, acknowledged.at(-1)!]) {
      const read = await fetch(`${server.base}/pets/${pet.id}`, { headers: headers(key) })
      expect(read.status).toBe(200)
      expect(await read.json()).toEqual(pet)
    }
    expect(await server.stop()).toBe(0)

    const restarted = await startServer({ dataFile, args: ['--no-access-log'] })
    let seen = 0
    let next: string | null = `${restarted.base}/pets?limit=100`
    while (next) {
      const page: Response = await fetch(next, { headers: headers(key) })
      seen += ((await page.json()) as unknown[]).length
      next = /<([^>]+)>; rel="next"/.exec(page.headers.get('link') ?? '')?.[1] ?? null
    }
    expect(seen).toBe(acknowledged.length)
    await restarted.stop()
  })
})
