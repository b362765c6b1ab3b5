/**
 * `petstore backup FILE`: a consistent copy taken while the server runs and writes, which the server
 * opens as a data file; never overwriting an existing file; owner-only.
 */
import { afterAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { Database } from 'bun:sqlite'
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { BINARY, cleanEnv, cli, createKeyWithCli, eventually, startServer, tempDir } from '../support/binary'
import { cliAsync, killSpawned, listAll, looksLikeStackTrace, type PetBody, postPet, reasonLine } from './helpers'

afterAll(killSpawned)
// Process tests wait on real processes; bunfig's [test] timeout is not applied by bun test 1.4.
setDefaultTimeout(20_000)

describe('backup', () => {
  test('taken while a writer posts, it opens with the server and holds every pet acknowledged before it began', async () => {
    const dir = tempDir()
    const dataFile = join(dir, 'live.db')
    const backupFile = join(dir, 'copy.db')
    const key = createKeyWithCli(dataFile, ['--plan', 'enterprise', '--rpm', '1000000', '--rpd', '1000000'])
    const server = await startServer({ dataFile, args: ['--no-access-log'] })
    const acknowledged: PetBody[] = []
    let writing = true
    // Eight writers, so some answer while the backup runs even when a busy host slows each one down.
    const writer = Promise.all(
      Array.from({ length: 8 }, async (_, w) => {
        for (let i = 0; writing; i++) {
          const response = await postPet(server.base, key, { name: `pet ${w}.${i}`, categoryId: i })
          expect(response.status).toBe(201)
          acknowledged.push((await response.json()) as PetBody)
        }
      }),
    )
    await eventually(() => acknowledged.length >= 100)
    const before = acknowledged.slice()
    const result = await cliAsync(['backup', backupFile, '--data', dataFile])
    const duringBackup = acknowledged.length - before.length
    writing = false
    await writer
    expect({ code: result.code, stderr: result.stderr }).toEqual({ code: 0, stderr: expect.any(String) })
    expect(result.stdout).toBe('')
    // The writer really ran alongside.
    expect(duringBackup).toBeGreaterThan(0)
    expect(statSync(backupFile).mode & 0o777).toBe(0o600)
    expect(await server.stop()).toBe(0)

    const fromBackup = await startServer({ dataFile: backupFile })
    expect(fromBackup.bootstrapKey).toBeUndefined()
    const stored = await listAll(fromBackup.base, key, (url) => url.replace(/^http:\/\/localhost:\d+/, fromBackup.origin))
    const byId = new Map(stored.map((pet) => [pet.id, pet]))
    for (const pet of before) expect(byId.get(pet.id)).toEqual(pet)
    // Consistent: ids form an unbroken run from 1 (a torn copy would miss some).
    expect(stored.map((p) => p.id)).toEqual(stored.map((_, i) => i + 1))
    expect(await fromBackup.stop()).toBe(0)
  }, 20_000)

  test('to an existing file it fails non-zero and leaves the file as it was', () => {
    const dir = tempDir()
    const dataFile = join(dir, 'petstore.db')
    createKeyWithCli(dataFile, ['--plan', 'pro'])
    const target = join(dir, 'precious.db')
    writeFileSync(target, 'do not overwrite me')
    const result = cli(['backup', target, '--data', dataFile])
    expect(result.code).not.toBe(0)
    expect(reasonLine(result.stderr)).toMatch(/^petstore: .*(exist)/)
    expect(looksLikeStackTrace(result.stderr)).toBe(false)
    expect(readFileSync(target, 'utf8')).toBe('do not overwrite me')
  })

  test('a second backup to the same name fails; the first copy is intact', async () => {
    const dir = tempDir()
    const dataFile = join(dir, 'petstore.db')
    const key = createKeyWithCli(dataFile, ['--plan', 'pro'])
    const target = join(dir, 'copy.db')
    expect(cli(['backup', target, '--data', dataFile]).code).toBe(0)
    const bytes = readFileSync(target)
    expect(cli(['backup', target, '--data', dataFile]).code).not.toBe(0)
    expect(readFileSync(target).equals(bytes)).toBe(true)
    const server = await startServer({ dataFile: target })
    expect((await fetch(`${server.base}/pets`, { headers: { authorization: `Bearer ${key}` } })).status).toBe(200)
    expect(await server.stop()).toBe(0)
  })

  test('into a folder that does not exist: either the folder is made or a one-line reason, never a stack trace', () => {
    const dir = tempDir()
    const dataFile = join(dir, 'petstore.db')
    createKeyWithCli(dataFile, ['--plan', 'pro'])
    const target = join(dir, 'no-such-folder', 'copy.db')
    const result = cli(['backup', target, '--data', dataFile])
    expect(looksLikeStackTrace(result.stderr)).toBe(false)
    if (result.code === 0) expect(statSync(target).mode & 0o777).toBe(0o600)
    else expect(result.stderr.trimEnd().split('\n')).toEqual([expect.stringMatching(/^petstore: .*no-such-folder/)])
  })

  test('to an empty name, it says the name is empty (exit 2 with the usage), and writes nothing', () => {
    const dir = tempDir()
    const dataFile = join(dir, 'petstore.db')
    createKeyWithCli(dataFile, ['--plan', 'pro'])
    const before = readdirSync(dir).sort()
    const result = cli(['backup', '', '--data', dataFile], { cwd: dir })
    expect(result.code).toBe(2)
    expect(reasonLine(result.stderr)).toBe('petstore: backup needs a file name, and the FILE given is empty')
    expect(result.stderr).toContain('Usage: petstore backup FILE')
    expect(readdirSync(dir).sort()).toEqual(before)
  })

  test('onto a symbolic link to a missing file, it says so, and creates neither the link’s target nor a copy', () => {
    const dir = tempDir()
    const dataFile = join(dir, 'petstore.db')
    createKeyWithCli(dataFile, ['--plan', 'pro'])
    const target = join(dir, 'copy.db')
    symlinkSync(join(dir, 'gone.db'), target)
    const result = cli(['backup', target, '--data', dataFile])
    expect(result.code).toBe(1)
    expect(result.stderr.trimEnd().split('\n')).toEqual([
      `petstore: ${target} is a symbolic link to ${join(dir, 'gone.db')}, which does not exist; a backup is only written as a new file, never through a link: choose a new file name`,
    ])
    expect(existsSync(join(dir, 'gone.db'))).toBe(false)
    expect(readdirSync(dir).filter((name) => name.includes('partial'))).toEqual([])
  })

  test('of a data file that does not exist, it fails and creates neither file', () => {
    const dir = tempDir()
    const missing = join(dir, 'typo', 'petstore.db')
    const target = join(dir, 'copy.db')
    const result = cli(['backup', target, '--data', missing])
    expect(result.code).not.toBe(0)
    expect(reasonLine(result.stderr)).toMatch(/^petstore: /)
    expect(existsSync(missing)).toBe(false)
    expect(existsSync(target)).toBe(false)
  })
})

describe('a backup that does not finish', () => {
  test('killed while it copies, it leaves no file under the final name; the next one succeeds and removes what was abandoned', async () => {
    const dir = tempDir()
    const dataFile = join(dir, 'big.db')
    createKeyWithCli(dataFile, ['--plan', 'pro'])
    // A file large enough that the copy takes a while.
    const db = new Database(dataFile)
    db.transaction(() => {
      const insert = db.query('INSERT INTO pets (name, category_id, status, created_at) VALUES (?, 1, ?, 0)')
      for (let i = 0; i < 200_000; i++) insert.run(`${i}-${'x'.repeat(180)}`, 'available')
    })()
    db.close()
    const target = join(dir, 'out', 'copy.db')
    mkdirSync(join(dir, 'out'))
    const proc = Bun.spawn([BINARY, 'backup', target, '--data', dataFile], { env: cleanEnv(), stdout: 'ignore', stderr: 'ignore' })
    // As soon as the copy has begun (its temporary file is there), kill it.
    await eventually(() => readdirSync(join(dir, 'out')).length > 0, 10_000)
    proc.kill('SIGKILL')
    await proc.exited
    expect(existsSync(target)).toBe(false)
    const left = readdirSync(join(dir, 'out'))
    expect(left.every((name) => name.startsWith('.copy.db.partial-'))).toBe(true)
    // Left ten minutes and more, as when the next scheduled backup comes; beside it, the copy of a backup
    // still running (this test's own process stands for it), as old: that one is not touched.
    const hourAgo = new Date(Date.now() - 3_600_000)
    for (const name of left) utimesSync(join(dir, 'out', name), hourAgo, hourAgo)
    const running = join(dir, 'out', `.other.db.partial-${process.pid}`)
    writeFileSync(running, 'a copy being written')
    utimesSync(running, hourAgo, hourAgo)

    const again = cli(['backup', target, '--data', dataFile])
    expect(again.code).toBe(0)
    expect(readdirSync(join(dir, 'out')).sort()).toEqual([`.other.db.partial-${process.pid}`, 'copy.db'])
    const copy = new Database(target, { readonly: true })
    expect(copy.query<{ n: number }, []>('SELECT count(*) AS n FROM pets').get()!.n).toBe(200_000)
    copy.close()
  })
})
