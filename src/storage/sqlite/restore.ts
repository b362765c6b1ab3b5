/**
 * Putting a backup in place of the data file. Copying over it is not enough: SQLite would replay the old
 * file's `-wal` onto the backup. So the old file moves away with its `-wal` and `-shm` under one dated
 * name (kept, never deleted), and the backup, copied and checked beside it, takes its name. A plan file
 * (`FILE.restore-in-progress`) spans the renames: while it exists nothing opens the data file, and the
 * next `restore` finishes the plan.
 */
import { Database } from 'bun:sqlite'
import {
  chmodSync,
  closeSync,
  copyFileSync,
  existsSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs'
import { basename, dirname, join } from 'node:path'
import { StorageOpenError } from '../../domain/repositories'
import { openFailure, opening } from '../shared/open-errors'
import { lockDataFile } from './data-file-lock'
import { checkHeader, checkSchema, checkWhole, oddFileReason } from './open'

/** The companions SQLite keeps beside a data file; the main file moves last. */
const COMPANIONS = ['-wal', '-shm', ''] as const

interface Plan {
  /** The backup being restored, as given. */
  backup: string
  /** Where the previous data file and its companions go. */
  kept: string
}

export interface Restored extends Plan {
  /** Which of the previous file's parts were kept (none when there was no data file). */
  keptParts: string[]
  /** True when this run finished a restore that an earlier, interrupted run had planned. */
  resumed: boolean
}

export function restorePlanOf(file: string): string {
  return `${file}.restore-in-progress`
}

/** Refuses to open a data file whose restore was interrupted: its parts may be half moved. */
export function refuseInterruptedRestore(file: string): void {
  if (existsSync(restorePlanOf(file)))
    throw new StorageOpenError(
      `a restore of ${file} was interrupted (${restorePlanOf(file)} is there); run petstore restore again to finish it`,
    )
}

/**
 * Restores `backup` into `file` (both absolute), refusing while a server holds the file. An
 * interrupted restore of the same file is finished first, and is then all this run does.
 */
export function restoreDataFile(file: string, backup: string, now: number): Restored {
  // Owner-only, like the data file: the copy and the lock file hold or guard key hashes.
  process.umask(0o077)
  opening(`cannot restore into ${file}`, () => {
    const odd = oddFileReason(file)
    if (odd) throw new Error(odd)
    mkdirSync(dirname(file), { recursive: true, mode: 0o700 })
  })
  const lock = lockDataFile(file)
  if (!lock) throw new StorageOpenError(`cannot restore into ${file}: its folder cannot be written`)
  try {
    const interrupted = readPlan(file)
    if (interrupted) return { ...interrupted, keptParts: stepByStep(file, interrupted, () => carryOut(file, interrupted)), resumed: true }
    copyChecked(backup, file)
    const plan = { backup, kept: keptName(file, now) }
    const keptParts = stepByStep(file, plan, () => {
      writeDurably(restorePlanOf(file), JSON.stringify(plan))
      return carryOut(file, plan)
    })
    return { ...plan, keptParts, resumed: false }
  } finally {
    lock.release()
  }
}

/**
 * Runs the plan's steps. A step the system refuses (an immutable file, a disk error) is said in one line
 * that tells what state it left: nothing changed (what was begun is undone), finished but for the
 * last sync, or half way, to be finished by running restore again once the cause is fixed.
 */
function stepByStep(file: string, plan: Plan, steps: () => string[]): string[] {
  try {
    return steps()
  } catch (error) {
    if (error instanceof StorageOpenError) throw error
    const why = (error as Error).message
    const temporary = temporaryOf(file)
    const moved = COMPANIONS.some((suffix) => existsSync(plan.kept + suffix))
    if (!existsSync(restorePlanOf(file)) && !existsSync(temporary))
      throw new StorageOpenError(`${plan.backup} was restored into ${file}, but syncing its folder failed (${why}); check the disk`)
    if (existsSync(temporary) && !moved) {
      undo(file, temporary)
      // Without a plan nothing refuses the data file, which is as it was; what could not be removed is named.
      if (!existsSync(restorePlanOf(file))) {
        const left = [temporary, `${restorePlanOf(file)}.partial`].filter((path) => existsSync(path))
        throw new StorageOpenError(
          `cannot restore ${plan.backup} into ${file} (${why}); nothing was changed${left.length ? ` (remove ${left.join(' and ')})` : ''}`,
        )
      }
    }
    throw new StorageOpenError(
      `the restore of ${plan.backup} into ${file} stopped half way (${why}); once that is fixed, run petstore restore again to finish it`,
    )
  }
}

/** Removes the plan and the checked copy of a restore that has moved nothing yet, as far as it can. */
function undo(file: string, temporary: string): void {
  const step = (work: () => void) => {
    try {
      work()
    } catch {}
  }
  for (const path of [restorePlanOf(file), `${restorePlanOf(file)}.partial`]) step(() => rmSync(path, { force: true }))
  step(() => fsyncPath(dirname(file)))
  // A plan still there keeps the copy it names: the next restore finishes from it.
  if (!existsSync(restorePlanOf(file))) step(() => removeTemporary(temporary))
}

/** `.petstore.db.restoring`, beside the data file so that the last rename stays on one file system. */
function temporaryOf(file: string): string {
  return join(dirname(file), `.${basename(file)}.restoring`)
}

/** `petstore.db.before-restore-20261123T201500Z`, with `.2`, `.3`… when a name of its set is taken. */
function keptName(file: string, now: number): string {
  const stamp = new Date(now)
    .toISOString()
    .replace(/[-:]/g, '')
    .replace(/\.\d+Z$/, 'Z')
  for (let n = 1; ; n++) {
    const name = `${file}.before-restore-${stamp}${n === 1 ? '' : `.${n}`}`
    if (COMPANIONS.every((suffix) => !existsSync(name + suffix))) return name
  }
}

/**
 * Copies the backup beside the data file and checks the copy (what will be served, not the source,
 * which could change meanwhile): an SQLite file of ours, whole, with a schema this petstore serves.
 */
function copyChecked(backup: string, file: string): void {
  const stat = statSync(backup, { throwIfNoEntry: false })
  if (!stat) throw new StorageOpenError(`no backup at ${backup}`)
  if (!stat.isFile()) throw new StorageOpenError(`${backup} is not a file`)
  const current = statSync(file, { throwIfNoEntry: false })
  if (current && current.dev === stat.dev && current.ino === stat.ino)
    throw new StorageOpenError(`${backup} is the data file itself; name a backup made with petstore backup`)
  for (const journal of ['-wal', '-journal']) {
    const beside = statSync(backup + journal, { throwIfNoEntry: false })
    if (beside && beside.size > 0)
      throw new StorageOpenError(
        `${backup}${journal} is beside ${backup}, so the file alone is not the whole database; restore a copy made with petstore backup`,
      )
  }
  checkHeader(backup)
  const temporary = temporaryOf(file)
  try {
    removeTemporary(temporary)
    copyFileSync(backup, temporary)
    chmodSync(temporary, 0o600)
    checkCopy(temporary, backup)
    fsyncPath(temporary)
  } catch (error) {
    // The first failure is the one to report; a copy this cannot remove, the next restore removes.
    try {
      removeTemporary(temporary)
    } catch {}
    throw openFailure(error, `cannot restore ${backup}`)
  }
}

function checkCopy(copy: string, backup: string): void {
  // Read-write, so that a backup in WAL mode leaves no -wal or -shm beside the copy once closed.
  const db = new Database(copy, { readwrite: true, strict: true })
  try {
    checkWhole(db, backup, 'choose another backup')
    if (checkSchema(db, backup) === 0) throw new StorageOpenError(`${backup} holds no petstore data; choose another backup`)
  } catch (error) {
    throw openFailure(error, `${backup} cannot be restored`)
  } finally {
    db.close()
  }
}

function removeTemporary(temporary: string): void {
  for (const suffix of ['', '-wal', '-shm', '-journal']) rmSync(temporary + suffix, { force: true })
}

/**
 * Moves the data file's parts to the kept name, then the checked copy to the data file's name, then
 * removes the plan; a directory sync after each step makes the order survive a power loss. Every step
 * is skipped when already done, so an interrupted run is finished by running this again.
 */
function carryOut(file: string, plan: Plan): string[] {
  const temporary = temporaryOf(file)
  const dir = dirname(file)
  const keptParts: string[] = []
  if (existsSync(temporary)) {
    for (const suffix of COMPANIONS) {
      if (!existsSync(file + suffix)) continue
      if (existsSync(plan.kept + suffix))
        throw new StorageOpenError(`cannot finish the restore: both ${file + suffix} and ${plan.kept + suffix} exist; move one aside`)
      renameSync(file + suffix, plan.kept + suffix)
      fsyncPath(dir)
    }
    renameSync(temporary, file)
    fsyncPath(dir)
  } else if (!existsSync(file)) {
    throw new StorageOpenError(
      `cannot finish the restore: neither ${temporary} nor ${file} exists; the previous data file is kept as ${plan.kept}`,
    )
  }
  for (const suffix of COMPANIONS) if (existsSync(plan.kept + suffix)) keptParts.push(plan.kept + suffix)
  rmSync(restorePlanOf(file), { force: true })
  fsyncPath(dir)
  return keptParts
}

function readPlan(file: string): Plan | null {
  const path = restorePlanOf(file)
  if (!existsSync(path)) return null
  try {
    const plan = JSON.parse(readFileSync(path, 'utf8')) as Plan
    if (typeof plan.backup === 'string' && typeof plan.kept === 'string' && dirname(plan.kept) === dirname(file)) return plan
  } catch {}
  throw new StorageOpenError(`${path} is not a restore plan petstore wrote; look at it, then move it aside`)
}

/** Written under a temporary name, synced, then renamed: the plan is either whole or absent. */
function writeDurably(path: string, text: string): void {
  const partial = `${path}.partial`
  writeFileSync(partial, text, { mode: 0o600 })
  fsyncPath(partial)
  renameSync(partial, path)
  fsyncPath(dirname(path))
}

function fsyncPath(path: string): void {
  const fd = openSync(path, 'r')
  try {
    fsyncSync(fd)
  } finally {
    closeSync(fd)
  }
}
