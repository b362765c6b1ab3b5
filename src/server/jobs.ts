/**
 * A server's background work, from listening until before storage closes: the poll for other processes'
 * changes, rate-limit state saves, usage writes, purges and prunes, and with Redis a watch that it answers
 * (so an idle instance logs an outage as a busy one does). A turn still running when the next comes is skipped.
 */
import type { PetstoreApp } from './app'
import { IDEMPOTENCY_TTL_MS } from '../domain/idempotency'
import type { DataFileWatch, MaybePromise, Storage } from '../domain/repositories'
import { DAY_MS, HOUR_MS, MINUTE_MS } from '../domain/time'
import { USAGE_WRITE_MS } from '../domain/usage'
import { keySubject } from '../domain/subject'
import { REFUSED_SIGN_IN_RETENTION_MS, SESSION_IDLE_MS, THROTTLE_WINDOW_MS } from '../domain/operators'
import type { UsageRetention } from '../config'

const KEY_POLL_MS = 250
const STATE_SAVE_MS = 5_000
const PURGE_MS = HOUR_MS
const USAGE_PRUNE_MS = 10 * MINUTE_MS
/** Idle sessions, sign-in attempts out of the throttle's window and old refused sign-ins go this often. */
const OPERATORS_PRUNE_MS = MINUTE_MS
/** How often an instance asks whether the shared rate limiter (Redis) answers, requests or none. */
const LIMITER_WATCH_MS = 500

export interface JobOptions {
  now: () => number
  warn: (message: string) => void
  dataFile?: DataFileWatch
  /** The data file's lock, looked at with every poll (StorageBackend.keepLock). */
  keepLock?: () => 'kept' | 'taken again' | 'lost'
  usageRetention: UsageRetention
  /** Called once when a read-only data file changes under the server (see SqliteStorage.changedOnDisk). */
  onDataFileChanged?: () => void
}

export class Jobs {
  private readonly timers: ReturnType<typeof setInterval>[] = []
  private petsGeneration = 0
  private pollFailing = false
  private lockLost = false
  private lockUnmade = false
  private usageFailing = false
  /** Usage work under way: writes and prunes run one after the other, the stop's write after the rest. */
  private usageWork: Promise<void> = Promise.resolve()
  /** Limit resets taken from storage and not yet applied by the limiter (Redis may be away). */
  private readonly unappliedResets = new Map<string, number | null>()

  constructor(
    private readonly petstore: PetstoreApp,
    private readonly storage: Storage,
    private readonly options: JobOptions,
  ) {}

  /**
   * Reads what the poll compares against: the keys, and the pets' generation. Before listening. In
   * process, limit resets asked for while no server ran are applied here, so the state the last server
   * left never answers a request after them (with Redis, the first poll applies them there).
   */
  async load(): Promise<void> {
    await Promise.all([
      this.petstore.keys.reload(),
      Promise.resolve(this.storage.pets.generation()).then((generation) => {
        this.petsGeneration = generation
      }),
    ])
    if (!this.petstore.limiter.shared) await this.applyLimitResets()
  }

  start(): void {
    const { storage, options } = this
    let watchingFile = options.dataFile !== undefined
    const onDataFileChanged =
      options.onDataFileChanged ?? (() => options.warn('the read-only data file changed on disk; restart to read it again'))
    this.every(KEY_POLL_MS, async () => {
      if (watchingFile && options.dataFile!.changedOnDisk()) {
        watchingFile = false
        onDataFileChanged()
      }
      this.keepLock()
      await this.pollChanges()
    })
    this.every(STATE_SAVE_MS, () => this.saveState())
    if (this.petstore.limiter.shared) this.every(LIMITER_WATCH_MS, () => this.petstore.limiter.watch())
    this.every(USAGE_WRITE_MS, () => this.afterUsageWork(() => this.writeUsage()))
    this.every(USAGE_PRUNE_MS, () => this.afterUsageWork(() => this.pruneUsage()))
    // Once at the start as well: a server restarted more often than the prune runs still prunes.
    void this.afterUsageWork(() => this.pruneUsage())
    this.every(OPERATORS_PRUNE_MS, () => this.pruneOperators())
    void this.pruneOperators()
    this.every(PURGE_MS, () =>
      this.attempt('purge idempotency records', () => storage.pets.purgeIdempotency(options.now() - IDEMPOTENCY_TTL_MS)),
    )
  }

  /**
   * The data file's lock file deleted under the server would let a second one start: it is taken again,
   * or, held by another process already, the server says so and answers as on a storage fault (readiness
   * and creates 503) until it is restarted. Each said once.
   */
  private keepLock(): void {
    const { keepLock, warn } = this.options
    if (!keepLock || this.lockLost) return
    let kept: ReturnType<typeof keepLock>
    try {
      kept = keepLock()
    } catch (error) {
      if (!this.lockUnmade) warn(`the data file's lock file was deleted and cannot be made again: ${(error as Error).message}`)
      this.lockUnmade = true
      return
    }
    this.lockUnmade = false
    if (kept === 'taken again')
      warn("the data file's lock file was deleted while this server ran: made and taken again (never delete it while a server runs)")
    if (kept !== 'lost') return
    this.lockLost = true
    this.petstore.fault.note(
      "the data file's lock file was replaced while this server ran by one it cannot take (another server's, or not a lock file): two servers may serve the file",
    )
  }

