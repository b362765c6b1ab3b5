/**
 * The data file as an operator sees it: created with its folder, owner-only, and everything in it
 * (pets, keys, the day's quota) surviving a restart; no acknowledged pet lost to `kill -9`.
 */
import { Database } from 'bun:sqlite'
import { afterAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import {
  chmodSync,
  existsSync,
  linkSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  realpathSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
} from 'node:fs'
import { join } from 'node:path'
import { APPLICATION_ID, MIGRATIONS as SQLITE_MIGRATIONS } from '../../src/storage/sqlite/migrations'
import { cli, createKeyWithCli, eventually, keyId, startServer, tempDir } from '../support/binary'
import { auth, killSpawned, listAll, type PetBody, postPet, serveExpectingFailure } from './helpers'

afterAll(killSpawned)
// Process tests wait on real processes; bunfig's [test] timeout is not applied by bun test 1.4.
setDefaultTimeout(20_000)

const mode = (file: string) => statSync(file).mode & 0o777
/** Every file in `dir` but the lock's own, with its mode and a digest of its bytes. */
const snapshotOf = (dir: string) =>
  Object.fromEntries(
    readdirSync(dir)
      .filter((name) => !name.includes('.lock'))
      .sort()
      .map((name) => [
        name,
        `${mode(join(dir, name)).toString(8)} ${new Bun.CryptoHasher('sha256').update(readFileSync(join(dir, name))).digest('hex')}`,
      ]),
  )

describe('the data file', () => {
  test('its folder is created on first start; the file, -wal and -shm are owner-only', async () => {
    const dir = tempDir()
    const dataFile = join(dir, 'nested', 'deeper', 'petstore.db')
    const server = await startServer({ dataFile })
    expect(statSync(join(dir, 'nested', 'deeper')).isDirectory()).toBe(true)
    expect((await postPet(server.base, server.bootstrapKey!, { name: 'Rex', categoryId: 1 })).status).toBe(201)
    for (const file of [dataFile, `${dataFile}-wal`, `${dataFile}-shm`]) {
      expect(existsSync(file)).toBe(true)
      expect({ file, mode: mode(file).toString(8) }).toEqual({ file, mode: '600' })
    }
    expect(await server.stop()).toBe(0)
    expect(mode(dataFile).toString(8)).toBe('600')
  })

  test('a data file made by the CLI is owner-only too', () => {
    const dataFile = join(tempDir(), 'cli', 'petstore.db')
    createKeyWithCli(dataFile, ['--plan', 'pro'])
    expect(mode(dataFile).toString(8)).toBe('600')
  })

  test('a data file readable by others is made owner-only on start', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const key = createKeyWithCli(dataFile, ['--plan', 'pro'])
    chmodSync(dataFile, 0o644)
    const server = await startServer({ dataFile })
    expect(mode(dataFile).toString(8)).toBe('600')
    expect((await fetch(`${server.base}/pets`, { headers: auth(key) })).status).toBe(200)
    expect(await server.stop()).toBe(0)
  })
})

