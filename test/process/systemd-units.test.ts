/**
 * The systemd units in deploy/systemd/, as shipped: `systemd-analyze verify` accepts them without a
 * word (only the binary's path is replaced, as verify checks that it exists); the template's command
 * line, started twice, takes over from itself; and the backup service's commands write a dated backup
 * and keep the newest 14.
 */
import { afterAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { BINARY, cleanEnv, createKeyWithCli, tempDir } from '../support/binary'
import { auth, killSpawned, spawnServe, unusedPorts } from './helpers'

afterAll(killSpawned)
setDefaultTimeout(60_000)

const UNITS = join(import.meta.dir, '..', '..', 'deploy', 'systemd')
const ANALYZE = '/usr/bin/systemd-analyze'
const unitText = (name: string) => readFileSync(join(UNITS, name), 'utf8')

/** A unit's command lines for one setting, as systemd would run them from `root` instead of /var/lib/petstore. */
function commands(unit: string, setting: string, root: string): string[] {
  return unitText(unit)
    .split('\n')
    .filter((line) => line.startsWith(`${setting}=`))
    .map((line) =>
      line
        .slice(setting.length + 1)
        .replaceAll('/usr/local/bin/petstore', BINARY)
        .replaceAll('/var/lib/petstore', root)
        .replaceAll('%%', '%'),
    )
}

describe('deploy/systemd', () => {
  test('systemd-analyze verify accepts every unit without a warning', () => {
    // Not skipped when missing: Debian's systemd package provides it (.ci/run installs it).
    expect(existsSync(ANALYZE)).toBe(true)
    const dir = tempDir()
    const names = readdirSync(UNITS).filter((name) => /\.(service|timer)$/.test(name))
    expect(names.sort()).toEqual(['petstore-backup.service', 'petstore-backup.timer', 'petstore.service', 'petstore@.service'])
    for (const name of names) writeFileSync(join(dir, name), unitText(name).replaceAll('/usr/local/bin/petstore', BINARY))
    const targets = names.map((name) => join(dir, name.replace('@.', '@a.')))
    const result = Bun.spawnSync([ANALYZE, 'verify', ...targets], { cwd: dir, env: cleanEnv(), stdout: 'pipe', stderr: 'pipe' })
    expect(result.stderr.toString() + result.stdout.toString()).toBe('')
    expect(result.exitCode).toBe(0)
  })

  test('the units, the proxy snippets and the docs name one metrics address, which no common program uses', () => {
    const ROOT = join(import.meta.dir, '..', '..')
    const addresses = ['petstore.service', 'petstore@.service'].map((name) => unitText(name).match(/--metrics-address (\S+)/)?.[1])
    expect(new Set(addresses).size).toBe(1)
    const address = addresses[0]!
    const port = Number(address.split(':').pop())
    // Prometheus (9090), its Pushgateway and Alertmanager (9091-9094), and the exporters' range (9100-9999).
    expect(port < 9090 || port > 9999).toBe(true)
    expect(address.startsWith('127.0.0.1:')).toBe(true)
    for (const file of ['deploy/nginx-petstore.conf', 'deploy/Caddyfile', 'docs/operations.md']) {
      const text = readFileSync(join(ROOT, file), 'utf8')
      expect([file, text.includes(`http://${address}/metrics`)]).toEqual([file, true])
      expect([file, text.match(/127\.0\.0\.1:9\d{3}\b/g)]).toEqual([file, null])
    }
  })

  test("the template's command line, started as the other instance, takes over from the running one", async () => {
    const root = tempDir()
    mkdirSync(join(root, 'data'))
    const dataFile = join(root, 'data', 'petstore.db')
    const key = createKeyWithCli(dataFile, ['--plan', 'pro'])
    const [port, metricsPort] = await unusedPorts(2)
    const [execStart] = commands('petstore@.service', 'ExecStart', root)
    const args = execStart!
      .split(' ')
      .slice(2) // the binary and `serve`
      .map((arg) => arg.replace(/^8080$/, String(port)).replace(/^127\.0\.0\.1:18090$/, `127.0.0.1:${metricsPort}`))
    expect(args).toContain('--takeover')
    const a = await spawnServe([...args, '--no-access-log'], { cwd: root })
    const b = await spawnServe([...args, '--no-access-log'], { cwd: root })
    expect(await a.exited).toBe(0)
    expect((await fetch(`http://127.0.0.1:${port}/v1/pets`, { headers: auth(key) })).status).toBe(200)
    expect((await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).status).toBe(200)
    expect(await b.stop()).toBe(0)
  })

  test('the backup service writes a dated, whole backup and keeps the newest 14', () => {
    const root = tempDir()
    mkdirSync(join(root, 'data'))
    const dataFile = join(root, 'data', 'petstore.db')
    createKeyWithCli(dataFile, ['--plan', 'pro'])
    mkdirSync(join(root, 'backups'))
    const old = Array.from({ length: 15 }, (_, i) => `petstore-2020-01-${String(i + 1).padStart(2, '0')}T000000.db`)
    for (const name of old) writeFileSync(join(root, 'backups', name), 'an older backup')
    const run = (command: string) => {
      // Each line is `/bin/sh -c '…'` or a plain command; the shell runs it as systemd would.
      const result = Bun.spawnSync(['/bin/sh', '-c', command], { cwd: root, env: cleanEnv(), stdout: 'pipe', stderr: 'pipe' })
      expect({ command, code: result.exitCode }).toEqual({ command, code: 0 })
    }
    for (const setting of ['ExecStartPre', 'ExecStart', 'ExecStartPost'])
      for (const command of commands('petstore-backup.service', setting, root)) run(command)
    const kept = readdirSync(join(root, 'backups')).sort()
    expect(kept).toHaveLength(14)
    // The two oldest went; the new one, named by today's date, is a data file the CLI can read.
    expect(kept.slice(0, 13)).toEqual(old.slice(2))
    const today = new Date().toISOString().slice(0, 10)
    expect(kept[13]).toMatch(new RegExp(`^petstore-${today}T\\d{6}\\.db$`))
    const listed = Bun.spawnSync([BINARY, 'keys', 'list', '--data', join(root, 'backups', kept[13]!)], { env: cleanEnv() })
    expect(listed.exitCode).toBe(0)
  })
})
