/**
 * Storage faults on real file systems, provoked under a running server: a tiny tmpfs that fills up,
 * and an ext4 volume that the kernel remounts read-only after an error (as `errors=remount-ro` does on
 * a failing disk). Writes must answer 503 `unavailable`, reads must go on, the operator is told once,
 * and every pet acknowledged before the fault must still be there after a restart, including a restart
 * on the still read-only volume. Needs root (mount); the ext4 case also needs loop devices.
 */
import { afterAll, describe, expect, test } from 'bun:test'
import { existsSync, mkdirSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { listAll, serveExpectingFailure } from '../process/helpers'
import { serveArgs } from '../process/takeover-helpers'
import { auth, postPet } from '../support/app'
import { cli, createKeyWithCli, eventually, type Server, startServer, tempDir } from '../support/binary'

const run = (command: string[]) => {
  const result = Bun.spawnSync(command, { stdout: 'pipe', stderr: 'pipe' })
  return { code: result.exitCode, out: result.stdout.toString().trim(), err: result.stderr.toString().trim() }
}
const has = (tool: string) => run(['which', tool]).code === 0
const canMount = process.getuid?.() === 0 && has('mount')
const canLoopExt4 = canMount && has('mkfs.ext4') && has('e2fsck') && existsSync('/dev/loop-control') && existsSync('/sys/fs/ext4')
const mounts: string[] = []

function mount(dir: string, args: string[]): void {
  const result = run(['mount', ...args, dir])
  if (result.code !== 0) throw new Error(`mount ${args.join(' ')} failed: ${result.err}`)
  if (!mounts.includes(dir)) mounts.push(dir)
}

function unmount(dir: string): void {
  const result = run(['umount', dir])
  if (result.code !== 0) throw new Error(`umount failed: ${result.err}`)
  mounts.splice(mounts.indexOf(dir), 1)
}

function mountTmpfs(sizeKiB: number): string {
  const dir = join(tempDir(), 'mnt')
  mkdirSync(dir)
  mount(dir, ['-t', 'tmpfs', '-o', `size=${sizeKiB}k,mode=0700`, 'tmpfs'])
  return dir
}

afterAll(() => {
  for (const dir of mounts.splice(0).reverse()) run(['umount', '-l', dir])
})

async function create(base: string, key: string, name: string) {
  const response = await postPet(base, key, { name, categoryId: 1 })
  return { status: response.status, body: (await response.json()) as Record<string, unknown> }
}

/** Writes refused, reads answered: what a server on a read-only file must do. */
async function expectReadOnlyService(server: Server, key: string, acknowledged: Record<string, unknown>[]) {
  const refused = await create(server.base, key, 'on a read-only file')
  expect(refused).toEqual({ status: 503, body: { code: 'unavailable', message: expect.any(String), status: 503 } })
  expect((await listAll(server.base, key)) as unknown).toEqual(acknowledged)
  const read = await fetch(`${server.base}/pets/${acknowledged.at(-1)!.id}`, { headers: auth(key) })
  expect(await read.json()).toEqual(acknowledged.at(-1)!)
  expect((await fetch(`${server.origin}/healthz`)).status).toBe(200)
  expect((await fetch(`${server.origin}/readyz`)).status).toBe(200)
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

    const again = await create(server.base, key, `after the disk filled ${'x'.repeat(178)}`)
    expect(again.status).toBe(503)
    expect((await fetch(`${server.origin}/healthz`)).status).toBe(200)
    for (const pet of [acknowledged[0]!, acknowledged.at(-1)!]) {
      const read = await fetch(`${server.base}/pets/${pet.id}`, { headers: auth(key) })
      expect(read.status).toBe(200)
      expect(await read.json()).toEqual(pet)
    }
    // The disk is still full: the stop's last writes (usage, rate-limit state) fail, and it says so.
    expect(await server.stop()).toBe(1)
    expect(server.stderr()).toContain('stopped without them')

    const restarted = await startServer({ dataFile, args: ['--no-access-log'] })
    expect((await listAll(restarted.base, key)) as unknown).toEqual(acknowledged)
    await restarted.stop()
  })

  test("the day's quota used while saves failed is saved once they work again, not handed back at restart", async () => {
    const dir = mountTmpfs(1024)
    const dataFile = join(dir, 'petstore.db')
    const key = createKeyWithCli(dataFile, ['--plan', 'enterprise', '--rpm', '100000', '--rpd', '100'])
    const server = await startServer({ dataFile, args: ['--no-access-log'] })
    const dayRemaining = async (target: Server) => {
      const response = await fetch(`${target.base}/pets?limit=1`, { headers: auth(key) })
      expect(response.status).toBe(200)
      return Number(response.headers.get('x-ratelimit-remaining'))
    }
    // Fill the disk, then use quota: the periodic save of the day bucket fails.
    const filler = join(dir, 'filler')
    run(['dd', 'if=/dev/zero', `of=${filler}`, 'bs=4k'])
    for (let i = 0; i < 30; i++) await dayRemaining(server)
    await eventually(() => server.stderr().includes('could not save rate-limit state'), 15_000)
    // Space comes back; no request is made after the failure, so only a retry can save the bucket.
    run(['rm', '-f', filler])
    expect(await server.stop()).toBe(0)
    const restarted = await startServer({ dataFile, args: ['--no-access-log'] })
    expect(await dayRemaining(restarted)).toBe(100 - 31)
    expect(await restarted.stop()).toBe(0)
  })

  test('a data file on a read-only mount serves reads and answers 503 on writes', async () => {
    const dir = mountTmpfs(4096)
    // `#` and `?` would cut short the URI SQLite is given for an immutable open, were they not escaped.
    const dataFile = join(dir, 'pets #1?.db')
    const key = createKeyWithCli(dataFile, ['--plan', 'enterprise', '--rpm', '1000000', '--rpd', '1000000'])
    const writable = await startServer({ dataFile, args: ['--no-access-log'] })
    const acknowledged = []
    for (let i = 0; i < 5; i++) acknowledged.push((await create(writable.base, key, `before ${i}`)).body)
    expect(await writable.stop()).toBe(0)
    // A clean stop folds the write-ahead log into the file, so this is the immutable-open path.
    expect(existsSync(`${dataFile}-wal`)).toBe(false)
    // As a volume that never held a server's lock (deleting it while none runs is harmless).
    rmSync(`${dataFile}.lock`)
    mount(dir, ['-o', 'remount,ro'])

    const server = await startServer({ dataFile, args: ['--no-access-log'] })
    expect(server.stderr()).toContain('is read-only: serving reads')
    await expectReadOnlyService(server, key, acknowledged)
    // A second start on its port is refused in one line (before: exit 70, undoing a lock file it never made).
    const second = await serveExpectingFailure(serveArgs(server.port, dataFile))
    expect({ code: second.code, unexpected: /unexpected error/.test(second.stderr) }).toEqual({ code: 1, unexpected: false })
    expect(second.stderr).toContain(`cannot listen on 127.0.0.1:${server.port}`)
    // A takeover finds no lock to take it over by, and says so in one line (before: "starting afresh", then the port).
    const taker = await serveExpectingFailure([...serveArgs(server.port, dataFile), '--takeover'])
    expect(taker.code).toBe(1)
    expect(taker.stderr).toBe(
      `petstore: cannot take over: no server holds ${dataFile}, yet 127.0.0.1:${server.port} is in use: a server serving the file read-only holds nothing to hand over and must be stopped instead, as must another program; the running server keeps serving\n`,
    )
    expect(await server.stop()).toBe(0)
    expect(server.stderr()).not.toMatch(/\n\s+at /)

    const keyOnReadOnly = cli(['keys', 'create', '--data', dataFile, '--plan', 'free'])
    expect(keyOnReadOnly.code).toBe(1)
    expect(keyOnReadOnly.stderr).toMatch(/^petstore: the data file cannot be written now \(SQLITE_READONLY\)\n$/)
    expect(keyOnReadOnly.stdout).toBe('')
  })
})

