/**
 * The command line as a user meets it: usage and version, one-line reasons for mistakes, and the keys
 * commands (create prints the secret alone; list never shows a secret; revoke).
 */
import { afterAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { Database } from 'bun:sqlite'
import { existsSync, readdirSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { BINARY, cleanEnv, cli, tempDir } from '../support/binary'
import { auth, killSpawned, looksLikeStackTrace, reasonLine, spawnServe } from './helpers'
import pkg from '../../package.json'

afterAll(killSpawned)
// Process tests wait on real processes; bunfig's [test] timeout is not applied by bun test 1.4.
setDefaultTimeout(20_000)

const sha256 = (text: string) => new Bun.CryptoHasher('sha256').update(text).digest('hex')

describe('usage and version', () => {
  test('--help prints the usage on stdout and exits 0', () => {
    const result = cli(['--help'], { cwd: tempDir() })
    expect(result.code).toBe(0)
    expect(result.stdout).toContain('Usage: petstore COMMAND')
    for (const command of ['serve', 'keys', 'backup', 'restore', 'healthcheck', '--version']) expect(result.stdout).toContain(command)
    expect(result.stderr).toBe('')
  })

  test.each([
    [
      ['serve', '--help'],
      ['Usage: petstore serve', '--port', '--host', '--base-url', '--env', '--data'],
    ],
    [
      ['keys', '--help'],
      ['Usage: petstore keys create', 'keys list', 'keys revoke', '--plan', '--rpm', '--rpd'],
    ],
    [
      ['keys', 'create', '--help'],
      ['Usage: petstore keys create', '--plan'],
    ],
    [['backup', '--help'], ['Usage: petstore backup FILE']],
    [
      ['restore', '--help'],
      ['Usage: petstore restore FILE', 'before-restore', '--data'],
    ],
    [
      ['healthcheck', '--help'],
      ['Usage: petstore healthcheck', '--port'],
    ],
  ])('%p prints that command’s usage on stdout and exits 0', (args, expected) => {
    const cwd = tempDir()
    const result = cli(args, { cwd })
    expect(result.code).toBe(0)
    for (const text of expected) expect(result.stdout).toContain(text)
    expect(result.stderr).toBe('')
    // Asking for help touches no data file.
    expect(readdirSync(cwd)).toEqual([])
  })

  test('--version prints the package version, the commit and the build date on stdout and exits 0', () => {
    const result = cli(['--version'], { cwd: tempDir() })
    expect(result.code).toBe(0)
    expect(result.stderr).toBe('')
    const [, commit, built] = /^petstore (?:\S+) \(commit ([0-9a-f]{12})(?:-dirty)?, built (\S+)\)\n$/.exec(result.stdout) ?? []
    expect(result.stdout).toStartWith(`petstore ${pkg.version} (commit `)
    // A commit of this checkout (the binary may have been built before the latest one), and the time
    // the binary was written.
    const root = join(import.meta.dir, '..', '..')
    expect(Bun.spawnSync(['git', 'cat-file', '-e', `${commit}^{commit}`], { cwd: root }).exitCode).toBe(0)
    expect(built).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/)
    expect(Math.abs(Date.parse(built!) - statSync(BINARY).mtimeMs)).toBeLessThan(10 * 60_000)
  })

  test('--version run from the sources says that it is not a release build, and names the commit', () => {
    const root = join(import.meta.dir, '..', '..')
    const result = Bun.spawnSync(['bun', join(root, 'src', 'index.ts'), '--version'], { cwd: tempDir(), env: cleanEnv() })
    const head = Bun.spawnSync(['git', 'rev-parse', '--short=12', 'HEAD'], { cwd: root }).stdout.toString().trim()
    expect(result.exitCode).toBe(0)
    expect(result.stdout.toString()).toMatch(
      new RegExp(
        `^petstore ${pkg.version.replace(/\./g, '\\.')} \\(not a release build: run from the sources at commit ${head}(-dirty)?\\)\n$`,
      ),
    )
  })
})

describe('mistakes exit non-zero with the usage and a one-line reason, last', () => {
  // [args, what the reason line must mention, the usage that must follow]
  const cases: [string[], RegExp, string][] = [
    [['frobnicate'], /unknown command.*frobnicate/i, 'Usage: petstore COMMAND'],
    // Nothing said is a mistake like the others (only --help asks for the usage on stdout).
    [[], /^petstore: no command given; commands are serve, keys, /, 'Usage: petstore COMMAND'],
    [
      ['keys'],
      /^petstore: keys needs a command: create, list, revoke, reset-limits, set-plan, set-expiry, roll, usage$/,
      'Usage: petstore keys',
    ],
    [['operators'], /^petstore: operators needs a command: add, list, /, 'Usage: petstore operators'],
    [['pets'], /^petstore: pets needs a command: seed, reset$/, 'Usage: petstore pets'],
    [['--bogus'], /--bogus/, 'Usage: petstore COMMAND'],
    [['serve', '--bogus'], /--bogus/, 'Usage: petstore serve'],
    [['keys', 'list', '--bogus'], /--bogus/, 'Usage: petstore keys'],
    [['keys', 'frob'], /frob/, 'Usage: petstore keys'],
    [['keys', 'create', '--name', 'x'], /--plan/, 'Usage: petstore keys'],
    [['keys', 'revoke'], /revoke.*ID|ID/i, 'Usage: petstore keys'],
    [['keys', 'create', '--plan', 'gold'], /--plan.*gold|gold.*plan/i, 'Usage: petstore keys'],
    [['keys', 'create', '--plan', 'pro', '--rpm', '100'], /--rpm/, 'Usage: petstore keys'],
    [['keys', 'create', '--plan', 'enterprise'], /--rpm/, 'Usage: petstore keys'],
    [['keys', 'create', '--plan', 'enterprise', '--rpm', '10'], /--rpd/, 'Usage: petstore keys'],
    [['keys', 'create', '--plan', 'enterprise', '--rpm', 'ten', '--rpd', '10'], /--rpm/, 'Usage: petstore keys'],
    [['serve', '--port', 'abc'], /--port.*abc/, 'Usage: petstore serve'],
    [['serve', '--port', '70000'], /--port.*70000/, 'Usage: petstore serve'],
    [['serve', '--env', 'qa'], /--env.*qa/, 'Usage: petstore serve'],
    [['backup'], /FILE/, 'Usage: petstore backup'],
    [['serve', '--ban-after', '500000'], /--ban-after.*from 1 to 100000.*500000/, 'Usage: petstore serve'],
    // The last of two would win unasked: a free key made where a pro one was also typed.
    [['keys', 'create', '--plan', 'pro', '--plan', 'free'], /^petstore: --plan is given twice; give it once$/, 'Usage: petstore keys'],
    [['serve', '--port=8080', '--port', '8081'], /^petstore: --port is given twice; give it once$/, 'Usage: petstore serve'],
  ]

  test.each(cases)('%p: exit 2, one reason line on stderr, nothing on stdout', (args, reason) => {
    const cwd = tempDir()
    const result = cli([...args], { cwd })
    expect(result.code).toBe(2)
    expect(result.stdout).toBe('')
    const lines = result.stderr.split('\n')
    // One line, the last, where a terminal leaves it in view: a blank line above it, nothing below.
    expect(lines.at(-1)).toBe('')
    expect(lines.at(-2)).toMatch(/^petstore: /)
    expect(lines.at(-2)).toMatch(reason)
    expect(lines.at(-3)).toBe('')
    expect(looksLikeStackTrace(result.stderr)).toBe(false)
  })

  test.each(cases)('%p: the usage comes before the reason on stderr', (args, _reason, usage) => {
    const result = cli([...args], { cwd: tempDir() })
    expect(result.code).not.toBe(0)
    expect(result.stderr.startsWith(usage)).toBe(true)
  })

  test('a rejected keys create leaves no data file behind', () => {
    const dir = tempDir()
    const dataFile = join(dir, 'data', 'petstore.db')
    const result = cli(['keys', 'create', '--plan', 'gold', '--data', dataFile], { cwd: dir })
    expect(result.code).toBe(2)
    expect(existsSync(dataFile)).toBe(false)
  })

  test('serve --ban-after beyond the ban rule’s range names the range and leaves no data file, lock or folder', () => {
    const cwd = tempDir()
    for (const data of [[], ['--data', join(cwd, 'named', 'p.db')]]) {
      const result = cli(['serve', '--port', '0', '--ban-after', '500000', ...data], { cwd })
      expect([result.code, reasonLine(result.stderr)]).toEqual([
        2,
        'petstore: --ban-after must be an integer from 1 to 100000, not "500000"',
      ])
      expect(readdirSync(cwd)).toEqual([])
    }
  })
})

describe('keys', () => {
  test('keys create prints the secret alone, as the last and only line of stdout', () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const result = cli(['keys', 'create', '--plan', 'pro', '--name', 'x', '--data', dataFile])
    expect(result.code).toBe(0)
    expect(result.stdout.endsWith('\n')).toBe(true)
    const lines = result.stdout.split('\n').slice(0, -1)
    expect(lines).toHaveLength(1)
    expect(lines[0]).toMatch(/^psk_[A-Za-z0-9_-]{32,}$/)
    // The human message goes to stderr and does not repeat the secret.
    expect(result.stderr).toMatch(/pro/)
    expect(result.stderr).not.toContain(lines[0]!)
  })

  test('two keys get different secrets and ids', () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const a = cli(['keys', 'create', '--plan', 'free', '--data', dataFile])
    const b = cli(['keys', 'create', '--plan', 'free', '--data', dataFile])
    expect(a.stdout.trim()).not.toBe(b.stdout.trim())
    const list = JSON.parse(cli(['keys', 'list', '--json', '--data', dataFile]).stdout)
    expect(new Set(list.map((k: { id: string }) => k.id)).size).toBe(2)
  })

  test('keys list and keys list --json show every field and never a secret or its hash', () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const before = Date.now()
    const pro = cli(['keys', 'create', '--plan', 'pro', '--name', 'mobile app', '--data', dataFile]).stdout.trim()
    const big = cli([
      'keys',
      'create',
      '--plan',
      'enterprise',
      '--rpm',
      '1000',
      '--rpd',
      '30',
      '--name',
      'big',
      '--data',
      dataFile,
    ]).stdout.trim()
    const after = Date.now()

    const json = cli(['keys', 'list', '--json', '--data', dataFile])
    expect(json.code).toBe(0)
    const rows = JSON.parse(json.stdout)
    expect(rows).toHaveLength(2)
    for (const row of rows) {
      expect(Object.keys(row).sort()).toEqual([
        'created',
        'createdAt',
        'expiresAt',
        'format',
        'id',
        'lastUsed',
        'lastUsedAt',
        'name',
        'plan',
        'previousSecretEndsAt',
        'revoked',
        'revokedAt',
        'rpd',
        'rpm',
      ])
      expect(row.id).toMatch(/^\S+$/)
      const created = Date.parse(row.createdAt)
      expect(created).toBeGreaterThanOrEqual(before - 1000)
      expect(created).toBeLessThanOrEqual(after + 1000)
      expect(row.lastUsedAt).toBeNull()
      expect(row.revokedAt).toBeNull()
      expect(row).toMatchObject({ expiresAt: null, format: 'checked', previousSecretEndsAt: null })
      // The earlier names, kept readable for a release, say the same.
      expect([row.created, row.lastUsed, row.revoked]).toEqual([row.createdAt, row.lastUsedAt, row.revokedAt])
    }
    const byName = Object.fromEntries(rows.map((r: { name: string }) => [r.name, r]))
    expect(byName['mobile app']).toMatchObject({ plan: 'pro', rpm: 300, rpd: 10000 })
    expect(byName.big).toMatchObject({ plan: 'enterprise', rpm: 1000, rpd: 30 })

    const table = cli(['keys', 'list', '--data', dataFile])
    expect(table.code).toBe(0)
    const [header, ...lines] = table.stdout.trimEnd().split('\n')
    for (const column of ['ID', 'NAME', 'PLAN', 'RPM', 'RPD', 'CREATED', 'LAST USED', 'REVOKED']) expect(header).toContain(column)
    expect(lines).toHaveLength(2)
    const proLine = lines.find((l) => l.includes(byName['mobile app'].id))!
    expect(proLine).toContain('mobile app')
    expect(proLine).toMatch(/\bpro\b.*\b300\b.*\b10000\b/)
    expect(proLine).toContain(byName['mobile app'].createdAt)
    const bigLine = lines.find((l) => l.includes(byName.big.id))!
    expect(bigLine).toMatch(/\benterprise\b.*\b1000\b.*\b30\b/)

    for (const secret of [pro, big]) {
      expect(secret).toMatch(/^psk_/)
      for (const output of [json, table]) {
        expect(output.stdout + output.stderr).not.toContain(secret)
        expect(output.stdout + output.stderr).not.toContain(secret.slice(4))
        expect((output.stdout + output.stderr).toLowerCase()).not.toContain(sha256(secret))
      }
    }
    expect(json.stdout).not.toMatch(/psk_/)
    expect(table.stdout).not.toMatch(/psk_/)
  })

  test('keys revoke ID marks the key revoked; revoking again keeps the first time', () => {
    const dataFile = join(tempDir(), 'petstore.db')
    cli(['keys', 'create', '--plan', 'pro', '--name', 'keep', '--data', dataFile])
    cli(['keys', 'create', '--plan', 'pro', '--name', 'drop', '--data', dataFile])
    const rows = () =>
      JSON.parse(cli(['keys', 'list', '--json', '--data', dataFile]).stdout) as { id: string; name: string; revokedAt: string | null }[]
    const drop = rows().find((r) => r.name === 'drop')!
    const before = Date.now()
    const result = cli(['keys', 'revoke', drop.id, '--data', dataFile])
    expect(result.code).toBe(0)
    expect(result.stdout).toBe('')
    const after = rows()
    const revoked = after.find((r) => r.id === drop.id)!.revokedAt
    expect(revoked).not.toBeNull()
    expect(Date.parse(revoked!)).toBeGreaterThanOrEqual(before - 1000)
    expect(after.find((r) => r.name === 'keep')!.revokedAt).toBeNull()
    // The table shows it too.
    const line = cli(['keys', 'list', '--data', dataFile])
      .stdout.split('\n')
      .find((l) => l.includes(drop.id))!
    expect(line).toContain(revoked!)

    cli(['keys', 'revoke', drop.id, '--data', dataFile])
    expect(rows().find((r) => r.id === drop.id)!.revokedAt).toBe(revoked)
  })

  test('revoking an unknown id fails non-zero with a reason and changes nothing', () => {
    const dataFile = join(tempDir(), 'petstore.db')
    cli(['keys', 'create', '--plan', 'pro', '--data', dataFile])
    const result = cli(['keys', 'revoke', 'key_doesNotExist', '--data', dataFile])
    expect(result.code).toBe(1)
    expect(result.stdout).toBe('')
    expect(reasonLine(result.stderr)).toMatch(/^petstore: .*key_doesNotExist/)
    expect(looksLikeStackTrace(result.stderr)).toBe(false)
    const rows = JSON.parse(cli(['keys', 'list', '--json', '--data', dataFile]).stdout)
    expect(rows.every((r: { revokedAt: unknown }) => r.revokedAt === null)).toBe(true)
  })

  test('keys list shows when a key was last used by a server', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const secret = cli(['keys', 'create', '--plan', 'pro', '--name', 'used', '--data', dataFile]).stdout.trim()
    cli(['keys', 'create', '--plan', 'pro', '--name', 'idle', '--data', dataFile])
    const server = await spawnServe(['--port', '0', '--host', '127.0.0.1', '--data', dataFile])
    const before = Date.now()
    expect((await fetch(`${server.base}/pets`, { headers: auth(secret) })).status).toBe(200)
    expect(await server.stop()).toBe(0)
    const rows = JSON.parse(cli(['keys', 'list', '--json', '--data', dataFile]).stdout)
    const used = rows.find((r: { name: string }) => r.name === 'used')
    expect(used.lastUsedAt).not.toBeNull()
    expect(Date.parse(used.lastUsedAt)).toBeGreaterThanOrEqual(before - 1000)
    expect(rows.find((r: { name: string }) => r.name === 'idle').lastUsedAt).toBeNull()
  })

  test('a failed save of last-used times is reported as that, and the rate-limit state is saved all the same; the stop says it lost them', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const secret = cli(['keys', 'create', '--plan', 'pro', '--name', 'used', '--data', dataFile]).stdout.trim()
    const server = await spawnServe(['--port', '0', '--host', '127.0.0.1', '--data', dataFile, '--no-access-log'])
    // A trigger refuses exactly the last-used update, as a fault confined to that write would; planted once
    // the server has opened the file, which refuses a trigger it does not make.
    const db = new Database(dataFile)
    db.run("CREATE TRIGGER refuse_last_used BEFORE UPDATE OF last_used_at ON api_keys BEGIN SELECT RAISE(ABORT, 'last-used refused'); END")
    db.close()
    expect((await fetch(`${server.base}/pets`, { headers: auth(secret) })).status).toBe(200)
    // Stopping saves both, once more: the last-used times in vain, which it says, and exits 1.
    expect(await server.stop()).toBe(1)
    expect(server.stderr()).toContain("petstore: could not save the keys' last-used times before stopping: last-used refused")
    expect(server.stderr()).toContain('petstore: storage did not take the last writes: stopped without them')
    expect(server.stderr()).not.toContain('rate-limit state')
    const saved = new Database(dataFile, { readonly: true })
    expect(saved.query<{ n: number }, []>('SELECT count(*) AS n FROM limiter_state').get()!.n).toBeGreaterThan(0)
    saved.close()
  })
})

