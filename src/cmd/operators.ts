/**
 * `petstore operators add|list|remove|reset-password|token`: the people who sign in to the console,
 * straight in storage. A running server refuses a removed operator's session, or a session from before a
 * password reset, at its next request. Each change is written to the console's audit log.
 */
import { checkOperatorName, generatePassword, hashPassword, makeCredentialSecret } from '../domain/operators'
import type { Storage } from '../domain/repositories'
import { existsSync, rmSync } from 'node:fs'
import { resolve } from 'node:path'
import { resolveDatabase, resolveDataFile } from '../config'
import { toggle, flagLines } from '../flags/table'
import { auditCommand } from './audit'
import { secretFile } from './bootstrap-key'
import { FIRST_OPERATOR } from './bootstrap-operator'
import { asUsageError, COMMON, parseSub, printTable, UsageError, type Values, withStorage } from './options'

const FLAGS = { json: toggle({ flag: 'json', help: 'print JSON', only: ['list'] }) }

export const USAGE = `Usage: petstore operators add NAME
       petstore operators list [--json]
       petstore operators remove NAME
       petstore operators reset-password NAME
       petstore operators token NAME

  Operators sign in to the console (serve --console-address) with a name and a password.
  add and reset-password print a generated password once, alone, as the last line of stdout;
  reset-password ends the operator's console sessions. remove ends their sessions and token.
  token prints an API token for scripts (Authorization: Bearer) once, as the last line of stdout;
  it replaces the operator's earlier token.
  NAME: 1 to 64 characters of A-Z a-z 0-9 . _ @ -

${flagLines(FLAGS)}
${COMMON}`

export async function operators(args: string[]): Promise<number> {
  const line = parseSub(args, FLAGS, USAGE, 'operators', ['add', 'list', 'remove', 'reset-password', 'token'])
  if (typeof line === 'number') return line
  const { sub, values, positionals } = line
  const expected = sub === 'list' ? 0 : 1
  if (positionals.length !== expected)
    throw new UsageError(expected ? `operators ${sub} needs exactly one NAME` : `unexpected argument "${positionals[0]}"`, USAGE)
  const name = positionals[0] ?? ''
  if (expected) asUsageError(() => checkOperatorName(name), USAGE)
  return withStorage(values, USAGE, { mayCreate: sub === 'add', readsOnly: sub === 'list' }, (storage, where) =>
    sub === 'list' ? list(storage, where, values.json === true) : change(storage, where, sub, name, values),
  )
}

async function list(storage: Storage, where: string, json: boolean): Promise<number> {
  const rows = (await storage.operators.list()).map((operator) => ({
    name: operator.name,
    created: new Date(operator.createdAt).toISOString(),
  }))
  if (json) {
    console.log(JSON.stringify(rows, null, 2))
    return 0
  }
  console.error(`petstore: operators in ${where}`)
  printTable(
    ['NAME', 'CREATED'],
    rows.map((row) => [row.name, row.created]),
  )
  return 0
}

async function change(storage: Storage, where: string, sub: string, name: string, values: Values<typeof FLAGS>): Promise<number> {
  const now = Date.now()
  let secret: string | undefined
  let done: boolean
  if (sub === 'add' || sub === 'reset-password') {
    secret = generatePassword()
    const hash = await hashPassword(secret, (await storage.operators.passwordHashes(name)).oldest)
    done = sub === 'add' ? await storage.operators.add(name, hash, now) : await storage.operators.setPassword(name, hash)
  } else if (sub === 'token') {
    const made = makeCredentialSecret('token')
    secret = made.secret
    done = await storage.operators.addCredential(made.hash, name, 'token', now)
  } else done = await storage.operators.remove(name)
  if (!done) {
    console.error(
      sub === 'add'
        ? `petstore: an operator named "${name}" exists already in ${where}`
        : `petstore: no operator named "${name}" in ${where}`,
    )
    return 1
  }
  const said: Record<string, string> = {
    add: `added operator "${name}" in ${where}. Their password, shown only now, is the next line:`,
    'reset-password': `reset the password of "${name}" in ${where} and ended their console sessions. The new password, shown only now, is the next line:`,
    token: `made an API token for "${name}" in ${where} (any earlier one no longer works). It is shown only now, on the next line:`,
    remove: `removed operator "${name}" from ${where}; their sessions and token no longer work`,
  }
  console.error(`petstore: ${said[sub]}`)
  if (name === FIRST_OPERATOR && (sub === 'reset-password' || sub === 'remove')) forgetFirstPassword(values)
  // Before the audit record: the change is made, so its secret is never lost to a failed audit write.
  if (secret !== undefined) console.log(secret)
  // Stamped when the change took effect, not when the command started (a password's hash takes a while).
  await auditCommand(storage, `operator.${sub}`, name)
  return 0
}

/**
 * The first start wrote admin's password to a file beside the data file; once that password no longer
 * works, the file would only mislead whoever reads it next, so it goes.
 */
function forgetFirstPassword(values: Values<typeof FLAGS>): void {
  const database = resolveDatabase(values, process.env)
  const file = secretFile(resolve(resolveDataFile(values, process.env)), database?.url ?? null, 'console-password.txt')
  if (!existsSync(file)) return
  rmSync(file, { force: true })
  console.error(`petstore: removed ${file}, which held the old password`)
}
