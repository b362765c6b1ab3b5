/**
 * Safe defaults and the first hour with the binary: `serve` reachable from this machine only until
 * told otherwise; an empty environment variable counts as unset; a data file the permissions keep from
 * the process is reported as such, naming the user; a secret given where a key id goes is refused
 * without being repeated; a usage error's reason is the last line, under the usage.
 */
import { afterAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { chmodSync, mkdirSync, readdirSync, readFileSync } from 'node:fs'
import { networkInterfaces } from 'node:os'
import { join } from 'node:path'
import { BINARY, cleanEnv, cli, createKeyWithCli, tempDir } from '../support/binary'
import { SERVER_VARIABLES } from '../support/variables'
import { killSpawned, reasonLine, spawnServe } from './helpers'

afterAll(killSpawned)
setDefaultTimeout(30_000)

const ROOT = join(import.meta.dir, '..', '..')

/** This machine's first address that is not loopback, where another machine would reach it. */
function networkAddress(): string | undefined {
  return Object.values(networkInterfaces())
    .flat()
    .find((address) => address?.family === 'IPv4' && !address.internal)?.address
}

async function answers(url: string): Promise<boolean> {
  try {
    return (await fetch(url, { signal: AbortSignal.timeout(5_000) })).status === 200
  } catch {
    return false
  }
}

describe('serve listens on loopback unless told otherwise', () => {
  const outside = networkAddress()

  test('by default: 127.0.0.1 only, and the startup lines say how to open it', async () => {
    const server = await spawnServe(['--port', '0', '--data', join(tempDir(), 'p.db')])
    expect(server.stderr()).toMatch(/listening on http:\/\/127\.0\.0\.1:\d+, API at /)
    expect(server.stderr()).toContain('petstore: only this machine can connect; --host 0.0.0.0 (or PETSTORE_HOST) opens it to the network')
    expect(await answers(`${server.origin}/healthz`)).toBe(true)
    // From the machine's network address, as another host would come: nothing listens there.
    if (outside) expect(await answers(`http://${outside}:${server.port}/healthz`)).toBe(false)
    expect(await server.stop()).toBe(0)
  })

  test('--host 0.0.0.0 (or PETSTORE_HOST) opens it, and the line then offers nothing', async () => {
    const server = await spawnServe(['--port', '0', '--data', join(tempDir(), 'p.db')], { env: { PETSTORE_HOST: '0.0.0.0' } })
    expect(server.stderr()).toMatch(/listening on http:\/\/0\.0\.0\.0:\d+, /)
    expect(server.stderr()).not.toContain('only this machine')
    if (outside) expect(await answers(`http://${outside}:${server.port}/healthz`)).toBe(true)
    expect(await server.stop()).toBe(0)
  })

  test('open without --base-url: links are relative, so a remote client can follow them; /metrics answers this machine only', async () => {
    if (!outside) {
      console.error('SKIPPED: open-listener test: this machine has no IPv4 address other than loopback to come from')
      return
    }
    const server = await spawnServe(['--port', '0', '--host', '0.0.0.0', '--data', join(tempDir(), 'p.db')])
    const stderr = server.stderr()
    expect(server.apiBase).toBe('/v1')
    expect(stderr).toContain(
      'petstore: no --base-url: links are relative (/v1/pets/42); --base-url https://pets.example.com/v1 makes them absolute',
    )
    expect(stderr).toContain(
      'petstore: /metrics beside the API answers clients on this machine alone; --metrics-address or --metrics-token opens it',
    )
    // http://0.0.0.0:PORT is no address to give a client: the lines name the machine's own.
    const reachable =
      /^petstore: 0\.0\.0\.0 stands for every IPv4 address of this machine: clients elsewhere reach it at (.+), or at the host name of --base-url$/m.exec(
        stderr,
      )?.[1]
    expect(reachable?.split(', ')).toContain(`http://${outside}:${server.port}`)
    expect(reachable).not.toContain('127.0.0.1')
    // A client on another machine, as the network address makes it.
    const remote = `http://${outside}:${server.port}`
    // The document's servers: this one (relative) and no other environment's localhost default, which
    // would be the reader's own machine.
    const doc = (await (await fetch(`${remote}/openapi.json`)).json()) as { servers: { url: string; description: string }[] }
    expect(doc.servers).toEqual([
      { url: '/v1', description: 'this server' },
      { url: '/v1', description: 'production' },
    ])
    const key = { authorization: `Bearer ${server.bootstrapKey}` }
    const pets = []
    for (const name of ['a', 'b']) {
      const created = await fetch(`${remote}/v1/pets`, {
        method: 'POST',
        headers: { ...key, 'content-type': 'application/json' },
        body: JSON.stringify({ name, categoryId: 1 }),
      })
      expect(created.status).toBe(201)
      const location = created.headers.get('location')!
      expect(location).toMatch(/^\/v1\/pets\/\d+$/)
      // Resolved against the URL the client asked, as RFC 9110 §10.2.2 says: the pet itself.
      const followed = await fetch(new URL(location, `${remote}/v1/pets`), { headers: key })
      expect(followed.status).toBe(200)
      pets.push(await followed.json())
    }
    const page = await fetch(`${remote}/v1/pets?limit=1`, { headers: key })
    const next = /^<([^>]+)>; rel="next"$/.exec(page.headers.get('link') ?? '')?.[1]
    expect(next).toStartWith('/v1/pets?limit=1&cursor=')
    expect((await fetch(new URL(next!, `${remote}/v1/pets?limit=1`), { headers: key })).status).toBe(200)

    const outsideMetrics = await fetch(`${remote}/metrics`)
    expect(outsideMetrics.status).toBe(403)
    const refusal = (await outsideMetrics.json()) as { code: string; message: string }
    expect(refusal.code).toBe('forbidden')
    expect(refusal.message).toContain('--metrics-address or --metrics-token')
    expect((await fetch(`${server.origin}/metrics`)).status).toBe(200)
    expect(await server.stop()).toBe(0)

    // With a token, /metrics is opened to whoever has it.
    const token = 'metrics-token-0123456789abcdef'
    const withToken = await spawnServe(['--port', '0', '--host', '0.0.0.0', '--data', join(tempDir(), 'p.db'), '--metrics-token', token])
    const remoteToken = `http://${outside}:${withToken.port}/metrics`
    expect((await fetch(remoteToken)).status).toBe(401)
    expect((await fetch(remoteToken, { headers: { authorization: `Bearer ${token}` } })).status).toBe(200)
    expect(withToken.stderr()).not.toContain('/metrics beside the API')
    expect(await withToken.stop()).toBe(0)
  })

  test('the startup hint on loopback names --base-url, --metrics-address and --metrics-token', async () => {
    const server = await spawnServe(['--port', '0', '--data', join(tempDir(), 'p.db')])
    expect(server.stderr()).toContain('with --base-url for absolute links, and --metrics-address or --metrics-token for /metrics')
    expect(await server.stop()).toBe(0)
  })

  test('the Dockerfile and the several-instances compose file open it, as a container must', async () => {
    // The image's environment and command, as `docker run` would give them (the port made free).
    const dockerfile = readFileSync(join(ROOT, 'Dockerfile'), 'utf8')
    const env = Object.fromEntries([...dockerfile.matchAll(/^ENV (\w+)=(\S+)$/gm)].map(([, name, value]) => [name!, value!]))
    const command = JSON.parse(/^CMD (\[.*\])$/m.exec(dockerfile)![1]!) as string[]
    const image = await spawnServe([...command.slice(1), '--port', '0', '--data', join(tempDir(), 'p.db')], { env })
    expect(image.stderr()).toMatch(/listening on http:\/\/0\.0\.0\.0:\d+, /)
    expect(await image.stop()).toBe(0)
    const compose = Bun.YAML.parse(readFileSync(join(ROOT, 'deploy', 'several-instances', 'compose.yaml'), 'utf8')) as {
      services: Record<string, { environment?: Record<string, string> }>
    }
    expect(compose.services['petstore-1']!.environment!.PETSTORE_HOST).toBe('0.0.0.0')
  })

  test('the usage names the default', () => {
    expect(cli(['serve', '--help']).stdout).toMatch(/--host HOST +address to bind[^\n]*\n +\(PETSTORE_HOST; default 127\.0\.0\.1/)
  })
})

describe('an empty environment variable counts as unset', () => {
  test('serve with every variable set empty starts as with none: production, loopback, /metrics without a token', async () => {
    const empty = Object.fromEntries(SERVER_VARIABLES.map((name) => [name, '']))
    const server = await spawnServe(['--port', '0', '--data', join(tempDir(), 'p.db')], { env: empty })
    expect(server.env).toBe('production')
    expect(server.stderr()).toMatch(/listening on http:\/\/127\.0\.0\.1:\d+, API at http:\/\/localhost:\d+\/v1, /)
    expect((await fetch(`${server.origin}/metrics`)).status).toBe(200)
    expect(await server.stop()).toBe(0)
  })

  test('a path: PETSTORE_DATA= means the default data file, not the current folder', () => {
    const cwd = tempDir()
    const result = cli(['keys', 'list'], { cwd, env: { PETSTORE_DATA: '' } })
    expect([result.code, result.stderr]).toEqual([
      1,
      `petstore: no data file at ${join(cwd, 'data', 'petstore.db')}; start the server once to create it, or name an existing one with --data (staging uses its own: --env staging)\n`,
    ])
  })

  test('a number and a host: healthcheck with PETSTORE_PORT= and PETSTORE_HOST= asks the defaults', () => {
    const result = cli(['healthcheck'], { cwd: tempDir(), env: { PETSTORE_PORT: '', PETSTORE_HOST: '' } })
    expect(result.stdout).toMatch(/^petstore: (un)?healthy \(http:\/\/127\.0\.0\.1:8080\/healthz/)
  })

  test('a secret: PETSTORE_METRICS_TOKEN= is no token, not a bad one', () => {
    const result = cli(['serve', '--port', '0', '--bogus'], { cwd: tempDir(), env: { PETSTORE_METRICS_TOKEN: '', PETSTORE_ENV: '' } })
    // Only the flag is wrong: neither variable is complained about.
    expect(reasonLine(result.stderr)).toBe('petstore: unknown option --bogus')
  })

  test('an empty flag was typed, so it is refused, not taken as unset', () => {
    const cwd = tempDir()
    const result = cli(['keys', 'create', '--plan', 'free', '--data', ''], { cwd })
    expect(result.code).toBe(2)
    expect(reasonLine(result.stderr)).toBe('petstore: --data needs a value, and the one given is empty')
    expect(readdirSync(cwd)).toEqual([])
  })
})

/**
 * Runs the binary as another user, so that permissions apply: as nobody when the tests run as root
 * (as in CI containers), else as the user the tests run as, who owns nothing of root's.
 */
const asRoot = process.getuid!() === 0
const OTHER = asRoot ? 'user nobody (uid 65534)' : `uid ${process.getuid!()}`
function asOtherUser(args: string[], cwd: string) {
  const command = asRoot ? ['setpriv', '--reuid=nobody', '--regid=nogroup', '--clear-groups', BINARY, ...args] : [BINARY, ...args]
  const result = Bun.spawnSync(command, { cwd, env: cleanEnv(), stdout: 'pipe', stderr: 'pipe' })
  return { code: result.exitCode, stdout: result.stdout.toString(), stderr: result.stderr.toString() }
}

/** A folder the other user can enter, holding a data file with one key that only root (or nobody) may use. */
function folderWithDataFile(): { dir: string; dataFile: string } {
  const dir = tempDir()
  chmodSync(dir, 0o755)
  const dataFile = join(dir, 'petstore.db')
  createKeyWithCli(dataFile, ['--plan', 'free'])
  return { dir, dataFile }
}

describe('a data file the permissions keep from the process', () => {
  test('one that cannot be read is a permission problem naming the user, for serve and the commands', () => {
    const { dir, dataFile } = folderWithDataFile()
    // Root reads any file: without setpriv, the tests' own user cannot read a file of mode 0000.
    chmodSync(dataFile, asRoot ? 0o600 : 0o000)
    for (const args of [
      ['serve', '--port', '0', '--data', dataFile],
      ['keys', 'list', '--data', dataFile],
      ['keys', 'create', '--plan', 'free', '--data', dataFile],
    ]) {
      const result = asOtherUser(args, dir)
      expect(result.code).toBe(1)
      expect(result.stderr).toMatch(
        new RegExp(
          `^petstore: permission denied: ${dataFile} exists but cannot be read \\(owner .*, mode 0[0-7]{3}\\); petstore runs as ${OTHER.replace(/[()]/g, '\\$&')}: `,
        ),
      )
      expect(result.stderr.split('\n')).toHaveLength(2)
    }
  })

  test('behind a folder that cannot be entered, the default data file is not reported missing', () => {
    const dir = tempDir()
    chmodSync(dir, 0o755)
    mkdirSync(join(dir, 'data'))
    createKeyWithCli(join(dir, 'data', 'petstore.db'), ['--plan', 'free'])
    chmodSync(join(dir, 'data'), 0o700)
    if (!asRoot) chmodSync(join(dir, 'data'), 0o000)
    for (const args of [
      ['keys', 'list'],
      ['keys', 'create', '--plan', 'free'],
      ['serve', '--port', '0'],
    ]) {
      const result = asOtherUser(args, dir)
      expect(result.code).toBe(1)
      expect(result.stderr).not.toContain('no data file')
      expect(result.stderr).toContain(
        `permission denied: ${join(dir, 'data', 'petstore.db')} cannot be reached: a folder on its path cannot be entered`,
      )
      expect(result.stderr).toContain(`petstore runs as ${OTHER}`)
    }
    if (!asRoot) chmodSync(join(dir, 'data'), 0o700)
  })

  test('keys create into a folder it cannot write, or on a file it can only read, says so', () => {
    const { dir, dataFile } = folderWithDataFile()
    const created = asOtherUser(['keys', 'create', '--plan', 'free', '--data', join(dir, 'new.db')], dir)
    expect([created.code, created.stdout]).toEqual([1, ''])
    expect(created.stderr).toBe(
      `petstore: permission denied: ${join(dir, 'new.db')} does not exist, and ${dir} cannot be written to create it; petstore runs as ${OTHER}: give that user access, or run petstore as the data's owner\n`,
    )
    chmodSync(dataFile, 0o644)
    const onReadOnly = asOtherUser(['keys', 'create', '--plan', 'free', '--data', dataFile], dir)
    expect([onReadOnly.code, onReadOnly.stdout]).toEqual([1, ''])
    expect(onReadOnly.stderr).toContain(`permission denied: ${dataFile} can be read but not written`)
    expect(onReadOnly.stderr).toContain(`petstore runs as ${OTHER}`)
    // Reading it is still allowed.
    expect(asOtherUser(['keys', 'list', '--data', dataFile], dir).code).toBe(0)
  })
})

describe('keys revoke given a secret', () => {
  test.each(['revoke', 'reset-limits'])('keys %s refuses it without printing it', (sub) => {
    const dataFile = join(tempDir(), 'p.db')
    const secret = createKeyWithCli(dataFile, ['--plan', 'free'])
    const result = cli(['keys', sub, secret, '--data', dataFile])
    expect(result.code).toBe(2)
    expect(reasonLine(result.stderr)).toBe(
      `petstore: keys ${sub} takes a key's ID (key_…, as keys list shows), and what was given is shaped like a key's secret (psk_…), which is not repeated here`,
    )
    expect(result.stderr + result.stdout).not.toContain(secret.slice(4, 12))
    // Nothing was revoked.
    expect(cli(['keys', 'list', '--json', '--data', dataFile]).stdout).toContain('"revoked": null')
  })

  // Wherever a secret lands among the words, and however many there are, it is not printed back.
  test.each([['list SECRET'], ['usage key_x SECRET'], ['revoke key_x SECRET'], ['set-plan key_x pro SECRET']])(
    'keys %s refuses the secret without printing it',
    (words: string) => {
      const dataFile = join(tempDir(), 'p.db')
      const secret = createKeyWithCli(dataFile, ['--plan', 'free'])
      const result = cli(['keys', ...words.split(' ').map((word) => (word === 'SECRET' ? secret : word)), '--data', dataFile])
      expect(result.code).toBe(2)
      expect(reasonLine(result.stderr)).toContain("shaped like a key's secret (psk_…), which is not repeated here")
      expect(result.stderr + result.stdout).not.toContain(secret.slice(4, 12))
    },
  )
})

describe('a usage error ends with its reason', () => {
  test.each([
    [['serve', '--prot', '8080'], 'petstore: unknown option --prot (did you mean --port?)', 'Usage: petstore serve'],
    [['keys', 'create'], 'petstore: keys create needs --plan', 'Usage: petstore keys'],
    [['frobnicate'], 'petstore: unknown command "frobnicate"', 'Usage: petstore COMMAND'],
    [['backup'], 'petstore: backup needs exactly one FILE', 'Usage: petstore backup'],
  ])('%p: the usage first, the reason on the last line', (args, reason, usage) => {
    const result = cli(args, { cwd: tempDir() })
    expect(result.code).toBe(2)
    expect(result.stderr.startsWith(usage)).toBe(true)
    expect(result.stderr.endsWith(`\n\n${reason}\n`)).toBe(true)
  })
})
