/**
 * A command waits for another process's write lock on the data file: a busy server commits back to back,
 * and on a slow disk each commit holds the lock for its fsync, so `keys create` or `operators
 * reset-password` that gave up after 5 s ("the data file cannot be written now (SQLITE_BUSY)") failed now
 * and then beside a busy server. Here another process holds the lock for 6 s, longer than that.
 */
import { expect, test } from 'bun:test'
import { join } from 'node:path'
import { cli, createKeyWithCli, eventually, tempDir } from '../support/binary'
import { cliAsync } from './helpers'

/** How long the lock is held: the fault's length, past the 5 s a command used to wait. */
const HELD_MS = 6_000

/** Another process holding the data file's write lock (an open immediate transaction) until its stdin ends. */
function holdWriteLock(dataFile: string) {
  const holder = Bun.spawn(
    [
      process.execPath,
      '-e',
      `const { Database } = require('bun:sqlite')
       const db = new Database(process.argv[1])
       db.run('BEGIN IMMEDIATE')
       console.log('held')
       for await (const _ of Bun.stdin.stream()) {}
       db.run('COMMIT')`,
      dataFile,
    ],
    { stdin: 'pipe', stdout: 'pipe', stderr: 'inherit' },
  )
  let said = ''
  void (async () => {
    for await (const chunk of holder.stdout) said += new TextDecoder().decode(chunk)
  })()
  return {
    held: () => eventually(() => said.includes('held'), 10_000),
    release: async () => {
      holder.stdin.end()
      await holder.exited
    },
  }
}

test(`keys create waits for a write lock another process holds for ${HELD_MS / 1000} s, and then makes the key`, async () => {
  const dataFile = join(tempDir(), 'petstore.db')
  createKeyWithCli(dataFile, ['--plan', 'pro', '--name', 'first'])
  const lock = holdWriteLock(dataFile)
  try {
    await lock.held()
    let ended = false
    const creating = cliAsync(['keys', 'create', '--plan', 'free', '--name', 'waited', '--data', dataFile]).finally(() => {
      ended = true
    })
    await Bun.sleep(HELD_MS)
    expect(ended).toBe(false)
    await lock.release()
    const created = await creating
    expect({ code: created.code, stderr: created.stderr.includes('cannot be written') ? created.stderr : '' }).toEqual({
      code: 0,
      stderr: '',
    })
  } finally {
    await lock.release()
  }
  const names = JSON.parse(cli(['keys', 'list', '--json', '--data', dataFile]).stdout).map((key: { name: string }) => key.name)
  expect(names.sort()).toEqual(['first', 'waited'])
}, 30_000)
