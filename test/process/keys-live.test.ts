/**
 * The bootstrap key of a first start, and keys created or revoked with the CLI while a server runs.
 */
import { afterAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { cli, createKeyWithCli, eventually, startServer, tempDir } from '../support/binary'
import { auth, killSpawned } from './helpers'

afterAll(killSpawned)
// Process tests wait on real processes; bunfig's [test] timeout is not applied by bun test 1.4.
setDefaultTimeout(20_000)

describe('bootstrap key', () => {
  test('the first serve on an empty data file makes one Free key, its secret in a file and not in the log; a second start makes none', async () => {
    const dir = tempDir()
    const dataFile = join(dir, 'petstore.db')
    const first = await startServer({ dataFile })
    const stderr = first.stderr()
    // The secret is the file's whole content, so KEY=$(cat FILE) works; the log only says where.
    const keyFile = join(dir, 'petstore-bootstrap-key.txt')
    expect(readFileSync(keyFile, 'utf8')).toMatch(/^psk_[A-Za-z0-9_-]+\n$/)
    expect(first.bootstrapKey).toBe(readFileSync(keyFile, 'utf8').trim())
    expect(stderr).toContain(`its secret is in ${keyFile} (readable by this user only)`)
    expect(stderr).not.toMatch(/psk_/)
    expect(stderr).toMatch(/petstore keys create --plan/)
    expect(first.stdout()).not.toContain(first.bootstrapKey!)

    const response = await fetch(`${first.base}/pets`, { headers: auth(first.bootstrapKey!) })
    expect(response.status).toBe(200)
    expect(await response.json()).toEqual([])
    // A Free key: its minute bucket (60) is the one in force after one request.
    expect(response.headers.get('x-ratelimit-limit')).toBe('60')
    expect(response.headers.get('x-ratelimit-remaining')).toBe('59')
    expect(await first.stop()).toBe(0)

    const rows = JSON.parse(cli(['keys', 'list', '--json', '--data', dataFile]).stdout)
    expect(rows).toHaveLength(1)
    expect(rows[0]).toMatchObject({ plan: 'free', rpm: 60, rpd: 1000, revoked: null })

    const second = await startServer({ dataFile })
    expect(second.bootstrapKey).toBeUndefined()
    expect(second.stderr()).not.toMatch(/psk_/)
    expect(JSON.parse(cli(['keys', 'list', '--json', '--data', dataFile]).stdout)).toHaveLength(1)
    // The first key still works after the restart.
    expect((await fetch(`${second.base}/pets`, { headers: auth(first.bootstrapKey!) })).status).toBe(200)
    expect(await second.stop()).toBe(0)
  })

  test('a data file that already has a key (made with the CLI) gets no bootstrap key', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const secret = createKeyWithCli(dataFile, ['--plan', 'pro'])
    const server = await startServer({ dataFile })
    expect(server.bootstrapKey).toBeUndefined()
    expect(server.stderr()).not.toMatch(/psk_/)
    expect((await fetch(`${server.base}/pets`, { headers: auth(secret) })).status).toBe(200)
    expect(await server.stop()).toBe(0)
  })
})

describe('keys take effect while the server runs', () => {
  test('a key created with the CLI works within one second', async () => {
    const server = await startServer()
    const secret = createKeyWithCli(server.dataFile, ['--plan', 'pro', '--name', 'late'])
    // Timed from when the command has made the key: its own start-up (slow on a busy host) is not the server's delay.
    const created = Date.now()
    let works = 0
    await eventually(async () => {
      const response = await fetch(`${server.base}/pets`, { headers: auth(secret) })
      if (response.status === 200) works = Date.now()
      else expect(response.status).toBe(401)
      return works > 0
    }, 3_000)
    expect(works - created).toBeLessThan(1_000)
    // It is the Pro key, with Pro limits.
    const response = await fetch(`${server.base}/pets`, { headers: auth(secret) })
    expect(response.headers.get('x-ratelimit-limit')).toBe('300')
    expect(await server.stop()).toBe(0)
  })

  test('a key revoked with the CLI gets 401 within one second; other keys keep working', async () => {
    const server = await startServer()
    const other = server.bootstrapKey!
    const secret = createKeyWithCli(server.dataFile, ['--plan', 'pro', '--name', 'doomed'])
    await eventually(async () => (await fetch(`${server.base}/pets`, { headers: auth(secret) })).status === 200, 3_000)
    const id = JSON.parse(cli(['keys', 'list', '--json', '--data', server.dataFile]).stdout).find(
      (r: { name: string }) => r.name === 'doomed',
    ).id
    const result = cli(['keys', 'revoke', id, '--data', server.dataFile])
    const revoked = Date.now()
    expect(result.code).toBe(0)
    let refused = 0
    let last: Response | undefined
    await eventually(async () => {
      last = await fetch(`${server.base}/pets`, { headers: auth(secret) })
      if (last.status === 401) refused = Date.now()
      else expect(last.status).toBe(200)
      return refused > 0
    }, 3_000)
    expect(refused - revoked).toBeLessThan(1_000)
    expect(last!.headers.get('www-authenticate')).toContain('error="invalid_token"')
    expect(await last!.json()).toMatchObject({ code: 'unauthorized', status: 401 })
    // And it stays refused; the other key is unaffected.
    expect((await fetch(`${server.base}/pets`, { headers: auth(secret) })).status).toBe(401)
    expect((await fetch(`${server.base}/pets`, { headers: auth(other) })).status).toBe(200)
    expect(await server.stop()).toBe(0)
  })

  test('a key revoked with the CLI while creates are being committed gets 401 within one second', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const writerKey = createKeyWithCli(dataFile, ['--plan', 'enterprise', '--rpm', '100000', '--rpd', '100000'])
    const secret = createKeyWithCli(dataFile, ['--plan', 'pro', '--name', 'busy'])
    const server = await startServer({ dataFile })
    const id = JSON.parse(cli(['keys', 'list', '--json', '--data', server.dataFile]).stdout).find(
      (r: { name: string }) => r.name === 'busy',
    ).id
    let writing = true
    const writer = (async () => {
      for (let i = 0; writing; i++) {
        const response = await fetch(`${server.base}/pets`, {
          method: 'POST',
          headers: { ...auth(writerKey), 'content-type': 'application/json' },
          body: JSON.stringify({ name: `pet ${i}`, categoryId: 1 }),
        })
        expect(response.status).toBe(201)
      }
    })()
    expect(cli(['keys', 'revoke', id, '--data', server.dataFile]).code).toBe(0)
    const revoked = Date.now()
    await eventually(async () => (await fetch(`${server.base}/pets`, { headers: auth(secret) })).status === 401, 3_000)
    expect(Date.now() - revoked).toBeLessThan(1_000)
    writing = false
    await writer
    expect(await server.stop()).toBe(0)
  })
})