  /** Stops the timers and writes what is still only in memory; false when some of it could not be written. */
  async stop(): Promise<boolean> {
    for (const timer of this.timers.splice(0)) clearInterval(timer)
    const [state, usage] = await Promise.all([this.saveState(true), this.afterUsageWork(() => this.writeUsage(true))])
    return state && usage
  }

  /**
   * A step that writes, skipped when storage cannot be written; a failure is said in one line and tried
   * again next turn (after the stop's `last` one, there is none). False when it failed.
   */
  private async attempt(what: string, step: () => MaybePromise<unknown>, last = false): Promise<boolean> {
    if (!this.storage.writable) return true
    try {
      await step()
      return true
    } catch (error) {
      this.options.warn(`could not ${what}${last ? ' before stopping' : ''}: ${(error as Error).message}`)
      return false
    }
  }

  private every(ms: number, task: () => MaybePromise<unknown>): void {
    let running = false
    const timer = setInterval(async () => {
      if (running) return
      running = true
      try {
        await task()
      } finally {
        running = false
      }
    }, ms)
    timer.unref()
    this.timers.push(timer)
  }

  /** Changes other processes made: keys created or revoked, pets seeded or reset, limits reset. */
  private async pollChanges(): Promise<void> {
    const { petstore, storage, options } = this
    petstore.fault.current()
    try {
      await petstore.keys.reload()
      const generation = await storage.pets.generation()
      if (generation !== this.petsGeneration) petstore.pets.dropCaches()
      this.petsGeneration = generation
      await this.applyLimitResets()
      if (this.pollFailing) options.warn('storage answers the change poll again')
      this.pollFailing = false
    } catch (error) {
      // Tried again at the next poll; said once, not four times a second.
      if (!this.pollFailing) options.warn(`could not check storage for changes made by other processes: ${(error as Error).message}`)
      this.pollFailing = true
    }
  }

  private async applyLimitResets(): Promise<void> {
    const { petstore, storage } = this
    if (storage.writable) for (const { keyId, seq } of await storage.keys.takeLimitResets()) this.unappliedResets.set(keyId, seq)
    // A reset is kept until the limiter has applied it (Redis may be away right now).
    for (const [id, seq] of this.unappliedResets) {
      await petstore.limiter.forget(keySubject(id), seq ?? undefined)
      this.unappliedResets.delete(id)
    }
  }

  /** False when a save failed; `last`: the stop's. */
  private async saveState(last = false): Promise<boolean> {
    const { petstore, storage } = this
    // Two saves, each reported as itself: one failing does not keep the other from being tried. Given
    // together, so storage that waits for a lock waits once for both (a stop is not held twice as long).
    const saved = await Promise.all([
      this.attempt(
        'save rate-limit state',
        async () => {
          const buckets = petstore.limiter.unsavedDayBuckets()
          await storage.limiterState.save(buckets)
          petstore.limiter.markSaved(buckets)
        },
        last,
      ),
      this.attempt("save the keys' last-used times", () => petstore.keys.flushLastUsed(), last),
    ])
    return saved.every(Boolean)
  }

  private afterUsageWork<T>(task: () => Promise<T>): Promise<T> {
    const work = this.usageWork.then(task)
    this.usageWork = work.then(() => {})
    return work
  }

  /**
   * Adds the usage counted since the last write to storage; what it does not take is tried again next
   * time (after the stop's `last` write, there is none: false).
   */
  private async writeUsage(last = false): Promise<boolean> {
    const { usage } = this.petstore
    if (!usage) return true
    const rows = usage.take()
    if (rows.length === 0) return true
    try {
      await this.storage.usage.add(rows)
      if (this.usageFailing) this.options.warn('storage takes the usage counts again')
      this.usageFailing = false
      return true
    } catch (error) {
      usage.giveBack(rows)
      const message = (error as Error).message
      if (last) this.options.warn(`could not write the last usage counts before stopping: ${message}`)
      else if (!this.usageFailing) this.options.warn(`could not write the usage counts (kept, tried again): ${message}`)
      this.usageFailing = true
      return false
    }
  }

  /** Every instance may do it; it is the same delete. */
  private async pruneOperators(): Promise<void> {
    const { storage, options } = this
    const now = options.now()
    await this.attempt('prune ended sessions and old sign-in attempts', () =>
      storage.operators.prune(now - SESSION_IDLE_MS, now - THROTTLE_WINDOW_MS, now - REFUSED_SIGN_IN_RETENTION_MS),
    )
  }

  /** Drops usage older than its retention: minutes, then hours. Every instance may do it; it is the same delete. */
  private async pruneUsage(): Promise<void> {
    const { storage, options } = this
    const now = options.now()
    await this.attempt('prune old usage', async () => {
      await storage.usage.prune('minute', now - options.usageRetention.minuteDays * DAY_MS)
      await storage.usage.prune('hour', now - options.usageRetention.hourDays * DAY_MS)
    })
  }
}
