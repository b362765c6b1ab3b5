/**
 * What the takeover suites share: the server to take over (a data file with one key, at a free port),
 * `serve --takeover` started beside it, and the checks around them.
 */
import { expect } from 'bun:test'
import { join } from 'node:path'
import { BINARY, cleanEnv, collect, createKeyWithCli, tempDir } from '../support/binary'
import { killedAtEnd, postPet, type RawServer, spawnServe, unusedPort } from './helpers'

// No console: its default port is fixed; the test that moves the console gives it a free one.
export const serveArgs = (port: number, dataFile: string) => [
  '--port',
  String(port),
  '--host',
  '127.0.0.1',
  '--data',
  dataFile,
  '--no-access-log',
  '--console-address',
  'off',
]

/** `serve --takeover` without waiting for it to listen, its stderr collected (all of it once `read` resolves). */
export function spawnTaker(args: string[]) {
  const proc = killedAtEnd(
    Bun.spawn([BINARY, 'serve', ...args, '--takeover'], { env: cleanEnv(), stdin: 'ignore', stdout: 'ignore', stderr: 'pipe' }),
  )
  const err = { text: '' }
  const read = collect(proc.stderr, err)
  return { proc, stderr: () => err.text, read }
}

export const UNLIMITED = ['--plan', 'enterprise', '--rpm', '1000000', '--rpd', '1000000']

/** A data file with one key, made with `keyFlags` (and whatever `fill` adds), and the server to take over: on it, at a free port. */
export async function oldServer(keyFlags: string[], fill: (dataFile: string) => void = () => {}) {
  const dataFile = join(tempDir(), 'petstore.db')
  const key = createKeyWithCli(dataFile, keyFlags)
  fill(dataFile)
  const port = await unusedPort()
  const old = await spawnServe(serveArgs(port, dataFile))
  return { dataFile, key, port, old }
}

/** The old server is still running, still stores what it is sent, and stops cleanly. */
export async function expectStillServing(old: RawServer, key: string) {
  expect(old.proc.exitCode).toBeNull()
  expect((await postPet(old.base, key, { name: 'still here', categoryId: 1 })).status).toBe(201)
  expect(await old.stop()).toBe(0)
}

export async function until(check: () => boolean, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms
  while (!check()) {
    if (Date.now() > deadline) throw new Error('condition not met in time')
    await Bun.sleep(20)
  }
}
