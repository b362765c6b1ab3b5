/**
 * `petstore restore FILE` after a crash: a server killed with `kill -9` under writers leaves a -wal
 * beside the data file, which SQLite would replay onto a backup copied over the file by hand. restore
 * keeps the old file with its -wal and -shm under one dated name, serves exactly the backup, refuses a
 * running server and bad backups without touching anything, and survives being killed at any step.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { Database } from 'bun:sqlite'
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { BINARY, cleanEnv, cli, createKeyWithCli, eventually, startServer, tempDir } from '../support/binary'
import {
  auth,
  cliAsync,
  killSpawned,
  listAll,
  looksLikeStackTrace,
  type PetBody,
  postPet,
  reasonLine,
  serveExpectingFailure,
} from './helpers'

afterAll(killSpawned)
setDefaultTimeout(60_000)

const PARTS = ['', '-wal', '-shm']
/** What a backup from elsewhere could hold (issue 30): run by SQLite at the server's next create. */
const PLANTED_TRIGGER = 'CREATE TRIGGER raise_limits AFTER INSERT ON pets BEGIN UPDATE api_keys SET rpm = 999999999; END'

interface Row {
  id: number
  name: string
  categoryId: number
  status: string
}

function petsIn(file: string): Row[] {
  const db = new Database(file, { readonly: true })
  try {
    return db.query<Row, []>('SELECT id, name, category_id AS categoryId, status FROM pets ORDER BY id').all()
  } finally {
    db.close()
  }
}

function keyIdsIn(file: string): string[] {
  const db = new Database(file, { readonly: true })
  try {
    return db
      .query<{ id: string }, []>('SELECT id FROM api_keys ORDER BY id')
      .all()
      .map((row) => row.id)
  } finally {
    db.close()
  }
}

/** Copies a data file with whichever of its -wal and -shm exist into `dir`, under `name`. */
function copyParts(from: string, dir: string, name = 'live.db'): string {
  mkdirSync(dir, { recursive: true })
  for (const suffix of PARTS) if (existsSync(from + suffix)) copyFileSync(from + suffix, join(dir, name) + suffix)
  return join(dir, name)
}

/** Every file in `dir` with its bytes, to show that nothing changed. */
function snapshot(dir: string): Record<string, string> {
  return Object.fromEntries(
    readdirSync(dir)
      .sort()
      .map((name) => [name, readFileSync(join(dir, name)).toString('base64')]),
  )
}

// Made once: a store crashed under writers (its -wal holds pets its main file lacks) and a backup of
// it taken earlier, with the keys and pets each holds.
let root: string
let crashed: string
let backup: string
let key: string
let laterKey: string
let acknowledged: PetBody[]
let inBackup: Row[]

beforeAll(async () => {
  root = tempDir()
  const dataFile = join(root, 'live', 'live.db')
  mkdirSync(join(root, 'live'))
  key = createKeyWithCli(dataFile, ['--plan', 'enterprise', '--rpm', '1000000', '--rpd', '1000000'])
  let server = await startServer({ dataFile, args: ['--no-access-log'] })
  acknowledged = []
  const post = async (i: number) => {
    const response = await postPet(server.base, key, {
      name: `pet ${i}`,
      categoryId: i % 7,
      status: ['available', 'pending', 'sold'][i % 3],
    })
    expect(response.status).toBe(201)
    acknowledged.push((await response.json()) as PetBody)
  }
  for (let i = 0; i < 40; i++) await post(i)
  backup = join(root, 'backup.db')
  expect((await cliAsync(['backup', backup, '--data', dataFile])).code).toBe(0)
  inBackup = petsIn(backup)
  expect(inBackup.length).toBeGreaterThanOrEqual(40)
  laterKey = createKeyWithCli(dataFile, ['--plan', 'pro'])
  // Eight writers until well past the backup, then kill -9 while they write. What matters is a crash
  // that leaves acknowledged pets only in the -wal; a kill that falls just after a checkpoint leaves
  // none there, so the crash is made again (a server on the same file) until one does.
  let next = 1000
  for (let attempt = 1; ; attempt++) {
    let writing = true
    const target = acknowledged.length + 1500
    const writers = Array.from({ length: 8 }, async () => {
      while (writing) await post(next++).catch(() => {})
    })
    await eventually(() => acknowledged.length >= target, 30_000)
    await server.stop('SIGKILL')
    writing = false
    await Promise.all(writers)
    expect(existsSync(`${dataFile}-wal`)).toBe(true)
    crashed = copyParts(dataFile, join(root, `crashed-${attempt}`))
    const mainOnly = copyParts(crashed, join(root, `main-only-${attempt}`)) // then drop its -wal and -shm
    for (const suffix of ['-wal', '-shm']) Bun.spawnSync(['rm', '-f', mainOnly + suffix])
    if (petsIn(mainOnly).length < acknowledged.length) break
    expect(attempt).toBeLessThan(3)
    server = await startServer({ dataFile, args: ['--no-access-log'] })
  }
}, 120_000)

