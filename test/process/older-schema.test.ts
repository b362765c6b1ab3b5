/**
 * Commands that only read or copy leave a data file or database at an older schema as it is, so the
 * previous binary (and a backup taken before the upgrade) still opens it: `backup` copies the file at
 * its schema, `keys list`, `keys usage` and `operators list` refuse with one line naming both schemas;
 * a command that writes still upgrades. Older schemas are made as the previous version left them: the
 * last step (a saved day bucket's limits) taken back.
 */
import { Database } from 'bun:sqlite'
import { afterAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { join } from 'node:path'
import { MIGRATIONS as PG_MIGRATIONS } from '../../src/storage/postgres/migrations'
import { MIGRATIONS } from '../../src/storage/sqlite/migrations'
import { cli, createKeyWithCli, tempDir } from '../support/binary'
import { postgresForSuite } from '../support/postgres'
import { TAKE_BACK_LAST_STEP } from '../support/previous-schema'
import { killSpawned } from './helpers'

afterAll(killSpawned)
setDefaultTimeout(60_000)

const READS = [
  ['keys', 'list'],
  ['keys', 'usage'],
  ['operators', 'list'],
]

const refusal = (where: string, version: number, current: number) =>
  new RegExp(
    `^petstore: ${where.replace(/[.]/g, '\\.')} is at schema ${version} and this petstore reads only schema ${current}; ` +
      'commands that only read leave it as it is: petstore serve, or a command that writes, upgrades it \\(take a backup first; see docs/upgrading\\.md\\)\\n$',
  )

/** A data file as the previous petstore left it: one key, the last schema step not applied. */
function olderDataFile(): string {
  const dataFile = join(tempDir(), 'petstore.db')
  createKeyWithCli(dataFile, ['--plan', 'pro', '--name', 'old'])
  const db = new Database(dataFile)
  for (const statement of TAKE_BACK_LAST_STEP) db.run(statement)
  db.run(`PRAGMA user_version = ${MIGRATIONS.length - 1}`)
  db.close()
  return dataFile
}

function schemaOf(file: string): { version: number; columns: string[] } {
  const db = new Database(file, { readonly: true })
  try {
    const version = db.query<{ user_version: number }, []>('PRAGMA user_version').get()!.user_version
    const columns = db
      .query<{ name: string }, []>("SELECT name FROM pragma_table_info('limiter_state')")
      .all()
      .map((c) => c.name)
    return { version, columns }
  } finally {
    db.close()
  }
}

describe('a data file at an older schema', () => {
  test('backup copies it as it is: the file and the copy stay at the older schema, and the copy holds the key', () => {
    const dataFile = olderDataFile()
    const copy = join(tempDir(), 'before-upgrade.db')
    const result = cli(['backup', '--data', dataFile, copy])
    expect(result.code).toBe(0)
    for (const file of [dataFile, copy]) {
      const schema = schemaOf(file)
      expect({ file, version: schema.version }).toEqual({ file, version: MIGRATIONS.length - 1 })
      expect(schema.columns).not.toContain('rpm')
    }
    const db = new Database(copy, { readonly: true })
    expect(db.query('SELECT name FROM api_keys').all()).toEqual([{ name: 'old' }])
    db.close()
  })

  test('keys list, keys usage and operators list refuse with one line and leave it at its schema; keys create upgrades it', () => {
    const dataFile = olderDataFile()
    for (const command of READS) {
      const result = cli([...command, '--data', dataFile])
      expect({ command, version: schemaOf(dataFile).version }).toEqual({ command, version: MIGRATIONS.length - 1 })
      expect({ command, code: result.code, stdout: result.stdout }).toEqual({ command, code: 1, stdout: '' })
      expect(result.stderr).toMatch(refusal(dataFile, MIGRATIONS.length - 1, MIGRATIONS.length))
    }
    createKeyWithCli(dataFile, ['--plan', 'free', '--name', 'new'])
    expect(schemaOf(dataFile)).toMatchObject({ version: MIGRATIONS.length })
    expect(schemaOf(dataFile).columns).toContain('rpm')
    const listed = cli(['keys', 'list', '--json', '--data', dataFile])
    expect(listed.code).toBe(0)
    expect((JSON.parse(listed.stdout) as { name: string }[]).map((k) => k.name).sort()).toEqual(['new', 'old'])
  })
})

describe('a PostgreSQL database at an older schema', () => {
  const cluster = postgresForSuite()

  test('keys list, keys usage and operators list refuse with one line and change nothing; keys create upgrades it', async () => {
    const url = await cluster.createDatabase('older')
    const env = { PETSTORE_DATABASE_URL: url }
    expect(cli(['keys', 'create', '--plan', 'pro', '--name', 'old'], { env }).code).toBe(0)
    const admin = new Bun.SQL(url, { max: 1 })
    const schema = async () => {
      const [row] = await admin`SELECT max(version) AS version FROM petstore_schema`
      const columns = await admin`SELECT column_name FROM information_schema.columns WHERE table_name = 'limiter_state'`
      return { version: Number(row.version), columns: (columns as { column_name: string }[]).map((c) => c.column_name) }
    }
    try {
      // As the previous version left it: the last step taken back.
      for (const statement of TAKE_BACK_LAST_STEP) await admin.unsafe(statement)
      await admin`DELETE FROM petstore_schema WHERE version = ${PG_MIGRATIONS.length}`
      for (const command of READS) {
        const result = cli(command, { env })
        const now = await schema()
        expect({ command, version: now.version }).toEqual({ command, version: PG_MIGRATIONS.length - 1 })
        expect(now.columns).not.toContain('rpm')
        expect({ command, code: result.code, stdout: result.stdout }).toEqual({ command, code: 1, stdout: '' })
        expect(result.stderr).toMatch(refusal(`the database at ${url}`, PG_MIGRATIONS.length - 1, PG_MIGRATIONS.length))
      }
      expect(cli(['keys', 'create', '--plan', 'free', '--name', 'new'], { env }).code).toBe(0)
      const upgraded = await schema()
      expect(upgraded.version).toBe(PG_MIGRATIONS.length)
      expect(upgraded.columns).toContain('rpm')
      expect(cli(['keys', 'list'], { env }).code).toBe(0)
    } finally {
      await admin.close()
    }
  })

  test('on an empty database they create nothing', async () => {
    const url = await cluster.createDatabase('empty')
    const admin = new Bun.SQL(url, { max: 1 })
    try {
      const result = cli(['keys', 'list'], { env: { PETSTORE_DATABASE_URL: url } })
      expect(await admin`SELECT tablename FROM pg_tables WHERE schemaname = 'public'`).toEqual([])
      expect(result.code).toBe(1)
      expect(result.stderr).toMatch(refusal(`the database at ${url}`, 0, PG_MIGRATIONS.length))
    } finally {
      await admin.close()
    }
  })
})
