/**
 * What the command line changes goes into the console's audit log, as the console's own actions do, with
 * the command line as the actor and the account that ran it (its name from the system, never a secret).
 */
import { readFileSync } from 'node:fs'
import { userInfo } from 'node:os'
import { commandLineActor } from '../domain/operators'
import type { Storage } from '../domain/repositories'

/**
 * The account running this process: its name in /etc/passwd by uid (os.userInfo() takes the name from
 * $USER, which su or sudo may have left from another user), else its uid; Windows has no uids.
 */
function osUser(): string {
  const uid = process.getuid?.()
  if (uid === undefined) return userInfo().username
  try {
    const name = readFileSync('/etc/passwd', 'utf8')
      .split('\n')
      .map((line) => line.split(':'))
      .find((fields) => fields[2] === String(uid))?.[0]
    if (name) return name
  } catch {}
  return `uid ${uid}`
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