describe('restart', () => {
  test('pets and keys survive SIGTERM and a new start, with identical bodies; ids are not reused', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const first = await startServer({ dataFile })
    const key = first.bootstrapKey!
    const created: PetBody[] = []
    const inputs = [
      { name: 'Rex', categoryId: 1 },
      { name: 'Tom', categoryId: 2, status: 'pending' },
      { name: 'Ünïcødé 🐈', categoryId: 9007199254740991, status: 'sold' },
      { name: 'Ana', categoryId: -5, status: 'available' },
    ]
    for (const input of inputs) {
      const response = await postPet(first.base, key, input)
      expect(response.status).toBe(201)
      created.push((await response.json()) as PetBody)
    }
    const rawBodies = await Promise.all(
      created.map(async (pet) => (await fetch(`${first.base}/pets/${pet.id}`, { headers: auth(key) })).text()),
    )
    const listBefore = await (await fetch(`${first.base}/pets`, { headers: auth(key) })).text()
    expect(await first.stop('SIGTERM')).toBe(0)
    expect(first.stderr()).toMatch(/stopped/)

    const second = await startServer({ dataFile })
    expect(second.bootstrapKey).toBeUndefined()
    const listAfter = await (await fetch(`${second.base}/pets`, { headers: auth(key) })).text()
    expect(listAfter).toBe(listBefore)
    expect(JSON.parse(listAfter)).toEqual(created)
    for (const [i, pet] of created.entries()) {
      const response = await fetch(`${second.base}/pets/${pet.id}`, { headers: auth(key) })
      expect(response.status).toBe(200)
      expect(await response.text()).toBe(rawBodies[i]!)
    }
    const next = (await (await postPet(second.base, key, { name: 'After', categoryId: 1 })).json()) as PetBody
    expect(next.id).toBeGreaterThan(Math.max(...created.map((p) => p.id)))
    expect(await second.stop()).toBe(0)
  })

  test('the day’s quota survives SIGTERM and SIGINT restarts; both exit 0', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const key = createKeyWithCli(dataFile, ['--plan', 'enterprise', '--rpm', '1000', '--rpd', '30'])
    const spend = async (base: string, n: number) => {
      let last: Response | undefined
      for (let i = 0; i < n; i++) {
        last = await fetch(`${base}/pets`, { headers: auth(key) })
        expect(last.status).toBe(200)
      }
      return last!
    }

    const first = await startServer({ dataFile })
    const after20 = await spend(first.base, 20)
    // The day bucket (30) is the one in force: 10 left.
    expect(after20.headers.get('x-ratelimit-limit')).toBe('30')
    expect(after20.headers.get('x-ratelimit-remaining')).toBe('10')
    expect(await first.stop('SIGTERM')).toBe(0)

    const second = await startServer({ dataFile })
    const afterRestart = await spend(second.base, 1)
    expect(afterRestart.headers.get('x-ratelimit-limit')).toBe('30')
    const remaining = Number(afterRestart.headers.get('x-ratelimit-remaining'))
    expect(remaining).toBeLessThanOrEqual(10)
    expect(remaining).toBeGreaterThanOrEqual(8)
    expect(afterRestart.headers.get('ratelimit')).toMatch(/^"day";r=\d+;t=\d+$/)
    await spend(second.base, 4)
    expect(await second.stop('SIGINT')).toBe(0)
    expect(second.stderr()).toMatch(/SIGINT/)

    const third = await startServer({ dataFile })
    const afterSigint = await spend(third.base, 1)
    expect(Number(afterSigint.headers.get('x-ratelimit-remaining'))).toBeLessThanOrEqual(5)
    // Spend the rest: the day is gone, and a restart does not give it back.
    const left = Number(afterSigint.headers.get('x-ratelimit-remaining'))
    await spend(third.base, left)
    const refused = await fetch(`${third.base}/pets`, { headers: auth(key) })
    expect(refused.status).toBe(429)
    expect(await third.stop()).toBe(0)

    const fourth = await startServer({ dataFile })
    const stillRefused = await fetch(`${fourth.base}/pets`, { headers: auth(key) })
    expect(stillRefused.status).toBe(429)
    expect(Number(stillRefused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1)
    expect(await fourth.stop()).toBe(0)
  })
})

