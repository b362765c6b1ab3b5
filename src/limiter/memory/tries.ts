/**
 * Tries counted in this process (Prefer: fail=N), bounded so a client making up Idempotency-Keys cannot
 * grow memory or push out another key's counts. Also the local fallback of a shared store that is away.
 */
import { type TryStore, TriesFullError, TRIES_PER_KEY } from '../backend'

/** Try counts held at once, all keys together; beyond, a new id is refused (TriesFullError). */
const TRIES_KEPT = 10_000
/** Least time between two sweeps of expired try counts while they are at their bound. */
const TRIES_SWEEP_MS = 1_000

export class MemoryTryStore implements TryStore {
  /** Try counts by group, then by id, oldest first; `held` counts them all. */
  private readonly tries = new Map<string, Map<string, { count: number; firstAt: number }>>()
  private held = 0
  /** While the counts are at their bound: when expired ones may next be swept, and when the oldest expires. */
  private nextSweep = 0
  private oldestExpires = 0

  /**
   * At most TRIES_PER_KEY counts per group (a full group forgets its own oldest) and TRIES_KEPT in all
   * (past it a new id is refused, TriesFullError), each forgotten `keepMs` after its first try.
   */
  countTry(group: string, tryId: string, keepMs: number, now: number = Date.now()): number {
    const counts = this.tries.get(group)
    let entry = counts?.get(tryId)
    if (entry && now - entry.firstAt >= keepMs) {
      this.forget(group, tryId)
      entry = undefined
    }
    if (!entry) {
      if (counts && counts.size >= TRIES_PER_KEY) this.forget(group, counts.keys().next().value!)
      else if (this.held >= TRIES_KEPT && !this.sweptRoom(keepMs, now))
        throw new TriesFullError(Math.max(1, Math.ceil((this.oldestExpires - now) / 1000)))
      entry = { count: 0, firstAt: now }
      let held = this.tries.get(group)
      if (!held) this.tries.set(group, (held = new Map()))
      held.set(tryId, entry)
      this.held++
    }
    return ++entry.count
  }

  private forget(group: string, tryId: string): void {
    const counts = this.tries.get(group)!
    counts.delete(tryId)
    this.held--
    if (counts.size === 0) this.tries.delete(group)
  }

  /**
   * Forgets expired counts (each group's are oldest first), at most once a TRIES_SWEEP_MS, and notes when
   * the oldest left expires; whether there is room now.
   */
  private sweptRoom(keepMs: number, now: number): boolean {
    if (now < this.nextSweep) return false
    this.nextSweep = now + TRIES_SWEEP_MS
    let oldest = Infinity
    for (const [group, counts] of this.tries) {
      for (const [tryId, entry] of counts) {
        if (now - entry.firstAt < keepMs) {
          oldest = Math.min(oldest, entry.firstAt)
          break
        }
        this.forget(group, tryId)
      }
    }
    this.oldestExpires = oldest + keepMs
    return this.held < TRIES_KEPT
  }
}
