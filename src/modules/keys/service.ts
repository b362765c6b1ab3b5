/**
 * API keys in the server: creating one in storage, and the in-memory registry the server checks every
 * request against. What a key is (its secret, hash and limits) is the domain's (domain/api-key.ts).
 */
import {
  type ActiveKey,
  type ApiKeyRecord,
  hashSecret,
  type KeyLookup,
  makeKey,
  makeSecret,
  mayBeSecret,
  secretsOf,
} from '../../domain/api-key'
import { type CreateKeyInput, limitsFor } from '../../domain/key-input'
import type { Plan } from '../../domain/plans'
import { waitedWhereNothingWaits } from '../../domain/at-once'
import {
  type KeyChanges,
  type KeyRepository,
  type MaybePromise,
  type Storage,
  StorageDamagedError,
  StorageUnavailableError,
} from '../../domain/repositories'
import { keySubject } from '../../domain/subject'

/** Creates and stores a key (expiring at `expiresAt`, or never); returns its one-time secret with the stored record. */
export async function createKey(
  keys: KeyRepository,
  input: CreateKeyInput,
  now: number,
  expiresAt: number | null = null,
): Promise<{ secret: string; record: ApiKeyRecord }> {
  const made = makeKey(input, now, expiresAt)
  await keys.insert(made.record)
  return made
}

/**
 * Gives a key a new one-time secret; the one it had keeps working `overlapMs` more (0: it ends now), and
 * one kept from an earlier roll ends at once. Null when there is no such key, or it is revoked.
 */
export async function rollKey(
  keys: KeyRepository,
  id: string,
  overlapMs: number,
  now: number,
): Promise<{ secret: string; previousEndsAt: number } | null> {
  const { secret, hash } = makeSecret()
  const previousEndsAt = now + overlapMs
  return (await keys.roll(id, hash, now, previousEndsAt)) ? { secret, previousEndsAt } : null
}

/**
 * Gives a key another plan, with the plan's limits (an enterprise key's own: rpm and rpd); a running
 * server applies it at its next poll. False when there is no such key, or it is revoked.
 */
export async function setKeyPlan(keys: KeyRepository, id: string, input: CreateKeyInput): Promise<boolean> {
  return keys.setPlan(id, input.plan as Plan, limitsFor(input))
}
/** Catch-up reads for unknown tokens begin at most this often (see KeyRegistry.findLate). */
const CATCH_UP_GAP_MS = 10
const MAX_REMEMBERED_MISSES = 10_000

/**
 * The keys the server accepts, by secret hash, in memory so the gate never waits for storage. Other
 * processes' changes are read by change number at each poll, and only those: they take effect within a
 * second, at a cost that does not grow with the number of keys.
 */
export class KeyRegistry implements KeyLookup {
  private byHash = new Map<string, ActiveKey>()
  /** The secret hashes each key is found by: one, or two while the secret a roll replaced is kept. */
  private readonly hashesOf = new Map<string, string[]>()
  /** Secrets found valid, to skip hashing on the hot path; only hits, so wrong guesses learn nothing from it. */
  private verified = new Map<string, ActiveKey>()
  private readonly lastUsed = new Map<string, number>()
  /**
   * Tokens a read begun after they arrived found to be no key, so repeating one costs neither a hash
   * nor a read. Forgotten whenever the registry gains a key, so none can hide a new key.
   */
  private misses = new Set<string>()
  /** The look-ups under way, by token: at most one per token at a time. */
  private readonly lookups = new Map<string, { read: Promise<void>; lookup: Promise<ActiveKey | undefined> }>()
  /** The catch-up read misses are waiting for, not begun yet; and when the last one began. */
  private nextCatchUp: Promise<void> | null = null
  private catchUpRunning: Promise<void> | null = null
  private lastCatchUpAt = -Infinity
  /** The newest change number applied; -1 before the first load. */
  private applied = -1

  /** Empty until the first reload (which the server's start makes: jobs.ts). */
  constructor(private readonly storage: Storage) {}

  get answersAtOnce(): boolean {
    return this.storage.answersAtOnce
  }

  /** The keys in use (not revoked; expired ones included). */
  get size(): number {
    return this.hashesOf.size
  }

  /**
   * Applies the key changes since the last load (the first reads every key). A read another load overtook
   * is dropped and read again from where that one ended, so an older read never undoes a newer one.
   */
  async reload(): Promise<void> {
    const from = this.applied
    const changes = await this.storage.keys.changesSince(from)
    if (from !== this.applied) return this.reload()
    this.apply(changes)
  }