describe('a plan changed while no server runs', () => {
  test('the next start gives the new limits full buckets, as a running server does; a ban stays', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const day = createKeyWithCli(dataFile, ['--plan', 'enterprise', '--rpm', '1000', '--rpd', '30', '--name', 'day'])
    const minute = createKeyWithCli(dataFile, ['--plan', 'free', '--name', 'minute'])
    const banned = createKeyWithCli(dataFile, ['--plan', 'free', '--name', 'banned'])
    const get = (base: string, key: string) => fetch(`${base}/pets`, { headers: auth(key) })
    const flags = ['--ban-after', '2']
    const first = await startServer({ dataFile, args: flags })
    for (let i = 0; i < 20; i++) expect((await get(first.base, day)).status).toBe(200)
    for (let i = 0; i < 30; i++) expect((await get(first.base, minute)).status).toBe(200)
    // Sent until banned (early refusals past --ban-after), however slow the host: the bucket refills meanwhile.
    let refusal = ''
    for (let sent = 0; refusal !== 'key_banned'; sent++) {
      if (sent > 200) throw new Error(`200 requests and no ban (last: ${refusal})`)
      const answer = await get(first.base, banned)
      refusal = answer.status === 429 ? ((await answer.json()) as { code: string }).code : (await answer.arrayBuffer(), '')
    }
    expect(await first.stop()).toBe(0)

    expect(cli(['keys', 'set-plan', keyId(dataFile, 'day'), 'enterprise', '--rpm', '1000', '--rpd', '40', '--data', dataFile]).code).toBe(0)
    expect(cli(['keys', 'set-plan', keyId(dataFile, 'minute'), 'pro', '--data', dataFile]).code).toBe(0)
    expect(cli(['keys', 'set-plan', keyId(dataFile, 'banned'), 'pro', '--data', dataFile]).code).toBe(0)
    const second = await startServer({ dataFile, args: flags })
    const afterDay = await get(second.base, day)
    expect(afterDay.headers.get('ratelimit')).toMatch(/^"day";r=39;t=\d+$/)
    const afterMinute = await get(second.base, minute)
    expect(afterMinute.headers.get('ratelimit')).toMatch(/^"minute";r=299;t=\d+$/)
    const stillBanned = await get(second.base, banned)
    const { code } = (await stillBanned.json()) as { code: string }
    expect({ status: stillBanned.status, code }).toEqual({ status: 429, code: 'key_banned' })
    expect(await second.stop()).toBe(0)
  })
})

