/**
 * What the command line changes goes into the console's audit log, as the console's own actions do, with
 * the command line as the actor and the account that ran it (its name from the system, never a secret).
 */
import { userInfo } from 'node:os'
import { commandLineActor } from '../domain/operators'
import type { Storage } from '../domain/repositories'
import { passwdName } from '../os/process'

/** The account running this process: its name by uid (passwdName), else its uid; Windows has no uids. */
function osUser(): string {
  const uid = process.getuid?.()
  if (uid === undefined) return userInfo().username
  return passwdName(uid) || `uid ${uid}`
}

/** Records an action of the command line, stamped when it took effect. */
export async function auditCommand(
  storage: Storage,
  action: string,
  target: string,
  options: { firstStart?: boolean } = {},
): Promise<void> {
  await storage.operators.audit({ at: Date.now(), actor: commandLineActor(osUser(), options.firstStart), action, target })
}
