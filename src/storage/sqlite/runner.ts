/**
 * Runs the shared repositories' work (storage/shared/sql.ts) on the data file: reads at once; writes at
 * once in a command, and in a serving process at once unless another process holds the write lock.
 */
import type { Database, SQLQueryBindings } from 'bun:sqlite'
import { StorageUnavailableError } from '../../domain/repositories'
import type { Runner, Step, Work } from '../shared/sql'
import { reading, writing } from './failures'

/** How long one try of a serving write may block for the lock, and the pause before the next try. */
const TRY_MS = 10
const PAUSE_MS = 20
/** What a try answers when another process holds the lock. */
const LOCK_HELD = Symbol('lock held')

/** A command's runner: a write waits for the file's write lock as the connection's busy_timeout says, blocking. */
export class SqliteRunner implements Runner<'sync'> {
  constructor(private readonly db: Database) {}

  read<T>(work: () => Work<T>): T {
    return read(this.db, work)
  }

  /** In one immediate transaction: it holds the file's write lock, so no other lock is taken. */
  write<T>(work: () => Work<T>): T {
    const steps = work()
    const first = steps.next()
    if (first.done) return first.value
    return writing(this.db, () => finish(this.db, steps, first))
  }
}

/** A serving write waiting for the lock. */
interface Waiting {
  /** Tries it once: true when it is settled (made, or failed otherwise), false while the lock is held. */
  settles: () => boolean
  giveUpAt: number
  reject: (error: unknown) => void
}

/**
 * A serving process's runner. Its event loop must not stop while another process (a command, a `sqlite3`
 * shell, a restore) holds the write lock, as a busy_timeout wait would stop it: a write tries for the lock
 * for TRY_MS at most, and while it is held answers with a promise. Writes that wait queue up in order: only
 * the first tries again, every PAUSE_MS, so the loop is held TRY_MS in each pause however many wait, and
 * no write overtakes one given before it (a save of a key's buckets, then a reset that clears them). Each
 * waits as long as the connection's busy_timeout says (its patience) from when it was given; then it fails
 * as a blocked write does (StorageUnavailableError, SQLITE_BUSY). Each try still blocks a little, so the
 * pet commit thread, whose commits the event loop feeds, finishes the one it holds and gives the lock
 * over. Reads keep the connection's busy_timeout: in WAL mode they take no lock another writer holds.
 */
export class ServingSqliteRunner implements Runner<'serving'> {
  private readonly waiting: Waiting[] = []
  /** Why the last try failed: what a write that waited past its patience fails with. */
  private refusal: StorageUnavailableError | undefined
  /** The connection's busy_timeout, as its opening set it: a write's patience, and the reads' wait. */
  private readonly patienceMs: number

  constructor(private readonly db: Database) {
    this.patienceMs = db.query<{ timeout: number }, []>('PRAGMA busy_timeout').get()!.timeout
  }

  read<T>(work: () => Work<T>): T {
    return read(this.db, work)
  }

  write<T>(work: () => Work<T>): T | Promise<T> {
    const steps = work()
    const first = steps.next()
    if (first.done) return first.value
    let started = false
    const attempt = (): T | typeof LOCK_HELD => {
      this.db.run(`PRAGMA busy_timeout = ${TRY_MS}`)
      try {
        return writing(this.db, () => {
          started = true
          return finish(this.db, steps, first)
        })
      } catch (error) {
        // Only a lock not taken is tried again: the transaction never began, so the work has not run.
        if (!started && error instanceof StorageUnavailableError && /^SQLITE_BUSY(_TIMEOUT)?$/.test(error.code)) {
          this.refusal = error
          return LOCK_HELD
        }
        throw error
      } finally {
        this.db.run(`PRAGMA busy_timeout = ${this.patienceMs}`)
      }
    }
    if (this.waiting.length === 0) {
      const done = attempt()
      if (done !== LOCK_HELD) return done
    }
    const giveUpAt = performance.now() + this.patienceMs
    return new Promise<T>((resolve, reject) => {
      const settles = () => {
        try {
          const done = attempt()
          if (done === LOCK_HELD) return false
          resolve(done)
        } catch (error) {
          reject(error)
        }
        return true
      }
      this.waiting.push({ settles, giveUpAt, reject })
      if (this.waiting.length === 1) setTimeout(() => this.tryWaiting(), PAUSE_MS)
    })
  }

  /**
   * Tries the waiting writes in order until one finds the lock held; that one is tried again after a
   * pause, and those behind it past their patience fail without a try of their own (one try a turn, so
   * writes that end together never hold the loop 10 ms each).
   */
  private tryWaiting(): void {
    let held = false
    while (this.waiting.length > 0) {
      const next = this.waiting[0]!
      if (!held && next.settles()) {
        this.waiting.shift()
        continue
      }
      held = true
      if (performance.now() < next.giveUpAt) {
        setTimeout(() => this.tryWaiting(), PAUSE_MS)
        return
      }
      this.waiting.shift()
      next.reject(this.refusal)
    }
  }
}

function read<T>(db: Database, work: () => Work<T>): T {
  const steps = work()
  return reading(() => finish(db, steps, steps.next()))
}

function finish<T>(db: Database, steps: Work<T>, next: IteratorResult<Step, T>): T {
  while (!next.done) next = steps.next(perform(db, next.value))
  return next.value
}

function perform(db: Database, step: Step): unknown {
  if ('lock' in step) return undefined
  const statement = 'rows' in step ? step.rows : step.changes
  const query = db.query(statement.text('sqlite'))
  const values = statement.values as SQLQueryBindings[]
  if (!('rows' in step)) return query.run(...values).changes
  // A statement is always read the same way where it is written, so the cached one keeps its setting.
  if (step.exact) query.safeIntegers(true)
  return query.all(...values)
}