describe('crash safety', () => {
  test('the day’s quota is saved while running (at least every 10 s), so even kill -9 does not hand out a fresh day', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const key = createKeyWithCli(dataFile, ['--plan', 'enterprise', '--rpm', '1000', '--rpd', '30'])
    const moved = createKeyWithCli(dataFile, ['--plan', 'enterprise', '--rpm', '1000', '--rpd', '30', '--name', 'moved'])
    const server = await startServer({ dataFile })
    let last: Response | undefined
    for (const secret of [moved, key])
      for (let i = 0; i < 20; i++) {
        last = await fetch(`${server.base}/pets`, { headers: auth(secret) })
        expect(last.status).toBe(200)
      }
    expect(last!.headers.get('x-ratelimit-remaining')).toBe('10')
    const spentAt = Date.now()
    // Wait for the periodic save, reading the data file as any SQLite client could.
    const saved = () => {
      const db = new Database(dataFile, { readonly: true })
      try {
        const tables = db.query("SELECT name FROM sqlite_schema WHERE type = 'table'").all() as { name: string }[]
        const table = tables.find((t) => /limit/i.test(t.name))
        if (!table) return false
        const rows = db.query(`SELECT * FROM "${table.name}"`).all() as Record<string, unknown>[]
        return rows.some((row) => Object.values(row).some((v) => typeof v === 'number' && v > 9 && v <= 10.5))
      } finally {
        db.close()
      }
    }
    await eventually(saved, 12_000)
    expect(Date.now() - spentAt).toBeLessThan(11_000)
    await server.stop('SIGKILL')
    // As a petstore from before buckets kept their limits saved them: without.
    const legacy = new Database(dataFile)
    legacy.run('UPDATE limiter_state SET rpm = NULL, rpd = NULL')
    legacy.close()

    const again = await startServer({ dataFile })
    const response = await fetch(`${again.base}/pets`, { headers: auth(key) })
    expect(response.status).toBe(200)
    expect(Number(response.headers.get('x-ratelimit-remaining'))).toBeLessThanOrEqual(10)
    // A key moved to other limits while this server runs, before its first request here: its saved day
    // bucket (without limits: taken as counted under the key's at the start) was counted under the old
    // ones, and the new limits start full, as for a key in use.
    // Changes are applied in order: once a revocation made after the plan's is (of a key this server
    // knows, so only the change poll can end it), so is the plan.
    const revoked = createKeyWithCli(dataFile, ['--plan', 'free', '--name', 'revoked'])
    expect((await fetch(`${again.base}/pets`, { headers: auth(revoked) })).status).toBe(200)
    expect(cli(['keys', 'set-plan', keyId(dataFile, 'moved'), 'enterprise', '--rpm', '1000', '--rpd', '40', '--data', dataFile]).code).toBe(
      0,
    )
    expect(cli(['keys', 'revoke', keyId(dataFile, 'revoked'), '--data', dataFile]).code).toBe(0)
    await eventually(async () => (await fetch(`${again.base}/pets`, { headers: auth(revoked) })).status === 401)
    const afterMove = await fetch(`${again.base}/pets`, { headers: auth(moved) })
    expect(afterMove.headers.get('ratelimit')).toMatch(/^"day";r=39;t=\d+$/)
    expect(await again.stop()).toBe(0)
  }, 30_000)

  test('a saved day bucket says the limits it was counted under: a plan changed while serving, or changed and back, is read right after kill -9', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const limits = ['--plan', 'enterprise', '--rpm', '60', '--rpd', '10']
    const moved = createKeyWithCli(dataFile, [...limits, '--name', 'moved'])
    const back = createKeyWithCli(dataFile, [...limits, '--name', 'back'])
    const savedTokens = (id: string) => {
      const db = new Database(dataFile, { readonly: true })
      try {
        return db.query<{ tokens: number }, [string]>('SELECT tokens FROM limiter_state WHERE subject = ?').get(`key:${id}`)?.tokens
      } finally {
        db.close()
      }
    }
    const server = await startServer({ dataFile })
    const get = (base: string, key: string) => fetch(`${base}/pets`, { headers: auth(key) })
    for (let i = 0; i < 10; i++) expect((await get(server.base, back)).status).toBe(200)
    for (let i = 0; i < 8; i++) expect((await get(server.base, moved)).status).toBe(200)
    // Moved while the server holds its bucket unsaved: the server saves it under the limits it counted.
    expect(cli(['keys', 'set-plan', keyId(dataFile, 'moved'), 'enterprise', '--rpm', '60', '--rpd', '40', '--data', dataFile]).code).toBe(0)
    const [movedId, backId] = [keyId(dataFile, 'moved'), keyId(dataFile, 'back')]
    await eventually(() => (savedTokens(movedId) ?? 10) < 2.5 && (savedTokens(backId) ?? 10) < 1, 12_000)
    // Changed and changed back: the same limits, the same spent day.
    expect(cli(['keys', 'set-plan', keyId(dataFile, 'back'), 'enterprise', '--rpm', '60', '--rpd', '20', '--data', dataFile]).code).toBe(0)
    expect(cli(['keys', 'set-plan', keyId(dataFile, 'back'), ...limits.slice(1), '--data', dataFile]).code).toBe(0)
    // No handover: only what was saved.
    await server.stop('SIGKILL')

    const again = await startServer({ dataFile })
    expect((await get(again.base, moved)).headers.get('ratelimit')).toMatch(/^"day";r=39;t=\d+$/)
    const spent = await get(again.base, back)
    expect({ status: spent.status, remaining: spent.headers.get('x-ratelimit-remaining') }).toEqual({ status: 429, remaining: '0' })
    expect(await again.stop()).toBe(0)
  }, 30_000)

  test('kill -9 under concurrent writes loses no acknowledged pet', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const key = createKeyWithCli(dataFile, ['--plan', 'enterprise', '--rpm', '1000000000', '--rpd', '1000000000'])
    const server = await startServer({ dataFile, args: ['--no-access-log'] })
    const acknowledged: { pet: PetBody; raw: string }[] = []
    const otherStatuses: number[] = []
    let stop = false
    const writer = async (w: number) => {
      for (let i = 0; !stop; i++) {
        let response: Response
        try {
          response = await postPet(server.base, key, {
            name: `writer ${w} pet ${i}`,
            categoryId: w * 1_000_000 + i,
            status: (['available', 'pending', 'sold'] as const)[i % 3],
          })
        } catch {
          return // the server is gone
        }
        if (response.status !== 201) {
          otherStatuses.push(response.status)
          continue
        }
        try {
          const raw = await response.text()
          acknowledged.push({ pet: JSON.parse(raw), raw })
        } catch {
          return // cut off mid-body: not acknowledged
        }
      }
    }
    const started = Date.now()
    const writers = Promise.all(Array.from({ length: 8 }, (_, w) => writer(w)))
    await eventually(() => Date.now() - started >= 1_000 && acknowledged.length >= 50, 10_000)
    const killedAfter = acknowledged.length
    await server.stop('SIGKILL')
    stop = true
    await writers
    expect(otherStatuses).toEqual([])
    expect(killedAfter).toBeGreaterThanOrEqual(50)

    const restarted = await startServer({ dataFile })
    const stored = await listAll(restarted.base, key, (url) => url.replace(/^http:\/\/localhost:\d+/, restarted.origin))
    const byId = new Map(stored.map((pet) => [pet.id, pet]))
    expect(byId.size).toBe(stored.length)
    const missing = acknowledged.filter(({ pet }) => !byId.has(pet.id))
    expect(missing.map((m) => m.pet)).toEqual([])
    for (const { pet } of acknowledged) expect(byId.get(pet.id)).toEqual(pet)
    // The bytes too, through the single-pet read.
    for (const { pet, raw } of acknowledged.slice(-5)) {
      expect(await (await fetch(`${restarted.base}/pets/${pet.id}`, { headers: auth(key) })).text()).toBe(raw)
    }
    expect(await restarted.stop()).toBe(0)
    // The key still lists, so the file is whole.
    expect(cli(['keys', 'list', '--json', '--data', dataFile]).code).toBe(0)
  }, 30_000)
})

