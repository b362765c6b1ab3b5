/**
 * API keys: generated secrets that are stored only as SHA-256 hashes, and the in-memory registry the
 * server checks every request against. Secrets are 256 random bits, so a fast hash is the right tool
 * (a password hash would cost milliseconds per request and add nothing); looking up by the hash of the
 * whole secret means the time taken never depends on how much of a guess was right.
 */
import type { Limits } from '../../limiter/limiter'
import type { ApiKeyRecord, KeyChanges, KeyRepository, MaybePromise, Plan, Storage } from '../../storage/types'

export const PLAN_LIMITS: Record<Exclude<Plan, 'enterprise'>, Limits> = {
  free: { rpm: 60, rpd: 1_000 },
  pro: { rpm: 300, rpd: 10_000 },
  business: { rpm: 1_000, rpd: 100_000 },
}
export const PLANS: Plan[] = ['free', 'pro', 'business', 'enterprise']

const SECRET_PREFIX = 'psk_'

export class KeyInputError extends Error {}

export function hashSecret(secret: string): string {
  return Bun.CryptoHasher.hash('sha256', secret, 'hex')
}

function randomToken(bytes: number): string {
  return Buffer.from(crypto.getRandomValues(new Uint8Array(bytes))).toString('base64url')
}

export interface CreateKeyInput {
  plan: string
  name?: string
  rpm?: number
  rpd?: number
}

export function limitsFor(input: CreateKeyInput): Limits {
  if (!PLANS.includes(input.plan as Plan))
    throw new KeyInputError(`--plan must be one of ${PLANS.join(', ')}, not "${input.plan}"`)
  if (input.plan === 'enterprise') {
    if (input.rpm === undefined || input.rpd === undefined)
      throw new KeyInputError('an enterprise key needs its own limits: --rpm N --rpd N')
    return { rpm: input.rpm, rpd: input.rpd }
  }
  if (input.rpm !== undefined || input.rpd !== undefined)
    throw new KeyInputError('--rpm and --rpd are only for --plan enterprise')
  return PLAN_LIMITS[input.plan as Exclude<Plan, 'enterprise'>]
}

export function checkKeyName(name = ''): string {
  if (name.length > 200 || /[\u0000-\u001f\u007f-\u009f]/.test(name))
    throw new KeyInputError('--name must be at most 200 characters with no control characters')
  return name
}

/** A new key's one-time secret and the record to store (only the secret's hash is kept). */
export function makeKey(input: CreateKeyInput, now: number): { secret: string; record: ApiKeyRecord } {
  const limits = limitsFor(input)
  const name = checkKeyName(input.name)
  const secret = SECRET_PREFIX + randomToken(32)
  const record: ApiKeyRecord = {
    id: `key_${randomToken(9)}`,
    name,
    plan: input.plan as Plan,
    rpm: limits.rpm,
    rpd: limits.rpd,
    secretHash: hashSecret(secret),
    createdAt: now,
    lastUsedAt: null,
    revokedAt: null,
  }
  return { secret, record }
}

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
 * Keys another process (the CLI, another instance) creates or revokes are read from storage's change
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
    const revoked = new Set<string>()
    for (const record of records) {
      if (record.revokedAt !== null) {
        this.byHash.delete(record.secretHash)
        revoked.add(record.id)
        continue
      }
      this.byHash.set(record.secretHash, {
        id: record.id,
        plan: record.plan,
        limits: { rpm: record.rpm, rpd: record.rpd },
        subject: `key:${record.id}`,
      })
    }
    if (revoked.size > 0) for (const [secret, key] of this.verified) if (revoked.has(key.id)) this.verified.delete(secret)
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