describe('help for a newcomer', () => {
  test('petstore help [COMMAND] prints the usage; keys create --help lists the plans with their limits', () => {
    const main = cli(['help'], { cwd: tempDir() })
    expect([main.code, main.stdout.startsWith('Usage: petstore COMMAND')]).toEqual([0, true])
    const serve = cli(['help', 'serve'], { cwd: tempDir() })
    expect([serve.code, serve.stdout.startsWith('Usage: petstore serve')]).toEqual([0, true])
    const unknown = cli(['help', 'frob'], { cwd: tempDir() })
    expect(unknown.code).toBe(2)
    expect(reasonLine(unknown.stderr)).toBe(
      'petstore: no help for "frob"; commands are serve, keys, operators, pets, backup, restore, healthcheck',
    )
    const keys = cli(['keys', 'create', '--help'], { cwd: tempDir() })
    expect(keys.stdout).toMatch(/free +60 \/ 1,000/)
    expect(keys.stdout).toMatch(/pro +300 \/ 10,000/)
    expect(keys.stdout).toMatch(/business +1000 \/ 100,000/)
    expect(keys.stdout).toContain('enterprise   --rpm N / --rpd N')
  })

  test('a misspelt flag gets one plain line with the closest flag; a flag without its value says so', () => {
    const typo = cli(['serve', '--prot', '8080'], { cwd: tempDir() })
    expect(typo.code).toBe(2)
    expect(reasonLine(typo.stderr)).toBe('petstore: unknown option --prot (did you mean --port?)')
    const far = cli(['serve', '--frobnicate'], { cwd: tempDir() })
    expect(reasonLine(far.stderr)).toBe('petstore: unknown option --frobnicate')
    const missing = cli(['serve', '--port'], { cwd: tempDir() })
    expect(reasonLine(missing.stderr)).toBe('petstore: --port needs a value')
  })

  test('a bad value from the environment is reported under the variable, not the flag', () => {
    const port = cli(['serve'], { cwd: tempDir(), env: { PETSTORE_PORT: 'eighty' } })
    expect(port.code).toBe(2)
    expect(reasonLine(port.stderr)).toBe('petstore: PETSTORE_PORT must be an integer from 0 to 65535, not "eighty"')
    const env = cli(['keys', 'list'], { cwd: tempDir(), env: { PETSTORE_ENV: 'prod' } })
    expect(reasonLine(env.stderr)).toBe('petstore: PETSTORE_ENV must be production or staging, not "prod"')
    const proxy = cli(['serve'], { cwd: tempDir(), env: { PETSTORE_TRUST_PROXY: 'nginx' } })
    expect(reasonLine(proxy.stderr)).toMatch(/^petstore: PETSTORE_TRUST_PROXY: "nginx" is not an IP address/)
    const flag = cli(['serve', '--port', 'eighty'], { cwd: tempDir() })
    expect(reasonLine(flag.stderr)).toBe('petstore: --port must be an integer from 0 to 65535, not "eighty"')
  })
})

