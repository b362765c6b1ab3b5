/**
 * What `petstore serve --takeover` needs from the data file besides its lock (data-file-lock.ts):
 * a check, made before the running server is asked to hand over, that this binary can serve the file
 * at all; and the keys' minute buckets, which live only in memory, handed from the server that stops
 * to the one that takes over in a small file beside the data file (`FILE.handover`). Day buckets need
 * no such file: every stop saves them in the data file itself.
 */
import { existsSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import type { SavedBucket } from '../../domain/repositories'
import { StorageOpenError } from '../../domain/repositories'
import { checkHeader, checkSchema, openReadOnly } from './open'

export function handoverFileOf(file: string): string {
  return `${file}.handover`
}

/**
 * Throws, with the reason in one line, when this binary could not serve the file: it cannot be read,
 * it is not ours, or its schema is newer than this binary knows. Reads only: an older schema is
 * migrated later, once the running server has let the file go.
 */
export function checkServable(file: string): void {
  if (!existsSync(file)) throw new StorageOpenError(`${file} does not exist, so there is no server on it to take over from`)
  checkHeader(file)
  let opened: ReturnType<typeof openReadOnly>
  try {
    opened = openReadOnly(file)
  } catch (error) {
    if (error instanceof StorageOpenError) throw error
    throw new StorageOpenError(`cannot open ${file}: ${(error as Error).message}`)
  }
  try {
    checkSchema(opened.db, file)
  } finally {
    opened.db.close()
  }
}

/** Written by the stopping server once its last request is answered, before it releases the lock. */
export function writeHandover(file: string, minutes: Map<string, SavedBucket>): void {
  const path = handoverFileOf(file)
  // Whole or absent: the new server may read it the moment the lock is free.
  writeFileSync(`${path}.tmp`, JSON.stringify({ minutes: Object.fromEntries(minutes) }), { mode: 0o600 })
  renameSync(`${path}.tmp`, path)
}

/**
 * The minute buckets a stopped server handed over, read once and removed; none when there is no file
 * or it cannot be read (minute buckets refill within a minute, so losing them costs little).
 */
export function takeHandover(file: string): Map<string, SavedBucket> {
  const path = handoverFileOf(file)
  if (!existsSync(path)) return new Map()
  try {
    const { minutes } = JSON.parse(readFileSync(path, 'utf8')) as { minutes: Record<string, SavedBucket> }
    return new Map(
      Object.entries(minutes).filter(([, b]) => Number.isFinite(b?.tokens) && Number.isFinite(b?.updatedAt)),
    )
  } catch {
    return new Map()
  } finally {
    rmSync(path, { force: true })
  }
}

/**
 * The claim of a server taking over (`FILE.takeover`, its process id), written before it listens
 * beside the running server; removed when it gives up, and kept once it has the file (until the next
 * takeover replaces it), so a takeover started a moment later is refused. One claim at a time, so
 * of two takeovers started together the second is refused before it holds any request. A signal is
 * delivered late to a process that was stopped (SIGSTOP, a frozen VM): the running server hands over
 * only while a live process other than itself claims the file, so a late or stray SIGUSR2 does not
 * stop it with nobody to take over.
 */
function claimFileOf(file: string): string {
  return `${file}.takeover`
}

/** `holder` is the running server's process id: a claim naming it is the one it took over with. */
export function claimTakeover(file: string, holder: number): () => void {
  const path = claimFileOf(file)
  for (;;) {
    try {
      // Readable by all: it holds a process id only, and the running server may run as another user.
      writeFileSync(path, String(process.pid), { flag: 'wx', mode: 0o644 })
      break
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error
      const claimant = claimantOf(file)
      if (claimant !== null && claimant !== holder) throw new StorageOpenError(`process ${claimant} is taking over ${file} already`)
      // Left by a process that is gone, or by the running server when it took over.
      rmSync(path, { force: true })
    }
  }
  return function dropClaim() {
    try {
      if (readFileSync(path, 'utf8') === String(process.pid)) rmSync(path, { force: true })
    } catch {}
  }
}

/** The live process, other than this one, that claims the file; null when none. */
export function claimantOf(file: string): number | null {
  let pid: number
  try {
    pid = Number(readFileSync(claimFileOf(file), 'utf8'))
  } catch {
    return null
  }
  if (!Number.isInteger(pid) || pid <= 0 || pid === process.pid) return null
  try {
    process.kill(pid, 0)
    return pid
  } catch (error) {
    // EPERM: alive, under another user.
    return (error as NodeJS.ErrnoException).code === 'EPERM' ? pid : null
  }
}