/** The pets acknowledged before the crash, all present in `file` (opened with its -wal). */
function expectHoldsAcknowledged(file: string): void {
  const stored = new Map(petsIn(file).map((pet) => [pet.id, pet]))
  const missing = acknowledged.filter((pet) => stored.get(pet.id)?.name !== pet.name)
  expect(missing).toEqual([])
}

function keptParts(dir: string): string[] {
  return readdirSync(dir)
    .filter((name) => name.startsWith('live.db.before-restore-'))
    .sort()
}

describe('petstore restore', () => {
  test('after kill -9 under writers, the server serves exactly the backup, and the old file is kept whole', async () => {
    const dir = join(root, 'restored')
    const file = copyParts(crashed, dir)
    const result = await cliAsync(['restore', backup, '--data', file])
    expect({ code: result.code, stdout: result.stdout }).toEqual({ code: 0, stdout: '' })
    expect(result.stderr.trimEnd().split('\n')).toEqual([
      expect.stringMatching(/^petstore: restored .*backup\.db into .*live\.db; the previous data file is kept as /),
    ])
    const stem = keptParts(dir)[0]!
    expect(keptParts(dir)).toEqual(PARTS.map((suffix) => stem + suffix).sort())
    expect(stem).toMatch(/^live\.db\.before-restore-\d{8}T\d{6}Z$/)
    expect(readdirSync(dir).filter((name) => name.includes('restoring') || name.includes('restore-in-progress'))).toEqual([])

    const server = await startServer({ dataFile: file })
    expect(server.bootstrapKey).toBeUndefined()
    const served = await listAll(server.base, key, (url) => url.replace(/^http:\/\/localhost:\d+/, server.origin))
    expect(served).toEqual(inBackup as PetBody[])
    expect((await fetch(`${server.base}/pets`, { headers: auth(laterKey) })).status).toBe(401)
    expect(await server.stop()).toBe(0)
    const listed = cli(['keys', 'list', '--json', '--data', file])
    expect(listed.code).toBe(0)
    expect((JSON.parse(listed.stdout) as { id: string }[]).map((k) => k.id).sort()).toEqual(keyIdsIn(backup))

    // The kept copy opens with its own -wal: every pet acknowledged before the kill, and the later key.
    expectHoldsAcknowledged(join(dir, stem))
    expect(keyIdsIn(join(dir, stem)).length).toBe(keyIdsIn(backup).length + 1)
  })

  test('refuses while a server holds the data file, with one line, and changes nothing', async () => {
    const dir = join(root, 'running')
    const file = copyParts(backup, dir)
    const server = await startServer({ dataFile: file, args: ['--no-access-log'] })
    expect((await postPet(server.base, key, { name: 'while running', categoryId: 1 })).status).toBe(201)
    const before = readdirSync(dir).sort()
    const result = await cliAsync(['restore', backup, '--data', file])
    expect(result.code).toBe(1)
    expect(result.stderr.trimEnd().split('\n')).toEqual([
      expect.stringMatching(/^petstore: .*live\.db is in use by petstore process \d+ \(a server, or a restore\); stop it first$/),
    ])
    expect(readdirSync(dir).sort()).toEqual(before)
    const served = await listAll(server.base, key, (url) => url.replace(/^http:\/\/localhost:\d+/, server.origin))
    expect(served.at(-1)!.name).toBe('while running')
    expect(await server.stop()).toBe(0)
  })

  const badBackups: [string, (file: string) => void, RegExp][] = [
    [
      'not SQLite',
      (file) => writeFileSync(file, 'name,status\nRex,available\n'.repeat(100)),
      /is not a petstore data file \(it is not an SQLite database\)/,
    ],
    ['empty', (file) => writeFileSync(file, ''), /holds no petstore data/],
    [
      'damaged',
      (file) => {
        copyFileSync(backup, file)
        const db = new Database(file)
        const page = db.query<{ rootpage: number }, []>("SELECT rootpage FROM sqlite_schema WHERE name = 'pets_by_status'").get()!.rootpage
        const size = db.query<{ page_size: number }, []>('PRAGMA page_size').get()!.page_size
        db.close()
        const bytes = readFileSync(file)
        bytes.fill(0x41, (page - 1) * size + 100, page * size - 8)
        writeFileSync(file, bytes)
      },
      /is damaged \(Tree \d+ page \d+ .*\); choose another backup$/,
    ],
    [
      'from a newer petstore',
      (file) => {
        copyFileSync(backup, file)
        const db = new Database(file)
        db.run('PRAGMA user_version = 999')
        db.close()
      },
      /was written by a newer petstore \(schema 999, this one knows up to \d+\); run that newer petstore, or go back to this version by restoring the backup taken before the upgrade \(petstore restore BACKUP/,
    ],
    [
      'another application’s SQLite file',
      (file) => {
        const db = new Database(file)
        db.run('CREATE TABLE notes (text TEXT)')
        db.close()
      },
      /is an SQLite database that petstore did not create/,
    ],
    [
      'planted with code (a trigger, a view) and a table of its own',
      (file) => {
        copyFileSync(backup, file)
        const db = new Database(file)
        db.run(PLANTED_TRIGGER)
        db.run('CREATE VIEW all_hashes AS SELECT secret_hash FROM api_keys')
        db.run('CREATE TABLE notes (text TEXT)')
        db.close()
      },
      /holds what petstore does not create \(table "notes", trigger "raise_limits", view "all_hashes"\); refusing to use it: restore a backup made with petstore backup, or remove them with the sqlite3 shell$/,
    ],
    [
      'made with petstore’s tables changed (a CHECK refusing every new pet, a generated column)',
      (file) => {
        copyFileSync(backup, file)
        const db = new Database(file)
        db.run('ALTER TABLE api_keys ADD COLUMN shout TEXT GENERATED ALWAYS AS (upper(name)) VIRTUAL')
        // pets rebuilt as it is, but for a CHECK no name passes.
        db.run(`CREATE TABLE rebuilt (
          id INTEGER PRIMARY KEY AUTOINCREMENT,
          name TEXT NOT NULL CHECK (length(name) < 0),
          category_id INTEGER NOT NULL,
          status TEXT NOT NULL CHECK (status IN ('available', 'pending', 'sold')),
          created_at INTEGER NOT NULL
        )`)
        db.run('DROP TABLE pets')
        db.run('ALTER TABLE rebuilt RENAME TO pets')
        db.run('CREATE INDEX pets_by_status ON pets (status, id)')
        db.close()
      },
      /holds petstore's table "api_keys", table "pets" made otherwise than petstore makes it \(schema \d+\); refusing to use it: restore a backup made with petstore backup$/,
    ],
  ]
  for (const [kind, make, reason] of badBackups)
    test(`refuses a backup that is ${kind}, with one line, and leaves the data file and its -wal untouched`, async () => {
      const dir = join(root, `bad-${kind.replace(/\W+/g, '-')}`)
      const file = copyParts(crashed, dir)
      const bad = join(root, `bad-${kind.replace(/\W+/g, '-')}.db`)
      make(bad)
      const before = snapshot(dir)
      const result = await cliAsync(['restore', bad, '--data', file])
      expect(result.code).toBe(1)
      expect(looksLikeStackTrace(result.stderr)).toBe(false)
      expect(result.stderr.trimEnd().split('\n')).toEqual([expect.stringMatching(reason)])
      expect(result.stderr).toContain(bad)
      // Unchanged to the byte, lock file included: not even a temporary copy is left.
      expect(snapshot(dir)).toEqual({ ...before, 'live.db.lock': expect.any(String) })
      expectHoldsAcknowledged(file)
    })

  test('a data file with a trigger planted in it is refused at the start, naming it; nothing runs it', async () => {
    const dir = join(root, 'planted')
    const file = copyParts(backup, dir)
    const db = new Database(file)
    db.run(PLANTED_TRIGGER)
    db.close()
    const result = await serveExpectingFailure(['--data', file, '--port', '0'])
    console.log(`serve on a data file with a planted trigger: exit ${result.code}; ${reasonLine(result.stderr)}`)
    expect(result.listened).toBe(false)
    expect(result.code).not.toBe(0)
    expect(reasonLine(result.stderr)).toMatch(/holds what petstore does not create \(trigger "raise_limits"\); refusing to use it/)
    expect(looksLikeStackTrace(result.stderr)).toBe(false)
  })

  test('with PostgreSQL, points to pg_restore and exits 2', () => {
    const result = cli(['restore', backup, '--database-url', 'postgres://petstore@127.0.0.1:1/petstore'])
    expect(result.code).toBe(2)
    expect(reasonLine(result.stderr)).toBe('petstore: restore replaces the data file; with PostgreSQL, use pg_restore (see the README)')
  })
})

/** The calls by which restore changes files. */
const FILE_CHANGES = 'rename,renameat,renameat2,unlink,unlinkat,fsync,copy_file_range'

/** `petstore restore` under strace, which does `action` at the Nth of each of FILE_CHANGES: its exit code and stderr. */
async function restoreUnderStrace(action: string, n: number, file: string): Promise<[number, string]> {
  const proc = Bun.spawn(
    [
      'strace',
      '-f',
      '-qq',
      '-o',
      '/dev/null',
      '-e',
      `trace=${FILE_CHANGES}`,
      '-e',
      `inject=${FILE_CHANGES}:${action}:when=${n}`,
      BINARY,
    ].concat(['restore', backup, '--data', file]),
    { env: cleanEnv(), stdout: 'ignore', stderr: 'pipe' },
  )
  return Promise.all([proc.exited, new Response(proc.stderr).text()])
}

describe('a restore killed with kill -9', () => {
  // strace kills the command at the entry of its Nth file-changing system call, for N = 1, 2, … until a
  // run completes: every point at which a crash could interrupt it.

  test('at any step leaves a store that opens as before or refuses clearly, and running it again finishes it', async () => {
    let completed = false
    const outcomes: string[] = []
    for (let n = 1; !completed && n <= 40; n++) {
      const dir = join(root, `killed-${n}`)
      const file = copyParts(crashed, dir)
      const [code, stderr] = await restoreUnderStrace('signal=SIGKILL', n, file)
      completed = code === 0
      if (!completed) expect(stderr).toBe('')

      // Right after the kill: the old store, the backup, or a one-line refusal that says what to do.
      const keys = await cliAsync(['keys', 'list', '--json', '--data', file])
      if (keys.code === 0) {
        const ids = (JSON.parse(keys.stdout) as { id: string }[]).map((k) => k.id).sort()
        const restored = JSON.stringify(ids) === JSON.stringify(keyIdsIn(backup))
        outcomes.push(restored ? 'backup' : 'old')
        if (restored) expect(petsIn(file)).toEqual(inBackup)
        else expectHoldsAcknowledged(file)
      } else {
        outcomes.push('refused')
        expect(keys.code).toBe(1)
        expect(keys.stderr.trimEnd().split('\n')).toEqual([
          expect.stringMatching(/a restore of .*live\.db was interrupted .*; run petstore restore again to finish it$/),
        ])
      }

      const again = await cliAsync(['restore', backup, '--data', file])
      expect({ n, code: again.code, stderr: again.stderr }).toEqual({
        n,
        code: 0,
        stderr: expect.stringMatching(/^petstore: (restored|finished an interrupted restore)/),
      })
      expect(petsIn(file)).toEqual(inBackup)
      const kept = keptParts(dir)
      // One kept set when the killed run had moved nothing, or when the re-run finished its plan; a
      // run killed after finishing keeps its set, and the re-run keeps the restored backup beside it.
      const stems = kept.filter((name) => !name.endsWith('-wal') && !name.endsWith('-shm'))
      expect(stems.length).toBeGreaterThanOrEqual(1)
      expectHoldsAcknowledged(join(dir, stems[0]!))
      expect(readdirSync(dir).filter((name) => name.includes('restoring') || name.includes('restore-in-progress'))).toEqual([])
    }
    expect(completed).toBe(true)
    console.log(`kill points: ${outcomes.join(' ')}`)
    // The kills landed before, inside and after the renames.
    expect(outcomes).toContain('refused')
    expect(outcomes).toContain('old')
    expect(outcomes.length).toBeGreaterThanOrEqual(5)
  })
})

describe('a restore whose step the system refuses', () => {
  // strace fails the command's Nth file-changing system calls with EIO, as a disk error or an immutable
  // file (EPERM) would, for N = 1, 2, … until a run completes.

  test('at any step says in one line what it left: nothing changed, or half way and running it again finishes it', async () => {
    let completed = false
    const outcomes: string[] = []
    for (let n = 1; !completed && n <= 40; n++) {
      const dir = join(root, `refused-${n}`)
      const file = copyParts(crashed, dir)
      const [code, stderr] = await restoreUnderStrace('error=EIO', n, file)
      completed = code === 0
      const leftovers = () => readdirSync(dir).filter((name) => name.includes('restoring') || name.includes('restore-in-progress'))
      if (!completed) {
        expect({ n, code, lines: stderr.trimEnd().split('\n').length }).toEqual({ n, code: 1, lines: 1 })
        expect(stderr).not.toContain('unexpected error')
        expect(looksLikeStackTrace(stderr)).toBe(false)
      }
      const keys = await cliAsync(['keys', 'list', '--json', '--data', file])
      if (completed) outcomes.push('done')
      else if (/ was restored into .*, but syncing its folder failed \(.*EIO.*\); check the disk\n$/.test(stderr)) {
        expect(petsIn(file)).toEqual(inBackup)
        expect(leftovers()).toEqual([])
        outcomes.push('restored')
      } else if (keys.code === 0) {
        // Nothing changed: the store as it was, nothing of the restore left beside it.
        expect({ n, stderr }).toEqual({ n, stderr: expect.stringMatching(/^petstore: cannot (lock|restore) /) })
        expect(JSON.parse(keys.stdout).length).toBe(keyIdsIn(backup).length + 1)
        expectHoldsAcknowledged(file)
        expect(leftovers()).toEqual([])
        outcomes.push('unchanged')
      } else {
        expect({ n, stderr }).toEqual({
          n,
          stderr: expect.stringMatching(/stopped half way \(.*EIO.*\); once that is fixed, run petstore restore again to finish it\n$/),
        })
        expect(keys.stderr).toMatch(/a restore of .*live\.db was interrupted .*; run petstore restore again to finish it\n$/)
        outcomes.push('half way')
      }
      if (!completed) {
        const again = await cliAsync(['restore', backup, '--data', file])
        expect({ n, code: again.code }).toEqual({ n, code: 0 })
      }
      expect(petsIn(file)).toEqual(inBackup)
      expect(leftovers()).toEqual([])
    }
    expect(completed).toBe(true)
    console.log(`refused steps: ${outcomes.join(' ')}`)
    expect(outcomes).toContain('unchanged')
    expect(outcomes).toContain('half way')
  })
})
