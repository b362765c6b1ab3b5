/**
 * A start that fails after it opened the data file undoes what it made, wherever it fails: here the app
 * itself refuses (a ban rule the limiter does not take, which the config would have refused), and the
 * new data file, its lock and its folder are gone.
 */
import { expect, test } from 'bun:test'
import { readdirSync } from 'node:fs'
import { join } from 'node:path'
import { resolveConfig } from '../../src/config'
import { Server } from '../../src/server'
import { tempDir } from '../support/binary'

test('an app that cannot be built leaves no data file, lock or folder behind', async () => {
  const dir = tempDir()
  const config = resolveConfig({ host: '127.0.0.1', port: '0', data: join(dir, 'new', 'p.db'), consoleAddress: 'off' }, {})
  const start = Server.start({ ...config, banAfter: 500_000 }, { warn: () => {}, logSink: null })
  await expect(start).rejects.toThrow('banAfter must be 1..100000')
  expect(readdirSync(dir)).toEqual([])
})
