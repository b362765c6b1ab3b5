/**
 * A store's first secrets (the bootstrap key, the first operator's password) are written to files named
 * after the store. A PostgreSQL database tried in the folder of a data file, as the guide to several
 * instances has a reader do after the quick start, must not replace that data file's files, nor remove
 * them when its own admin's password changes.
 */
import { afterAll, expect, setDefaultTimeout, test } from 'bun:test'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { tempDir } from '../support/binary'
import { postgresForSuite } from '../support/postgres'
import { auth, cliAsync, killSpawned, startWithConsole } from './helpers'

afterAll(killSpawned)
setDefaultTimeout(60_000)
const cluster = postgresForSuite()

test("a PostgreSQL store started in a data file's folder keeps its first secrets apart from the data file's", async () => {
  const folder = tempDir()
  const data = join(folder, 'data')
  const embedded = await startWithConsole({ dataFile: join(data, 'petstore.db'), cwd: folder })
  expect(await embedded.stop()).toBe(0)
  const keyFile = join(data, 'petstore-bootstrap-key.txt')
  const passwordFile = join(data, 'petstore-console-password.txt')
  const before = [readFileSync(keyFile, 'utf8'), readFileSync(passwordFile, 'utf8')]
  expect(before[0]!.trim()).toBe(embedded.bootstrapKey!)

  const url = await cluster.createDatabase('secrets_apart')
  const shared = await startWithConsole({ databaseUrl: url, cwd: folder })
  const own = join(data, `petstore-postgres-127.0.0.1-${new URL(url).port}-secrets_apart`)
  expect(shared.stderr()).toContain(`its secret is in ${own}-bootstrap-key.txt (readable by this user only)`)
  expect(shared.stderr()).toContain(`its password is in ${own}-console-password.txt (readable by this user only)`)
  expect(readFileSync(`${own}-bootstrap-key.txt`, 'utf8').trim()).toBe(shared.bootstrapKey!)
  expect((await fetch(`${shared.base}/pets`, { headers: auth(shared.bootstrapKey!) })).status).toBe(200)
  expect([readFileSync(keyFile, 'utf8'), readFileSync(passwordFile, 'utf8')]).toEqual(before)

  // The database's admin gets a new password: its own file goes, the data file's stays.
  const reset = await cliAsync(['operators', 'reset-password', 'admin'], { cwd: folder, env: { PETSTORE_DATABASE_URL: url } })
  expect(reset.code).toBe(0)
  expect(reset.stderr).toContain(`removed ${own}-console-password.txt, which held the old password`)
  expect(existsSync(`${own}-console-password.txt`)).toBe(false)
  expect(readFileSync(passwordFile, 'utf8')).toBe(before[1]!)
  expect(await shared.stop()).toBe(0)
})
