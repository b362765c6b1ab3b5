/**
 * Environments and configuration sources: --env defaults (data file, base URL), production and staging
 * side by side, flags over environment variables, and no autoloaded .env or bunfig.toml.
 */
import { afterAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { copyFileSync, existsSync, mkdirSync, readFileSync, realpathSync, symlinkSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { join } from 'node:path'
import { cli, cleanEnv, startServer, tempDir } from '../support/binary'
import { auth, killSpawned, postPet, reasonLine, spawnServe, unusedPort } from './helpers'

afterAll(killSpawned)
// Process tests wait on real processes; bunfig's [test] timeout is not applied by bun test 1.4.
setDefaultTimeout(20_000)

const LOCAL = ['--port', '0', '--host', '127.0.0.1']

async function createdLocation(base: string, key: string, name = 'Rex'): Promise<{ id: number; location: string }> {
  const response = await postPet(base, key, { name, categoryId: 1 })
  expect(response.status).toBe(201)
  const pet = (await response.json()) as { id: number }
  return { id: pet.id, location: response.headers.get('location')! }
}

describe('--env', () => {
  test('staging uses ./data/petstore-staging.db relative to the working directory', async () => {
    const cwd = tempDir()
    const server = await spawnServe(['--env', 'staging', ...LOCAL], { cwd })
    expect(server.env).toBe('staging')
    expect(existsSync(join(cwd, 'data', 'petstore-staging.db'))).toBe(true)
    expect(existsSync(join(cwd, 'data', 'petstore.db'))).toBe(false)
    // The hint for more keys names the environment, so the key lands in the right file.
    expect(server.stderr()).toMatch(/petstore keys create .*--env staging/)
    const { id, location } = await createdLocation(server.base, server.bootstrapKey!)
    expect(location).toBe(`http://localhost:${server.port}/v1/pets/${id}`)
    // The OpenAPI document names both environments' defaults (production's port is not this one's).
    const doc = (await (await fetch(`${server.origin}/openapi.json`)).json()) as { servers: { url: string }[] }
    const urls = doc.servers.map((s) => s.url)
    expect(urls).toContain('http://localhost:8080/v1')
    expect(urls).toContain(`http://localhost:${server.port}/v1`)
    expect(await server.stop()).toBe(0)

    // The CLI with --env staging works on the same file.
    const rows = JSON.parse(cli(['keys', 'list', '--json', '--env', 'staging'], { cwd }).stdout)
    expect(rows).toHaveLength(1)
  })

  test('production defaults: ./data/petstore.db, links at http://localhost:<bound port>/v1, staging default 8081 in the document', async () => {
    const cwd = tempDir()
    const server = await spawnServe(LOCAL, { cwd })
    expect(server.env).toBe('production')
    expect(existsSync(join(cwd, 'data', 'petstore.db'))).toBe(true)
    expect(existsSync(join(cwd, 'data', 'petstore-staging.db'))).toBe(false)
    expect(server.apiBase).toBe(`http://localhost:${server.port}/v1`)
    const { id, location } = await createdLocation(server.base, server.bootstrapKey!)
    expect(location).toBe(`http://localhost:${server.port}/v1/pets/${id}`)
    const doc = (await (await fetch(`${server.origin}/openapi.json`)).json()) as { servers: { url: string }[] }
    expect(doc.servers.map((s) => s.url)).toContain('http://localhost:8081/v1')
    expect(await server.stop()).toBe(0)
  })

  test('production and staging run side by side from one directory with separate data and keys', async () => {
    const cwd = tempDir()
    const production = await spawnServe(LOCAL, { cwd })
    const staging = await spawnServe(['--env', 'staging', ...LOCAL], { cwd })
    expect(production.port).not.toBe(staging.port)
    expect(production.env).toBe('production')
    expect(staging.env).toBe('staging')
    expect(production.bootstrapKey).toMatch(/^psk_/)
    expect(staging.bootstrapKey).toMatch(/^psk_/)
    expect(production.bootstrapKey).not.toBe(staging.bootstrapKey)
    expect(existsSync(join(cwd, 'data', 'petstore.db'))).toBe(true)
    expect(existsSync(join(cwd, 'data', 'petstore-staging.db'))).toBe(true)

    // Each key belongs to its own environment only.
    expect((await fetch(`${production.base}/pets`, { headers: auth(staging.bootstrapKey!) })).status).toBe(401)
    expect((await fetch(`${staging.base}/pets`, { headers: auth(production.bootstrapKey!) })).status).toBe(401)

    // Pets too.
    const p = await createdLocation(production.base, production.bootstrapKey!, 'Prod')
    expect(p.location).toBe(`http://localhost:${production.port}/v1/pets/${p.id}`)
    const s = await createdLocation(staging.base, staging.bootstrapKey!, 'Stage')
    expect(s.location).toBe(`http://localhost:${staging.port}/v1/pets/${s.id}`)
    const prodPets = (await (await fetch(`${production.base}/pets`, { headers: auth(production.bootstrapKey!) })).json()) as {
      name: string
    }[]
    const stagePets = (await (await fetch(`${staging.base}/pets`, { headers: auth(staging.bootstrapKey!) })).json()) as { name: string }[]
    expect(prodPets.map((x: { name: string }) => x.name)).toEqual(['Prod'])
    expect(stagePets.map((x: { name: string }) => x.name)).toEqual(['Stage'])

    expect(await production.stop()).toBe(0)
    expect(await staging.stop()).toBe(0)
  })
})

describe('flags win over environment variables', () => {
  test('PETSTORE_ENV selects the environment; --env beats it', async () => {
    const cwd = tempDir()
    const fromVariable = await spawnServe(LOCAL, { cwd, env: { PETSTORE_ENV: 'staging' } })
    expect(fromVariable.env).toBe('staging')
    expect((await fetch(`${fromVariable.base}/pets`, { headers: auth(fromVariable.bootstrapKey!) })).status).toBe(200)
    expect(await fromVariable.stop()).toBe(0)
    expect(existsSync(join(cwd, 'data', 'petstore-staging.db'))).toBe(true)
    expect(existsSync(join(cwd, 'data', 'petstore.db'))).toBe(false)

    const fromFlag = await spawnServe(['--env', 'production', ...LOCAL], { cwd, env: { PETSTORE_ENV: 'staging' } })
    expect(fromFlag.env).toBe('production')
    expect((await fetch(`${fromFlag.base}/pets`, { headers: auth(fromFlag.bootstrapKey!) })).status).toBe(200)
    expect(await fromFlag.stop()).toBe(0)
    expect(existsSync(join(cwd, 'data', 'petstore.db'))).toBe(true)
  })

  test('PETSTORE_DATA selects the data file; --data beats it', async () => {
    const dir = tempDir()
    const variableFile = join(dir, 'from-variable.db')
    const flagFile = join(dir, 'from-flag.db')
    const fromVariable = await spawnServe(LOCAL, { cwd: dir, env: { PETSTORE_DATA: variableFile } })
    expect(fromVariable.dataFile).toBe(variableFile)
    expect((await fetch(`${fromVariable.base}/pets`, { headers: auth(fromVariable.bootstrapKey!) })).status).toBe(200)
    expect(await fromVariable.stop()).toBe(0)
    expect(existsSync(variableFile)).toBe(true)
    expect(existsSync(join(dir, 'data'))).toBe(false)

    const other = join(tempDir(), 'other.db')
    const fromFlag = await startServer({ dataFile: flagFile, env: { PETSTORE_DATA: other } })
    expect((await fetch(`${fromFlag.base}/pets`, { headers: auth(fromFlag.bootstrapKey!) })).status).toBe(200)
    expect(await fromFlag.stop()).toBe(0)
    expect(existsSync(flagFile)).toBe(true)
    expect(existsSync(other)).toBe(false)

    // The CLI follows the same rule.
    const secret = cli(['keys', 'create', '--plan', 'pro', '--name', 'via-variable'], { cwd: dir, env: { PETSTORE_DATA: flagFile } })
    expect(secret.code).toBe(0)
    const names = JSON.parse(cli(['keys', 'list', '--json', '--data', flagFile], { env: { PETSTORE_DATA: variableFile } }).stdout).map(
      (r: { name: string }) => r.name,
    )
    expect(names).toContain('via-variable')
  })

  test('PETSTORE_PORT selects the port; --port beats it', async () => {
    const port = await unusedPort()
    const fromVariable = await spawnServe(['--host', '127.0.0.1', '--data', join(tempDir(), 'p.db')], {
      env: { PETSTORE_PORT: String(port) },
    })
    expect(fromVariable.port).toBe(port)
    expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200)
    expect(await fromVariable.stop()).toBe(0)

    // A port that is taken: if the variable won, the server could not start.
    const holder = createServer()
    await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve))
    const taken = (holder.address() as { port: number }).port
    try {
      const fromFlag = await startServer({ env: { PETSTORE_PORT: String(taken) } })
      expect(fromFlag.port).not.toBe(taken)
      expect((await fetch(`${fromFlag.origin}/healthz`)).status).toBe(200)
      expect(await fromFlag.stop()).toBe(0)
    } finally {
      await new Promise<void>((resolve) => holder.close(() => resolve()))
    }
  })

  test('PETSTORE_HOST selects the address; --host beats it', async () => {
    const fromVariable = await spawnServe(['--port', '0', '--data', join(tempDir(), 'p.db')], {
      env: { PETSTORE_HOST: '127.0.0.1' },
    })
    expect(fromVariable.stderr()).toMatch(/listening on http:\/\/127\.0\.0\.1:/)
    expect((await fetch(`${fromVariable.origin}/healthz`)).status).toBe(200)
    expect(await fromVariable.stop()).toBe(0)
    // An address this machine does not have would fail to bind if the variable won.
    const fromFlag = await startServer({ env: { PETSTORE_HOST: '192.0.2.1' } })
    expect((await fetch(`${fromFlag.origin}/healthz`)).status).toBe(200)
    expect(await fromFlag.stop()).toBe(0)
  })

  test('PETSTORE_BASE_URL is used for Location and Link headers', async () => {
    const server = await startServer({ env: { PETSTORE_BASE_URL: 'https://pets.example.com/v1' } })
    const key = server.bootstrapKey!
    expect(server.stderr()).toContain('API at https://pets.example.com/v1')
    const first = await createdLocation(server.base, key, 'One')
    expect(first.location).toBe(`https://pets.example.com/v1/pets/${first.id}`)
    await createdLocation(server.base, key, 'Two')
    const page = await fetch(`${server.base}/pets?limit=1`, { headers: auth(key) })
    expect(page.headers.get('link')).toMatch(/^<https:\/\/pets\.example\.com\/v1\/pets\?[^>]*cursor=[^>]+>; rel="next"$/)
    const deprecated = await fetch(`${server.base}/pets/${first.id}`, { headers: auth(key) })
    expect(deprecated.headers.get('link')).toBe('<https://pets.example.com/v1/pets>; rel="successor-version"')
    const doc = (await (await fetch(`${server.origin}/openapi.json`)).json()) as { servers: { url: string }[] }
    expect(doc.servers.map((s) => s.url)).toContain('https://pets.example.com/v1')
    expect(await server.stop()).toBe(0)
  })

  test('--base-url beats PETSTORE_BASE_URL', async () => {
    const server = await startServer({
      args: ['--base-url', 'https://flag.example.com/v1'],
      env: { PETSTORE_BASE_URL: 'https://variable.example.com/v1' },
    })
    const { id, location } = await createdLocation(server.base, server.bootstrapKey!)
    expect(location).toBe(`https://flag.example.com/v1/pets/${id}`)
    expect(await server.stop()).toBe(0)
  })

  test('the base URL’s path is where the API is mounted', async () => {
    const server = await startServer({ args: ['--base-url', 'https://pets.example.com/api/v1'] })
    const key = server.bootstrapKey!
    const response = await postPet(`${server.origin}/api/v1`, key, { name: 'Mounted', categoryId: 1 })
    expect(response.status).toBe(201)
    const pet = (await response.json()) as { id: number }
    expect(response.headers.get('location')).toBe(`https://pets.example.com/api/v1/pets/${pet.id}`)
    const elsewhere = await fetch(`${server.origin}/v1/pets`, { headers: auth(key) })
    expect(elsewhere.status).toBe(404)
    expect(await server.stop()).toBe(0)
  })

  test('staging ignores PETSTORE_BASE_URL and uses PETSTORE_STAGING_BASE_URL', async () => {
    const plain = await startServer({ args: ['--env', 'staging'], env: { PETSTORE_BASE_URL: 'https://prod.example.com/v1' } })
    const a = await createdLocation(plain.base, plain.bootstrapKey!)
    expect(a.location).toBe(`http://localhost:${plain.port}/v1/pets/${a.id}`)
    expect(await plain.stop()).toBe(0)

    const configured = await startServer({
      args: ['--env', 'staging'],
      env: { PETSTORE_BASE_URL: 'https://prod.example.com/v1', PETSTORE_STAGING_BASE_URL: 'https://staging.example.com/v1' },
    })
    const b = await createdLocation(configured.base, configured.bootstrapKey!)
    expect(b.location).toBe(`https://staging.example.com/v1/pets/${b.id}`)
    expect(await configured.stop()).toBe(0)
  })

  test('a bad PETSTORE_BASE_URL is refused at start with a one-line reason', () => {
    const result = cli(['serve', '--port', '0', '--data', join(tempDir(), 'p.db')], {
      env: { PETSTORE_BASE_URL: 'ftp://pets.example.com/v1' },
    })
    expect(result.code).not.toBe(0)
    expect(reasonLine(result.stderr)).toMatch(/^petstore: .*PETSTORE_BASE_URL/)
  })
})

