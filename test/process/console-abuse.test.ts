/**
 * The console under a client without credentials (issue 30), over the compiled binary: half-sent
 * sign-ins cannot lock operators out, made-up cookies and a throttled name cost storage next to nothing
 * (PostgreSQL), and changes that change nothing write nothing; key names refuse bidirectional controls.
 */
import { afterAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { cli } from '../support/binary'
import { killSpawned, startWithConsole } from './helpers'

afterAll(killSpawned)
setDefaultTimeout(120_000)

describe('changes that change nothing, and names that would turn a line around', () => {
  test('lifting the ban of an address that has none answers 204 and writes no audit entry', async () => {
    const server = await startWithConsole({ args: ['--no-access-log'] })
    try {
      const token = cli(['operators', 'token', 'admin', '--data', server.dataFile]).stdout.trim()
      const lift = await fetch(`${server.console}/api/bans/addresses/203.0.113.9`, {
        method: 'DELETE',
        headers: { authorization: `Bearer ${token}` },
      })
      const { entries } = (await (
        await fetch(`${server.console}/api/audit`, { headers: { authorization: `Bearer ${token}` } })
      ).json()) as { entries: { action: string; target: string }[] }
      console.log(`lift of a ban that is not there: ${lift.status}; audit: ${JSON.stringify(entries.map((entry) => entry.action))}`)
      expect(lift.status).toBe(204)
      expect(entries.filter((entry) => entry.action === 'ban.lift')).toEqual([])
    } finally {
      await server.stop()
    }
  })

  test('a key name with a bidirectional control (U+202E, U+2066, U+200F) is refused by keys create and by the console', async () => {
    const server = await startWithConsole({ args: ['--no-access-log'] })
    try {
      const token = cli(['operators', 'token', 'admin', '--data', server.dataFile]).stdout.trim()
      for (const control of ['\u202e', '\u2066', '\u200f']) {
        const name = `invoice${control}fdp.exe`
        const created = cli(['keys', 'create', '--plan', 'free', '--name', name, '--data', server.dataFile])
        const posted = await fetch(`${server.console}/api/keys`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
          body: JSON.stringify({ plan: 'free', name }),
        })
        const body = (await posted.json()) as { message: string }
        console.log(`U+${control.codePointAt(0)!.toString(16)}: keys create exit ${created.code}; console ${posted.status} ${body.message}`)
        expect(created.code).not.toBe(0)
        expect(created.stderr).toContain('--name must be at most 200 characters with no control or bidirectional formatting characters')
        expect(posted.status).toBe(400)
        expect(body.message).toMatch(
          /^name: must be a string of at most 200 characters, with no control or bidirectional formatting characters/,
        )
      }
      const list = cli(['keys', 'list', '--json', '--data', server.dataFile])
      expect(JSON.parse(list.stdout).map((key: { name: string }) => key.name)).not.toContainEqual(expect.stringContaining('invoice'))
    } finally {
      await server.stop()
    }
  })
})
