/**
 * The console's first operator, made by the first `serve` of a store that has none (with the console
 * on): named `admin`, its generated password written to a file beside the data file, readable by its
 * owner only, as the bootstrap key's secret is (bootstrap-key.ts), and never to the log.
 */
import type { Config } from '../config'
import { generatePassword, hashPassword } from '../domain/operators'
import type { Storage } from '../domain/repositories'
import { auditCommand } from './audit'
import { commandName, firstSecret, shownAt, storeFlags } from './bootstrap-key'

export const FIRST_OPERATOR = 'admin'

export async function bootstrapOperator(config: Config, storage: Storage, consoleUrl: string): Promise<void> {
  if ((await storage.operators.list()).length > 0) return
  const password = generatePassword()
  const hash = await hashPassword(password, null)
  const file = await firstSecret(config, 'console-password.txt', password, "console operator's password", () =>
    storage.operators.addIfNone(FIRST_OPERATOR, hash, Date.now()),
  )
  if (file === null) return
  console.error(
    `petstore: no console operators yet, so "${FIRST_OPERATOR}" was created; its password is in ${shownAt(file, password)}` +
      `\npetstore: sign in at ${consoleUrl}; add operators with: ${commandName()} operators add NAME${storeFlags(config)}`,
  )
  await auditCommand(storage, 'operator.add', FIRST_OPERATOR, { firstStart: true })
}
