/**
 * The command blocks of README.md and docs/*.md (```sh, ```bash, ```console), pasted into a script as
 * written. Each one either runs here, with bash -e against the compiled binary as `petstore` on PATH,
 * in a fresh folder, or is listed with the reason it cannot (root, systemd, Docker, a deployment's own
 * hosts); a block in neither list fails the test, so a new one is decided on. The servers the blocks
 * start listen on free ports given by the environment variables the README documents, and a `curl` on
 * PATH before the real one sends what a block addresses to a documented default port (localhost:8080,
 * the console's 127.0.0.1:8090, staging's 8081) to the port this run chose: the blocks' text is unchanged.
 * The staging block starts a server in the background and at once resets and seeds its store, so it
 * must wait for the server itself.
 */
import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { chmodSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { BINARY, cleanEnv, eventually, tempDir } from '../support/binary'
import { killedAtEnd } from '../process/helpers'
import { freePorts } from '../support/ports'

setDefaultTimeout(60_000)
const ROOT = join(import.meta.dir, '..', '..')

/** The README's `sh` block that follows this heading. */
function blockAfter(heading: string): string {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8')
  const section = readme.slice(readme.indexOf(`## ${heading}`))
  return /^```sh\n([\s\S]*?)^```$/m.exec(section)![1]!
}

const PAGES = [
  'README.md',
  ...readdirSync(join(ROOT, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .sort()
    .map((name) => `docs/${name}`),
]

interface CommandBlock {
  /** `page: its first line`, which names it below whatever moves around it. */
  id: string
  code: string
}

function commandBlocks(): CommandBlock[] {
  return PAGES.flatMap((page) =>
    [...readFileSync(join(ROOT, page), 'utf8').matchAll(/^```(?:sh|bash|console|shell)\n([\s\S]*?)^```$/gm)].map(([, code]) => ({
      id: `${page}: ${code!.split('\n')[0]}`,
      code: code!,
    })),
  )
}

/** The block whose id starts with this. */
function block(prefix: string): string {
  const found = commandBlocks().filter((candidate) => candidate.id.startsWith(prefix))
  if (found.length !== 1) throw new Error(`${found.length} command blocks start with ${prefix}`)
  return found[0]!.code
}

/** Blocks run as written: here, or by the test named. */
const RUN: Record<string, string> = {
  'README.md: sha256sum -c': 'here, then the next two with its server',
  'README.md: KEY=$(cat data/petstore-bootstrap-key.txt)': 'here, against the server of the block before',
  'docs/console.md: petstore operators add ci-bot': 'here, against the same server',
  'README.md: petstore serve --env staging &': 'here, then the scenarios block with its key',
  'docs/scenarios.md: curl -i': 'here, after the staging block',
  'docs/upgrading.md: $ petstore --version': 'here, its output compared',
  'docs/clients.md: npm install openapi-fetch': 'test/docs/clients.test.ts (the npm install line excepted: no registry here)',
  'docs/clients.md: npm install --save-dev typescript@5 @types/node':
    "test/docs/clients.test.ts (the npm install line excepted: the project's own typescript and @types stand in)",
  'docs/clients.md: bun main.ts': 'test/docs/clients.test.ts',
}

/** Blocks that cannot run here, and why. */
const SKIPPED: Record<string, string> = {
  'README.md: npm install -g bun@1.4.5':
    'installs Bun and the dependencies from the npm registry, and `bun run test` is the whole suite: CI runs both on a fresh machine (.ci/run); `bun start` from a project folder is run by test/process/environments.test.ts',
  'docs/operations.md: bun run build && sudo install':
    'root and systemd (installs into /usr/local/bin, adds a system user, enables units); the units are checked by test/process/systemd-units.test.ts',
  'docs/operations.md: docker build': 'needs Docker',
  'docs/several-instances.md: export PETSTORE_DATABASE_URL=postgres://petstore:PASSWORD@db.internal':
    "a deployment's own hosts (db.internal, 10.0.0.11); test/scale/instances.test.ts runs instances so on throwaway engines",
  'docs/several-instances.md: sudo apt-get install':
    "root: installs packages and configures the system's PostgreSQL and nginx; test/scale/instances.test.ts runs the same setup on throwaway engines",
  'docs/upgrading.md: sudo install -d -m 700 -o petstore': "root and the systemd setup's petstore user and /var/lib/petstore",
  'docs/upgrading.md: sudo install -m 644': 'root and systemd',
  'docs/upgrading.md: ( set -e   # the upgrade': 'root and systemd (takeovers are run by test/process/takeover.test.ts)',
  'docs/upgrading.md: echo': 'root: a kernel setting (sysctl)',
  'docs/upgrading.md: sudo systemctl stop petstore ': 'root and systemd, and the instances of a deployment (10.0.0.11)',
  'docs/upgrading.md: ( set -e   # the rollback': 'root and systemd (restore is run by test/process/restore.test.ts)',
  'docs/keys.md: petstore keys create --plan pro --name "mobile app"':
    'names a key by its own id (key_…); every command of the block is run by test/process/key-lifecycle.test.ts',
  'docs/keys.md: petstore keys roll key_…': "a key's own id (key_…); rolls are run by test/process/key-lifecycle.test.ts",
}

/** Which of `entries`' prefixes names the block, if any. */
const decided = (id: string, entries: Record<string, string>) => Object.keys(entries).filter((prefix) => id.startsWith(prefix))

/**
 * A folder with `petstore` and a `curl` that sends a documented default port to this run's (`ports`,
 * default → chosen) on PATH; the environment to run blocks with.
 */
function sandbox(ports: Record<number, number>, extra: Record<string, string> = {}) {
  const dir = tempDir()
  const bin = join(dir, '.bin')
  mkdirSync(bin)
  symlinkSync(BINARY, join(bin, 'petstore'))
  const realCurl = Bun.which('curl')!
  const rewrites = Object.entries(ports)
    .map(([from, to]) => `a="\${a//localhost:${from}/127.0.0.1:${to}}"; a="\${a//127.0.0.1:${from}/127.0.0.1:${to}}"`)
    .join('; ')
  writeFileSync(
    join(bin, 'curl'),
    `#!/bin/bash\nargs=()\nfor a in "$@"; do ${rewrites}; args+=("$a"); done\nexec ${realCurl} "\${args[@]}"\n`,
  )
  chmodSync(join(bin, 'curl'), 0o755)
  return { dir, env: cleanEnv({ PATH: `${bin}:${process.env.PATH}`, ...extra }) }
}

/** Runs a script with bash -e to its end. */
async function runScript(script: string, cwd: string, env: Record<string, string>) {
  const proc = killedAtEnd(Bun.spawn(['bash', '-e', '-c', script], { cwd, env, stdin: 'ignore', stdout: 'pipe', stderr: 'pipe' }))
  const [code, out, err] = await Promise.all([proc.exited, new Response(proc.stdout).text(), new Response(proc.stderr).text()])
  return { code, out, err }
}

describe('README', () => {
  test('every command block of the guide runs here or is listed with the reason it cannot', () => {
    const blocks = commandBlocks()
    const undecided = blocks.filter((b) => decided(b.id, RUN).length + decided(b.id, SKIPPED).length !== 1).map((b) => b.id)
    expect(undecided).toEqual([])
    // Each entry names one block still in the guide.
    const stale = [...Object.keys(RUN), ...Object.keys(SKIPPED)].filter(
      (prefix) => blocks.filter((b) => b.id.startsWith(prefix)).length !== 1,
    )
    expect(stale).toEqual([])
    console.log(
      `command blocks: ${blocks.length}, run ${Object.keys(RUN).length}, skipped ${Object.keys(SKIPPED).length}:\n` +
        Object.entries(SKIPPED)
          .map(([id, reason]) => `  skipped ${id}: ${reason}`)
          .join('\n'),
    )
  })

  test('"Quick start": the release block starts the server; "in another terminal" and the console\'s script block run against it', async () => {
    const [port, consolePort] = await freePorts(2)
    const { dir, env } = sandbox(
      { 8080: port, 8090: consolePort },
      { PETSTORE_PORT: String(port), PETSTORE_CONSOLE_ADDRESS: `127.0.0.1:${consolePort}` },
    )
    // What a release gives: the platform's file and SHA256SUMS.
    symlinkSync(BINARY, join(dir, 'petstore-linux-x64'))
    const sum = Bun.spawnSync(['sha256sum', BINARY]).stdout.toString().split(' ')[0]
    writeFileSync(join(dir, 'SHA256SUMS'), `${sum}  petstore-linux-x64\n${'0'.repeat(64)}  petstore-windows-x64.exe\n`)

    // The release block ends in the server, in the foreground: it runs in its own session, stopped whole.
    const release = killedAtEnd(
      Bun.spawn(['setsid', 'bash', '-e', '-c', block('README.md: sha256sum -c')], {
        cwd: dir,
        env,
        stdin: 'ignore',
        stdout: 'pipe',
        stderr: 'pipe',
      }),
    )
    const releaseErr = new Response(release.stderr).text()
    try {
      await eventually(async () => {
        if (release.exitCode !== null) throw new Error(`the release block ended (${release.exitCode}): ${await releaseErr}`)
        return (await fetch(`http://127.0.0.1:${port}/healthz`, { headers: { connection: 'close' } }).catch(() => null))?.status === 200
      }, 15_000)

      const tour = await runScript(block('README.md: KEY=$(cat data/petstore-bootstrap-key.txt)'), dir, env)
      expect({ code: tour.code, err: tour.err }).toEqual({ code: 0, err: '' })
      expect(tour.out).toStartWith('[]')
      expect(tour.out).toContain('HTTP/1.1 201 Created')
      expect(tour.out).toContain('"name":"Rex"')
      expect(tour.out).toContain('HTTP/1.1 200 OK')
      expect(tour.out).toContain('HTTP/1.1 501 Not Implemented')

      const script = await runScript(block('docs/console.md: petstore operators add ci-bot'), dir, env)
      expect({ code: script.code, err: script.code === 0 ? '' : script.err }).toEqual({ code: 0, err: '' })
      // Two JSON answers, one after the other (curl -s adds no newline): the keys, then the key made.
      const [keys, created] = script.out.split(/(?<=\})(?=\{)/).map((text) => JSON.parse(text))
      expect(keys.keys.map((key: { name: string }) => key.name)).toEqual(['bootstrap'])
      expect(created).toMatchObject({ key: { name: 'app', plan: 'pro' }, secret: expect.stringMatching(/^psk_/) })
    } finally {
      process.kill(-release.pid, 'SIGTERM')
      await release.exited
    }
  })

  test('"Testing your client against petstore": the staging block runs as a script, as written, and docs/scenarios.md\'s forced 429 with its key', async () => {
    const block = blockAfter('Testing your client against petstore')
    expect(block).toContain('petstore serve --env staging &')
    const [port, consolePort] = await freePorts(2)
    const { dir, env } = sandbox({ 8081: port }, { PETSTORE_PORT: String(port), PETSTORE_CONSOLE_ADDRESS: `127.0.0.1:${consolePort}` })
    const scenario = commandBlocks().find((b) => b.id.startsWith('docs/scenarios.md: curl -i'))!.code
    // Around the blocks: the server they start in the background is stopped however they end.
    const script = `trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n${block}\n${scenario}\necho\necho "KEY=$KEY"\n`
    const { code, out, err } = await runScript(script, dir, env)
    expect({ code, err: code === 0 ? '' : err }).toEqual({ code: 0, err: '' })
    expect(err).toContain('added 250 sample pets')
    const key = /^KEY=(psk_\S+)$/m.exec(out)?.[1]
    expect(key).toBeDefined()
    expect(out).toContain('HTTP/1.1 429 Too Many Requests')
    expect(out).toContain('"code":"rate_limited"')
  })

  test('docs/upgrading.md: `petstore --version` prints what the page shows, its commit and time aside', async () => {
    const shown = block('docs/upgrading.md: $ petstore --version').split('\n').filter(Boolean)
    const command = shown[0]!.replace(/^\$ /, '')
    const { dir, env } = sandbox({})
    const { code, out } = await runScript(command, dir, env)
    expect(code).toBe(0)
    const pattern = (line: string) =>
      line.replace(/commit [0-9a-f]{12}(-dirty)?/, 'commit C').replace(/built \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ/, 'built T')
    expect(out.trim().split('\n').map(pattern)).toEqual(shown.slice(1).map(pattern))
  })

  test('every npx line in the guide says --yes: without it npx asks before installing, and a script or CI stops there', () => {
    const pages = [
      'README.md',
      ...readdirSync(join(ROOT, 'docs'))
        .filter((name) => name.endsWith('.md'))
        .map((name) => `docs/${name}`),
    ]
    const asking = pages.flatMap((page) =>
      readFileSync(join(ROOT, page), 'utf8')
        .split('\n')
        .filter((line) => /^\s*npx\s/.test(line) && !/^\s*npx --yes\s/.test(line))
        .map((line) => `${page}: ${line}`),
    )
    expect(asking).toEqual([])
  })
})
