/**
 * Messages that say what is wrong, from the binary: a backup into a folder that does not exist names
 * the folder, a writable data file in a read-only folder is not called a read-only file, a short flag
 * from habit (-p) is pointed at the long one, and `operators reset-password admin` does not leave the
 * first start's password file holding a password that no longer works.
 */
import { afterAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { chmodSync, existsSync, mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { cli, createKeyWithCli, startServer, tempDir } from '../support/binary'
import { killSpawned, serveExpectingFailure, spawnServe } from './helpers'

setDefaultTimeout(60_000)
afterAll(killSpawned)

describe('messages', () => {
  test('backup into a folder that does not exist says so, and names the folder', () => {
    const dataFile = join(tempDir(), 'petstore.db')
    createKeyWithCli(dataFile, ['--plan', 'pro'])
    const result = cli(['backup', '--data', dataFile, '/no/such/dir/b.db'])
    expect(result.code).toBe(1)
    expect(result.stderr).toBe('petstore: cannot write the backup to /no/such/dir/b.db: the folder /no/such/dir does not exist\n')
  })

  test('-p is pointed at --port, -d at --data', () => {
    const port = cli(['serve', '-p', '8080'])
    expect(port.code).toBe(2)
    expect(port.stderr.trim().split('\n').at(-1)).toBe('petstore: unknown option -p (did you mean --port?)')
    const data = cli(['keys', 'list', '-d', 'x.db'])
    expect(data.stderr.trim().split('\n').at(-1)).toMatch(/^petstore: unknown option -d \(did you mean --data(?: or --[a-z-]+)*\?\)$/)
  })

  test('a writable data file in a read-only folder is reported as such, not as a read-only file', async () => {
    const dir = join(tempDir(), 'data')
    mkdirSync(dir)
    const dataFile = join(dir, 'petstore.db')
    createKeyWithCli(dataFile, ['--plan', 'pro'])
    // Root passes permission checks: the folder is made immutable instead (chattr), as a read-only
    // mount would be; anyone else gets mode 555.
    const root = process.getuid?.() === 0
    const lock = (on: boolean) =>
      root ? Bun.spawnSync(['chattr', on ? '+i' : '-i', dir]).exitCode : (chmodSync(dir, on ? 0o555 : 0o755), 0)
    expect(lock(true)).toBe(0)
    try {
      const server = await spawnServe(['--port', '0', '--host', '127.0.0.1', '--data', dataFile, '--console-address', 'off'])
      expect(server.stderr()).toContain(
        `petstore: ${dataFile} is in a read-only folder (SQLite writes its -wal and -shm files beside it): serving reads;`,
      )
      expect(server.stderr()).not.toContain(`${dataFile} is read-only`)
      await server.stop()
    } finally {
      lock(false)
    }
  })

  test('operators reset-password admin removes the password file the first start wrote', async () => {
    const server = await startServer({ console: true })
    const file = server.dataFile.replace(/\.db$/, '-console-password.txt')
    expect(existsSync(file)).toBe(true)
    await server.stop()
    const reset = cli(['operators', 'reset-password', 'admin', '--data', server.dataFile])
    expect(reset.code).toBe(0)
    expect(existsSync(file)).toBe(false)
    expect(reset.stderr).toContain(`petstore: removed ${file}, which held the old password`)
  })

  test('--console-host with a port that is not 1 to 65535 as a client writes it is a usage error naming the flag', async () => {
    for (const value of ['console.example:0', 'console.example:00080', 'console.example:99999', 'console.example:']) {
      const refused = await serveExpectingFailure(['--port', '0', '--console-host', value, '--data', join(tempDir(), 'p.db')])
      expect({ value, code: refused.code, listened: refused.listened }).toEqual({ value, code: 2, listened: false })
      expect(refused.stderr).toContain(`--console-host must be a host name, optionally with :PORT from 1 to 65535`)
      expect(refused.stderr).toContain(`not "${value}"`)
    }
    const fromVariable = await serveExpectingFailure(['--port', '0', '--data', join(tempDir(), 'p.db')], {
      env: { PETSTORE_CONSOLE_HOST: 'console.example:0' },
    })
    expect(fromVariable.code).toBe(2)
    expect(fromVariable.stderr).toContain('PETSTORE_CONSOLE_HOST must be a host name')
  })
})
