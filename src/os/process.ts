/**
 * What petstore asks the operating system about its processes and users, for any part that needs it
 * (the data file's permissions and leftovers, the takeover's claim, the command line's audit entries):
 * none of it belongs to a storage engine.
 */
import { readFileSync, readlinkSync } from 'node:fs'

/**
 * The name /etc/passwd gives `uid`: os.userInfo() takes the name from $USER, which a process started
 * with setpriv, su, sudo or a unit's User= may have inherited from another user.
 */
export function passwdName(uid: number): string | undefined {
  try {
    return readFileSync('/etc/passwd', 'utf8')
      .split('\n')
      .map((line) => line.split(':'))
      .find((fields) => fields[2] === String(uid))?.[0]
  } catch {
    return undefined
  }
}

/**
 * kill(pid, 0) counts a zombie (dead, not yet reaped by its parent, which may be a PID 1 that reaps
 * late or never) as alive; on Linux its state in /proc says `Z`. Only a /proc of this process's own
 * PID namespace is read; where there is none, kill(pid, 0) alone decides.
 */
export function isAlive(pid: number): boolean {
  if (ownProc() && ['Z', 'X'].includes(procState(pid))) return false
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    // EPERM: alive, under another user.
    return (error as NodeJS.ErrnoException).code === 'EPERM'
  }
}

/**
 * When the process started, in ms since the epoch, to within about a second (the boot time /proc gives
 * is in whole seconds; the start in clock ticks, 100 a second on Linux); null where /proc cannot say.
 */
export function startedAt(pid: number): number | null {
  // Field 22 of the stat line: the 20th after the command's name.
  const ticks = ownProc() ? Number(statFields(pid)[19]) : Number.NaN
  if (!Number.isFinite(ticks)) return null
  try {
    const boot = Number(/^btime (\d+)$/m.exec(readFileSync('/proc/stat', 'latin1'))?.[1])
    return boot > 0 ? boot * 1000 + ticks * 10 : null
  } catch {
    return null
  }
}

let procIsOwn: boolean | undefined
function ownProc(): boolean {
  if (procIsOwn === undefined)
    try {
      procIsOwn = readlinkSync('/proc/self') === String(process.pid)
    } catch {
      procIsOwn = false
    }
  return procIsOwn
}

/** The state letter of /proc/PID/stat; '' when unreadable. */
function procState(pid: number): string {
  return statFields(pid)[0] ?? ''
}

/**
 * The fields of /proc/PID/stat after the command's name (which may hold spaces and parentheses), the
 * state first (field 3); none when unreadable.
 */
function statFields(pid: number): string[] {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'latin1')
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  } catch {
    return []
  }
}
