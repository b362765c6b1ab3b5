/**
 * The scenarios' try counts (Prefer: fail=N) over a TryStore: in the shared store when there is one, in
 * this process's while it does not answer and the fallback is local, like the policy's decisions.
 */
import { LimiterUnavailableError, type TryStore } from './backend'
import type { MemoryTryStore } from './memory/tries'

export class TryCounter {
  constructor(
    private readonly store: TryStore,
    private readonly local: MemoryTryStore | null,
    private readonly now?: () => number,
  ) {}

  /** See TryStore.countTry; rejects with LimiterUnavailableError when the store is away and there is no fallback. */
  async countTry(group: string, id: string, keepMs: number): Promise<number> {
    const now = this.now?.()
    try {
      return await this.store.countTry(group, id, keepMs, now)
    } catch (error) {
      if (!this.local || !(error instanceof LimiterUnavailableError)) throw error
      return this.local.countTry(group, id, keepMs, now)
    }
  }
}
