/**
 * `petstore operators` and `petstore keys set-plan` as a user meets them: a password or token printed
 * once as the last line of stdout, stored only as a hash, one-line reasons for mistakes, and every change
 * in the console's audit log.
 */
import { describe, expect, test } from 'bun:test'
import { Database } from 'bun:sqlite'
import { join } from 'node:path'
import { cli, tempDir } from '../support/binary'
import { looksLikeStackTrace } from './helpers'

const lastLine = (text: string) => text.trim().split('\n').at(-1)!

describe('operators', () => {
  test('add prints a generated password once, as the last line of stdout, and stores only its argon2id hash', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const added = cli(['operators', 'add', 'ana', '--data', dataFile])
    expect(added.code).toBe(0)
    expect(added.stdout).toMatch(/^[A-Za-z0-9_-]{22}\n$/)
    expect(added.stderr).toBe(`petstore: added operator "ana" in ${dataFile}. Their password, shown only now, is the next line:\n`)
    const password = lastLine(added.stdout)
    const db = new Database(dataFile, { readonly: true })
    const row = db.query<{ password_hash: string }, []>('SELECT password_hash FROM operators').get()!
    db.close()
    expect(row.password_hash).toStartWith('$argon2id$')
    expect(row.password_hash).not.toContain(password)
    expect(await Bun.password.verify(password, row.password_hash)).toBe(true)

    const again = cli(['operators', 'add', 'ana', '--data', dataFile])
    expect(again.code).toBe(1)
    expect(again.stdout).toBe('')
    expect(again.stderr).toBe(`petstore: an operator named "ana" exists already in ${dataFile}\n`)
  })

  test('list, reset-password, token and remove; each change is in the audit log; a name not there exits 1', () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const first = lastLine(cli(['operators', 'add', 'ben', '--data', dataFile]).stdout)
    cli(['operators', 'add', 'ada', '--data', dataFile])
    const listed = cli(['operators', 'list', '--data', dataFile])
    expect(listed.code).toBe(0)
    expect(listed.stdout).toMatch(/^NAME {2}CREATED\nada {3}\d{4}-.+Z\nben {3}\d{4}-.+Z\n$/)
    const json = JSON.parse(cli(['operators', 'list', '--json', '--data', dataFile]).stdout)
    expect(json.map((row: { name: string }) => row.name)).toEqual(['ada', 'ben'])
    expect(JSON.stringify(json)).not.toMatch(/hash|password/i)

    const reset = cli(['operators', 'reset-password', 'ben', '--data', dataFile])
    expect(reset.code).toBe(0)
    expect(lastLine(reset.stdout)).not.toBe(first)
    expect(reset.stderr).toContain('ended their console sessions')
    const token = cli(['operators', 'token', 'ben', '--data', dataFile])
    expect(token.code).toBe(0)
    expect(token.stdout).toMatch(/^pso_[A-Za-z0-9_-]{43}\n$/)
    expect(cli(['operators', 'remove', 'ben', '--data', dataFile]).code).toBe(0)
    expect(JSON.parse(cli(['operators', 'list', '--json', '--data', dataFile]).stdout)).toHaveLength(1)

    for (const sub of ['remove', 'reset-password', 'token']) {
      const missing = cli(['operators', sub, 'ben', '--data', dataFile])
      expect(missing.code).toBe(1)
      expect(missing.stdout).toBe('')
      expect(missing.stderr).toBe(`petstore: no operator named "ben" in ${dataFile}\n`)
    }
    const db = new Database(dataFile, { readonly: true })
    const audit = db
      .query<{ actor: string; action: string; target: string }, []>('SELECT actor, action, target FROM audit_log ORDER BY id')
      .all()
    db.close()
    // The command line, and the system account that ran it.
    const actor = `cli (${Bun.spawnSync(['id', '-un']).stdout.toString().trim()})`
    expect(audit).toEqual([
      { actor, action: 'operator.add', target: 'ben' },
      { actor, action: 'operator.add', target: 'ada' },
      { actor, action: 'operator.reset-password', target: 'ben' },
      { actor, action: 'operator.token', target: 'ben' },
      { actor, action: 'operator.remove', target: 'ben' },
    ])
  })

  test.each([
    [['operators'], 2, 'Usage: petstore operators add NAME'],
    [['operators', 'promote', 'x'], 2, 'petstore: unknown operators command "promote"'],
    [['operators', 'add'], 2, 'petstore: operators add needs exactly one NAME'],
    [['operators', 'add', 'a b'], 2, 'petstore: an operator name is 1 to 64 characters of A-Z a-z 0-9 . _ @ -'],
    [['operators', 'list', 'x'], 2, 'petstore: unexpected argument "x"'],
    [['operators', 'add', 'x', '--json'], 2, 'petstore: --json does not apply to operators add'],
  ])('%p exits %p with a one-line reason and the usage', (args, code, message) => {
    const result = cli([...args, '--data', join(tempDir(), 'petstore.db')])
    expect(result.code).toBe(code)
    expect(result.stdout + result.stderr).toContain(message)
    expect(looksLikeStackTrace(result.stderr)).toBe(false)
  })

  test("every hash follows the store's oldest operator's setting: 19 MiB in a new store, 64 MiB in one made before", async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    cli(['operators', 'add', 'ana', '--data', dataFile])
    cli(['operators', 'add', 'ben', '--data', dataFile])
    const hashes = () => {
      const db = new Database(dataFile, { readonly: true })
      const rows = db.query<{ name: string; password_hash: string }, []>('SELECT name, password_hash FROM operators ORDER BY name').all()
      db.close()
      return Object.fromEntries(rows.map((row) => [row.name, row.password_hash.split('$')[3]]))
    }
    expect(hashes()).toEqual({ ana: 'm=19456,t=2,p=1', ben: 'm=19456,t=2,p=1' })

    // A store made before: its operators hold Bun's default (64 MiB). New and reset passwords take that too.
    const old = await Bun.password.hash('an old password', { algorithm: 'argon2id' })
    const db = new Database(dataFile)
    db.run('UPDATE operators SET password_hash = ?', [old])
    db.close()
    expect(cli(['operators', 'add', 'cyd', '--data', dataFile]).code).toBe(0)
    expect(cli(['operators', 'reset-password', 'ben', '--data', dataFile]).code).toBe(0)
    expect(hashes()).toEqual({ ana: 'm=65536,t=2,p=1', ben: 'm=65536,t=2,p=1', cyd: 'm=65536,t=2,p=1' })
  })

  test('help lists the command, and help operators shows its usage', () => {
    expect(cli(['--help']).stdout).toContain('operators add|list|remove|reset-password|token')
    const help = cli(['help', 'operators'])
    expect(help.code).toBe(0)
    expect(help.stdout).toContain('Usage: petstore operators add NAME')
  })
})