describe('commits off the event loop', () => {
  test('while a create waits for the write lock, reads are answered; the create gets its 201 once committed', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const key = createKeyWithCli(dataFile, ['--plan', 'enterprise', '--rpm', '100000', '--rpd', '100000'])
    const server = await startServer({ dataFile, args: ['--no-access-log'] })
    expect((await postPet(server.base, key, { name: 'before', categoryId: 1 })).status).toBe(201)
    // Another connection takes the write lock, as the CLI does for a moment; the commit has to wait for it.
    const other = new Database(dataFile)
    other.run('PRAGMA busy_timeout = 5000') // the server's start-up prunes may hold the lock a moment
    other.run('BEGIN IMMEDIATE')
    let answered = false
    const waiting = postPet(server.base, key, { name: 'waits', categoryId: 2 }).then((response) => {
      answered = true
      return response
    })
    await Bun.sleep(300)
    const read = await fetch(`${server.base}/pets`, { headers: auth(key), signal: AbortSignal.timeout(2_000) })
    expect(read.status).toBe(200)
    expect(((await read.json()) as PetBody[]).map((pet) => pet.name)).toEqual(['before'])
    expect(answered).toBe(false)
    other.run('COMMIT')
    other.close()
    const created = await waiting
    expect(created.status).toBe(201)
    expect(((await created.json()) as PetBody).name).toBe('waits')
    expect(((await listAll(server.base, key)) as PetBody[]).map((pet) => pet.name)).toEqual(['before', 'waits'])
    expect(await server.stop()).toBe(0)
  })

  test('a second server on a data file already served refuses to start; a killed server leaves no stale lock', async () => {
    const first = await startServer()
    const second = await serveExpectingFailure(['--port', '0', '--host', '127.0.0.1', '--data', first.dataFile])
    expect(second.listened).toBe(false)
    expect(second.code).toBe(1)
    expect(second.stderr).toBe(
      `petstore: ${first.dataFile} is in use by petstore process ${first.proc.pid} (a server, or a restore); stop it first\n`,
    )
    // Key commands and backups do not need the lock.
    expect(cli(['keys', 'list', '--data', first.dataFile]).code).toBe(0)
    expect((await fetch(`${first.base}/pets`, { headers: { authorization: `Bearer ${first.bootstrapKey}` } })).status).toBe(200)
    // The operating system drops the lock with the process, kill -9 included.
    await first.stop('SIGKILL')
    const third = await startServer({ dataFile: first.dataFile })
    expect((await fetch(`${third.base}/pets`, { headers: { authorization: `Bearer ${first.bootstrapKey}` } })).status).toBe(200)
    expect(await third.stop()).toBe(0)
  })

  test('another name of a served data file is refused too: a symbolic link (serve, restore), a hard link (serve, commands)', async () => {
    const first = await startServer()
    const served = realpathSync(first.dataFile)
    const dir = tempDir()
    const backup = join(dir, 'backup.db')
    expect(cli(['backup', backup, '--data', first.dataFile]).code).toBe(0)
    const symbolic = join(dir, 'symbolic.db')
    symlinkSync(first.dataFile, symbolic)
    const inUse = `petstore: ${served} is in use by petstore process ${first.proc.pid} (a server, or a restore); stop it first\n`
    const second = await serveExpectingFailure(['--port', '0', '--host', '127.0.0.1', '--data', symbolic])
    expect({ listened: second.listened, code: second.code, stderr: second.stderr }).toEqual({ listened: false, code: 1, stderr: inUse })
    const restored = cli(['restore', backup, '--data', symbolic])
    expect({ code: restored.code, stderr: restored.stderr }).toEqual({ code: 1, stderr: inUse })
    // SQLite keeps a write-ahead log beside each name of a hard-linked file: no name of it is used.
    const hard = join(dir, 'hard.db')
    linkSync(first.dataFile, hard)
    const third = await serveExpectingFailure(['--port', '0', '--host', '127.0.0.1', '--data', hard])
    expect({ listened: third.listened, code: third.code }).toEqual({ listened: false, code: 1 })
    expect(third.stderr).toContain(`cannot use ${realpathSync(hard)} as the data file: it has 2 names (hard links)`)
    const listed = cli(['keys', 'list', '--data', hard])
    expect(listed.code).toBe(1)
    expect(listed.stderr).toContain('it has 2 names (hard links)')
    const restoredHard = cli(['restore', backup, '--data', hard])
    expect({ code: restoredHard.code, stderr: restoredHard.stderr }).toEqual({
      code: 1,
      stderr: `petstore: cannot restore into ${realpathSync(hard)}: it has 2 names (hard links), and SQLite keeps a write-ahead log beside the name it opens, so a server or command on each name would write where the other never reads; keep one name and remove the other links\n`,
    })
    expect(existsSync(`${hard}-wal`)).toBe(false)
    // The first server never noticed.
    expect((await fetch(`${first.base}/pets`, { headers: { authorization: `Bearer ${first.bootstrapKey}` } })).status).toBe(200)
    expect(await first.stop()).toBe(0)
  })

  test('a device or a pipe is no data file: serve and restore refuse it before SQLite writes beside it', async () => {
    const dir = tempDir()
    const pipe = join(dir, 'pipe.db')
    expect(Bun.spawnSync(['mkfifo', pipe]).exitCode).toBe(0)
    const backup = join(dir, 'backup.db')
    expect(cli(['keys', 'create', '--data', join(dir, 'real.db'), '--plan', 'free']).code).toBe(0)
    expect(cli(['backup', backup, '--data', join(dir, 'real.db')]).code).toBe(0)
    const before = { journal: existsSync('/dev/null-journal'), lock: existsSync('/dev/null.lock') }
    for (const file of [pipe, '/dev/null']) {
      const reason = `${file} as the data file: it is not a regular file (a device, a pipe or a socket)`
      const served = await serveExpectingFailure(['--port', '0', '--host', '127.0.0.1', '--data', file])
      expect({ listened: served.listened, code: served.code, stderr: served.stderr }).toEqual({
        listened: false,
        code: 1,
        stderr: `petstore: cannot use ${reason}\n`,
      })
      const restored = cli(['restore', backup, '--data', file])
      expect({ code: restored.code, stderr: restored.stderr }).toEqual({
        code: 1,
        stderr: `petstore: cannot restore into ${file}: it is not a regular file (a device, a pipe or a socket)\n`,
      })
    }
    expect(readdirSync(dir).sort()).toEqual(
      ['backup.db', 'pipe.db', 'real.db', 'real.db.lock'].filter((name) => existsSync(join(dir, name))).sort(),
    )
    expect({ journal: existsSync('/dev/null-journal'), lock: existsSync('/dev/null.lock') }).toEqual(before)
  })

  test("a link to a data file not made yet is followed: the server on it holds the file's own lock", async () => {
    const dir = tempDir()
    const target = join(dir, 'target.db')
    const link = join(dir, 'link.db')
    symlinkSync(target, link)
    const first = await startServer({ dataFile: link })
    expect(existsSync(target)).toBe(true)
    const second = await serveExpectingFailure(['--port', '0', '--host', '127.0.0.1', '--data', target])
    expect({ listened: second.listened, code: second.code, stderr: second.stderr }).toEqual({
      listened: false,
      code: 1,
      stderr: `petstore: ${realpathSync(target)} is in use by petstore process ${first.proc.pid} (a server, or a restore); stop it first\n`,
    })
    expect(await first.stop()).toBe(0)
    // The handover is beside the file, so a start under its own name takes it.
    expect(existsSync(`${link}.handover`)).toBe(false)

    // A relative target is read from the link's folder as the system finds it: through a folder link,
    // `..` is the real folder's parent. Commands follow it to the same file the server serves.
    mkdirSync(join(dir, 'deep', 'x', 'y'), { recursive: true })
    symlinkSync(join(dir, 'deep', 'x', 'y'), join(dir, 'sub'))
    const relative = join(dir, 'sub', 'l.db')
    symlinkSync('../t.db', relative)
    const third = await startServer({ dataFile: relative })
    expect(existsSync(join(dir, 'deep', 'x', 't.db'))).toBe(true)
    const made = createKeyWithCli(relative, ['--plan', 'free', '--name', 'through-links'])
    expect((await fetch(`${third.base}/pets`, { headers: auth(made) })).status).toBe(200)
    expect(existsSync(join(dir, 't.db'))).toBe(false)
    expect(await third.stop()).toBe(0)
  })

  test('a lock file deleted under a running server is made and taken again: a second server is still refused', async () => {
    const first = await startServer()
    const lockFile = `${first.dataFile}.lock`
    rmSync(lockFile)
    await eventually(() => existsSync(lockFile))
    await eventually(() => first.stderr().includes('made and taken again'))
    const second = await serveExpectingFailure(['--port', '0', '--host', '127.0.0.1', '--data', first.dataFile])
    expect({ listened: second.listened, code: second.code, stderr: second.stderr }).toEqual({
      listened: false,
      code: 1,
      stderr: `petstore: ${realpathSync(first.dataFile)} is in use by petstore process ${first.proc.pid} (a server, or a restore); stop it first\n`,
    })
    expect((await fetch(`${first.origin}/readyz`)).status).toBe(200)
    expect(await first.stop()).toBe(0)
  })

  test('a lock file deleted over and over while a second server starts: once it stops, one of them serves, not both', async () => {
    const first = await startServer()
    const lockFile = `${first.dataFile}.lock`
    // What an outside attack did: 300 deletions 5 ms apart, a second server started among them.
    const deletions = (async () => {
      for (let i = 0; i < 300; i++) {
        rmSync(lockFile, { force: true })
        await Bun.sleep(5)
      }
    })()
    const second = await startServer({ dataFile: first.dataFile }).catch(() => null)
    await deletions
    const ready = async (server: { origin: string }) => (await fetch(`${server.origin}/readyz`)).status === 200
    const serving = async () => (await Promise.all([first, ...(second ? [second] : [])].map(ready))).filter(Boolean).length
    await eventually(async () => existsSync(lockFile) && (await serving()) === 1, 5_000)
    // And stays so: the one that does not hold the lock file knows it.
    await Bun.sleep(600)
    expect(await serving()).toBe(1)
    expect(await first.stop()).toBe(0)
    if (second) expect(await second.stop()).toBe(0)
  })

  test('a lock file replaced by one another process holds: the server says so, and answers 503 to /readyz and creates', async () => {
    const first = await startServer()
    const lockFile = `${first.dataFile}.lock`
    // Held the way lockDataFile holds it, as a second server would, then put in the first one's place
    // at once (a rename: the first never finds the path empty, so it cannot take it again first).
    const other = new Database(`${lockFile}.other`, { create: true })
    try {
      other.run('PRAGMA locking_mode = EXCLUSIVE')
      other.run('BEGIN EXCLUSIVE')
      other.run('COMMIT')
      renameSync(`${lockFile}.other`, lockFile)
      await eventually(() => first.stderr().includes('by one it cannot take'))
      expect((await fetch(`${first.origin}/readyz`)).status).toBe(503)
      expect((await postPet(first.base, first.bootstrapKey!, { name: 'Rex', categoryId: 1 })).status).toBe(503)
    } finally {
      other.close()
    }
    expect(await first.stop()).toBe(0)
  })

  test('a server refused by the lock touches nothing: an older-schema file is not migrated, no -wal or -shm appear', async () => {
    const dir = tempDir()
    const file = join(dir, 'older.db')
    // A data file as the first petstore left it: the first schema step only, rollback journal.
    const older = new Database(file)
    older.run(SQLITE_MIGRATIONS[0]!)
    older.run(`PRAGMA application_id = ${APPLICATION_ID}`)
    older.run('PRAGMA user_version = 1')
    older.close()
    // Read before the lock is taken: closing any descriptor of the lock file would drop this process's lock.
    const before = snapshotOf(dir)
    // Held the way lockDataFile holds it, as a running server or `petstore restore` does.
    const lock = new Database(`${file}.lock`, { create: true })
    try {
      lock.run('PRAGMA locking_mode = EXCLUSIVE')
      lock.run('BEGIN EXCLUSIVE')
      lock.run('COMMIT')
      const served = await serveExpectingFailure(['--port', '0', '--host', '127.0.0.1', '--data', file])
      expect(served.listened).toBe(false)
      expect(served.code).toBe(1)
      expect(served.stderr).toBe(`petstore: ${file} is in use by another petstore (a server, or a restore); stop it first\n`)
      expect(snapshotOf(dir)).toEqual(before)
    } finally {
      lock.close()
    }
  })

  test('a second server on the port of a running one exits 1 instead of sharing the port', async () => {
    const first = await startServer()
    const dir = tempDir()
    const served = await serveExpectingFailure([
      '--port',
      String(first.port),
      '--host',
      '127.0.0.1',
      '--data',
      join(dir, 'new', 'petstore.db'),
    ])
    expect(served.listened).toBe(false)
    expect(served.code).toBe(1)
    // A start that failed leaves nothing on disk: no data file, no companions, no folder.
    expect(readdirSync(dir)).toEqual([])
    expect(served.stderr.trimEnd().split('\n').at(-1)).toContain(`cannot listen on 127.0.0.1:${first.port}`)
    // No secret was made for a server that never served.
    expect(served.stderr).not.toContain('psk_')
    expect((await fetch(`${first.base}/pets`, { headers: { authorization: `Bearer ${first.bootstrapKey}` } })).status).toBe(200)
    expect(await first.stop()).toBe(0)
  })

  test('a server that cannot listen says so in one line and exits 1 at once: the idle commit worker keeps nothing alive', async () => {
    const taken = Bun.listen({ hostname: '127.0.0.1', port: 0, socket: { data() {} } })
    try {
      const started = Date.now()
      const served = await serveExpectingFailure([
        '--port',
        String(taken.port),
        '--host',
        '127.0.0.1',
        '--data',
        join(tempDir(), 'petstore.db'),
      ])
      expect(served.listened).toBe(false)
      expect(served.stderr.trimEnd().split('\n').at(-1)).toMatch(
        new RegExp(`^petstore: cannot listen on 127\\.0\\.0\\.1:${taken.port}: .*in use`),
      )
      expect(served.stderr).not.toMatch(/\n\s+at /)
      expect(served.code).toBe(1)
      expect(Date.now() - started).toBeLessThan(5_000)
    } finally {
      taken.stop(true)
    }
  })
})