describe.skipIf(!canMount)('a read-only view of a file that another process writes', () => {
  test('the server notices the change and stops with status 1, so a restart serves the new data', async () => {
    const writable = join(tempDir(), 'rw')
    const readOnly = join(tempDir(), 'ro')
    mkdirSync(writable)
    mkdirSync(readOnly)
    const key = createKeyWithCli(join(writable, 'petstore.db'), ['--plan', 'free', '--name', 'reader'])
    mount(readOnly, ['--bind', writable])
    mount(readOnly, ['-o', 'remount,bind,ro'])
    const server = await startServer({ dataFile: join(readOnly, 'petstore.db'), args: ['--no-access-log'] })
    expect(server.stderr()).toContain('is read-only: serving reads')
    expect((await fetch(`${server.base}/pets`, { headers: auth(key) })).status).toBe(200)

    const listed = JSON.parse(cli(['keys', 'list', '--json', '--data', join(writable, 'petstore.db')]).stdout) as { id: string }[]
    expect(cli(['keys', 'revoke', listed[0]!.id, '--data', join(writable, 'petstore.db')]).code).toBe(0)
    expect(await server.exited).toBe(1)
    expect(server.stderr()).toContain('the read-only data file changed on disk')

    const restarted = await startServer({ dataFile: join(readOnly, 'petstore.db'), args: ['--no-access-log'] })
    expect((await fetch(`${restarted.base}/pets`, { headers: auth(key) })).status).toBe(401)
    expect(await restarted.stop()).toBe(0)
    unmount(readOnly)
  })
})

