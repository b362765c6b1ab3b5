/**
 * API keys in the server: creating one in storage, and the in-memory registry the server checks every
 * request against. What a key is (its secret, hash and limits) is the domain's (domain/api-key.ts).
 */
import { type ApiKeyRecord, type CreateKeyInput, hashSecret, makeKey } from '../../domain/api-key'
import type { Limits, Plan } from '../../domain/plans'
import type { KeyChanges, KeyRepository, MaybePromise, Storage } from '../../domain/repositories'

/** Creates and stores a key; returns its one-time secret with the stored record. */
export async function createKey(
  keys: KeyRepository,
  input: CreateKeyInput,
  now: number,
): Promise<{ secret: string; record: ApiKeyRecord }> {
  const made = makeKey(input, now)
  await keys.insert(made.record)
  return made
}

export interface ActiveKey {
  id: string
  plan: Plan
  limits: Limits
  /** The limiter's subject id for this key. */
  subject: string
}

/**
 * The keys the server accepts, by secret hash, held in memory so the gate never waits for storage.
 * Keys another process (the CLI, another instance) creates, revokes or moves to another plan are read from storage's change
 * numbers at each poll, and only those: the change takes effect everywhere in under a second, at a
 * cost that does not grow with the number of keys.
 */
export class KeyRegistry {
  private byHash = new Map<string, ActiveKey>()
  /**
   * Secrets already found valid, to skip hashing on the hot path. Only hits are kept (at most one entry
   * per active key), and a miss is always answered by the hash, so wrong guesses learn nothing from it.
   */
  private verified = new Map<string, ActiveKey>()
  private readonly lastUsed = new Map<string, number>()
  /** The newest change number applied; -1 before the first load. */
  private applied = -1

  /** Empty until the first reload (which the server's start makes: jobs.ts). */
  constructor(private readonly storage: Storage) {}

  get size(): number {
    return this.byHash.size
  }

  /** Applies the keys created or revoked since the last load; the first load reads every key. */
  reload(): MaybePromise<void> {
    const from = this.applied
    const changes = this.storage.keys.changesSince(from)
    return changes instanceof Promise ? changes.then((read) => this.apply(from, read)) : this.apply(from, changes)
  }

  /**
   * A read that another load overtook (two loads in flight) is dropped and read again from where that
   * one ended, so an older read never undoes a newer one (a revoked key coming back).
   */
  private apply(from: number, { records, last }: KeyChanges): MaybePromise<void> {
    if (from !== this.applied) return this.reload()
    // A key revoked or moved to another plan must not be found with what it was before.
    const changed = new Set<string>()
    for (const record of records) {
      changed.add(record.id)
      if (record.revokedAt !== null) {
        this.byHash.delete(record.secretHash)
        continue
      }
      this.byHash.set(record.secretHash, {
        id: record.id,
        plan: record.plan,
        limits: { rpm: record.rpm, rpd: record.rpd },
        subject: `key:${record.id}`,
      })
    }
    if (changed.size > 0) for (const [secret, key] of this.verified) if (changed.has(key.id)) this.verified.delete(secret)
    this.applied = last
  }

  find(secret: string): ActiveKey | undefined {
    const known = this.verified.get(secret)
    if (known) return known
    const key = this.byHash.get(hashSecret(secret))
    if (key && this.verified.size < this.byHash.size) this.verified.set(secret, key)
    return key
  }

  markUsed(key: ActiveKey, now: number): void {
    this.lastUsed.set(key.id, now)
  }

  /** Writes the last-used times gathered since the previous call; kept for the next call if it fails. */
  async flushLastUsed(): Promise<void> {
    if (this.lastUsed.size === 0) return
    const batch = new Map(this.lastUsed)
    await this.storage.keys.recordLastUsed(batch)
    for (const [id, at] of batch) if (this.lastUsed.get(id) === at) this.lastUsed.delete(id)
  }
}