describe('keys set-plan', () => {
  test('moves a key to another plan and its limits; an enterprise plan needs its own; a revoked or unknown key exits 1', () => {
    const dataFile = join(tempDir(), 'petstore.db')
    cli(['keys', 'create', '--plan', 'free', '--data', dataFile])
    const id = JSON.parse(cli(['keys', 'list', '--json', '--data', dataFile]).stdout)[0].id
    const moved = cli(['keys', 'set-plan', id, 'business', '--data', dataFile])
    expect(moved.code).toBe(0)
    expect(moved.stderr).toBe(
      `petstore: ${id} is now on the business plan (1000/min, 100000/day) in ${dataFile}; a running server applies it within a second\n`,
    )
    expect(JSON.parse(cli(['keys', 'list', '--json', '--data', dataFile]).stdout)[0]).toMatchObject({
      plan: 'business',
      rpm: 1000,
      rpd: 100000,
    })
    const own = cli(['keys', 'set-plan', id, 'enterprise', '--rpm', '5', '--rpd', '50', '--data', dataFile])
    expect(own.code).toBe(0)
    expect(JSON.parse(cli(['keys', 'list', '--json', '--data', dataFile]).stdout)[0]).toMatchObject({ plan: 'enterprise', rpm: 5, rpd: 50 })
    const without = cli(['keys', 'set-plan', id, 'enterprise', '--data', dataFile])
    expect(without.code).toBe(2)
    expect(without.stderr).toContain('an enterprise key needs its own limits')
    expect(cli(['keys', 'set-plan', id, '--data', dataFile]).stderr).toContain('keys set-plan needs a key ID and a plan')
    expect(cli(['keys', 'revoke', id, '--data', dataFile]).code).toBe(0)
    const revoked = cli(['keys', 'set-plan', id, 'pro', '--data', dataFile])
    expect(revoked.code).toBe(1)
    expect(revoked.stderr).toBe(`petstore: no active key with id "${id}" in ${dataFile}\n`)
  })
})