describe('the data file is never a surprise', () => {
  test('on the default path, key commands refuse to make a new store and name the file they looked for', () => {
    const cwd = tempDir()
    for (const args of [
      ['keys', 'create', '--plan', 'pro'],
      ['keys', 'list'],
      ['keys', 'revoke', 'key_x'],
      ['backup', 'copy.db'],
    ]) {
      const result = cli(args, { cwd })
      expect(result.code).toBe(1)
      expect(result.stderr).toBe(
        `petstore: no data file at ${join(cwd, 'data', 'petstore.db')}; start the server once to create it, or name an existing one with --data (staging uses its own: --env staging)\n`,
      )
    }
    expect(readdirSync(cwd)).toEqual([])
  })

  test('a named file is created by keys create, and every key command names the file it used', () => {
    const cwd = tempDir()
    const created = cli(['keys', 'create', '--plan', 'pro', '--data', 'mine.db'], { cwd })
    expect(created.code).toBe(0)
    expect(created.stderr).toContain(` in ${join(cwd, 'mine.db')}. `)
    const listed = cli(['keys', 'list', '--data', 'mine.db'], { cwd })
    expect(listed.stderr).toBe(`petstore: keys in ${join(cwd, 'mine.db')}\n`)
    const viaVariable = cli(['keys', 'create', '--plan', 'free'], { cwd, env: { PETSTORE_DATA: 'other.db' } })
    expect(viaVariable.code).toBe(0)
    expect(existsSync(join(cwd, 'other.db'))).toBe(true)
  })

  test('the startup line names the data file by its absolute path', async () => {
    const cwd = tempDir()
    const server = await spawnServe(['--port', '0', '--host', '127.0.0.1', '--data', 'rel.db'], { cwd })
    expect(server.dataFile).toBe(join(cwd, 'rel.db'))
    expect(await server.stop()).toBe(0)
  })
})