describe('no autoloaded configuration from the working directory', () => {
  test('.env and bunfig.toml in the cwd are ignored', async () => {
    const cwd = tempDir()
    writeFileSync(join(cwd, '.env'), 'PETSTORE_BASE_URL=https://evil.example/v1\nPETSTORE_ENV=staging\nPETSTORE_DATA=./evil.db\n')
    writeFileSync(join(cwd, 'bunfig.toml'), 'preload = ["./evil.ts"]\n')
    writeFileSync(join(cwd, 'evil.ts'), 'require("node:fs").writeFileSync("preloaded", "yes")\n')
    mkdirSync(join(cwd, 'state'))
    const dataFile = join(cwd, 'state', 'petstore.db')

    const server = await startServer({ cwd, dataFile })
    expect(server.stderr()).toContain('production listening')
    const { id, location } = await createdLocation(server.base, server.bootstrapKey!)
    expect(location).toBe(`http://localhost:${server.port}/v1/pets/${id}`)
    expect(await server.stop()).toBe(0)

    // Were .env read, PETSTORE_DATA would name ./evil.db and the key would be created there; the
    // default path instead must already exist, so the command refuses and names it.
    const created = cli(['keys', 'create', '--plan', 'pro'], { cwd })
    expect(created.code).toBe(1)
    expect(created.stderr).toContain(join(cwd, 'data', 'petstore.db'))
    expect(existsSync(join(cwd, 'data', 'petstore.db'))).toBe(false)
    expect(existsSync(join(cwd, 'evil.db'))).toBe(false)
    expect(existsSync(join(cwd, 'data', 'petstore-staging.db'))).toBe(false)
    expect(existsSync(join(cwd, 'preloaded'))).toBe(false)
    expect(readFileSync(join(cwd, '.env'), 'utf8')).toContain('evil')
  })

  test('from source too: `bun start` and `bun src/index.ts` in the project folder ignore its .env, as the binary does', async () => {
    // The project as a clone has it (its sources and dependencies linked), with a .env beside package.json.
    const root = join(import.meta.dir, '..', '..')
    const project = tempDir()
    for (const file of ['package.json', 'bunfig.toml', 'tsconfig.json']) copyFileSync(join(root, file), join(project, file))
    symlinkSync(join(root, 'src'), join(project, 'src'))
    symlinkSync(realpathSync(join(root, 'node_modules')), join(project, 'node_modules'))
    writeFileSync(join(project, '.env'), 'PETSTORE_ENV=staging\nPETSTORE_DATA=./evil.db\n')
    mkdirSync(join(project, 'state'))

    const server = await spawnServe(
      ['--port', '0', '--host', '127.0.0.1', '--data', join(project, 'state', 'petstore.db'), '--console-address', 'off'],
      { cwd: project, command: [process.execPath, 'run', 'start'] },
    )
    // A durable create from the sources: the commit worker is found from there as from the binary.
    const key = readFileSync(join(project, 'state', 'petstore-bootstrap-key.txt'), 'utf8').trim()
    const durable = await fetch(`${server.base}/pets`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'Rex', categoryId: 1 }),
    }).then(async (answer) => `${answer.status} ${await answer.text()}`)
    // Stopped before any assertion: `bun run` forwards SIGTERM to the server it started, while the SIGKILL
    // of the clean-up after a failed test would leave that server running.
    const stopped = await server.stop()
    expect(server.env).toBe('production')
    expect(stopped).toBe(0)
    expect(durable).toBe('201 {"id":1,"name":"Rex","categoryId":1,"status":"available"}')

    // The hints name the sources as the folder they were started from reaches them: from the project's own
    // folder `src/index.ts`, from any other the whole path, which works from there.
    const sources = join(realpathSync(root), 'src', 'index.ts')
    const runs = [
      [realpathSync(root), 'src/index.ts', 'src/index.ts'],
      [tempDir(), sources, sources],
    ]
    for (const [n, [cwd, command, named]] of runs.entries()) {
      const started = await spawnServe(
        ['--port', '0', '--host', '127.0.0.1', '--data', join(project, 'state', `hint-${n}.db`), '--console-address', 'off'],
        { cwd, command: [process.execPath, command!, 'serve'] },
      )
      expect(started.stderr()).toContain(`make more with: bun ${named} keys create --plan pro`)
      expect(await started.stop()).toBe(0)
    }

    const created = Bun.spawnSync([process.execPath, 'src/index.ts', 'keys', 'create', '--plan', 'pro'], {
      cwd: project,
      env: cleanEnv(),
      stdout: 'pipe',
      stderr: 'pipe',
    })
    expect(created.exitCode).toBe(1)
    expect(created.stderr.toString()).toContain(join(project, 'data', 'petstore.db'))
    expect(existsSync(join(project, 'evil.db'))).toBe(false)
  })
})
