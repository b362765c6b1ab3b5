/**
 * What `serve --takeover` needs from the data file besides its lock: a check, before the running server
 * is asked to hand over, that this binary can serve the file; the claim; and the rate-limit state that
 * lives only in memory, left in `FILE.handover` by every stopping server for the next one on the file,
 * a takeover's or a plain restart's (keys' day buckets are saved in the file itself).
 */
import {
  closeSync,
  existsSync,
  constants as fs,
  fstatSync,
  openSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs'
import { BAN_SECONDS, MAX_TURNS } from '../../domain/ban-rule'
import { DAY_MS } from '../../domain/time'
import type { HandedSubject, LimiterHandover, SavedBucket } from '../../domain/repositories'
import type { Limits } from '../../domain/plans'
import { StorageOpenError } from '../../domain/repositories'
import { opening } from '../shared/open-errors'
import { isAlive, startedAt } from '../../os/process'
import {
  DataFileBusyError,
  type DataFileLock,
  lockDataFile,
  lockExclusivelyWithin,
  lockFileOf,
  lockHolder,
  recordedPid,
} from './data-file-lock'
import { canWrite, checkHeader, checkSchema, oddFileReason, openReadOnly, removeIfPossible } from './open'

function handoverFileOf(file: string): string {
  return `${file}.handover`
}

/** Before the running server is asked to go: once gone, it could not serve the file again either. */
function refuseOddFile(file: string): void {
  const odd = oddFileReason(file)
  if (odd) throw new StorageOpenError(`cannot use ${file} as the data file: ${odd}`)
}

/**
 * Throws, in one line, when this binary could not serve the file (unreadable, not ours, a newer schema).
 * Reads only: an older schema is migrated once the running server has let the file go.
 */
function checkServable(file: string): void {
  if (!existsSync(file)) throw new StorageOpenError(`${file} does not exist, so there is no server on it to take over from`)
  checkHeader(file)
  const opened = opening(`cannot open ${file}`, () => openReadOnly(file))
  try {
    checkSchema(opened.db, file)
  } finally {
    opened.db.close()
  }
}

/**
 * Written by the stopping server after its last answer, before it releases the lock; not at all when
 * there is nothing to hand over. `minutes` repeats the keys' minute buckets for a petstore from before
 * bans were handed over (a rollback by takeover).
 */
export function writeHandover(file: string, state: LimiterHandover): void {
  if (state.keys.size === 0 && state.addresses.size === 0) return
  const path = handoverFileOf(file)
  const minutes = Object.fromEntries([...state.keys].map(([id, subject]) => [id, subject.minute]))
  const text = JSON.stringify({ minutes, keys: Object.fromEntries(state.keys), addresses: Object.fromEntries(state.addresses) })
  // Whole or absent: the new server may read it the moment the lock is free. A .tmp left by a process
  // killed while writing is replaced, so the mode given here is the one the file gets.
  rmSync(`${path}.tmp`, { force: true })
  writeFileSync(`${path}.tmp`, text, { mode: 0o600 })
  renameSync(`${path}.tmp`, path)
}

/** Far above what 100,000 addresses and as many keys take (about 15 MB): anything larger was not written by a server. */
const MAX_HANDOVER_BYTES = 64 * 1024 * 1024

/**
 * The state a stopped server handed over, read once and removed; none when absent or unreadable. Only a
 * regular file of a sane size is read (a FIFO would hang the start, a link to /dev/zero fill its memory),
 * and values no server writes are brought within what one could.
 */
export function takeHandover(file: string, now: number = Date.now()): LimiterHandover {
  const path = handoverFileOf(file)
  const none = (): LimiterHandover => ({ keys: new Map(), addresses: new Map() })
  removeIfPossible(`${path}.tmp`)
  let fd: number
  try {
    // Never through a link, never waiting on a FIFO: what is opened is what is checked.
    fd = openSync(path, fs.O_RDONLY | fs.O_NOFOLLOW | fs.O_NONBLOCK)
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') removeIfPossible(path)
    return none()
  }
  try {
    const stat = fstatSync(fd)
    if (!stat.isFile() || stat.size > MAX_HANDOVER_BYTES) return none()
    const parsed = JSON.parse(readFileSync(fd, 'utf8')) as { minutes?: unknown; keys?: unknown; addresses?: unknown }
    // A file from a petstore that handed over only the keys' minute buckets has `minutes` alone.
    const keys = parsed.keys !== undefined ? parsed.keys : mapValues(parsed.minutes, (minute) => ({ minute }))
    return { keys: subjects(keys, now), addresses: subjects(parsed.addresses, now) }
  } catch {
    return none()
  } finally {
    closeSync(fd)
    removeIfPossible(path)
  }
}

function mapValues(record: unknown, f: (value: unknown) => unknown): Record<string, unknown> {
  if (typeof record !== 'object' || record === null) return {}
  return Object.fromEntries(Object.entries(record).map(([id, value]) => [id, f(value)]))
}

/** The longest ban --ban-seconds allows: a ban handed over never ends later than one could. */
const LONGEST_BAN_MS = BAN_SECONDS.max * 1000

/**
 * The entries that are whole, within what a server writes: tokens not below zero, times not in the
 * future, a ban no longer than the longest (a Retry-After of 1e300 is no header). Anything else in the
 * file is dropped, never trusted.
 */
function subjects(record: unknown, now: number): Map<string, HandedSubject> {
  const out = new Map<string, HandedSubject>()
  if (typeof record !== 'object' || record === null) return out
  const bucket = (saved: SavedBucket) => ({ tokens: Math.max(0, saved.tokens), updatedAt: Math.min(saved.updatedAt, now) })
  for (const [id, value] of Object.entries(record)) {
    const entry = value as Partial<HandedSubject> | null
    if (!isBucket(entry?.minute)) continue
    const subject: HandedSubject = { minute: bucket(entry.minute) }
    if (isLimits(entry.limits)) subject.limits = { rpm: entry.limits.rpm, rpd: entry.limits.rpd }
    if (isBucket(entry.day)) subject.day = bucket(entry.day)
    if (Number.isFinite(entry.bannedUntil)) subject.bannedUntil = Math.min(entry.bannedUntil!, now + LONGEST_BAN_MS)
    if (Array.isArray(entry.rejections) && entry.rejections.every(Number.isFinite))
      subject.rejections = entry.rejections.map((at: number) => Math.min(at, now))
    // A refusal's wait is at most a day's token: what a server writes.
    if (Number.isFinite(entry.retryAt)) subject.retryAt = Math.min(entry.retryAt!, now + DAY_MS)
    // Turns are times told, none more than a second after the last one (retryAt): a later one is dropped.
    if (
      subject.retryAt !== undefined &&
      Array.isArray(entry.turns) &&
      entry.turns.length <= MAX_TURNS &&
      entry.turns.every(Number.isFinite)
    )
      subject.turns = entry.turns.filter((at: number) => at <= subject.retryAt! + 1000).sort((a, b) => a - b)
    out.set(id, subject)
  }
  return out
}

function isLimits(value: unknown): value is Limits {
  const limits = value as Limits | null | undefined
  return Number.isSafeInteger(limits?.rpm) && limits!.rpm > 0 && Number.isSafeInteger(limits?.rpd) && limits!.rpd > 0
}

function isBucket(value: unknown): value is SavedBucket {
  const bucket = value as SavedBucket | null | undefined
  return Number.isFinite(bucket?.tokens) && Number.isFinite(bucket?.updatedAt)
}

/** The pid of the server holding the data file (whose lock file takeoverTarget found), once this binary could serve it; null for none. */
function runningServerOf(file: string): number | null {
  try {
    lockDataFile(file)?.release()
    return null
  } catch (error) {
    if (!(error instanceof DataFileBusyError)) throw error
  }
  checkServable(file)
  const pid = lockHolder(file)
  if (pid === null) throw new Error(`${file}.lock names no process (the running server is a petstore older than --takeover)`)
  return pid
}

/**
 * The claim of a server taking over (`FILE.takeover`, its pid), written before it listens beside the
 * running server, removed when it gives up or serves (which tells the old server it made it). One at a
 * time: a second takeover is refused before it holds a request. The running server hands over only
 * while a live process claims the file, so a late or stray SIGUSR2 stops nothing.
 *
 * Takers take turns: each holds the takers' lock (`FILE.takeover.lock`, a system lock that ends with its
 * process) from before it looks for the running server until it drops its claim, so no two can both
 * find a dead claim, both remove it and both write theirs, nor one ask a server another has replaced.
 * A dead claimant's claim is removed by whoever notices: a taker replaces it, and anyone else removes it
 * only while holding that lock.
 */
function claimFileOf(file: string): string {
  return `${file}.takeover`
}

function takersLockOf(file: string): string {
  return `${file}.takeover.lock`
}

/** How long a taker waits for the takers' lock: another process's removal of a dead claim holds it for microseconds. */
const TAKERS_LOCK_WAIT_MS = 200

/** The server a takeover is to replace, found during this process's turn among takers (held until the claim goes). */
export interface TakeoverTarget {
  pid: number
  turn: DataFileLock
}

/**
 * The running server to take over, read during this process's turn, so a taker that waited for another
 * one's turn asks the server running now (the other taker, if it has finished), never one that has let
 * go; null when no server holds the file (never served, read-only, or stopped). Refused, naming the
 * other taker, while one is taking over, even one stopped after the running server let go.
 */
export function takeoverTarget(file: string): TakeoverTarget | null {
  // First: a hard-linked name has no lock of its own, and would read as a file no server holds.
  refuseOddFile(file)
  // A file never served (no lock file), or one no server could lock (lockDataFile: read-only): nothing to take over, no turn to take.
  const lock = lockFileOf(file)
  if (!existsSync(lock) || !canWrite(lock)) return null
  const turn = takersTurn(file)
  try {
    const pid = runningServerOf(file)
    if (pid !== null) return { pid, turn }
  } catch (error) {
    turn.release()
    throw error
  }
  turn.release()
  return null
}

/**
 * Writes this process's claim during its turn (see takeoverTarget); the returned function removes it and
 * ends the turn. A claim naming the running server is the one it took over with.
 */
export function claimTakeover(file: string, { pid: holder, turn }: TakeoverTarget): () => void {
  const path = claimFileOf(file)
  // Only a petstore older than the takers' lock could have written a live claim meanwhile.
  const claimant = claimedBy(file)
  if (claimant !== null && claimant !== holder && claimantLives(file, claimant))
    throw new StorageOpenError(`process ${claimant} is taking over ${file} already`)
  removeIfPossible(path)
  // The data file's mode: only the user that serves it (and so can take it over) reads it.
  writeFileSync(path, String(process.pid), { flag: 'wx', mode: 0o600 })
  return function dropClaim() {
    try {
      if (readFileSync(path, 'utf8') === String(process.pid)) removeIfPossible(path)
    } catch {}
    turn.release()
  }
}

/** The takers' lock, once another taker's turn is over; refused, naming it, when one is taking over. */
function takersTurn(file: string): DataFileLock {
  const path = takersLockOf(file)
  const turn = lockExclusivelyWithin(path, { recordPid: true, what: `${path} for taking over` }, TAKERS_LOCK_WAIT_MS)
  if (turn !== 'busy') return turn
  // A pid is named only when it is a live process's: the file's header could be anything.
  const taker = recordedPid(path)
  throw new StorageOpenError(`${taker !== null && isAlive(taker) ? `process ${taker}` : 'another process'} is taking over ${file} already`)
}

/**
 * The live process, other than this one, that claims the file; null when none. A claim whose process is
 * gone (a taker killed) is removed as it is read, unless a taker holds the takers' lock (it replaces the
 * claim itself): whoever reads it first, the running server on SIGUSR2 or while it lets go, or a new start.
 */
export function liveClaimant(file: string): number | null {
  const pid = claimedBy(file)
  if (pid === null || pid === process.pid) return null
  if (claimantLives(file, pid)) return pid
  removeDeadClaim(file, pid)
  return null
}

/** How much later than a claim a process may seem to have started and still be its writer (startedAt's error). */
const START_MARGIN_MS = 2_000

/**
 * Whether the process that wrote the claim lives: `pid` is alive and started before the claim was written.
 * A taker killed before it signalled leaves its claim, and its pid may be another process's by now (one
 * that started after the claim): that claim is a dead taker's.
 */
function claimantLives(file: string, pid: number): boolean {
  if (!isAlive(pid)) return false
  const started = startedAt(pid)
  if (started === null) return true
  try {
    return started <= statSync(claimFileOf(file)).mtimeMs + START_MARGIN_MS
  } catch {
    return false
  }
}

/**
 * How long the lock of a taker that reads as dead may still be held: a killed process's first thread shows
 * as a zombie while the kernel still ends the others, which hold its files and so its locks (seen: the
 * claim stayed, the lock busy, the taker `Z`). Another taker holding it is not waited for: the claim is
 * its to replace.
 */
const DEAD_TAKER_LOCK_WAIT_MS = 200

/** Removes the claim of `pid`, gone, unless a taker is at work; not at all where nothing can be written. */
function removeDeadClaim(file: string, pid: number): void {
  const lock = takersLockOf(file)
  let turn: DataFileLock | 'busy'
  try {
    // Waited for only while the dead taker is the lock's holder: another taker holding it replaces the claim itself.
    turn = lockExclusivelyWithin(
      lock,
      { recordPid: false, what: "the takers' lock" },
      DEAD_TAKER_LOCK_WAIT_MS,
      () => recordedPid(lock) === pid,
    )
  } catch {
    return
  }
  if (turn === 'busy') return
  try {
    // Read again under the lock: a taker may have replaced it since.
    if (claimedBy(file) === pid) removeIfPossible(claimFileOf(file))
  } finally {
    turn.release()
  }
}

/**
 * How the takeover by `pid` stands, for the server that handed over to it: 'serving' once it has let
 * its claim go, 'gone' when it died first (its claim is then removed), else 'starting'.
 */
export function takeoverProgress(file: string, pid: number): 'starting' | 'serving' | 'gone' {
  if (liveClaimant(file) === pid) return 'starting'
  return isAlive(pid) ? 'serving' : 'gone'
}

function claimedBy(file: string): number | null {
  try {
    const pid = Number(readFileSync(claimFileOf(file), 'utf8'))
    return Number.isInteger(pid) && pid > 0 ? pid : null
  } catch {
    return null
  }
}
