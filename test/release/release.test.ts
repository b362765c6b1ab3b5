/**
 * `bun run release`: five binaries and SHA256SUMS, each file the right architecture, the Linux ones
 * run (arm64 under qemu-user, from Debian's qemu-user-static with its arm64 C library), and the quick
 * start followed with the downloaded binary: `./petstore serve`, the key file, and the README's calls.
 * Without qemu the arm64 run is skipped with a one-line notice; with CI=true it fails instead.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { copyFileSync, existsSync, readFileSync } from 'node:fs'
import { createHash } from 'node:crypto'
import { join } from 'node:path'
import pkg from '../../package.json'
import { TARGETS } from '../../scripts/build'
import { cleanEnv, eventually, tempDir } from '../support/binary'

const ROOT = join(import.meta.dir, '..', '..')
const QEMU = '/usr/bin/qemu-aarch64-static'
const ARM64_LIBC = '/usr/aarch64-linux-gnu'
const canRunArm64 = existsSync(QEMU) && existsSync(join(ARM64_LIBC, 'lib', 'ld-linux-aarch64.so.1'))
if (!canRunArm64) {
  if (process.env.CI === 'true') throw new Error('qemu-user-static and libc6-arm64-cross are missing: CI must install them')
  console.warn('release test: linux-arm64 run skipped (apt-get install -y qemu-user-static libc6-arm64-cross)')
}

let dir: string
const running: ReturnType<typeof Bun.spawn>[] = []

beforeAll(() => {
  dir = tempDir()
  const built = Bun.spawnSync(['bun', 'scripts/build.ts', '--release', dir], { cwd: ROOT, stdout: 'pipe', stderr: 'pipe' })
  if (built.exitCode !== 0) throw new Error(`bun run release failed:\n${built.stderr}`)
}, 180_000)
afterAll(() => {
  for (const proc of running) proc.kill('SIGKILL')
})

const fileOf = (name: string) => join(dir, `petstore-${name}${name.startsWith('windows') ? '.exe' : ''}`)

/** What the file's header says it runs on. */
function architecture(file: string): string {
  const head = readFileSync(file).subarray(0, 4096)
  if (head.readUInt32BE(0) === 0x7f454c46) return { 62: 'elf-x64', 183: 'elf-arm64' }[head.readUInt16LE(18)] ?? 'elf-other'
  if (head.readUInt32LE(0) === 0xfeedfacf) return { 16777223: 'macho-x64', 16777228: 'macho-arm64' }[head.readUInt32LE(4)] ?? 'macho-other'
  if (head.toString('latin1', 0, 2) === 'MZ') {
    const pe = head.readUInt32LE(0x3c)
    if (head.toString('latin1', pe, pe + 4) === 'PE\0\0') return head.readUInt16LE(pe + 4) === 0x8664 ? 'pe-x64' : 'pe-other'
  }
  return 'unknown'
}

/** Starts `serve` from a binary (optionally through qemu) in `cwd`; resolves with its origin. */
async function serve(command: string[], cwd: string): Promise<string> {
  const proc = Bun.spawn([...command, 'serve', '--port', '0', '--host', '127.0.0.1'], {
    cwd,
    env: cleanEnv(),
    stdout: 'ignore',
    stderr: 'pipe',
  })
  running.push(proc)
  let stderr = ''
  void (async () => {
    for await (const chunk of proc.stderr as unknown as AsyncIterable<Uint8Array>) stderr += Buffer.from(chunk).toString()
  })()
  await eventually(() => /listening on http:\/\/127\.0\.0\.1:\d+/.test(stderr), 60_000)
  return `http://127.0.0.1:${/listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(stderr)![1]}`
}

describe('release binaries', () => {
  test('five binaries of the right architectures, and SHA256SUMS that match them', () => {
    const expected: Record<string, string> = {
      'linux-x64': 'elf-x64',
      'linux-arm64': 'elf-arm64',
      'darwin-x64': 'macho-x64',
      'darwin-arm64': 'macho-arm64',
      'windows-x64': 'pe-x64',
    }
    expect(TARGETS.map(([name]) => [name, architecture(fileOf(name))])).toEqual(Object.entries(expected))
    const sums = readFileSync(join(dir, 'SHA256SUMS'), 'utf8').trim().split('\n')
    expect(sums).toHaveLength(5)
    for (const line of sums) {
      const [hash, file] = line.split('  ')
      expect(
        createHash('sha256')
          .update(readFileSync(join(dir, file!)))
          .digest('hex'),
      ).toBe(hash!)
    }
  })

  test('the linux-x64 binary says its version, and the quick start works with it as a download', async () => {
    const home = tempDir()
    copyFileSync(fileOf('linux-x64'), join(home, 'petstore'))
    Bun.spawnSync(['chmod', '+x', join(home, 'petstore')])
    const version = Bun.spawnSync(['./petstore', '--version'], { cwd: home, env: cleanEnv() })
    expect(version.stdout.toString()).toStartWith(`petstore ${pkg.version} (commit `)
    const origin = await serve(['./petstore'], home)
    const key = readFileSync(join(home, 'data', 'petstore-bootstrap-key.txt'), 'utf8').trim()
    const auth = { authorization: `Bearer ${key}` }
    expect(await (await fetch(`${origin}/v1/pets`, { headers: auth })).json()).toEqual([])
    const created = await fetch(`${origin}/v1/pets`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'Rex', categoryId: 1, status: 'available' }),
    })
    expect(created.status).toBe(201)
    expect((await fetch(`${origin}/v1/pets/1`, { headers: auth })).status).toBe(200)
    expect((await (await fetch(`${origin}/v1/pets?status=available&limit=10`, { headers: auth })).json()) as unknown[]).toHaveLength(1)
    expect((await fetch(`${origin}/v1/store/orders`, { headers: auth })).status).toBe(501)
  }, 60_000)

  test.skipIf(!canRunArm64)(
    'the linux-arm64 binary runs under qemu-user: its version, /healthz and a keyed list',
    async () => {
      const qemu = [QEMU, '-L', ARM64_LIBC, fileOf('linux-arm64')]
      const version = Bun.spawnSync([...qemu, '--version'], { env: cleanEnv() })
      expect(version.stdout.toString()).toStartWith(`petstore ${pkg.version} (commit `)
      const home = tempDir()
      const origin = await serve(qemu, home)
      expect((await fetch(`${origin}/healthz`)).status).toBe(200)
      const key = readFileSync(join(home, 'data', 'petstore-bootstrap-key.txt'), 'utf8').trim()
      const listed = await fetch(`${origin}/v1/pets`, { headers: { authorization: `Bearer ${key}` } })
      expect(listed.status).toBe(200)
      expect(await listed.json()).toEqual([])
    },
    120_000,
  )
})