  private apply({ records, last }: KeyChanges): void {
    // A key revoked, rolled or given another plan or expiry must not be found with what it was before; a
    // key added, or a secret rolled in, may be a token remembered as no key.
    const changed = new Set(records.map((record) => record.id))
    if (records.some((record) => record.revokedAt === null)) this.misses.clear()
    for (const record of records) {
      for (const hash of this.hashesOf.get(record.id) ?? []) this.byHash.delete(hash)
      this.hashesOf.delete(record.id)
      if (record.revokedAt !== null) continue
      const key = { id: record.id, plan: record.plan, limits: { rpm: record.rpm, rpd: record.rpd }, subject: keySubject(record.id) }
      const secrets = secretsOf(record)
      for (const secret of secrets) this.byHash.set(secret.secretHash, { ...key, ...secret })
      this.hashesOf.set(
        record.id,
        secrets.map((secret) => secret.secretHash),
      )
    }
    if (changed.size > 0) for (const [secret, key] of this.verified) if (changed.has(key.id)) this.verified.delete(secret)
    this.applied = last
  }

  find(secret: string): ActiveKey | undefined {
    const known = this.verified.get(secret)
    if (known) return known
    if (this.misses.has(secret) || !mayBeSecret(secret)) return undefined
    const key = this.byHash.get(hashSecret(secret))
    if (key && this.verified.size < this.byHash.size) this.verified.set(secret, key)
    return key
  }

  /**
   * See KeyLookup.findLate: the read begins after the call. A token that cannot be a secret (its shape,
   * or its checksum) is no key without a read or a note. The data file's changes are read then and
   * there (one read of the keys changed since, about 4 µs: nothing to wait for); elsewhere misses share reads, at
   * most one per CATCH_UP_GAP_MS, so invented keys do not flood storage. A token still unknown is remembered.
   */
  findLate(secret: string): ActiveKey | undefined | Promise<ActiveKey | undefined> {
    if (this.misses.has(secret) || !mayBeSecret(secret)) return undefined
    if (this.answersAtOnce) return this.readNow(secret)
    // Requests carrying the same token (a new key's first burst) share its look-up while that look-up's
    // read has not begun; a later one waits for the next read, which a key made meanwhile is in.
    const read = this.catchUp()
    const pending = this.lookups.get(secret)
    if (pending?.read === read) return pending.lookup
    const lookup = read.then(
      () => this.foundAfterRead(secret),
      // Storage does not answer, or its file is damaged: whether the token is a key cannot be known, so it
      // is not called unknown (a 503, as for any read storage cannot give); any other failure refuses it as unknown.
      (error) => this.unreadable(error),
    )
    if (this.lookups.size < MAX_REMEMBERED_MISSES) {
      const entry = { read, lookup }
      this.lookups.set(secret, entry)
      void lookup.finally(() => this.lookups.get(secret) === entry && this.lookups.delete(secret)).catch(() => {})
    }
    return lookup
  }

  /** The secret's key, its changes read at once (the data file); see findLate. */
  private readNow(secret: string): ActiveKey | undefined {
    let changes: MaybePromise<KeyChanges>
    try {
      changes = this.storage.keys.changesSince(this.applied)
    } catch (error) {
      return this.unreadable(error)
    }
    if (changes instanceof Promise) throw waitedWhereNothingWaits('the key look-up', changes)
    this.apply(changes)
    return this.foundAfterRead(secret)
  }

  private foundAfterRead(secret: string): ActiveKey | undefined {
    const key = this.find(secret)
    if (!key) this.rememberMiss(secret)
    return key
  }

  private unreadable(error: unknown): undefined {
    if (error instanceof StorageUnavailableError || error instanceof StorageDamagedError) throw error
    return undefined
  }

  private rememberMiss(secret: string): void {
    if (this.misses.size >= MAX_REMEMBERED_MISSES) this.misses.clear()
    this.misses.add(secret)
  }

  /** The next catch-up read: begins after the one running, and CATCH_UP_GAP_MS after the last began. */
  private catchUp(): Promise<void> {
    return (this.nextCatchUp ??= this.beginCatchUp())
  }

  private async beginCatchUp(): Promise<void> {
    await this.catchUpRunning?.catch(() => {})
    const wait = this.lastCatchUpAt + CATCH_UP_GAP_MS - performance.now()
    if (wait > 0) await Bun.sleep(wait)
    this.nextCatchUp = null
    this.lastCatchUpAt = performance.now()
    const running = this.reload()
    this.catchUpRunning = running
    try {
      await running
    } finally {
      if (this.catchUpRunning === running) this.catchUpRunning = null
    }
  }

  markUsed(key: ActiveKey, now: number): void {
    this.lastUsed.set(key.secretHash, now)
  }

  /** Writes the last-used times gathered since the previous call, by secret; kept for the next call if it fails. */
  async flushLastUsed(): Promise<void> {
    if (this.lastUsed.size === 0) return
    const batch = new Map(this.lastUsed)
    await this.storage.keys.recordLastUsed(batch)
    for (const [id, at] of batch) if (this.lastUsed.get(id) === at) this.lastUsed.delete(id)
  }
}
