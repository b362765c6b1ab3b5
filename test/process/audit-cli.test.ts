/**
 * What the command line changes is in the console's audit log, read through the console's API over the
 * compiled binary: the first start's key and operator, `keys create|set-plan|reset-limits|revoke` and
 * `operators add|token|reset-password|remove`, each with the command line and the system account as the
 * actor, and never a secret.
 */
import { afterAll, expect, setDefaultTimeout, test } from 'bun:test'
import { cli, createKeyWithCli } from '../support/binary'
import { killSpawned, startWithConsole } from './helpers'

afterAll(killSpawned)
setDefaultTimeout(60_000)

test("the command line's changes and the first start's creations are in the audit log, as cli (USER), with no secret", async () => {
  const server = await startWithConsole({ args: ['--no-access-log'] })
  try {
    const data = ['--data', server.dataFile]
    const user = Bun.spawnSync(['id', '-un']).stdout.toString().trim()
    const run = (...args: string[]) => {
      const result = cli([...args, ...data])
      if (result.code !== 0) throw new Error(`${args.join(' ')}: ${result.stderr}`)
      return result.stdout.trim()
    }
    const bootstrapId = JSON.parse(run('keys', 'list', '--json')).find((key: { name: string }) => key.name === 'bootstrap').id
    const secret = createKeyWithCli(server.dataFile, ['--plan', 'pro', '--name', 'from the cli'])
    const id = JSON.parse(run('keys', 'list', '--json')).find((key: { name: string }) => key.name === 'from the cli').id
    run('keys', 'set-plan', id, 'enterprise', '--rpm', '5', '--rpd', '50')
    run('keys', 'reset-limits', id)
    run('keys', 'revoke', id)
    // Revoked once: again is no change (said so, exit 0), and a revoked key has no limits to reset.
    const again = cli(['keys', 'revoke', id, ...data])
    expect(again.code).toBe(0)
    expect(again.stderr).toContain(`petstore: ${id} was already revoked`)
    const reset = cli(['keys', 'reset-limits', id, ...data])
    expect(reset.code).toBe(1)
    expect(reset.stderr).toContain(`no active key with id "${id}"`)
    const password = run('operators', 'add', 'ops')
    const newPassword = run('operators', 'reset-password', 'ops')
    run('operators', 'remove', 'ops')
    const token = run('operators', 'token', 'admin')
    // A command that changes nothing is not recorded.
    expect(cli(['keys', 'revoke', 'key_nope', ...data]).code).toBe(1)

    const answer = await fetch(`${server.console}/api/audit`, { headers: { authorization: `Bearer ${token}` } })
    expect(answer.status).toBe(200)
    const text = await answer.text()
    const entries = (JSON.parse(text) as { entries: { actor: string; action: string; target: string }[] }).entries.reverse()
    const cliActor = `cli (${user})`
    const firstStart = `cli (${user}, first start)`
    expect(entries.map((entry) => [entry.actor, entry.action, entry.target])).toEqual([
      [firstStart, 'key.create', bootstrapId],
      [firstStart, 'operator.add', 'admin'],
      [cliActor, 'key.create', id],
      [cliActor, 'key.set-plan', `${id} enterprise`],
      [cliActor, 'key.reset-limits', id],
      [cliActor, 'key.revoke', id],
      [cliActor, 'operator.add', 'ops'],
      [cliActor, 'operator.reset-password', 'ops'],
      [cliActor, 'operator.remove', 'ops'],
      [cliActor, 'operator.token', 'admin'],
    ])
    for (const hidden of [secret, server.password, password, newPassword, token, server.bootstrapKey!]) expect(text).not.toContain(hidden)
  } finally {
    await server.stop()
  }
})
