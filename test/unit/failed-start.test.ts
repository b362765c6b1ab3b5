/**
 * The config and the app agree on what they accept, and a start that fails after it opened the data
 * file undoes what it made wherever it fails: here the app itself refuses (a ban rule the limiter does
 * not take, which the config would have refused), and the new data file, its lock and its folder go.
 */
import { expect, test } from 'bun:test'
import { readdirSync } from 'node:fs'
import { join } from 'node:path'
import { CONFIG_FLAGS, ConfigError, resolveConfig } from '../../src/config'
import { flagLines } from '../../src/flags/table'
import { BAN_AFTER } from '../../src/domain/ban-rule'
import { Server } from '../../src/server/server'
import { openSqliteStorage } from '../../src/storage/sqlite'
import { tempDir } from '../support/binary'

const quiet = { warn: () => {}, logSink: null }

test('an app that cannot be built leaves no data file, lock or folder behind', async () => {
  const dir = tempDir()
  const config = resolveConfig({ host: '127.0.0.1', port: '0', data: join(dir, 'new', 'p.db'), consoleAddress: 'off' }, {})
  const start = Server.start({ ...config, banAfter: BAN_AFTER.max + 1 }, quiet)
  await expect(start).rejects.toThrow(`banAfter must be 1..${BAN_AFTER.max}`)
  expect(readdirSync(dir)).toEqual([])
})

test('--ban-after: the largest value the config takes starts a server, the next is refused by the config', async () => {
  expect(() => resolveConfig({ banAfter: String(BAN_AFTER.max + 1) }, {})).toThrow(ConfigError)
  const config = resolveConfig({ host: '127.0.0.1', port: '0', consoleAddress: 'off', banAfter: String(BAN_AFTER.max) }, {})
  const storage = openSqliteStorage(':memory:')
  const server = await Server.start(config, { ...quiet, backend: { storage, close: async () => storage.close(), undo() {} } })
  expect(server.config.banAfter).toBe(BAN_AFTER.max)
  expect(await server.stop()).toBe(true)
})

test('each flag of the server that has a variable names it in its usage', () => {
  const usage = flagLines(CONFIG_FLAGS)
  for (const row of Object.values(CONFIG_FLAGS)) if (row.variable) expect(usage).toContain(`(${row.variable}`)
})