describe.skipIf(!canLoopExt4)('a volume that turns read-only under the running server', () => {
  test('creates answer 503 and reads go on; a restart on the read-only volume and then a writable one loses nothing', async () => {
    const image = join(tempDir(), 'volume.ext4')
    await Bun.write(image, new Uint8Array(0))
    expect(run(['truncate', '-s', '16M', image]).code).toBe(0)
    expect(run(['mkfs.ext4', '-q', image]).code).toBe(0)
    const dir = join(tempDir(), 'volume')
    mkdirSync(dir)
    mount(dir, ['-o', 'loop,errors=remount-ro', image])
    const device = run(['findmnt', '-n', '-o', 'SOURCE', dir]).out.replace('/dev/', '')
    const trigger = `/sys/fs/ext4/${device}/trigger_fs_error`
    expect(existsSync(trigger)).toBe(true)

    const dataFile = join(dir, 'petstore.db')
    const key = createKeyWithCli(dataFile, ['--plan', 'enterprise', '--rpm', '1000000', '--rpd', '1000000'])
    const server = await startServer({ dataFile, args: ['--no-access-log'] })
    const acknowledged = []
    for (let i = 0; i < 20; i++) {
      const answer = await create(server.base, key, `before ${i}`)
      expect(answer.status).toBe(201)
      acknowledged.push(answer.body)
    }
    await Bun.write(trigger, '1')
    expect(run(['findmnt', '-n', '-o', 'OPTIONS', dir]).out).toMatch(/(^|,)(ro|emergency_ro)(,|$)/)

    await expectReadOnlyService(server, key, acknowledged)
    await expectReadOnlyService(server, key, acknowledged)
    await server.said('refuses writes')
    expect(server.stderr().match(/refuses writes/g)).toHaveLength(1)
    await server.stop()
    expect(server.stderr()).not.toMatch(/\n\s+at /)

    unmount(dir)
    expect(run(['e2fsck', '-fy', image]).code).toBeLessThan(4)
    mount(dir, ['-o', 'loop,ro', image])
    const readOnly = await startServer({ dataFile, args: ['--no-access-log'] })
    expect(readOnly.stderr()).toContain('is read-only: serving reads')
    await expectReadOnlyService(readOnly, key, acknowledged)
    expect(await readOnly.stop()).toBe(0)

    unmount(dir)
    mount(dir, ['-o', 'loop', image])
    const repaired = await startServer({ dataFile, args: ['--no-access-log'] })
    expect((await listAll(repaired.base, key)) as unknown).toEqual(acknowledged)
    expect((await create(repaired.base, key, 'after the repair')).status).toBe(201)
    expect(await repaired.stop()).toBe(0)
    unmount(dir)
  })
})
